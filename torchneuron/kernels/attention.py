"""Memory-efficient scaled-dot-product attention: blocked over keys, online softmax.

The forward follows FlashAttention (Dao et al., 2022, "FlashAttention: Fast and
Memory-Efficient Exact Attention with IO-Awareness", Algorithm 1): keys and values are
visited in blocks of `BLOCK_K` by a `lax.scan`; a running row maximum `m`, row sum `l`
and output accumulator are rescaled as each block arrives, so no (L, S) score matrix is
ever formed; it returns the output and the row log-sum-exp. The backward (Algorithm 2)
recomputes each block's probabilities from the saved log-sum-exp and accumulates dq
while emitting that block's dk and dv. Peak memory is O(L * BLOCK_K) per head instead
of O(L * S).

Shapes follow `aten::_scaled_dot_product_fused_attention_overrideable`: q (B, H, L, E)
or (N, L, E), k (B', Hk, S, E), v (B', Hk, S, Ev) with B' broadcastable to B and
H a multiple of Hk (grouped-query attention: query head h reads key head
h // (H / Hk), as `enable_gqa=True` and `repeat_interleave` define it); an additive
float bias broadcastable to (B, H, L, S) (bool masks arrive converted to 0/-inf);
a top-left causal mask (query i sees keys j <= i). Rows whose keys are all masked give
zeros (ATen's safe softmax) and a log-sum-exp of -inf.

Dropout draws its keep mask per key block from `jax.random.fold_in(key, block)`, so the
backward regenerates exactly the forward's mask block by block.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import jax
import jax.numpy as jnp
from jax import lax

#: Keys per block. Scores live as (B, H, L, BLOCK_K) at a time.
BLOCK_K = 512
_HIGHEST = lax.Precision.HIGHEST


def default_scale(head_dim: int, scale: Optional[float]) -> float:
    """SDPA's softmax scale: `scale`, or 1/sqrt(E) when None."""
    return scale if scale is not None else 1.0 / math.sqrt(head_dim)


