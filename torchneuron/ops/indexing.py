"""Indexing lowerings: advanced indexing and index_put, gather/scatter, index_* ops,
masked ops, take/put, searchsorted/bucketize, embedding's backward, nonzero.

Indices are checked on the device (`context().check`), never clamped or wrapped
silently: an out-of-range index raises, at the latest at the next synchronization
point, the exception type CPU raises for that op (IndexError for indexing, index_select,
index_copy, take/put; RuntimeError for gather/scatter/index_add). Ops that accept
negative indices (indexing, index_fill, take, put) wrap them first.

Ops with a data-dependent output size need the host: `nonzero` counts on the device,
synchronizes, then runs `nonzero_static`; `masked_select` and indexing with boolean
masks go through the same count, as ATen's CPU kernels go through `nonzero`. Their
results are computed at a bucketed size (powers of two) and returned as views of the
first n rows, so a loop over varying counts compiles a few executables, not one per
count. Assigning through a single boolean mask (`x[mask] = v`) stays on the device.
"""
from __future__ import annotations

import math
import warnings

import jax.numpy as jnp
import numpy as np
import torch
from torch._prims_common import canonicalize_dim
from jax import lax

from ..eager import host_kernels, refusal
from ..runtime import dtypes
from ._common import acc_type, cast, check_scalar, is_float, is_number
from .registry import LOWERINGS, context, lowering, meta_check

aten = torch.ops.aten

_MASK_DTYPES = (torch.bool, torch.uint8)


def host_kernel(op):
    """Registers `fn` as the eager PrivateUse1 kernel of `op`, taking precedence over
    a lowering of the same op (for ops that must synchronize with the host)."""

    def register(fn):
        # Written for every dtype, like a lowering: CPU's kernel decides which it takes.
        host_kernels.KERNELS[op] = refusal.checking_dtypes(op, fn)
        return fn

    return register


_lowered_kernels: dict = {}


def lowered(op):
    """The executor kernel computing `op` from its lowering (or, for an in-place or
    out= overload, from its functional overload's lowering)."""
    kernel = _lowered_kernels.get(op)
    if kernel is None:
        from ..eager import executor

        base = op if op in LOWERINGS else executor.functional_counterpart(op)
        mode = "functional" if base is op else "inplace"
        kernel = _lowered_kernels[op] = executor.OpKernel(op, LOWERINGS[base], mode)
    return kernel


# ------------------------------------------------------------------ bounds checks
def _in_range(idx, size: int, negative: bool):
    lo = -size if negative else 0
    return jnp.all((idx >= lo) & (idx < size))


def checked(idx, size: int, exc: type, message: str, negative: bool = False):
    """`idx` (an integer array) checked against `size` on the device, with negative
    indices wrapped when `negative`. The returned indices are in range whenever the
    check passes; when it fails the op's error is raised at the next sync point."""
    context().check(_in_range(idx, size, negative), exc, message)
    idx = idx.astype(jnp.int64)
    return jnp.where(idx < 0, idx + size, idx) if negative else idx


def _oob(dim: int, size: int) -> str:
    return f"index is out of bounds for dimension {dim} with size {size}"


# ------------------------------------------------------------------ index argument checks
def _vector_index(index, dtypes_ok, dim_error, dtype_error, dtype_first: bool = False) -> None:
    """The index argument checks of CPU's index_* kernels, made in the meta kernel (so
    on a cache miss in eager and under fake tensors): `index` at most 1-d, else
    `dim_error` (exception type, message); its dtype in `dtypes_ok`, else
    `dtype_error`. `dtype_first` orders them as index_fill's kernel does."""
    checks = [(index.dim() <= 1, dim_error), (index.dtype in dtypes_ok, dtype_error)]
    for ok, (exc, message) in (checks[::-1] if dtype_first else checks):
        if not ok:
            raise exc(message)


_INT_INDEX = (torch.int32, torch.int64)


@meta_check(aten.index_select.default, aten.index_select.out)
def _index_select_meta_check(self, dim, index, **_):
    _vector_index(index, _INT_INDEX, (IndexError, "index_select(): Index is supposed to be a vector"),
                  (RuntimeError, "index_select(): Expected dtype int32 or int64 for index"))


@meta_check(aten.index_add.default, aten.index_add.out, aten.index_add_.default)
def _index_add_meta_check(self, dim, index, source, **_):
    _index_func_index_check("index_add", self, dim, index)
    _index_source_check("index_add", self, dim, index, source)


def _index_func_index_check(func: str, self, dim: int, index) -> None:
    """ATen's index_func_meta_impl checks of `dim` (IndexError when out of range) and
    `index`: a vector of int32/int64."""
    canonicalize_dim(self.dim(), dim)
    _vector_index(index, _INT_INDEX,
                  (IndexError, f"{func}_(): Index is supposed to be a vector, but got dim: {index.dim()} "
                               f"with type: {type_name(index.dtype)} and size: {list(index.shape)}"),
                  (RuntimeError, f"{func}_(): Expected dtype int32/int64 for index but got: "
                                 f"{type_name(index.dtype)}"))


@meta_check(aten.index_reduce.default, aten.index_reduce_.default)
def _index_reduce_meta_check(self, dim, index, source, reduce, *_, **__):
    """CPU's index_reduce checks the reduction's name first (PyTorch's meta kernel does
    not check it), then the index and `_index_source_check`."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    _index_func_index_check("index_reduce", self, dim, index)
    _index_source_check("index_reduce", self, dim, index, source)


#: CPU's scatter_reduce reads "max" and "min" as "amax" and "amin" (get_operator_enum).
_SCATTER_REDUCE_ALIASES = {"max": "amax", "min": "amin"}


@meta_check(aten.scatter_reduce.two, aten.scatter_reduce.two_out, aten.scatter_reduce_.two)
def _scatter_reduce_meta_check(self, dim, index, src, reduce, **_):
    """PyTorch's meta kernel refuses "max" and "min", which CPU accepts as aliases."""
    if reduce in _SCATTER_REDUCE_ALIASES:
        return {"reduce": _SCATTER_REDUCE_ALIASES[reduce]}


