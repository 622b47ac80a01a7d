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


@lowering(aten.arange.start_step, static=("start", "end", "step"))
def arange(start, end, step=1, dtype=None, layout=None, device=None, pin_memory=None):
    """`aten::arange.start_step` (and `arange.start_out`): ``start + step * i`` computed
    in ATen's accumulation type, for ``i`` below the length PyTorch computed. The
    bounds are static (the length depends on them); bad bounds raise in the meta kernel."""
    out = context().out()
    acc = _arange_acc(out.dtype)
    i = jnp.arange(out.shape[0], dtype=acc)
    return (jnp.asarray(start, acc) + jnp.asarray(step, acc) * i).astype(out.dtype)


@lowering(aten.full.default)
def full(size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    """`aten::full`: `size` filled with `fill_value`, converted to the dtype PyTorch
    inferred (bool -> bool, int -> int64, float -> default dtype)."""
    out = context().out()
    return jnp.full(out.shape, jnp.asarray(fill_value).astype(out.dtype))


@lowering(aten.scalar_tensor.default)
def scalar_tensor(s, dtype=None, layout=None, device=None, pin_memory=None):
    """`aten::scalar_tensor`: a 0-dim tensor holding `s`."""
    return jnp.asarray(s).astype(context().out_dtype())


def _round_each(dtype):
    """For half types every intermediate of ATen's linspace is rounded to the type
    (c10::Half and c10::BFloat16 arithmetic returns the half type)."""
    return lambda x: x.astype(dtype).astype(jnp.float32)


@lowering(aten.linspace.default)
def linspace(start, end, steps, dtype=None, layout=None, device=None, pin_memory=None):
    """`aten::linspace` (and `linspace.out`): `steps` points from `start` to `end`; the
    first half counts up from `start`, the second half down from `end`, as ATen does.

    Integer outputs compute in double from the integer-converted bounds and truncate;
    float outputs compute in their own type."""
    out = context().out_dtype()
    if steps == 0:
        return jnp.zeros((0,), out)
    if steps == 1:
        return jnp.full((1,), jnp.asarray(start).astype(out))
    idx = np.arange(steps)
    up = idx < steps // 2
    if jnp.issubdtype(out, jnp.integer) or out == jnp.bool_:
        s = jnp.asarray(start).astype(out).astype(jnp.float64)
        e = jnp.asarray(end).astype(out).astype(jnp.float64)
        step = (e - s) / (steps - 1)
        vals = jnp.where(up, s + step * idx, e - step * (steps - idx - 1))
        return vals.astype(out)
    if out in _HALF:
        r = _round_each(out)
        s, e = r(jnp.asarray(start).astype(jnp.float32)), r(jnp.asarray(end).astype(jnp.float32))
        step = r(r(e - s) / r(jnp.float32(steps - 1)))
        fi = r(jnp.asarray(idx, jnp.float32))
        fj = r(jnp.asarray(steps - idx - 1, jnp.float32))
        vals = jnp.where(up, r(s + r(step * fi)), r(e - r(step * fj)))
        return vals.astype(out)
    s, e = jnp.asarray(start).astype(out), jnp.asarray(end).astype(out)
    step = (e - s) / jnp.asarray(steps - 1, out)
    vals = jnp.where(up, s + step * jnp.asarray(idx, out), e - step * jnp.asarray(steps - idx - 1, out))
    return vals.astype(out)


@lowering(aten.logspace.default)
def logspace(start, end, steps, base=10.0, dtype=None, layout=None, device=None, pin_memory=None):
    """`aten::logspace` (and `logspace.out`): ``base ** linspace(start, end)``, computed
    in double from bounds converted to the output type, as ATen's CPU kernel does."""
    out = context().out_dtype()
    if steps == 0:
        return jnp.zeros((0,), out)
    base = jnp.asarray(base, jnp.float64)
    if steps == 1:
        return jnp.full((1,), jnp.power(base, jnp.asarray(start, jnp.float64)).astype(out))
    idx = np.arange(steps)
    s = jnp.asarray(start).astype(out)
    e = jnp.asarray(end).astype(out)
    span = (e - s).astype(jnp.float64)  # the subtraction happens in the output type
    step = span / (steps - 1)
    s, e = s.astype(jnp.float64), e.astype(jnp.float64)
    expo = jnp.where(idx < steps // 2, s + step * idx, e - step * (steps - idx - 1))
    return jnp.power(base, expo).astype(out)


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
