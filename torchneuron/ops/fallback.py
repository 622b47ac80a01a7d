"""What runs an ATen op that has no lowering: PyTorch's decomposition, else the CPU.

Resolution order (DESIGN.md): native lowering -> PyTorch's own decomposition from
`torch._decomp` -> boxed CPU fallback. The CPU fallback copies `neuron` arguments to
the CPU, runs the op there, and copies results (and mutated arguments) back. It warns
once per op, counts every call (`torchneuron.fallback_ops()`), and raises
NotImplementedError instead when `TORCHNEURON_STRICT=1`.
"""
from __future__ import annotations

import collections
import threading
import warnings

import torch
from torch._decomp import decomposition_table
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch._prims_common.wrappers import _maybe_resize_out, _safe_copy_out

from .. import config, profiler
from ..eager import refusal
from . import registry

_counts: collections.Counter = collections.Counter()
_decomposed: collections.Counter = collections.Counter()
_warned: set = set()
_local = threading.local()


def fallback_ops() -> dict:
    """{op name: number of calls} for every op that ran through the CPU fallback."""
    return dict(_counts)


def decomposed_ops() -> dict:
    """{op name: number of calls} for every op that ran through a `torch._decomp`
    decomposition (into ops that may be lowered or fall back in turn)."""
    return dict(_decomposed)


def reset() -> None:
    _counts.clear()
    _decomposed.clear()


def _to_cpu(v):
    if isinstance(v, torch.Tensor) and v.device.type == "neuron":
        return v.cpu()
    if isinstance(v, (list, tuple)):
        return type(v)(_to_cpu(x) for x in v)
    if isinstance(v, torch.device) and v.type == "neuron":
        return torch.device("cpu")
    return v


def _device_of(args, kwargs):
    for v in list(args) + list(kwargs.values()):
        if isinstance(v, torch.Tensor) and v.device.type == "neuron":
            return v.device
        if isinstance(v, (list, tuple)):
            for x in v:
                if isinstance(x, torch.Tensor) and x.device.type == "neuron":
                    return x.device
        if isinstance(v, torch.device) and v.type == "neuron":
            return v
    return torch.device("neuron", 0)


def _decomposition(op):
    if op in _active():
        # A decomposition that reaches its own op again would recurse, also through other
        # ops: special_bessel_j0.out -> its functional's reference -> a prim that calls
        # special_bessel_j0, whose composite kernel calls the out= overload again.
        return None
    return decomposition_table.get(op)


def _active() -> set:
    """The ops whose decompositions are running on this thread."""
    active = getattr(_local, "active", None)
    if active is None:
        active = _local.active = set()
    return active


def _out_args(op):
    return [a for a in op._schema.arguments if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]