def _index_source_check(func: str, self, dim: int, index, source) -> None:
    """ATen's index_func_meta_impl checks of `source` against the index and `self`:
    RuntimeError, in CPU's order (PyTorch's meta kernel leaves them to the kernel)."""
    if source.dtype != self.dtype:
        raise RuntimeError(f"{func}_(): self ({type_name(self.dtype)}) and source ({type_name(source.dtype)}) must "
                           "have the same scalar type")
    d = dim % self.dim() if self.dim() else 0
    if not (d == 0 or d < source.dim()):
        raise RuntimeError(f"{func}_(): Indexing dim {d} is out of bounds of the source tensor with dim "
                           f"{source.dim()}")
    count = 1 if source.dim() == 0 else source.shape[d]
    if index.numel() != count:
        if source.dim() == 0:  # CPU's message reads source.size(dim), which raises first
            raise IndexError(f"Dimension specified as {d} but tensor has no dimensions")
        raise RuntimeError(f"{func}_(): Number of indices ({index.numel()}) should be equal to source.size(dim): "
                           f"({count}), for dim: {d}")
    self_sizes, source_sizes = list(self.shape), list(source.shape)
    if source.dim() and self.dim():
        del self_sizes[d], source_sizes[d]
    if self_sizes != source_sizes:
        raise RuntimeError("source tensor shape must match self tensor shape, excluding the specified dimension. "
                           f"Got self.shape = {list(self.shape)} source.shape = {list(source.shape)}")


@meta_check(aten.index_copy.default, aten.index_copy.out, aten.index_copy_.default)
def _index_copy_meta_check(self, dim, index, source, **_):
    _vector_index(index, (torch.int64,),
                  (IndexError, f"index_copy_(): Index should have dimension 1 or 0 (got {index.dim()})"),
                  (RuntimeError, f"index_copy_(): Expected a long tensor for index, but got "
                                 f"{type_name(index.dtype)}"))
    _index_copy_source_check(self, dim, index, source)


def _index_copy_source_check(self, dim: int, index, source) -> None:
    """ATen's index_copy meta checks of `source`, in CPU's order and exception types
    (PyTorch's meta kernel raises other types and messages)."""
    if source.dtype != self.dtype:
        raise RuntimeError("index_copy_(): self and source expected to have the same dtype, but got (self) "
                           f"{type_name(self.dtype)} and (source) {type_name(source.dtype)}")
    n = index.numel()
    if source.dim() == 0 and n != 1:
        raise IndexError(f"index_copy_(): When source is scalar, index should have one element (got {n})")
    if source.dim() != self.dim() and source.dim() != 0 and self.dim() != 0:
        raise IndexError("index_copy_(): When source and destination are not scalars, their dimensionality must "
                         f"match. Source dimensionality ({source.dim()}), destination dimensionality ({self.dim()})")
    d = dim % self.dim() if self.dim() else 0
    self_sliced = [s for i, s in enumerate(self.shape) if i != d]
    source_sliced = [s for i, s in enumerate(source.shape) if i != d]
    if self_sliced != source_sliced:
        raise RuntimeError("index_copy_(): Source/destination tensor must have same slice shapes. Destination slice "
                           f"shape: {' '.join(map(str, self_sliced))} at dimension {d} and source slice shape: "
                           f"{' '.join(map(str, source_sliced))} at dimension 0.")
    if source.dim() and n != source.shape[d]:
        raise IndexError(f"index_copy_(): Number of indices ({n}) should be equal to source.size(dim) "
                         f"({source.shape[d]})")


@meta_check(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor, aten.index_fill.int_Scalar_out,
            aten.index_fill.int_Tensor_out, aten.index_fill_.int_Scalar, aten.index_fill_.int_Tensor)
def _index_fill_meta_check(self, dim, index, value, **_):
    """ATen's index_fill_ checks, then its CPU kernel's (IndexKernel.cpp
    `index_fill_kernel`): a complex value, number or 0-dim tensor, fills only complex
    tensors, 0j included (where `Scalar::to` would take a zero imaginary part). A 0-dim
    tensor value of another dtype fills as its `item()` (the lowering checks that it
    fits); PyTorch's reference passes it to index_copy, which refuses the dtype."""
    _vector_index(index, (torch.int64,), (RuntimeError, "Index has to be a vector/scalar"),
                  (IndexError, "index_fill_(): Expected dtype int64 for index."), dtype_first=True)
    if (isinstance(value, complex) or (isinstance(value, torch.Tensor) and value.is_complex())) \
            and not self.dtype.is_complex:
        raise RuntimeError("index_fill_(): Converting complex Scalar to non-complex type is not supported")
    if isinstance(value, torch.Tensor) and value.dtype != self.dtype:
        return {"value": value.to(self.dtype)}
    return None


@meta_check(aten.masked_scatter.default, aten.masked_scatter.out, aten.masked_scatter_.default)
def _masked_scatter_meta_check(self, mask, source, **_):
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_scatter_ only supports boolean masks, but got mask with dtype "
                           f"{type_name(mask.dtype)}")


