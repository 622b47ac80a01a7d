"""`torch.nn.attention.flex_attention` in compiled graphs on `neuron`.

Under torch.compile, flex_attention reaches the backend as the higher-order ops
``flex_attention(q, k, v, score_mod, block_mask, scale, kernel_options,
score_mod_buffers, mask_mod_buffers) -> (out, logsumexp / ln 2, max / ln 2)`` and
``flex_attention_backward(q, k, v, out, logsumexp, grad_out, grad_logsumexp, fw_graph,
joint_graph, block_mask, ...) -> (dq, dk, dv, score_mod buffer grads)``, whose
score_mod and mask_mod arguments are ATen FX subgraphs over scalars
(score, b, h, q_idx, kv_idx, *buffers). Here the subgraphs are interpreted with the
lowering table and vectorized with `jax.vmap` over (b, h, q_idx, kv_idx), and the
attention follows PyTorch's reference `math_attention`
(torch/_higher_order_ops/flex_attention.py): scores in float32 (float64 for float64
inputs), mask_mod applied (block indices only accelerate it), safe softmax, grouped
query heads by repeat_interleave. The backward is `jax.vjp` of that forward with
fw_graph as the score_mod. Scores are materialized as (B, H, L, S) arrays.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable

import jax
import jax.numpy as jnp
import torch
import torch.fx

from ..ops.registry import LOWERINGS, Context, tracing
from ..runtime import dtypes

HOPS = (torch.ops.higher_order.flex_attention, torch.ops.higher_order.flex_attention_backward)
_LN2 = math.log(2)


def allow_neuron_device() -> None:
    """flex_attention's input check (`_validate_device`) lists the device types PyTorch
    ships kernels for and refuses the others; it also runs while Dynamo traces. Adds
    `neuron` to that set by swapping the constant in its code, so that Dynamo still
    inlines PyTorch's own function. Idempotent."""
    from torch.nn.attention import flex_attention as fa

    code = fa._validate_device.__code__
    consts = tuple(c | {"neuron"} if isinstance(c, frozenset) and "cuda" in c else c for c in code.co_consts)
    fa._validate_device.__code__ = code.replace(co_consts=consts)


def subgraph_fn(gm: torch.fx.GraphModule, schema_args, out_specs, cast) -> Callable:
    """The JAX function computing an ATen FX subgraph with the lowering table.
    Device-side checks inside it (index bounds) are not reported."""
    def run(*args):
        env = {}
        it = iter(args)
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(it)
            elif node.op == "get_attr":
                value = getattr(gm, node.target)
                env[node] = jnp.asarray(dtypes.numpy_view(value.detach().cpu().contiguous())) \
                    if isinstance(value, torch.Tensor) else value
            elif node.op == "call_function":
                a = torch.fx.node.map_arg(node.args, env.__getitem__)
                kw = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
                if node.target is operator.getitem:
                    env[node] = a[0][a[1]]
                    continue
                ctx = Context(outs=out_specs(node.meta.get("val")))
                with tracing(ctx):
                    env[node] = cast(LOWERINGS[node.target].fn(*schema_args(node.target, a, kw)), ctx.outs)
            elif node.op == "output":
                return torch.fx.node.map_arg(node.args[0], env.__getitem__)
            else:
                raise NotImplementedError(f"torchneuron compile: FX node {node.op} in a flex_attention subgraph")

    return run


def lowerable(node: torch.fx.Node) -> bool:
    """Whether every op of the node's score_mod and mask_mod subgraphs has a lowering
    (the backward's joint_graph is not run: JAX differentiates fw_graph instead)."""
    forward = node.target is HOPS[0]
    graphs = [node.args[3] if forward else node.args[7]]
    mask = node.args[4] if forward else node.args[9]
    graphs += [m for m in mask if isinstance(m, torch.fx.Node) and m.op == "get_attr"]
    gm = node.graph.owning_module
    for g in graphs:
        sub = getattr(gm, g.target)
        for n in sub.graph.nodes:
            if n.op == "call_function" and n.target is not operator.getitem and n.target not in LOWERINGS:
                return False
    return True


