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
the work, not the device's time to run it. Device time shows up where the host waits:
in ``neuron::synchronize`` and ``neuron::device_to_host`` events.

When no profiler is active these helpers cost one C call (``enabled()``) and record
nothing.
"""
from __future__ import annotations

import contextlib

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
