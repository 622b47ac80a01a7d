"""CPU's dtype checks for composite ops that take another route off the CPU.

A few CompositeImplicitAutograd kernels branch on the device: on CPU they call a
CPU-only kernel whose AT_DISPATCH covers fewer dtypes than the kernel they call
elsewhere. `F.dropout` trains through `bernoulli_` on CPU (no complex case) and
through `native_dropout` on accelerators (complex computed); `F.max_pool1d` without
grad runs `max_pool1d_impl` on CPU (floating types only) and `max_pool2d_with_indices`
elsewhere (integers computed). CPU being the oracle, neuron raises CPU's
NotImplementedError for those inputs, then runs the composite kernel unchanged
(`OpOverload.decompose`), so gradients, graphs and the kernels reached are as before.
While torch.compile traces (fake tensors) the refusal is noted for the graph, which
raises it when it runs (`refusal.refuse`).

The check is registered on both AutogradPrivateUse1 (the usual entry) and PrivateUse1
(reached under `torch.inference_mode`, where autograd keys are skipped); fake tensors
of the neuron device reach it while torch.compile traces.
"""
from __future__ import annotations

import torch

from ..ops._common import not_implemented_for
from .refusal import refuse

aten = torch.ops.aten


def _dropout(input, p, train):
    """aten::dropout: CPU draws the training mask with `bernoulli_`, which has no
    complex kernel (ATen's Dropout.cpp; an empty input or p == 0 draws nothing)."""
    if train and 0 < p < 1 and input.numel() and input.is_complex():
        refuse(not_implemented_for("bernoulli_scalar_cpu_", input.dtype), input)
    return aten.dropout.default.decompose(input, p, train)


def _max_pool1d(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """aten::max_pool1d: CPU's `max_pool1d_impl`, taken unless the input requires
    grad, dispatches floating types only (ATen's MaxPooling.cpp)."""
    if not self.dtype.is_floating_point and not (self.requires_grad and torch.is_grad_enabled()):
        refuse(not_implemented_for("max_pool1d_impl", self.dtype), self)
    return aten.max_pool1d.default.decompose(self, kernel_size, stride, padding, dilation, ceil_mode)


ROUTES = {aten.dropout.default: _dropout, aten.max_pool1d.default: _max_pool1d}


def install(lib: torch.library.Library) -> None:
    """Registers each check in `ROUTES` on the neuron keys of `lib` (an aten IMPL library)."""
    for op, check in ROUTES.items():
        for key in ("AutogradPrivateUse1", "PrivateUse1"):
            lib.impl(op, check, key)
