"""Shape lowerings: concatenation, flips and rolls, padding, triangles, pixel
shuffles, the `*_scatter` ops functionalization emits, `repeat_interleave`, and
`unique`.

Views (view, reshape, permute, expand, slice, select, diagonal, unfold, ...) need no
lowering: the C++ shim and PyTorch's CompositeExplicitAutograd kernels make them
metadata-only `neuron` tensors, and the executor reads them out of their storage. The
`*_copy` variants and `stack`/`split`/`tensor_split`/`unbind` reach PrivateUse1 only
through those views plus `clone`/`cat`.

`unique` and `repeat_interleave` without `output_size` have data-dependent output
sizes: their eager kernels count on the device, synchronize once, and finish with
lowered ops of static shape, as ATen's CPU kernels do.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax
from torch._prims_common import canonicalize_dim

from ._common import check_scalar
from . import views
from .indexing import bucket, host_kernel, lowered
from .registry import _python_meta, context, lowering, meta_check, meta_kernel

aten = torch.ops.aten


@meta_check(aten.cat.default, aten.cat.out)
def _cat_meta_check(tensors, dim=0, **_):
    """CPU's RuntimeError for a 0-dim tensor in the list (PyTorch's reference raises
    IndexError for an all-0-dim list)."""
    for i, t in enumerate(tensors):
        if t.dim() == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")


@lowering(aten.cat.default)
def cat(tensors, dim=0):
    """`aten::cat` (and `cat.out`; behind `stack`, `hstack`, ...): concatenation along
    `dim` in the promoted dtype PyTorch computed. 1-d empty tensors are skipped, a
    legacy rule ATen keeps."""
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    out = context().out()
    parts = [t.astype(out.dtype) for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    if not parts or 0 in out.shape:
        return jnp.zeros(out.shape, out.dtype)
    return jnp.concatenate(parts, axis=dim % parts[0].ndim)


@lowering(aten.flip.default)
def flip(self, dims):
    """`aten::flip` (behind `fliplr`, `flipud`, `rot90`): reverses `dims`."""
    if self.ndim == 0:
        return self
    return jnp.flip(self, axis=tuple(d % self.ndim for d in dims))


@lowering(aten.roll.default)
def roll(self, shifts, dims=()):
    """`aten::roll`: elements shifted cyclically along `dims` (of the flattened
    tensor when `dims` is empty); element i moves to i + shift."""
    if self.size == 0:
        return self
    if not dims:
        return jnp.roll(self.reshape(-1), shifts[0]).reshape(self.shape)
    return jnp.roll(self, tuple(shifts), axis=tuple(d % self.ndim for d in dims))


@lowering(aten.constant_pad_nd.default)
def constant_pad_nd(self, pad, value=0):
    """`aten::constant_pad_nd` (`F.pad` mode "constant"): pads (or, for negative
    amounts, crops) the last len(pad)/2 dims, pairs given last dim first. `value`
    must fit self's dtype, as on CPU."""
    check_scalar(value, self.dtype)
    config = [(0, 0, 0)] * self.ndim
    for i in range(len(pad) // 2):  # pair i pads dim -1 - i
        config[self.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
    out = context().out()
    if 0 in out.shape:
        return jnp.zeros(out.shape, self.dtype)
    return lax.pad(self, jnp.asarray(value).astype(self.dtype), config)


@lowering(aten.repeat.default, eager=False)
def repeat(self, repeats):
    """`aten::repeat` in compiled graphs (eager: ATen's expand + copy): `self` tiled
    `repeats` times per dim, leading new dims for extra repeats."""
    x = self.reshape((1,) * (len(repeats) - self.ndim) + self.shape)
    return jnp.tile(x, tuple(repeats))


@meta_check(aten.narrow_copy.default, aten.narrow_copy.out)
def _narrow_copy_meta_check(self, dim, start, length, **_):
    """CPU's narrow_copy wraps only negative dims: a dim past the last is its
    RuntimeError (the reference and `narrow` raise IndexError), as is a 0-dim tensor."""
    if self.dim() == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    if dim >= self.dim():
        raise RuntimeError("Expected dim < static_cast<int64_t>(self_sizes.size()) to be true, but got false.  "
                           "(Could this error message be improved?  If so, please report an enhancement request "
                           "to PyTorch.)")


@host_kernel(aten.narrow_copy.default)
def narrow_copy_eager(self, dim, start, length):
    """Eager `aten::narrow_copy`: CPU's argument errors, then a contiguous copy of the
    `narrow` view (what PyTorch's composite kernel computes, minus its IndexError)."""
    _narrow_copy_meta_check(self, dim, start, length)
    return self.narrow(dim, start, length).clone(memory_format=torch.contiguous_format)


@lowering(aten.narrow_copy.default, eager=False)
def narrow_copy(self, dim, start, length):
    """`aten::narrow_copy` in compiled graphs: `length` elements from `start` along
    `dim` (negative `start` counts from the end)."""
    d = dim % self.ndim
    start = start % self.shape[d] if start < 0 else start
    return lax.slice_in_dim(self, start, start + length, axis=d)


@lowering(aten.tril.default)
def tril(self, diagonal=0):
    """`aten::tril` (and `tril_`): zeroes elements above `diagonal` of the last two
    dims."""
    return jnp.tril(self, k=diagonal)


@lowering(aten.triu.default)
def triu(self, diagonal=0):
    """`aten::triu` (and `triu_`): zeroes elements below `diagonal` of the last two
    dims."""
    return jnp.triu(self, k=diagonal)


# ------------------------------------------------------------------ *_scatter (functionalized views)
@lowering(aten.slice_scatter.default)
def slice_scatter(self, src, dim=0, start=None, end=None, step=1):
    """`aten::slice_scatter`: `self` with ``self[..., start:end:step, ...] = src``
    along `dim` (Python slice bounds)."""
    if self.ndim == 0:
        return src.astype(self.dtype)
    d = dim % self.ndim
    key = (slice(None),) * d + (slice(start, end, step),)
    return self.at[key].set(src.astype(self.dtype))


@lowering(aten.select_scatter.default)
def select_scatter(self, src, dim, index):
    """`aten::select_scatter`: `self` with ``self.select(dim, index) = src``;
    IndexError for an index out of range, as `select` raises."""
    d = dim % self.ndim
    if not -self.shape[d] <= index < self.shape[d]:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(self.shape)} at "
                         f"dimension {d}")
    return self.at[(slice(None),) * d + (index % self.shape[d],)].set(src.astype(self.dtype))


