"""CPU's errors for calls CPU refuses and a lowering would not.

Two paths ask CPU PyTorch, the oracle for which inputs raise and how:

- `raise_cpus_error`: a lowering that meets an input it does not handle (bitwise_not of
  a float tensor, a shift of a bool one) fails inside JAX with JAX's exception and words
  (TypeError, ValueError), or raises an error of its own that may not be the one CPU's
  kernel raises first. On that failure path only, the call runs on CPU copies of its
  arguments, and where CPU refuses it too, CPU's exception is raised in place of the
  lowering's.
- `check_dtypes`: a lowering is written once for every dtype JAX has, while CPU's kernel
  implements a list (`AT_DISPATCH_*`), and raises NotImplementedError ("\"lerp_kernel\"
  not implemented for 'Long'") for the rest: lerp of integers, gelu of them, the
  complex overloads of most activations and losses; a few kernels word it their own way
  ("Boolean inputs not supported for relu"), with the same type. No table of these lists
  exists outside the kernels, so the kernel is asked, once per op and signature, on
  small stand-ins (ones, zeros); where it raises NotImplementedError, the call itself
  runs on CPU copies (stand-ins can take a path real values do not) and CPU's error is
  raised.

The probes have no side effects: every tensor is copied or stood in for (CPU ones too,
so a written `out=` or in-place CPU argument is left alone), generators are left out,
CPU's random state is restored and warnings are not shown.
"""
from __future__ import annotations

import functools
import threading
from typing import Dict, Optional, Tuple

import torch
from torch._dispatch.python import no_python_dispatcher
from torch._subclasses.fake_tensor import is_fake, unset_fake_temporarily
from torch.utils._python_dispatch import _disable_current_modes

from .. import _extension
from ..runtime.quiet import python_warnings_hidden

# Largest total output, and inputs of real-shape stand-ins, (elements) of a probe: an
# argument such as a size list or `num_classes` can ask for any amount of memory, and a
# probe CPU accepts computes the whole call once per signature.
_ELEMENT_LIMIT = 1 << 18

#: Ops whose lowering takes dtypes CPU's kernel does not, as CUDA's does, because
#: libraries rely on them off the CPU: op -> why. The probe does not ask CPU about them.
BEYOND_CPU: Dict[torch._ops.OpOverload, str] = {}


def beyond_cpu(op: torch._ops.OpOverload, why: str) -> None:
    """Lists `op` in `BEYOND_CPU` with its reason."""
    BEYOND_CPU[op] = why


#: Ops whose CPU kernel reads out of bounds on one-element stand-ins, which the probe
#: asks with stand-ins of the real shapes only: `_embedding_bag` in max mode with
#: include_last_offset and a single offset (zero bags) crashes the process (a segfault
#: in PyTorch 2.14's CPU kernel), and any call with offsets shrinks to that.
_REAL_SHAPES_ONLY = frozenset({torch.ops.aten._embedding_bag.default,
                               torch.ops.aten._embedding_bag_forward_only.default})

# (op, argument signature) -> CPU's refusal of the stand-ins' dtypes, or None
_refusals: Dict[tuple, Optional[Tuple[type, str]]] = {}


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


def _call(op, values, convert):
    """Runs `op` on `convert`ed `values` (schema order) without side effects."""
    # Outside any dispatch mode: a compiled graph's fake tensor mode would make the CPU
    # stand-ins fake too; and outside the Python dispatcher AOTAutograd traces under,
    # which runs PyTorch's Python decompositions in place of CPU's kernels.
    with _disable_current_modes(), unset_fake_temporarily(), no_python_dispatcher(), python_warnings_hidden(), \
            torch.random.fork_rng(devices=[]), torch.no_grad():
        args, kwargs = [], {}
        for argument, value in zip(op._schema.arguments, values):
            if argument.kwarg_only:
                kwargs[argument.name] = convert(value)
            else:
                args.append(convert(value))
        # ATen's warnings bypass Python's filters (see the shim's without_warnings).
        return _extension.load().without_warnings(lambda: op(*args, **kwargs))



def raise_cpus_error(op: torch._ops.OpOverload, values) -> None:
    """Runs `op` (an ATen overload) on CPU copies of `values` (its arguments in schema
    order) and raises the exception CPU raises; returns if CPU accepts the call, or if
    `op` is not ATen's (custom kernels have no CPU oracle)."""
    if op.namespace != "aten":
        return
    try:
        _call(op, values, _copy)
    except Exception as cpu:  # noqa: BLE001 - whatever CPU raises is the error to raise
        raise cpu from None


def cpus_error(op: torch._ops.OpOverload, values) -> Optional[Tuple[type, str]]:
    """(type, message) of the error CPU raises for `op` (an ATen overload) on `values`
    (its arguments in schema order), None if CPU accepts the call: run on CPU copies,
    or, where the tensors are fake (torch.compile tracing), on stand-ins of their shapes
    and dtypes."""
    fake = any(is_fake(v) for v in values if isinstance(v, torch.Tensor))
    try:
        _call(op, values, (lambda v: _standin(v, "cpu", False)) if fake else _copy)
    except Exception as exc:  # noqa: BLE001 - whatever CPU raises is the answer
        return type(exc), str(exc)
    return None


