"""What CPU PyTorch does with out= tensors whose dtype is not the functional result's.

ATen has no single rule. TensorIterator kernels compute in the common dtype and cast
into the out tensor when `c10::canCast` allows ("result type Float can't be cast to the
desired output type Long" otherwise); structured kernels' `resize_out` demands the dtype
their meta function chose ("Expected out tensor to have dtype float, but got double
instead"); kernels that take a result dtype (`sum(dtype=)`) take it from the out tensor
and compute in it; hand-written kernels check what they check (`index_select(): self and
result must have the same scalar type`), some only once they compute; and torchgen's out
wrappers for functional-only kernels (`Tag.generated`) compute the functional result and
`copy_arg` it, which demands the exact dtype. No table of this exists, and PyTorch's meta
kernels, several of them permissive Python references, do not say it either. So the CPU
kernel itself is asked, once per signature, on stand-ins: inputs are CPU tensors of the
real shapes and dtypes on a one-element storage (all strides 0; an argument the kernel
updates in place gets elements of its own), and

1. out tensors are empty tensors of the requested dtypes on a zero-byte storage that
   cannot grow: the kernel runs the dtype checks it makes before resizing its out
   tensors and stops at the resize, which most kernels (all structured ones) reach
   before computing anything;
2. if it got that far, out tensors of the call's shapes and strides (kernels choose
   their path by them, and resize empty ones themselves): the kernel runs to the end on
   the stand-ins, at the price of one CPU call, so that checks made later (torchgen's
   `copy_arg`, a kernel dispatching on the out dtype) run too.

An error that the same probe with out tensors of the functional result's dtypes does not
raise is CPU's answer for these dtypes; an error both raise depends on the stand-ins'
values, and the probe cannot tell. Probes write only into
their own stand-ins, draw no random numbers from the user's generator and show no
warnings.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .. import _extension
from ..runtime.quiet import python_warnings_hidden

#: The kernel accepts the out tensors' dtypes.
ACCEPT = "accept"
#: The probe could not tell (see the module docstring).
UNKNOWN = "unknown"

# CPU's error where step 1 stops: an out tensor's storage cannot grow.
_RESIZE = "Trying to resize storage that is not resizable"

# signature -> ACCEPT, UNKNOWN, or (exception type, message, raised past the resize) of
# CPU's error
_decisions: Dict[tuple, object] = {}


def check(op: torch._ops.OpOverload, values: Sequence, results: Sequence) -> Optional[str]:
    """Whether CPU's kernel of the out= overload `op` accepts this call's out tensors,
    when any of their dtypes is not its result's.

    values: the call's arguments in schema order (`neuron` or CPU tensors, lists of
    them, Python scalars, static arguments; the out= arguments, kwarg-only and written,
    a Tensor or a list of Tensors each); results: per out tensor (flattened over lists),
    the functional overload's result (a real or a meta tensor), i.e. what the out tensor
    would hold without a cast.

    Returns None when every out tensor has its result's dtype (or the results do not
    pair up with the out tensors), else ACCEPT or UNKNOWN; raises CPU's exception (same
    type and message) when CPU refuses the call for these dtypes. Source: ATen's out=
    contract as TensorIterator (`compute_types`), structured kernels (`resize_out`) and
    torchgen's out wrappers (`copy_arg`) apply it, observed rather than restated.
    """
    out_idx = [i for i, a in enumerate(op._schema.arguments)
               if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]
    outs = _flat_outs(values, out_idx)
    if len(results) != len(outs) or not all(isinstance(r, torch.Tensor) and isinstance(o, torch.Tensor)
                                            for r, o in zip(results, outs)):
        return None
    if all(r.dtype == o.dtype for r, o in zip(results, outs)):
        return None
    key = _signature(op, values, out_idx)
    decision = _decisions.get(key)
    if decision is None:
        decision = _decisions[key] = _decide(op, values, out_idx, [r.dtype for r in results])
    if isinstance(decision, tuple):
        exc_type, message, resized = decision
        if resized:
            # CPU raised past the resize (step 2): it leaves the out tensors resized,
            # warning where they had elements, as `at::native::resize_output` does.
            from torch._prims_common.wrappers import _maybe_resize_out

            for t, r in zip(outs, results):
                _maybe_resize_out(t, r.shape)
        raise exc_type(message)
    return decision


def _decide(op, values, out_idx, result_dtypes):
    outs = _flat_outs(values, out_idx)
    out_dtypes = [t.dtype for t in outs]
    # Step 2's out tensors have the call's own shapes and strides: kernels choose their
    # path by them (lstsq computes into out tensors it resized itself, but into
    # temporaries of its own dtypes, cast on the copy, when given ones of another shape).
    geometry = [(tuple(t.shape), tuple(t.stride())) for t in outs]
    for shapes in (None, geometry):  # the two steps of the module docstring
        got = _probe(op, values, out_idx, out_dtypes, shapes)
        if got is None or (shapes is None and got == (RuntimeError, _RESIZE)):
            continue  # no dtype error up to where this step stops
        if got == _probe(op, values, out_idx, result_dtypes, shapes):
            return UNKNOWN  # the stand-ins' values, not the dtypes, made it fail
        return got + (shapes is not None,)
    return ACCEPT


def _probe(op, values, out_idx, out_dtypes, shapes) -> Optional[Tuple[type, str]]:
    """Runs CPU's kernel of `op` on stand-ins: None if it returned, else (type, message)
    of its error."""
    dtypes = iter(out_dtypes)
    shape_of = iter(shapes) if shapes is not None else None

    def out():
        dtype = next(dtypes)
        if shape_of is None:
            return torch.empty(0, dtype=dtype).set_(_fixed_storage(), 0, (0,), (1,))
        shape, stride = next(shape_of)
        t = torch.empty_strided(shape, stride, dtype=dtype)
        t.untyped_storage().fill_(0)
        return t

    schema = op._schema.arguments
    args: List = []
    for i, (v, a) in enumerate(zip(values, schema)):
        if i in out_idx:
            args.append(out() if isinstance(v, torch.Tensor) else [out() for _ in v])
        elif a.alias_info is not None and a.alias_info.is_write and isinstance(v, torch.Tensor):
            args.append(torch.ones(v.shape, dtype=v.dtype))  # updated in place: elements of its own
        else:
            args.append(_standin(v))
    pos = [v for v, a in zip(args, schema) if not a.kwarg_only]
    kw = {a.name: v for v, a in zip(args, schema) if a.kwarg_only}
    # fork_rng: a random op's probe draws from CPU's default generator, then restores it.
    # ATen's warnings bypass Python's filters (see the shim's without_warnings); Python
    # ones (a kernel written in Python) do not.
    with python_warnings_hidden(), torch.random.fork_rng(devices=[]), torch.no_grad():
        try:
            _extension.load().without_warnings(lambda: op(*pos, **kw))
        except Exception as exc:  # noqa: BLE001 - CPU's error is what the probe reports
            return type(exc), str(exc)
    return None


# Largest matrix (elements) a floating stand-in materializes (see `_standin`).
_MATRIX_LIMIT = 1 << 20


def _standin(v):
    """A CPU tensor of `v`'s shape and dtype whose elements all read one stored 1 (lists
    element-wise); generators become None (CPU's default one); anything else is kept.
    A floating or complex tensor of 2 or more dims is instead ones plus the identity in
    its last two dims (expanded over the batch dims): every element still a positive
    1 or 2, but each matrix of full rank (and positive-definite when square), so that
    linear algebra kernels take the path real data takes (a rank-1 all-ones matrix
    sends lstsq's gels into its rank-deficient error before its out= dtype checks)."""
    if isinstance(v, torch.Tensor):
        if (v.dim() >= 2 and (v.dtype.is_floating_point or v.dtype.is_complex)
                and v.shape[-2] * v.shape[-1] <= _MATRIX_LIMIT):
            m, n = v.shape[-2:]
            wide = torch.complex128 if v.dtype.is_complex else torch.float64  # float8 types cannot add
            return (torch.ones(m, n, dtype=wide) + torch.eye(m, n, dtype=wide)).to(v.dtype).expand(v.shape)
        return torch.ones((), dtype=v.dtype).expand(v.shape)
    if isinstance(v, (list, tuple)):
        return type(v)(_standin(x) for x in v)
    if isinstance(v, torch.Generator):
        return None
    if isinstance(v, torch.device) and v.type != "cpu":
        return torch.device("cpu")
    return v


def _fixed_storage() -> torch.UntypedStorage:
    """A zero-byte storage that raises when asked to grow (NumPy owns its memory)."""
    return torch.from_numpy(np.empty(0, np.uint8)).untyped_storage()


def _flat_outs(values, out_idx) -> List[torch.Tensor]:
    outs = []
    for i in out_idx:
        v = values[i]
        outs.extend([v] if isinstance(v, torch.Tensor) else v)
    return outs


def _is_scalar(arg) -> bool:
    """Whether a schema argument is a Scalar, float or complex, or a Tensor (which a
    Python number reaches as one: a wrapped number), or an optional or list of them."""
    t = arg.type
    while isinstance(t, (torch.OptionalType, torch.ListType)):
        t = t.getElementType()
    return isinstance(t, (torch.NumberType, torch.FloatType, torch.ComplexType, torch.TensorType))


def _signature(op, values, out_idx) -> tuple:
    """What CPU's decision can depend on: the op, each tensor's dtype, whether it is 0-dim
    (type promotion treats those as scalars) and on the host, the types of Scalar
    arguments and wrapped numbers (promotion looks at their kinds, not their values),
    the values of all other arguments (`out_int32=True` asks for an int32 out
    tensor), and the out tensors' dtypes, shapes and strides (step 2 runs on them)."""
    def part(v, scalar):
        if isinstance(v, torch.Tensor):
            return (v.dtype, v.dim() == 0, v.device.type == "cpu")
        if isinstance(v, (list, tuple)):
            return tuple(part(x, scalar) for x in v)
        if isinstance(v, torch.Generator):
            return None
        return type(v) if scalar else (type(v), v)  # 1 == 1.0 == True, yet they are other kinds

    def out_part(v):  # step 2 runs on out tensors of the call's geometry
        if isinstance(v, torch.Tensor):
            return (v.dtype, tuple(v.shape), tuple(v.stride()))
        return tuple(out_part(x) for x in v)

    return (op,) + tuple(
        ("out", out_part(v)) if i in out_idx else part(v, _is_scalar(a))
        for i, (v, a) in enumerate(zip(values, op._schema.arguments)))