# ------------------------------------------------------------------ nonzero
@lowering(aten.nonzero_static.default)
def nonzero_static(self, size, fill_value=-1):
    """`aten::nonzero_static`: the first `size` coordinates (row-major) of nonzero
    elements as an int64 (size, ndim) tensor, padded with `fill_value`."""
    if self.ndim == 0:
        return jnp.zeros((size, 0), jnp.int64)
    flat = self.reshape(-1) != 0
    (pos,) = jnp.nonzero(flat, size=size, fill_value=0)
    coords = jnp.stack(jnp.unravel_index(pos, self.shape), axis=1).astype(jnp.int64)
    valid = jnp.arange(size) < jnp.sum(flat)
    return jnp.where(valid[:, None], coords, jnp.asarray(fill_value, jnp.int64))


def bucket(n: int) -> int:
    """The static size computed for a data-dependent count `n`: `n` rounded up to a
    power of two, so that varying counts compile O(log n) executables, not one each."""
    return n if n <= 8 else 1 << (n - 1).bit_length()


def _count_nonzero(self) -> int:
    """The number of nonzero elements (synchronizes)."""
    return int(aten.count_nonzero.dim_IntList(self, list(range(self.dim()))).item())


@host_kernel(aten.nonzero.default)
def nonzero(self):
    """`aten::nonzero` (`torch.nonzero`, `argwhere`): counts the nonzero elements on
    the device, synchronizes, and returns their (n, ndim) int64 coordinates,
    column-major as CPU's kernel writes them (the first n rows of a bucket-sized
    result, copied)."""
    n = _count_nonzero(self)
    out = torch.empty_strided((n, self.dim()), (1, n), dtype=torch.int64, device=self.device)
    return out.copy_(aten.nonzero_static.default(self, size=bucket(n), fill_value=-1)[:n])


@host_kernel(aten.bincount.default)
def bincount(self, weights=None, minlength=0):
    """`aten::bincount` (CPU's _bincount_cpu): its length, max(self) + 1, needs the
    host: one synchronization reads min and max, then the counts (or summed weights)
    are an index_add on the device. Float32 weights sum in float32, other weights in
    float64; no weights (or an empty input) count in int64."""
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if self.dtype.is_floating_point or self.dtype.is_complex or self.dtype == torch.bool:
        name = torch.empty(0, dtype=self.dtype).type()[len("torch."):-len("Tensor")]  # ATen's ScalarType name
        raise NotImplementedError(f'"bincount_cpu" not implemented for \'{name}\'')
    if self.dim() == 1 and self.numel() == 0:
        return torch.zeros(minlength, dtype=torch.int64, device=self.device)
    lo, hi = torch.stack(aten.aminmax.default(self)).tolist() if self.dim() == 1 else (-1, -1)  # one sync
    if self.dim() != 1 or lo < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights.dim() != 1 or weights.size(0) != self.size(0)):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    dtype = torch.int64 if weights is None else torch.float32 if weights.dtype == torch.float32 else torch.float64
    values = torch.ones_like(self, dtype=dtype) if weights is None else weights.to(dtype)
    out = torch.zeros(max(minlength, hi + 1), dtype=dtype, device=self.device)
    index = self if self.dtype in (torch.int32, torch.int64) else self.long()  # index_add_'s index types
    return out.index_add_(0, index, values)


# ------------------------------------------------------------------ advanced indexing
def _index_key(self, indices):
    """The JAX index tuple of ATen integer `indices` (None entries are full slices),
    negative indices wrapped and every index checked (IndexError)."""
    key = []
    for d, idx in enumerate(indices):
        if idx is None:
            key.append(slice(None))
        else:
            key.append(checked(idx, self.shape[d], IndexError, _oob(d, self.shape[d]), negative=True))
    return tuple(key)


@lowering(aten.index.Tensor)
def index(self, indices):
    """`aten::index.Tensor` (`x[idx]` with tensors): integer index tensors broadcast
    together, NumPy placement rules for non-adjacent indices; negative indices wrap;
    out-of-range raises IndexError. Boolean masks are turned into integer indices by
    the host kernel below before this runs."""
    key = _index_key(self, indices)
    if _indexes_empty_dim(self, indices):  # every index is out of range: the check fails
        return jnp.zeros(context().out().shape, self.dtype)
    return self[key]


def _indexes_empty_dim(self, indices) -> bool:
    return any(i is not None and self.shape[d] == 0 for d, i in enumerate(indices))


def _expand_masks(self, indices):
    """(self, indices) with every boolean/uint8 mask replaced by the integer indices
    of its True elements (this synchronizes). A 0-dim mask adds a dimension of size
    1 or 0, as on CPU. IndexError when a mask's shape does not match."""
    out = []
    dim = 0
    for pos, idx in enumerate(indices):
        if idx is None or idx.dtype not in _MASK_DTYPES:
            out.append(idx)
            dim += 1
            continue
        if idx.dtype == torch.uint8:
            warnings.warn("indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool "
                          "instead.", stacklevel=3)
        check_mask_shape(idx.shape, self.shape, dim)
        if idx.dim() == 0:
            self = self.unsqueeze(dim)
            n = int(bool(idx.item()))
            out.append(torch.zeros(n, dtype=torch.long, device=self.device))
            dim += 1
            continue
        out.extend(aten.nonzero.default(idx).unbind(1))
        dim += idx.dim()
    return self, out


def check_mask_shape(mask_shape, shape, dim: int) -> None:
    """IndexError, worded as ATen's, unless a mask matches `shape` from `dim` on."""
    for j, n in enumerate(mask_shape):
        if dim + j >= len(shape) or n != shape[dim + j]:
            raise IndexError(f"The shape of the mask {list(mask_shape)} at index {j} does not match the shape of "
                             f"the indexed tensor {list(shape)} at index {dim + j}")


def _on_device(self, indices):
    """Index tensors moved to `self`'s device: like CUDA, indexing accepts CPU indices."""
    return [i if i is None or i.device == self.device else i.to(self.device) for i in indices]


