"""The lowering table: ATen overload -> JAX function. One table for eager and compile.

A lowering is a pure JAX function called with the ATen overload's arguments in schema
order: tensors arrive as JAX arrays (already read out of their strided storage),
`Scalar` and `float` arguments as JAX scalars or Python numbers, everything else as
the Python value. It returns the op's outputs (an array, or a tuple/list of them).

Lowerings registered with ``mutates=True`` are for overloads that write some of their
arguments (``_fused_adamw_``, ``native_batch_norm``'s running statistics): they return
``(outputs, {arg_name: new_value})``. In-place (``add_``) and ``out=`` (``add.out``)
overloads need no lowering of their own: the executor derives them from the functional
overload's lowering through the op schema.

Ops that other libraries define with torch.library, possibly after torchneuron is
imported (transformers' ``transformers::grouped_mm_fallback``), are registered by
qualified name: ``@lowering("ns::op")``. The table resolves the name the first time it is
asked about the op (the compile backend deciding which nodes it can lower).

While a lowering runs, `context()` describes the call: the output dtypes and shapes
PyTorch computed (from meta kernels in eager, fake tensors in compile), a PRNG key for
random ops, and a place to report device-side checks (out-of-range indices).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import jax
import torch

aten = torch.ops.aten


@dataclass
class Lowering:
    """A registered lowering: the JAX function and how the executor must call it."""

    fn: Callable
    mutates: bool = False  # returns (outputs, {arg_name: new value})
    random: bool = False  # needs context().rng_key()
    static: Tuple[str, ...] = ()  # float/Scalar arguments that must be Python values
    eager: bool = True  # False: compile-only (eager uses PyTorch's composite kernel)
    # Arguments written although the schema does not say so (native_batch_norm's running
    # statistics); implies `mutates`.
    writes: Tuple[str, ...] = ()


#: Lowerings of ops registered by qualified name (`OpOverload.name()`: "ns::op" for the
#: default overload, "ns::op.overload" otherwise), for ops that may not exist yet.
BY_NAME: Dict[str, Lowering] = {}


class _Table(dict):
    """OpOverload -> Lowering. A lookup that misses resolves a `BY_NAME` entry, so a
    lowering registered by name applies to an op defined later, whatever the import
    order, without the table's users knowing the difference."""

    def __contains__(self, op) -> bool:
        return dict.__contains__(self, op) or self._resolve(op)

    def __missing__(self, op):
        if self._resolve(op):
            return dict.__getitem__(self, op)
        raise KeyError(op)

    def get(self, op, default=None):
        return self[op] if op in self else default

    def _resolve(self, op) -> bool:
        # An op redefined under the same name (a torch.library.Library destroyed and made
        # again) is a new OpOverload object: the name entry stays, and it resolves too.
        low = BY_NAME.get(op.name()) if BY_NAME and isinstance(op, torch._ops.OpOverload) else None
        if low is None:
            return False
        dict.__setitem__(self, op, low)
        return True


LOWERINGS: Dict[torch._ops.OpOverload, Lowering] = _Table()


def _overloads(op) -> List[torch._ops.OpOverload]:
    if isinstance(op, torch._ops.OpOverload):
        return [op]
    out = []
    for name in op.overloads():
        ov = getattr(op, name)
        if not any(a.alias_info is not None and a.alias_info.is_write for a in ov._schema.arguments):
            out.append(ov)
    return out


def lowering(*ops, mutates: bool = False, random: bool = False, static: Sequence[str] = (), eager: bool = True,
             writes: Sequence[str] = ()):
    """Registers `fn` as the lowering of `ops` (OpOverloads, or packets meaning all of
    their functional overloads, or qualified names, see `BY_NAME`). Returns `fn`
    unchanged.

    A lowering registered by name is compile-only: eager kernels are registered on
    PrivateUse1 once, at import, and an op defined later keeps its own kernels in eager
    (for a custom op, its Python implementation running op by op on `neuron`)."""

    def register(fn):
        def make(in_eager):
            return Lowering(fn, mutates or bool(writes), random, tuple(static), in_eager, tuple(writes))

        for op in ops:
            if isinstance(op, str):
                BY_NAME[op] = make(False)
                continue
            for ov in _overloads(op):
                LOWERINGS[ov] = make(eager)
        return fn

    return register


