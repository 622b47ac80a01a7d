"""Lazy conjugate and negative views (`x.conj()`, `x.conj().imag`) for the few kernels
PyTorch hands them to unresolved.

Such a view has a conjugate or negative bit: its storage holds the values before
conjugation or negation. For most ops PyTorch's Conjugate and Negative dispatch keys
materialize these arguments before the backend kernel runs, but some ops (clone, mm,
addmm, bmm, baddbmm, dot, vdot, linalg_solve_triangular, ...) are fallthroughs there
because CPU and CUDA fold the bits into their math. Lowerings read stored values, so
the kernels of exactly those ops are wrapped: arguments with a bit are passed as
materialized copies, and written arguments with a bit get their result through the
bit-aware `copy_`.
"""
from __future__ import annotations

import torch

from . import host_kernels

_KEYS = ("Conjugate", "Negative")


def sees_math_bits(op: torch._ops.OpOverload) -> bool:
    """Whether PyTorch passes conjugate/negative views to `op`'s backend kernel as they
    are (its Conjugate or Negative dispatch key is a fallthrough)."""
    schema = op._schema
    name = schema.name + ("." + schema.overload_name if schema.overload_name else "")
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(name, k)
               and torch._C._dispatch_kernel_for_dispatch_key_is_fallthrough(name, k) for k in _KEYS)


_Tensor = torch.Tensor


def _has_bits(v) -> bool:
    return isinstance(v, _Tensor) and (v.is_conj() or v.is_neg())


def _resolved(t: torch.Tensor) -> torch.Tensor:
    return host_kernels.conj_neg(host_kernels.stored(t), t.is_conj(), t.is_neg())


def resolving(kernel, op: torch._ops.OpOverload):
    """`kernel` (a backend kernel of `op`) made correct for arguments with lazy bits.

    Calls without such arguments go straight to `kernel`."""
    written = {a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    names = [a.name for a in op._schema.arguments]

    def run(*args, **kwargs):
        # The common case costs one loop over the arguments (mm, addmm are hot).
        for a in args:
            if isinstance(a, _Tensor) and (a.is_conj() or a.is_neg()):
                return resolve(args, kwargs)
        for a in kwargs.values():
            if isinstance(a, _Tensor) and (a.is_conj() or a.is_neg()):
                return resolve(args, kwargs)
        return kernel(*args, **kwargs)

    def resolve(args, kwargs):
        back = {}  # id(temporary) -> (temporary, the written argument it stands for)

        def fix(name, v):
            if not _has_bits(v):
                return v
            tmp = _resolved(v)
            if name in written:
                back[id(tmp)] = (tmp, v)
            return tmp

        args = [fix(n, a) for n, a in zip(names, args)]
        kwargs = {k: fix(k, v) for k, v in kwargs.items()}
        out = kernel(*args, **kwargs)
        for tmp, orig in back.values():
            orig.copy_(tmp)

        def original(v):
            return back[id(v)][1] if isinstance(v, torch.Tensor) and id(v) in back else v

        return tuple(original(v) for v in out) if isinstance(out, tuple) else original(out)

    return run
