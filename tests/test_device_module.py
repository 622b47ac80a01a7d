"""`torch.neuron` (the CUDA-style device module), torch.accelerator on `neuron`,
Tensor/Module helpers, and the `torch_neuronx` compat module."""
import importlib
import importlib.util
import subprocess
import sys

import jax
import pytest
import torch

import torchneuron
from torchneuron.runtime import pjrt

N = torch.neuron


def test_registration():
    assert torch.get_device_module("neuron") is N
    assert torch._C._get_privateuse1_backend_name() == "neuron"
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.is_available()
    assert torch.accelerator.device_count() == N.device_count()


def test_availability_and_count():
    assert N.is_available()
    assert N.device_count() == len(pjrt.devices()) >= 1
    assert N.is_initialized()


def test_current_device_and_set_device():
    assert N.current_device() == 0
    N.set_device(0)
    N.set_device("neuron:0")
    N.set_device(torch.device("neuron", 0))
    assert N.current_device() == 0 == torch.accelerator.current_device_index()
    torch.accelerator.set_device_index(0)
    with pytest.raises(ValueError):
        N.set_device("cpu")


def test_device_context_manager_restores():
    last = N.device_count() - 1
    with N.device(last):
        assert N.current_device() == last
        assert torch.empty(1, device="neuron").device.index == last
        with N.device(0):
            assert N.current_device() == 0
        assert N.current_device() == last
    assert N.current_device() == 0
    with N.device(None):
        assert N.current_device() == 0


def test_synchronize():
    x = torch.ones(64, device="neuron")
    y = x * 3
    N.synchronize()
    N.synchronize(0)
    torch.accelerator.synchronize()
    assert torch.equal(y.cpu(), torch.full((64,), 3.0))


def test_manual_seed_reproduces_draws():
    N.manual_seed(123)
    a = torch.randn(5, device="neuron")
    b = torch.randn(5, device="neuron")
    N.manual_seed(123)
    assert torch.equal(torch.randn(5, device="neuron").cpu(), a.cpu())
    assert not torch.equal(a.cpu(), b.cpu())
    assert N.initial_seed() == 123
    N.manual_seed_all(7)
    assert N.initial_seed() == 7
    torch.manual_seed(11)  # seeds every device, as with CUDA
    assert N.initial_seed() == 11
    c = torch.rand(4, device="neuron")
    torch.manual_seed(11)
    assert torch.equal(torch.rand(4, device="neuron").cpu(), c.cpu())


def test_seed_is_nondeterministic():
    N.seed()
    first = N.initial_seed()
    N.seed()
    assert N.initial_seed() != first
    N.seed_all()


def test_rng_state_round_trip():
    N.manual_seed(5)
    torch.randn(3, device="neuron")
    state = N.get_rng_state()
    assert state.device.type == "cpu" and state.dtype == torch.uint8
    a = torch.randn(4, device="neuron")
    b = torch.rand(2, device="neuron")
    N.set_rng_state(state)
    assert torch.equal(torch.randn(4, device="neuron").cpu(), a.cpu())
    assert torch.equal(torch.rand(2, device="neuron").cpu(), b.cpu())
    states = N.get_rng_state_all()
    assert len(states) == N.device_count()
    N.set_rng_state_all(states)
    with pytest.raises(RuntimeError):
        N.set_rng_state(torch.zeros(3, dtype=torch.uint8))


def test_fork_rng_and_explicit_generators():
    N.manual_seed(9)
    with torch.random.fork_rng(device_type="neuron"):
        torch.randn(3, device="neuron")
    after_fork = torch.randn(3, device="neuron")
    N.manual_seed(9)
    assert torch.equal(torch.randn(3, device="neuron").cpu(), after_fork.cpu())
    g1 = torch.Generator("neuron").manual_seed(3)
    g2 = torch.Generator("neuron").manual_seed(3)
    assert g1.device == torch.device("neuron", 0)
    assert torch.equal(torch.randn(4, device="neuron", generator=g1).cpu(),
                       torch.randn(4, device="neuron", generator=g2).cpu())


