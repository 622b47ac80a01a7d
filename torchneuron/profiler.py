"""`neuron` events in `torch.profiler` traces.

Inside ``torch.profiler.profile(...)`` the backend records, through PyTorch's own
RecordFunction machinery (so they appear in ``prof.key_averages().table()`` and in
``export_chrome_trace``, next to the ``aten::`` events of the dispatcher):

| event | what it covers |
| --- | --- |
| ``neuron::op::<aten op>`` | one eager op on the host: reading buffers, dispatching its executable, wrapping results (input shapes recorded with ``record_shapes=True``) |
| ``neuron::compile::<aten op>`` | an eager cache miss: meta kernel, tracing, lowering, and the first run, where XLA compiles |
| ``neuron::compile_graph::<graph>`` | a torch.compile graph: tracing, lowering, XLA compile or on-disk cache load |
| ``neuron::graph::<graph>`` | one call of a compiled graph |
| ``neuron::host_to_device`` / ``neuron::device_to_host`` | a transfer of tensor values (device->host waits for the device) |
| ``neuron::synchronize`` | ``torch.neuron.synchronize()``: waits for all queued work |
| ``neuron::cpu_fallback::<aten op>`` | an op run on the CPU because it has no lowering |

Dispatch is asynchronous: an op or graph event measures the host's time to dispatch
the work, not the device's time to run it.

Device time. When the profile records ``ProfilerActivity.PrivateUse1`` (the default
when `neuron` is available), the shim's Kineto activity profiler (csrc/profiler.cpp)
runs the PJRT/XLA profiler for the same window. Every kernel XLA measured on the device
(a thunk on XLA:CPU, a GPU kernel on CUDA) becomes a device event named after the HLO
instruction, linked to the ``neuron::op::...`` or ``neuron::graph::...`` event that
dispatched its executable: ``key_averages()`` then has "Self NEURON" and "NEURON total"
columns, and the chrome trace a `neuron` device row. Executions of one executable are
paired with its dispatches in order.

When no profiler is active these helpers cost one C call (``enabled()``) and record
nothing.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import List, Tuple

import torch
from torch._C._profiler import _RecordFunctionFast

#: Whether a `torch.profiler` (or `torch.autograd.profiler`) session is recording.
enabled = torch._C._autograd._profiler_enabled

_OFF = contextlib.nullcontext()


def record(name: str, inputs=None):
    """A context manager recording the event `name` while a profiler is active (a
    no-op context otherwise). `inputs`: a list of the event's arguments, whose
    tensor shapes the profiler records under ``record_shapes=True``."""
    if not enabled():
        return _OFF
    if inputs is None:
        return _RecordFunctionFast(name)
    return _RecordFunctionFast(name, list(inputs))


# ---------------------------------------------------------------- device time
_session = None  # the PJRT/XLA profiler session of the current torch.profiler window


def mark_execution(module: str) -> None:
    """Pairs the op being profiled with the next execution of the executable whose HLO
    module is `module` (called just before dispatching it; a no-op outside a profile
    that records device activity)."""
    from . import _extension

    _extension.load().profiler_mark(module)


def _start_device_trace() -> None:
    """Starts the PJRT/XLA profiler (called by the shim when Kineto starts a session)."""
    global _session
    from jax._src.lib import _profiler

    options = _profiler.ProfileOptions()
    options.python_tracer_level = 0  # torch.profiler already traces Python
    _wait_for_device()
    try:
        _session = _profiler.ProfilerSession(options)
    except Exception as exc:  # noqa: BLE001 - e.g. a jax.profiler trace is already running
        warnings.warn(f"torchneuron: no device time in this profile, the XLA profiler did not start: {exc}")
        _session = None


def _stop_device_trace() -> List[Tuple[str, int, List[Tuple[str, int, int]]]]:
    """Stops the PJRT/XLA profiler; returns its device executions (see
    `device_executions`). Called by the shim when Kineto stops the session."""
    global _session
    session, _session = _session, None
    if session is None:
        return []
    _wait_for_device()
    try:
        xspace = session.stop()
    except Exception as exc:  # noqa: BLE001 - e.g. a jax.profiler trace was running
        warnings.warn(f"torchneuron: no device time in this profile, the XLA profiler failed: {exc}")
        return []
    return device_executions(xspace)


def _wait_for_device() -> None:
    """Waits for queued device work, so that the profiled window holds exactly the
    executions dispatched inside it (the pairing of executions with dispatches relies
    on it)."""
    from .runtime import storage

    for buf in list(storage.buffers.values()):
        buf.block_until_ready()


def device_executions(xspace: bytes) -> List[Tuple[str, int, List[Tuple[str, int, int]]]]:
    """The executions in a serialized XSpace (the PJRT/XLA profiler's output):
    ``[(hlo module, device ordinal, [(kernel, start ns, end ns), ...]), ...]`` ordered
    by start time, times in ns since the Unix epoch (Kineto's clock). A kernel is an
    event carrying ``hlo_module`` and ``hlo_op`` stats; kernels of one execution share
    its ``run_id``."""
    from jax._src.lib import _profile_data

    data = _profile_data.ProfileData.from_serialized_xspace(xspace)
    base = 0  # event times are relative to the profile's start
    for plane in data.planes:
        base = dict(plane.stats).get("profile_start_time", base)
    runs = {}
    for plane in data.planes:
        for line in plane.lines:
            for event in line.events:
                stats = dict(event.stats)
                if "hlo_module" not in stats or "hlo_op" not in stats:
                    continue
                key = (stats["hlo_module"], stats.get("run_id"), int(stats.get("device_ordinal", 0)))
                runs.setdefault(key, []).append(
                    (event.name, base + int(event.start_ns), base + int(event.end_ns)))
    out = [(module, device, sorted(kernels, key=lambda k: k[1]))
           for (module, _, device), kernels in runs.items()]
    out.sort(key=lambda run: run[2][0][1])
    return out


def install() -> None:
    """Hands the shim's Kineto activity profiler its PJRT/XLA profiler callbacks."""
    from . import _extension

    _extension.load().set_profiler_callbacks(_start_device_trace, _stop_device_trace)
