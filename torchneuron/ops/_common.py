"""Helpers shared by lowerings: PyTorch's type promotion and dim handling in JAX terms.

Inside a trace, a Python number argument (a "wrapped number" in ATen) arrives as a
weakly typed JAX scalar or a Python number; a 0-dim tensor arrives as a strongly typed
0-dim array. `result_type` applies ATen's rules to these (at::native::result_type):
dimensioned tensors decide the dtype unless a 0-dim tensor or a number is of a higher
category (bool < integer < floating < complex), and numbers take the default dtype
of their category.
"""
from __future__ import annotations

import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax
from jax._src import dtypes as jax_dtypes

from ..runtime import dtypes as dt
from .registry import context


def _category(d) -> int:
    d = jnp.dtype(d)
    if d == jnp.bool_:
        return 0
    if jnp.issubdtype(d, jnp.integer):
        return 1
    if jnp.issubdtype(d, jnp.floating):
        return 2
    return 3


def is_number(x) -> bool:
    """A Python number or a weakly typed JAX scalar (an ATen wrapped number)."""
    if isinstance(x, (bool, int, float, complex)):
        return True
    return getattr(x, "weak_type", False) or jax_dtypes.is_weakly_typed(x)


def default_float():
    return dt.to_jax(torch.get_default_dtype())


def _number_dtype(x):
    if isinstance(x, bool):
        return jnp.dtype(jnp.bool_)
    if isinstance(x, int):
        return jnp.dtype(jnp.int64)
    if isinstance(x, float):
        return default_float()
    if isinstance(x, complex):
        return jnp.dtype(jnp.complex128) if default_float() == jnp.float64 else jnp.dtype(jnp.complex64)
    c = _category(x.dtype)
    return [jnp.dtype(jnp.bool_), jnp.dtype(jnp.int64), default_float(),
            jnp.dtype(jnp.complex128) if default_float() == jnp.float64 else jnp.dtype(jnp.complex64)][c]


def promote_types(a, b):
    """torch.promote_types on JAX dtypes."""
    if a is None:
        return b
    if b is None:
        return a
    return dt.to_jax(torch.promote_types(dt.to_torch(a), dt.to_torch(b)))


def _combine(higher, lower):
    if higher is None:
        return lower
    if lower is None:
        return higher
    ch, cl = _category(higher), _category(lower)
    if ch == 3:
        return higher
    if cl == 3:
        if ch == 2:
            return promote_types(higher, jnp.dtype(jnp.complex64))
        return lower
    if ch == 2:
        return higher
    if higher == jnp.bool_ or cl == 2:
        return promote_types(higher, lower)
    return higher


def _priorities(args):
    """(dimensioned tensors', 0-dim tensors', numbers') promoted dtypes of `args`."""
    dim = zero = wrapped = None
    for x in args:
        if x is None:
            continue
        if is_number(x):
            wrapped = promote_types(wrapped, _number_dtype(x))
        elif jnp.ndim(x) == 0:
            zero = promote_types(zero, jnp.asarray(x).dtype)
        else:
            dim = promote_types(dim, jnp.asarray(x).dtype)
    return dim, zero, wrapped


def result_type(*args):
    """ATen's result type of tensors (JAX arrays) and numbers; None entries are skipped.
    Where ATen's is complex32 or bcomplex32, which JAX lacks, complex64 (see
    `complex_half`)."""
    dim, zero, wrapped = _priorities(args)
    return _combine(dim, _combine(zero, wrapped))


_HALF_FLOATS = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))


def complex_half(*args):
    """float16 or bfloat16 where ATen's result type of `args` is its complex counterpart
    (complex32, bcomplex32), else None. ATen's combine_categories gives a floating
    type of higher priority meeting a complex one the floating type's complex
    counterpart: a half tensor with a complex number or 0-dim tensor (`x_half == 1j`)
    computes in complex32; `result_type` answers complex64, and the operands' parts
    are then to be rounded to the half type (`round_complex_half`)."""
    dim, zero, wrapped = _priorities(args)
    half = zero if zero in _HALF_FLOATS and wrapped is not None and _category(wrapped) == 3 else None
    if dim is None:
        return half
    inner = _combine(zero, wrapped)
    if _category(dim) == 2:
        return dim if dim in _HALF_FLOATS and inner is not None and _category(inner) == 3 else None
    return half if _category(dim) < 2 else None  # a bool or integer dim tensor yields to the complex


