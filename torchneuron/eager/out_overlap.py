"""Whether CPU's kernel refuses a call for how its written tensors share memory.

ATen kernels that are not TensorIterator loops (cat, index_select, take, masked_select,
gather, cross, bernoulli, ...) check their written tensors themselves, each its own way:
`at::assert_no_internal_overlap(out)` (an expanded out tensor), `at::assert_no_overlap(
out, input)` (any shared element, even `out` *being* the input: take(x, i, out=x)),
`at::assert_no_partial_overlap`, or nothing (tril, and the kernels that compute into a
temporary and copy). No table of this exists, and `neuron` computes every op
functionally, so it would silently give a result. So CPU's kernel is asked, once per
geometry, on stand-ins that share memory exactly as the call's tensors do: every
`neuron` storage the call touches becomes one zero-filled CPU storage of the same size,
and every tensor a view of it with the same sizes, strides and storage offset. If CPU
raises one of its two overlap errors, so does the call, with CPU's message; any other
outcome (success, or an error that depends on the stand-ins' zeros) leaves the call to
the lowering.

Only calls that could be refused are probed: a written tensor that overlaps itself
(a stride-0 dim of size > 1) or whose storage another argument also uses. TensorIterator
(pointwise) overloads have their own exact check (runtime/overlap.py) and are not probed.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch

from .. import _extension
from ..runtime import overlap as _overlap
from ..runtime.quiet import python_warnings_hidden

_MESSAGES = (_overlap._INTERNAL, _overlap._PARTIAL)

# (op, geometry and arguments) -> None (CPU accepts, as far as overlap goes) or CPU's message
_decisions: Dict[tuple, Optional[str]] = {}


def _flat(v) -> List[torch.Tensor]:
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [t for t in v if isinstance(t, torch.Tensor)]
    return []


def _is_neuron(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type not in ("cpu", "meta")


def _self_overlapping(t: torch.Tensor) -> bool:
    shape, stride = tuple(t.shape), tuple(t.stride())
    return (not _overlap.non_overlapping_and_dense(shape, stride)
            and any(st == 0 and sz > 1 for sz, st in zip(shape, stride)))


def written_positions(op: torch._ops.OpOverload) -> List[int]:
    """Schema positions of the arguments `op` writes (out= tensors, an in-place self)."""
    return [i for i, a in enumerate(op._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]


def needs_probe(values: Sequence, written: Sequence[int]) -> bool:
    """Whether a call could be refused for overlap: a written `neuron` tensor overlaps
    itself, or its storage is also used by another argument (or by another written one),
    or it is itself also an input (empty too: CPU resizes it first, and so the input)."""
    out_ptrs = []
    out_ids = {id(t) for i in written for t in _flat(values[i]) if _is_neuron(t)}
    if any(id(t) in out_ids for i, v in enumerate(values) if i not in written for t in _flat(v)):
        return True
    for i in written:
        for t in _flat(values[i]):
            if not _is_neuron(t) or t.numel() == 0:
                continue
            if _self_overlapping(t):
                return True
            out_ptrs.append(t.untyped_storage().data_ptr())
    if not out_ptrs:
        return False
    if len(set(out_ptrs)) != len(out_ptrs):
        return True
    outs = set(out_ptrs)
    for i, v in enumerate(values):
        if i in written:
            continue
        for t in _flat(v):
            if _is_neuron(t) and t.untyped_storage().data_ptr() in outs:
                return True
    return False


def check(op: torch._ops.OpOverload, values: Sequence, written: Optional[Sequence[int]] = None) -> None:
    """Raises CPU's RuntimeError if CPU's kernel of `op` refuses this call because its
    written tensors overlap themselves or its inputs. values: the call's arguments in
    schema order."""
    if written is None:
        written = written_positions(op)
    if not needs_probe(values, written):
        return
    storages: Dict[int, int] = {}  # data_ptr -> index
    objects: Dict[int, int] = {}  # id -> index: one tensor passed twice is not two views
    sizes: List[int] = []

    def describe(v):
        if isinstance(v, torch.Tensor):
            if not _is_neuron(v):
                return ("host", v.dtype, tuple(v.shape), v.device.type)
            st = v.untyped_storage()
            k = storages.setdefault(st.data_ptr(), len(storages))
            if k == len(sizes):
                sizes.append(st.nbytes())
            return ("t", k, objects.setdefault(id(v), len(objects)), tuple(v.shape), tuple(v.stride()),
                    v.storage_offset(), v.dtype)
        if isinstance(v, (list, tuple)):
            return (type(v).__name__,) + tuple(describe(x) for x in v)
        if isinstance(v, torch.Generator):
            return "g"
        return v

    key = (op,) + tuple(describe(v) for v in values) + (tuple(sizes),)
    try:
        decision = _decisions[key]
    except TypeError:  # an unhashable argument: probe without remembering
        decision = _probe(op, values)
    except KeyError:
        decision = _decisions[key] = _probe(op, values)
    if decision is not None:
        raise RuntimeError(decision)


def _probe(op, values) -> Optional[str]:
    cpu_storages: Dict[int, torch.UntypedStorage] = {}
    standins: Dict[int, torch.Tensor] = {}  # id -> stand-in: the same tensor twice stays one tensor

    def standin(v):
        if isinstance(v, torch.Tensor):
            if not _is_neuron(v):
                return v
            if id(v) in standins:
                return standins[id(v)]
            st = v.untyped_storage()
            cs = cpu_storages.get(st.data_ptr())
            if cs is None:
                cs = cpu_storages[st.data_ptr()] = torch.zeros(st.nbytes(), dtype=torch.uint8).untyped_storage()
            standins[id(v)] = torch.empty(0, dtype=v.dtype).set_(cs, v.storage_offset(), tuple(v.shape),
                                                                 tuple(v.stride()))
            return standins[id(v)]
        if isinstance(v, (list, tuple)):
            return type(v)(standin(x) for x in v)
        if isinstance(v, torch.Generator):
            return None
        if isinstance(v, torch.device) and v.type != "cpu":
            return torch.device("cpu")
        return v

    schema = op._schema.arguments
    args = [standin(v) for v in values]
    pos = [v for v, a in zip(args, schema) if not a.kwarg_only]
    kw = {a.name: v for v, a in zip(args, schema) if a.kwarg_only}
    with python_warnings_hidden(), torch.random.fork_rng(devices=[]), torch.no_grad():
        try:
            _extension.load().without_warnings(lambda: op(*pos, **kw))
        except RuntimeError as exc:
            for message in _MESSAGES:
                if message in str(exc):
                    return message
        except Exception:  # noqa: BLE001 - only CPU's overlap errors are this probe's answer
            pass
    return None
