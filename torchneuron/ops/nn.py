"""Neural-network lowerings: softmax, losses, normalization, convolution, pooling,
embedding, upsampling and fused scaled-dot-product attention, forward and backward.

Half-precision inputs compute in float32 (`acc_type`) and round once, as ATen's CPU
kernels do. Backward ops whose forward is a linear map of the input (convolution,
average and adaptive pooling, upsampling) are the JAX transpose (`jax.vjp`) of the
forward lowering; the others follow ATen's closed-form CPU formulas. Backward ops
take ATen's `output_mask`: a masked-out gradient is returned as None (an undefined
tensor), as on CPU.
"""

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..kernels import attention
from ._common import acc_type
from .registry import context, lowering

aten = torch.ops.aten

_HIGHEST = lax.Precision.HIGHEST
_NONE, _MEAN, _SUM = 0, 1, 2  # at::Reduction


def _acc(x):
    return x.astype(acc_type(x.dtype))


_TYPE_NAMES = {np.dtype(np.bool_): "Bool", np.dtype(np.uint8): "Byte", np.dtype(np.int8): "Char",
               np.dtype(np.int16): "Short", np.dtype(np.int32): "Int", np.dtype(np.int64): "Long"}


_INTS = ("Byte", "Char", "Short", "Int", "Long")


def _require_float(x, kernel: str, allowed=()):
    """CPU's dtype dispatch error for a kernel without support for x's integer or bool
    dtype (`allowed` names the supported ones, ATen-style: "Byte", "Long", ...):
    NotImplementedError('"<kernel>" not implemented for \'Long\'')."""
    name = _TYPE_NAMES.get(np.dtype(x.dtype))
    if name is not None and name not in allowed:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{name}\'')


def _reduce(loss, reduction: int):
    """ATen's apply_loss_reduction: none, mean or sum of an elementwise loss."""
    if reduction == _MEAN:
        return jnp.mean(loss)
    if reduction == _SUM:
        return jnp.sum(loss)
    return loss


def _grad_scale(grad_output, numel: int, reduction: int):
    """The per-element factor of a loss gradient: grad_output (broadcast for none),
    divided by the element count for mean."""
    g = _acc(grad_output)
    return g / numel if reduction == _MEAN else g


# ------------------------------------------------------------------ softmax
def _softmax_dim(x, dim):
    """(x viewed with at least one dim, normalized dim): 0-dim tensors softmax as (1,)."""
    return (x.reshape(1), 0) if x.ndim == 0 else (x, dim % x.ndim)


@lowering(aten._softmax.default)
def softmax(self, dim, half_to_float):
    """aten::_softmax: exp(x - max) / sum along `dim`; rows of -inf give NaN like CPU.
    half_to_float (float32 output for a half input) works as on CUDA; CPU rejects it."""
    _require_float(self, "softmax_lastdim_kernel_impl")
    x, d = _softmax_dim(_acc(self), dim)
    e = jnp.exp(x - jnp.max(x, axis=d, keepdims=True))
    return (e / jnp.sum(e, axis=d, keepdims=True)).reshape(self.shape)


@lowering(aten._log_softmax.default)
def log_softmax(self, dim, half_to_float):
    """aten::_log_softmax: x - max - log(sum(exp(x - max))) along `dim`."""
    _require_float(self, "log_softmax_lastdim_kernel_impl")
    x, d = _softmax_dim(_acc(self), dim)
    shifted = x - jnp.max(x, axis=d, keepdims=True)
    return (shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=d, keepdims=True))).reshape(self.shape)


@lowering(aten._safe_softmax.default)
def safe_softmax(self, dim, dtype=None):
    """aten::_safe_softmax (SDPA's math path): softmax, but rows that are entirely
    -inf give zeros instead of NaN. `dtype` casts the input first."""
    x = self if dtype is None else self.astype(context().out_dtype())
    y = softmax(x, dim, False)
    if y.ndim == 0:
        return y
    masked = jnp.all(x == -jnp.inf, axis=dim % x.ndim, keepdims=True)
    return jnp.where(masked, jnp.zeros((), y.dtype), y)


@lowering(aten._softmax_backward_data.default)
def softmax_backward_data(grad_output, output, dim, input_dtype):
    """aten::_softmax_backward_data: y * (g - sum(g * y)) along `dim`."""
    g, y = _acc(grad_output), _acc(output)
    if y.ndim == 0:
        return jnp.zeros((), g.dtype)
    return y * (g - jnp.sum(g * y, axis=dim % y.ndim, keepdims=True))


@lowering(aten._log_softmax_backward_data.default)
def log_softmax_backward_data(grad_output, output, dim, input_dtype):
    """aten::_log_softmax_backward_data: g - exp(y) * sum(g) along `dim`."""
    g, y = _acc(grad_output), _acc(output)
    if y.ndim == 0:
        return jnp.zeros((), g.dtype)
    return g - jnp.exp(y) * jnp.sum(g, axis=dim % y.ndim, keepdims=True)


# ------------------------------------------------------------------ nll loss
def _nll_parts(self, target, weight, ignore_index):
    """(safe target, per-sample weight (0 where ignored), class dim) of an NLL loss;
    reports CPU's IndexError for targets outside [0, C) that are not ignore_index."""
    cdim = 1 if self.ndim >= 2 else 0
    n_class = self.shape[cdim]
    t = target.astype(jnp.int64)
    ignored = t == ignore_index
    bad = ~ignored & ((t < 0) | (t >= n_class))
    flat_bad = bad.reshape(-1)
    first = t.reshape(-1)[jnp.argmax(flat_bad)] if flat_bad.size else jnp.int64(0)
    context().check(~jnp.any(bad), IndexError, "Target {} is out of bounds.", value=first)
    safe = jnp.where(ignored | bad, 0, t)
    w = jnp.ones((), acc_type(self.dtype)) if weight is None else _acc(weight)[safe]
    return safe, jnp.where(ignored, jnp.zeros((), acc_type(self.dtype)), w), cdim


