"""Elementwise lowerings: arithmetic, comparisons, logic, unary math, activations.

Arithmetic computes in the output dtype PyTorch chose (`context().out_dtype()`), so
type promotion is exactly ATen's; comparisons compute in the promoted input type.
Half-precision inputs compute in float32 and round once, as ATen's CPU kernels do.
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._common import (_category, cast, check_scalar, complex_half, convert, cpu_kernel_lacks_half, half_rounding, is_float,
                      is_number, result_type, round_complex_half, scalar_to, true_divide)
from .registry import LOWERINGS, context, lowering, meta_check

aten = torch.ops.aten

_HALF = (jnp.float16, jnp.bfloat16)


def _out():
    return context().out_dtype()


def _compute(dtype):
    return jnp.dtype(jnp.float32) if jnp.dtype(dtype) in _HALF else jnp.dtype(dtype)


def _operands_in_half(*positions, tensors_only=()):
    """For a lowering of a TensorIterator op: with a float16/bfloat16 result, the
    arguments at `positions` (Python numbers, 0-dim tensors of a wider type, integer
    tensors) rounded to that dtype first. CPU's TensorIterator casts every input to the
    common dtype before the kernel computes in float32, so `x_half + 0.1` adds half(0.1)
    and `fmod(x_half, 0.1)` divides by it. Mul and div read a one-element second
    operand (a number, a 0-dim or 1-element tensor: `is_cpu_scalar`) at full precision
    (`original_scalar_value`): positions in `tensors_only` are rounded only when they
    hold more than one element."""
    def wrap(fn):
        @functools.wraps(fn)
        def rounded(*args, **kwargs):
            out = _out()
            if out in _HALF:
                args = tuple(_in_dtype(a, out) if i in positions or (i in tensors_only and jnp.size(a) > 1) else a
                             for i, a in enumerate(args))
            return fn(*args, **kwargs)
        return rounded
    return wrap


def _in_dtype(x, dtype):
    """`x` (array or number; None kept) as an array of `dtype`, unless it is one."""
    if x is None or (isinstance(x, jax.Array) and x.dtype == dtype):
        return x
    return cast(x, dtype)


def _alpha(x, alpha):
    return x if alpha is None or (isinstance(alpha, (int, float)) and alpha == 1) else x * alpha


def _alpha_kind_check(out_kind: int, alpha) -> None:
    """CPU's alpha_check (BinaryOps.h) for a result of category `out_kind` (0 bool,
    1 integer, 2 floating, 3 complex): a bool alpha needs a bool result, a floating one
    a floating or complex result, a complex one a complex result. A traced alpha's kind
    is its JAX dtype (the cache key holds the Python type, so each kind is traced)."""
    kind = _category(jnp.asarray(alpha).dtype) if not isinstance(alpha, (bool, int, float, complex)) else \
        0 if isinstance(alpha, bool) else 1 if isinstance(alpha, int) else 2 if isinstance(alpha, float) else 3
    if kind == 0 and out_kind != 0:
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if kind >= 2 and out_kind < 2:
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    if kind == 3 and out_kind != 3:
        raise RuntimeError("For non-complex input tensors, argument alpha must not be a complex number.")


def _half_alpha(alpha, out):
    """add/sub's alpha as CPU's half-type kernels read it: rounded to the half dtype."""
    if out not in _HALF or (isinstance(alpha, (int, float)) and alpha == 1):
        return alpha
    return cast(alpha, out)


def _check_alpha(out, alpha, negated=False):
    """add/sub's `alpha`: CPU's alpha_check, then it must fit the result type (sub's
    negated: CPU's sub adds with -alpha, converting -alpha)."""
    _alpha_kind_check(_category(out), alpha)
    check_scalar(alpha, out, negated)


@meta_check(aten.add.Tensor, aten.add.out, aten.sub.Tensor, aten.sub.out, aten.rsub.Tensor, aten.rsub.Scalar)
def _alpha_meta_check(self, other, alpha=1, **_):
    """PyTorch's Python meta kernels of these raise ValueError for a floating alpha on
    integers; CPU's alpha_check raises RuntimeError first. (Symbolic alphas of traced
    graphs are left to PyTorch.)"""
    if not isinstance(alpha, (bool, int, float, complex)):
        return
    dtype = torch.result_type(self, other)
    _alpha_kind_check(0 if dtype == torch.bool else 3 if dtype.is_complex else 2 if dtype.is_floating_point else 1,
                      alpha)


_SUB_BOOLS = "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` " \
    "operator instead."
_SUB_BOOL = "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a " \
    "mask, use the `~` or `logical_not()` operator instead."


@meta_check(aten.sub.Tensor, aten.sub.out, aten.sub_.Tensor, aten.rsub.Tensor, aten.rsub.Scalar)
def _sub_meta_check(self, other, *_, **__):
    """CPU's sub_check, before its alpha check: a bool operand, a Python True included
    (`x - True`), raises NotImplementedError; PyTorch's meta kernels let it through."""
    bools = [isinstance(v, bool) or (isinstance(v, torch.Tensor) and v.dtype == torch.bool) for v in (self, other)]
    if all(bools):
        raise NotImplementedError(_SUB_BOOLS)
    if any(bools):
        raise NotImplementedError(_SUB_BOOL)


@lowering(aten.add.Tensor, aten.add.Scalar)
@_operands_in_half(0, 1)
def add(self, other, alpha=1):
    out = _out()
    _check_alpha(out, alpha)
    c = _compute(out)
    alpha = _half_alpha(alpha, out)
    if out == jnp.bool_:  # self + alpha * other in bool arithmetic: self or (alpha and other)
        return jnp.logical_or(cast(self, jnp.bool_), _alpha(cast(other, jnp.bool_), alpha))
    if jnp.issubdtype(c, jnp.complexfloating):
        return (cast(self, c) + _complex_alpha_times(cast(other, c), alpha)).astype(out)
    return (cast(self, c) + _alpha(cast(other, c), alpha)).astype(out)


def _complex_alpha_times(other, alpha):
    """alpha * other as CPU's complex add computes it (ATen/native/ufunc/add.h: self +
    alpha * other, Vectorized's fmadd(other, alpha, self)): alpha as a complex number
    and c10's product (`c_mul`) even for alpha = 1, so an infinite part of `other` gives
    NaN in the other part ((1 + 0i)(inf + 0i) = inf + NaN i: x + inf is inf + NaN i on
    CPU). sub passes -alpha, as CPU's sub does (-1 + 0i for alpha = 1)."""
    if isinstance(alpha, (bool, int, float, complex)):
        alpha = complex(alpha)
    return c_mul(cast(alpha, other.dtype), other)


@lowering(aten.sub.Tensor, aten.sub.Scalar)
@_operands_in_half(0, 1)
def sub(self, other, alpha=1):
    out = _out()
    if out == jnp.bool_:
        raise NotImplementedError(_SUB_BOOLS)
    _check_alpha(out, alpha, negated=True)
    c = _compute(out)
    alpha = _half_alpha(alpha, out)
    if jnp.issubdtype(c, jnp.complexfloating):
        return (cast(self, c) + _complex_alpha_times(cast(other, c), -alpha)).astype(out)
    return (cast(self, c) - _alpha(cast(other, c), alpha)).astype(out)


@lowering(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(self, other, alpha=1):
    return sub(other, self, alpha)


@lowering(aten.mul.Tensor, aten.mul.Scalar)
@_operands_in_half(0, tensors_only=(1,))
def mul(self, other):
    out = _out()
    if out == jnp.bool_:
        return jnp.logical_and(cast(self, jnp.bool_), cast(other, jnp.bool_))
    c = _compute(out)
    if jnp.issubdtype(c, jnp.complexfloating):  # c10's product, as CPU's (XLA's fuses, differs at infinities)
        return c_mul(_factor(self, c), _factor(other, c)).astype(out)
    return (_factor(self, c) * _factor(other, c)).astype(out)


def _factor(x, c):
    """A factor of a product, cast to compute type `c`; a bool tensor through `convert`,
    which keeps inf * False NaN (the max-norm gradient of `renorm`)."""
    if isinstance(x, jax.Array) and x.dtype == jnp.bool_:
        return convert(x, c)
    return cast(x, c)


def _floor_divide_int(a, b):
    q = lax.div(a, jnp.where(b == 0, 1, b))
    fix = ((a % jnp.where(b == 0, 1, b)) != 0) & ((a < 0) != (b < 0))
    return q - fix.astype(q.dtype)


@lowering(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode)
@_operands_in_half(0, tensors_only=(1,))
def div(self, other, rounding_mode=None):
    out = _out()
    c = _compute(out)
    a, b = cast(self, c), cast(other, c)
    if rounding_mode is None:
        if jnp.issubdtype(c, jnp.complexfloating):  # c10's quotient, as CPU's kernels
            return c_div(a, b).astype(out)
        return true_divide(a, b).astype(out)
    if jnp.issubdtype(c, jnp.integer):
        a, b = jnp.broadcast_arrays(a, b)  # lax.div does not broadcast (x // y of shapes (3, 1) and (2,))
        if rounding_mode == "trunc":
            ctx = context()
            ctx.check(jnp.all(b != 0), RuntimeError, "ZeroDivisionError")
            return lax.div(a, jnp.where(b == 0, 1, b)).astype(out)
        context().check(jnp.all(b != 0), RuntimeError, "ZeroDivisionError")
        return _floor_divide_int(a, b).astype(out)
    # CPU's half-type kernels compute with a tensor divisor in the half type, each
    # operation rounded to it (c10::Half arithmetic: trunc(a / b) of the rounded
    # quotient); a one-element divisor (TensorIterator's is_scalar) takes the float path.
    if out in (jnp.float16, jnp.bfloat16) and jnp.size(other) != 1:
        def r(x):
            return x.astype(out).astype(c)
    else:
        def r(x):
            return x
    q = r(true_divide(a, b))
    if rounding_mode == "trunc":
        return jnp.trunc(q).astype(out)
    # ATen's floor division (c10::div_floor_floating): floor((a - fmod(a, b)) / b) with
    # sign fix-up.
    mod = r(jnp.fmod(a, b))
    d = r(true_divide(r(a - mod), b))
    d = r(jnp.where((mod != 0) & ((b < 0) != (mod < 0)), d - 1, d))
    fl = jnp.floor(d)
    fl = r(jnp.where(d - fl > 0.5, fl + 1, fl))
    res = jnp.where(d != 0, fl, jnp.copysign(jnp.zeros_like(q), q))
    return jnp.where(b == 0, q, res).astype(out)


@lowering(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(self, other):
    return div(self, other, "floor")


@lowering(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
@_operands_in_half(0, 1)
def remainder(self, other):
    out = _out()
    c = _compute(out)
    a, b = cast(self, c), cast(other, c)
    if jnp.issubdtype(c, jnp.integer):
        context().check(jnp.all(b != 0), RuntimeError, "ZeroDivisionError")
        bs = jnp.where(b == 0, 1, b)
        r = a % bs  # jnp's % is Python-style (sign of divisor) like torch.remainder
        return r.astype(out)
    r = jnp.fmod(a, b)
    r = jnp.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
    return r.astype(out)


@lowering(aten.fmod.Tensor, aten.fmod.Scalar)
@_operands_in_half(0, 1)
def fmod(self, other):
    out = _out()
    c = _compute(out)
    a, b = cast(self, c), cast(other, c)
    if jnp.issubdtype(c, jnp.integer):
        a, b = jnp.broadcast_arrays(a, b)  # lax.rem does not broadcast
        context().check(jnp.all(b != 0), RuntimeError, "ZeroDivisionError")
        return lax.rem(a, jnp.where(b == 0, 1, b)).astype(out)
    return jnp.fmod(a, b).astype(out)


@lowering(aten.pow.Tensor_Scalar)
def pow_tensor_scalar(self, exponent):
    """aten::pow.Tensor_Scalar: `_pow`, after CPU's negative-integer-exponent check."""
    _check_int_pow_exponent(self, exponent)
    _check_pow_exponent_fits(_out(), exponent)
    return _pow(self, exponent, _out())


@lowering(aten.pow_.Scalar, mutates=True)
def pow__scalar(self, exponent):
    """aten::pow_.Scalar (Tensor self, Scalar exponent), in place. Registered on its own:
    the in-place/functional name matching would pair it with pow.Scalar (Scalar self,
    Tensor exponent), which skips pow.Tensor_Scalar's negative-exponent check."""
    _check_int_pow_exponent(self, exponent)
    _check_pow_exponent_fits(self.dtype, exponent)
    return (), {"self": _pow(self, exponent, self.dtype)}


@lowering(aten.pow.Tensor_Tensor, aten.pow.Scalar)
@_operands_in_half(0)
def pow(self, exponent):
    """aten::pow.Tensor_Tensor / pow.Scalar. A 0-dim exponent tensor of a wider type is
    rounded to a half result type (TensorIterator's cast); a number exponent (only
    `_foreach_pow`'s Scalar overloads pass one) is read as pow.Tensor_Scalar reads it."""
    out = _out()
    if out in _HALF and not is_number(exponent):
        exponent = _in_dtype(exponent, out)
    result = _pow(self, exponent, out)
    if is_number(self) and jnp.issubdtype(out, jnp.complexfloating):
        # pow.Scalar: CPU fills ones for a base of 1 (Pow.cpp), even for NaN exponents.
        result = jnp.where(jnp.asarray(self) == 1, jnp.ones((), out), result)
    return result


def _bool_pow_meta(op):
    """The Meta kernel of `op` (pow.Tensor_Scalar, its in-place and out= overloads): a
    bool tensor to a bool exponent is bool, as Pow.cpp's `TORCH_META_FUNC2(pow,
    Tensor_Scalar)` types it (`at::result_type(base, exp)`), where PyTorch's Python
    reference promotes bool to int64 (and so refuses `pow_` and a bool out tensor);
    anything else is PyTorch's meta kernel's."""
    from .registry import _python_meta

    inner = _python_meta(op)

    def meta(self, exponent, **kwargs):
        if self.dtype != torch.bool or not isinstance(exponent, bool):
            return inner(self, exponent, **kwargs)
        if op is aten.pow_.Scalar:
            return self
        result = inner(self, 1)  # int64, laid out as the unary TensorIterator lays it out
        result = torch.empty_strided(result.shape, result.stride(), dtype=torch.bool, device=result.device)
        out = kwargs.get("out")
        if out is None:
            return result
        from torch._prims_common.wrappers import _maybe_resize_out

        return _maybe_resize_out(out, result.shape)  # any out dtype holds a bool

    return meta


def _register_bool_pow_meta():
    from .registry import meta_kernel

    for op in (aten.pow.Tensor_Scalar, aten.pow_.Scalar, aten.pow.Tensor_Scalar_out):
        meta_kernel(op)(_bool_pow_meta(op))


_register_bool_pow_meta()


def _pow(self, exponent, out):
    c = _compute(out)
    if is_number(exponent) and jnp.ndim(exponent) == 0 and not jnp.issubdtype(c, jnp.integer):
        return _pow_scalar_exponent(cast(self, c), exponent, out, c)
    if isinstance(exponent, (int, float)) and not isinstance(exponent, bool):
        base = cast(self, c)
        if float(exponent).is_integer():
            return lax.integer_pow(base, int(exponent)).astype(out) if exponent >= 0 else \
                jnp.power(base, cast(exponent, c)).astype(out)
    a, b = cast(self, c), cast(exponent, c)
    if jnp.issubdtype(c, jnp.integer):
        return _int_pow(a, b).astype(out)
    if jnp.issubdtype(c, jnp.complexfloating):
        a, b = jnp.broadcast_arrays(a, b)
        return c_pow(a, b).astype(out)
    return jnp.power(a, b).astype(out)


def _pow_scalar_exponent(base, exponent, out, c):
    """Floating/complex `base ** exponent` for a Scalar exponent (Python number or traced
    weak scalar), as aten::pow.Tensor_Scalar computes it on CPU (Pow.cpp, PowKernel.cpp):
    exponent 0 -> ones, 1 -> a copy; for float, double, bfloat16 and complex 0.5 -> sqrt,
    -0.5 -> 1/sqrt, -1 -> 1/x (so (-inf)**0.5 is nan and (-0.)**0.5 is -0., unlike IEEE
    pow); for float, double, bfloat16 and complex 2, 3, -2 -> x*x, x*x*x, 1/(x*x); else
    std::pow. bfloat16 rounds after every step and half types round the exponent to
    their own dtype first (CPU computes with `exp.to<scalar_t>()`)."""
    half = jnp.dtype(out) in _HALF
    rnd = (lambda v: v.astype(out).astype(c)) if half else (lambda v: v)
    one = jnp.ones((), c)
    special = jnp.dtype(out) != jnp.float16
    # (exponent value, computation), tried in order; the last is the general case.
    cases = [(0, lambda x: jnp.ones_like(x)), (1, lambda x: x)]
    if jnp.issubdtype(c, jnp.complexfloating):
        # c10's complex sqrt (glibc's csqrt), product and quotient, as CPU's kernels. The
        # 1 is opaque to XLA, which would fold its zero imaginary part out of the
        # quotient's sums (-0 + 0 is +0: 1 / (0 - 1i) is -0 + 1i on CPU).
        one = lax.optimization_barrier(one)
        cases += [(0.5, c_sqrt), (-0.5, lambda x: c_div(one, c_sqrt(x))), (-1, lambda x: c_div(one, x)),
                  (2, lambda x: c_mul(x, x)), (3, lambda x: c_mul(c_mul(x, x), x)),
                  (-2, lambda x: c_div(one, c_mul(x, x)))]
    elif special:
        cases += [(0.5, lambda x: rnd(jnp.sqrt(x))), (-0.5, lambda x: rnd(one / rnd(jnp.sqrt(x)))),
                  (-1, lambda x: rnd(one / x)), (2, lambda x: rnd(x * x)), (3, lambda x: rnd(rnd(x * x) * x)),
                  (-2, lambda x: rnd(one / rnd(x * x)))]
    e = jnp.asarray(exponent, out).astype(c) if half else exponent
    if jnp.issubdtype(c, jnp.complexfloating):
        def general(x):
            return c_pow(x, jnp.broadcast_to(cast(e, c), x.shape))
    else:
        def general(x):
            return jnp.power(x, cast(e, c))
    if isinstance(exponent, (bool, int, float, complex)):
        fn = next((f for v, f in cases if exponent == v), general)
        return fn(base).astype(out)
    index = jnp.int32(len(cases))
    for i in reversed(range(len(cases))):
        index = jnp.where(exponent == cases[i][0], i, index)
    return lax.switch(index, [f for _, f in cases] + [general], base).astype(out)


_NEG_INT_POW = "Integers to negative integer powers are not allowed."


def _check_pow_exponent_fits(out, exponent):
    """CPU's pow.Tensor_Scalar converts the exponent to the tensor's type for integer,
    float16 and bfloat16 results (`exp.to<scalar_t>()`, checked: uint8 ** 300 raises),
    to double or complex<double> otherwise."""
    if jnp.issubdtype(out, jnp.integer) or jnp.dtype(out) in _HALF:
        check_scalar(exponent, out)


def _check_int_pow_exponent(self, exponent):
    """CPU's pow.Tensor_Scalar check: an integral (or bool) tensor to a negative integral
    Scalar exponent raises RuntimeError. (A negative exponent *tensor* does not.) The
    Scalar is a Python int when static, else a traced integer scalar: checked on device."""
    if not hasattr(self, "dtype") or not (jnp.issubdtype(self.dtype, jnp.integer) or self.dtype == jnp.bool_):
        return
    if isinstance(exponent, bool) or isinstance(exponent, float):
        return
    if isinstance(exponent, int):
        if exponent < 0:
            raise RuntimeError(_NEG_INT_POW)
        return
    if jnp.issubdtype(jnp.asarray(exponent).dtype, jnp.integer):
        context().check(jnp.asarray(exponent) >= 0, RuntimeError, _NEG_INT_POW)


def _int_pow(a, b):
    a, b = jnp.broadcast_arrays(a, b)
    neg = b < 0
    e = jnp.where(neg, 0, b)
    result = jnp.ones_like(a)
    base = a

    def body(_, state):
        r, bs, ex = state
        r = jnp.where((ex & 1) == 1, r * bs, r)
        return r, bs * bs, ex >> 1

    result, _, _ = lax.fori_loop(0, 64, body, (result, base, e))
    # Negative exponents: 1 -> 1, -1 -> +-1, others -> 0 (ATen's integer pow).
    neg_val = jnp.where(a == 1, 1, jnp.where(a == -1, jnp.where((b & 1) == 0, 1, -1), 0))
    return jnp.where(neg, neg_val.astype(a.dtype), result)


@lowering(aten.float_power.Tensor_Tensor, aten.float_power.Tensor_Scalar, aten.float_power.Scalar)
def float_power(self, exponent):
    out = _out()
    return jnp.power(cast(self, out), cast(exponent, out))


@lowering(aten.atan2.default)
@_operands_in_half(0, 1)
def atan2(self, other):
    out = _out()
    c = _compute(out)
    return jnp.arctan2(cast(self, c), cast(other, c)).astype(out)


@lowering(aten.hypot.default)
@_operands_in_half(0, 1)
def hypot(self, other):
    out = _out()
    c = _compute(out)
    return jnp.hypot(cast(self, c), cast(other, c)).astype(out)


@lowering(aten.logaddexp.default)
@_operands_in_half(0, 1)
def logaddexp(self, other):
    """aten::logaddexp, log(exp(a) + exp(b)), as CPU's kernel computes it once in the
    compute type (float32 for the half types): a where a and b are the same infinity,
    else max + log1p(exp(min - max)). Complex operands order by their real parts, with
    PyTorch's reference's infinity and NaN cases."""
    out = _out()
    c = _compute(out)
    a, b = cast(self, c), cast(other, c)
    ra, rb = jnp.real(a), jnp.real(b)
    if jnp.iscomplexobj(a):
        return _complex_logaddexp(a, b).astype(out)
    mask = ra >= rb
    hi, lo = jnp.where(mask, a, b), jnp.where(mask, b, a)
    same_inf = ~jnp.isfinite(ra) & (ra == rb)
    result = hi + jnp.log1p(jnp.exp(lo - hi))
    return jnp.where(same_inf, a, result).astype(out)


def _complex_logaddexp(x, y):
    """CPU's _log_add_exp_helper for complex x, y (ATen/native/cpu/LogAddExp.h): (min,
    max) ordered by real part (y, y if y has a NaN part, else x, x if x has one); a NaN
    min gives NaN + NaN i; min and max of the same infinite real part give min (-inf)
    or log(exp(min) + exp(max)) (+inf); otherwise log1p(exp(min - max)) + max, with C99's
    complex exp and log and c10's log1p (`c_exp`, `c_log`, `c_log1p`)."""
    nan_x = jnp.isnan(jnp.real(x)) | jnp.isnan(jnp.imag(x))
    nan_y = jnp.isnan(jnp.real(y)) | jnp.isnan(jnp.imag(y))
    x_lower = jnp.real(x) < jnp.real(y)
    lo = jnp.where(nan_y, y, jnp.where(nan_x | x_lower, x, y))
    hi = jnp.where(nan_y, y, jnp.where(nan_x, x, jnp.where(x_lower, y, x)))
    lo_re, hi_re = jnp.real(lo), jnp.real(hi)
    finite = c_log1p(c_exp(lo - hi)) + hi
    at_inf = jnp.where(lo_re < 0, lo, c_log(c_exp(lo) + c_exp(hi)))
    result = jnp.where(~jnp.isfinite(lo_re) & (lo_re == hi_re), at_inf, finite)
    nan = np.asarray(np.nan, lo_re.dtype)
    return jnp.where(nan_x | nan_y, lax.complex(nan, nan), result)


@lowering(aten.logaddexp2.default)
@_operands_in_half(0, 1)
def logaddexp2(self, other):
    """aten::logaddexp2, log2(2**a + 2**b): max + log1p(exp2(min - max)) / log(2) in
    the compute type, a where a and b are the same infinity."""
    out = _out()
    c = _compute(out)
    a, b = cast(self, c), cast(other, c)
    hi, lo = jnp.maximum(a, b), jnp.minimum(a, b)
    result = hi + jnp.log1p(jnp.exp2(lo - hi)) * np.asarray(1 / math.log(2), c)
    return jnp.where(jnp.isinf(a) & (a == b), a, result).astype(out)


@lowering(aten.copysign.Tensor, aten.copysign.Scalar)
@_operands_in_half(0, 1)
def copysign(self, other):
    out = _out()
    c = _compute(out)
    return jnp.copysign(cast(self, c), cast(other, c)).astype(out)


@lowering(aten.nextafter.default)
@_operands_in_half(0, 1)
def nextafter(self, other):
    out = _out()
    return jnp.nextafter(cast(self, out), cast(other, out))


@lowering(aten.gcd.default)
def gcd(self, other):
    """`aten::gcd`: ATen's calc_gcd, Euclid's algorithm on |a| and |b| (so the result is
    non-negative except where abs overflows, e.g. gcd(INT_MIN, 0), as on CPU)."""
    out = _out()
    return jnp.gcd(cast(self, out), cast(other, out))


# (total bits, mantissa bits, exponent bias, unsigned int of that width) per float type
_FLOAT_BITS = {jnp.dtype(jnp.float16): (16, 10, 15, jnp.uint16), jnp.dtype(jnp.bfloat16): (16, 7, 127, jnp.uint16),
               jnp.dtype(jnp.float32): (32, 23, 127, jnp.uint32), jnp.dtype(jnp.float64): (64, 52, 1023, jnp.uint64)}


@lowering(aten.frexp.Tensor)
def frexp(self):
    """`aten::frexp.Tensor`: (mantissa in [0.5, 1) with self's sign, int32 exponent),
    C's frexp: zero, inf and NaN give (self, 0). Computed on the bit pattern, because
    XLA:CPU flushes subnormal inputs to zero in arithmetic and CPU PyTorch does not."""
    width, frac_bits, bias, uint = _FLOAT_BITS[jnp.dtype(self.dtype)]
    bits = lax.bitcast_convert_type(self, uint)
    one = np.dtype(uint).type(1)
    frac_mask = np.dtype(uint).type((1 << frac_bits) - 1)
    exp_max = (1 << (width - 1 - frac_bits)) - 1
    sign = bits & (one << np.dtype(uint).type(width - 1))
    field = ((bits >> np.dtype(uint).type(frac_bits)) & np.dtype(uint).type(exp_max)).astype(jnp.int32)
    frac = bits & frac_mask
    half = np.dtype(uint).type(bias - 1) << np.dtype(uint).type(frac_bits)  # the exponent field of [0.5, 1)
    # Subnormal: frac * 2^(1 - bias - frac_bits), renormalized by its highest set bit p.
    p = (width - 1) - lax.clz(frac).astype(jnp.int32)
    sub_frac = (frac << (frac_bits - p).astype(uint)) & frac_mask
    special = (field == exp_max) | ((field == 0) & (frac == 0))
    subnormal = (field == 0) & (frac != 0)
    m_bits = sign | half | jnp.where(subnormal, sub_frac, frac)
    mantissa = jnp.where(special, self, lax.bitcast_convert_type(m_bits, self.dtype))
    exponent = jnp.where(special, 0, jnp.where(subnormal, p - frac_bits - bias + 2, field - (bias - 1)))
    return mantissa, exponent.astype(jnp.int32)


def _extremum(name: str, fn, propagate_nan: bool):
    def lower(self, other):
        out = _out()
        c = _compute(out)
        if jnp.issubdtype(c, jnp.complexfloating):
            raise RuntimeError(f"{name} not implemented for complex tensors.")  # CPU's words
        a, b = cast(self, c), cast(other, c)
        r = fn(a, b)
        if is_float(c):
            if propagate_nan:
                r = jnp.where(jnp.isnan(a) | jnp.isnan(b), jnp.nan, r)
            else:
                r = jnp.where(jnp.isnan(a), b, jnp.where(jnp.isnan(b), a, r))
        return r.astype(out)

    return lower


lowering(aten.maximum.default)(_extremum("maximum", jnp.maximum, True))
lowering(aten.minimum.default)(_extremum("minimum", jnp.minimum, True))
lowering(aten.fmax.default)(_extremum("fmax", jnp.maximum, False))
lowering(aten.fmin.default)(_extremum("fmin", jnp.minimum, False))


# ------------------------------------------------------------------ comparisons
def _compare(fn):
    def lower(self, other):
        # TensorIterator casts both operands to the common dtype first: x_half == 0.1
        # compares with half(0.1), x_half == 0.1 + 0j with complex32(0.1).
        c = result_type(self, other)
        a, b = cast(self, c), cast(other, c)
        half = complex_half(self, other)
        if half is not None:
            a, b = round_complex_half(a, half), round_complex_half(b, half)
        return fn(a, b)

    return lower


for _op, _fn in [
    (aten.eq, jnp.equal), (aten.ne, jnp.not_equal), (aten.lt, jnp.less), (aten.le, jnp.less_equal),
    (aten.gt, jnp.greater), (aten.ge, jnp.greater_equal),
]:
    lowering(_op.Tensor, _op.Scalar)(_compare(_fn))


@lowering(aten.logical_and.default)
def logical_and(self, other):
    return jnp.logical_and(cast(self, jnp.bool_), cast(other, jnp.bool_)).astype(_out())


@lowering(aten.logical_or.default)
def logical_or(self, other):
    return jnp.logical_or(cast(self, jnp.bool_), cast(other, jnp.bool_)).astype(_out())


@lowering(aten.logical_xor.default)
def logical_xor(self, other):
    return jnp.logical_xor(cast(self, jnp.bool_), cast(other, jnp.bool_)).astype(_out())


@lowering(aten.logical_not.default)
def logical_not(self):
    return jnp.logical_not(cast(self, jnp.bool_)).astype(_out())


def _bitwise(fn):
    def lower(self, other):
        out = _out()
        return fn(cast(self, out), cast(other, out))

    return lower


# The Scalar_Tensor overloads (`torch.bitwise_and(3, x)`) are lowered as they are: their
# composite kernels pass the number on as a wrapped 0-dim CPU tensor, which reaches
# neuron's Tensor kernel as a Python number that PyTorch's Python meta call refuses.
lowering(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar, aten.bitwise_and.Scalar_Tensor)(_bitwise(jnp.bitwise_and))
lowering(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar, aten.bitwise_or.Scalar_Tensor)(_bitwise(jnp.bitwise_or))
lowering(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar, aten.bitwise_xor.Scalar_Tensor)(_bitwise(jnp.bitwise_xor))


@lowering(aten.bitwise_not.default)
def bitwise_not(self):
    return jnp.logical_not(self) if self.dtype == jnp.bool_ else jnp.invert(self)


@lowering(aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar, aten.bitwise_left_shift.Scalar_Tensor,
          aten.__lshift__.Tensor, aten.__lshift__.Scalar)
def left_shift(self, other):
    out = _out()
    a, b = cast(self, out), cast(other, out)
    bits = jnp.iinfo(out).bits
    return jnp.where((b >= bits) | (b < 0), 0, jnp.left_shift(a, jnp.clip(b, 0, bits - 1))).astype(out)


@lowering(aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
          aten.bitwise_right_shift.Scalar_Tensor, aten.__rshift__.Tensor, aten.__rshift__.Scalar)
def right_shift(self, other):
    out = _out()
    a, b = cast(self, out), cast(other, out)
    bits = jnp.iinfo(out).bits
    fill = jnp.where(a < 0, -1, 0).astype(out) if jnp.issubdtype(out, jnp.signedinteger) else jnp.zeros_like(a)
    return jnp.where((b >= bits) | (b < 0), fill, jnp.right_shift(a, jnp.clip(b, 0, bits - 1))).astype(out)


# ------------------------------------------------------------------ where / clamp
@lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(condition, self, other):
    out = _out()
    return jnp.where(cast(condition, jnp.bool_), cast(self, out), cast(other, out))


@meta_check(aten.clamp.default, aten.clamp.out, aten.clamp_.default)
def _clamp_meta_check(self, min=None, max=None, **_):
    """CPU's clamp meta function (TensorCompare.cpp) keeps a floating tensor's dtype
    whatever its Scalar bounds, reading them with `Scalar::to<double>` (a complex bound
    passes as its real part when its imaginary part is zero); PyTorch's Python kernel
    promotes the result to complex (complex32 for half types, which neuron cannot
    hold)."""
    if not self.dtype.is_floating_point:
        return None
    replaced = {}
    for name, bound in (("min", min), ("max", max)):
        if isinstance(bound, complex):
            if bound.imag != 0:
                raise RuntimeError("value cannot be converted to type double without overflow")
            replaced[name] = bound.real
    return replaced or None


@meta_check(aten.clamp_min.default, aten.clamp_min.out, aten.clamp_min_.default, aten.clamp_max.default,
            aten.clamp_max.out, aten.clamp_max_.default)
def _clamp_bound_meta_check(self, *args, **kwargs):
    """CPU's clamp_min / clamp_max meta functions refuse a complex Scalar bound
    (NotImplementedError), whatever the tensor's dtype; PyTorch's Python kernel
    promotes to complex."""
    bound = args[0] if args else kwargs.get("min", kwargs.get("max"))
    if isinstance(bound, complex):
        raise NotImplementedError("clamp is not supported for complex types")


@lowering(aten.clamp.default, aten.clamp.Tensor)
def clamp(self, min=None, max=None):
    """`aten::clamp` (Scalar or Tensor bounds); Scalar bounds must fit the result type
    (c10::checked_convert), as on CPU."""
    out = _out()
    for bound in (min, max):
        if is_number(bound):
            check_scalar(bound, out)
    c = _compute(out)
    x = cast(self, c)
    if min is not None:
        lo = cast(min, c)
        x = jnp.where(x < lo, lo, x) if not is_float(c) else jnp.where(jnp.isnan(lo), lo, jnp.where(x < lo, lo, x))
    if max is not None:
        hi = cast(max, c)
        x = jnp.where(x > hi, hi, x) if not is_float(c) else jnp.where(jnp.isnan(hi), hi, jnp.where(x > hi, hi, x))
    return x.astype(out)


@lowering(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(self, min):
    return clamp(self, min, None)


@lowering(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(self, max):
    return clamp(self, None, max)


def _igamma(lower: bool):
    def igamma(self, other):
        """aten::igamma / igammac: the regularized lower (upper) incomplete gamma function
        P(a, x) (Q(a, x)), with ATen's boundary values (SciPy's): NaN for a < 0 or x < 0,
        a == 0 gives P = 1 (Q = 0) for x > 0 and NaN at x == 0, x == 0 gives P = 0, an
        infinite a gives P = 0 (NaN if x is infinite too), an infinite x gives P = 1."""
        out = _out()
        c = _compute(out)
        a, x = cast(self, c), cast(other, c)
        p = jax.scipy.special.gammainc(a, x) if lower else jax.scipy.special.gammaincc(a, x)
        one, zero, nan = jnp.ones((), c), jnp.zeros((), c), jnp.full((), jnp.nan, c)
        hi, lo = (one, zero) if lower else (zero, one)  # the value of P (Q) as x -> inf
        r = jnp.where(jnp.isinf(x), hi, p)
        r = jnp.where(jnp.isinf(a), jnp.where(jnp.isinf(x), nan, lo), r)
        r = jnp.where(x == 0, lo, r)
        r = jnp.where(a == 0, jnp.where(x > 0, hi, nan), r)
        r = jnp.where((x < 0) | (a < 0), nan, r)
        return r.astype(out)

    return igamma


lowering(aten.igamma.default)(_operands_in_half(0, 1)(_igamma(True)))
lowering(aten.igammac.default)(_operands_in_half(0, 1)(_igamma(False)))


@lowering(aten.softshrink_backward.default, aten.hardshrink_backward.default)
def softshrink_backward(grad_output, self, lambd):
    """aten::softshrink_backward and aten::hardshrink_backward (the same derivative):
    grad_output where |self| > lambd, 0 inside [-lambd, lambd], as CPU's kernels. A NaN
    input passes grad_output, as CPU's scalar loop does (its vectorized loop, which
    takes full vectors of a long tensor, gives 0 there instead)."""
    out = _out()
    check_scalar(lambd, out)  # CPU reads lambd as the result type
    inside = (self >= -lambd) & (self <= lambd)
    return jnp.where(inside, 0, grad_output).astype(out)


# ------------------------------------------------------------------ complex math
# CPU's complex kernels call the C library (c10's exp and log of a complex are std::exp
# and std::log of std::complex: glibc's cexp and clog, with C99 Annex G's special values);
# XLA's complex exp and log give NaN + NaN i for several infinite operands (exp(inf + inf
# i), log(inf + NaN i)) and drop the sign of a zero imaginary part. These follow glibc,
# computing on the parts in the operand's precision.
def _parts(z):
    return jnp.real(z), jnp.imag(z)


def c_exp(z):
    """glibc's cexp: e^x (cos y + i sin y), with sin and cos scaled by e^t (t = 709 for
    double, 88 for float) while x exceeds t, so that x past exp's overflow still gives
    finite parts where cos or sin is small, and a zero y keeps its sign; for infinite x,
    inf or 0 with the signs of cos y and sin y (y itself where it is zero); an infinite
    or NaN y gives NaN + NaN i for finite x, inf + NaN i for x = inf, 0 + (+-0) i for
    x = -inf; a NaN x gives NaN + y i for y = 0, NaN + NaN i otherwise."""
    x, y = _parts(z)
    f = x.dtype
    fi = jnp.finfo(f)
    t = float(int((fi.maxexp - 1) * math.log(2)))
    tiny = jnp.abs(y) <= float(fi.tiny)
    sin = jnp.where(tiny, y, jnp.sin(y))
    cos = jnp.where(tiny, jnp.ones_like(y), jnp.cos(y))
    exp_t = np.asarray(math.exp(t), f)
    xs = x
    for _ in range(2):
        big = xs > t
        xs = jnp.where(big, xs - t, xs)
        sin = jnp.where(big, sin * exp_t, sin)
        cos = jnp.where(big, cos * exp_t, cos)
    e = jnp.where(xs > t, np.asarray(fi.max, f), jnp.exp(jnp.minimum(xs, t)))
    re, im = e * cos, e * sin
    finite_y = jnp.isfinite(y)
    inf, nan, zero = np.asarray(np.inf, f), np.asarray(np.nan, f), np.asarray(0, f)
    # x = +-inf: inf or 0, signed by cos and sin; y = 0 kept.
    value = jnp.where(x > 0, inf, zero)
    inf_re = jnp.where(y == 0, value, jnp.copysign(value, cos))
    inf_im = jnp.where(y == 0, y, jnp.copysign(value, sin))
    inf_re = jnp.where(finite_y, inf_re, value)
    inf_im = jnp.where(finite_y, inf_im, jnp.where(x > 0, nan, jnp.copysign(zero, y)))
    re = jnp.where(jnp.isinf(x), inf_re, jnp.where(finite_y, re, nan))
    im = jnp.where(jnp.isinf(x), inf_im, jnp.where(finite_y, im, nan))
    re = jnp.where(jnp.isnan(x), nan, re)
    im = jnp.where(jnp.isnan(x), jnp.where(y == 0, y, nan), im)
    return lax.complex(re, im)


def c_log(z):
    """glibc's clog: XLA's log, but a NaN part gives NaN + NaN i unless the other part
    is infinite (inf + NaN i), where XLA gives NaN + NaN i."""
    x, y = _parts(z)
    r = jnp.log(z)
    nan_inf = (jnp.isnan(x) | jnp.isnan(y)) & (jnp.isinf(x) | jnp.isinf(y))
    return jnp.where(nan_inf, lax.complex(np.asarray(np.inf, x.dtype), np.asarray(np.nan, x.dtype)), r)


def _products(ar, ai, br, bi):
    """The four products of a complex product, each rounded: ac, bd, ad, bc. XLA (CPU
    and GPU) would contract ac - bd into a fused multiply-add, which CPU's kernels do
    not do ((1.1 + 1.1i)^2 would have a real part of 8.9e-18, not 0, and
    (1e30 + 1e30i)^2 in complex64 -inf, not NaN): each product passes a select on its
    own factor (x == x: a NaN factor makes the product NaN anyway) that the compiler
    cannot see through."""
    nan = np.asarray(np.nan, ar.dtype)

    def rounded(p, v):
        return jnp.where(v == v, p, nan)

    return rounded(ar * br, ar), rounded(ai * bi, ai), rounded(ar * bi, ar), rounded(ai * br, ai)


def c_mul(a, b):
    """c10::complex's product, (ac - bd) + (ad + bc) i (no fused multiply-add), without
    C99's recovery of infinities from NaN parts (XLA's may differ there)."""
    ac, bd, ad, bc = _products(*_parts(a), *_parts(b))
    return lax.complex(ac - bd, ad + bc)


def c_mul_c99(a, b):
    """C99's complex product (GCC's inline (ac - bd) + (ad + bc) i, then libgcc's
    __mulsc3/__muldc3 where both parts came out NaN): Annex G's recovery of infinities,
    an infinite factor "boxed" to +-1/+-0 parts, NaNs of the other factor turned into
    signed zeros, then the product times inf. glibc's cpow multiplies with it."""
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    ac, bd, ad, bc = _products(ar, ai, br, bi)
    re, im = ac - bd, ad + bc
    f = re.dtype
    one, zero, inf = np.asarray(1, f), np.asarray(0, f), np.asarray(np.inf, f)

    def box(v):
        return jnp.copysign(jnp.where(jnp.isinf(v), one, zero), v)

    def unnan(v, cond):
        return jnp.where(cond & jnp.isnan(v), jnp.copysign(zero, v), v)

    a_inf = jnp.isinf(ar) | jnp.isinf(ai)
    b_inf = jnp.isinf(br) | jnp.isinf(bi)
    ar, ai = jnp.where(a_inf, box(ar), ar), jnp.where(a_inf, box(ai), ai)
    br, bi = unnan(br, a_inf), unnan(bi, a_inf)
    br, bi = jnp.where(b_inf, box(br), br), jnp.where(b_inf, box(bi), bi)
    ar, ai = unnan(ar, b_inf), unnan(ai, b_inf)
    over = ~(a_inf | b_inf) & (jnp.isinf(ac) | jnp.isinf(bd) | jnp.isinf(ad) | jnp.isinf(bc))
    ar, ai, br, bi = (unnan(v, over) for v in (ar, ai, br, bi))
    recover = jnp.isnan(re) & jnp.isnan(im) & (a_inf | b_inf | over)
    re = jnp.where(recover, inf * (ar * br - ai * bi), re)
    im = jnp.where(recover, inf * (ar * bi + ai * br), im)
    return lax.complex(re, im)


def c_pow(x, y):
    """CPU's complex pow of a complex exponent (std::pow of std::complex: glibc's cpow),
    exp(y * log(x)) with glibc's clog and cexp (`c_log`, `c_exp`) and C99's product
    (`c_mul_c99`): so 0 ** 0 is NaN + NaN i, 0 ** 2.5 is 0, and x ** (300 + 0i) keeps
    a zero imaginary part where exp overflows (inf + 0i, where XLA's pow gives NaN).
    (XLA's pow computes in polar form, and overflows |x|^2 for |x| past 1e19 in
    complex64.) For complex64 the real part of the log is clogf's (`_clogf_re`, in
    float64): XLA's float32 log is often an ulp off, and the exponent multiplies that
    error ((2 + 300i) ** 3i); that costs about a quarter more time than XLA's pow on
    XLA:CPU. (The argument, XLA's float32 atan2, agrees with clogf's.)"""
    return c_exp(c_mul_c99(y, _clogf(x) if x.dtype == jnp.complex64 else c_log(x)))


def _clogf(x):
    """glibc's clogf: `c_log` (its argument and C99's special values) with log|x| of a
    finite x as `_clogf_re`."""
    re, im = _parts(x)
    r = c_log(x)
    return lax.complex(jnp.where(jnp.isfinite(re) & jnp.isfinite(im), _clogf_re(x), jnp.real(r)), jnp.imag(r))


def _clogf_re(x):
    """The real part of glibc's clogf for finite x, log|x|: with a = max(|re|, |im|) and
    b = min, logf(hypotf(a, b)) (hypotf as glibc computes it, sqrt(a^2 + b^2) in
    float64, rounded; logf correctly rounded: computed in float64), except near |x| = 1
    where clogf takes log1p(a^2 - 1 + b^2) / 2 (correctly rounded: computed in float64).
    (Non-finite x: see `_clogf`.)"""
    re, im = (v.astype(jnp.float64) for v in _parts(x))
    a, b = jnp.maximum(jnp.abs(re), jnp.abs(im)), jnp.minimum(jnp.abs(re), jnp.abs(im))
    a32, b32 = a.astype(jnp.float32), b.astype(jnp.float32)
    wide = jnp.sqrt(a * a + b * b)
    # glibc's hypotf, unless |x| is past float32's range (clogf scales it: log|x| is finite)
    hyp = jnp.where(wide > float(jnp.finfo(jnp.float32).max), wide, wide.astype(jnp.float32).astype(jnp.float64))
    general = jnp.log(hyp)
    near_one = 0.5 * jnp.log1p((a - 1) * (a + 1) + b * b)
    eps = float(jnp.finfo(jnp.float32).eps)
    use_near = (a == 1) | ((a > 1) & (a < 2) & (b < 1)) | \
        ((a >= 0.5) & (a < 1) & ((b < eps / 2) | (a32 * a32 + b32 * b32 >= 0.5)))
    return jnp.where(use_near, near_one, general).astype(jnp.float32)


def c_div(a, b):
    """c10::complex's quotient (c10/util/complex.h `operator/=`, NumPy's algorithm):
    scaled by the ratio of the divisor's smaller part to its larger one; a zero divisor
    gives the parts divided by zeros (inf or NaN). c10 multiplies by the reciprocal of
    the scaled divisor; here the parts are divided by it, as that reciprocal is
    subnormal for a divisor past 1 / FLT_MIN and XLA:CPU flushes it to zero."""
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    real_major = jnp.abs(br) >= jnp.abs(bi)
    zero = (br == 0) & (bi == 0)
    rat = jnp.where(real_major, bi / br, br / bi)
    den = jnp.where(real_major, br + bi * rat, bi + br * rat)
    re = jnp.where(real_major, ar + ai * rat, ar * rat + ai) / den
    im = jnp.where(real_major, ai - ar * rat, ai * rat - ar) / den
    re = jnp.where(zero, ar / jnp.abs(br), re)
    im = jnp.where(zero, ai / jnp.abs(bi), im)
    return lax.complex(re, im)


def c_log1p(z):
    """c10's complex log1p on CPU (c10/util/complex_math.h): with u = 1 + z, z where u
    is exactly 1, else log(u) (glibc's clog, `c_log`), times z / (u - 1) unless u - 1
    gives z back. So log1p(-1 + 1e-30j) is log(1e-30j), and an infinite imaginary part
    with a nonzero real part gives NaN (inf / inf in the correction)."""
    x, y = _parts(z)
    u_re = lax.optimization_barrier(x + 1)  # XLA would simplify (x + 1) - 1 to x
    log_u = c_log(lax.complex(u_re, y))
    exact = (u_re - 1 == x) & (y == y)
    corrected = jnp.where(exact, log_u, c_mul(log_u, c_div(z, lax.complex(u_re - 1, y))))
    return jnp.where((u_re == 1) & (y == 0), z, corrected)


def c_expm1(z):
    """c10's complex expm1: (expm1(x) cos y - 2 sin(y / 2)^2) + e^x sin(y) i, as CPU
    computes it (so expm1(inf + 0i) is inf + NaN i, inf * 0)."""
    x, y = _parts(z)
    a = jnp.sin(y / 2)
    return lax.complex(jnp.expm1(x) * jnp.cos(y) - 2 * a * a, jnp.exp(x) * jnp.sin(y))


def c_sqrt(z):
    """glibc's csqrt: XLA's sqrt with C99's special values, which XLA misses: the
    imaginary part takes y's sign (sqrt(-1 - 0i) = -i), an infinite y gives inf + y i
    whatever x, x = -inf gives 0 + (+-inf) i for a finite y and NaN + inf i for a NaN y,
    x = +inf gives inf + (+-0) i (inf + NaN i for a NaN y)."""
    x, y = _parts(z)
    r = jnp.sqrt(z)
    re, im = _parts(r)
    f = x.dtype
    inf, nan, zero = np.asarray(np.inf, f), np.asarray(np.nan, f), np.asarray(0, f)
    im = jnp.copysign(jnp.abs(im), y)
    nan_y = jnp.isnan(y)
    re = jnp.where(x == inf, inf, jnp.where(x == -inf, jnp.where(nan_y, nan, zero), re))
    im = jnp.where(x == inf, jnp.where(nan_y, nan, jnp.copysign(zero, y)),
                   jnp.where(x == -inf, jnp.where(nan_y, inf, jnp.copysign(inf, y)), im))
    y_inf = jnp.isinf(y)
    return lax.complex(jnp.where(y_inf, inf, re), jnp.where(y_inf, y, im))


def c_tanh(z):
    """glibc's ctanh: for |x| past t (354 for double, 44 for float) +-1 with an
    imaginary part 4 sin y cos y e^(-2|x|) (two steps, so it underflows to a signed
    zero); else (sinh x cosh x + sin y cos y i) / (sinh^2 x + cos^2 y). Infinite x gives
    +-1 + (+-0) i; a zero y gives z; otherwise a non-finite part gives NaN + NaN i, but
    x itself where x is zero (0 + NaN i)."""
    x, y = _parts(z)
    f = x.dtype
    fi = jnp.finfo(f)
    t = float(int((fi.maxexp - 1) * math.log(2) / 2))
    tiny = float(fi.tiny)
    small_y = jnp.abs(y) <= tiny
    sin = jnp.where(small_y, y, jnp.sin(y))
    cos = jnp.where(small_y, jnp.ones_like(y), jnp.cos(y))
    ax = jnp.abs(x)
    exp_2t = np.asarray(math.exp(2 * t), f)
    big_im = 4 * sin * cos / exp_2t
    rest = jnp.minimum(ax - t, t)
    big_im = jnp.where(ax - t > t, big_im / exp_2t, big_im / jnp.exp(2 * rest))
    small_x = ax <= tiny
    sinh = jnp.where(small_x, x, jnp.sinh(x))
    cosh = jnp.where(small_x, jnp.ones_like(x), jnp.cosh(x))
    den = jnp.where(jnp.abs(sinh) > jnp.abs(cos) * float(fi.eps), sinh * sinh + cos * cos, cos * cos)
    one = jnp.ones_like(x)
    re = jnp.where(ax > t, jnp.copysign(one, x), sinh * cosh / den)
    im = jnp.where(ax > t, big_im, sin * cos / den)
    # non-finite parts
    nan = np.asarray(np.nan, f)
    inf_im = jnp.where(jnp.isfinite(y) & (jnp.abs(y) > 1), jnp.copysign(jnp.zeros_like(y), sin * cos),
                       jnp.copysign(jnp.zeros_like(y), y))
    other_re = jnp.where(y == 0, x, jnp.where(x == 0, x, nan))
    other_im = jnp.where(y == 0, y, nan)
    finite = jnp.isfinite(x) & jnp.isfinite(y)
    re = jnp.where(finite, re, jnp.where(jnp.isinf(x), jnp.copysign(one, x), other_re))
    im = jnp.where(finite, im, jnp.where(jnp.isinf(x), inf_im, other_im))
    return lax.complex(re, im)


def c_sigmoid(z):
    """CPU's complex sigmoid, 1 / (1 + exp(-z)): glibc's cexp (`c_exp`), then c10's
    division (`c_div`), which gives NaN + NaN i where the divisor's parts are both
    infinite or one is NaN (sigmoid(-inf + 1i)); XLA's division, the same elsewhere
    and cheaper, recovers 0 there. So sigmoid(inf + inf i) is 1."""
    one = jnp.ones((), z.dtype)
    w = one + c_exp(-z)
    br, bi = _parts(w)
    nan = jnp.isnan(br) | jnp.isnan(bi) | (jnp.isinf(br) & jnp.isinf(bi))
    return jnp.where(nan, jnp.asarray(complex(np.nan, np.nan), z.dtype), one / w)


def c_log_base(base):
    """CPU's complex log2 / log10: glibc's clog (`c_log`) with each part divided by
    log(base) (Vectorized's log2 divides the parts; a complex division by log(base) + 0i
    would turn inf + NaN i into NaN + NaN i)."""
    def log(z):
        re, im = _parts(c_log(z))
        scale = math.log(base)
        return lax.complex(re / scale, im / scale)
    return log


def _sincos_tiny(y):
    """sin y and cos y as glibc's complex functions take them: y and 1 where |y| is at
    most the smallest normal number (M_MIN), `sincos` elsewhere."""
    small = jnp.abs(y) <= float(jnp.finfo(y.dtype).tiny)
    return jnp.where(small, y, jnp.sin(y)), jnp.where(small, jnp.ones_like(y), jnp.cos(y))


def _scaled_exp(ax, sin, cos):
    """glibc's csinh/ccosh for |x| past t (709 for double, 88 for float): e^|x| / 2 times
    sin and cos, e^t / 2 and e^t factored in step by step (so the parts stay finite
    where sin or cos is small), the largest finite number past 3t."""
    f = ax.dtype
    fi = jnp.finfo(f)
    t = float(int((fi.maxexp - 1) * math.log(2)))
    exp_t = np.asarray(math.exp(t), f)
    half = np.asarray(math.exp(t) / 2, f)
    rx = ax - t
    # Behind barriers: XLA would fold the constant factors into one (e^2t / 2 overflows
    # float32, and 0 * inf is NaN where glibc's 0 stays 0).
    sin, cos = lax.optimization_barrier((sin * half, cos * half))
    more = rx > t
    rx = jnp.where(more, rx - t, rx)
    sin, cos = lax.optimization_barrier((jnp.where(more, sin * exp_t, sin), jnp.where(more, cos * exp_t, cos)))
    ev = jnp.where(rx > t, np.asarray(fi.max, f), jnp.exp(jnp.minimum(rx, t)))
    return ev * cos, ev * sin, ax > t


def c_sinh(z):
    """glibc's csinh (s_csinh_template.c): sinh|x| cos y (its sign x's) + cosh|x| sin y i,
    scaled past exp's overflow (`_scaled_exp`, as `c_exp`); an infinite x gives infinite
    parts signed by cos y (times x's sign) and sin y, x itself with a zero y, inf + NaN i
    with a non-finite y; a zero x with a non-finite y (+-0) + NaN i; a NaN x NaN + y i
    for a zero y; NaN + NaN i otherwise."""
    x, y = _parts(z)
    f = x.dtype
    inf, nan = np.asarray(np.inf, f), np.asarray(np.nan, f)
    neg = jnp.signbit(x)
    ax = jnp.abs(x)
    sin, cos = _sincos_tiny(y)
    cos = jnp.where(neg, -cos, cos)
    big_re, big_im, big = _scaled_exp(ax, sin, cos)
    re = jnp.where(big, big_re, jnp.sinh(ax) * cos)
    im = jnp.where(big, big_im, jnp.cosh(ax) * sin)
    fin_x, fin_y = jnp.isfinite(x), jnp.isfinite(y)
    # finite x, non-finite y
    re = jnp.where(fin_x & ~fin_y, jnp.where(x == 0, x, nan), re)
    im = jnp.where(fin_x & ~fin_y, nan, im)
    # infinite x
    x_inf = jnp.isinf(x)
    inf_re = jnp.where(fin_y & (y != 0), jnp.copysign(inf, cos), jnp.where(y == 0, x, inf))
    inf_im = jnp.where(fin_y & (y != 0), jnp.copysign(inf, sin), jnp.where(y == 0, y, nan))
    re, im = jnp.where(x_inf, inf_re, re), jnp.where(x_inf, inf_im, im)
    # NaN x
    x_nan = jnp.isnan(x)
    re, im = jnp.where(x_nan, nan, re), jnp.where(x_nan, jnp.where(y == 0, y, nan), im)
    return lax.complex(re, im)


def c_cosh(z):
    """glibc's ccosh (s_ccosh_template.c): cosh x cos y + sinh x sin y i, scaled past
    exp's overflow (`_scaled_exp`); an infinite x gives infinite parts signed by cos y
    and by sin y times x's sign, inf + (y times x's sign) i for a zero y, inf + NaN i for
    a non-finite y; a finite x with a non-finite y NaN + (0 or NaN) i (0 for x = 0); a
    NaN x NaN + y i for a zero y; NaN + NaN i otherwise."""
    x, y = _parts(z)
    f = x.dtype
    inf, nan, zero = np.asarray(np.inf, f), np.asarray(np.nan, f), np.asarray(0, f)
    ax = jnp.abs(x)
    sin, cos = _sincos_tiny(y)
    sin_x = jnp.where(jnp.signbit(x), -sin, sin)
    big_re, big_im, big = _scaled_exp(ax, sin_x, cos)
    re = jnp.where(big, big_re, jnp.cosh(x) * cos)
    im = jnp.where(big, big_im, jnp.sinh(x) * sin)
    fin_x, fin_y = jnp.isfinite(x), jnp.isfinite(y)
    re = jnp.where(fin_x & ~fin_y, nan, re)
    im = jnp.where(fin_x & ~fin_y, jnp.where(x == 0, zero, nan), im)
    x_inf = jnp.isinf(x)
    sign_x = jnp.copysign(jnp.ones_like(x), x)
    inf_re = jnp.where(fin_y & (y != 0), jnp.copysign(inf, cos), inf)
    inf_im = jnp.where(fin_y & (y != 0), jnp.copysign(inf, sin) * sign_x, jnp.where(y == 0, y * sign_x, nan))
    re, im = jnp.where(x_inf, inf_re, re), jnp.where(x_inf, inf_im, im)
    x_nan = jnp.isnan(x)
    re, im = jnp.where(x_nan, nan, re), jnp.where(x_nan, jnp.where(y == 0, y, nan), im)
    return lax.complex(re, im)


def _times_i(z):
    """i z, exactly (-y + x i)."""
    x, y = _parts(z)
    return lax.complex(-y, x)


def _times_minus_i(z):
    """-i z, exactly (y - x i)."""
    x, y = _parts(z)
    return lax.complex(y, -x)


def c_sin(z):
    """glibc's csin: -i csinh(i z) (`c_sinh`), as C99 defines it and glibc's
    s_csin_template.c mirrors csinh, except that a non-finite x with an infinite y
    gives NaN + inf i (csinh's inf + NaN i turned would give NaN -+ inf i)."""
    x, y = _parts(z)
    r = _times_minus_i(c_sinh(_times_i(z)))
    both = jnp.isinf(y) & ~jnp.isfinite(x)
    return jnp.where(both, jnp.asarray(complex(np.nan, np.inf), z.dtype), r)


def c_cos(z):
    """glibc's ccos (s_ccos_template.c): ccosh(i z) (`c_cosh`)."""
    return c_cosh(_times_i(z))


def c_tan(z):
    """glibc's ctan: -i ctanh(i z) (`c_tanh`), as s_ctan_template.c mirrors ctanh."""
    return _times_minus_i(c_tanh(_times_i(z)))


def c_asinh(z, kernel=jnp.arcsinh):
    """glibc's casinh (s_casinh_template.c): for finite z XLA's asinh of the first
    quadrant's |x| + |y| i, each part given the sign of x and y (glibc's
    __kernel_casinh reduces to that quadrant too; XLA's drops the sign of a zero x);
    an infinite y gives +-inf + (+-pi/2, +-pi/4 for an infinite x, NaN for a NaN x) i;
    a non-finite x otherwise gives x + (+-0 for a finite y, or for a NaN x with a zero
    y; NaN otherwise) i; a finite x with a NaN y NaN + NaN i; z itself for zeros.
    (`kernel` computes the finite values: `c_acos` needs only the special ones.)"""
    x, y = _parts(z)
    f = x.dtype
    inf, nan, zero = np.asarray(np.inf, f), np.asarray(np.nan, f), np.asarray(0, f)
    r = kernel(lax.complex(jnp.abs(x), jnp.abs(y)))
    re, im = jnp.copysign(jnp.real(r), x), jnp.copysign(jnp.imag(r), y)
    fin_x, fin_y = jnp.isfinite(x), jnp.isfinite(y)
    y_inf, x_nan = jnp.isinf(y), jnp.isnan(x)
    re = jnp.where(fin_x & jnp.isnan(y), nan, re)
    im = jnp.where(fin_x & jnp.isnan(y), nan, im)
    xnf_im = jnp.where((fin_y & ~x_nan) | (x_nan & (y == 0)), jnp.copysign(zero, y), nan)
    re, im = jnp.where(~fin_x, x, re), jnp.where(~fin_x, xnf_im, im)
    yinf_im = jnp.where(x_nan, nan, jnp.copysign(jnp.where(fin_x, np.asarray(np.pi / 2, f),
                                                           np.asarray(np.pi / 4, f)), y))
    re, im = jnp.where(y_inf, jnp.copysign(inf, x), re), jnp.where(y_inf, yinf_im, im)
    zeros = (x == 0) & (y == 0)
    return lax.complex(jnp.where(zeros, x, re), jnp.where(zeros, y, im))


def c_asin(z, kernel=jnp.arcsinh):
    """glibc's casin (s_casin_template.c): -i casinh(i z) (`c_asinh`); with a NaN part,
    z itself for a zero x, NaN + (+-inf) i (y's sign) if a part is infinite, NaN + NaN i
    otherwise."""
    x, y = _parts(z)
    f = x.dtype
    nan, inf = np.asarray(np.nan, f), np.asarray(np.inf, f)
    w = _times_minus_i(c_asinh(_times_i(z), kernel))
    re, im = _parts(w)
    has_nan = jnp.isnan(x) | jnp.isnan(y)
    has_inf = jnp.isinf(x) | jnp.isinf(y)
    nan_re = jnp.where(x == 0, x, nan)
    nan_im = jnp.where(x == 0, y, jnp.where(has_inf, jnp.copysign(inf, y), nan))
    return lax.complex(jnp.where(has_nan, nan_re, re), jnp.where(has_nan, nan_im, im))


def c_acos(z):
    """complex64: glibc's cacos (s_cacos_template.c): with a non-finite part or z = 0,
    pi/2 - casin(z) (`c_asin`) (a zero real part +0) and the negated imaginary part of
    casin; for finite z XLA's acos with its imaginary part signed opposite to y (C99's
    cacos(conj z) = conj(cacos z); XLA keeps -0 for y = -0). complex128: CPU's kernel
    computes (pi/2 + 0i) - casin(z) part by part (Vectorized<c10::complex<double>>'s
    acos, vec512_complex_double.h; its basic loop gives the same), so a zero imaginary
    part is +0 and acos(1 + 1e-30i)'s real part is pi/2 - asin's (8.9e-16, not 1e-15)."""
    x, y = _parts(z)
    f = x.dtype
    if f == jnp.float64:
        s_re, s_im = _parts(c_asin(z))
        return lax.complex(np.asarray(np.pi / 2, f) - s_re, np.asarray(0, f) - s_im)
    s_re, s_im = _parts(c_asin(z, jnp.zeros_like))  # its special values only
    sp_re = np.asarray(np.pi / 2, f) - s_re
    sp_re = jnp.where(sp_re == 0, jnp.zeros_like(sp_re), sp_re)
    r = jnp.arccos(z)
    re, im = jnp.real(r), jnp.copysign(jnp.imag(r), -y)
    special = ~jnp.isfinite(x) | ~jnp.isfinite(y) | ((x == 0) & (y == 0))
    return lax.complex(jnp.where(special, sp_re, re), jnp.where(special, -s_im, im))


def c_acosh(z):
    """glibc's cacosh (s_cacosh_template.c): for finite z XLA's acosh with a
    non-negative real part and the imaginary part signed as y; 0 + (+-pi/2) i for
    zeros; an infinite y gives inf + (+-pi/2, +-pi/4 or +-3pi/4 for an infinite x,
    NaN for a NaN x) i; an infinite x otherwise inf + (+-0 or +-pi by x's sign, NaN for
    a NaN y) i; a NaN part otherwise NaN + (pi/2 for x = 0, else NaN) i."""
    x, y = _parts(z)
    f = x.dtype
    inf, nan = np.asarray(np.inf, f), np.asarray(np.nan, f)
    pi = np.asarray(np.pi, f)
    r = jnp.arccosh(z)
    re, im = jnp.abs(jnp.real(r)), jnp.copysign(jnp.abs(jnp.imag(r)), y)
    zeros = (x == 0) & (y == 0)
    re = jnp.where(zeros, jnp.zeros_like(x), re)
    im = jnp.where(zeros, jnp.copysign(pi / 2, y), im)
    fin_x, fin_y = jnp.isfinite(x), jnp.isfinite(y)
    nan_part = jnp.isnan(x) | jnp.isnan(y)
    re = jnp.where(nan_part, nan, re)
    im = jnp.where(nan_part, jnp.where(x == 0, pi / 2, nan), im)
    x_inf = jnp.isinf(x)
    re = jnp.where(x_inf, inf, re)
    im = jnp.where(x_inf, jnp.where(fin_y, jnp.copysign(jnp.where(jnp.signbit(x), pi, 0), y), nan), im)
    y_inf = jnp.isinf(y)
    yinf_im = jnp.where(x_inf, jnp.where(x < 0, np.asarray(3 * np.pi / 4, f), np.asarray(np.pi / 4, f)), pi / 2)
    re = jnp.where(y_inf, inf, re)
    im = jnp.where(y_inf, jnp.where(jnp.isnan(x), nan, jnp.copysign(yinf_im, y)), im)
    return lax.complex(re, im)


def _x2y2m1(x, y):
    """x^2 + y^2 - 1, as glibc's __x2y2m1 (exactly, then rounded): in float64 for
    float32 parts; for float64, (x - 1)(x + 1) + y^2."""
    if x.dtype == jnp.float32:
        x64, y64 = x.astype(jnp.float64), y.astype(jnp.float64)
        return (x64 * x64 + y64 * y64 - 1).astype(jnp.float32)
    return (x - 1) * (x + 1) + y * y


def c_atanh(z):
    """glibc's catanh (s_catanh_template.c): its formulas for finite z (past 16 / eps
    the real part 1 / x, x / y^2 or x / (4 h^2) with h = hypot(x / 2, y / 2) and the
    imaginary part +-pi/2; otherwise log((1 + x)^2 + y^2) / ((1 - x)^2 + y^2)) / 4
    (log1p of 4x over the divisor where that ratio is at least 1/2, and (ln 2 -
    ln|y|) / 2 for |x| = 1 and a tiny y) and atan2(2y, (1 - x^2 - y^2)) / 2); C99's
    special values: +-0 + (+-pi/2) i for an infinite y, or an infinite or zero x (NaN i
    for a NaN y); NaN + NaN i for other NaN parts; z itself for zeros."""
    x, y = _parts(z)
    f = x.dtype
    fi = jnp.finfo(f)
    eps = float(fi.eps)
    nan, zero = np.asarray(np.nan, f), np.asarray(0, f)
    half_pi = np.asarray(np.pi / 2, f)
    ax, ay = jnp.abs(x), jnp.abs(y)
    # huge parts
    huge = (ax >= 16 / eps) | (ay >= 16 / eps)
    h = jnp.hypot(x / 2, y / 2)
    # The barriers keep XLA from folding x / h / h into x / (h * h), whose h * h overflows.
    huge_re = jnp.where(ay <= 1, 1 / x, jnp.where(ax <= 1, lax.optimization_barrier(x / y) / y,
                                                  lax.optimization_barrier(x / h) / h / 4))
    # real part
    i2 = jnp.where(ay >= eps * eps, y * y, zero)
    num = 1 + x
    num = i2 + num * num
    den = 1 - x
    den = i2 + den * den
    ratio = num / den
    re = jnp.where(ratio < 0.5, 0.25 * jnp.log(ratio), 0.25 * jnp.log1p(4 * x / den))
    unit = (ax == 1) & (ay < eps * eps)
    re = jnp.where(unit, jnp.copysign(np.asarray(0.5, f), x) * (np.asarray(math.log(2), f) - jnp.log(ay)), re)
    # imaginary part
    big, small = jnp.maximum(ax, ay), jnp.minimum(ax, ay)
    d_small_y = (1 - big) * (1 + big)
    d_small_y = jnp.where(d_small_y == 0, zero, d_small_y)
    d_plain = (1 - big) * (1 + big) - small * small
    d = jnp.where(small < eps / 2, d_small_y,
                  jnp.where((big < 1) & ((big >= 0.75) | (small >= 0.5)), -_x2y2m1(big, small), d_plain))
    im = 0.5 * jnp.arctan2(2 * y, d)
    re = jnp.where(huge, huge_re, re)
    im = jnp.where(huge, jnp.copysign(half_pi, y), im)
    # special values
    fin_x, fin_y = jnp.isfinite(x), jnp.isfinite(y)
    y_inf = jnp.isinf(y)
    x_edge = ~y_inf & (jnp.isinf(x) | (x == 0))
    special_re = jnp.where(y_inf | x_edge, jnp.copysign(zero, x), nan)
    special_im = jnp.where(y_inf | (x_edge & ~jnp.isnan(y)), jnp.copysign(half_pi, y), nan)
    special = ~fin_x | ~fin_y
    re, im = jnp.where(special, special_re, re), jnp.where(special, special_im, im)
    zeros = (x == 0) & (y == 0)
    return lax.complex(jnp.where(zeros, x, re), jnp.where(zeros, y, im))


def c_atan(z):
    """glibc's catan: -i catanh(i z) (`c_atanh`), as s_catan_template.c mirrors catanh."""
    return _times_minus_i(c_atanh(_times_i(z)))


def c_reciprocal(z):
    """CPU's complex reciprocal: c10's (1 + 0i) / z (`c_div`; Vectorized's reciprocal
    divides element by element too), written out for that dividend: XLA would fold
    1 * rat + 0 into rat, turning c10's +0 for a -0 ratio into -0 (reciprocal(-2i) is
    -0 + 0.5i on CPU)."""
    c, d = _parts(z)
    f = c.dtype
    nan, zero, one = np.asarray(np.nan, f), np.asarray(0, f), np.asarray(1, f)
    real_major = jnp.abs(c) >= jnp.abs(d)
    rat = jnp.where(real_major, d / c, c / d)
    den = jnp.where(real_major, c + d * rat, d + c * rat)
    zero_rat = jnp.where(jnp.isfinite(rat), zero, nan)  # 0 * rat
    plus_rat = jnp.where(rat == 0, zero, rat)  # rat + 0
    minus_rat = jnp.where(rat == 0, zero, -rat)  # 0 - rat
    re = jnp.where(real_major, one + zero_rat, plus_rat) / den
    im = jnp.where(real_major, minus_rat, zero_rat - one) / den
    divisor_zero = (c == 0) & (d == 0)
    re = jnp.where(divisor_zero, one / jnp.abs(c), re)
    im = jnp.where(divisor_zero, nan, im)
    return lax.complex(re, im)


def c_rsqrt(z):
    """CPU's complex rsqrt, 1 / sqrt(z): glibc's csqrt (`c_sqrt`), then c10's division
    (`c_div`), as the scalar kernel and Vectorized's sqrt().reciprocal() compute it."""
    return c_reciprocal(c_sqrt(z))


# ------------------------------------------------------------------ unary
def _unary_float(fn):
    """Ops whose integer inputs give floating outputs (exp, log, sin, ...)."""

    def lower(self):
        out = _out()
        return fn(cast(self, _compute(out))).astype(out)

    return lower


def _real_or_complex(real, complex_):
    """`real` for real arrays, `complex_` (CPU's special values) for complex ones."""
    return lambda x: complex_(x) if jnp.iscomplexobj(x) else real(x)


_FLOAT_UNARY = {
    aten.exp: _real_or_complex(jnp.exp, c_exp), aten.exp2: jnp.exp2,
    aten.expm1: _real_or_complex(jnp.expm1, c_expm1), aten.log: _real_or_complex(jnp.log, c_log),
    aten.log2: _real_or_complex(jnp.log2, c_log_base(2)), aten.log10: _real_or_complex(jnp.log10, c_log_base(10)),
    aten.log1p: _real_or_complex(jnp.log1p, c_log1p),
    aten.sqrt: _real_or_complex(jnp.sqrt, c_sqrt), aten.rsqrt: _real_or_complex(lax.rsqrt, c_rsqrt),
    aten.sin: _real_or_complex(jnp.sin, c_sin), aten.cos: _real_or_complex(jnp.cos, c_cos),
    aten.tan: _real_or_complex(jnp.tan, c_tan), aten.asin: _real_or_complex(jnp.arcsin, c_asin),
    aten.acos: _real_or_complex(jnp.arccos, c_acos), aten.atan: _real_or_complex(jnp.arctan, c_atan),
    aten.sinh: _real_or_complex(jnp.sinh, c_sinh), aten.cosh: _real_or_complex(jnp.cosh, c_cosh),
    aten.tanh: _real_or_complex(jnp.tanh, c_tanh), aten.asinh: _real_or_complex(jnp.arcsinh, c_asinh),
    aten.acosh: _real_or_complex(jnp.arccosh, c_acosh), aten.atanh: _real_or_complex(jnp.arctanh, c_atanh),
    aten.erf: jax.scipy.special.erf, aten.erfc: jax.scipy.special.erfc, aten.erfinv: lambda x: _erfinv(x),
    aten.sigmoid: _real_or_complex(jax.nn.sigmoid, c_sigmoid),
    aten.reciprocal: _real_or_complex(lambda x: 1 / x, c_reciprocal),
    aten.lgamma: jax.scipy.special.gammaln,
    aten.digamma: lambda x: _digamma(x), aten.i0: jax.scipy.special.i0, aten.sinc: jnp.sinc,
    aten.deg2rad: jnp.deg2rad, aten.rad2deg: jnp.rad2deg,
}
for _op, _fn in _FLOAT_UNARY.items():
    lowering(_op.default)(_unary_float(_fn))


def _erfinv(y):
    """ATen's calc_erfinv (ATen/native/Math.h): a rational first guess, then two
    Newton steps on erf(x) = y, which CPU's result owes its last digits to (JAX's
    single polynomial is ~10x less accurate in float32, and erfinv's derivative
    exp(x^2) amplifies that near |y| = 1). Where |y| > 0.5 the residual erf(x) - y is
    taken as (1 - |y|) - erfc(|x|) (1 - |y| is exact there): XLA's float32 erf is a few
    ulps off near 1, which a Newton step would divide by the tiny erf'(x)."""
    a = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
    b = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
    c = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
    d = (3.543889200, 1.637067800)
    y_abs = jnp.abs(y)
    z = y * y
    central = y * (((a[3] * z + a[2]) * z + a[1]) * z + a[0]) / ((((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + 1)
    z = jnp.sqrt(-jnp.log((1 - jnp.minimum(y_abs, 1)) / 2))
    tail = jnp.copysign(((c[3] * z + c[2]) * z + c[1]) * z + c[0], y) / ((d[1] * z + d[0]) * z + 1)
    x = jnp.where(y_abs <= 0.7, central, tail)
    two_over_sqrt_pi = 2 / math.sqrt(math.pi)
    tail_side = y_abs > 0.5
    for _ in range(2):
        far = (1 - y_abs) - jax.scipy.special.erfc(jnp.abs(x))
        far = jnp.where(y < 0, -far, far)
        residual = jnp.where(tail_side, far, jax.scipy.special.erf(x) - y)
        x = x - residual / (two_over_sqrt_pi * jnp.exp(-x * x))
    x = jnp.where(y_abs == 1, jnp.copysign(jnp.inf, y), x)
    return jnp.where(y_abs > 1, jnp.nan, x)


def _digamma(x):
    """ATen's calc_digamma: -inf at +0, +inf at -0, nan at negative integers, and below
    zero the reflection digamma(1 - x) - pi / tan(pi * frac(x)), which stays accurate
    near the poles (JAX's digamma loses half the digits there)."""
    neg = x < 0
    frac = x - jnp.trunc(x)
    r = jax.scipy.special.digamma(jnp.where(neg, 1 - x, x))
    r = jnp.where(neg, r - jnp.pi / jnp.tan(jnp.pi * frac), r)
    r = jnp.where(neg & (frac == 0), jnp.nan, r)
    return jnp.where(x == 0, jnp.copysign(jnp.inf, -x), r)


def _trigamma(x):
    """ATen's trigamma (ATen/native/Math.h): reflection below 1/2, six recurrence steps,
    then the asymptotic series."""
    reflect = x < 0.5
    sin_pi_x = jnp.sin(jnp.pi * x)
    result = jnp.where(reflect, -(jnp.pi * jnp.pi) / (sin_pi_x * sin_pi_x), 0).astype(x.dtype)
    x = jnp.where(reflect, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    result = result + (1 + 1 / (2 * x) + ixx * (1. / 6 - ixx * (1. / 30 - ixx * (1. / 42)))) / x
    return jnp.where(reflect, -result, result)


def _zeta(s, q):
    """ATen's zeta (Hurwitz, Cephes): inf at s = 1, NaN for s < 1, inf at the poles
    q = 0, -1, ..., NaN for a non-integer s at a negative q; like Cephes, the
    terms 1 / (q + k)^s are summed directly until q + k > 9 and JAX's zeta (whose
    fixed-length series is inaccurate for negative q) continues from there."""
    s, q = jnp.broadcast_arrays(s, q)
    shifts = jnp.maximum(jnp.ceil(9 - q), 0)

    def body(carry):
        k, acc = carry
        return k + 1, acc + jnp.where(k < shifts, jnp.power(q + k, -s), 0)

    _, head = lax.while_loop(lambda c: c[0] < jnp.max(shifts, initial=0), body, (jnp.zeros((), q.dtype), jnp.zeros_like(q)))
    r = head + jax.scipy.special.zeta(s, q + shifts)
    # Cephes' order of cases: s == 1 is a pole, s < 1 is outside the domain, then q's
    # poles, then a non-integer s at a negative q.
    r = jnp.where((q <= 0) & (s != jnp.floor(s)), jnp.nan, r)
    r = jnp.where((q <= 0) & (q == jnp.floor(q)), jnp.inf, r)
    r = jnp.where(s < 1, jnp.nan, r)
    return jnp.where(s == 1, jnp.inf, r)


@lowering(aten.special_zeta.default, aten.special_zeta.self_scalar, aten.special_zeta.other_scalar)
@cpu_kernel_lacks_half("zeta_cpu")
def special_zeta(self, other):
    """aten::special_zeta: the Hurwitz zeta function zeta(self, other) (ATen's zeta, see
    `_zeta`); integer inputs give the default float dtype."""
    out = _out()
    c = _compute(out)
    return _zeta(cast(self, c), cast(other, c)).astype(out)


@lowering(aten.polygamma.default)
def polygamma(n, self):
    """aten::polygamma (ATen's calc_polygamma): digamma for n = 0, trigamma for n = 1,
    else (-1)^(n+1) n! zeta(n + 1, x); integer inputs give the default float dtype."""
    out = _out()
    x = cast(self, _compute(out))
    if n == 0:
        r = _digamma(x)
    elif n == 1:
        r = _trigamma(x)
    else:
        # zeta in float64: for float32 its series cancels badly at negative x (CPU's float
        # kernel is accurate to float32 there; JAX's float32 zeta is off by up to 0.4%).
        z = _zeta(jnp.asarray(n + 1, jnp.float64), x.astype(jnp.float64))
        r = ((1.0 if n % 2 else -1.0) * math.exp(math.lgamma(n + 1.0)) * z).astype(x.dtype)
    return r.astype(out)


def _unary_same(fn, int_identity=False):
    def lower(self):
        out = _out()
        if int_identity and not is_float(self.dtype):
            return self.astype(out)
        return fn(cast(self, _compute(out))).astype(out)

    return lower


lowering(aten.neg.default)(_unary_same(jnp.negative))


@lowering(aten.abs.default)
def abs_(self):
    # Not _unary_same: a complex input must keep its imaginary part until the modulus
    # is taken (the output dtype is real). CPU's is hypot (std::abs, Sleef's hypot in
    # Vectorized): an infinite part gives inf even with a NaN other part, where XLA's
    # gives NaN.
    if jnp.iscomplexobj(self):
        re, im = _parts(self)
        inf = np.asarray(np.inf, re.dtype)
        return jnp.where(jnp.isinf(re) | jnp.isinf(im), inf, jnp.abs(self)).astype(_out())
    return jnp.abs(self).astype(_out())


@lowering(aten.angle.default)
def angle(self):
    """aten::angle: the argument of a complex number; for real inputs pi where
    negative, else 0, and NaN where NaN (integers give the default float dtype)."""
    out = _out()
    if jnp.iscomplexobj(self):
        return jnp.angle(self).astype(out)
    x = cast(self, _compute(out))
    return jnp.where(jnp.isnan(x), x, jnp.where(x < 0, jnp.pi, 0)).astype(out)


@lowering(aten._conj.default, eager=False)
def conj_view(self):
    """aten::_conj in compiled graphs, by value (in eager it is a view with the conj bit,
    PyTorch's own kernel)."""
    return jnp.conj(self)


@lowering(aten._neg_view.default, eager=False)
def neg_view(self):
    """aten::_neg_view in compiled graphs, by value (in eager, a view with the neg bit)."""
    return -self


@lowering(aten.conj_physical.default)
def conj_physical(self):
    """aten::conj_physical: the complex conjugate, materialized (a copy for real
    inputs). The functional overload is composite in eager; this lowering gives its
    `out=` and in-place variants."""
    return jnp.conj(self) if jnp.iscomplexobj(self) else self


def _sign(x):
    """CPU's sign, `(0 < x) - (x < 0)`: NaN and -0.0 give +0.0 (jnp.sign keeps them); a
    bool is itself (jnp.sign refuses bools)."""
    if x.dtype == jnp.bool_:
        return x
    if not is_float(x.dtype):
        return jnp.sign(x)
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


lowering(aten.sign.default)(_unary_same(_sign))
lowering(aten.floor.default)(_unary_same(jnp.floor, int_identity=True))
lowering(aten.ceil.default)(_unary_same(jnp.ceil, int_identity=True))
lowering(aten.trunc.default)(_unary_same(jnp.trunc, int_identity=True))
lowering(aten.frac.default)(_unary_same(lambda x: x - jnp.trunc(x)))
lowering(aten.square.default)(_unary_same(lambda x: x * x))


@lowering(aten.round.default)
def round_(self):
    if not is_float(self.dtype):
        return self
    return jnp.round(cast(self, _compute(self.dtype))).astype(self.dtype)


@lowering(aten.round.decimals, static=("decimals",))
def round_decimals(self, decimals=0):
    c = _compute(self.dtype)
    scale = 10.0 ** decimals
    return (jnp.round(cast(self, c) * scale) / scale).astype(self.dtype)


@lowering(aten.signbit.default)
def signbit(self):
    return jnp.signbit(self) if is_float(self.dtype) else self < 0


@lowering(aten.isnan.default)
def isnan(self):
    return jnp.isnan(self) if is_float(self.dtype) else jnp.zeros(self.shape, jnp.bool_)


@lowering(aten.isinf.default)
def isinf(self):
    return jnp.isinf(self) if is_float(self.dtype) else jnp.zeros(self.shape, jnp.bool_)


@lowering(aten.isfinite.default)
def isfinite(self):
    return jnp.isfinite(self) if is_float(self.dtype) else jnp.ones(self.shape, jnp.bool_)


@lowering(aten.isposinf.default)
def isposinf(self):
    return jnp.isposinf(self) if is_float(self.dtype) else jnp.zeros(self.shape, jnp.bool_)


@lowering(aten.isneginf.default)
def isneginf(self):
    return jnp.isneginf(self) if is_float(self.dtype) else jnp.zeros(self.shape, jnp.bool_)


@lowering(aten.nan_to_num.default, static=("nan", "posinf", "neginf"))
def nan_to_num(self, nan=None, posinf=None, neginf=None):
    if not is_float(self.dtype):
        return self
    info = jnp.finfo(self.dtype)
    return jnp.nan_to_num(self, nan=0.0 if nan is None else nan,
                          posinf=info.max if posinf is None else posinf,
                          neginf=info.min if neginf is None else neginf)


# ------------------------------------------------------------------ activations
@lowering(aten.relu.default)
def relu(self):
    return jnp.maximum(self, jnp.zeros((), self.dtype)) if self.dtype != jnp.bool_ else self


@lowering(aten.gelu.default, static=("approximate",))
def gelu(self, approximate="none"):
    c = _compute(self.dtype)
    x = self.astype(c)
    if approximate == "tanh":
        y = 0.5 * x * (1 + jnp.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    else:
        y = 0.5 * x * (1 + jax.scipy.special.erf(x / np.sqrt(2)))
    return y.astype(self.dtype)


@lowering(aten.gelu_backward.default, static=("approximate",))
def gelu_backward(grad_output, self, approximate="none"):
    c = _compute(self.dtype)
    x, g = self.astype(c), grad_output.astype(c)
    if approximate == "tanh":
        k = np.sqrt(2 / np.pi)
        inner = k * (x + 0.044715 * x ** 3)
        t = jnp.tanh(inner)
        d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)
    else:
        cdf = 0.5 * (1 + jax.scipy.special.erf(x / np.sqrt(2)))
        pdf = jnp.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)
        d = cdf + x * pdf
    return (g * d).astype(self.dtype)


@lowering(aten.silu.default)
def silu(self):
    c = _compute(self.dtype)
    x = self.astype(c)
    return (x * jax.nn.sigmoid(x)).astype(self.dtype)


@lowering(aten.silu_backward.default)
def silu_backward(grad_output, self):
    c = _compute(self.dtype)
    x, g = self.astype(c), grad_output.astype(c)
    s = jax.nn.sigmoid(x)
    return (g * s * (1 + x * (1 - s))).astype(self.dtype)


@lowering(aten.sigmoid_backward.default)
def sigmoid_backward(grad_output, output):
    c = _compute(output.dtype)
    y, g = output.astype(c), grad_output.astype(c)
    # Complex: ATen's kernel multiplies by the conjugate derivative (Wirtinger calculus).
    return (g * jnp.conj(y * (1 - y))).astype(output.dtype)


@lowering(aten.tanh_backward.default)
def tanh_backward(grad_output, output):
    c = _compute(output.dtype)
    y, g = output.astype(c), grad_output.astype(c)
    # Complex: the conjugate derivative, as ATen's kernel (see sigmoid_backward).
    return (g * jnp.conj(1 - y * y)).astype(output.dtype)


def _at_most(self, threshold, dtype):
    """self <= threshold as CPU's threshold kernel (threshold_stub, which threshold and
    threshold_backward share) compares in its iterator's `dtype`: in the compute type
    (float32 for the half types, so a half 0.1 exceeds a threshold of 0.1), the
    threshold read as that type (truncated for integers). The kernel reads the Scalar
    with `Scalar::to`: to float for the half types (a float16 tensor takes a threshold
    of 70000, a float32 or bfloat16 one refuses 1e39), to `dtype` otherwise (an int8
    tensor refuses 300). `threshold` is static (a Python number), so the check raises
    at the call, as on CPU, in every call."""
    c = _compute(dtype)
    check_scalar(threshold, c)
    return self.astype(dtype).astype(c) <= cast(threshold, c)


@meta_check(aten.threshold_backward.default, aten.threshold_backward.grad_input)
def _threshold_backward_meta_check(grad_output, self, threshold, **_):
    """CPU's iterator promotes self and grad_output to their common dtype, the
    result's (bfloat16 self, float16 grad: float32); PyTorch's decomposition keeps
    grad_output's."""
    dtype = torch.result_type(grad_output, self)
    if dtype != grad_output.dtype:
        return {"grad_output": grad_output.to(dtype)}


@lowering(aten.threshold_backward.default, static=("threshold",))
def threshold_backward(grad_output, self, threshold):
    """`aten::threshold_backward`: CPU's threshold kernel with value 0 over self and
    grad_output, in their common dtype (the result's)."""
    out = _out()
    return jnp.where(_at_most(self, threshold, out), jnp.zeros((), out), grad_output.astype(out))


@lowering(aten.threshold.default, static=("threshold",))
def threshold(self, threshold, value):
    """`aten::threshold`: `value` where self <= `threshold`; `value` must fit self's
    dtype, `threshold` the dtype CPU's kernel compares in (`_at_most`). `value` stays a
    dynamic argument: the executable cache would not tell -0.0 from 0.0 (it checks as
    `check_scalar` checks traced Scalars)."""
    cmp = _at_most(self, threshold, self.dtype)
    check_scalar(value, self.dtype)
    return jnp.where(cmp, cast(value, self.dtype), self)


@lowering(aten.leaky_relu.default)
def leaky_relu(self, negative_slope=0.01):
    """`aten::leaky_relu`: CPU multiplies half types in float32 by the unrounded slope
    (read as the compute type: checked for it)."""
    check_scalar(negative_slope, _compute(self.dtype))
    x = self.astype(_compute(self.dtype))
    return jnp.where(x > 0, x, x * negative_slope).astype(self.dtype)


@lowering(aten.leaky_relu_backward.default)
def leaky_relu_backward(grad_output, self, negative_slope, self_is_result):
    check_scalar(negative_slope, _compute(grad_output.dtype))
    return jnp.where(self > 0, grad_output, grad_output * cast(negative_slope, grad_output.dtype))


@lowering(aten.hardtanh.default)
def hardtanh(self, min_val=-1, max_val=1):
    """`aten::hardtanh`: clip to [min_val, max_val], which must fit self's dtype (CPU)."""
    check_scalar(min_val, self.dtype)
    check_scalar(max_val, self.dtype)
    return jnp.clip(self, cast(min_val, self.dtype), cast(max_val, self.dtype))


@lowering(aten.hardtanh_backward.default)
def hardtanh_backward(grad_output, self, min_val, max_val):
    check_scalar(min_val, _compute(grad_output.dtype))  # CPU reads them as the compute type
    check_scalar(max_val, _compute(grad_output.dtype))
    return jnp.where((self <= min_val) | (self >= max_val), jnp.zeros((), grad_output.dtype), grad_output)


@lowering(aten.elu.default)
def elu(self, alpha=1, scale=1, input_scale=1):
    """`aten::elu`: CPU reads the Scalars as the compute type (checked for it)."""
    c = _compute(self.dtype)
    for v in (alpha, scale, input_scale):
        check_scalar(v, c)
    x = self.astype(c)
    y = jnp.where(x >= 0, x * scale, (jnp.expm1(x * input_scale)) * alpha * scale)  # 0 at 0 for alpha inf (CPU)
    return y.astype(self.dtype)


@lowering(aten.softplus.default)
def softplus(self, beta=1, threshold=20):
    """`aten::softplus`: CPU reads the Scalars as the compute type (checked for it)."""
    c = _compute(self.dtype)
    check_scalar(beta, c)
    check_scalar(threshold, c)
    x = self.astype(c)
    y = jnp.where(x * beta > threshold, x, jnp.log1p(jnp.exp(x * beta)) / beta)
    return y.astype(self.dtype)


@lowering(aten.hardshrink.default)
def hardshrink(self, lambd=0.5):
    """`aten::hardshrink`: 0 inside [-lambd, lambd], self elsewhere (and where NaN), as
    CPU's kernel, which reads lambd as self's dtype (checked for it)."""
    check_scalar(lambd, self.dtype)
    lim = cast(lambd, self.dtype)
    return jnp.where((self >= -lim) & (self <= lim), jnp.zeros((), self.dtype), self)


@lowering(aten.hardsigmoid.default)
def hardsigmoid(self):
    """`aten::hardsigmoid`: clip(x + 3, 0, 6) / 6, half types in float32 as on CPU."""
    x = self.astype(_compute(self.dtype))
    return (jnp.clip(x + 3, 0, 6) / 6).astype(self.dtype)


@lowering(aten.hardswish.default)
def hardswish(self):
    """`aten::hardswish`: x * clip(x + 3, 0, 6) / 6, half types in float32 as on CPU."""
    x = self.astype(_compute(self.dtype))
    return (x * jnp.clip(x + 3, 0, 6) / 6).astype(self.dtype)


@lowering(aten.mish.default)
def mish(self):
    c = _compute(self.dtype)
    x = self.astype(c)
    return (x * jnp.tanh(jax.nn.softplus(x))).astype(self.dtype)


@lowering(aten.logit.default)
def logit(self, eps=None):
    """`aten::logit`: log(x / (1 - x)), x first clamped to [eps, 1 - eps]. For half
    types CPU rounds the clamp bounds, 1 - x and the quotient to the type (its
    Vectorized<Half> kernel), which matters where x / (1 - x) is near 1."""
    out = _out()
    r = half_rounding(out)
    x = cast(self, _compute(out))
    if eps is not None:  # CPU's x < lo ? lo : (x > hi ? hi : x), also for eps > 0.5 (lo > hi)
        lo, hi = r(jnp.float32(eps)), r(1 - jnp.float32(eps))
        x = jnp.where(x < lo, lo, jnp.where(x > hi, hi, x))
    return jnp.log(r(x / r(1 - x))).astype(out)


def _times_log(x, y, log, out):
    """x * log(y) as CPU's xlogy/xlog1py kernels: 0 where x == 0 (also for y = inf or
    0), NaN where y is NaN; half types round log(y) to the type before the product."""
    c = _compute(out)
    x, y = cast(x, c), cast(y, c)
    product = jnp.where(x == 0, jnp.zeros((), c), x * half_rounding(out)(log(y)))
    return jnp.where(jnp.isnan(y), jnp.full((), jnp.nan, c), product).astype(out)


@lowering(aten.xlogy)
@_operands_in_half(0, 1)
def xlogy(self, other):
    """`aten::xlogy` (all overloads): self * log(other), see `_times_log`."""
    return _times_log(self, other, jnp.log, _out())


@lowering(aten.special_xlog1py)
@_operands_in_half(0, 1)
def special_xlog1py(self, other):
    """`aten::special_xlog1py` (all overloads): self * log1p(other), see `_times_log`."""
    return _times_log(self, other, jnp.log1p, _out())


@lowering(aten.special_entr.default)
def special_entr(self):
    """`aten::special_entr`: -x * log(x) for x > 0, 0 at 0, -inf below, NaN kept; half
    types round log(x) to the type before the product, as CPU's kernel."""
    out = _out()
    c = _compute(out)
    x = cast(self, c)
    positive = -x * half_rounding(out)(jnp.log(jnp.where(x > 0, x, jnp.ones((), c))))
    y = jnp.where(x > 0, positive, jnp.where(x == 0, jnp.zeros((), c), jnp.full((), -jnp.inf, c)))
    return jnp.where(jnp.isnan(x), x, y).astype(out)


# ------------------------------------------------------------------ ternary
@lowering(aten.addcmul.default)
def addcmul(self, tensor1, tensor2, value=1):
    """`aten::addcmul`: self + value * t1 * t2; `value` must fit the compute type
    (float32 for half types), as on CPU."""
    out = _out()
    c = _compute(out)
    check_scalar(value, c)
    return (cast(self, c) + _alpha(cast(tensor1, c) * cast(tensor2, c), value)).astype(out)


_ADDCDIV_INTEGER = (
    "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will perform a "
    "true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as "
    "(input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as "
    "(input + value * tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the latter "
    "implementation: (input + value * tensor1 / tensor2), for all dtypes.")


@lowering(aten.addcdiv.default)
def addcdiv(self, tensor1, tensor2, value=1):
    """`aten::addcdiv`: self + value * t1 / t2 (`value` checked as in addcmul)."""
    out = _out()
    c = _compute(out)
    if not jnp.issubdtype(jnp.result_type(tensor1, tensor2), jnp.inexact):
        raise RuntimeError(_ADDCDIV_INTEGER)
    check_scalar(value, c)
    return (cast(self, c) + _alpha(cast(tensor1, c) / cast(tensor2, c), value)).astype(out)


@lowering(aten.lerp.Scalar)
def lerp_scalar(self, end, weight):
    """`aten::lerp.Scalar`: `weight` read as CPU's kernel reads it, checked, in the
    compute type (`scalar_to`)."""
    return _lerp(self, end, scalar_to(weight, _compute(_out())))


@lowering(aten.lerp.Tensor)
@_operands_in_half(2)
def lerp(self, end, weight):
    """`aten::lerp.Tensor`: `_lerp`, with a 0-dim weight of a wider type rounded to the
    half types as TensorIterator casts it."""
    return _lerp(self, end, weight)


def _lerp(self, end, weight):
    """self + weight * (end - self) in the compute type, in ATen's two forms (the second
    for |weight| >= 0.5, exact at weight = 1)."""
    out = _out()
    c = _compute(out)
    a, b, w = cast(self, c), cast(end, c), cast(weight, c)
    # ATen's lerp: a + w*(b-a) for |w| < 0.5, else b - (b-a)*(1-w).
    return jnp.where(jnp.abs(w) < 0.5, a + w * (b - a), b - (b - a) * (1 - w)).astype(out)


# ------------------------------------------------------------------ dtype conversion
@lowering(aten._to_copy.default, eager=False)
def to_copy(self, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    """`aten::_to_copy` in compiled graphs: converts like CPU (`convert`)."""
    return convert(self, _out())


def fma(a, b, c):
    """`prims::fma` (a * b + c) in compiled graphs: Dynamo rewrites `addcmul_(t1, t2,
    value=v)` (torch.optim's single-tensor Adam, RMSprop, ...) into `fma(t1 * t2, v, self)`
    and `add_(x, alpha=tensor)` into `fma(x, alpha, self)`. Computed in the compute type
    (float32 for half types), rounded once; the product Dynamo feeds it is an `aten.mul`
    already rounded to a half type, so a compiled half-type `addcmul_` rounds twice where
    the eager op rounds once (an ulp apart in some elements)."""
    out = _out()
    comp = _compute(out)
    return (cast(a, comp) * cast(b, comp) + cast(c, comp)).astype(out)


def register_inductor_prims() -> None:
    """Lowers `prims::fma` once torch._inductor has defined it, which Dynamo does before
    it emits the op (importing it here would add a second to `import torch`)."""
    if hasattr(torch.ops.prims, "fma") and torch.ops.prims.fma.default not in LOWERINGS:
        lowering(torch.ops.prims.fma.default, eager=False)(fma)


@lowering(torch.ops.prims.convert_element_type.default, eager=False)
def convert_element_type(a, dtype):
    """`prims::convert_element_type` in compiled graphs, which some of PyTorch's
    decompositions (renorm's) emit: converts like `_to_copy`."""
    return convert(a, _out())


@lowering(aten.clone.default)
def clone(self, memory_format=None):
    return self


@lowering(aten.fill.Scalar, aten.fill.Tensor)
def fill(self, value):
    """`aten::fill` (`fill_`, `full_like` and `new_full` in eager): `value` must fit the
    dtype, as on CPU (a 0-dim tensor value, fill.Tensor, is copied unchecked like CPU)."""
    out = context().out()
    if is_number(value):
        check_scalar(value, out.dtype)
    return jnp.full(out.shape, cast(value, out.dtype), out.dtype)


@lowering(aten.zero.default)
def zero(self):
    return jnp.zeros(self.shape, self.dtype)


def _single_value(self):
    """RuntimeError (CPU's) unless `self` holds exactly one value."""
    if self.size == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if self.size > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return jnp.reshape(self, ())


@lowering(aten._assert_async.msg)
def assert_async_msg(self, assert_msg):
    """`aten::_assert_async.msg`: a device-side check that `self` (one value) is
    nonzero; raises RuntimeError(assert_msg) at the op or the next synchronization
    point, as CUDA does. Decompositions (one_hot's range check) emit it."""
    context().check(_single_value(self) != 0, RuntimeError, assert_msg)


@lowering(aten._assert_async.default)
def assert_async(self):
    """`aten::_assert_async`: `_assert_async.msg` with CPU's message (timm's Gemma 4
    ViT encoder calls it in its forward)."""
    context().check(_single_value(self) != 0, RuntimeError, "Expected Tensor with single nonzero value, but got zero")
