"""Which device PyTorch's Python meta kernels lay their outputs out for.

Several of `torch._meta_registrations`' kernels pick the output layout (or a check) by
the device of their input, through `device_hint`: CPU's pixel_shuffle and 2-d padding
keep channels_last, its eigenvectors are column-major, its embedding_bag returns other
bag sizes. A plain meta tensor has no device, and `device_hint` then answers "cuda".
CPU is torchneuron's oracle, so the meta kernels the eager executor runs on meta
stand-ins of `neuron` tensors read them as CPU tensors (`eager_meta`). Everyone else's
meta tensors, and the fake tensors of compiled graphs (whose device is `neuron`), keep
PyTorch's answer.
"""
from __future__ import annotations

import contextlib
import threading

import torch._meta_registrations as _meta_registrations

_local = threading.local()
_pytorch_device_hint = _meta_registrations.device_hint


def device_hint(tensor) -> str:
    """`torch._meta_registrations.device_hint`, with "cpu" for meta tensors inside
    `eager_meta()`."""
    hint = _pytorch_device_hint(tensor)
    if in_eager_meta() and tensor.device.type == "meta":
        return "cpu"
    return hint


@contextlib.contextmanager
def eager_meta():
    """While the eager executor runs a meta kernel on meta stand-ins of `neuron` tensors."""
    previous = getattr(_local, "eager", False)
    _local.eager = True
    try:
        yield
    finally:
        _local.eager = previous


def in_eager_meta() -> bool:
    """Whether the eager executor is running a meta kernel on this thread."""
    return getattr(_local, "eager", False)


def install() -> None:
    """Replaces the module's `device_hint`, which its kernels look up at each call."""
    _meta_registrations.device_hint = device_hint