def round_complex_half(x, half):
    """`x` (a complex64/complex128 array) as ATen converts it to complex32/bcomplex32
    (`half` being float16/bfloat16), in complex64: through complex<float> (c10's
    static_cast_with_inter_type), then each part rounded to `half`."""
    x = x.astype(jnp.complex64)
    return lax.complex(jnp.real(x).astype(half).astype(jnp.float32), jnp.imag(x).astype(half).astype(jnp.float32))


def cast(x, dtype):
    """`x` (array or number) as an array of `dtype`. A Python int wraps into an integer
    `dtype` as C++'s conversion does (-1 -> uint8 255: `threshold(uint8, -1, 0)`). A
    Python complex into a real `dtype` is read as c10's `Scalar::to` reads it (once
    `check_scalar` has passed it): its real part, or for bool whether it is nonzero."""
    if not isinstance(x, (bool, int, float, complex)):
        return jnp.asarray(x).astype(dtype)
    if isinstance(x, complex) and not jnp.issubdtype(dtype, jnp.complexfloating):
        x = x != 0 if jnp.dtype(dtype) == jnp.bool_ else x.real
    if isinstance(x, int) and not isinstance(x, bool) and jnp.issubdtype(dtype, jnp.integer):
        bits = jnp.dtype(dtype).itemsize * 8
        x &= (1 << bits) - 1
        if jnp.issubdtype(dtype, jnp.signedinteger) and x >> (bits - 1):
            x -= 1 << bits
    return jnp.asarray(x, dtype)


def is_float(d) -> bool:
    return _category(d) >= 2


def convert(x, dtype):
    """`x` (an array) converted to `dtype` as ATen's CPU conversions (static_cast, x86)
    do, where XLA's convert saturates: floating -> integer truncates toward zero to a
    32-bit integer (64-bit for int64 and uint32 targets) and wraps to `dtype` (-1.5 ->
    uint8 255, 300.7 -> uint8 44); NaN and values outside that integer's range become
    its minimum (cvttss2si's "integer indefinite"). Complex -> real keeps the real part.
    To float8_e4m3fn, which has no infinity, values beyond its range (infinities too)
    saturate to +-448 as ATen's conversion does, where XLA's gives NaN. A bool array
    converted to a floating or complex type stays a factor of any product with it."""
    dtype = jnp.dtype(dtype)
    if x.dtype == jnp.bool_ and jnp.issubdtype(dtype, jnp.inexact):
        # XLA's simplifier turns a product with a converted predicate into a select,
        # which gives 0 where IEEE arithmetic, and CPU, give NaN (inf * False): behind a
        # barrier the converted mask stays a factor, in eager and compiled graphs alike.
        return lax.optimization_barrier(x.astype(dtype))
    if dtype == jnp.float8_e4m3fn and x.dtype != dtype and x.dtype != jnp.bool_:
        finite = float(jnp.finfo(dtype).max)
        return jnp.clip(jnp.real(x), -finite, finite).astype(dtype)  # NaN stays NaN
    if not (jnp.issubdtype(dtype, jnp.integer) and is_float(x.dtype)):
        return x.astype(dtype)
    via = jnp.dtype(jnp.int32 if dtype.itemsize <= 4 and dtype != jnp.uint32 else jnp.int64)
    lo = float(jnp.iinfo(via).min)  # -2**31 or -2**63: exact in every floating type
    t = jnp.trunc(jnp.real(x))
    t = jnp.where((t >= lo) & (t < -lo), t, lo)  # NaN compares false
    return t.astype(via).astype(dtype)


def acc_type(d):
    """Accumulation dtype ATen uses on CPU for reductions of `d` (half types -> float32)."""
    d = jnp.dtype(d)
    if d in (jnp.float16, jnp.bfloat16):
        return jnp.dtype(jnp.float32)
    return d