def test_memory_stats_track_allocations():
    import gc

    gc.collect()
    N.reset_peak_memory_stats()
    before = N.memory_allocated()
    stats = N.memory_stats()
    x = torch.empty(256 * 1024, device="neuron")  # 1 MiB
    assert N.memory_allocated() - before == 2**20
    assert N.memory_allocated(0) == N.memory_allocated("neuron:0") == torch.accelerator.memory_allocated()
    assert N.max_memory_allocated() - before == 2**20
    assert N.memory_reserved() == N.memory_allocated()
    after = N.memory_stats()
    assert after["allocation.all.current"] == stats["allocation.all.current"] + 1
    assert after["allocated_bytes.all.allocated"] - stats["allocated_bytes.all.allocated"] == 2**20
    del x
    gc.collect()
    assert N.memory_allocated() == before
    assert N.max_memory_allocated() - before == 2**20  # the peak remains
    assert N.memory_stats()["allocated_bytes.all.freed"] - stats["allocated_bytes.all.freed"] == 2**20
    N.reset_peak_memory_stats()
    assert N.max_memory_allocated() == before == torch.accelerator.max_memory_allocated()
    N.reset_accumulated_memory_stats()
    assert N.memory_stats()["allocated_bytes.all.allocated"] == 0
    assert N.max_memory_reserved() == N.max_memory_allocated()
    N.empty_cache()
    torch.accelerator.empty_cache()
    with pytest.raises(RuntimeError, match="invalid device"):
        N.memory_allocated(N.device_count())


def test_device_properties():
    dev = pjrt.device(0)
    props = N.get_device_properties(0)
    assert props.name == dev.device_kind == N.get_device_name() == N.get_device_name(0)
    assert props.platform == dev.platform == jax.devices()[0].platform
    assert isinstance(props.total_memory, int) and props.total_memory >= 0
    assert N.is_bf16_supported()
    assert torch.bfloat16 in N.get_amp_supported_dtype()


def test_streams_and_events():
    s = N.Stream()
    assert s.device == torch.device("neuron", 0)
    assert N.current_stream() is N.default_stream()
    with N.stream(s):
        assert N.current_stream() is s
        start, end = N.Event(enable_timing=True), N.Event(enable_timing=True)
        start.record()
        y = torch.ones(128, device="neuron") * 2
        end.record()
    assert N.current_stream() is N.default_stream()
    end.synchronize()
    assert end.query() and s.query()
    assert start.elapsed_time(end) >= 0
    s.wait_stream(N.default_stream())
    s.wait_event(s.record_event())
    s.synchronize()
    with pytest.raises(RuntimeError, match="recorded"):
        N.Event(enable_timing=True).elapsed_time(end)
    assert torch.equal(y.cpu(), torch.full((128,), 2.0))


def test_torch_stream_and_event_on_neuron():
    s = torch.Stream("neuron")
    assert s.device_index == 0 and s.query()
    s.synchronize()
    a, b = torch.Event("neuron", enable_timing=True), torch.Event("neuron", enable_timing=True)
    a.record(s)
    torch.ones(8, device="neuron").sum()
    b.record(s)
    b.synchronize()
    assert a.elapsed_time(b) >= 0 and b.query()
    assert torch.accelerator.current_stream().device_index == 0


def test_tensor_and_module_helpers():
    t = torch.arange(3.0).neuron()
    assert t.is_neuron and t.device == torch.device("neuron", 0)
    assert not torch.ones(1).is_neuron
    m = torch.nn.Linear(2, 2).neuron()
    assert all(p.is_neuron for p in m.parameters())
    assert m.weight.untyped_storage().is_neuron


def test_torch_neuronx_compat_module():
    assert importlib.util.find_spec("torch_neuronx") is not None
    mod = importlib.import_module("torch_neuronx")
    assert mod.fallback_ops is torchneuron.fallback_ops


def test_a_submodule_imported_first_installs_the_backend():
    # `import torchneuron.eager.executor` before torch: torch's autoload re-enters the
    # package while the submodule is half-imported.
    code = "import torchneuron.eager.executor, torch; print(torch.ones(2, device='neuron').sum().item())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "2.0", proc.stderr[-2000:]
