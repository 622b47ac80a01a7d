"""CPU's error for a call whose lowering refused its arguments while tracing.

A lowering that meets an input it does not handle (bitwise_not of a float tensor, a
shift of a bool one) fails inside JAX with JAX's exception and words (TypeError,
ValueError), or raises an error of its own that may not be the one CPU's kernel raises
first. CPU PyTorch is the oracle for which inputs raise and how: on that failure path
only, the call runs on CPU copies of its arguments, and where CPU refuses it too, CPU's
exception is raised in place of the lowering's. The probe has no side effects: every
tensor is copied (CPU ones too, so a written `out=` or in-place CPU argument is left
alone), generators are left out and CPU's random state is restored.
"""
from __future__ import annotations

import torch


def _copy(value):
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v) for v in value)
    if isinstance(value, torch.device):
        return torch.device("cpu")
    if isinstance(value, torch.Generator):
        return None
    return value


def raise_cpus_error(op: torch._ops.OpOverload, values) -> None:
    """Runs `op` (an ATen overload) on CPU copies of `values` (its arguments in schema
    order) and raises the exception CPU raises; returns if CPU accepts the call, or if
    `op` is not ATen's (custom kernels have no CPU oracle)."""
    if op.namespace != "aten":
        return
    args, kwargs = [], {}
    for argument, value in zip(op._schema.arguments, values):
        if argument.kwarg_only:
            kwargs[argument.name] = _copy(value)
        else:
            args.append(_copy(value))
    with torch.random.fork_rng(devices=[]):
        try:
            op(*args, **kwargs)
        except Exception as cpu:  # noqa: BLE001 - whatever CPU raises is the error to raise
            raise cpu from None
