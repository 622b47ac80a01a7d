"""View ops as value lowerings, for compiled graphs.

In eager mode views are metadata-only C++ kernels that share storage; inside a
functionalized FX graph (torch.compile) they are plain functions of values, so the
graph interpreter needs them as JAX lowerings. Registered with ``eager=False``.
"""
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..runtime import views as strided
from .registry import context, lowering

aten = torch.ops.aten


def _shape():
    return context().out().shape


@lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten._reshape_alias.default,
          aten.view_copy.default, eager=False)
def view(self, *shape_args):
    return jnp.reshape(self, _shape())


@lowering(aten.expand.default, aten.expand_copy.default, eager=False)
def expand(self, size, implicit=False):
    return jnp.broadcast_to(self, _shape())


@lowering(aten.permute.default, aten.permute_copy.default, eager=False)
def permute(self, dims):
    return jnp.transpose(self, [d % max(self.ndim, 1) for d in dims])


@lowering(aten.t.default, aten.t_copy.default, eager=False)
def t(self):
    return self.T


@lowering(aten.transpose.int, aten.transpose_copy.int, eager=False)
def transpose(self, dim0, dim1):
    return jnp.swapaxes(self, dim0, dim1) if self.ndim else self


@lowering(aten.unsqueeze.default, aten.unsqueeze_copy.default, aten.squeeze.default, aten.squeeze.dim,
          aten.squeeze.dims, aten.squeeze_copy.dim, aten.squeeze_copy.dims, eager=False)
def reshape_like(self, *args):
    return jnp.reshape(self, _shape())


@lowering(aten.alias.default, aten.alias_copy.default, aten.detach.default, aten.lift_fresh.default,
          aten.lift_fresh_copy.default, eager=False)
def alias(self):
    return self


@lowering(aten.slice.Tensor, aten.slice_copy.Tensor, eager=False)
def slice_(self, dim=0, start=None, end=None, step=1):
    dim = dim % self.ndim
    size = self.shape[dim]
    start, end, _ = slice(start, end).indices(size)
    end = max(end, start)
    return lax.slice_in_dim(self, start, end, step, axis=dim)


@lowering(aten.select.int, aten.select_copy.int, eager=False)
def select(self, dim, index):
    dim = dim % self.ndim
    return lax.index_in_dim(self, index % self.shape[dim], axis=dim, keepdims=False)


@lowering(aten.diagonal.default, aten.diagonal_copy.default, eager=False)
def diagonal(self, offset=0, dim1=0, dim2=1):
    return jnp.diagonal(self, offset, dim1 % self.ndim, dim2 % self.ndim)


@lowering(aten.unfold.default, aten.unfold_copy.default, eager=False)
def unfold(self, dimension, size, step):
    dim = dimension % max(self.ndim, 1)
    n = (self.shape[dim] - size) // step + 1 if self.ndim else 1
    if self.ndim == 0:
        return jnp.reshape(self, (1,))
    idx = (np.arange(n)[:, None] * step + np.arange(size)[None, :])
    out = jnp.take(self, idx, axis=dim)  # dims: ..., n, size, ...
    return jnp.moveaxis(out, dim + 1, -1)


def storage_positions(shape, stride, offset: int) -> np.ndarray:
    """The storage index of each element of a (shape, stride, offset) view, flattened
    in row-major element order."""
    idx = np.full(tuple(shape), offset, dtype=np.int64)
    for d, (n, st) in enumerate(zip(shape, stride)):
        step = [1] * len(shape)
        step[d] = n
        idx = idx + (np.arange(n, dtype=np.int64) * st).reshape(step)
    return idx.reshape(-1)


def input_layout(value, arg: int = 0):
    """(stride, storage offset) of tensor argument `arg` in the storage it views: from
    the graph's fake tensors where known, else the value stands for a contiguous storage
    of its own."""
    layouts = context().layouts
    if arg < len(layouts):
        return layouts[arg]
    return tuple(torch.empty(value.shape, device="meta").stride()), 0