class _Layout:
    """How q/k/v/bias map onto the kernel's grouped 5-d layout (B, Hk, G, L, E)."""

    def __init__(self, q, k, bias, block_k):
        self.rank3 = q.ndim == 3
        qs = (q.shape[0], 1) + q.shape[1:] if self.rank3 else q.shape
        ks = (k.shape[0], 1) + k.shape[1:] if self.rank3 else k.shape
        self.q_shape, self.k_shape = qs, ks
        self.batch = max(qs[0], ks[0])
        self.heads, self.kv_heads = qs[1], ks[1]
        if self.heads % self.kv_heads:
            raise RuntimeError(f"attention: {self.heads} query heads are not a multiple of {self.kv_heads} key heads")
        self.groups = self.heads // self.kv_heads
        self.L, self.S = qs[2], ks[2]
        self.block = min(block_k, self.S) if self.S else 1
        self.n_blocks = max(1, -(-self.S // self.block))
        self.S_pad = self.n_blocks * self.block
        self.bias_shape = None if bias is None else (1,) * (4 - bias.ndim) + tuple(bias.shape)

    def q5(self, x):
        """(B, H, L, D) query-side array -> (B, Hk, G, L, D), batch broadcast."""
        x = x.reshape((x.shape[0], 1) + x.shape[1:]) if self.rank3 else x
        x = jnp.broadcast_to(x, (self.batch,) + x.shape[1:])
        return x.reshape(self.batch, self.kv_heads, self.groups, *x.shape[2:])

    def kv_blocks(self, x):
        """(B', Hk, S, D) -> (n_blocks, B, Hk, block, D), zero-padded keys."""
        x = x.reshape((x.shape[0], 1) + x.shape[1:]) if self.rank3 else x
        x = jnp.broadcast_to(x, (self.batch,) + x.shape[1:])
        x = jnp.pad(x, ((0, 0), (0, 0), (0, self.S_pad - self.S), (0, 0)))
        x = x.reshape(self.batch, self.kv_heads, self.n_blocks, self.block, x.shape[-1])
        return jnp.moveaxis(x, 2, 0)

    def bias_parts(self, bias):
        """The bias as (b, hk, g, l, s) with size-1 dims kept, split along keys into
        (n_blocks, ..., block) when it varies along keys; (blocks or None, constant or None)."""
        b = bias.reshape(self.bias_shape)
        h = b.shape[1]
        b = b.reshape(b.shape[0], self.kv_heads, self.groups, *b.shape[2:]) if h != 1 else b[:, :, None]
        if b.shape[-1] == 1:
            return None, b
        b = jnp.pad(b, [(0, 0)] * 4 + [(0, self.S_pad - self.S)])
        b = b.reshape(b.shape[:4] + (self.n_blocks, self.block))
        return jnp.moveaxis(b, 4, 0), None

    def unblock(self, x, shape):
        """(n_blocks, B, Hk, block, D) -> the original (B', Hk, S, D) shape, summing
        over broadcast batch entries."""
        x = jnp.moveaxis(x, 0, 2).reshape(self.batch, self.kv_heads, self.S_pad, x.shape[-1])[:, :, :self.S]
        if self.k_shape[0] != self.batch:
            x = x.sum(0, keepdims=True)
        return x.reshape(shape)

    def unq(self, x, shape):
        """(B, Hk, G, L, D) -> q's original shape, summing over broadcast batch entries."""
        x = x.reshape(self.batch, self.heads, *x.shape[3:])
        if self.q_shape[0] != self.batch:
            x = x.sum(0, keepdims=True)
        return x.reshape(shape)


def _block_scores(layout, q, kb, j, bias_blk, bias_const, is_causal, scale):
    """Scores of key block j, (B, Hk, G, L, block), masked positions at -inf."""
    s = jnp.einsum("bhgqd,bhkd->bhgqk", q, kb, precision=_HIGHEST) * scale
    if bias_blk is not None:
        s = s + bias_blk
    if bias_const is not None:
        s = s + bias_const
    pos = j * layout.block + jnp.arange(layout.block)
    valid = pos < layout.S
    if is_causal:
        valid = valid[None, :] & (pos[None, :] <= jnp.arange(layout.L)[:, None])
    return jnp.where(valid, s, -jnp.inf)


def _keep(key, j, shape, dropout_p):
    return jax.random.bernoulli(jax.random.fold_in(key, j), 1 - dropout_p, shape)


def forward(q, k, v, bias=None, *, is_causal=False, scale=None, dropout_p=0.0, key=None,
            block_k: int = BLOCK_K) -> Tuple[jax.Array, jax.Array]:
    """(out (B, H, L, Ev), logsumexp (B, H, L)) of softmax(q k^T * scale + bias) v.

    Inputs are float arrays of one dtype (the caller upcasts half precision); `key` is
    a JAX PRNG key, needed when `dropout_p` > 0. Raises RuntimeError when H is not a
    multiple of Hk."""
    lay = _Layout(q, k, bias, block_k)
    scale = default_scale(q.shape[-1], scale)
    q5 = lay.q5(q)
    kb, vb = lay.kv_blocks(k), lay.kv_blocks(v)
    bias_blocks, bias_const = (None, None) if bias is None else lay.bias_parts(bias)
    rows = q5.shape[:-1]
    init = (jnp.full(rows, -jnp.inf, q.dtype), jnp.zeros(rows, q.dtype), jnp.zeros(rows + (v.shape[-1],), q.dtype))

    def step(carry, xs):
        m, l, acc = carry
        j, kj, vj, bj = xs
        s = _block_scores(lay, q5, kj, j, bj, bias_const, is_causal, scale)
        m_new = jnp.maximum(m, s.max(-1))
        m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0)
        alpha = jnp.exp(m - m_safe)
        p = jnp.exp(s - m_safe[..., None])
        l = l * alpha + p.sum(-1)
        if dropout_p:
            p = jnp.where(_keep(key, j, p.shape, dropout_p), p / (1 - dropout_p), 0)
        acc = acc * alpha[..., None] + jnp.einsum("bhgqk,bhkd->bhgqd", p, vj, precision=_HIGHEST)
        return (m_new, l, acc), None

    xs = (jnp.arange(lay.n_blocks), kb, vb, bias_blocks)
    (m, l, acc), _ = lax.scan(step, init, xs)
    out = acc / jnp.where(l == 0, 1, l)[..., None]
    lse = jnp.where(l == 0, -jnp.inf, jnp.log(jnp.where(l == 0, 1, l)) + jnp.where(jnp.isfinite(m), m, 0))
    out_shape = q.shape[:-1] + (v.shape[-1],)
    if lay.q_shape[0] != lay.batch:
        out_shape = (lay.batch,) + out_shape[1:]
    return out.reshape(out_shape), lse.reshape(out_shape[:-1])


def backward(grad_out, q, k, v, bias, out, lse, *, is_causal=False, scale=None, dropout_p=0.0, key=None,
             bias_grad: bool = False, block_k: int = BLOCK_K):
    """(dq, dk, dv, dbias or None) of `forward`, recomputing each key block's
    probabilities from `lse` (FlashAttention's backward). `out` and `lse` are the
    forward's results; `dbias` (summed to the bias's shape) only when `bias_grad`."""
    lay = _Layout(q, k, bias, block_k)
    scale = default_scale(q.shape[-1], scale)
    q5, do5 = lay.q5(q), lay.q5(grad_out)
    kb, vb = lay.kv_blocks(k), lay.kv_blocks(v)
    bias_blocks, bias_const = (None, None) if bias is None else lay.bias_parts(bias)
    bias_shape = None if bias is None else (bias_const if bias_blocks is None else bias_blocks[0]).shape
    delta = jnp.sum(do5 * lay.q5(out), -1)
    lse5 = lay.q5(lse[..., None].astype(q.dtype))[..., 0]
    # exp(s - inf) = 0 for rows that saw no key at all (their lse is -inf).
    lse5 = jnp.where(lse5 == -jnp.inf, jnp.inf, lse5)

    def step(dq, xs):
        j, kj, vj, bj = xs
        s = _block_scores(lay, q5, kj, j, bj, bias_const, is_causal, scale)
        p = jnp.exp(s - lse5[..., None])
        dp = jnp.einsum("bhgqd,bhkd->bhgqk", do5, vj, precision=_HIGHEST)
        if dropout_p:
            keep = _keep(key, j, p.shape, dropout_p)
            p_drop = jnp.where(keep, p / (1 - dropout_p), 0)
            dp = jnp.where(keep, dp / (1 - dropout_p), 0)
        else:
            p_drop = p
        dv = jnp.einsum("bhgqk,bhgqd->bhkd", p_drop, do5, precision=_HIGHEST)
        ds = p * (dp - delta[..., None])
        dq = dq + jnp.einsum("bhgqk,bhkd->bhgqd", ds, kj, precision=_HIGHEST) * scale
        dk = jnp.einsum("bhgqk,bhgqd->bhkd", ds, q5, precision=_HIGHEST) * scale
        db = _sum_to(ds, bias_shape) if bias_grad else None
        return dq, (dk, dv, db)

    xs = (jnp.arange(lay.n_blocks), kb, vb, bias_blocks)
    dq, (dk, dv, db) = lax.scan(step, jnp.zeros_like(q5), xs)
    dbias = None
    if bias_grad:
        if bias_blocks is not None:
            db = jnp.moveaxis(db, 0, 4).reshape(db.shape[1:5] + (lay.S_pad,))[..., :lay.S]
        else:
            db = db.sum(0)
        dbias = db.reshape(bias.shape)
    return lay.unq(dq, q.shape), lay.unblock(dk, k.shape), lay.unblock(dv, v.shape), dbias


def _sum_to(ds, target):
    """Sums a block's score gradient (B, Hk, G, L, block) down to the bias's
    broadcast shape `target` (its per-block shape, or its key-constant shape)."""
    axes = tuple(i for i, (n, t) in enumerate(zip(ds.shape, target)) if t == 1 and n != 1)
    return ds.sum(axes, keepdims=True)