@lowering(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
def nll_loss_forward(self, target, weight, reduction, ignore_index):
    """aten::nll_loss_forward / nll_loss2d_forward: (output, total_weight).
    self: (N, C, *) or (C,) log-probabilities; target: (N, *) or () class indices;
    weight: (C,) or None. Mean divides by the total weight of non-ignored targets (NaN
    when it is 0, as on CPU); total_weight is 0 for reduction='none'."""
    _require_float(self, "nll_loss_out_frame")
    safe, w, cdim = _nll_parts(self, target, weight, ignore_index)
    picked = jnp.take_along_axis(_acc(self), jnp.expand_dims(safe, cdim), axis=cdim).squeeze(cdim)
    losses = -picked * w
    total = jnp.sum(jnp.broadcast_to(w, losses.shape))
    if reduction == _NONE:
        return losses, jnp.zeros((), total.dtype)
    if reduction == _SUM:
        return jnp.sum(losses), total
    return jnp.sum(losses) / total, total


@lowering(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)
def nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    """aten::nll_loss_backward / nll_loss2d_backward: -w[t] * grad at the target class
    of each sample, 0 elsewhere and at ignored samples; mean divides by total_weight.
    Like CPU, ignored samples are skipped (exactly 0) even when total_weight is 0 and the
    scaled gradient is NaN; a non-ignored sample of weight 0 then gets 0 * inf = NaN."""
    safe, w, cdim = _nll_parts(self, target, weight, ignore_index)
    g = _acc(grad_output)
    if reduction == _MEAN:
        g = g / _acc(total_weight)
    ignored = jnp.broadcast_to(target.astype(jnp.int64) == ignore_index, safe.shape)
    coef = jnp.where(ignored, jnp.zeros((), g.dtype), -w * g)
    onehot = jnp.expand_dims(safe, cdim) == lax.broadcasted_iota(jnp.int64, self.shape, cdim)
    return jnp.where(onehot, jnp.expand_dims(jnp.broadcast_to(coef, safe.shape), cdim), 0)


# ------------------------------------------------------------------ pointwise losses
@lowering(aten.mse_loss.default)
def mse_loss(self, target, reduction=_MEAN):
    """aten::mse_loss: (x - t)^2 with reduction."""
    _require_float(self, "mse_cpu")
    d = _acc(self) - _acc(target)
    return _reduce(d * d, reduction)


@lowering(aten.mse_loss_backward.default)
def mse_loss_backward(grad_output, self, target, reduction):
    """aten::mse_loss_backward: 2 (x - t) g, divided by numel for mean."""
    d = _acc(self) - _acc(target)
    norm = 2.0 / d.size if reduction == _MEAN and d.size else 2.0
    return norm * d * _acc(grad_output)


@lowering(aten.l1_loss.default)
def l1_loss(self, target, reduction=_MEAN):
    """aten::l1_loss: |x - t| with reduction."""
    return _reduce(jnp.abs(_acc(self) - _acc(target)), reduction)


_BCE_EPS = 1e-12


def _check_probabilities(x):
    context().check(jnp.all((x >= 0) & (x <= 1)), RuntimeError, "all elements of input should be between 0 and 1")


@lowering(aten.binary_cross_entropy.default)
def binary_cross_entropy(self, target, weight=None, reduction=_MEAN):
    """aten::binary_cross_entropy: -w (t log x + (1 - t) log(1 - x)), each log clamped
    at -100 like CPU; inputs outside [0, 1] raise RuntimeError at the next sync."""
    x, t = _acc(self), _acc(target)
    _check_probabilities(x)
    loss = -(t * jnp.maximum(jnp.log(x), -100.0) + (1 - t) * jnp.maximum(jnp.log1p(-x), -100.0))
    if weight is not None:
        loss = loss * _acc(weight)
    return _reduce(loss, reduction)


@lowering(aten.binary_cross_entropy_backward.default)
def binary_cross_entropy_backward(grad_output, self, target, weight=None, reduction=_MEAN):
    """aten::binary_cross_entropy_backward: g w (x - t) / max(x (1 - x), 1e-12)."""
    x, t = _acc(self), _acc(target)
    _check_probabilities(x)
    grad = _grad_scale(grad_output, x.size, reduction) * (x - t) / jnp.maximum((1 - x) * x, _BCE_EPS)
    if weight is not None:
        grad = grad * _acc(weight)
    return grad


@lowering(aten.binary_cross_entropy_with_logits.default)
def binary_cross_entropy_with_logits(self, target, weight=None, pos_weight=None, reduction=_MEAN):
    """aten::binary_cross_entropy_with_logits: the numerically stable form
    (1 - t) x + (1 + (pw - 1) t) softplus(-x), times weight."""
    x, t = _acc(self), _acc(target)
    log_sig_neg = jnp.logaddexp(0.0, -x)  # softplus(-x) = -log(sigmoid(x))
    if pos_weight is not None:
        loss = (1 - t) * x + (1 + (_acc(pos_weight) - 1) * t) * log_sig_neg
    else:
        loss = (1 - t) * x + log_sig_neg
    if weight is not None:
        loss = loss * _acc(weight)
    return _reduce(loss, reduction)


@lowering(aten.smooth_l1_loss.default, static=("beta",))
def smooth_l1_loss(self, target, reduction=_MEAN, beta=1.0):
    """aten::smooth_l1_loss: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta
    (plain L1 for beta == 0)."""
    d = jnp.abs(_acc(self) - _acc(target))
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(jnp.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


@lowering(aten.smooth_l1_loss_backward.default, static=("beta",))
def smooth_l1_loss_backward(grad_output, self, target, reduction, beta):
    """aten::smooth_l1_loss_backward: -g / g / d g / beta for d <= -beta / d >= beta /
    between (CPU's order of cases, so beta == 0 and d == 0 gives -g)."""
    d = _acc(self) - _acc(target)
    g = _grad_scale(grad_output, d.size, reduction)
    inner = d * g / beta if beta != 0 else jnp.zeros_like(d)
    return jnp.where(d <= -beta, -g, jnp.where(d >= beta, g, inner))


@lowering(aten.huber_loss.default, static=("delta",))
def huber_loss(self, target, reduction=_MEAN, delta=1.0):
    """aten::huber_loss: 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta)."""
    d = jnp.abs(_acc(self) - _acc(target))
    return _reduce(jnp.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


@lowering(aten.huber_loss_backward.default, static=("delta",))
def huber_loss_backward(grad_output, self, target, reduction, delta):
    """aten::huber_loss_backward: -delta g / delta g / d g by CPU's case order."""
    d = _acc(self) - _acc(target)
    g = _grad_scale(grad_output, d.size, reduction)
    return jnp.where(d <= -delta, -delta * g, jnp.where(d >= delta, delta * g, d * g))


# ------------------------------------------------------------------ normalization
def _normalize(x, axes, eps):
    """(x_hat, mean, rstd) over `axes` with the biased variance, in x's dtype."""
    if x.size == 0:
        shape = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
        return x, jnp.zeros(shape, x.dtype), jnp.full(shape, jnp.nan, x.dtype)
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    return (x - mean) * rstd, mean, rstd


def _affine_backward(g, x_hat, rstd, w, axes):
    """Input gradient of y = x_hat * w with x_hat normalized over `axes`:
    rstd * (dxhat - mean(dxhat) - x_hat * mean(dxhat * x_hat))."""
    dxhat = g * w
    return rstd * (dxhat - jnp.mean(dxhat, axis=axes, keepdims=True)
                   - x_hat * jnp.mean(dxhat * x_hat, axis=axes, keepdims=True))


@lowering(aten.native_layer_norm.default)
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    """aten::native_layer_norm: (out, mean, rstd) normalizing the trailing
    `normalized_shape` dims; mean and rstd keep those dims as size 1."""
    _require_float(input, "LayerNormKernelImpl")
    k = len(normalized_shape)
    axes = tuple(range(input.ndim - k, input.ndim))
    x_hat, mean, rstd = _normalize(_acc(input), axes, eps)
    out = x_hat
    if weight is not None:
        out = out * _acc(weight)
    if bias is not None:
        out = out + _acc(bias)
    return out, mean, rstd


@lowering(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    """aten::native_layer_norm_backward: (grad_input, grad_weight, grad_bias)."""
    k = len(normalized_shape)
    axes = tuple(range(input.ndim - k, input.ndim))
    lead = tuple(range(input.ndim - k))
    g = _acc(grad_out)
    x_hat = (_acc(input) - _acc(mean)) * _acc(rstd)
    w = _acc(weight) if weight is not None else jnp.ones((), g.dtype)
    gi = _affine_backward(g, x_hat, _acc(rstd), w, axes) if output_mask[0] else None
    gw = jnp.sum(g * x_hat, axis=lead) if output_mask[1] and weight is not None else None
    gb = jnp.sum(g, axis=lead) if output_mask[2] and bias is not None else None
    return gi, gw, gb


def _grouped(x, N, C, group):
    """(N, C, *) -> (N, group, C // group, rest) so statistics reduce over axes (2, 3)."""
    return x.reshape(N, group, C // group, -1)


def _per_channel(p, group):
    return _acc(p).reshape(1, group, -1, 1)


@lowering(aten.native_group_norm.default)
def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    """aten::native_group_norm: (out, mean (N, group), rstd (N, group)) for input
    (N, C, *) normalized over each group of C // group channels and all spatial dims."""
    _require_float(input, "GroupNormKernelImpl")
    x = _grouped(_acc(input), N, C, group)
    x_hat, mean, rstd = _normalize(x, (2, 3), eps)
    out = x_hat
    if weight is not None:
        out = out * _per_channel(weight, group)
    if bias is not None:
        out = out + _per_channel(bias, group)
    return out.reshape(input.shape), mean.reshape(N, group), rstd.reshape(N, group)


@lowering(aten.native_group_norm_backward.default)
def native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask):
    """aten::native_group_norm_backward: (grad_input, grad_weight (C,), grad_bias (C,))."""
    g = _grouped(_acc(grad_out), N, C, group)
    r = _acc(rstd).reshape(N, group, 1, 1)
    x_hat = (_grouped(_acc(input), N, C, group) - _acc(mean).reshape(N, group, 1, 1)) * r
    w = _per_channel(weight, group) if weight is not None else jnp.ones((), g.dtype)
    gi = _affine_backward(g, x_hat, r, w, (2, 3)).reshape(input.shape) if output_mask[0] else None
    gw = jnp.sum(g * x_hat, axis=(0, 3)).reshape(C) if output_mask[1] and weight is not None else None
    gb = jnp.sum(g, axis=(0, 3)).reshape(C) if output_mask[2] else None
    return gi, gw, gb


def _channel_view(p, ndim):
    """A per-channel (C,) vector shaped to broadcast against (N, C, *)."""
    return _acc(p).reshape((1, -1) + (1,) * (ndim - 2))


def _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """(out, save_mean, save_invstd, {running stat updates}) of batch normalization
    over all dims but 1. In training the running statistics move by `momentum` toward
    the batch mean and the unbiased batch variance; in eval they normalize."""
    _require_float(input, "batch_norm")
    x = _acc(input)
    axes = tuple(i for i in range(x.ndim) if i != 1)
    ctx = context()
    updates = {}
    if training:
        x_hat, mean, invstd = _normalize(x, axes, eps)
        save_mean, save_invstd = mean.reshape(-1), invstd.reshape(-1)
        if running_mean is not None:
            n = x.size // x.shape[1]
            var = jnp.mean(jnp.square(x - mean), axis=axes)
            unbiased = var * n / (n - 1) if n > 1 else jnp.full_like(var, jnp.nan)
            updates["running_mean"] = (1 - momentum) * _acc(running_mean) + momentum * save_mean
            updates["running_var"] = (1 - momentum) * _acc(running_var) + momentum * unbiased
    else:
        if running_mean is not None:  # written back unchanged: the kernel declares the writes
            updates = {"running_mean": running_mean, "running_var": running_var}
        invstd = lax.rsqrt(_acc(running_var) + eps)
        x_hat = (x - _channel_view(running_mean, x.ndim)) * _channel_view(invstd, x.ndim)
        save_mean = jnp.zeros(ctx.out(1).shape, x.dtype)
        save_invstd = jnp.zeros(ctx.out(2).shape, x.dtype)
    out = x_hat
    if weight is not None:
        out = out * _channel_view(weight, x.ndim)
    if bias is not None:
        out = out + _channel_view(bias, x.ndim)
    return out, save_mean, save_invstd, updates


@lowering(aten.native_batch_norm.default, writes=("running_mean", "running_var"))
def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """aten::native_batch_norm: (out, save_mean (C,), save_invstd (C,)); in training
    updates running_mean/running_var in place (ATen's schema does not declare it, CPU
    does it). In eval save_mean/save_invstd are empty."""
    out, m, s, updates = _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
    return (out, m, s), updates


@lowering(aten._native_batch_norm_legit.default, mutates=True)
def native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """aten::_native_batch_norm_legit: native_batch_norm with the mutation declared."""
    out, m, s, updates = _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
    return (out, m, s), updates


@lowering(aten._native_batch_norm_legit_functional.default)
def native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """aten::_native_batch_norm_legit_functional (functionalized graphs): (out,
    save_mean, save_invstd, new running_mean, new running_var)."""
    out, m, s, updates = _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
    return out, m, s, updates["running_mean"], updates["running_var"]


@lowering(aten._native_batch_norm_legit.no_stats)
def native_batch_norm_legit_no_stats(input, weight, bias, training, momentum, eps):
    """aten::_native_batch_norm_legit.no_stats: batch statistics, no running stats."""
    return _batch_norm(input, weight, bias, None, None, True, momentum, eps)[:3]


@lowering(aten._native_batch_norm_legit_no_training.default)
def native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, momentum, eps):
    """aten::_native_batch_norm_legit_no_training: eval-mode batch norm."""
    return _batch_norm(input, weight, bias, running_mean, running_var, False, momentum, eps)[:3]


@lowering(aten._batch_norm_with_update.default, mutates=True)
def batch_norm_with_update(input, weight, bias, running_mean, running_var, momentum, eps):
    """aten::_batch_norm_with_update: training batch norm; (out, save_mean,
    save_invstd, reserve (empty))."""
    out, m, s, updates = _batch_norm(input, weight, bias, running_mean, running_var, True, momentum, eps)
    return (out, m, s, jnp.zeros(context().out(3).shape, jnp.uint8)), updates


@lowering(aten._batch_norm_no_update.default)
def batch_norm_no_update(input, weight, bias, running_mean, running_var, momentum, eps):
    """aten::_batch_norm_no_update: eval batch norm (batch statistics without running
    ones); (out, save_mean, save_invstd, reserve (empty))."""
    training = running_mean is None
    out, m, s, _ = _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
    return out, m, s, jnp.zeros(context().out(3).shape, jnp.uint8)


def _batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                         output_mask):
    x, g = _acc(input), _acc(grad_out)
    nd = x.ndim
    axes = tuple(i for i in range(nd) if i != 1)
    if train:
        mean, invstd = _acc(save_mean), _acc(save_invstd)
    else:
        mean, invstd = _acc(running_mean), lax.rsqrt(_acc(running_var) + eps)
    w = _acc(weight) if weight is not None else jnp.ones_like(invstd)
    centered = x - _channel_view(mean, nd)
    sum_g = jnp.sum(g, axis=axes)
    dotp = jnp.sum(centered * g, axis=axes)
    gi = None
    if output_mask[0]:
        if train:
            n = x.size // x.shape[1]
            proj = _channel_view(dotp * invstd * invstd / n, nd)
            gi = (g - centered * proj - _channel_view(sum_g / n, nd)) * _channel_view(invstd * w, nd)
        else:
            gi = g * _channel_view(invstd * w, nd)
    gw = dotp * invstd if output_mask[1] else None
    gb = sum_g if output_mask[2] else None
    return gi, gw, gb


@lowering(aten.native_batch_norm_backward.default)
def native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train,
                               eps, output_mask):
    """aten::native_batch_norm_backward: (grad_input, grad_weight, grad_bias) with
    ATen's CPU formula (batch statistics in training, running ones in eval)."""
    return _batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train,
                                eps, output_mask)