@lowering(aten.as_strided.default, aten.as_strided_copy.default, eager=False)
def as_strided(self, size, stride, storage_offset=None):
    """`aten::as_strided` on a value: a window of the storage `self` views. When `self`
    is itself a non-contiguous view (a permuted graph input), its elements are placed
    at their storage positions first, as eager reads them. RuntimeError when the window
    reaches storage that `self` does not cover: the graph holds only `self`'s values."""
    size, stride, offset = tuple(size), tuple(stride), storage_offset or 0
    in_stride, in_offset = input_layout(self)
    if in_offset == 0 and strided.is_contiguous(tuple(self.shape), in_stride):
        within = offset + sum((n - 1) * st for n, st in zip(size, stride)) < max(self.size, 1)
        if within or 0 in size:
            return strided.read(jnp.reshape(self, (-1,)), self.dtype, size, stride, offset)
    held = storage_positions(self.shape, in_stride, in_offset)
    wanted = storage_positions(size, stride, offset)
    element = np.full(max(int(held.max(initial=-1)), int(wanted.max(initial=-1))) + 1, -1, dtype=np.int64)
    element[held] = np.arange(held.size)
    source = element[wanted]
    if (source < 0).any():
        raise RuntimeError(f"as_strided(size={list(size)}, stride={list(stride)}, storage_offset={offset}) in a "
                           f"compiled graph reads storage outside its input view (shape {list(self.shape)}, "
                           f"stride {list(in_stride)}, offset {in_offset})")
    return jnp.take(jnp.reshape(self, (-1,)), source).reshape(size)


@lowering(aten.split.Tensor, aten.split_copy.Tensor, eager=False)
def split(self, split_size, dim=0):
    dim = dim % self.ndim
    n = self.shape[dim]
    bounds = list(range(split_size, n, split_size)) if split_size else []
    return jnp.split(self, bounds, axis=dim) if n else [self]


@lowering(aten.split_with_sizes.default, aten.split_with_sizes_copy.default, eager=False)
def split_with_sizes(self, split_sizes, dim=0):
    dim = dim % self.ndim
    return jnp.split(self, list(np.cumsum(split_sizes)[:-1]), axis=dim)


@lowering(aten.unbind.int, aten.unbind_copy.int, eager=False)
def unbind(self, dim=0):
    dim = dim % self.ndim
    return [lax.index_in_dim(self, i, axis=dim, keepdims=False) for i in range(self.shape[dim])]


@lowering(aten.view.dtype, eager=False)
def view_dtype(self, dtype):
    return strided.read(jnp.reshape(self, (-1,)), context().out_dtype(), _shape(),
                        tuple(torch.empty(_shape(), device="meta").stride()), 0)


@lowering(aten.view_as_real.default, eager=False)
def view_as_real(self):
    return jnp.stack([jnp.real(self), jnp.imag(self)], axis=-1)


@lowering(aten.view_as_complex.default, eager=False)
def view_as_complex(self):
    return lax.complex(self[..., 0], self[..., 1])


# Compiled graphs only: eager runs ATen's composite kernels of these, and PyTorch's
# decompositions of them write into views of a new tensor, which AOTAutograd's graphs
# would keep as mutations.
@lowering(aten.complex.default, eager=False)
def complex_(real, imag):
    """aten::complex: real + i imag, broadcast, of the complex dtype of theirs."""
    shape = context().out().shape
    return lax.complex(jnp.broadcast_to(real, shape), jnp.broadcast_to(imag, shape))


@lowering(aten.polar.default, eager=False)
def polar(abs, angle):
    """aten::polar: abs cos(angle) + i abs sin(angle), broadcast (ATen's composite)."""
    shape = context().out().shape
    return lax.complex(jnp.broadcast_to(abs * jnp.cos(angle), shape), jnp.broadcast_to(abs * jnp.sin(angle), shape))