def _has_mask(indices) -> bool:
    return any(i is not None and i.dtype in _MASK_DTYPES for i in indices)


@host_kernel(aten.index.Tensor)
def index_host(self, indices):
    """Eager `aten::index.Tensor`: boolean masks need the host (the result size is the
    number of True elements); integer indices run the lowering directly. CPU index
    tensors are accepted, as CUDA does."""
    indices = _on_device(self, indices)
    single = _single_mask(indices)
    if single is not None and single[1].dim() > 0:
        return _index_single_mask(self, indices, *single)
    if _has_mask(indices):
        self, indices = _expand_masks(self, indices)
    return lowered(aten.index.Tensor)(self, indices)


def _index_single_mask(self, indices, pos, mask):
    """``self[(:,)*pos + (mask,)]``: gathers a bucket-sized result (padding rows read
    index 0) and returns the view of its first n rows along the mask's dimension."""
    dim = pos  # every index before the mask is a full slice
    check_mask_shape(mask.shape, self.shape, dim)
    n = _count_nonzero(mask)
    coords = aten.nonzero_static.default(mask, size=bucket(n), fill_value=0)
    expanded = list(indices[:pos]) + list(coords.unbind(1)) + list(indices[pos + 1:])
    return lowered(aten.index.Tensor)(self, expanded).narrow(dim, 0, n)


def _broadcast_error(values_shape, result_shape) -> RuntimeError:
    return RuntimeError(f"shape mismatch: value tensor of shape {list(values_shape)} cannot be broadcast to "
                        f"indexing result of shape {list(result_shape)}")


def type_name(dtype) -> str:
    """ATen's name of a scalar type (a JAX or torch dtype): "Float", "Long", ... as in
    its error messages."""
    if not isinstance(dtype, torch.dtype):
        dtype = dtypes.to_torch(dtype)
    return torch.empty(0, dtype=dtype).type()[len("torch."):-len("Tensor")]


def not_implemented(kernel: str, dtype) -> NotImplementedError:
    """The error ATen's CPU dispatch raises when `kernel` has no case for `dtype`."""
    return NotImplementedError(f'"{kernel}" not implemented for \'{type_name(dtype)}\'')


def _check_put_dtype(self, values):
    if jnp.dtype(values.dtype) != jnp.dtype(self.dtype):
        raise RuntimeError(
            "Index put requires the source and destination dtypes match, got "
            f"{type_name(self.dtype)} for the destination and {type_name(values.dtype)} for the source.")


def _single_mask(indices):
    """(position, mask) when the only non-None index (torch or JAX) is one boolean
    mask, else None."""
    tensors = [(p, i) for p, i in enumerate(indices) if i is not None]
    if len(tensors) == 1 and tensors[0][1].dtype in (torch.bool, np.dtype(bool)):
        return tensors[0]
    return None


def _mask_put(self, p, mask, values, accumulate):
    """`self[(:,)*p + (mask,)] = values` (or +=) without leaving the device: the k-th
    True element takes the k-th value along the mask's result dimension."""
    k = mask.ndim
    check_mask_shape(mask.shape, self.shape, p)
    pre, post = self.shape[:p], self.shape[p + k:]
    rank = len(pre) + 1 + len(post)  # rank of the indexing result (pre, nnz, post)
    vshape = tuple(values.shape)
    while len(vshape) > rank and vshape[0] == 1:
        vshape = vshape[1:]
    vshape = (1,) * (rank - len(vshape)) + vshape
    nnz_shape = pre + ("N",) + post
    if len(vshape) != rank or any(v not in (1, r) for v, r in zip(vshape, nnz_shape) if r != "N"):
        raise _broadcast_error(values.shape, nnz_shape)
    v = values.reshape(vshape)
    n_vals = vshape[p]
    if n_vals == 1:
        v = v.reshape(vshape[:p] + (1,) * k + vshape[p + 1:])
    else:
        nnz = jnp.sum(mask)
        context().check(nnz == n_vals, RuntimeError,
                        f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to "
                        f"indexing result with {n_vals} elements in the masked dimension")
        if n_vals == 0:  # an all-False mask: nothing is written (and nothing to take from)
            return self
        pos = jnp.clip(jnp.cumsum(mask.reshape(-1)) - 1, 0, n_vals - 1).reshape(mask.shape)
        v = jnp.take(v, pos, axis=p)
    v = jnp.broadcast_to(v, self.shape)
    m = mask.reshape((1,) * p + mask.shape + (1,) * len(post))
    if accumulate:
        return jnp.where(m, self + v, self) if self.dtype != jnp.bool_ else self | (m & v)
    return jnp.where(m, v, self)


def index_put_value(self, indices, values, accumulate=False):
    """`self` with `self[indices] = values` (`+=` when `accumulate`, duplicates
    summed). Integer indices wrap when negative and raise IndexError when out of
    range; a lone boolean mask is handled on the device. RuntimeError when `values`
    has another dtype or does not broadcast to the indexing result."""
    _check_put_dtype(self, values)
    single = _single_mask(indices)
    if single is not None:
        return _mask_put(self, single[0], single[1], values, accumulate)
    key = _index_key(self, indices)
    if _indexes_empty_dim(self, indices):  # nothing to write, or out of range (checked)
        return self
    result_shape = jnp.zeros(self.shape, jnp.bool_)[key].shape  # evaluated at trace time
    given = values.shape
    while values.ndim > len(result_shape) and values.shape[0] == 1:
        values = values.reshape(values.shape[1:])
    try:
        if values.ndim > len(result_shape):
            raise ValueError
        np.broadcast_shapes(values.shape, result_shape)
    except ValueError:
        raise _broadcast_error(given, result_shape) from None
    if accumulate:
        if self.dtype == jnp.bool_:
            return self.at[key].max(values)
        return self.at[key].add(values)
    return self.at[key].set(values)


