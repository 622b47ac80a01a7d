"""Helpers shared by lowerings: PyTorch's type promotion and dim handling in JAX terms.

Inside a trace, a Python number argument (a "wrapped number" in ATen) arrives as a
weakly typed JAX scalar or a Python number; a 0-dim tensor arrives as a strongly typed
0-dim array. `result_type` applies ATen's rules to these (at::native::result_type):
dimensioned tensors decide the dtype unless a 0-dim tensor or a number is of a higher
category (bool < integer < floating < complex), and numbers take the default dtype
of their category.
"""
from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax._src import dtypes as jax_dtypes

from ..runtime import dtypes as dt


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


def result_type(*args):
    """ATen's result type of tensors (JAX arrays) and numbers; None entries are skipped."""
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
    return _combine(dim, _combine(zero, wrapped))


def cast(x, dtype):
    """`x` (array or number) as an array of `dtype`."""
    return jnp.asarray(x).astype(dtype) if not isinstance(x, (bool, int, float, complex)) else jnp.asarray(x, dtype)


def is_float(d) -> bool:
    return _category(d) >= 2


def convert(x, dtype):
    """`x` (an array) converted to `dtype` as ATen's CPU conversions (static_cast, x86)
    do, where XLA's convert saturates: floating -> integer truncates toward zero to a
    32-bit integer (64-bit for int64 and uint32 targets) and wraps to `dtype` (-1.5 ->
    uint8 255, 300.7 -> uint8 44); NaN and values outside that integer's range become
    its minimum (cvttss2si's "integer indefinite"). Complex -> real keeps the real part."""
    dtype = jnp.dtype(dtype)
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
