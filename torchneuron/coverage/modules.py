"""One ModuleInfo (`torch.testing._internal.common_modules.module_db`) checked on
`neuron` against CPU PyTorch, per dtype, in training mode:

- ``forward``: a module built on the CPU (fixed seed) and its copy moved with
  ``.to("neuron")`` give the same outputs for the same inputs;
- ``backward``: for the same random output gradients, the gradients of the inputs and
  of every parameter equal CPU's.

Modules whose construction or forward raises on CPU for a sample are not cases. The
tolerances are torch.testing's defaults for the dtype. Each check returns an `Outcome`.
"""
from __future__ import annotations

import copy
from typing import Optional

import torch
from torch.utils._pytree import tree_flatten

from .opinfo import DEVICE, _grad_outputs
from .outcome import Outcome, Recorder, describe, to_cpu, to_device

CHECKS = ("forward", "backward")


def _tensors(v, grad_only: bool = False):
    return [t for t in tree_flatten(v)[0] if isinstance(t, torch.Tensor) and (t.requires_grad or not grad_only)]


def _inputs(info, dtype, requires_grad: bool, limit: Optional[int]):
    items = info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=requires_grad, training=True)
    return items if limit is None else items[:limit]


def run_check(info, dtype, check: str, limit: Optional[int] = None) -> Outcome:
    """Runs one check (one of CHECKS) of ModuleInfo `info` for `dtype` on up to `limit`
    module inputs and returns its Outcome."""
    if check not in CHECKS:
        raise ValueError(f"unknown check {check!r}; expected one of {CHECKS}")
    backward = check == "backward"
    rec = Recorder()
    n = 0
    try:
        for item in _inputs(info, dtype, backward, limit):
            if item.forward_input is None:
                continue
            args, kwargs = item.forward_input.args, item.forward_input.kwargs
            try:
                torch.manual_seed(0)
                module = info.module_cls(*item.constructor_input.args, **item.constructor_input.kwargs)
                module = module.to(dtype=dtype) if dtype.is_floating_point or dtype.is_complex else module
                module.train()
                dev_module = copy.deepcopy(module)
                want = module(*args, **kwargs)
                outs = _tensors(want, grad_only=True)
                if backward:
                    leaves = _tensors((args, kwargs), grad_only=True) + list(module.parameters())
                    if not outs or not leaves:
                        continue
                    grads_out = _grad_outputs(outs, n)
                    want = torch.autograd.grad(outs, leaves, grads_out, allow_unused=True)
            except Exception:  # noqa: BLE001 - CPU rejects the input: not a case
                continue
            dargs, dkwargs = to_device((args, kwargs), DEVICE)
            with rec.watch():
                dev_module = dev_module.to(DEVICE)
                got = dev_module(*dargs, **dkwargs)
                if backward:
                    douts = _tensors(got, grad_only=True)
                    dleaves = _tensors((dargs, dkwargs), grad_only=True) + list(dev_module.parameters())
                    got = torch.autograd.grad(douts, dleaves, to_device(grads_out, DEVICE), allow_unused=True)
                got = to_cpu(got)
            torch.testing.assert_close(got, want, equal_nan=True)
            n += 1
    except Exception as exc:  # noqa: BLE001 - any error is the outcome being measured
        return rec.outcome(n, f"sample {n}: {describe(exc)}")
    return rec.outcome(n)


def dtypes_for(info):
    """The dtypes CPU PyTorch supports for the module."""
    return sorted(info.supported_dtypes("cpu"), key=str)


def name(info) -> str:
    """The key of a ModuleInfo in `expected`: its qualified name, e.g. ``nn.Linear``."""
    return info.name
