"""Factory lowerings: tensors made from sizes and numbers, not from other tensors.

`torch.arange/linspace/logspace/eye(..., device="neuron")` reach their CompositeExplicit
kernels, which allocate an empty tensor and call the `out=` overload; the executor
derives those `out=` overloads from the functional lowerings here (the out tensor's
dtype replaces the TensorOptions). `zeros/ones/full/*_like/empty*` need nothing here:
they allocate in the C++ shim and fill through `fill_`/`zero_`, except `full`, lowered
so it is one executable (eager) and so compiled graphs can use it.

Values follow ATen's CPU kernels (RangeFactoriesKernel.cpp): the arithmetic type and
the order of operations are mirrored so results are bitwise equal, not merely close.
"""
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._common import check_scalar, convert, not_implemented_for, scalar_to
from .registry import context, lowering

aten = torch.ops.aten

_HALF = (jnp.bfloat16, jnp.float16)


def _arange_acc(dtype):
    """at::acc_type<T, /*is_cuda=*/false>: double for float/double, float for half
    types, int64 for integers."""
    dtype = jnp.dtype(dtype)
    if dtype in _HALF:
        return jnp.dtype(jnp.float32)
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.dtype(jnp.float64)
    return jnp.dtype(jnp.int64)


# ATen's CPU kernels use 32-byte SIMD vectors for arange (also on AVX512 machines).
_VECTOR_BYTES = 32


