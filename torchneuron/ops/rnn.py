"""Fused RNN cell lowerings: the `_thnn_fused_{lstm,gru}_cell` kernels and their backward.

PyTorch's RNN code (aten/src/ATen/native/RNN.cpp) uses these fused cell kernels for
PrivateUse1 tensors, as for CUDA; nn.LSTM, nn.GRU, nn.LSTMCell and nn.GRUCell run
through them. The `workspace` output carries what the backward reads, in the layout of
PyTorch's CUDA kernels (aten/src/ATen/native/cuda/RNN.cu):

* LSTM: (batch, 4*hidden), the gates after activation in order
  [sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)].
* GRU: (batch, 5*hidden), [r, z, n, hx, hn]: the reset and update gates after sigmoid,
  the new gate after tanh, the previous hidden state, and the hidden part of the new
  gate (hidden_gates + hidden_bias) before it is scaled by r.

Half-precision inputs compute in float32 and round once, as the CUDA kernels do
(accscalar_t). The composite `_thnn_fused_lstm_cell_backward` and the
`_thnn_differentiable_*_cell_backward` ops (double backward) decompose into ops
that have lowerings.
"""

import jax
import jax.numpy as jnp
import torch

from ._common import acc_type
from .registry import context, lowering, meta_impl

aten = torch.ops.aten


def _acc(x):
    return x.astype(acc_type(x.dtype))


def _gates(input_gates, hidden_gates, input_bias, hidden_bias):
    g = _acc(input_gates) + _acc(hidden_gates)
    if input_bias is not None:
        g = g + _acc(input_bias)
    if hidden_bias is not None:
        g = g + _acc(hidden_bias)
    return g


# ------------------------------------------------------------------ LSTM
@lowering(aten._thnn_fused_lstm_cell.default)
def thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """(hy, cy, workspace); workspace = the activated gates [i, f, g, o]."""
    ctx = context()
    i, f, g, o = jnp.split(_gates(input_gates, hidden_gates, input_bias, hidden_bias), 4, axis=1)
    i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
    cy = f * _acc(cx) + i * g
    hy = o * jnp.tanh(cy)
    workspace = jnp.concatenate([i, f, g, o], axis=1)
    return hy.astype(ctx.out_dtype(0)), cy.astype(ctx.out_dtype(1)), workspace.astype(ctx.out_dtype(2))


@lowering(aten._thnn_fused_lstm_cell_backward_impl.default)
def thnn_fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """(grad_gates, grad_cx, grad_bias): the CUDA kernel's formulas; undefined grad_hy or
    grad_cy count as zeros; all three outputs are undefined when both are."""
    if grad_hy is None and grad_cy is None:
        return None, None, None
    ctx = context()
    c = _acc(cy)
    i, f, g, o = jnp.split(_acc(workspace), 4, axis=1)
    zero = jnp.zeros(c.shape, c.dtype)
    go = zero if grad_hy is None else _acc(grad_hy)
    goc = zero if grad_cy is None else _acc(grad_cy)
    tc = jnp.tanh(c)
    gog = go * tc
    gc = go * o * (1 - tc * tc) + goc
    gig = gc * g * (1 - i) * i
    gfg = gc * _acc(cx) * (1 - f) * f
    gcg = gc * i * (1 - g * g)
    gog = gog * (1 - o) * o
    grad_gates = jnp.concatenate([gig, gfg, gcg, gog], axis=1)
    grad_cx = gc * f
    grad_bias = jnp.sum(grad_gates, axis=0).astype(ctx.out_dtype(2)) if has_bias else None
    return grad_gates.astype(ctx.out_dtype(0)), grad_cx.astype(ctx.out_dtype(1)), grad_bias


# ------------------------------------------------------------------ GRU
@lowering(aten._thnn_fused_gru_cell.default)
def thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """(hy, workspace); workspace = [r, z, n, hx, hn] (see the module docstring)."""
    ctx = context()
    ig, hg = _acc(input_gates), _acc(hidden_gates)
    if input_bias is not None:
        ig = ig + _acc(input_bias)
    if hidden_bias is not None:
        hg = hg + _acc(hidden_bias)
    ir, ii, in_ = jnp.split(ig, 3, axis=1)
    hr, hi, hn = jnp.split(hg, 3, axis=1)
    h = _acc(hx)
    r = jax.nn.sigmoid(ir + hr)
    z = jax.nn.sigmoid(ii + hi)
    n = jnp.tanh(in_ + hn * r)
    hy = n + z * (h - n)
    workspace = jnp.concatenate([r, z, n, h, hn], axis=1)
    return hy.astype(ctx.out_dtype(0)), workspace.astype(ctx.out_dtype(1))


