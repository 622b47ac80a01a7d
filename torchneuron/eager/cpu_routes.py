"""CPU's errors for composite ops that take another route off the CPU.

A few CompositeImplicitAutograd kernels branch on the device: on CPU they call a
CPU-only kernel whose AT_DISPATCH covers fewer dtypes than the kernel they call
elsewhere. `F.dropout` trains through `bernoulli_` on CPU (no complex case) and
through `native_dropout` on accelerators (complex computed); `F.max_pool1d` without
grad runs `max_pool1d_impl` on CPU (floating types only) and `max_pool2d_with_indices`
elsewhere (integers computed). CPU being the oracle, for those dtypes CPU's composite
decides, run on CPU copies of the arguments: its error (argument and shape checks come
first, then the dtype) is raised. Every other call runs the composite kernel
unchanged, the C++ one (`DispatchKey.CompositeImplicitAutograd`; `OpOverload.decompose`
would take PyTorch's Python decomposition, which skips checks and special cases), so
gradients, graphs and the kernels reached are as before. While torch.compile traces
(fake tensors) CPU's error is noted for the graph, which raises it when it runs
(`refusal.refuse`).

The checks are registered on both AutogradPrivateUse1 (the usual entry) and PrivateUse1
(reached under `torch.inference_mode`, where autograd keys are skipped).
"""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

from . import refusal

aten = torch.ops.aten
_COMPOSITE = torch._C.DispatchKey.CompositeImplicitAutograd


def _composite(op, *args):
    return op._op_dk(_COMPOSITE, *args)


def _cpu_decides(op, tensor, *args) -> None:
    """Raises CPU's error for `op` on `args` (noted instead while tracing); returns if
    CPU accepts the call."""
    refused = refusal.cpus_error(op, refusal.schema_values(op, args, {}))
    if refused is not None:
        exc_type, message = refused
        refusal.refuse(exc_type(message), tensor)


def _dropout(input, p, train):
    """aten::dropout: CPU draws the training mask with `bernoulli_`, which has no
    complex kernel (ATen's Dropout.cpp; p == 0 or an empty input draws nothing)."""
    if train and p != 0 and input.numel() and input.is_complex():
        _cpu_decides(aten.dropout.default, input, input, p, train)
    return _composite(aten.dropout.default, input, p, train)


def _is_subclass_like(t) -> bool:
    # ATen's isTensorSubclassLike, less the fake tensors torch.compile traces with (a
    # compiled call raises what the eager call raises).
    return torch._C._dispatch_keys(t).has(torch._C.DispatchKey.Python) and not is_fake(t)


def _max_pool1d(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """aten::max_pool1d: CPU's `max_pool1d_impl`, taken unless the input requires grad
    or is a tensor subclass, dispatches floating types only (ATen's MaxPooling.cpp)."""
    if (not self.dtype.is_floating_point and not (self.requires_grad and torch.is_grad_enabled())
            and not _is_subclass_like(self)):
        _cpu_decides(aten.max_pool1d.default, self, self, kernel_size, stride, padding, dilation, ceil_mode)
    return _composite(aten.max_pool1d.default, self, kernel_size, stride, padding, dilation, ceil_mode)


def _native_channel_shuffle(self, groups):
    """aten::native_channel_shuffle: CPU has a kernel of its own (ChanelShuffle.cpp
    `channel_shuffle_cpu`: an empty input's alias, else the shuffle of
    `self.contiguous(memory_format)` written in `self.suggest_memory_format()`); other
    devices run the composite `math_channel_shuffle`, whose `self.view(b, groups, oc,
    -1)` refuses a transposed input and whose `.contiguous()` drops channels_last. So
    the composite runs on the input made contiguous in its suggested format, and its
    result is laid out in that format (both differentiable)."""
    if self.numel() == 0:
        return aten.alias.default(self)
    fmt = torch._prims_common.suggest_memory_format(self)
    out = _composite(aten.native_channel_shuffle.default, self.contiguous(memory_format=fmt), groups)
    return out.contiguous(memory_format=fmt)


ROUTES = {aten.dropout.default: _dropout, aten.max_pool1d.default: _max_pool1d,
          aten.native_channel_shuffle.default: _native_channel_shuffle}


def install(lib: torch.library.Library) -> None:
    """Registers each check in `ROUTES` on the neuron keys of `lib` (an aten IMPL library)."""
    for op, check in ROUTES.items():
        for key in ("AutogradPrivateUse1", "PrivateUse1"):
            lib.impl(op, check, key)