def _via_functional(op, args, kwargs):
    """An out= overload computed by its functional overload (its neuron kernel, else its
    decomposition) and copied into the out tensors (resized as ATen's out= contract
    allows), or NotImplemented.
    Decompositions of out= overloads take the out tensor under its schema name
    (`grad_input`, ...), which `torch._decomp`'s out wrappers do not all accept; the
    functional form has no such argument."""
    from ..eager import out_dtypes
    from ..eager.executor import functional_counterpart

    outs = _out_args(op)
    func = functional_counterpart(op) if outs else None
    if func is None:
        return NotImplemented
    fkwargs = {k: v for k, v in kwargs.items() if k not in {a.name for a in outs}}
    from ..eager.install import KERNELS

    if func in KERNELS:
        # The functional overload has a neuron kernel of ours (a host kernel such as
        # masked_select's): better than the CPU. Not any PrivateUse1 kernel: a structured
        # op's composite functional kernel calls this very out= overload.
        def compute():
            return func(*args, **fkwargs)
    else:
        decomp = _decomposition(func)
        if decomp is None:
            return NotImplemented

        def compute():
            return _decompose(func, decomp, args, fkwargs)
    # CPU's kernel decides whether out tensors of other dtypes are refused (its error,
    # raised here, before anything is computed, as CPU raises it) or written with a cast.
    # The functional overload's meta kernel gives the results' dtypes, else the results do.
    values = refusal.schema_values(op, args, kwargs)
    metas = _meta_results(func, args, fkwargs)
    probed = out_dtypes.check(op, values, metas) if metas is not None else None
    result = compute()
    if result is NotImplemented:
        return NotImplemented
    results = result if isinstance(result, (tuple, list)) else (result,)
    targets = [kwargs[a.name] for a in outs]
    if metas is None:
        probed = out_dtypes.check(op, values, results)
    layouts = registry.OUT_LAYOUTS.get(op)
    formats = layouts(*args, **kwargs) if layouts is not None else None
    if not isinstance(formats, (list, tuple)):
        formats = [formats] * len(targets)
    for t, r, fmt in zip(targets, results, formats):
        # PyTorch's out= contract, as its reference out wrappers apply it: a resize of a
        # non-empty out tensor warns, and where the probe could not tell, a result that
        # cannot be cast safely into it (mvlgamma(int, out=int) is float) raises instead
        # of being truncated.
        resized = t.shape != r.shape
        _maybe_resize_out(t, r.shape)
        # CPU's kernel lays a resized out tensor out as its functional result (nonzero's
        # column-major coordinates; see executor.OpKernel._out_layouts), and some restride
        # any out tensor (`registry.out_layout`).
        if fmt is not None:
            t.resize_(r.shape, memory_format=fmt)
        elif resized and t.stride() != r.stride() and is_non_overlapping_and_dense_or_false(r):
            t.as_strided_(r.shape, r.stride())
        if probed == out_dtypes.ACCEPT:
            t.copy_(r)
        else:
            _safe_copy_out(copy_from=r, copy_to=t)
    return targets[0] if len(targets) == 1 else tuple(targets)


def _meta_arguments(args, kwargs):
    """`args` and `kwargs` with meta stand-ins for `neuron` tensors."""
    from ..eager.executor import _to_meta

    return _to_meta(args), {k: _to_meta(v) for k, v in kwargs.items()}


def _meta_results(func, args, kwargs):
    """The results of `func` on meta copies of its arguments, as a list; None if it has
    no meta kernel or that refuses them."""
    margs, mkwargs = _meta_arguments(args, kwargs)
    try:
        out = func(*margs, **mkwargs)
    except Exception:  # noqa: BLE001 - any refusal: the computed results decide instead
        return None
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _decompose(op, decomp, args, kwargs):
    """Runs `op`'s decomposition (marking `op` active on this thread) and counts it;
    NotImplemented if the decomposition declines. Dtypes CPU's kernel does not
    implement raise CPU's error first: a decomposition computes in any dtype."""
    refusal.check_dtypes(op, refusal.schema_values(op, args, kwargs))
    active = _active()
    active.add(op)
    try:
        out = decomp(*args, **kwargs)
    finally:
        active.discard(op)
    if out is not NotImplemented:
        _decomposed[str(op)] += 1
        out = _in_meta_layout(op, args, kwargs, out)
    return out