def _tiny(shape) -> tuple:
    # Sizes of 1 broadcast as the real ones do; empty dims stay empty (a kernel may
    # return before dispatching on the dtype).
    return tuple(min(int(d), 1) for d in shape)


def _standin(value, device: str, shrink: bool, dtype=None):
    """A tensor of `value`'s dtype (or `dtype`), of its shape (`shrink`: at most one
    element per dim) on `device`, all ones (floating, complex) or zeros (integers,
    bool); lists element-wise; generators become None (the default one); anything else
    is kept. Ones keep linear algebra well defined (a 1x1 matrix of 1 is
    positive-definite); zeros are valid indices into any dim."""
    if isinstance(value, torch.Tensor):
        dtype = dtype or value.dtype
        fill = 1 if dtype.is_floating_point or dtype.is_complex else 0
        return torch.full(_tiny(value.shape) if shrink else tuple(value.shape), fill, dtype=dtype, device=device)
    if isinstance(value, (list, tuple)):
        return type(value)(_standin(v, device, shrink, dtype) for v in value)
    if isinstance(value, torch.Generator):
        return None
    if isinstance(value, torch.device):
        return torch.device(device)
    return value


def _signature(value, number_kind: bool):
    """What a probe's outcome may depend on: tensors' dtypes and which dims are empty or
    1; the kinds of numbers an argument takes as a number (a Scalar, float or complex:
    kernels dispatch on their kind, not their value), the values of all others
    (dims, sizes, modes)."""
    if isinstance(value, torch.Tensor):
        return (value.dtype, _tiny(value.shape))
    if isinstance(value, (list, tuple)):
        return tuple(_signature(v, number_kind) for v in value)
    if isinstance(value, torch.Generator):
        return None
    if isinstance(value, (bool, int, float, complex)):
        return type(value) if number_kind else (type(value), value)
    return value if isinstance(value, (str, torch.dtype, torch.layout, torch.memory_format)) else repr(value)


def _is_number(argument) -> bool:
    t = argument.type
    while isinstance(t, (torch.OptionalType, torch.ListType)):
        t = t.getElementType()
    return isinstance(t, (torch.NumberType, torch.FloatType, torch.ComplexType))


def _has_tensor(value) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_has_tensor(v) for v in value)
    return isinstance(value, torch.Tensor)


def _has_dtype(value, dtype) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_has_dtype(v, dtype) for v in value)
    return isinstance(value, torch.Tensor) and value.dtype == dtype


def _has_symbol(value) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_has_symbol(v) for v in value)
    if isinstance(value, torch.Tensor):
        return any(isinstance(d, torch.SymInt) for d in value.shape)
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _elements(result) -> int:
    if isinstance(result, torch.Tensor):
        return result.numel()
    if isinstance(result, (list, tuple)):
        return sum(_elements(r) for r in result)
    return 0


def _refusal_of_standins(op, values) -> Optional[Tuple[type, str]]:
    """CPU's dtype refusal (NotImplementedError, message) of the call on stand-ins, or
    None: stand-ins of at most one element per dim, or, where those do not fit the
    call's other arguments (a kernel size, `k`, a channel count), of the real shapes
    when the call is small (inputs and output). The meta kernel bounds the output first;
    where it refuses the call itself (no meta kernel, or one that words CPU's dtype
    refusal its own way), only the one-element stand-ins are asked. Ops in
    `_REAL_SHAPES_ONLY` skip the one-element stand-ins."""
    for shrink in (False,) if op in _REAL_SHAPES_ONLY else (True, False):
        if not shrink and (_elements(values) > _ELEMENT_LIMIT or _all_tensors_in(values, _EVERY_KERNELS_DTYPES)):
            return None
        try:
            size = _elements(_call(op, values, lambda v: _standin(v, "meta", shrink)))
        except Exception:  # noqa: BLE001 - the meta kernel refuses the call
            if shrink:
                size = 0
            else:  # it may refuse the dtype itself (replication_pad2d of bool): ask it of another
                size = _meta_size_in(op, values, _other_floating(values))
                if size is None:
                    return None
        if size > _ELEMENT_LIMIT:
            return None
        refusal = _outcome(op, values, shrink, None)
        if refusal is None:
            # A kernel may return before it dispatches on the dtype when its result is
            # empty (pdist of one row): then the real shapes decide.
            if shrink and size == 0 and not _empty_result(op, values):
                continue
            return None
        if refusal[0] is NotImplementedError:
            # A dtype refusal unless stand-ins of another floating dtype meet the very
            # same error: the dispatcher's "Could not run" for an op with no CPU
            # kernel, a stub's.
            return refusal if _outcome(op, values, shrink, _other_floating(values)) != refusal else None
        # any other error: the stand-ins do not fit; try the real shapes
    return None