@dataclass
class OutSpec:
    shape: Tuple[int, ...]
    dtype: object  # JAX dtype


@dataclass
class Context:
    outs: List[Optional[OutSpec]]
    rng: Optional[Tuple[object, object]] = None  # (seed, offset) traced uint64 scalars
    checks: List[Tuple[object, type, str]] = field(default_factory=list)
    salt: int = 0  # distinguishes random nodes of one compiled graph
    # Per tensor argument, in argument order: whether it is contiguous (CPU kernels such
    # as det's choose their output layout by it).
    contiguous: Tuple[bool, ...] = ()
    # Per tensor argument, where known (compiled graphs): its (stride, storage offset) in
    # the storage it views, for the ops that address storage (as_strided).
    layouts: Tuple[Tuple[Tuple[int, ...], int], ...] = ()
    # Eager executables: id() of each traced Python-number argument -> its position
    # among the executable's dynamic values (None in compiled graphs), and the checks
    # `check_scalar` leaves to the host for them ((position, lo, hi, message, dtype):
    # CPU's checked_convert, made on the Python value before each run, in C++ on the
    # hot path).
    scalar_args: Optional[Dict[int, int]] = None
    host_checks: List[tuple] = field(default_factory=list)
    _draws: int = 0

    def out(self, i: int = 0) -> OutSpec:
        """The shape and dtype PyTorch gives output `i`."""
        return self.outs[i]

    def out_dtype(self, i: int = 0):
        return self.outs[i].dtype

    def rng_key(self):
        """A fresh JAX PRNG key for this op; each call within one op gives a new one."""
        if self.rng is None:
            raise RuntimeError("lowering asked for random numbers but was not registered with random=True")
        seed, offset = self.rng
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), offset), self.salt)
        self._draws += 1
        return jax.random.fold_in(key, self._draws)

    def check(self, ok, exc_type: type, message: str, value=None) -> None:
        """Reports a device-side check: `ok` (a traced bool scalar) false raises
        `exc_type(message)` at the op or at the next synchronization point. With `value`
        (a traced integer scalar, e.g. the offending index), `{}` in `message` is
        replaced by it, as in CPU's "Target 7 is out of bounds."."""
        if value is not None:
            ok = jax.numpy.stack([jax.numpy.asarray(ok).astype("int64"), jax.numpy.asarray(value).astype("int64")])
        self.checks.append((ok, exc_type, message))


_local = threading.local()


def context() -> Context:
    """The context of the lowering being traced; RuntimeError outside one."""
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        raise RuntimeError("torchneuron lowering called outside of a trace")
    return ctx


class tracing:
    """Sets the lowering context for the duration of a trace."""

    def __init__(self, ctx: Context):
        self.ctx = ctx

    def __enter__(self):
        self.prev = getattr(_local, "ctx", None)
        _local.ctx = self.ctx
        return self.ctx

    def __exit__(self, *exc):
        _local.ctx = self.prev


_meta_lib = None


def _meta_library() -> torch.library.Library:
    """The one ``aten`` IMPL library holding every Meta kernel torchneuron registers. A
    `torch.library.Library` removes its kernels when it is garbage-collected, so one
    object kept here, not one per module (rebinding a module's name dropped kernels)."""
    global _meta_lib
    if _meta_lib is None:
        _meta_lib = torch.library.Library("aten", "IMPL")
    return _meta_lib


