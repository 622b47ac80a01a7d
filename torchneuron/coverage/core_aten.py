"""Core ATen overloads (tagged `torch.Tag.core`) classified by how `neuron` runs them.

- native: a PrivateUse1 kernel is registered (a lowering, a derived in-place/out=
  variant, a host kernel, or a metadata kernel of the C++ shim);
- decomposed: PyTorch's composite kernel (CompositeImplicitAutograd or
  CompositeExplicitAutograd) or a `torch._decomp` decomposition runs it as other ops;
- cpu_fallback: none of these, so the boxed CPU fallback runs it.
"""
from __future__ import annotations

from typing import Dict, List

import torch
from torch._decomp import decomposition_table

NATIVE, DECOMPOSED, FALLBACK = "native", "decomposed", "cpu_fallback"


def core_overloads() -> List[torch._ops.OpOverload]:
    """Every ATen overload tagged `torch.Tag.core`, sorted by name."""
    found = []
    for name in torch._C._dispatch_get_all_op_names():
        ns, _, rest = name.partition("::")
        if ns != "aten":
            continue
        base, _, overload = rest.partition(".")
        packet = getattr(torch.ops.aten, base, None)
        op = getattr(packet, overload or "default", None) if packet is not None else None
        if isinstance(op, torch._ops.OpOverload) and torch.Tag.core in op.tags:
            found.append(op)
    return sorted(found, key=str)


def classify(op: torch._ops.OpOverload) -> Dict[str, str]:
    """{"op", "status", "how"} for one overload (`status` is NATIVE, DECOMPOSED or FALLBACK)."""
    torch.empty(0, device="neuron")  # the backend installs its kernels on first use
    name = op.name()
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    if has(name, "PrivateUse1"):
        how = "lowering" if _lowered(op) else "kernel (host or C++ shim)"
        return {"op": str(op), "status": NATIVE, "how": how}
    for key in ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional"):
        if has(name, key):
            return {"op": str(op), "status": DECOMPOSED, "how": key}
    if op in decomposition_table:
        return {"op": str(op), "status": DECOMPOSED, "how": "torch._decomp"}
    return {"op": str(op), "status": FALLBACK, "how": "no kernel, composite or decomposition"}


def _lowered(op) -> bool:
    from ..eager import install

    return op in install.KERNELS


def report() -> List[Dict[str, str]]:
    """`classify` for every core ATen overload."""
    return [classify(op) for op in core_overloads()]