@lowering(aten.diagonal_scatter.default)
def diagonal_scatter(self, src, offset=0, dim1=0, dim2=1):
    """`aten::diagonal_scatter`: `self` with ``self.diagonal(offset, dim1, dim2) = src``
    (the diagonal is `src`'s last dim)."""
    d1, d2 = dim1 % self.ndim, dim2 % self.ndim
    x = jnp.moveaxis(self, (d1, d2), (-2, -1))
    n = src.shape[-1]
    i = np.arange(n)
    rows, cols = i + max(-offset, 0), i + max(offset, 0)
    x = x.at[..., rows, cols].set(src.astype(self.dtype))
    return jnp.moveaxis(x, (-2, -1), (d1, d2))


@host_kernel(aten.as_strided_scatter.default)
def as_strided_scatter_eager(self, src, size, stride, storage_offset=None):
    """Eager `aten::as_strided_scatter`, as ATen computes it: a copy of `self`'s whole
    storage viewed with `self`'s own sizes, strides and storage offset
    (clone_preserve_strides; a plain clone where `self` overlaps itself), whose
    ``as_strided(size, stride, storage_offset)`` window `src` is copied into. A window
    past that storage raises as_strided's setStorage RuntimeError."""
    strides = self.stride()
    if any(st == 0 and n > 1 for n, st in zip(self.shape, strides)):
        out = self.clone()
    else:
        numel = self.untyped_storage().nbytes() // self.element_size()
        out = self.as_strided((numel,), (1,), 0).clone().as_strided(self.shape, strides, self.storage_offset())
    out.as_strided(size, stride, storage_offset).copy_(src)
    return out


@lowering(aten.as_strided_scatter.default, eager=False)
def as_strided_scatter(self, src, size, stride, storage_offset=None):
    """`aten::as_strided_scatter`: `self` with the storage window ``as_strided(size,
    stride, storage_offset)`` overwritten by `src`, the storage being the one `self`
    views (in a compiled graph, by its fake tensor's strides and offset; see
    `views.as_strided`). Every element of `self` at a written storage position takes
    the value written there, aliases included. RuntimeError (ATen's setStorage check)
    when the window reaches past that storage."""
    in_stride, in_offset = views.input_layout(self)
    held = views.storage_positions(self.shape, in_stride, in_offset)
    offset = storage_offset or 0
    if 0 not in size:
        need, have = offset + sum((n - 1) * st for n, st in zip(size, stride)) + 1, int(held.max(initial=-1)) + 1
        if need > have:
            item = self.dtype.itemsize
            raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset}, "
                               f"and itemsize {item} requiring a storage size of {need * item} are out of bounds "
                               f"for storage of size {have * item}")
    written = views.storage_positions(tuple(size), tuple(stride), offset)
    window = np.full(max(int(held.max(initial=-1)), int(written.max(initial=-1))) + 1, -1, dtype=np.int64)
    window[written] = np.arange(written.size)
    source = window[held]
    flat = self.reshape(-1)
    if (source < 0).all():
        return self
    values = jnp.take(src.reshape(-1).astype(self.dtype), np.maximum(source, 0))
    return jnp.where(source >= 0, values, flat).reshape(self.shape)