def meta_impl(op, fn) -> None:
    """Registers `fn` as the Meta kernel of `op` (an ATen op name, "name.overload", or
    an OpOverload), for ops PyTorch has none for or whose kernel is replaced; the eager
    executor and fake tensors (torch.compile) get output shapes from it. Replacing one
    of PyTorch's own is silent (its override warning is expected here)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Oo]verrid")
        _meta_library().impl(op, fn, "Meta")


def meta_kernel(*ops):
    """Registers `fn` as the Meta kernel of each of `ops` in place of PyTorch's, for ops
    whose Meta kernel follows the CUDA kernel's rules where the CPU kernel, our oracle,
    accepts more or raises another error type; also in the tables the Python
    dispatcher and decompositions read. Returns `fn`."""
    from torch._decomp import meta_table

    def register(fn):
        for op in ops:
            meta_impl(op, fn)
            meta_table[op] = fn
            op.py_kernels[torch._C.DispatchKey.Meta] = fn
        return fn
    return register


def _python_meta(op):
    """The Python meta kernel fake tensors run for `op`: ours if registered, else the one
    `torch._meta_registrations.activate_meta` chose (the first table holding `op`)."""
    from torch._decomp import global_decomposition_table

    return next(table[op] for table in (global_decomposition_table[k] for k in
                                        ("meta", "post_autograd", "pre_autograd")) if op in table)


def meta_check(*ops):
    """Registers `check(*args, **kwargs)` to run before PyTorch's own Python meta kernel
    of each of `ops` (the decomposition `torch._meta_registrations` installed on the
    Meta key). For Scalar checks CPU's C++ kernels make and those Python kernels
    get wrong: they raise ValueError where CPU raises RuntimeError (add(int, int,
    alpha=2.5), masked_fill(int, m, nan)), or word as CUDA does. The eager executor runs
    the Meta kernel before the lowering; fake tensors (torch.compile) run the Python
    kernel of the op's Meta key or `meta_table`, which both get the check too. A check
    may return a dict of arguments (by schema name) that replace the caller's for
    PyTorch's kernel (Scalars read more strictly there than CPU reads them). Returns `check`."""
    from torch._decomp import meta_table

    def register(check):
        for op in ops:
            inner = _python_meta(op)

            def meta(*args, _inner=inner, _names=[a.name for a in op._schema.arguments], **kwargs):
                replaced = check(*args, **kwargs)
                if replaced:
                    args = list(args)
                    for name, value in replaced.items():
                        i = _names.index(name)
                        if i < len(args):
                            args[i] = value
                        else:
                            kwargs[name] = value
                return _inner(*args, **kwargs)

            meta_impl(op, meta)
            if op.py_kernels.get(torch._C.DispatchKey.Meta) is inner:
                op.py_kernels[torch._C.DispatchKey.Meta] = meta
            # Fake tensors prefer a Python meta kernel to a decomposition (which may
            # broadcast where CPU refuses): from `meta_table`.
            meta_table[op] = meta
        return check

    return register


#: OpOverload -> layout(*args, **kwargs): the layout of each output CPU's kernel writes
#: (None: the meta kernel's), where PyTorch's meta kernel cannot tell (`meta_layout`).
LAYOUTS: Dict[torch._ops.OpOverload, Callable] = {}

#: A layout (`meta_layout`): TensorIterator's, as CPU's elementwise kernels and
#: `empty_like(..., MemoryFormat::Preserve)` of dense inputs lay outputs out: the tensor
#: arguments' dims ordered by their strides (broadcast dims, stride 0, do not vote), so
#: a transposed or channels_last input gives a transposed or channels_last output; in
#: schema order, each `promoted` to their common dtype (`iterator_layout`).
ELEMENTWISE = "elementwise"


