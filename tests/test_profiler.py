"""`neuron` events in torch.profiler: ops, compiles, transfers, syncs, CPU fallbacks."""
import json
import warnings

import torch
import torch.nn as nn

import torchneuron.profiler

# An op with only a CPU kernel: on `neuron` it runs through the CPU fallback.
_lib = torch.library.Library("tnx_prof", "DEF")
_lib.define("twice(Tensor x) -> Tensor")
_lib.impl("twice", lambda x: x * 2, "CPU")


def _profiled_step(tmp_path):
    """Profiles one small training step plus a compiled function; returns (profile,
    chrome trace events)."""
    # Shapes used nowhere else in the suite, so this process compiles them here.
    model = nn.Sequential(nn.Linear(7, 13), nn.ReLU(), nn.Linear(13, 3)).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(lambda a: torch.sin(a) * 3 + 1, backend="neuron")
    with torch.profiler.profile(record_shapes=True) as prof:
        x = torch.randn(5, 7).to("neuron")
        y = torch.randn(5, 3).to("neuron")
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.ops.tnx_prof.twice(x)
        compiled(x)
        torch.neuron.synchronize()
        loss.item()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        trace = json.load(f)
    return prof, trace["traceEvents"]


def test_training_step_events_in_chrome_trace_and_table(tmp_path):
    prof, events = _profiled_step(tmp_path)
    complete = [e for e in events if e.get("ph") == "X"]
    names = {e["name"] for e in complete}

    def having(prefix):
        found = [e for e in complete if e["name"].startswith(prefix)]
        assert found, f"no {prefix} event in {sorted(n for n in names if n.startswith('neuron'))}"
        assert all(e["dur"] >= 0 for e in found)
        return found

    ops = having("neuron::op::")
    assert "neuron::op::aten::addmm" in names  # the Linear layers' forward
    assert any(e["args"].get("Input Dims") and [5, 7] in e["args"]["Input Dims"] for e in ops)
    having("neuron::compile::")
    having("neuron::compile_graph::")
    having("neuron::graph::")
    having("neuron::host_to_device")
    having("neuron::device_to_host")
    having("neuron::synchronize")
    fallback = having("neuron::cpu_fallback::tnx_prof::twice")
    # The fallback's transfers are nested inside its event (same thread, inside its span).
    start, end = fallback[0]["ts"], fallback[0]["ts"] + fallback[0]["dur"]
    assert any(e["name"] == "neuron::device_to_host" and start <= e["ts"] <= end for e in complete)

    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=200)
    for name in ("neuron::op::aten::addmm", "neuron::synchronize", "neuron::host_to_device",
                 "neuron::cpu_fallback::tnx_prof::twice"):
        assert name in table


def test_nothing_recorded_without_a_profiler():
    assert not torchneuron.profiler.enabled()
    with torchneuron.profiler.record("neuron::unused", [torch.ones(1)]):
        pass  # a no-op context: no profiler session to record into
    x = torch.ones(3, device="neuron")
    torch.testing.assert_close((x + 1).cpu(), torch.full((3,), 2.0))


def test_autograd_profiler_sees_events_too():
    x = torch.ones(4, device="neuron")
    with torch.autograd.profiler.profile() as prof:
        (x * 5).cpu()
    names = {e.name for e in prof.function_events}
    assert "neuron::op::aten::mul.Tensor" in names
    assert "neuron::device_to_host" in names


def _kernels_and_ops(tmp_path, prof):
    path = tmp_path / "device_trace.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    ops = {e["args"]["External id"]: e for e in events
           if e.get("cat") == "user_annotation" or e["name"].startswith("neuron::")
           if "External id" in e.get("args", {})}
    return kernels, ops