@lowering(aten._index_put_impl.default)
def index_put_impl(self, indices, values, accumulate=False, unsafe=False):
    """`aten::_index_put_impl` (behind `index_put_` and `x[idx] = v`)."""
    return index_put_value(self, indices, values, accumulate)


@lowering(aten.index_put.default, eager=False)
def index_put(self, indices, values, accumulate=False):
    """`aten::index_put` in compiled graphs (eager uses ATen's clone + index_put_)."""
    return index_put_value(self, indices, values, accumulate)


@host_kernel(aten._index_put_impl_.default)
def index_put_host(self, indices, values, accumulate=False, unsafe=False):
    """Eager `aten::_index_put_impl_`: masks mixed with other index tensors (or
    several masks) become integer indices on the host first; everything else runs
    on the device."""
    kernel = lowered(aten._index_put_impl_.default)
    indices = _on_device(self, indices)
    if _has_mask(indices) and _single_mask(indices) is None:
        target, indices = _expand_masks(self, indices)
        kernel(target, indices, values, accumulate, unsafe)  # target may be an unsqueezed view
        return self
    return kernel(self, indices, values, accumulate, unsafe)


# ------------------------------------------------------------------ gather / scatter
def _along(index, dim: int):
    """Full coordinate tuple addressing, for each element of `index`, position
    `index[...]` along `dim` and its own position along the other dims."""
    return tuple(index if d == dim else lax.broadcasted_iota(jnp.int64, index.shape, d) for d in range(index.ndim))


def _scatter_setup(self, dim, index, src):
    """(self as >=1-d, coordinates, src cut to index's shape, dim) for a scatter;
    RuntimeError (device-side) for indices outside [0, size)."""
    squeeze = self.ndim == 0
    if squeeze:
        self = self.reshape(1)
        index = index.reshape(1)
        if src is not None and jnp.ndim(src) == 0:
            src = src.reshape(1)
    dim = dim % self.ndim
    idx = checked(index, self.shape[dim], RuntimeError, _oob(dim, self.shape[dim]))
    if src is not None and jnp.ndim(src) > 0:
        src = src[tuple(slice(0, s) for s in index.shape)]
    return self, _along(idx, dim), src, squeeze


def _reshape_like(value, squeeze):
    return value.reshape(()) if squeeze else value


@lowering(aten.gather.default)
def gather(self, dim, index, sparse_grad=False):
    """`aten::gather`: ``out[i][j] = self[index[i][j]][j]`` (dim 0), the shape of
    `index`; indices must be in [0, size) (RuntimeError otherwise, no wrapping)."""
    if index.size == 0:
        return jnp.zeros(index.shape, self.dtype)
    squeeze = self.ndim == 0
    x = self.reshape(1) if squeeze else self
    idx = index.reshape(1) if index.ndim == 0 else index
    d = dim % x.ndim
    idx = checked(idx, x.shape[d], RuntimeError, _oob(d, x.shape[d]))
    if x.shape[d] == 0:  # every index is out of range: the check fails
        return jnp.zeros(index.shape, self.dtype)
    return _reshape_like(x[_along(idx, d)], squeeze or index.ndim == 0)


def _scatter(self, dim, index, src, reduce=None):
    out_dtype = self.dtype
    if index.size == 0:
        return self
    x, coords, s, squeeze = _scatter_setup(self, dim, index, src)
    s = cast(s, out_dtype)
    if reduce is None:
        r = x.at[coords].set(s)
    elif reduce in ("add", "sum"):
        r = x.at[coords].add(s) if out_dtype != jnp.bool_ else x.at[coords].max(s)
    else:  # "multiply"
        r = x.at[coords].mul(s) if out_dtype != jnp.bool_ else x.at[coords].min(s)
    return _reshape_like(r, squeeze)


@lowering(aten.scatter.src, aten.scatter.value)
def scatter(self, dim, index, src):
    """`aten::scatter.src/.value`: ``self[index[i][j]][j] = src[i][j]`` (dim 0);
    with duplicate indices one of the writes wins, as on CPU. A Scalar `value` must
    fit self's dtype."""
    if is_number(src):
        check_scalar(src, self.dtype)
    return _scatter(self, dim, index, src)


@lowering(aten.scatter.reduce, aten.scatter.value_reduce, static=("reduce",))
def scatter_reduce_legacy(self, dim, index, src, reduce):
    """`aten::scatter.reduce/.value_reduce`: scatter with reduce "add" or "multiply"
    (a Scalar `value` checked as in `scatter`)."""
    if is_number(src):
        check_scalar(src, self.dtype)
    return _scatter(self, dim, index, src, reduce)


@lowering(aten.scatter_add.default)
def scatter_add(self, dim, index, src):
    """`aten::scatter_add`: ``self[index[i][j]][j] += src[i][j]``, duplicates summed."""
    return _scatter(self, dim, index, src, "add")