def _vmap_bhqkv(fn, prefix: int, n_buffers: int):
    """fn over scalars -> fn over (B,), (H,), (L,), (S,) index vectors (and `prefix`
    leading (B, H, L, S) arrays), as PyTorch's _vmap_for_bhqkv."""
    for dims in ((None, None, None, 0), (None, None, 0, None), (None, 0, None, None), (0, None, None, None)):
        fn = jax.vmap(fn, in_axes=(0,) * prefix + dims + (None,) * n_buffers)
    return fn


def _forward(q, k, v, score_mod, mask_mod, scale, score_buffers, mask_buffers):
    groups = q.shape[1] // k.shape[1]
    k = jnp.broadcast_to(jnp.repeat(k, groups, axis=1), q.shape[:2] + k.shape[2:])
    v = jnp.broadcast_to(jnp.repeat(v, groups, axis=1), q.shape[:2] + v.shape[2:])
    work = jnp.float64 if q.dtype == jnp.float64 else jnp.float32
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(work), k.astype(work), precision=jax.lax.Precision.HIGHEST) * scale
    idx = [jnp.arange(n, dtype=jnp.int64) for n in s.shape]
    post = _vmap_bhqkv(score_mod, 1, len(score_buffers))(s, *idx, *score_buffers).astype(work)
    keep = _vmap_bhqkv(mask_mod, 0, len(mask_buffers))(*idx, *mask_buffers)
    post = jnp.where(keep, post, -jnp.inf)
    masked = jnp.all(post == -jnp.inf, axis=-1)
    mx = jnp.max(post, axis=-1)
    safe_mx = jnp.where(masked, 0, mx)
    e = jnp.exp(post - safe_mx[..., None])
    total = e.sum(-1)
    lse = jnp.where(masked, -jnp.inf, jnp.log(jnp.where(masked, 1, total)) + safe_mx)
    p = e / jnp.where(masked, 1, total)[..., None]
    out = jnp.einsum("bhqk,bhkd->bhqd", p.astype(q.dtype), v.astype(q.dtype), precision=jax.lax.Precision.HIGHEST)
    return out, lse / _LN2, mx / _LN2


def _single(fn):
    """A subgraph returning [value] or value -> a function returning the value."""
    def call(*args):
        out = fn(*args)
        return out[0] if isinstance(out, (list, tuple)) else out

    return call


def run(node: torch.fx.Node, args, schema_args, out_specs, cast) -> Any:
    """The value of a flex_attention / flex_attention_backward node."""
    def compiled(gm):
        return _single(subgraph_fn(gm, schema_args, out_specs, cast))

    if node.target is HOPS[0]:
        q, k, v, score_gm, block_mask, scale, _, score_buffers, mask_buffers = args
        return _forward(q, k, v, compiled(score_gm), compiled(block_mask[-1]), scale, tuple(score_buffers),
                        tuple(mask_buffers))
    (q, k, v, out, lse, grad_out, grad_lse, fw_gm, _, block_mask, scale, _, score_buffers, mask_buffers) = args
    score_mod, mask_mod = compiled(fw_gm), compiled(block_mask[-1])
    score_buffers = tuple(score_buffers)
    diff = [i for i, b in enumerate(score_buffers) if jnp.issubdtype(b.dtype, jnp.inexact)]

    def forward(q, k, v, *float_buffers):
        buffers = list(score_buffers)
        for i, b in zip(diff, float_buffers):
            buffers[i] = b
        return _forward(q, k, v, score_mod, mask_mod, scale, tuple(buffers), tuple(mask_buffers))[:2]

    (o, l), pullback = jax.vjp(forward, q, k, v, *[score_buffers[i] for i in diff])
    ct_lse = jnp.zeros_like(l) if grad_lse is None else jnp.asarray(grad_lse).astype(l.dtype)
    grads = pullback((jnp.asarray(grad_out).astype(o.dtype), ct_lse))
    buffer_grads = [None] * len(score_buffers)
    for i, g in zip(diff, grads[3:]):
        buffer_grads[i] = g
    val = node.meta.get("val")
    if val is not None and len(val) > 3:
        buffer_grads = [g if want is not None else None for g, want in zip(buffer_grads, val[3])]
    return (grads[0], grads[1], grads[2], tuple(buffer_grads))