def meta_layout(*ops):
    """Registers `layout(*args, **kwargs)`, which gives the layout CPU's kernel writes
    each output of `ops` in, for kernels whose layout PyTorch's meta kernel gets wrong
    for CPU: it hangs on the backend CPU's kernel picks (convolution's mkldnn or slow
    path), or the Python reference it runs lays the output out otherwise than CPU's
    kernel allocates it. `layout` returns a list with, per output, None (as PyTorch's
    meta kernel lays it out), a `torch.memory_format`, `ELEMENTWISE`, a tuple of
    strides, or a function of the meta output giving its strides; or one such value for
    every output. The shared rules (`contiguous_layout`, `suggested_layout`,
    `preserved_layout`, `elementwise_layout`, `iterator_layout`) name the ATen allocations they stand
    for. The eager executor and the decomposition path lay new outputs out so
    (`laid_out`), and so do fake tensors on `neuron` in compiled graphs
    (`eager.meta_device`). Returns `layout`."""
    def register(layout):
        for op in ops:
            LAYOUTS[op] = layout
        return layout

    return register


#: out= OpOverload -> layout(*args, **kwargs): the memory format CPU's out= kernel
#: restrides each out tensor to whatever its strides (`out_layout`).
OUT_LAYOUTS: Dict[torch._ops.OpOverload, Callable] = {}


def out_layout(*ops):
    """Registers `layout(*args, **kwargs)` (the out= overload's arguments), which gives
    the memory format (per out tensor, or one for all; None: kept) that CPU's out=
    kernel of `ops` restrides its out tensors to even when they have the right shape:
    kernels that call `out.resize_(sizes, memory_format)` or `resize_as_(input,
    memory_format)` themselves. Other kernels keep the strides of an out tensor of the
    right shape (a structured kernel's `resize_out` restrides only what it resizes; the
    executor lays a resized out tensor out as the functional result). Returns
    `layout`."""
    def register(layout):
        for op in ops:
            OUT_LAYOUTS[op] = layout
        return layout

    return register


def contiguous_layout(*args, **kwargs):
    """CPU's kernel allocates its outputs contiguous whatever its input's layout:
    `at::empty(sizes, options)`, `empty_like(self, MemoryFormat::Contiguous)` or
    `LEGACY_CONTIGUOUS_MEMORY_FORMAT`, or it computes on `self.contiguous()`."""
    return torch.contiguous_format


def suggested_layout(input, *args, **kwargs):
    """CPU's kernel allocates its outputs in `input.suggest_memory_format()`:
    channels_last (3d) for such an input, contiguous for any other layout (a transposed
    one included)."""
    return torch._prims_common.suggest_memory_format(input)


def preserved_layout(like):
    """CPU's kernel allocates its output `at::empty_like(like)` (MemoryFormat::Preserve)
    and writes it without restriding: `like`'s strides if it is dense (transposed,
    channels_last), else its suggested memory format. A layout for `meta_layout` (a
    function of the meta output); an output of another shape (a reduced loss) keeps the
    meta kernel's strides."""
    def strides(out):
        if tuple(out.shape) != tuple(like.shape):
            return out.stride()
        return torch.empty_like(like, dtype=out.dtype, device="meta").stride()

    return strides


def elementwise_layout(*args, **kwargs):
    """CPU's kernel is a TensorIterator loop (or allocates with `empty_like(self)` of a
    dense input): its outputs take the tensor arguments' layout (`ELEMENTWISE`)."""
    return ELEMENTWISE


def elementwise_strides(shape, tensors) -> Tuple[int, ...]:
    """The strides TensorIterator gives an output of `shape` computed from `tensors`
    (broadcast to `shape`; those that do not broadcast are left out), in the order the
    kernel adds them to its iterator (the first operand whose strides order two dims
    decides them): PyTorch's model of its stride permutation
    (`compute_elementwise_output_strides`), asked with at least two operands so that a
    single non-dense input (a slice with a step) is ordered by its strides as
    TensorIterator orders it, not made contiguous."""
    from torch._prims_common import compute_elementwise_output_strides

    ops = []
    for t in tensors:
        try:
            ops.append(t.expand(shape))
        except RuntimeError:
            continue
    if len(shape) < 2 or not ops:
        return torch.empty(shape, device="meta").stride()
    return tuple(compute_elementwise_output_strides(*ops, ops[0]))