# ------------------------------------------------------------------ repeat_interleave
@lowering(aten.repeat_interleave.Tensor, static=("output_size",))
def repeat_interleave(repeats, output_size=None):
    """`aten::repeat_interleave.Tensor` with a known `output_size`: index i repeated
    repeats[i] times. Negative repeats raise RuntimeError (device-side)."""
    context().check(jnp.all(repeats >= 0), RuntimeError, "repeats can not be negative")
    ends = jnp.cumsum(repeats.astype(jnp.int64))
    return jnp.searchsorted(ends, jnp.arange(output_size), side="right")


@host_kernel(aten.repeat_interleave.Tensor)
def repeat_interleave_host(repeats, output_size=None):
    """Eager `aten::repeat_interleave.Tensor`: without `output_size`, sums `repeats`
    on the device and synchronizes for the size."""
    if output_size is None:
        output_size = int(repeats.sum().item()) if repeats.numel() else 0
    return lowered(aten.repeat_interleave.Tensor)(repeats, output_size)


# ------------------------------------------------------------------ unique
def _empty_long(device, shape=(0,)):
    return torch.empty(shape, dtype=torch.long, device=device)


def _unique_of_empty(self, return_inverse):
    """`unique` of a tensor without elements: empty values and counts; the inverse
    has self's shape when requested, as on CPU."""
    inverse = _empty_long(self.device, self.shape if return_inverse else (0,))
    return self.reshape(-1).clone(), inverse, _empty_long(self.device)


def _groups(rows, order, return_inverse, return_counts, inverse_shape):
    """Unique groups of consecutive equal rows of `rows` (n, m) taken in `order`:
    (first row of each group, inverse indices or empty, counts or empty)."""
    n = rows.shape[0]
    dev = rows.device
    ordered = rows[order] if order is not None else rows
    starts = torch.ones(n, dtype=torch.bool, device=dev)
    if n > 1:
        # x != x keeps every NaN apart, as ATen's comparisons do.
        starts[1:] = (ordered[1:] != ordered[:-1]).any(dim=1)
    k = int(starts.sum().item())
    # Bucket-sized (static shapes for few distinct k), padded with n; views of k rows out.
    first = aten.nonzero_static.default(starts, size=bucket(k), fill_value=n)[:, 0]
    inverse = counts = _empty_long(dev)
    if return_inverse:
        group = starts.cumsum(0) - 1
        inverse = group if order is None else torch.empty_like(group).scatter_(0, order, group)
        inverse = inverse.reshape(inverse_shape)
    if return_counts:
        counts = torch.diff(first, append=torch.full((1,), n, dtype=torch.long, device=dev))[:k]
    return ordered[first.clamp(max=n - 1)][:k], inverse, counts


def _lexsort(rows):
    """Stable lexicographic order of the rows of `rows` (n, m): a stable sort per
    column, last column first."""
    order = torch.arange(rows.shape[0], device=rows.device)
    for c in reversed(range(rows.shape[1])):
        _, perm = torch.sort(rows[order, c], stable=True)
        order = order[perm]
    return order


@host_kernel(aten._unique2.default)
def unique2(self, sorted=True, return_inverse=False, return_counts=False):
    """`aten::_unique2` (`torch.unique` without dim): sorted unique elements, the
    inverse indices (self's shape) and counts, empty when not requested. NaNs are
    all distinct and sort last. Synchronizes once for the number of groups."""
    flat = self.reshape(-1)
    if flat.numel() == 0:
        return _unique_of_empty(self, return_inverse)
    _, order = torch.sort(flat, stable=True)
    return _unique_flat(flat, order, return_inverse, return_counts, self.shape)


def _unique_flat(flat, order, return_inverse, return_counts, shape):
    values, inverse, counts = _groups(flat[:, None], order, return_inverse, return_counts, shape)
    return values[:, 0], inverse, counts


@host_kernel(aten._unique.default)
def unique(self, sorted=True, return_inverse=False):
    """`aten::_unique`: `_unique2` without counts."""
    values, inverse, _ = unique2(self, sorted, return_inverse, False)
    return values, inverse


@host_kernel(aten.unique_consecutive.default)
def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    """`aten::unique_consecutive`: collapses runs of equal consecutive elements (or
    slices along `dim`)."""
    if dim is None:
        flat = self.reshape(-1)
        if flat.numel() == 0:
            return _unique_of_empty(self, return_inverse)
        return _unique_flat(flat, None, return_inverse, return_counts, self.shape)
    return _unique_dim(self, dim, False, return_inverse, return_counts)