@lowering(aten._thnn_fused_gru_cell_backward.default)
def thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias):
    """(grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias);
    the bias gradients are undefined unless has_bias."""
    ctx = context()
    r, z, n, h, hn = jnp.split(_acc(workspace), 5, axis=1)
    go = _acc(grad_hy)
    gz = go * (h - n) * (1 - z) * z
    ghx = go * z
    gn = go * (1 - z) * (1 - n * n)
    ghn = gn * r
    gr = gn * hn * (1 - r) * r
    gi = jnp.concatenate([gr, gz, gn], axis=1)
    gh = jnp.concatenate([gr, gz, ghn], axis=1)
    out = [gi.astype(ctx.out_dtype(0)), gh.astype(ctx.out_dtype(1)), ghx.astype(ctx.out_dtype(2))]
    if has_bias:
        out += [jnp.sum(gi, axis=0).astype(ctx.out_dtype(3)), jnp.sum(gh, axis=0).astype(ctx.out_dtype(4))]
    else:
        out += [None, None]
    return tuple(out)


# ------------------------------------------------------------------ meta kernels
# PyTorch has no meta kernels for the GRU cell ops (CUDA-only), and its LSTM cell meta
# kernel fails on an undefined bias (nn.LSTM(bias=False)); the executor needs them for
# output shapes and dtypes. These follow the CUDA kernels' checks and outputs.
def _check_sizes(input_gates, hidden_gates, input_bias, hidden_bias, factor, prev_hidden):
    """aten::checkSizes of RNN.cu (the bias checks only for defined biases)."""
    torch._check(input_gates.ndim == 2, lambda: f"{input_gates.ndim} != 2")
    torch._check(input_gates.shape == hidden_gates.shape,
                 lambda: f"{input_gates.shape} != {hidden_gates.shape}")
    gates_size = input_gates.size(1)
    for b in (input_bias, hidden_bias):
        if b is not None:
            torch._check(b.ndim == 1, lambda: f"{b.ndim} != 1")
            torch._check(b.numel() == gates_size, lambda: f"{b.numel()} != {gates_size}")
    torch._check(prev_hidden.numel() * factor == input_gates.numel(),
                 lambda: f"{input_gates.numel()} != {prev_hidden.numel()} * {factor}")
    torch._check(all(x.device == input_gates.device for x in
                     (hidden_gates, input_bias, hidden_bias, prev_hidden) if x is not None),
                 lambda: "expected all inputs to be same device")


def _lstm_cell_meta(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    _check_sizes(input_gates, hidden_gates, input_bias, hidden_bias, 4, cx)
    workspace = torch.empty_like(input_gates, memory_format=torch.contiguous_format)
    hy = torch.empty_like(cx, memory_format=torch.contiguous_format)
    cy = torch.empty_like(cx, memory_format=torch.contiguous_format)
    return hy, cy, workspace


def _gru_cell_meta(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    _check_sizes(input_gates, hidden_gates, input_bias, hidden_bias, 3, hx)
    hy = torch.empty_like(hx, memory_format=torch.contiguous_format)
    workspace = hx.new_empty((hx.size(0), hx.size(1) * 5))
    return hy, workspace


def _gru_cell_backward_meta(grad_hy, workspace, has_bias):
    torch._check(grad_hy.ndim == 2 and workspace.ndim == 2 and workspace.size(0) == grad_hy.size(0)
                 and workspace.size(1) == 5 * grad_hy.size(1),
                 lambda: "_thnn_fused_gru_cell_backward: workspace must be (batch, 5 * hidden)")
    b, hsz = grad_hy.shape
    gi = grad_hy.new_empty((b, 3 * hsz))
    gh = grad_hy.new_empty((b, 3 * hsz))
    ghx = torch.empty_like(grad_hy, memory_format=torch.contiguous_format)
    gbi = grad_hy.new_empty((3 * hsz,)) if has_bias else None
    gbh = grad_hy.new_empty((3 * hsz,)) if has_bias else None
    return gi, gh, ghx, gbi, gbh


meta_impl("_thnn_fused_lstm_cell", _lstm_cell_meta)  # replaces PyTorch's LSTM cell meta
meta_impl("_thnn_fused_gru_cell", _gru_cell_meta)
meta_impl("_thnn_fused_gru_cell_backward", _gru_cell_backward_meta)
