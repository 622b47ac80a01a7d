"""Reading and writing strided views of a flat storage buffer, inside traced JAX code.

A `neuron` tensor is (storage, sizes, strides, storage offset, dtype), exactly like a
CUDA tensor; the storage's bytes are one flat JAX array. These functions turn that
geometry into static JAX indexing: contiguous ranges become slices, non-overlapping
strided layouts (slices with steps, transposes, selects, diagonals, expands) become a
reshape of a padded range plus slicing and a transpose, and anything else (overlapping
windows from `as_strided`) becomes a gather/scatter with indices computed by iota.
All geometry is static (part of the executable's cache key), so XLA sees plain
slicing and fuses it into the op.
"""
from __future__ import annotations

from typing import Optional, Tuple

import jax.numpy as jnp
import numpy as np
from jax import lax

Shape = Tuple[int, ...]


def _complex_part(dtype):
    """The real dtype of each half of a complex dtype (complex64 -> float32)."""
    return jnp.dtype(jnp.float32) if jnp.dtype(dtype) == jnp.complex64 else jnp.dtype(jnp.float64)


def _as_dtype(flat, dtype):
    """Reinterprets a flat buffer's bytes as `dtype` (view(dtype) semantics)."""
    src = flat.dtype
    if src == dtype:
        return flat
    # XLA bitcasts neither from nor to complex: go through the (real, imag) pairs,
    # which are the bytes of a complex number.
    if jnp.issubdtype(src, jnp.complexfloating):
        flat = jnp.stack([jnp.real(flat), jnp.imag(flat)], axis=-1).reshape(-1)
        return _as_dtype(flat, dtype)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        parts = _as_dtype(flat, _complex_part(dtype))
        n = parts.shape[0] // 2
        return lax.complex(parts[0:2 * n:2], parts[1:2 * n:2])
    if src == jnp.bool_:
        flat = flat.astype(jnp.uint8)
        src = flat.dtype
    if dtype == jnp.bool_:
        return _as_dtype(flat, jnp.dtype(jnp.uint8)) != 0
    si, di = np.dtype(src).itemsize, np.dtype(dtype).itemsize
    if si == di:
        return lax.bitcast_convert_type(flat, dtype)
    if si > di:  # each source element becomes si // di elements
        return lax.bitcast_convert_type(flat, dtype).reshape(-1)
    n = flat.shape[0] // (di // si)
    return lax.bitcast_convert_type(flat[: n * (di // si)].reshape(n, di // si), dtype)


def _box(shape: Shape, stride: Shape, offset: int):
    """Plans a non-overlapping strided view as slicing of a reshaped range.

    Returns (start, span, box_shape, picks, order, kept) or None when the layout
    overlaps or its strides do not nest. `picks` are the per-box-dim lengths to keep
    (None drops that box dim at index 0), `order` permutes kept dims back to the
    view's dim order, and `kept` lists the view dims with size > 1 and stride != 0.
    """
    kept = [d for d in range(len(shape)) if shape[d] > 1 and stride[d] != 0]
    if any(stride[d] < 0 for d in kept):
        return None
    dims = sorted(kept, key=lambda d: -stride[d])
    box, picks = [], []
    for i, d in enumerate(dims):
        if i == 0:
            box.append(shape[d])
        else:
            outer = stride[dims[i - 1]]
            if outer % stride[d] != 0 or shape[d] * stride[d] > outer:
                return None
            box.append(outer // stride[d])
        picks.append(shape[d])
    inner = stride[dims[-1]] if dims else 1
    if inner > 1:
        box.append(inner)
        picks.append(None)
    span = int(np.prod(box)) if box else 1
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    return offset, span, box, picks, order, dims


def _static_zero(offset) -> bool:
    return isinstance(offset, (int, np.integer)) and offset == 0


def _range(flat, start, size: int):
    """flat[start:start + size]; `start` is an int or a traced scalar (the executor
    passes nonzero storage offsets dynamically so that moving a view does not
    recompile). Reading past the end (a tensor that outgrew its storage, undefined in
    PyTorch) reads zeros for a static start."""
    n = flat.shape[0]
    if isinstance(start, (int, np.integer)):
        if start + size > n:
            flat = jnp.pad(flat, (0, start + size - n))
        return lax.slice(flat, (start,), (start + size,))
    if size > n:
        flat = jnp.pad(flat, (0, size - n))
    return lax.dynamic_slice(flat, (start,), (size,))


def _extent(shape: Shape, stride: Shape) -> int:
    """Elements from a view's first to its last element, inclusive."""
    return 1 + sum((n - 1) * st for n, st in zip(shape, stride) if n > 1)


def _gather_index(shape: Shape, stride: Shape, offset: int):
    idx = jnp.full(shape, offset, dtype=jnp.int64)
    for d, (size, st) in enumerate(zip(shape, stride)):
        if size > 1 and st != 0:
            idx = idx + lax.broadcasted_iota(jnp.int64, shape, d) * st
    return idx


def is_contiguous(shape: Shape, stride: Shape) -> bool:
    expected = 1
    for size, st in zip(reversed(shape), reversed(stride)):
        if size != 1 and st != expected:
            return False
        expected *= size
    return True


def read(flat, dtype, shape: Shape, stride: Shape, offset: int):
    """The value of the view (shape, stride, offset) of `flat`, as an array of `shape`.

    flat: 1-D JAX array (the storage); dtype: the view's JAX dtype; offset and strides
    in elements of `dtype`. Traced code: shape and strides are Python ints, the offset
    an int or a traced integer scalar.
    """
    flat = _as_dtype(flat, dtype)
    numel = int(np.prod(shape)) if shape else 1
    if numel == 0:
        return jnp.zeros(shape, dtype)
    if is_contiguous(shape, stride):
        if _static_zero(offset) and numel == flat.shape[0]:
            return flat.reshape(shape)
        return _range(flat, offset, numel).reshape(shape)
    plan = _box(shape, stride, offset)
    if plan is None:
        return flat[_gather_index(shape, stride, offset)]
    start, span, box, picks, order, dims = plan
    extent = _extent(shape, stride)
    block = jnp.pad(_range(flat, start, extent), (0, span - extent)).reshape(box)
    limits = [p if p is not None else 1 for p in picks]
    block = lax.slice(block, (0,) * len(box), limits)
    block = block.reshape([p for p in picks if p is not None])
    block = jnp.transpose(block, order)
    kept_shape = [shape[d] for d in sorted(dims)]
    expanded = [shape[d] if d in dims else 1 for d in range(len(shape))]
    return jnp.broadcast_to(block.reshape(kept_shape).reshape(expanded), shape)


def write(flat: Optional[jnp.ndarray], length: int, dtype, shape: Shape, stride: Shape, offset: int, value):
    """`flat` with the view (shape, stride, offset) overwritten by `value`.

    flat: the storage (1-D) or None when the view covers the whole storage and the
    old bytes are not needed; length: storage length in elements of `dtype`. Returns
    the new flat storage in `dtype`. Overlapping views (stride 0 or overlapping
    windows) are written in index order, the last write winning, as on CPU.
    """
    value = jnp.broadcast_to(jnp.asarray(value).astype(dtype), shape)
    numel = int(np.prod(shape)) if shape else 1
    if flat is None:
        return value.reshape(-1)
    flat = _as_dtype(flat, dtype)
    if numel == 0:
        return flat
    if is_contiguous(shape, stride):
        if _static_zero(offset) and numel == flat.shape[0]:
            return value.reshape(-1)
        return lax.dynamic_update_slice(flat, value.reshape(-1), (offset,))
    plan = _box(shape, stride, offset)
    if plan is None or len(plan[5]) < sum(1 for s in shape if s > 1):
        idx = _gather_index(shape, stride, offset).reshape(-1)
        return flat.at[idx].set(value.reshape(-1), mode="promise_in_bounds")
    start, span, box, picks, order, dims = plan
    extent = _extent(shape, stride)
    block = jnp.pad(_range(flat, start, extent), (0, span - extent)).reshape(box)
    kept_shape = [shape[d] for d in sorted(dims)]
    inv = np.argsort(order)
    part = value.reshape(kept_shape).transpose(inv)
    part = part.reshape([p if p is not None else 1 for p in picks])
    block = lax.dynamic_update_slice(block, part, (0,) * len(box))
    if isinstance(start, (int, np.integer)):
        extent = min(extent, flat.shape[0] - start)  # never write past the storage
    return lax.dynamic_update_slice(flat, block.reshape(-1)[:extent], (start,))