def test_device_time_from_the_xla_profiler_is_attached_to_ops_and_graphs(tmp_path):
    a = torch.randn(67, 45, device="neuron")
    b = torch.randn(45, 31, device="neuron")
    compiled = torch.compile(lambda t: torch.tanh(t) * 2 - 1, backend="neuron")
    big = torch.randn(512, 512, device="neuron")
    torch.mm(a, b), compiled(a), compiled(compiled(a))[0, :4].tolist()  # compile outside the window
    torch.neuron.synchronize()
    for _ in range(4):  # queued before the window: none of this is the window's device time
        big = big @ big
    with torch.profiler.profile() as prof:
        for _ in range(3):
            torch.mm(a, b)
        y = compiled(a)
        y[0, :4].tolist()  # a view read: an internal executable nobody dispatched as an op
        compiled(y)
        torch.neuron.synchronize()

    averages = {e.key: e for e in prof.key_averages()}
    mm = averages["neuron::op::aten::mm"]
    assert mm.count == 3 and mm.self_device_time_total > 0
    assert averages["aten::mm"].device_time_total >= mm.self_device_time_total  # inclusive, like CUDA
    graph = [e for k, e in averages.items() if k.startswith("neuron::graph::")]
    assert graph and graph[0].self_device_time_total > 0
    assert "Self NEURON" in prof.key_averages().table(row_limit=5)

    kernels, ops = _kernels_and_ops(tmp_path, prof)
    assert kernels and all(k["args"]["hlo_module"].startswith("jit_") for k in kernels)
    linked = [ops[k["args"]["External id"]] for k in kernels if k["args"].get("External id") in ops]
    assert {op["name"] for op in linked} >= {"neuron::op::aten::mm", graph[0].key}
    for kernel in kernels:
        op = ops.get(kernel["args"].get("External id"))
        module = kernel["args"]["hlo_module"]
        if not module.startswith("jit_neuron_"):
            assert op is None  # internal executables (view reads) belong to no op
            continue
        assert op is not None, f"device kernel {kernel} not linked to the op that dispatched it"
        # Each kernel is charged to the op or graph whose executable it belongs to.
        if op["name"].startswith("neuron::graph::"):
            assert module.startswith("jit_neuron_graph_"), (op["name"], module)
        else:
            assert module.startswith("jit_neuron_aten__mm_"), (op["name"], module)
        # A kernel runs after its op started dispatching it (Kineto and XLA share the
        # wall clock; 1 ms slack for their clock reads).
        assert kernel["ts"] >= op["ts"] - 1000


def test_device_executions_parse_the_xla_profile_on_the_wall_clock():
    import time

    import jax
    import jax.numpy as jnp

    def neuron_test_kernel(x):
        return jnp.sin(x) @ x

    fn = jax.jit(neuron_test_kernel)
    x = jnp.ones((64, 64))
    fn(x).block_until_ready()
    before = time.time_ns()
    torchneuron.profiler._start_device_trace()
    for _ in range(4):
        fn(x).block_until_ready()
    runs = torchneuron.profiler._stop_device_trace()
    after = time.time_ns()
    mine = [r for r in runs if r[0] == "jit_neuron_test_kernel"]
    assert len(mine) == 4
    starts = [r[2][0][1] for r in mine]
    assert starts == sorted(starts)
    for _, device, kernels in mine:
        assert device == 0 and kernels
        for _, start, end in kernels:
            assert before <= start <= end <= after


def test_cpu_only_profile_records_no_device_activity(tmp_path):
    x = torch.randn(9, 9, device="neuron")
    (x @ x).cpu()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        (x @ x).cpu()
    kernels, _ = _kernels_and_ops(tmp_path, prof)
    assert kernels == []
    assert all(e.self_device_time_total == 0 for e in prof.key_averages())


def test_busy_xla_profiler_leaves_the_profile_without_device_time(tmp_path):
    import jax
    import pytest

    x = torch.randn(8, 8, device="neuron")
    (x @ x).cpu()
    jax.profiler.start_trace(str(tmp_path))
    try:
        with pytest.warns(UserWarning, match="no device time"):
            with torch.profiler.profile() as prof:
                (x @ x).cpu()
    finally:
        jax.profiler.stop_trace()
    averages = {e.key: e for e in prof.key_averages()}
    assert averages["neuron::op::aten::mm"].count == 1
    assert all(e.self_device_time_total == 0 for e in averages.values())