def kernel_acc_type(d):
    """`at::acc_type<d, is_cuda>`, the dtype ATen's kernels accumulate sums of `d` in,
    for the device neuron runs on: on XLA:CPU, CPU's (float32 in double, half types in
    float32), so that sums round as CPU PyTorch's do; on accelerators, CUDA's (float32
    in float32), whose float64 is emulated or missing."""
    from ..runtime import pjrt  # the PJRT client starts on first use, not on import

    d = jnp.dtype(d)
    if d == jnp.float32:
        return jnp.dtype(jnp.float64 if pjrt.platform() == "cpu" else jnp.float32)
    return acc_type(d)


# c10's names of scalar types in "value cannot be converted to type X without overflow".
_CONVERT_NAMES = {
    jnp.dtype(jnp.uint8): "uint8_t", jnp.dtype(jnp.int8): "int8_t", jnp.dtype(jnp.int16): "int16_t",
    jnp.dtype(jnp.int32): "int", jnp.dtype(jnp.int64): "int64_t", jnp.dtype(jnp.float16): "c10::Half",
    jnp.dtype(jnp.bfloat16): "c10::BFloat16", jnp.dtype(jnp.float32): "float", jnp.dtype(jnp.float64): "double",
    jnp.dtype(jnp.complex64): "c10::complex<float>", jnp.dtype(jnp.complex128): "c10::complex<double>",
    jnp.dtype(jnp.uint16): "uint16_t", jnp.dtype(jnp.uint32): "uint32_t", jnp.dtype(jnp.uint64): "uint64_t",
}
# A Python int or float Scalar of an eager call is a dynamic argument of its executable,
# so that one executable serves every value; `check_scalar` records its check on the
# entry, and it is made on the Python value before each run (in C++ on the hot path):
# it raises at the call, as on CPU, and keeps the call on the C++ eager path. Other
# traced floating Scalars (complex ones into complex types) of eager executables (values
# computed in the trace) converted to these types are not checked on the device: a
# device-side check would take the call off the C++ eager path. float64 and complex128
# hold every double. Compiled graphs check them on the device, and Python-number Scalars
# (compiled graphs' constants, static arguments) are checked at the trace.
_UNCHECKED_TRACED_FLOAT = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float32), jnp.dtype(jnp.float64),
                           jnp.dtype(jnp.complex128))


def _overflows(v, kind: int, dtype, xp):
    """c10's `overflows<To, From>` of Scalar `v` of category `kind` (1 integer, 2
    floating, 3 complex) into `dtype`, measured on CPU: integers may wrap into unsigned
    types from as low as -max; floats must be finite and in [lowest, max + 1) for
    integer types, in [lowest, max] (or infinite or NaN) for floating types; complex ->
    real needs a zero imaginary part. `xp` is math for Python numbers or jnp for traced
    values."""
    dtype = jnp.dtype(dtype)
    if kind == 3:
        re, im = xp.real(v), xp.imag(v)
        imag_bad = (im != 0) if not jnp.issubdtype(dtype, jnp.complexfloating) else _overflows(im, 2, dtype, xp)
        return _overflows(re, 2, dtype, xp) | imag_bad
    if jnp.issubdtype(dtype, jnp.complexfloating):
        dtype = jnp.dtype(jnp.float32 if dtype == jnp.complex64 else jnp.float64)
    if jnp.issubdtype(dtype, jnp.integer):
        info = jnp.iinfo(dtype)
        lo, hi = int(info.min), int(info.max)
        if kind == 1:
            if lo == 0:
                return (v > hi) | (v < -hi)
            return (v < lo) | (v > hi)
        return xp.logical_not((v >= float(lo)) & (v < float(hi) + 1))  # NaN compares false: overflows
    lo, hi = float(jnp.finfo(dtype).min), float(jnp.finfo(dtype).max)
    return xp.isfinite(v) & ((v < lo) | (v > hi))  # infinities and NaN convert