def _reduce_into(x, coords, s, reduce, include_self):
    """`x` with the values `s` reduced into the positions `coords` ("sum", "prod",
    "mean", "amax", "amin"), also over `x`'s own value when `include_self`. Positions
    nothing lands on keep `x`; NaN propagates through amax/amin; integer means floor."""
    dt = x.dtype
    s = s.astype(dt)
    if dt == jnp.bool_ and reduce in ("sum", "prod"):  # CPU's bool += and *=: OR and AND
        reduce = "amax" if reduce == "sum" else "amin"
    hit = jnp.zeros(x.shape, jnp.bool_).at[coords].set(True)
    if reduce in ("sum", "mean"):
        base = x if include_self else jnp.where(hit, jnp.zeros((), dt), x)
        r = base.at[coords].add(s)
        if reduce == "mean":
            n = jnp.zeros(x.shape, jnp.int64).at[coords].add(1) + (1 if include_self else 0)
            n = jnp.maximum(n, 1)
            if is_float(dt):
                r = (r.astype(acc_type(dt)) / n.astype(acc_type(dt))).astype(dt)
            else:
                r = jnp.floor_divide(r, n.astype(dt))
            r = jnp.where(hit, r, x)
        return r
    if reduce == "prod":
        base = x if include_self else jnp.where(hit, jnp.ones((), dt), x)
        return base.at[coords].mul(s)
    largest = reduce == "amax"
    if include_self:
        base = x
    else:
        if is_float(dt):
            fill = -jnp.inf if largest else jnp.inf
        elif dt == jnp.bool_:
            fill = not largest
        else:
            fill = jnp.iinfo(dt).min if largest else jnp.iinfo(dt).max
        base = jnp.where(hit, jnp.asarray(fill, dt), x)
    r = base.at[coords].max(s) if largest else base.at[coords].min(s)
    if is_float(dt):  # XLA's scatter-max may drop NaN; ATen's propagates it
        nan = jnp.zeros(x.shape, jnp.bool_).at[coords].max(jnp.isnan(s))
        if include_self:
            nan = nan | jnp.isnan(x)
        r = jnp.where(nan, jnp.asarray(jnp.nan, dt), r)
    return r


@lowering(aten.scatter_reduce.two)
def scatter_reduce(self, dim, index, src, reduce, include_self=True):
    """`aten::scatter_reduce.two`: reduce "sum", "prod", "mean", "amax" or "amin" of
    the values scattered to each position (and of `self` if `include_self`).
    Positions nothing is scattered to keep `self`. Integer "mean" floors, as on CPU."""
    reduce = _SCATTER_REDUCE_ALIASES.get(reduce, reduce)
    if reduce == "mean" and self.dtype == jnp.bool_:
        raise not_implemented("scatter_gather_tensor_cpu_reduce_mean", self.dtype)
    if index.size == 0:
        return self
    x, coords, s, squeeze = _scatter_setup(self, dim, index, src)
    return _reshape_like(_reduce_into(x, coords, s, reduce, include_self), squeeze)


# ------------------------------------------------------------------ index_* along a dim
def _dim_key(ndim: int, dim: int, idx):
    return tuple(idx if d == dim else slice(None) for d in range(ndim))


@lowering(aten.index_select.default)
def index_select(self, dim, index):
    """`aten::index_select` (also behind `embedding`): slices of `self` along `dim`
    at `index` (1-d or 0-d); IndexError "index out of range in self" outside [0, size),
    except where CPU's kernel takes its fast path (self of 2 or more dims, along dim 1
    or with no elements): RuntimeError "INDICES element is out of DATA bounds" naming
    the first bad index. (CPU leaves that path for a non-contiguous out= tensor.)"""
    if self.ndim == 0:
        idx = checked(index.reshape(-1), 1, IndexError, "index out of range in self")
        return jnp.broadcast_to(self, context().out().shape)
    d = dim % self.ndim
    if self.shape[d] == 0 and index.size > 0:
        raise RuntimeError("index_select(): self indexing axis dim should be positive")
    flat = index.reshape(-1)
    if self.ndim > 1 and (d == 1 or self.size == 0) and flat.size > 0:
        bad = (flat < 0) | (flat >= self.shape[d])
        context().check(~jnp.any(bad), RuntimeError,
                        "INDICES element is out of DATA bounds, id={} axis_dim=" + str(self.shape[d]),
                        value=flat[jnp.argmax(bad)])
    idx = checked(flat, self.shape[d], IndexError, "index out of range in self")
    if index.size == 0:
        return jnp.zeros(context().out().shape, self.dtype)
    return jnp.take(self, idx, axis=d)


@lowering(aten.index_add.default)
def index_add(self, dim, index, source, alpha=1):
    """`aten::index_add`: ``self[..., index[i], ...] += alpha * source[..., i, ...]``
    along `dim`, duplicates summed; RuntimeError for indices outside [0, size). `alpha`
    must fit self's dtype (CPU)."""
    check_scalar(alpha, self.dtype)
    x = self.reshape(1) if self.ndim == 0 else self
    d = dim % x.ndim
    idx = checked(index.reshape(-1), x.shape[d], RuntimeError, _oob(d, x.shape[d]))
    src = source.reshape(x.shape[:d] + (idx.shape[0],) + x.shape[d + 1:])
    if not (isinstance(alpha, (int, float)) and alpha == 1):
        src = src * alpha
    if x.dtype == jnp.bool_:
        r = x.at[_dim_key(x.ndim, d, idx)].max(src.astype(jnp.bool_))
    else:
        r = x.at[_dim_key(x.ndim, d, idx)].add(src.astype(x.dtype))
    return r.reshape(self.shape)


@lowering(aten.index_reduce.default)
def index_reduce(self, dim, index, source, reduce, include_self=True):
    """`aten::index_reduce`: ``self[..., index[i], ...]`` reduced ("prod", "mean",
    "amax", "amin") with ``source[..., i, ...]`` along `dim`, as `scatter_reduce`;
    IndexError "index out of range in self" outside [0, size)."""
    x = self.reshape(1) if self.ndim == 0 else self
    d = dim % x.ndim
    idx = checked(index.reshape(-1), x.shape[d], IndexError, "index out of range in self")
    src = source.reshape(x.shape[:d] + (idx.shape[0],) + x.shape[d + 1:])
    if idx.size == 0:
        return self
    shape = [1] * x.ndim
    shape[d] = idx.shape[0]
    full = jnp.broadcast_to(idx.reshape(shape), src.shape)
    return _reduce_into(x, _along(full, d), src, reduce, include_self).reshape(self.shape)