@lowering(aten.batch_norm_backward.default)
def batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps,
                        output_mask, reserve):
    """aten::batch_norm_backward (the gradient of _batch_norm_with_update/no_update)."""
    return _batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var, update,
                                eps, output_mask)


# ------------------------------------------------------------------ convolution
_SPATIAL = "DHW"


def _conv_numbers(nsp: int):
    sp = _SPATIAL[-nsp:]
    return ("NC" + sp, "OI" + sp, "NC" + sp)


def _conv(x, w, stride, padding, dilation, transposed, output_padding, groups):
    """ATen's convolution (no bias) of x (N, C_in, *) by w in lax.conv terms. A
    transposed convolution is the forward convolution of the input dilated by
    `stride`, with the kernel flipped and its in/out channels swapped per group."""
    nsp = x.ndim - 2
    if not transposed:
        return lax.conv_general_dilated(
            x, w, window_strides=stride, padding=[(p, p) for p in padding], rhs_dilation=dilation,
            dimension_numbers=_conv_numbers(nsp), feature_group_count=groups, precision=_HIGHEST)
    c_in, c_out_g = w.shape[0], w.shape[1]
    k = w.shape[2:]
    w = w.reshape((groups, c_in // groups, c_out_g) + k)
    w = jnp.swapaxes(w, 1, 2).reshape((groups * c_out_g, c_in // groups) + k)
    w = jnp.flip(w, axis=tuple(range(2, 2 + nsp)))
    pads = [(d * (kk - 1) - p, d * (kk - 1) - p + op) for kk, p, d, op in zip(k, padding, dilation, output_padding)]
    return lax.conv_general_dilated(
        x, w, window_strides=(1,) * nsp, padding=pads, lhs_dilation=stride, rhs_dilation=dilation,
        dimension_numbers=_conv_numbers(nsp), feature_group_count=groups, precision=_HIGHEST)


def _scalar_name(dtype) -> str:
    from .linalg import _scalar

    return _scalar(dtype)


@lowering(aten.convolution.default)
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """aten::convolution: 1-3 spatial dims, stride, padding, dilation, groups and
    transposed (with output_padding). input (N, C_in, *), weight (C_out, C_in/g, *k)
    or (C_in, C_out/g, *k) transposed; bias (C_out,). Integer types convolve exactly
    (CPU's slow path supports them); bool raises NotImplementedError."""
    if jnp.dtype(input.dtype) != jnp.dtype(weight.dtype):
        # CPU checks this before anything else (lax.conv would raise a TypeError).
        raise RuntimeError(f"expected scalar type {_scalar_name(input.dtype)} but found "
                           f"{_scalar_name(weight.dtype)}")
    _require_float(input, "slow_conv2d_cpu", _INTS)
    y = _conv(_acc(input), _acc(weight), stride, padding, dilation, transposed, output_padding, groups)
    if bias is not None:
        y = y + _channel_view(bias, y.ndim)
    return y


@lowering(aten.convolution_backward.default)
def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    """aten::convolution_backward: (grad_input, grad_weight, grad_bias) as the JAX
    transpose of the forward convolution; grad_bias sums grad_output over all but dim 1."""
    g = _acc(grad_output)

    def forward(x, w):
        return _conv(x, w, stride, padding, dilation, transposed, output_padding, groups)

    _, vjp = jax.vjp(forward, _acc(input), _acc(weight))
    gi, gw = vjp(g)
    gb = jnp.sum(g, axis=tuple(i for i in range(g.ndim) if i != 1)) if output_mask[2] else None
    return (gi if output_mask[0] else None), (gw if output_mask[1] else None), gb


# ------------------------------------------------------------------ pooling
def _window_geometry(out_sizes, kernel, stride, padding, dilation):
    """Per spatial dim and kernel offset j: (padded start, input coordinates (O,)).
    Coordinates of output o are o * stride - padding + j * dilation."""
    return [[(j * d, np.arange(n_out) * s - p + j * d) for j in range(k)]
            for n_out, k, s, p, d in zip(out_sizes, kernel, stride, padding, dilation)]


def _pad_for_windows(x, in_sizes, out_sizes, kernel, stride, padding, dilation, value):
    nsp = len(in_sizes)
    pads = [(0, 0)] * (x.ndim - nsp)
    for n_in, n_out, k, s, p, d in zip(in_sizes, out_sizes, kernel, stride, padding, dilation):
        last = (n_out - 1) * s - p + (k - 1) * d
        pads.append((p, max(0, last + 1 - n_in)))
    return jnp.pad(x, pads, constant_values=value)


def _window_slice(xp, starts, out_sizes, stride):
    nsp = len(starts)
    lead = xp.shape[:-nsp]
    begin = (0,) * len(lead) + tuple(starts)
    end = tuple(lead) + tuple(b + (o - 1) * s + 1 for b, o, s in zip(starts, out_sizes, stride))
    return lax.slice(xp, begin, end, (1,) * len(lead) + tuple(stride))


def _expand_args(nsp, kernel_size, stride, padding, dilation=None):
    """ATen's pooling argument rules: one value means all dims; empty stride = kernel."""
    def full(v):
        v = list(v)
        return v * nsp if len(v) == 1 else v

    kernel = full(kernel_size)
    stride = full(stride) if len(stride) else kernel
    return kernel, stride, full(padding), full(dilation) if dilation is not None else [1] * nsp


def _max_pool(self, nsp, kernel_size, stride, padding, dilation):
    """(values, flat indices into the input plane) of max pooling over the trailing
    `nsp` dims, replaying CPU's scan: a window's first valid element seeds it, a later
    one wins when greater or NaN (so ties keep the first, NaNs the last)."""
    _require_float(self, "max_pool2d" if nsp == 2 else "max_pool3d", _INTS)
    kernel, stride, padding, dilation = _expand_args(nsp, kernel_size, stride, padding, dilation)
    in_sizes = self.shape[-nsp:]
    out_sizes = context().out(0).shape[-nsp:]
    x = _acc(self) if jnp.issubdtype(self.dtype, jnp.floating) else self
    fill = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
    xp = _pad_for_windows(x, in_sizes, out_sizes, kernel, stride, padding, dilation, fill)
    geometry = _window_geometry(out_sizes, kernel, stride, padding, dilation)
    plane_strides = [int(np.prod(in_sizes[i + 1:])) for i in range(nsp)]

    def grid(per_dim):
        """Broadcasts per-dim (O_i,) arrays into a flat index grid of shape out_sizes."""
        total = 0
        for i, a in enumerate(per_dim):
            shape = [1] * nsp
            shape[i] = -1
            total = total + a.reshape(shape)
        return total

    # The first valid coordinate of each window, per dim (CPU: `while (ih0 < 0) ih0 += d`).
    first = [np.where(coords[0][1] < 0, coords[0][1] + ((-coords[0][1] + d - 1) // d) * d, coords[0][1])
             for coords, d in zip(geometry, dilation)]
    best_idx = jnp.asarray(grid([f * st for f, st in zip(first, plane_strides)]), jnp.int64)
    best_idx = jnp.broadcast_to(best_idx, xp.shape[:-nsp] + tuple(out_sizes))
    best = jnp.full(best_idx.shape, fill, x.dtype)
    for offsets in np.ndindex(*kernel):
        parts = [geometry[i][j] for i, j in enumerate(offsets)]
        val = _window_slice(xp, [p[0] for p in parts], out_sizes, stride)
        valid = np.ones(out_sizes, bool)
        for i, (_, c) in enumerate(parts):
            shape = [1] * nsp
            shape[i] = -1
            valid = valid & ((c >= 0) & (c < in_sizes[i])).reshape(shape)
        upd = val > best
        if jnp.issubdtype(x.dtype, jnp.floating):
            upd = upd | jnp.isnan(val)
        upd = upd & valid
        idx = grid([c * st for (_, c), st in zip(parts, plane_strides)])
        best = jnp.where(upd, val, best)
        best_idx = jnp.where(upd, jnp.asarray(idx, jnp.int64), best_idx)
    return best, best_idx


def _max_pool_backward(grad_output, self, indices, nsp):
    """Scatter-adds grad_output into the input plane at the pooling indices."""
    lead = self.shape[:-nsp]
    plane = int(np.prod(self.shape[-nsp:]))
    rows = int(np.prod(lead))
    g = _acc(grad_output).reshape(rows, -1)
    idx = indices.reshape(rows, -1)
    out = jnp.zeros((rows, plane), g.dtype).at[jnp.arange(rows)[:, None], idx].add(g)
    return out.reshape(self.shape)


@lowering(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    """aten::max_pool2d_with_indices: (values, int64 indices into H*W) of (N, C, H, W)
    or (C, H, W); output sizes (ceil_mode included) come from ATen's meta kernel."""
    return _max_pool(self, 2, kernel_size, stride, padding, dilation)


@lowering(aten.max_pool3d_with_indices.default)
def max_pool3d_with_indices(self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    """aten::max_pool3d_with_indices: as max_pool2d over (D, H, W)."""
    return _max_pool(self, 3, kernel_size, stride, padding, dilation)


@lowering(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """aten::max_pool2d_with_indices_backward: grad routed to the argmax positions."""
    return _max_pool_backward(grad_output, self, indices, 2)


@lowering(aten.max_pool3d_with_indices_backward.default)
def max_pool3d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """aten::max_pool3d_with_indices_backward."""
    return _max_pool_backward(grad_output, self, indices, 3)


def _avg_divisor(in_sizes, out_sizes, kernel, stride, padding, count_include_pad):
    """CPU's per-output divisor: the window clipped to the padded input (count_include_pad)
    or to the input itself; a separable product over dims."""
    div = np.ones((), np.int64)
    for n_in, n_out, k, s, p in zip(in_sizes, out_sizes, kernel, stride, padding):
        start = np.arange(n_out) * s - p
        end = np.minimum(start + k, n_in + p)
        size = end - start
        if not count_include_pad:
            size = np.minimum(end, n_in) - np.maximum(start, 0)
        div = div[..., None] * size
    return div


def _avg_pool(self, nsp, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out_sizes):
    kernel, stride, padding, _ = _expand_args(nsp, kernel_size, stride, padding)
    in_sizes = self.shape[-nsp:]
    x = _acc(self)
    xp = _pad_for_windows(x, in_sizes, out_sizes, kernel, stride, padding, [1] * nsp, 0)
    lead = xp.ndim - nsp
    window = (1,) * lead + tuple(kernel)
    strides = (1,) * lead + tuple(stride)
    # A concrete zero init makes this XLA's differentiable windowed sum.
    sums = lax.reduce_window(xp, np.zeros((), x.dtype), lax.add, window, strides, "VALID")
    sums = lax.slice(sums, (0,) * sums.ndim, sums.shape[:lead] + tuple(out_sizes))
    if divisor_override:
        div = np.asarray(divisor_override)
    else:
        div = np.maximum(_avg_divisor(in_sizes, out_sizes, kernel, stride, padding, count_include_pad), 1)
    if not jnp.issubdtype(x.dtype, jnp.floating):  # CPU divides integer sums truncating
        return lax.div(sums, jnp.broadcast_to(jnp.asarray(div, x.dtype), sums.shape))
    return sums / jnp.asarray(div, x.dtype)


@lowering(aten.avg_pool2d.default, static=("divisor_override",))
def avg_pool2d(self, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """aten::avg_pool2d of (N, C, H, W) or (C, H, W), CPU's divisor rules."""
    return _avg_pool(self, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                     context().out().shape[-2:])


@lowering(aten.avg_pool3d.default, static=("divisor_override",))
def avg_pool3d(self, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """aten::avg_pool3d of (N, C, D, H, W) or (C, D, H, W)."""
    return _avg_pool(self, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                     context().out().shape[-3:])


def _transpose_of(forward, self, grad_output):
    """The input gradient of a linear map `forward` of `self`."""
    _, vjp = jax.vjp(forward, _acc(self))
    return vjp(_acc(grad_output))[0]


@lowering(aten.avg_pool2d_backward.default, static=("divisor_override",))
def avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    """aten::avg_pool2d_backward: the transpose of avg_pool2d."""
    out_sizes = grad_output.shape[-2:]
    return _transpose_of(lambda x: _avg_pool(x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                             divisor_override, out_sizes), self, grad_output)


@lowering(aten.avg_pool3d_backward.default, static=("divisor_override",))
def avg_pool3d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    """aten::avg_pool3d_backward: the transpose of avg_pool3d."""
    out_sizes = grad_output.shape[-3:]
    return _transpose_of(lambda x: _avg_pool(x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                             divisor_override, out_sizes), self, grad_output)


def _adaptive_avg(x, out_sizes):
    """Adaptive average pooling of the trailing len(out_sizes) dims: window o spans
    [floor(o * I / O), ceil((o + 1) * I / O)), summed by a 0/1 matrix per dim."""
    nsp = len(out_sizes)
    y = x
    for i, n_out in enumerate(out_sizes):
        axis = x.ndim - nsp + i
        n_in = x.shape[axis]
        o = np.arange(n_out)
        start = (o * n_in) // n_out
        end = -((-(o + 1) * n_in) // n_out)
        pos = np.arange(n_in)
        m = ((pos[None, :] >= start[:, None]) & (pos[None, :] < end[:, None])).astype(np.float64)
        m = m / (end - start)[:, None]
        y = jnp.moveaxis(jnp.tensordot(y, jnp.asarray(m, x.dtype), axes=[[axis], [1]], precision=_HIGHEST), -1, axis)
    return y


def _adaptive_lowerings(op, backward_op, nsp):
    def forward(self, output_size):
        """aten::_adaptive_avg_pool{2,3}d of (N, C, *) or (C, *) to `output_size`."""
        _require_float(self, f"adaptive_avg_pool{nsp}d")
        return _adaptive_avg(_acc(self), context().out().shape[-nsp:])

    def backward(grad_output, self):
        """aten::_adaptive_avg_pool{2,3}d_backward: the transpose of the forward."""
        out_sizes = grad_output.shape[-nsp:]
        return _transpose_of(lambda x: _adaptive_avg(x, out_sizes), self, grad_output)

    lowering(op)(forward)
    lowering(backward_op)(backward)


_adaptive_lowerings(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool2d_backward.default, 2)
_adaptive_lowerings(aten._adaptive_avg_pool3d.default, aten._adaptive_avg_pool3d_backward.default, 3)


# ------------------------------------------------------------------ embedding
@lowering(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """aten::embedding: weight[indices] -> indices.shape + (D,); indices outside
    [0, num_weights) raise IndexError("index out of range in self") at the next sync."""
    n = weight.shape[0]
    idx = indices.astype(jnp.int64)
    context().check(jnp.all((idx >= 0) & (idx < n)), IndexError, "index out of range in self")
    return jnp.take(weight, jnp.clip(idx, 0, max(n - 1, 0)), axis=0)


@lowering(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    """aten::embedding_dense_backward: grad rows summed per index into
    (num_weights, D); rows of padding_idx get none; scale_grad_by_freq divides each
    contribution by its index's count in the batch."""
    d = grad_output.shape[-1]
    g = _acc(grad_output).reshape(-1, d)
    idx = indices.reshape(-1).astype(jnp.int64)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), g.dtype).at[idx].add(1)
        g = g / counts[idx][:, None]
    g = jnp.where((idx == padding_idx)[:, None], 0, g)
    return jnp.zeros((num_weights, d), g.dtype).at[idx].add(g)


# ------------------------------------------------------------------ upsampling
def _scale(n_in, n_out, scale, align_corners=False):
    """ATen's area_pixel_compute_scale / compute_scales_value, in float32."""
    if align_corners:
        return np.float32((n_in - 1) / (n_out - 1)) if n_out > 1 else np.float32(0)
    if scale is not None and scale > 0:
        return np.float32(1.0 / scale)
    return np.float32(n_in) / np.float32(n_out)


def _nearest_index(n_in, n_out, scale, exact):
    o = np.arange(n_out)
    if not exact and n_out == n_in:
        return o
    if not exact and n_out == 2 * n_in:
        return o >> 1
    s = _scale(n_in, n_out, scale)
    src = (o.astype(np.float32) + np.float32(0.5)) * s if exact else o.astype(np.float32) * s
    return np.minimum(np.floor(src).astype(np.int64), n_in - 1)


def _upsample_nearest(x, out_sizes, scales, exact):
    nsp = len(out_sizes)
    for i, (n_out, s) in enumerate(zip(out_sizes, scales)):
        axis = x.ndim - nsp + i
        x = jnp.take(x, jnp.asarray(_nearest_index(x.shape[axis], n_out, s, exact)), axis=axis)
    return x


def _nearest_lowerings(op, backward_op, nsp, exact):
    def forward(self, output_size, *scales):
        """aten::upsample_nearest / _upsample_nearest_exact (1-3d): CPU's float32
        source-index rule, identity and 2x fast paths included."""
        _require_float(self, "compute_indices_weights_nearest", ("Byte",))
        return _upsample_nearest(self, context().out().shape[-nsp:], scales, exact)

    def backward(grad_output, output_size, input_size, *scales):
        """The transpose of the forward upsampling: gradients summed per source."""
        zeros = jnp.zeros(input_size, acc_type(grad_output.dtype))
        return _transpose_of(lambda x: _upsample_nearest(x, output_size, scales, exact), zeros, grad_output)

    lowering(op, static=("scales", "scales_d", "scales_h", "scales_w"))(forward)
    lowering(backward_op, static=("scales", "scales_d", "scales_h", "scales_w"))(backward)


_nearest_lowerings(aten.upsample_nearest1d.default, aten.upsample_nearest1d_backward.default, 1, False)
_nearest_lowerings(aten.upsample_nearest2d.default, aten.upsample_nearest2d_backward.default, 2, False)
_nearest_lowerings(aten.upsample_nearest3d.default, aten.upsample_nearest3d_backward.default, 3, False)
_nearest_lowerings(aten._upsample_nearest_exact1d.default, aten._upsample_nearest_exact1d_backward.default, 1, True)
_nearest_lowerings(aten._upsample_nearest_exact2d.default, aten._upsample_nearest_exact2d_backward.default, 2, True)
_nearest_lowerings(aten._upsample_nearest_exact3d.default, aten._upsample_nearest_exact3d_backward.default, 3, True)


def _linear_weights(n_in, n_out, align_corners, scale, dtype):
    """(index0, index1, lambda0, lambda1) of CPU's linear interpolation along a dim."""
    s = _scale(n_in, n_out, scale, align_corners).astype(dtype)
    o = np.arange(n_out).astype(dtype)
    src = s * o if align_corners else np.maximum(s * (o + dtype(0.5)) - dtype(0.5), dtype(0))
    i0 = src.astype(np.int64)
    i1 = i0 + (i0 < n_in - 1)
    l1 = np.clip(src - i0, 0, 1).astype(dtype)
    return i0, i1, dtype(1) - l1, l1


def _upsample_linear(x, out_sizes, align_corners, scales):
    """Separable linear interpolation of the trailing dims, innermost dim first, so the
    result nests as CPU's h0 * (w0 x00 + w1 x01) + h1 * (w0 x10 + w1 x11)."""
    nsp = len(out_sizes)
    np_dtype = np.float64 if x.dtype == jnp.float64 else np.float32
    for i in reversed(range(nsp)):
        axis = x.ndim - nsp + i
        i0, i1, l0, l1 = _linear_weights(x.shape[axis], out_sizes[i], align_corners, scales[i], np_dtype)
        shape = [1] * x.ndim
        shape[axis] = -1
        a = jnp.take(x, jnp.asarray(i0), axis=axis)
        b = jnp.take(x, jnp.asarray(i1), axis=axis)
        x = a * jnp.asarray(l0, x.dtype).reshape(shape) + b * jnp.asarray(l1, x.dtype).reshape(shape)
    return x


def _linear_lowerings(op, backward_op, nsp):
    def forward(self, output_size, align_corners, *scales):
        """aten::upsample_{linear1d,bilinear2d,trilinear3d}: CPU's source-index and
        weight rules (align_corners, explicit scales)."""
        _require_float(self, "compute_indices_weights_linear")
        return _upsample_linear(_acc(self), context().out().shape[-nsp:], align_corners, scales)

    def backward(grad_output, output_size, input_size, align_corners, *scales):
        """The transpose of the forward interpolation."""
        zeros = jnp.zeros(input_size, acc_type(grad_output.dtype))
        return _transpose_of(lambda x: _upsample_linear(x, output_size, align_corners, scales), zeros,
                             grad_output)

    lowering(op, static=("scales", "scales_d", "scales_h", "scales_w"))(forward)
    lowering(backward_op, static=("scales", "scales_d", "scales_h", "scales_w"))(backward)


_linear_lowerings(aten.upsample_linear1d.default, aten.upsample_linear1d_backward.default, 1)
_linear_lowerings(aten.upsample_bilinear2d.default, aten.upsample_bilinear2d_backward.default, 2)
_linear_lowerings(aten.upsample_trilinear3d.default, aten.upsample_trilinear3d_backward.default, 3)


# ------------------------------------------------------------------ attention
def _sdpa_key(philox_seed, philox_offset):
    return jax.random.wrap_key_data(jnp.stack([philox_seed, philox_offset]).astype(jnp.uint32))


@lowering(aten._scaled_dot_product_fused_attention_overrideable.default, random=True,
          static=("dropout_p", "scale"))
def sdpa_fused(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False,
               scale=None):
    """aten::_scaled_dot_product_fused_attention_overrideable, the kernel that
    F.scaled_dot_product_attention reaches on `neuron` (the shim's SDPA backend
    choice): q (*, L, E), k (*, S, E), v (*, S, Ev), float attn_bias broadcastable to
    (*, L, S) (bool masks arrive converted), top-left causal mask, grouped-query heads.
    Runs the blocked online-softmax kernel (torchneuron.kernels.attention). Returns
    (out, logsumexp (B, H, L) float32, -, -, L, S, philox_seed, philox_offset, -): the
    dropout mask's PRNG key travels in the seed/offset tensors for the backward."""
    ctx = context()
    rng = ctx.rng_key()
    out, lse = attention.forward(_acc(query), _acc(key), _acc(value),
                                 None if attn_bias is None else _acc(attn_bias), is_causal=is_causal,
                                 scale=scale, dropout_p=dropout_p, key=rng)
    data = jax.random.key_data(rng).reshape(-1).astype(jnp.int64)
    return (out, lse.reshape(ctx.out(1).shape), None, None, None, None, data[0], data[1], None)


@lowering(aten._scaled_dot_product_fused_attention_overrideable_backward.default, static=("dropout_p", "scale"))
def sdpa_fused_backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
                        cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, scale=None):
    """aten::_scaled_dot_product_fused_attention_overrideable_backward: (grad_query,
    grad_key, grad_value, grad_attn_bias), recomputed block by block from the saved
    logsumexp, with the forward's dropout mask regenerated from philox_seed/offset."""
    ctx = context()
    bias = None if attn_bias is None else _acc(attn_bias)
    rng = _sdpa_key(philox_seed, philox_offset) if dropout_p else None
    lse = logsumexp.reshape(ctx.out(0).shape[:-1])
    if query.dtype == jnp.float64:
        # The saved logsumexp is float32 (the op's schema); float64 gradients rebuilt
        # from it would be float32-accurate, so recompute it in float64.
        _, lse = attention.forward(_acc(query), _acc(key), _acc(value), bias, is_causal=is_causal, scale=scale,
                                   dropout_p=dropout_p, key=rng)
    grads = attention.backward(_acc(grad_out), _acc(query), _acc(key), _acc(value), bias, _acc(out),
                               lse, is_causal=is_causal, scale=scale, dropout_p=dropout_p, key=rng,
                               bias_grad=bias is not None and bool(grad_input_mask[3]))
    # The meta kernel promises every gradient whose input exists, masked or not.
    return tuple(None if i == 3 and attn_bias is None else
                 g if g is not None else jnp.zeros(ctx.out(i).shape, jnp.float32)
                 for i, g in enumerate(grads))


def _replicate(x, padding):
    """ATen's replication padding of the last len(padding) // 2 dims (pairs from the
    last dim; negative pads crop) as a gather of clamped source indices."""
    for i in range(len(padding) // 2):
        axis = x.ndim - 1 - i
        n = x.shape[axis]
        idx = jnp.clip(jnp.arange(-padding[2 * i], n + padding[2 * i + 1]), 0, n - 1)
        x = jnp.take(x, idx, axis=axis)
    return x


@lowering(aten.replication_pad1d_backward.default, aten.replication_pad2d_backward.default,
          aten.replication_pad3d_backward.default)
def replication_pad_backward(grad_output, self, padding):
    """aten::replication_pad{1,2,3}d_backward: the transpose of replication padding (each
    edge element collects the gradients of its copies); self's shape and dtype."""
    return _transpose_of(lambda x: _replicate(x, padding), self, grad_output).astype(self.dtype)
