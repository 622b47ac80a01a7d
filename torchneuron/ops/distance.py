"""Pairwise distance lowerings: `aten::_cdist_forward` / `_cdist_backward` (torch.cdist)
and `aten::_pdist_forward` / `_pdist_backward` (torch.nn.functional.pdist).

The p-norm of differences follows ATen's cases: p == 0 counts nonzero differences,
p == inf takes the largest, p == 2 may use the matrix-product form
||x||^2 + ||y||^2 - 2 x.y as ATen does when `compute_mode` asks for it (or, by default,
for more than 25 rows per side) and clamps it at zero. The backward overloads are the
JAX transpose (`jax.vjp`) of the forward with ATen's zero gradient where a distance is
zero.
"""
import math

import jax
import jax.numpy as jnp
import torch

from ._common import cpu_kernel_lacks_half
from .registry import context, lowering

aten = torch.ops.aten


def _pnorm(diff, p):
    a = jnp.abs(diff)
    if p == 0:
        return jnp.sum((a != 0).astype(diff.dtype), axis=-1)
    if p == math.inf:
        return jnp.max(a, axis=-1)
    if p == 1:
        return jnp.sum(a, axis=-1)
    if p == 2:
        s = jnp.sum(a * a, axis=-1)
        # sqrt'(0) is infinite; ATen's gradient of a zero distance is zero
        safe = jnp.where(s == 0, 1, s)
        return jnp.where(s == 0, 0, jnp.sqrt(safe))
    s = jnp.sum(a ** p, axis=-1)
    safe = jnp.where(s == 0, 1, s)
    return jnp.where(s == 0, 0, safe ** (1.0 / p))


def _use_mm(p, r1, r2, compute_mode):
    if p != 2:
        return False
    if compute_mode is None or compute_mode == 0:  # use_mm_for_euclid_dist_if_necessary
        return r1 > 25 or r2 > 25
    return compute_mode == 1  # 1: use_mm_for_euclid_dist, 2: donot_use_mm_for_euclid_dist


def _cdist(x1, x2, p, compute_mode):
    if _use_mm(p, x1.shape[-2], x2.shape[-2], compute_mode):
        hi = jax.lax.Precision.HIGHEST
        sq = (jnp.sum(x1 * x1, -1)[..., :, None] + jnp.sum(x2 * x2, -1)[..., None, :]
              - 2 * jnp.matmul(x1, jnp.swapaxes(x2, -1, -2), precision=hi))
        sq = jnp.maximum(sq, 0)
        safe = jnp.where(sq == 0, 1, sq)
        return jnp.where(sq == 0, 0, jnp.sqrt(safe))
    return _pnorm(x1[..., :, None, :] - x2[..., None, :, :], p)


@lowering(aten._cdist_forward.default, static=("p",))
@cpu_kernel_lacks_half("cdist")
def cdist_forward(x1, x2, p, compute_mode=None):
    """aten::_cdist_forward: (*, P, M) distances between the rows of x1 (*, P, D) and
    x2 (*, R, D) (batch dims broadcast), in the p-norm."""
    batch = jnp.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    x1 = jnp.broadcast_to(x1, batch + x1.shape[-2:])
    x2 = jnp.broadcast_to(x2, batch + x2.shape[-2:])
    return _cdist(x1, x2, p, compute_mode)


@lowering(aten._cdist_backward.default, static=("p",))
def cdist_backward(grad, x1, x2, p, cdist):
    """aten::_cdist_backward: the gradient for x1 of `_cdist_forward` (the non-mm form),
    over the broadcast batch dims (autograd sums it to x1's shape; x2's gradient comes
    from this op with x1 and x2 swapped, so x2 may carry more batch dims than x1). An
    empty batch gives zeros of x1's shape, as on CPU."""
    batch = jnp.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    if math.prod(batch) == 0:
        return jnp.zeros(context().out().shape, x1.dtype)
    x1 = jnp.broadcast_to(x1, batch + x1.shape[-2:])
    x2 = jnp.broadcast_to(x2, batch + x2.shape[-2:])
    _, vjp = jax.vjp(lambda a: _pnorm(a[..., :, None, :] - x2[..., None, :, :], p), x1)
    return vjp(grad.astype(x1.dtype))[0]


def _pairs(n):
    i, j = jnp.triu_indices(n, k=1)
    return i, j


@lowering(aten._pdist_forward.default, static=("p",))
def pdist_forward(self, p=2.0):
    """aten::_pdist_forward: the (N (N - 1) / 2,) p-norm distances between the rows
    i < j of self (N, M), row-major as ATen orders them."""
    i, j = _pairs(self.shape[0])
    return _pnorm(self[i] - self[j], p)


@lowering(aten._pdist_backward.default, static=("p",))
def pdist_backward(grad, self, p, pdist):
    """aten::_pdist_backward: the gradient for self of `_pdist_forward`."""
    i, j = _pairs(self.shape[0])
    _, vjp = jax.vjp(lambda a: _pnorm(a[i] - a[j], p), self)
    return vjp(grad.astype(self.dtype))[0]