@lowering(aten.arange.start_step, static=("start", "end", "step"))
def arange(start, end, step=1, dtype=None, layout=None, device=None, pin_memory=None):
    """`aten::arange.start_step` (and `arange.start_out`): ``start + step * i`` for
    ``i`` below the length PyTorch computed. The bounds are static (the length depends
    on them); bad bounds raise in the meta kernel, bool in the lowering as on CPU.

    Floating results reproduce ATen's CPU loop bitwise: pairs of SIMD vectors each
    start from ``start + step * i`` rounded to the output type and add ``j * step``;
    the tail is scalar, one fused multiply-add in the accumulation type. (float64
    results can differ from ATen's fused multiply-add by one ulp.)"""
    out = context().out()
    dt = jnp.dtype(out.dtype)
    if dt == jnp.bool_ or jnp.issubdtype(dt, jnp.complexfloating):
        raise not_implemented_for("arange_cpu", dt)
    n = out.shape[0]
    acc = _arange_acc(dt)
    if not jnp.issubdtype(acc, jnp.floating):
        return (jnp.asarray(start, acc) + jnp.asarray(step, acc) * jnp.arange(n, dtype=acc)).astype(dt)
    w = jnp.float64  # float32 multiply-adds are exact in float64 before the final rounding
    s, st = jnp.asarray(start, acc).astype(w), jnp.asarray(step, acc).astype(w)
    i = jnp.arange(n, dtype=w)
    scalar = (s + st * i).astype(acc).astype(dt)
    lanes = _VECTOR_BYTES // dt.itemsize
    lane = i % lanes
    base = (s + st * (i - lane)).astype(acc).astype(dt).astype(w)
    vector = (base + lane * st).astype(dt)
    vectorized = i < (n // (2 * lanes)) * (2 * lanes)
    return jnp.where(vectorized, vector, scalar)


@lowering(aten.full.default)
def full(size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    """`aten::full`: `size` filled with `fill_value`, converted to the dtype PyTorch
    inferred (bool -> bool, int -> int64, float -> default dtype); it must fit that
    dtype, as on CPU."""
    out = context().out()
    check_scalar(fill_value, out.dtype)
    return jnp.full(out.shape, jnp.asarray(fill_value).astype(out.dtype))


@lowering(aten.full_like.default, eager=False)
def full_like(self, fill_value, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    """`aten::full_like` in compiled graphs (eager: ATen's empty_like + fill_)."""
    return full(None, fill_value)


@lowering(aten._efficientzerotensor.default)
def efficient_zero_tensor(size, dtype=None, layout=None, device=None, pin_memory=None):
    """`aten::_efficientzerotensor`: the zeros autograd uses for the gradient of an
    input an output does not depend on. On the CPU it is a tensor with the ZeroTensor
    flag (no storage); here a tensor of zeros, which every op reads the same way."""
    out = context().out()
    return jnp.zeros(out.shape, out.dtype)


@lowering(aten.scalar_tensor.default)
def scalar_tensor(s, dtype=None, layout=None, device=None, pin_memory=None):
    """`aten::scalar_tensor`: a 0-dim tensor holding `s`, which must fit the dtype, as
    CPU checks (`torch.where(x_uint8 > 1, x, 300)` raises), except that float16 and
    bfloat16 are filled through a checked double (70000 gives inf; an imaginary part
    raises, naming double)."""
    dtype = context().out_dtype()
    half = jnp.dtype(dtype) in (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))
    return jnp.asarray(scalar_to(s, jnp.float64 if half else dtype)).astype(dtype)


def _round_each(dtype):
    """For half types every intermediate of ATen's linspace is rounded to the type
    (c10::Half and c10::BFloat16 arithmetic returns the half type)."""
    return lambda x: x.astype(dtype).astype(jnp.float32)


# c10 names of the C++ types in Scalar conversion errors.
_CPP_NAMES = {jnp.dtype(jnp.uint8): "uint8_t", jnp.dtype(jnp.int8): "int8_t", jnp.dtype(jnp.int16): "int16_t",
              jnp.dtype(jnp.int32): "int", jnp.dtype(jnp.int64): "int64_t", jnp.dtype(jnp.float16): "c10::Half",
              jnp.dtype(jnp.bfloat16): "c10::BFloat16", jnp.dtype(jnp.float32): "float"}


def _scalar_to(value, dtype):
    """`value` (a Python number) converted to `dtype` the way c10::Scalar::to<T>()
    does: floats truncate toward zero into integers, negative integers wrap into
    unsigned types (down to -max), anything else out of range is a RuntimeError."""
    dtype = jnp.dtype(dtype)
    if dtype == jnp.bool_:
        return bool(value)
    name = _CPP_NAMES.get(dtype)
    integer = jnp.issubdtype(dtype, jnp.integer)
    if name is not None and np.isfinite(value):
        info = jnp.iinfo(dtype) if integer else jnp.finfo(dtype)
        lo = -float(info.max) if integer and info.min == 0 and isinstance(value, int) else float(info.min)
        if not lo <= value <= float(info.max):
            raise RuntimeError(f"value cannot be converted to type {name} without overflow")
    if integer:
        return int(value) % 256 if dtype == jnp.uint8 else int(value)
    return value


def _dispatch_check(dtype, op):
    """ATen's CPU kernels for linspace/logspace have no bool case."""
    if jnp.dtype(dtype) == jnp.bool_:
        raise NotImplementedError(f'"{op}_cpu" not implemented for \'Bool\'')


@lowering(aten.linspace.default, static=("start", "end"))
def linspace(start, end, steps, dtype=None, layout=None, device=None, pin_memory=None):
    """`aten::linspace` (and `linspace.out`): `steps` points from `start` to `end`; the
    first half counts up from `start`, the second half down from `end`, as ATen does.

    The bounds are static: like ATen they are first converted to the output type
    (RuntimeError on overflow; bool outputs raise NotImplementedError). Integer outputs
    compute in double and truncate; float outputs compute in their own type."""
    out = context().out_dtype()
    if steps == 0:
        return jnp.zeros((0,), out)
    if steps == 1:  # ATen fills with `start`: no kernel, so bool works too
        return jnp.full((1,), _scalar_to(start, out), out)
    _dispatch_check(out, "linspace")
    s, e = _scalar_to(start, out), _scalar_to(end, out)
    idx = np.arange(steps)
    up = idx < steps // 2
    down = steps - idx - 1
    if jnp.issubdtype(out, jnp.integer):
        step = (float(e) - float(s)) / (steps - 1)
        return jnp.asarray(np.where(up, s + step * idx, e - step * down)).astype(out)
    if out in _HALF:
        r = _round_each(out)
        s, e = r(jnp.float32(s)), r(jnp.float32(e))
        step = r(r(e - s) / r(jnp.float32(steps - 1)))
        vals = jnp.where(up, r(s + r(step * r(jnp.asarray(idx, jnp.float32)))),
                         r(e - r(step * r(jnp.asarray(down, jnp.float32)))))
        return vals.astype(out)
    return float_linspace(s, e, steps, out)


def float_linspace(start, end, steps: int, dtype):
    """ATen's CPU linspace into float32/float64 (`steps` >= 2): the bounds and the step
    in `dtype`, the first half counted up from `start`, the second half down from
    `end`. `start`/`end` may be numbers or traced arrays."""
    s, e = jnp.asarray(start, dtype), jnp.asarray(end, dtype)
    step = (e - s) / jnp.asarray(steps - 1, dtype)
    # ATen's `start + step * i` compiles to a fused multiply-add (one rounding): float32
    # gets that from computing in float64; float64 may differ from it by one ulp.
    w = jnp.float64
    s, e, step = s.astype(w), e.astype(w), step.astype(w)
    i = lax.iota(w, steps)
    return jnp.where(i < steps // 2, s + step * i, e - step * (steps - 1 - i)).astype(dtype)


@lowering(aten.logspace.default, static=("start", "end"))
def logspace(start, end, steps, base=10.0, dtype=None, layout=None, device=None, pin_memory=None):
    """`aten::logspace` (and `logspace.out`): ``base ** linspace(start, end)``, computed
    in double from bounds converted to the output type (errors as in `linspace`)."""
    out = context().out_dtype()
    if steps == 0:
        return jnp.zeros((0,), out)
    base = jnp.asarray(base, jnp.float64)
    if steps == 1:
        return jnp.full((1,), convert(jnp.power(base, jnp.float64(start)), out))
    _dispatch_check(out, "logspace")
    s, e = _scalar_to(start, out), _scalar_to(end, out)
    idx = np.arange(steps)
    s, e = jnp.asarray(s, out), jnp.asarray(e, out)
    # The subtraction happens in C++'s type for `end - start` of the output type: integer
    # types narrower than int promote to int (uint8 0 - 1 is -1, not 255).
    diff = jnp.int32 if jnp.issubdtype(out, jnp.integer) and jnp.dtype(out).itemsize < 4 else out
    step = (e.astype(diff) - s.astype(diff)).astype(jnp.float64) / (steps - 1)
    s, e = s.astype(jnp.float64), e.astype(jnp.float64)
    expo = jnp.where(idx < steps // 2, s + step * idx, e - step * (steps - idx - 1))
    return convert(jnp.power(base, expo), out)  # integers wrap as ATen's cast does


@lowering(aten.eye.default, aten.eye.m)
def eye(n, m=None, dtype=None, layout=None, device=None, pin_memory=None):
    """`aten::eye` (and `eye.out`, `eye.m_out`): ones on the main diagonal of an n x m
    matrix (m defaults to n)."""
    out = context().out()
    return jnp.eye(out.shape[0], out.shape[1], dtype=out.dtype)


def _tri_indices(row, col, offset, lower):
    r, c = np.meshgrid(np.arange(row), np.arange(col), indexing="ij")
    keep = (c - r <= offset) if lower else (c - r >= offset)
    return np.stack([r[keep], c[keep]])


@lowering(aten.tril_indices.default)
def tril_indices(row, col, offset=0, dtype=None, layout=None, device=None, pin_memory=None):
    """`aten::tril_indices`: the (2, N) row-major coordinates of the lower triangle of a
    row x col matrix, below diagonal `offset`. All arguments are static."""
    return jnp.asarray(_tri_indices(row, col, offset, True)).astype(context().out_dtype())


@lowering(aten.triu_indices.default)
def triu_indices(row, col, offset=0, dtype=None, layout=None, device=None, pin_memory=None):
    """`aten::triu_indices`: like `tril_indices`, for the upper triangle."""
    return jnp.asarray(_tri_indices(row, col, offset, False)).astype(context().out_dtype())


@lowering(aten.empty.memory_format, aten.empty_strided.default, aten.empty_permuted.default, eager=False)
def empty(size, *args, **kwargs):
    """`aten::empty` and its strided/permuted forms in compiled graphs (decompositions
    such as zeros_like's and index_add's create them before filling them). Their
    contents are unspecified; zeros are the cheapest definite value for XLA."""
    out = context().out()
    return jnp.zeros(out.shape, out.dtype)