def check_scalar(value, dtype, negated: bool = False) -> None:
    """CPU's `Scalar::to<T>()` (c10::checked_convert) of a Scalar argument converted to
    `dtype`: RuntimeError "value cannot be converted to type uint8_t without overflow"
    for `uint8_tensor.fill_(300)`, `masked_fill(m, 1e5)` on float16, ... (CPU checks
    these; `uint8_tensor + 300` it does not). A Python number is checked now; a Python
    number an eager executable takes as a dynamic argument on the host before each run
    (`Context.scalar_args`); another traced Scalar on the device, raising at the op or
    the next synchronization point (see _UNCHECKED_TRACED_FLOAT for those left
    unchecked). A 0-dim tensor value (masked_fill.Tensor) is checked the same way, as
    CPU converts its `item()`. `negated`: CPU converts -value (sub's alpha: CPU's sub
    adds with -alpha, so int32 `sub(a, b, alpha=2**31)` passes, alpha=-2**31 raises)."""
    dtype = jnp.dtype(dtype)
    if dtype == jnp.bool_ or value is None:
        return  # every Scalar converts to bool
    message = f"value cannot be converted to type {_CONVERT_NAMES.get(dtype, dtype.name)} without overflow"
    if isinstance(value, (bool, int, float, complex)):
        kind = 0 if isinstance(value, bool) else 1 if isinstance(value, int) else 2 if isinstance(value, float) else 3
        if kind and _overflows(-value if negated else value, kind, dtype, _PyMath):
            raise RuntimeError(message)
        return
    try:
        eager_args = context().scalar_args
    except RuntimeError:  # outside a trace
        eager_args = None
    position = eager_args.get(id(value)) if eager_args is not None else None
    value = jnp.asarray(value)
    kind = _category(value.dtype)
    if dtype in (jnp.uint32, jnp.uint64):
        return  # their bounds do not fit the traced int64/float64 comparisons; rare types
    if kind == 0 or (kind == 1 and (dtype == jnp.int64 or (is_float(dtype) and dtype != jnp.float16))):
        return  # cannot overflow
    if kind == 2 and dtype in (jnp.float64, jnp.complex128):
        return  # holds every double
    if position is not None and kind in (1, 2):
        if not context().checks:
            # A Python int or float argument of an eager executable: checked on the host
            # before each run (OpKernel._run; csrc/eager.cpp on the hot path), raising at
            # the call as CPU does, with the executable kept on the C++ path.
            real = jnp.dtype(jnp.float32) if dtype == jnp.complex64 else dtype
            info = jnp.finfo(real) if is_float(real) else jnp.iinfo(real)
            lo, hi = (float(info.min), float(info.max)) if is_float(real) else (int(info.min), int(info.max))
            if negated and lo != 0:  # -value in [lo, hi]: value in [-hi, -lo] (unsigned types are symmetric)
                lo, hi = -hi, -lo
            context().host_checks.append((position, lo, hi, message, dtype, negated))
            return
        # else a check CPU makes first runs on the device (int8 ** -129 raises "Integers
        # to negative integer powers"): this one follows it there, in CPU's order.
    elif eager_args is not None and dtype in _UNCHECKED_TRACED_FLOAT and (
            kind == 2 or (kind == 3 and jnp.issubdtype(dtype, jnp.complexfloating))):
        return
    if kind >= 2:  # in double: float64's bounds would not fit a float32 value's type
        value = value.astype(jnp.complex128 if kind == 3 else jnp.float64)
    if negated:
        value = -value
    context().check(jnp.logical_not(_overflows(value, kind, dtype, jnp)), RuntimeError, message)


def scalar_to(value, dtype):
    """A Scalar argument as CPU's kernel reads it with `Scalar::to<T>()` for `dtype`:
    checked as `check_scalar` does, then, for a real `dtype`, a complex value's real
    part (its imaginary part is zero once the check passed: `addmm(..., beta=0j)` on
    float tensors computes, `alpha=1j` raises), and for bool whether it is nonzero (c10
    converts 1j to true). Python numbers stay Python numbers."""
    check_scalar(value, dtype)
    if value is None or jnp.issubdtype(jnp.dtype(dtype), jnp.complexfloating):
        return value
    boolean = jnp.dtype(dtype) == jnp.bool_
    if isinstance(value, complex):
        return value != 0 if boolean else value.real
    if not isinstance(value, (bool, int, float)) and jnp.iscomplexobj(value):
        return value != 0 if boolean else jnp.real(value)
    return value


