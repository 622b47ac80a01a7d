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