def promoted(tensor, dtype):
    """`tensor` as the operand CPU's TensorIterator orders dims by once it promotes its
    inputs to the common `dtype` (TensorIterator.cpp `compute_types`, on CPU with
    `promote_inputs_to_common_dtype`): an operand of another dtype is replaced by
    `tensor.to(dtype)` before the output's strides are computed, a copy laid out as
    `empty_like(tensor)` (its strides if dense; else its suggested memory format, so a
    broadcast (expanded) or sliced operand votes as a contiguous one)."""
    return tensor if tensor.dtype == dtype else torch.empty_like(tensor, dtype=dtype)


def common_dtype(tensors, result_dtype):
    """The common dtype of CPU's TensorIterator over `tensors` (`compute_common_dtype`:
    their promoted type, 0-dim operands of a lower category not raising it) for a
    result of `result_dtype`; integral operands of a floating result are promoted to it
    (`promote_integer_inputs_to_float`: true division, sin of an integer tensor, a
    Python float operand)."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    if all(t.dtype == result_dtype for t in tensors):  # nothing to promote (bit types have no promotion rules)
        return result_dtype
    dtype, _ = elementwise_dtypes(*tensors, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.NO_OPMATH)
    if not (dtype.is_floating_point or dtype.is_complex) and (result_dtype.is_floating_point
                                                               or result_dtype.is_complex):
        return result_dtype
    return dtype


def iterator_layout(*operands):
    """CPU's kernel is a TensorIterator over `operands`, in this order (its
    `add_const_input` calls, `borrowing_binary_op(out, a, b)`), which is not the
    schema's (threshold_backward's iterates over self, then grad_output): a layout for
    `meta_layout` giving the output `elementwise_strides` of the operands, each
    `promoted` to their `common_dtype`."""
    def strides(out):
        dtype = common_dtype(operands, out.dtype) if operands else out.dtype
        return elementwise_strides(out.shape, [promoted(t, dtype) for t in operands])

    return strides


def _tensors(values) -> list:
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(x for x in v if isinstance(x, torch.Tensor))
    return out


def _layout_of(op) -> Optional[Callable]:
    """`LAYOUTS[op]`; for an op without an entry tagged pointwise (CPU's kernels of
    these are TensorIterator loops), `elementwise_layout`: PyTorch's Python references
    of some lay the output out otherwise (copysign and floor_divide with a 0-dim
    operand come out contiguous)."""
    layout = LAYOUTS.get(op)
    if layout is None and torch.Tag.pointwise in op.tags:
        return elementwise_layout
    return layout


def laid_out(op, outs: list, args, kwargs) -> list:
    """`outs`, the meta outputs of `op` on meta `args`/`kwargs`, in the layouts
    `LAYOUTS[op]` gives (for pointwise ops without an entry, TensorIterator's; unchanged
    otherwise). A layout of an output with dims of size 0 or 1 has those dims' strides
    as a new tensor of that format has them (CPU's allocation), not as `.contiguous()`
    leaves them."""
    layout = _layout_of(op)
    if layout is None:
        return outs
    formats = layout(*args, **kwargs)
    if not isinstance(formats, (list, tuple)):
        formats = [formats] * len(outs)
    outs = list(outs)
    tensors = None
    for i, fmt in enumerate(formats):
        o = outs[i] if i < len(outs) else None
        if fmt is None or not isinstance(o, torch.Tensor):
            continue
        if fmt is ELEMENTWISE:
            if tensors is None:
                tensors = _tensors(list(args) + list(kwargs.values()))
            stride = tuple(iterator_layout(*tensors)(o))
        elif isinstance(fmt, tuple) or callable(fmt):  # strides, or a function of the meta output giving them
            stride = tuple(fmt(o)) if callable(fmt) else fmt
        else:
            outs[i] = torch.empty(o.shape, dtype=o.dtype, device=o.device, memory_format=fmt)
            continue
        if stride != tuple(o.stride()):
            outs[i] = torch.empty_strided(o.shape, stride, dtype=o.dtype, device=o.device)
    return outs