def _unique_dim(self, dim, sort, return_inverse, return_counts):
    d = canonicalize_dim(self.dim(), dim)  # IndexError for a bad dim, as on CPU
    if any(n == 0 for i, n in enumerate(self.shape) if i != d):
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    if self.numel() == 0:
        return self.clone(), _empty_long(self.device), _empty_long(self.device)
    moved = self.movedim(d, 0)
    rows = moved.reshape(moved.shape[0], -1)
    order = _lexsort(rows) if sort else None
    values, inverse, counts = _groups(rows, order, return_inverse, return_counts, (rows.shape[0],))
    values = values.reshape((-1,) + tuple(moved.shape[1:])).movedim(0, d)
    return values, inverse, counts


@host_kernel(aten.unique_dim.default)
def unique_dim(self, dim, sorted=True, return_inverse=False, return_counts=False):
    """`aten::unique_dim` (`torch.unique(dim=...)`): unique slices along `dim`, in
    lexicographic order."""
    return _unique_dim(self, dim, True, return_inverse, return_counts)


@host_kernel(aten.unique_dim_consecutive.default)
def unique_dim_consecutive(self, dim, return_inverse=False, return_counts=False):
    """`aten::unique_dim_consecutive`: `unique_consecutive` along `dim`."""
    return _unique_dim(self, dim, False, return_inverse, return_counts)


def _pixel_shuffle_checks(name: str, factor_name: str, self, factor) -> None:
    if self.dim() < 3:
        raise RuntimeError(f"{name} expects input to have at least 3 dimensions, but got input with "
                           f"{self.dim()} dimension(s)")
    if factor <= 0:
        raise RuntimeError(f"{name} expects a positive {factor_name}, but got {factor}")


@meta_check(aten.pixel_shuffle.default)
def _pixel_shuffle_meta_check(self, upscale_factor):
    """CPU's check_pixel_shuffle_shapes, in its order and words (PyTorch's meta kernel
    words them otherwise)."""
    _pixel_shuffle_checks("pixel_shuffle", "upscale_factor", self, upscale_factor)
    if self.shape[-3] % (upscale_factor * upscale_factor):
        raise RuntimeError("pixel_shuffle expects its input's 'channel' dimension to be divisible by the square "
                           f"of upscale_factor, but input.size(-3)={self.shape[-3]} is not divisible by "
                           f"{upscale_factor * upscale_factor}")


def _pixel_unshuffle_meta(inner):
    """The meta kernel of pixel_unshuffle: CPU's check_pixel_unshuffle_shapes, in its
    order and words, then, as pixel_unshuffle_cpu does, a clone of an empty input (its
    shape, not the unshuffled one); PyTorch's meta kernel (`inner`) otherwise."""
    def meta(self, downscale_factor):
        _pixel_shuffle_checks("pixel_unshuffle", "downscale_factor", self, downscale_factor)
        for label, dim in (("height", -2), ("width", -1)):
            if self.shape[dim] % downscale_factor:
                raise RuntimeError(f"pixel_unshuffle expects {label} to be divisible by downscale_factor, but "
                                   f"input.size({dim})={self.shape[dim]} is not divisible by {downscale_factor}")
        if self.numel() == 0:
            return self.clone()
        return inner(self, downscale_factor)
    return meta


meta_kernel(aten.pixel_unshuffle.default)(_pixel_unshuffle_meta(_python_meta(aten.pixel_unshuffle.default)))


@lowering(aten.pixel_shuffle.default)
def pixel_shuffle(self, upscale_factor):
    """aten::pixel_shuffle: (*, C * r * r, H, W) -> (*, C, H * r, W * r), output channel
    c at (h * r + i, w * r + j) taken from input channel (c * r + i) * r + j."""
    r = upscale_factor
    *batch, c, h, w = self.shape
    x = self.reshape(*batch, c // (r * r), r, r, h, w)
    n = len(batch)
    x = jnp.transpose(x, (*range(n), n, n + 3, n + 1, n + 4, n + 2))
    return x.reshape(*batch, c // (r * r), h * r, w * r)


@lowering(aten.pixel_unshuffle.default)
def pixel_unshuffle(self, downscale_factor):
    """aten::pixel_unshuffle, the inverse of pixel_shuffle: (*, C, H * r, W * r) ->
    (*, C * r * r, H, W)."""
    if self.size == 0:
        return self  # CPU clones an empty input (see `_pixel_unshuffle_meta`)
    r = downscale_factor
    *batch, c, h, w = self.shape
    x = self.reshape(*batch, c, h // r, r, w // r, r)
    n = len(batch)
    x = jnp.transpose(x, (*range(n), n, n + 2, n + 4, n + 1, n + 3))
    return x.reshape(*batch, c * r * r, h // r, w // r)