@lowering(aten.index_copy.default)
def index_copy(self, dim, index, source):
    """`aten::index_copy`: ``self[..., index[i], ...] = source[..., i, ...]`` along
    `dim`; IndexError for indices outside [0, size)."""
    x = self.reshape(1) if self.ndim == 0 else self
    d = dim % x.ndim
    idx = checked(index.reshape(-1), x.shape[d], IndexError, "index_copy_(): " + _oob(d, x.shape[d]))
    src = source.reshape(x.shape[:d] + (idx.shape[0],) + x.shape[d + 1:])
    return x.at[_dim_key(x.ndim, d, idx)].set(src.astype(x.dtype)).reshape(self.shape)


@lowering(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(self, dim, index, value):
    """`aten::index_fill`: the slices of `self` at `index` along `dim` set to
    `value`; negative indices wrap, others outside range raise IndexError. `value`
    must fit self's dtype, as on CPU."""
    check_scalar(value, self.dtype)
    x = self.reshape(1) if self.ndim == 0 else self
    d = dim % x.ndim
    idx = checked(index.reshape(-1), x.shape[d], IndexError, _oob(d, x.shape[d]), negative=True)
    return x.at[_dim_key(x.ndim, d, idx)].set(cast(value, x.dtype)).reshape(self.shape)


@lowering(aten.take.default)
def take(self, index):
    """`aten::take`: elements of flattened `self` at `index` (its shape); negative
    indices wrap; IndexError outside [-numel, numel)."""
    n = self.size
    idx = checked(index, n, IndexError, f"out of range: tried to access an index on a tensor of {n} elements.",
                  negative=True)
    if n == 0:
        return jnp.zeros(index.shape, self.dtype)
    return self.reshape(-1)[idx]


@lowering(aten.put.default)
def put(self, index, source, accumulate=False):
    """`aten::put` (and `put_`): flattened ``self[index] = source`` (or `+=`);
    negative indices wrap; IndexError outside [-numel, numel)."""
    n = self.size
    if n == 0 and index.size > 0:
        raise IndexError("put_(): Tried to put elements into an empty tensor")
    if index.size != source.size:
        raise IndexError("put_(): Expected source and index to have the same number of elements, but got "
                         f"source.numel() = {source.size}, index.numel() = {index.size}")
    idx = checked(index.reshape(-1), n, IndexError,
                  f"out of range: tried to access an index on a tensor of {n} elements.", negative=True)
    if idx.size == 0:
        return self
    flat = self.reshape(-1)
    src = source.reshape(-1).astype(self.dtype)
    if not accumulate:
        flat = flat.at[idx].set(src)
    elif self.dtype == jnp.bool_:  # CPU's bool += bool: true if either is
        flat = flat.at[idx].max(src)
    else:
        flat = flat.at[idx].add(src)
    return flat.reshape(self.shape)


# ------------------------------------------------------------------ masked ops
@meta_check(aten.masked_fill.Scalar, aten.masked_fill.Scalar_out, aten.masked_fill.Tensor,
            aten.masked_fill.Tensor_out)
def _masked_fill_meta_check(self, mask, value, **_):
    """PyTorch's Python meta kernel converts `value` with int(): ValueError/OverflowError
    for NaN/inf on integer tensors, where CPU raises its overflow RuntimeError. It also
    refuses every complex value (number or 0-dim tensor) for a real tensor, where CPU
    reads it with `Scalar::to` (of `value.item()` for a tensor): a zero imaginary part
    passes as the real part, and any value fills a bool tensor (nonzero: True). The
    lowering checks the imaginary part (`check_scalar`). (Symbolic values of traced
    graphs are left to PyTorch.)"""
    if isinstance(value, (bool, int, float, complex)):
        check_scalar(value, dtypes.to_jax(self.dtype))
    elif not isinstance(value, torch.Tensor):
        return None
    if (isinstance(value, complex) or (isinstance(value, torch.Tensor) and value.is_complex())) \
            and not self.dtype.is_complex:
        return {"value": value != 0 if self.dtype == torch.bool else value.real}
    return None


@lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(self, mask, value):
    """`aten::masked_fill` (and `masked_fill_`): `value` (a number or 0-dim tensor,
    converted to self's dtype) where `mask` is True. Non-bool masks raise in PyTorch's
    checks before this runs."""
    out = context().out()
    check_scalar(value, self.dtype)
    return jnp.where(mask, cast(value, self.dtype), self).astype(out.dtype)


@lowering(aten.masked_scatter.default)
def masked_scatter(self, mask, source):
    """`aten::masked_scatter`: the k-th True position of (broadcast) `mask` takes the
    k-th element of `source`; RuntimeError (device-side) if `source` is too short."""
    out = context().out()
    x = jnp.broadcast_to(self, out.shape)
    m = jnp.broadcast_to(mask, out.shape).reshape(-1)
    src = source.reshape(-1)
    nnz = jnp.sum(m)
    context().check(nnz <= src.shape[0], RuntimeError, "Number of elements of source < number of ones in mask")
    if src.shape[0] == 0:
        return x
    pos = jnp.clip(jnp.cumsum(m) - 1, 0, src.shape[0] - 1)
    return jnp.where(m, src[pos].astype(x.dtype), x.reshape(-1)).reshape(out.shape)


@lowering(aten.masked_scatter_backward.default, static=("sizes",))
def masked_scatter_backward(grad_output, mask, sizes):
    """`aten::masked_scatter_backward`: the gradient of masked_scatter's `source`, of
    shape `sizes`: the elements of `grad_output` at the True positions of the
    (broadcast) `mask`, in order, then zeros. (ATen's composite selects them, which
    synchronizes for their count; here the shape is static.) RuntimeError
    (device-side) if the mask selects more elements than `sizes` holds."""
    shape = jnp.broadcast_shapes(grad_output.shape, mask.shape)
    g = jnp.broadcast_to(grad_output, shape).reshape(-1)
    m = jnp.broadcast_to(mask, shape).reshape(-1)
    n = math.prod(sizes)
    context().check(jnp.sum(m) <= n, RuntimeError,
                    f"masked_scatter_backward: the mask selects more elements than sizes {list(sizes)} hold")
    order = jnp.argsort(~m, stable=True)  # True positions first, each kind in order
    picked = jnp.where(m[order], g[order], jnp.zeros((), g.dtype))
    picked = picked[:n] if picked.shape[0] >= n else jnp.pad(picked, (0, n - picked.shape[0]))
    return picked.reshape(sizes)


@host_kernel(aten.masked_select.default)
def masked_select(self, mask):
    """`aten::masked_select`: the elements of `self` where the (broadcast) bool
    `mask` is True, as a 1-d tensor; synchronizes for the count."""
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    shape = torch.broadcast_shapes(self.shape, mask.shape)
    return index_host(self.expand(shape).reshape(-1), [mask.expand(shape).reshape(-1)])


# ------------------------------------------------------------------ sorted search
def _bisect(seq, values, right: bool):
    """For each value, the insertion position into the sorted last axis of `seq`
    (which broadcasts against `values` on the leading axes): ATen's binary search,
    whose predicate (`!(s >= v)`, `!(s > v)` for right) puts NaN values at the end."""
    n = seq.shape[-1]
    lo = jnp.zeros(values.shape, jnp.int64)
    hi = jnp.full(values.shape, n, jnp.int64)
    seq = jnp.broadcast_to(seq, values.shape[:-1] + (n,)) if seq.ndim > 1 else seq
    for _ in range(max(1, int(n).bit_length())):
        active = lo < hi
        mid = (lo + hi) // 2
        safe = jnp.minimum(mid, n - 1)
        s = jnp.take_along_axis(seq, safe, axis=-1) if seq.ndim > 1 else seq[safe]
        go_right = ~(s > values) if right else ~(s >= values)
        lo = jnp.where(active & go_right, mid + 1, lo)
        hi = jnp.where(active & ~go_right, mid, hi)
    return lo


def _searchsorted(sorted_sequence, values, right, side, sorter):
    if jnp.asarray(values).dtype == jnp.bool_ and jnp.size(values) > 0:
        raise not_implemented("searchsorted_out_cpu", jnp.bool_)
    right = bool(right) or side == "right"
    seq = sorted_sequence
    if sorter is not None:
        ok = jnp.all((sorter >= 0) & (sorter < seq.shape[-1])) if sorter.size else jnp.asarray(True)
        context().check(ok, RuntimeError, "torch.searchsorted(): sorter index out of range")
        seq = jnp.take_along_axis(seq, jnp.clip(sorter, 0, max(seq.shape[-1] - 1, 0)).astype(jnp.int64), axis=-1)
    c = jnp.promote_types(seq.dtype, jnp.asarray(values).dtype)
    seq, vals = seq.astype(c), jnp.asarray(values).astype(c)
    if seq.shape[-1] == 0:
        return jnp.zeros(context().out().shape)
    scalar = vals.ndim == 0
    if scalar:
        vals = vals.reshape(1)
    pos = _bisect(seq, vals, right)
    return pos.reshape(()) if scalar else pos


@lowering(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def searchsorted(sorted_sequence, self, out_int32=False, right=False, side=None, sorter=None):
    """`aten::searchsorted`: insertion indices of `self` into the innermost dim of
    `sorted_sequence` (1-d, or with leading dims matching `self`'s); `right`/`side`
    select the upper bound; `sorter` sorts the sequence first (RuntimeError if out of
    range). int64 output, int32 with `out_int32`."""
    return _searchsorted(sorted_sequence, self, right, side, sorter)


@meta_check(aten.bucketize.Tensor, aten.bucketize.Scalar, aten.bucketize.Tensor_out)
def _bucketize_meta_check(self, boundaries, *_, **__):
    if boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.dim()})")


