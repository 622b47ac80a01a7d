"""The result of one sweep case, shared by the OpInfo and ModuleInfo sweeps."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Dict, Optional

import torch

from ..ops import fallback

NATIVE, DECOMPOSED, FALLBACK, FAILING, NO_SAMPLES = "native", "decomposed", "cpu_fallback", "failing", "no_samples"


@dataclass
class Outcome:
    """How one (op, dtype, check) case ran on `neuron`.

    status: NATIVE (every ATen call had a lowering), DECOMPOSED (some went through a
    `torch._decomp` decomposition, none to the CPU), FALLBACK (some ran on the CPU),
    FAILING (an error or a mismatch with CPU; `reason` says which), NO_SAMPLES.
    fallbacks / decompositions: {ATen overload: calls} seen while the case ran.
    """

    status: str
    reason: str = ""
    samples: int = 0
    fallbacks: Dict[str, int] = field(default_factory=dict)
    decompositions: Dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"status": self.status, "reason": self.reason, "samples": self.samples,
                "fallbacks": self.fallbacks, "decompositions": self.decompositions}


class Recorder:
    """Counts the CPU fallbacks and decompositions of the neuron calls run inside `watch()`."""

    def __init__(self):
        self.fallbacks: Dict[str, int] = {}
        self.decompositions: Dict[str, int] = {}

    @contextlib.contextmanager
    def watch(self):
        fb, dec = fallback.fallback_ops(), fallback.decomposed_ops()
        try:
            yield
        finally:
            _add(self.fallbacks, fb, fallback.fallback_ops())
            _add(self.decompositions, dec, fallback.decomposed_ops())

    def outcome(self, samples: int, error: Optional[str] = None) -> Outcome:
        if error is not None:
            status = FAILING
        elif samples == 0:
            status = NO_SAMPLES
        elif self.fallbacks:
            status = FALLBACK
        elif self.decompositions:
            status = DECOMPOSED
        else:
            status = NATIVE
        return Outcome(status, error or "", samples, dict(self.fallbacks), dict(self.decompositions))


def _add(into: dict, before: dict, after: dict) -> None:
    for k, v in after.items():
        if v != before.get(k, 0):
            into[k] = into.get(k, 0) + v - before.get(k, 0)


def describe(exc: BaseException, limit: int = 300) -> str:
    """A one-line reason: the exception type and the start of its message."""
    msg = " ".join(str(exc).split())
    if len(msg) > limit:
        msg = msg[:limit] + "..."
    return f"{type(exc).__name__}: {msg}"


def to_device(v, device: str):
    """A copy of a (nested) value or an OpInfo SampleInput with every tensor on
    `device` (a copy on the same device too), as a leaf that requires grad when the original did; a view of part of
    a contiguous base stays such a view (same sizes, strides and storage offset; views
    with a conjugate or negative bit are copied, resolving the bit). A tensor that
    appears more than once is one tensor on `device` too (`kl_div(x, x)`: autograd
    sums the gradients of both uses into it on both sides)."""
    moved = {}

    def move(t):
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) not in moved:
            moved[id(t)] = _copy_to(t, device)
        return moved[id(t)]
    if hasattr(v, "transform"):  # SampleInput, which pytree does not traverse
        out = v.transform(move)
        if "device" in out.kwargs:  # factory samples name their device
            out.kwargs["device"] = device
        return out
    return torch.utils._pytree.tree_map_only(torch.Tensor, move, v)


def _copy_to(t: torch.Tensor, device: str) -> torch.Tensor:
    with torch.no_grad():
        base = t._base
        if (base is not None and base.dtype == t.dtype and base.numel() > t.numel() and base.is_contiguous()
                and not base.storage_offset() and not t.is_conj() and not t.is_neg()):
            # A view of part of its storage: an op may read the rest (as_strided
            # with a storage offset), so the device tensor is the same view of a
            # copy of the whole base.
            out = base.detach().to(device, copy=True).as_strided(t.size(), t.stride(), t.storage_offset())
        else:
            out = t.detach().to(device, copy=True)
    return out.requires_grad_(t.requires_grad)


def to_cpu(v):
    return torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: t.detach().cpu(), v)