#: Dtypes every CPU kernel that one-element stand-ins do not fit (convolutions, pools,
#: norms: AT_DISPATCH_FLOATING_TYPES and wider) implements: a call with only these
#: tensors skips the real-shape probe, which would compute the whole call on the CPU.
_EVERY_KERNELS_DTYPES = (torch.float32, torch.float64)


def _all_tensors_in(value, dtypes) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_all_tensors_in(v, dtypes) for v in value)
    return not isinstance(value, torch.Tensor) or value.dtype in dtypes


def _other_floating(values) -> torch.dtype:
    """A floating dtype that is not the call's float32 (float32 otherwise)."""
    return torch.float64 if _has_dtype(values, torch.float32) else torch.float32


def _meta_size_in(op, values, dtype) -> Optional[int]:
    """Elements of the result of the meta kernel on real-shape stand-ins of `dtype`, or
    None where it refuses those too."""
    try:
        return _elements(_call(op, values, lambda v: _standin(v, "meta", False, dtype)))
    except Exception:  # noqa: BLE001 - nothing bounds the output
        return None


def _empty_result(op, values) -> bool:
    """Whether the call's result is empty (or its meta kernel refuses it)."""
    try:
        return _elements(_call(op, values, lambda v: _standin(v, "meta", False))) == 0
    except Exception:  # noqa: BLE001 - the meta kernel refuses the call: nothing more to learn
        return True


def _outcome(op, values, shrink: bool, dtype):
    """None if CPU's kernel accepts stand-ins (of dtype `dtype`, when given, for every
    tensor), else (type, message) of its error."""
    try:
        _call(op, values, lambda v: _standin(v, "cpu", shrink, dtype))
    except Exception as exc:  # noqa: BLE001 - CPU's error is the outcome
        return type(exc), str(exc)
    return None


def refusal_of_dtypes(op: torch._ops.OpOverload, values) -> Optional[Tuple[type, str]]:
    """(NotImplementedError, CPU's message) where CPU's kernel of `op` (ATen overloads
    only) does not implement the dtypes of `values` (its arguments in schema order;
    tensors may be on any device, fake or meta), else None; asked once per op and
    signature: tensors' dtypes, which dims are empty, the kinds and values of all other
    arguments. Not asked: calls whose tensors have symbolic sizes, calls with no tensor
    argument (factories), ops in `BEYOND_CPU`, and backward kernels, which trust their
    inputs to come from their forward (it accepted the dtypes) and may read out of bounds
    on stand-ins."""
    if (op.namespace != "aten" or "backward" in op._schema.name or op in BEYOND_CPU or not _has_tensor(values)
            or _has_symbol(values)):
        return None
    key = (op,) + tuple(_signature(v, _is_number(a)) for v, a in zip(values, op._schema.arguments))
    if key not in _refusals:
        _refusals[key] = _refusal_of_standins(op, values)
    return _refusals[key]


def schema_values(op: torch._ops.OpOverload, args, kwargs) -> list:
    """A call's argument values in `op`'s schema order, defaults filled in."""
    return [args[i] if i < len(args) else kwargs.get(a.name, a.default_value if a.has_default_value() else None)
            for i, a in enumerate(op._schema.arguments)]


def checking_dtypes(op: torch._ops.OpOverload, kernel):
    """`kernel`, computing `op` from other ops (which take any dtype), preceded by
    `check_dtypes`."""
    @functools.wraps(kernel)
    def checked(*args, **kwargs):
        check_dtypes(op, schema_values(op, args, kwargs))
        return kernel(*args, **kwargs)

    return checked


def check_dtypes(op: torch._ops.OpOverload, values) -> None:
    """Raises CPU's error (type and message) for a call of `op` on `values` (schema
    order, real tensors) whose dtypes CPU's kernel does not implement (see
    `refusal_of_dtypes`): the call's CPU run on copies of them decides, as stand-ins can
    take a path real values do not. Returns where CPU accepts the call."""
    if refusal_of_dtypes(op, values) is not None:
        raise_cpus_error(op, values)


# CPU's refusal met while torch.compile traced fake tensors: the graph of that trace
# raises it when it runs, as eager raises it (Dynamo would wrap an error raised while
# compiling). The neuron backend clears it before each trace and takes it after.
_traced = threading.local()


def note_traced(refused: Tuple[type, str]) -> None:
    """Notes `refused` (exception type, message) for the graph being traced; the first
    note of a trace is kept."""
    if getattr(_traced, "refusal", None) is None:
        _traced.refusal = refused


def take_traced() -> Optional[Tuple[type, str]]:
    """The refusal noted since the last call (None if none), clearing it."""
    refused = getattr(_traced, "refusal", None)
    _traced.refusal = None
    return refused


def refuse(exc: Exception, tensor: torch.Tensor) -> None:
    """Raises `exc`, CPU's error for a call on `tensor`; a fake `tensor` (torch.compile
    tracing) notes it for the traced graph instead (`note_traced`)."""
    if is_fake(tensor):
        note_traced((type(exc), str(exc)))
        return
    raise exc