class _PyMath:
    """`_overflows`'s math on Python numbers."""

    real = staticmethod(lambda v: v.real)
    imag = staticmethod(lambda v: v.imag)
    logical_not = staticmethod(lambda v: not v)
    isfinite = staticmethod(math.isfinite)


def _exact(x):
    return x


def half_rounding(dtype):
    """The rounding of one arithmetic operation of ATen's CPU kernel in `dtype`: for
    float16/bfloat16 (Vectorized<Half>/<BFloat16> compute each operation in float32 and
    round to the half type) a rounding to that type's bits in float32; identity
    otherwise. `lax.reduce_precision` rounds normal numbers (XLA keeps it, where it may
    fold a convert pair away under excess precision) but flushes subnormals to zero, so
    float16's subnormals are rounded to multiples of 2**-24 here (exact scalings by
    powers of two); bfloat16's are float32's own."""
    dtype = jnp.dtype(dtype)
    if dtype not in (jnp.float16, jnp.bfloat16):
        return _exact
    info = jnp.finfo(dtype)

    def r(x):
        y = lax.reduce_precision(x, exponent_bits=info.nexp, mantissa_bits=info.nmant)
        if dtype != jnp.float16:
            return y
        sub = jnp.round(x * 2.0 ** 24) * 2.0 ** -24  # round half to even, as the conversion
        return jnp.where(jnp.abs(x) < 2.0 ** -14, sub, y)

    return r


def true_divide(a, b):
    """a / b as IEEE division rounds it, as CPU's kernels divide (same shapes and dtypes
    as `/`). XLA's algebraic simplifier rewrites a division by a broadcast (a scalar, a
    constant, a row) into a multiplication by the reciprocal, one ulp off for about a
    third of the quotients, with no flag to turn it off (jaxlib 0.10.2); behind an
    optimization barrier the broadcast denominator stays a divisor."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    if not jnp.issubdtype(jnp.result_type(a, b), jnp.inexact):
        return a / b
    shape = jnp.broadcast_shapes(a.shape, b.shape)
    return a / lax.optimization_barrier(jnp.broadcast_to(b, shape))


_HALF_TYPES = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))
# c10's ScalarType names, as ATen's dtype errors word them.
_SCALAR_TYPE_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
                      "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
                      "bool": "Bool", "complex64": "ComplexFloat", "complex128": "ComplexDouble"}


def scalar_type_name(dtype) -> str:
    """c10's name of a JAX or torch dtype ('Long' for int64)."""
    name = jnp.dtype(dt.TORCH_TO_JAX[dtype] if isinstance(dtype, torch.dtype) else dtype).name
    return _SCALAR_TYPE_NAMES.get(name, name)


def not_implemented_for(kernel: str, dtype) -> NotImplementedError:
    """CPU's refusal of `dtype` by the AT_DISPATCH of `kernel` (the name it gives)."""
    return NotImplementedError(f'"{kernel}" not implemented for \'{scalar_type_name(dtype)}\'')


def cpu_kernel_lacks_half(kernel: str):
    """Decorates a lowering whose op's CPU kernel has no float16/bfloat16 case (its
    AT_DISPATCH covers float and double only: the special functions, zeta, cdist):
    a half result type raises CPU's NotImplementedError('"<kernel>" not implemented for
    'Half''), where XLA would compute it. The result type is the dtype CPU dispatches
    on (TensorIterator's common dtype, the input's for cdist)."""
    import functools

    def wrap(fn):
        @functools.wraps(fn)
        def lower(*args, **kwargs):
            dtype = jnp.dtype(context().out().dtype)
            if dtype in _HALF_TYPES:
                raise not_implemented_for(kernel, dtype)
            return fn(*args, **kwargs)
        return lower

    return wrap
