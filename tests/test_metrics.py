"""torchneuron.metrics counters against known numbers; out-of-memory errors."""
import warnings

import jax
import pytest
import torch

from torchneuron import metrics

# An op with only a CPU kernel: on `neuron` it runs through the CPU fallback.
_lib = torch.library.Library("tnx_metrics", "DEF")
_lib.define("twice(Tensor x) -> Tensor")
_lib.impl("twice", lambda x: x * 2, "CPU")


def _three_ops():
    a = torch.arange(6.0).to("neuron")  # 24 bytes host -> device
    c = (a * 2) + a
    return c.sum().item()  # 4 bytes device -> host


def test_ops_transfers_and_eager_cache_counts():
    _three_ops()  # compiles the three executables
    metrics.reset()
    assert _three_ops() == 45.0
    c = metrics.counters()
    assert c["ops_executed"] == 3
    assert c["eager_cache_hits"] == 3 and c["eager_cache_misses"] == 0
    assert c["bytes_host_to_device"] == 24
    assert c["bytes_device_to_host"] == 4

    x = torch.ones(17, 19, device="neuron")  # a shape no other test uses: a cache miss
    metrics.reset()
    for _ in range(4):
        x.mul_(2.5)
    torch.neuron.synchronize()
    c, t = metrics.counters(), metrics.times()
    assert c["ops_executed"] == 4
    assert c["eager_executables_compiled"] == 1
    assert c["eager_cache_misses"] == 1 and c["eager_cache_hits"] == 3
    assert c["synchronizations"] == 1
    assert t["eager_compile_seconds"] > 0


def test_graphs_fallbacks_report_and_reset():
    fn = torch.compile(lambda a: torch.cos(a) * 2 - 1, backend="neuron")
    x = torch.randn(11, 3, device="neuron")
    metrics.reset()
    fn(x)
    fn(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.ops.tnx_metrics.twice(x)
        torch.ops.tnx_metrics.twice(x)
    c = metrics.counters()
    assert c["graphs_compiled"] == 1
    assert c["graph_executions"] == 2
    assert c.get("graph_cache_hits", 0) + c.get("graph_cache_misses", 0) == 1
    assert c["fallback::tnx_metrics.twice.default"] == 2
    assert metrics.times()["graph_compile_seconds"] > 0

    text = metrics.report()
    for name in ("ops_executed", "graphs_compiled", "graph_executions", "fallback::tnx_metrics.twice.default",
                 "bytes_host_to_device", "bytes_device_to_host", "graph_compile_seconds"):
        assert name in text
    metrics.reset()
    c = metrics.counters()
    assert c["ops_executed"] == 0
    assert not any(k.startswith("fallback::") for k in c)
    assert c.get("graphs_compiled", 0) == 0 and not metrics.times()


def test_out_of_memory_raises_and_the_device_keeps_working():
    from torchneuron.runtime import storage

    total = torch.neuron.get_device_properties().total_memory
    assert total > 0
    before = torch.neuron.memory_stats()
    # Storages the device can never hold fail at the call, as on CUDA: a factory, empty,
    # and an op's result.
    with pytest.raises(torch.OutOfMemoryError, match="neuron out of memory"):
        torch.zeros(2**40, device="neuron")
    with pytest.raises(torch.OutOfMemoryError, match="tried to allocate"):
        torch.empty(2**48, dtype=torch.uint8, device="neuron")
    small = torch.ones(2**24, device="neuron")
    with pytest.raises(torch.OutOfMemoryError):
        small[:, None] * small[None, :]
    # PJRT's own failed allocation (an execution or a buffer) becomes the same error.
    with pytest.raises(torch.OutOfMemoryError, match="RESOURCE_EXHAUSTED"):
        storage.raise_if_out_of_memory(jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: 4 TiB"), 0)
    after = torch.neuron.memory_stats()
    assert after["num_ooms"] == before["num_ooms"] + 4
    # Nothing that failed is counted as allocated.
    assert after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"] + small.nbytes
    assert after["allocated_bytes.all.peak"] < total
    free, held = torch.neuron.mem_get_info()
    assert held == total and free == total - torch.neuron.memory_allocated()
    small = torch.ones(1, device="neuron")
    x = torch.arange(4.0, device="neuron")
    x.add_(1)
    torch.testing.assert_close((x * small).cpu(), torch.arange(1.0, 5.0))
    torch.neuron.synchronize()