def _in_meta_layout(op, args, kwargs, out):
    """The decomposition's new results copied into the layout `op`'s meta kernel gives
    them, read as CPU's (`eager.meta_device`). A decomposition builds its result from
    views and contiguous ops where CPU's kernel keeps a channels_last input's layout
    (replication_pad2d, channel_shuffle). Asked only when a tensor argument is not
    contiguous: CPU's kernels lay out contiguous inputs' results contiguously."""
    from ..eager import meta_device

    tensors = [t for t in refusal.schema_values(op, args, kwargs) if isinstance(t, torch.Tensor)]
    if all(t.is_contiguous() for t in tensors):
        return out
    with meta_device.eager_meta():
        metas = _meta_results(op, args, kwargs)
    if metas is None:
        return out
    metas = registry.laid_out(op, metas, *_meta_arguments(args, kwargs))
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    for i, (o, m, ret) in enumerate(zip(outs, metas, op._schema.returns)):
        if (ret.alias_info is None and isinstance(o, torch.Tensor) and isinstance(m, torch.Tensor)
                and o.shape == m.shape and o.stride() != m.stride() and is_non_overlapping_and_dense_or_false(m)):
            outs[i] = torch.empty_strided(m.shape, m.stride(), dtype=o.dtype, device=o.device).copy_(o)
    if not isinstance(out, (tuple, list)):
        return outs[0]
    # A named tuple (torch.return_types' or a decomposition's) takes its fields one by one.
    return type(out)(*outs) if hasattr(out, "_fields") else type(out)(outs)


_written: dict = {}  # op -> schema positions of the arguments it writes


def _check_overlap(op, written, args, kwargs):
    """CPU's refusal of written tensors that overlap themselves or the inputs (see
    eager/out_overlap.py): neither a decomposition nor the CPU copies would see it."""
    from ..eager import out_overlap

    out_overlap.check(op, refusal.schema_values(op, args, kwargs), written)


def run(op: torch._ops.OpOverload, *args, **kwargs):
    """The PrivateUse1 fallback kernel: decomposition if PyTorch has one (for an out=
    overload, its functional overload's kernel or decomposition, copied into the out
    tensors), else CPU."""
    written = _written.get(op)
    if written is None:
        from ..eager import out_overlap

        written = _written[op] = out_overlap.written_positions(op)
    if written:
        _check_overlap(op, written, args, kwargs)
    if _out_args(op) and all(kwargs.get(a.name) is not None for a in _out_args(op)):
        out = _via_functional(op, args, kwargs)
        if out is not NotImplemented:
            return out
    decomp = _decomposition(op)
    if decomp is not None:
        out = _decompose(op, decomp, args, kwargs)
        if out is not NotImplemented:
            return out
    with profiler.record(f"neuron::cpu_fallback::{op.name()}"):
        return cpu_fallback(op, *args, **kwargs)


def cpu_fallback(op: torch._ops.OpOverload, *args, **kwargs):
    """Runs `op` on CPU copies of its arguments; mutated arguments are written back."""
    name = str(op)
    if config.STRICT:
        raise NotImplementedError(
            f"torchneuron: {name} has no lowering on neuron and TORCHNEURON_STRICT=1 forbids the CPU fallback")
    _counts[name] += 1
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"torchneuron: {name} runs through the CPU fallback (no lowering on neuron yet)",
                      stacklevel=2)
    device = _device_of(args, kwargs)
    cargs = _to_cpu(args)
    ckwargs = {k: _to_cpu(v) for k, v in kwargs.items()}
    out = op(*cargs, **ckwargs)
    schema = op._schema
    # Write mutated arguments back and map aliased returns to the original tensors.
    originals = {}
    for i, a in enumerate(schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        orig = args[i] if i < len(args) else kwargs.get(a.name)
        new = cargs[i] if i < len(cargs) else ckwargs.get(a.name)
        if orig is None:
            continue
        if isinstance(orig, torch.Tensor):
            _write_back(orig, new)
            originals[id(new)] = orig
        else:
            for o, n in zip(orig, new):
                _write_back(o, n)
                originals[id(n)] = o

    def back(v):
        if isinstance(v, torch.Tensor):
            if id(v) in originals:
                return originals[id(v)]
            return v.to(device)
        if isinstance(v, (list, tuple)):
            return type(v)(back(x) for x in v)
        return v

    return back(out)


def _write_back(orig: torch.Tensor, new: torch.Tensor) -> None:
    if orig.device.type != "neuron":
        return
    if orig.shape != new.shape:
        orig.resize_(new.shape)
    orig.copy_(new)