@lowering(aten.bucketize.Tensor, aten.bucketize.Scalar)
def bucketize(self, boundaries, out_int32=False, right=False):
    """`aten::bucketize`: the bucket of each element of `self` among the 1-d sorted
    `boundaries` (``searchsorted(boundaries, self, right=right)``)."""
    return _searchsorted(boundaries, self, right, None, None)


# ------------------------------------------------------------------ embedding backward
@lowering(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    """`aten::embedding_dense_backward`: the (num_weights, D) gradient of an
    embedding lookup: rows of `grad_output` summed into the rows they were read
    from, nothing for `padding_idx`, divided by each index's count when
    `scale_grad_by_freq`. Half types accumulate in float32."""
    d = grad_output.shape[-1]
    idx = indices.reshape(-1).astype(jnp.int64)
    acc = acc_type(grad_output.dtype)
    g = grad_output.reshape(-1, d).astype(acc)
    keep = idx != padding_idx
    g = jnp.where(keep[:, None], g, jnp.zeros((), acc))
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), acc).at[idx].add(1, mode="drop")
        g = g / counts[jnp.clip(idx, 0, num_weights - 1)][:, None]
    out = jnp.zeros((num_weights, d), acc).at[idx].add(g, mode="drop")
    return out.astype(grad_output.dtype)
