"""Neural-network lowerings: softmax, losses (CTC included), normalization,
convolution, pooling, embedding, upsampling, grid sampling and fused
scaled-dot-product attention, forward and backward.

Half-precision inputs compute in float32 (`acc_type`) and round once, as ATen's CPU
kernels do. Backward ops whose forward is a linear map of the input (convolution,
average and adaptive pooling, upsampling) are the JAX transpose (`jax.vjp`) of the
forward lowering, and so are grid sampling's and CTC's (whose piecewise or recursive
forwards differentiate exactly); the others follow ATen's closed-form CPU formulas. Backward ops
take ATen's `output_mask`: a masked-out gradient is returned as None (an undefined
tensor), as on CPU.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..kernels import attention
from ._common import acc_type, half_rounding, kernel_acc_type, scalar_type_name, true_divide
from .indexing import host_kernel, type_name
from .linalg import copy_out
from .reduction import _vector_norm
from .registry import _python_meta, context, lowering, meta_check, meta_impl, meta_kernel, meta_layout

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


def _require_softmax_dtype(x, dim, name: str):
    """CPU's dtype errors of aten::_softmax / _log_softmax (SoftMaxKernel.cpp): only
    floating types are implemented, named by the kernel the dim selects (integer input,
    or complex as from softmax(x, dtype=complex64))."""
    last = x.ndim == 0 or dim % x.ndim == x.ndim - 1
    kernel = f"{name}_lastdim_kernel_impl" if last else f"{name}_kernel_impl"
    if jnp.iscomplexobj(x):
        raise NotImplementedError(f'"{kernel}" not implemented for \'{type_name(x.dtype)}\'')
    _require_float(x, kernel)


@lowering(aten._softmax.default)
def softmax(self, dim, half_to_float):
    """aten::_softmax: exp(x - max) / sum along `dim`; rows of -inf give NaN like CPU.
    half_to_float (float32 output for a half input) works as on CUDA; CPU rejects it."""
    _require_softmax_dtype(self, dim, "softmax")
    x, d = _softmax_dim(_acc(self), dim)
    e = jnp.exp(x - jnp.max(x, axis=d, keepdims=True, initial=-jnp.inf))
    return (e / jnp.sum(e, axis=d, keepdims=True)).reshape(self.shape)


@lowering(aten._log_softmax.default)
def log_softmax(self, dim, half_to_float):
    """aten::_log_softmax: x - max - log(sum(exp(x - max))) along `dim`."""
    _require_softmax_dtype(self, dim, "log_softmax")
    x, d = _softmax_dim(_acc(self), dim)
    shifted = x - jnp.max(x, axis=d, keepdims=True, initial=-jnp.inf)
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
    """aten::mse_loss_backward: 2 (x - t) g, divided for mean by the input's numel
    (Loss.cpp `mse_loss_backward_out`: `input.numel()`, not the broadcast shape's)."""
    d = _acc(self) - _acc(target)
    norm = 2.0 / self.size if reduction == _MEAN and self.size else 2.0
    return norm * d * _acc(grad_output)


@lowering(aten.l1_loss.default)
def l1_loss(self, target, reduction=_MEAN):
    """aten::l1_loss: |x - t| with reduction."""
    return _reduce(jnp.abs(_acc(self) - _acc(target)), reduction)


_BCE_EPS = 1e-12


def _check_probabilities(x):
    context().check(jnp.all((x >= 0) & (x <= 1)), RuntimeError, "all elements of input should be between 0 and 1")


def _check_probabilities_and_targets(x, t):
    """CPU's binary_cross_entropy kernel checks input, then target, element by element:
    the first element where either lies outside [0, 1] (or is NaN) decides the error."""
    bad_x, bad_t = ~((x >= 0) & (x <= 1)), ~((t >= 0) & (t <= 1))

    def first(bad):
        bad = jnp.ravel(bad)
        if bad.size == 0:  # an empty input: nothing to check (argmax of no elements raises)
            return 0
        return jnp.where(jnp.any(bad), jnp.argmax(bad), bad.size)

    ix, it = first(bad_x), first(bad_t)
    context().check(~(jnp.any(bad_x) & (ix <= it)), RuntimeError, "all elements of input should be between 0 and 1")
    context().check(it >= ix, RuntimeError, "all elements of target should be between 0 and 1")


@lowering(aten.binary_cross_entropy.default)
def binary_cross_entropy(self, target, weight=None, reduction=_MEAN):
    """aten::binary_cross_entropy: -w (t log x + (1 - t) log(1 - x)), each log clamped
    at -100 like CPU; inputs or targets outside [0, 1] raise RuntimeError at the next
    sync."""
    x, t = _acc(self), _acc(target)
    _check_probabilities_and_targets(x, t)
    loss = -(t * jnp.maximum(jnp.log(x), -100.0) + (1 - t) * jnp.maximum(jnp.log1p(-x), -100.0))
    if weight is not None:
        loss = loss * _acc(weight)
    return _reduce(loss, reduction)


@lowering(aten.binary_cross_entropy_backward.default)
def binary_cross_entropy_backward(grad_output, self, target, weight=None, reduction=_MEAN):
    """aten::binary_cross_entropy_backward: g (x - t) / max((1 - x) x, 1e-12), times w,
    divided by the element count for mean: in that order, each operation rounded to a
    half-type input's dtype, as ATen's CPU kernel (Loss.cpp) computes it."""
    r = half_rounding(self.dtype)
    x, t = _acc(self), _acc(target)
    _check_probabilities(x)
    # scalar_t(EPSILON), EPSILON a float: float32's 1e-12 (widened for double), 0 in float16
    eps = r(jnp.asarray(np.float32(_BCE_EPS), x.dtype))
    grad = r(r(_acc(grad_output) * r(x - t)) / jnp.maximum(r(r(1 - x) * x), eps))
    if weight is not None:
        grad = r(grad * _acc(weight))
    if reduction == _MEAN:
        # A separate division, as CPU's div_: behind a barrier XLA cannot fold it into
        # the one above (a / b / n -> a / (b n)).
        grad = r(true_divide(lax.optimization_barrier(grad), x.size))
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
    between (CPU's order of cases, so beta == 0 and d == 0 gives -g); for mean, g
    divided by the input's numel, as Loss.cpp's kernel (not the broadcast shape's)."""
    d = _acc(self) - _acc(target)
    g = _grad_scale(grad_output, self.size, reduction)
    inner = d * g / beta if beta != 0 else jnp.zeros_like(d)
    return jnp.where(d <= -beta, -g, jnp.where(d >= beta, g, inner))


@lowering(aten.huber_loss.default, static=("delta",))
def huber_loss(self, target, reduction=_MEAN, delta=1.0):
    """aten::huber_loss: 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta)."""
    d = jnp.abs(_acc(self) - _acc(target))
    return _reduce(jnp.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


@lowering(aten.huber_loss_backward.default, static=("delta",))
def huber_loss_backward(grad_output, self, target, reduction, delta):
    """aten::huber_loss_backward: -delta g / delta g / d g by CPU's case order; for
    mean, g divided by the input's numel, as Loss.cpp's kernel."""
    d = _acc(self) - _acc(target)
    g = _grad_scale(grad_output, self.size, reduction)
    return jnp.where(d <= -delta, -delta * g, jnp.where(d >= delta, delta * g, d * g))


@meta_check(aten.mse_loss_backward.default, aten.mse_loss_backward.grad_input, aten.smooth_l1_loss_backward.default,
            aten.smooth_l1_loss_backward.grad_input, aten.huber_loss_backward.default, aten.huber_loss_backward.out)
def _empty_mean_loss_backward_meta_check(grad_output, self, target, reduction, *_, **__):
    """PyTorch's Python kernels of these (torch/_decomp/decompositions.py), which the
    executor and fake tensors run for the shape, divide by `self.numel()` for a mean
    reduction in Python: ZeroDivisionError for an empty input, where CPU's kernels
    (Loss.cpp) give an empty gradient. The reduction does not change the gradient's
    shape or dtype, so those kernels see a sum instead."""
    if reduction == _MEAN and self.numel() == 0:
        return {"reduction": _SUM}
    return None


def _loss_backward(forward, grad_output, self, reduction):
    """The input gradient of a loss `forward(x)` (per-sample losses before reduction),
    by JAX's vjp, for CPU's reductions: grad_output has the reduced loss's shape."""
    def reduced(x):
        return _reduce(forward(x), reduction)

    out, vjp = jax.vjp(reduced, _acc(self))
    return vjp(_acc(grad_output).reshape(out.shape))[0]


def _hinge(z):
    """max(z, 0) whose gradient is 0 at z == 0, as CPU's `if (z > 0)` branches."""
    return jnp.where(z > 0, z, 0)


# Meta kernels PyTorch lacks for CPU-only backward ops (the margin losses',
# fractional_max_pool3d's), so the executor and fake tensors get their shapes: the input's.
meta_impl("fractional_max_pool3d_backward", lambda grad_output, self, *args: torch.empty_like(self))
meta_impl("multi_margin_loss_backward", lambda grad_output, self, *args, **kwargs: torch.empty_like(self))
meta_impl("multilabel_margin_loss_backward", lambda grad_output, self, *args, **kwargs: torch.empty_like(self))


@lowering(aten.multi_margin_loss_backward.default, static=("p", "margin"))
def multi_margin_loss_backward(grad_output, self, target, p, margin, weight=None, reduction=_MEAN):
    """aten::multi_margin_loss_backward: the gradient of CPU's multi_margin_loss,
    loss_n = sum_{j != y} w[y] * max(0, margin - x[y] + x[j])^p / C, by vjp."""
    def per_sample(x):
        x2 = x.reshape(-1, x.shape[-1] if x.ndim else 1)  # a 0-dim input is one sample of one class
        n_classes = x2.shape[1]
        t = jnp.clip(target.reshape(-1).astype(jnp.int64), 0, n_classes - 1)
        z = _hinge(margin - jnp.take_along_axis(x2, t[:, None], axis=1) + x2)
        z = z * z if p == 2 else z
        if weight is not None:
            z = z * _acc(weight)[t][:, None]
        z = jnp.where(jnp.arange(n_classes)[None, :] == t[:, None], 0, z)
        return jnp.sum(z, axis=1) / n_classes

    return _loss_backward(per_sample, grad_output, self, reduction)


def _multilabel_margin(x2, target, is_target):
    """CPU's multilabel margin loss per sample of x2 (N, C): for each target class j
    (the targets before the first -1) and non-target class k, max(0, 1 - x[j] + x[k]),
    summed and divided by C; `is_target` (N, C) marks the target classes."""
    n_classes = x2.shape[1]
    t = target.reshape(x2.shape).astype(jnp.int64)
    listed = jnp.cumprod(t != -1, axis=1).astype(x2.dtype)
    xt = jnp.take_along_axis(x2, jnp.clip(t, 0, n_classes - 1), axis=1)
    others = 1 - is_target.astype(x2.dtype).reshape(x2.shape)
    z = _hinge(1 - xt[:, :, None] + x2[:, None, :]) * listed[:, :, None] * others[:, None, :]
    return jnp.sum(z, axis=(1, 2)) / n_classes


def _as_samples(x):
    return x.reshape(-1, x.shape[-1] if x.ndim else 1)  # a 0-dim input is one sample of one class


@meta_kernel(aten.multilabel_margin_loss_forward.default)
def _multilabel_margin_loss_forward_meta(self, target, reduction):
    """PyTorch's meta kernel (its decomposition) with CPU's shape for a 1-D input's
    unreduced loss: () where the decomposition gives (1,)."""
    from torch._decomp.decompositions import multilabel_margin_loss_forward as decomposition

    output, is_target = decomposition(self, target, reduction)
    return (output.reshape(()) if self.dim() <= 1 else output), is_target


@lowering(aten.multilabel_margin_loss_forward.default)
def multilabel_margin_loss_forward(self, target, reduction):
    """aten::multilabel_margin_loss_forward: (loss, is_target) of CPU's kernel
    (`_multilabel_margin`); every target, also past the first -1, must lie in [-1, C)."""
    x2 = _as_samples(_acc(self))
    n_classes = x2.shape[1]
    t = target.reshape(x2.shape).astype(jnp.int64)
    context().check(jnp.all((t >= -1) & (t < n_classes)), RuntimeError, "argument #2 'target' is out of range")
    listed = jnp.cumprod(t != -1, axis=1).astype(bool)
    is_target = jnp.any(listed[:, :, None] & (t[:, :, None] == jnp.arange(n_classes)), axis=1)
    loss = _reduce(_multilabel_margin(x2, t, is_target), reduction)
    return (loss.reshape(context().out(0).shape).astype(context().out_dtype(0)),
            is_target.reshape(target.shape).astype(context().out_dtype(1)))


@lowering(aten.multilabel_margin_loss_backward.default)
def multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target):
    """aten::multilabel_margin_loss_backward: the gradient of CPU's loss
    (`_multilabel_margin`), by vjp."""
    return _loss_backward(lambda x: _multilabel_margin(_as_samples(x), target, is_target), grad_output, self,
                          reduction)


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


@lowering(aten._weight_norm_interface_backward.default)
def weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    """aten::_weight_norm_interface_backward: (grad_v, grad_g) of w = v * g / ||v||, the
    norm taken over every dim but `dim`; `saved_g` and `saved_norms` keep `v`'s rank
    with size 1 outside `dim`. ATen's WeightNorm.cpp formulas, half precision in
    float32: s = sum(grad_w * v), grad_g = s / norm, grad_v = g / norm * (grad_w - v * s
    / norm^2)."""
    gw, v = _acc(grad_w), _acc(saved_v)
    axes = tuple(i for i in range(v.ndim) if i != dim % max(v.ndim, 1))
    sums = jnp.sum(gw * v, axis=axes, keepdims=True)
    norm = _acc(saved_norms).reshape(sums.shape)
    g = _acc(saved_g).reshape(sums.shape)
    grad_v = g / norm * (gw - v * (sums / (norm * norm)))
    return grad_v, (sums / norm).reshape(saved_g.shape)


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


def _grouped(x, N, C, HxW, group):
    """(N, C, *) -> (N, group, C // group, HxW) so statistics reduce over axes (2, 3).
    (Sizes given, not -1: an empty batch has no size to infer it from.)"""
    return x.reshape(N, group, C // group, HxW)


def _per_channel(p, group):
    return _acc(p).reshape(1, group, -1, 1)


@lowering(aten.native_group_norm.default)
def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    """aten::native_group_norm: (out, mean (N, group), rstd (N, group)) for input
    (N, C, *) normalized over each group of C // group channels and all spatial dims."""
    _require_float(input, "GroupNormKernelImpl")
    x = _grouped(_acc(input), N, C, HxW, group)
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
    g = _grouped(_acc(grad_out), N, C, HxW, group)
    r = _acc(rstd).reshape(N, group, 1, 1)
    x_hat = (_grouped(_acc(input), N, C, HxW, group) - _acc(mean).reshape(N, group, 1, 1)) * r
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
        # CPU's statistics dtype (`_bn_stats_dtype`): a half input without float32
        # parameters or running statistics keeps half ones. Its kernel then rounds the
        # mean and the variance sum to that dtype (batch_norm_cpu_collect_stats), divides
        # the sum in it (c10's Half/BFloat16 operator/(int64_t) rounds the count and the
        # quotient), and normalizes by, saves and moves the running statistics with those.
        stat = jnp.dtype(ctx.out(1).dtype)
        n = x.size // max(x.shape[1], 1)
        unbiased = batch_mean = None
        if stat != x.dtype and x.size:
            def rounded(v):
                return jnp.asarray(v, x.dtype).astype(stat).astype(x.dtype)
            exact_mean = jnp.mean(x, axis=axes, keepdims=True)
            exact_var_sum = jnp.sum(jnp.square(x - exact_mean), axis=axes, keepdims=True)
            mean = rounded(exact_mean)
            x_hat = None
            if stat == jnp.float16:
                # float16's are collected and moved in float, rounded only when saved
                # (measured on CPU: the running statistics follow the unrounded ones).
                invstd = rounded(1 / jnp.sqrt(exact_var_sum / n + eps))
                batch_mean = exact_mean.reshape(-1)
                if running_mean is not None and n > 1:
                    unbiased = (exact_var_sum / (n - 1)).reshape(-1)
            else:
                var_sum = rounded(exact_var_sum)
                invstd = rounded(1 / jnp.sqrt(rounded(var_sum / rounded(n)) + eps))
                if running_mean is not None:
                    unbiased = rounded(var_sum / rounded(n - 1)).reshape(-1) if n > 1 else None
        elif x.dtype == jnp.float32 and x.size:
            # batch_norm_cpu_collect_stats for float: sums in at::acc_type<float> (double
            # on XLA:CPU, `kernel_acc_type`), the mean and the variance sum (of float32
            # squares of x - mean) stored as float32, var = var_sum / N in float32,
            # invstd = 1 / sqrt(var + eps) in the accumulation type.
            wide = kernel_acc_type(x.dtype)
            mean = jnp.mean(x.astype(wide), axis=axes, keepdims=True).astype(x.dtype)
            var_sum = jnp.sum(jnp.square(x - mean).astype(wide), axis=axes, keepdims=True).astype(x.dtype)
            invstd = (1 / jnp.sqrt((var_sum / n).astype(wide) + eps)).astype(x.dtype)
            x_hat = None
            if running_mean is not None and n > 1:
                unbiased = (var_sum / (n - 1)).reshape(-1)
        else:
            x_hat, mean, invstd = _normalize(x, axes, eps)
            if running_mean is not None and n > 1:
                unbiased = jnp.mean(jnp.square(x - mean), axis=axes) * n / (n - 1)
        save_mean, save_invstd = mean.reshape(-1), invstd.reshape(-1)
        batch_mean = save_mean if batch_mean is None else batch_mean
        if running_mean is not None:
            if unbiased is None:  # one value per channel: CPU's 0 / 0
                unbiased = jnp.full(save_mean.shape, jnp.nan, x.dtype)
            # batch_norm_cpu_update_stats_template (a contiguous or channels-last input):
            # momentum_ = static_cast<param_t>(momentum), then running = momentum_ * stat
            # + (1 - momentum_) * running in the statistics' type param_t: for bfloat16
            # each product and sum rounded (c10's BFloat16 operators), the variance's
            # momentum_ * unbiased_var a float (accscalar_t) product; float16's in float
            # from the unrounded batch statistics (measured on CPU's results).
            def moved(running, batch, variance=False):
                p = running.dtype
                if p == jnp.float16:
                    return (momentum * batch.astype(jnp.float32) + (1 - momentum) * running.astype(jnp.float32)).astype(p)
                if p == jnp.bfloat16:
                    def rounded(v):
                        return v.astype(p).astype(jnp.float32)
                    m = rounded(jnp.float32(momentum))
                    new = m * batch.astype(jnp.float32)
                    new = new if variance else rounded(new)
                    return (new + rounded(rounded(1 - m) * running.astype(jnp.float32))).astype(p)
                wide = jnp.promote_types(kernel_acc_type(jnp.float32), p)
                return (momentum * batch.astype(wide) + (1 - momentum) * running.astype(wide)).astype(p)
            updates["running_mean"] = moved(running_mean, batch_mean)
            updates["running_var"] = moved(running_var, unbiased, variance=True)
        save_mean, save_invstd = save_mean.astype(stat), save_invstd.astype(stat)
    else:
        if running_mean is not None:  # written back unchanged: the kernel declares the writes
            updates = {"running_mean": running_mean, "running_var": running_var}
        mean = _channel_view(running_mean, x.ndim)
        invstd = _channel_view(1 / jnp.sqrt(_acc(running_var) + jnp.asarray(eps, x.dtype)), x.ndim)
        x_hat = None
        # Empty, as CPU's kernel returns them in eval mode (`_cpu_eval_statistics`).
        save_mean = jnp.zeros(ctx.out(1).shape, ctx.out(1).dtype)
        save_invstd = jnp.zeros(ctx.out(2).shape, ctx.out(2).dtype)
    if x_hat is not None and not x.size:
        return x_hat, save_mean, save_invstd, updates
    # batch_norm_cpu_collect_linear_and_constant_terms: out = x * alpha + beta with
    # alpha = invstd * weight, beta = bias - mean * alpha, in the opmath type.
    alpha = invstd if weight is None else invstd * _channel_view(weight, x.ndim)
    beta = -(mean * alpha) if bias is None else _channel_view(bias, x.ndim) - mean * alpha
    return x * alpha + beta, save_mean, save_invstd, updates


@lowering(aten.native_batch_norm.default, writes=("running_mean", "running_var"))
def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """aten::native_batch_norm: (out, save_mean (C,), save_invstd (C,)); in training
    updates running_mean/running_var in place (ATen's schema does not declare it, CPU
    does it). In eval save_mean/save_invstd are empty, as CPU's (`_cpu_eval_statistics`)."""
    out, m, s, updates = _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
    return (out, m, s), updates


@lowering(aten._native_batch_norm_legit.default, mutates=True)
def native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """aten::_native_batch_norm_legit: native_batch_norm with the mutation declared."""
    out, m, s, updates = _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
    return (out, m, s), updates


def _bn_stats_dtype(input, *params):
    """CPU batch norm's save_mean/save_invstd dtype: float32 for a half-type input
    with a float32 parameter or running statistic ("mixed type"), else the input's."""
    mixed = input.dtype in (torch.float16, torch.bfloat16) and any(
        p is not None and p.dtype == torch.float32 for p in params)
    return torch.float32 if mixed else input.dtype


def _check_batch_statistics(input, training) -> None:
    """Normalization.cpp `batch_norm_cpu`: statistics of the batch (`training`) need an
    element, RuntimeError otherwise, for CPU-laid-out tensors (`device_hint`, as
    `_cpu_eval_statistics`). F.batch_norm returns an empty batch before it reaches
    these ops, on CPU and here."""
    if training and input.numel() == 0 and torch._meta_registrations.device_hint(input) == "cpu":
        raise RuntimeError(f"input tensor must have at least one element, but got input_sizes = {list(input.shape)}")


def _cpu_statistics(out, input, training, *params):
    """PyTorch's meta outputs `out` of a batch norm with save_mean and save_invstd as
    Normalization.cpp `batch_norm_cpu` returns them, for tensors laid out as CPU's
    (`device_hint`: meta stand-ins of `neuron` tensors, fake tensors on `neuron` or the
    CPU): in `_bn_stats_dtype` (PyTorch's kernel computes and keeps them in float32 for
    a half input), and in eval mode empty (`at::empty({0})`; PyTorch's kernel gives the
    running mean and invstd, (C,), as CUDA does). Other meta tensors keep PyTorch's."""
    # Looked up at the call: `eager.meta_device.install` replaces the module's function.
    if torch._meta_registrations.device_hint(input) != "cpu":
        return out
    dtype = _bn_stats_dtype(input, *params)
    if training:
        return (out[0], out[1].to(dtype), out[2].to(dtype), *out[3:])
    return (out[0], input.new_empty((0,), dtype=dtype), input.new_empty((0,), dtype=dtype), *out[3:])


_NO_STATS_META = _python_meta(aten._native_batch_norm_legit.no_stats)


@meta_kernel(aten._native_batch_norm_legit.no_stats)
def _batch_statistics_meta(input, weight, bias, training, momentum, eps):
    """The meta kernel of `_native_batch_norm_legit.no_stats`: CPU's empty-batch error
    and statistics dtypes (`_cpu_statistics`)."""
    _check_batch_statistics(input, training)
    return _cpu_statistics(_NO_STATS_META(input, weight, bias, training, momentum, eps), input, training, weight,
                           bias)


def _cpu_eval_statistics(inner):
    """PyTorch's meta kernel `inner` of a batch norm taking `training`, with CPU's
    empty-batch error and save_mean and save_invstd (`_cpu_statistics`)."""
    def meta(input, weight, bias, running_mean, running_var, training, momentum, eps):
        _check_batch_statistics(input, training)
        out = inner(input, weight, bias, running_mean, running_var, training, momentum, eps)
        if len(out) == 5 and running_mean is not None and torch._meta_registrations.device_hint(input) == "cpu":
            # The functional op's new running statistics keep their dtype, as the kernel
            # updates them in place (PyTorch's meta kernel gives the opmath type).
            out = (*out[:3], out[3].to(running_mean.dtype), out[4].to(running_var.dtype))
        return _cpu_statistics(out, input, training, weight, bias, running_mean, running_var)
    return meta


for _op in (aten.native_batch_norm.default, aten._native_batch_norm_legit.default,
            aten._native_batch_norm_legit_functional.default):
    meta_kernel(_op)(_cpu_eval_statistics(_python_meta(_op)))


def _batch_norm_reserve_meta(update):
    """The meta kernel of `_batch_norm_with_update` (`update`) or `_batch_norm_no_update`:
    Normalization.cpp's CPU kernels run `batch_norm_cpu` and return an empty uint8
    reserve (`at::empty({0}, input.options().dtype(kByte))`). PyTorch's asks
    `torch._C._select_batch_norm_backend` for the reserve's size, which refuses a
    missing weight or bias (TypeError) where CPU normalizes without them."""
    def meta(input, weight, bias, running_mean, running_var, momentum, eps):
        if running_mean is None:  # no_update without running statistics: the batch's (the lowering's)
            out = aten._native_batch_norm_legit.no_stats(input, weight, bias, True, momentum, eps)
        else:
            out = aten._native_batch_norm_legit.default(input, weight, bias, running_mean, running_var, update,
                                                        momentum, eps)
        return (*out, input.new_empty((0,), dtype=torch.uint8))
    return meta


meta_kernel(aten._batch_norm_with_update.default)(_batch_norm_reserve_meta(True))
meta_kernel(aten._batch_norm_no_update.default)(_batch_norm_reserve_meta(False))


@host_kernel(aten._native_batch_norm_legit.out)
def native_batch_norm_legit_out(input, weight, bias, running_mean, running_var, training, momentum, eps, *, out,
                                save_mean, save_invstd):
    """Eager aten::_native_batch_norm_legit.out: the functional overload (which
    updates the running statistics in place) with its results copied into the out
    tensors; CPU requires their dtypes to match exactly, and in eval mode leaves
    save_mean and save_invstd empty. The executor cannot derive this overload: it both
    mutates arguments and writes out= tensors."""
    results = aten._native_batch_norm_legit.default(input, weight, bias, running_mean, running_var, training,
                                                    momentum, eps)
    dtype = _bn_stats_dtype(input, weight, bias, running_mean, running_var)
    stats = [r.new_empty((0,), dtype=dtype) if not training else r.to(dtype) for r in results[1:]]
    outs = (out, save_mean, save_invstd)
    return copy_out((results[0], *stats), outs, (aten._native_batch_norm_legit.out, (
        input, weight, bias, running_mean, running_var, training, momentum, eps) + outs), exact_dtype=True)


@host_kernel(aten._native_batch_norm_legit.no_stats_out)
def native_batch_norm_legit_no_stats_out(input, weight, bias, training, momentum, eps, *, out, save_mean,
                                         save_invstd):
    """Eager aten::_native_batch_norm_legit.no_stats_out, like `native_batch_norm_legit_out`."""
    results = aten._native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps)
    dtype = _bn_stats_dtype(input, weight, bias)
    outs = (out, save_mean, save_invstd)
    return copy_out((results[0], results[1].to(dtype), results[2].to(dtype)), outs,
                    (aten._native_batch_norm_legit.no_stats_out, (input, weight, bias, training, momentum, eps) + outs),
                    exact_dtype=True)


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


@lowering(aten._batch_norm_with_update_functional.default)
def batch_norm_with_update_functional(input, weight, bias, running_mean, running_var, momentum, eps):
    """aten::_batch_norm_with_update_functional (functionalized graphs of
    `_batch_norm_with_update`): (out, save_mean, save_invstd, reserve (empty), new
    running_mean, new running_var). Lowered, not left to PyTorch's decomposition, which
    asks `torch._C._select_batch_norm_backend` for the reserve and so refuses a missing
    weight or bias (TypeError, PyTorch's aot_eager on CPU too) where CPU normalizes
    without them (`_batch_norm_with_update_functional_meta`)."""
    out, m, s, updates = _batch_norm(input, weight, bias, running_mean, running_var, True, momentum, eps)
    return (out, m, s, jnp.zeros(context().out(3).shape, jnp.uint8), updates["running_mean"],
            updates["running_var"])


@meta_kernel(aten._batch_norm_with_update_functional.default)
def _batch_norm_with_update_functional_meta(input, weight, bias, running_mean, running_var, momentum, eps):
    """The meta kernel of `_batch_norm_with_update_functional`: `_batch_norm_reserve_meta`'s
    rule (CPU's empty uint8 reserve, without `_select_batch_norm_backend`), with the new
    running statistics. Fake tensors prefer it to PyTorch's decomposition."""
    out, m, s, rm, rv = aten._native_batch_norm_legit_functional.default(input, weight, bias, running_mean,
                                                                        running_var, True, momentum, eps)
    return out, m, s, input.new_empty((0,), dtype=torch.uint8), rm, rv


@lowering(aten._batch_norm_no_update.default)
def batch_norm_no_update(input, weight, bias, running_mean, running_var, momentum, eps):
    """aten::_batch_norm_no_update: eval batch norm (batch statistics without running
    ones); (out, save_mean, save_invstd, reserve (empty))."""
    training = running_mean is None
    out, m, s, _ = _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
    return out, m, s, jnp.zeros(context().out(3).shape, jnp.uint8)


def _batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                         output_mask):
    """CPU's batch_norm_cpu_backward kernel (batch_norm_kernel.cpp): the per-channel
    sums of dy and of (x - mean) * dy accumulate in `at::acc_type<scalar_t, false>`,
    double for float32 (CPU's float32 partial sums, per plane or per thread, leave only
    their own rounding between the two), float32 (opmath) for half types; the rest in
    the kernel's order and dtype (`kernel_acc_type`: float32 on accelerators): k = dotp * invstd * invstd / N and grad_mean = sum / N
    in the input's opmath type, dx = ((dy - grad_mean) - (x - mean) * k) * invstd * w,
    grad_weight = dotp * invstd, grad_bias = sum. In eval, invstd = 1 / sqrt(running_var
    + eps) in double, as the kernel computes it."""
    x, g = _acc(input), _acc(grad_out)
    nd = x.ndim
    axes = tuple(i for i in range(nd) if i != 1)
    wide = kernel_acc_type(x.dtype)
    if train:
        mean, invstd = _acc(save_mean), _acc(save_invstd)
    else:
        mean = _acc(running_mean)
        invstd = (1 / jnp.sqrt(running_var.astype(kernel_acc_type(running_var.dtype)) + eps)).astype(x.dtype)
    w = _acc(weight) if weight is not None else jnp.ones_like(invstd)
    centered = x - _channel_view(mean, nd)
    sum_g = jnp.sum(g.astype(wide), axis=axes)
    dotp = jnp.sum((centered * g).astype(wide), axis=axes)
    gi = None
    if output_mask[0]:
        if train:
            n = x.size // x.shape[1]
            k = dotp.astype(x.dtype) * invstd * invstd / n
            grad_mean = (sum_g / n).astype(x.dtype)
            gi = ((g - _channel_view(grad_mean, nd)) - centered * _channel_view(k, nd)) * _channel_view(invstd, nd) \
                * _channel_view(w, nd)
        else:
            gi = g * _channel_view(invstd, nd) * _channel_view(w, nd)
    gw = (dotp * invstd.astype(wide)).astype(x.dtype) if output_mask[1] else None
    gb = sum_g.astype(x.dtype) if output_mask[2] else None
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


# ------------------------------------------------------------------ output layouts
@meta_layout(aten.native_group_norm.default, aten.max_unpool2d.default,
             aten.channel_shuffle.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default,
             aten.replication_pad2d.default, aten.replication_pad3d.default)
def _input_layout(input, *args, **kwargs):
    """CPU's kernels of these ops write their (first) output in the input's suggested
    memory format, keeping channels_last; PyTorch's meta kernels or the references
    they run make it contiguous."""
    return [torch._prims_common.suggest_memory_format(input)]


@meta_layout(aten.pixel_unshuffle.default)
def _pixel_unshuffle_layout(input, *args, **kwargs):
    """As `_input_layout`, except that CPU clones an empty input: the meta kernel's
    clone has its strides."""
    return [None] if input.numel() == 0 else _input_layout(input)


# ------------------------------------------------------------------ convolution
_SPATIAL = "DHW"


def _conv_numbers(nsp: int):
    sp = _SPATIAL[-nsp:]
    return ("NC" + sp, "OI" + sp, "NC" + sp)


def _conv(x, w, stride, padding, dilation, transposed, output_padding, groups):
    """ATen's convolution (no bias) of x (N, C_in, *) by w in lax.conv terms. A
    transposed convolution is the forward convolution of the input dilated by
    `stride`, with the kernel flipped and its in/out channels swapped per group. A
    parameter of one value holds for every spatial dim (ATen's expand_param_if_needed;
    padding='valid' arrives as [0])."""
    nsp = x.ndim - 2
    stride, padding, dilation, output_padding = (tuple(v) * nsp if len(v) == 1 else tuple(v)
                                                 for v in (stride, padding, dilation, output_padding))
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


@meta_check(aten.convolution.default)
def _convolution_meta_check(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """The parameter checks of CPU's `_convolution`, in its order; PyTorch's meta kernel
    lacks them (lax.conv then raises TypeError, or computes with negative padding)."""
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    dims = weight.dim() - 2
    for name, values in (("stride", stride), ("padding", padding), ("dilation", dilation),
                         ("output_padding", output_padding)):
        if len(values) not in (1, dims):  # expand_param_if_needed
            raise RuntimeError(f"expected {name} to be a single integer value or a list of {dims} values to match "
                               f"the convolution dimensions, but got {name}={list(values)}")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if transposed and any(p < 0 for p in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d < 0 for d in dilation):
        raise RuntimeError("dilation should be greater than zero")
    if any(d == 0 for d in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got {list(dilation)}")
    if transposed and not all(o < s or o < d for o, s, d in zip(output_padding, stride, dilation)):
        raise RuntimeError(_output_padding_message(output_padding, stride, dilation))


def _output_padding_message(output_padding, stride, dilation) -> str:
    """slow_conv_transpose{2,3}d's shape-check message; a 1-d convolution runs as 2-d
    with a height of output padding 0, stride 1 and dilation 1."""
    if len(stride) == 1:
        output_padding, stride, dilation = (0, *output_padding), (1, *stride), (1, *dilation)
    dims = ("depth", "height", "width")[-len(stride):]
    parts = [f"{label}_{dim}: {v}" for label, values in (("output_padding", output_padding), ("stride", stride),
                                                         ("dilation", dilation)) for dim, v in zip(dims, values)]
    return "output padding must be smaller than either stride or dilation, but got " + " ".join(parts)


@functools.lru_cache(maxsize=None)
def _cpu_fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode()


def _cpu_conv_memory_format(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """The memory format of CPU's convolution output and gradients for these meta
    tensors: the one CPU's backend (mkldnn, the slow 2-d/3-d or depthwise kernels, by
    dtype, shape and layout) lays them out in, asked of ATen itself
    (`_select_conv_backend`, `_conv_determine_backend_memory_format`) on fake CPU
    tensors of the same geometry. None for other than 2-d and 3-d convolutions
    (`_cpu_conv_layout` runs a 1-d one as 2-d)."""
    if input.dim() not in (4, 5) or weight.dim() != input.dim():
        return None
    from torch._subclasses.fake_tensor import FakeTensor

    mode = _cpu_fake_mode()
    cpu = torch.device("cpu")
    x, w = (FakeTensor(mode, t, cpu) for t in (input, weight))
    b = None if bias is None else FakeTensor(mode, bias, cpu)
    backend = torch._C._select_conv_backend(x, w, b, stride, padding, dilation, transposed, output_padding,
                                            groups, None)
    return torch._C._conv_determine_backend_memory_format(x, w, backend)


def _cpu_conv_layout(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """The layout (`registry.meta_layout`) of CPU's convolution output and gradients:
    `_cpu_conv_memory_format`'s. A 1-d convolution runs as a 2-d one of height 1
    (Convolution.cpp `_convolution`: `params.view1d_as_2d()`, `view4d` of input and
    weight, `view3d` of the results), so its results are the squeezed 2-d results. The
    backend's memory format comes from a contiguous input and the weight (as PyTorch's
    own fake convolution kernel asks it): a channels_last-like (C-stride-1) weight
    gives channels_last 2-d results, whose squeeze keeps the channel stride 1."""
    if input.dim() != 3 or weight.dim() != 3:
        return _cpu_conv_memory_format(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                                       groups)
    dense = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    fmt = _cpu_conv_memory_format(dense.unsqueeze(2), weight.unsqueeze(2), bias, [1, *stride], [0, *padding],
                                  [1, *dilation], transposed, [0, *output_padding], groups)
    if fmt in (None, torch.contiguous_format):
        return fmt

    def squeezed(out):
        n, c, length = out.shape
        return torch.empty((n, c, 1, length), device="meta", memory_format=fmt).squeeze(2).stride()
    return squeezed


@meta_layout(aten.convolution.default)
def _convolution_layout(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return [_cpu_conv_layout(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)]


@meta_layout(aten.convolution_backward.default)
def _convolution_backward_layout(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                                 output_padding, groups, output_mask):
    fmt = _cpu_conv_layout(input, weight, None, stride, padding, dilation, transposed, output_padding, groups)
    return [fmt, fmt, None]


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
    pooled = int(np.prod(grad_output.shape[-nsp:]))  # not -1: a batch of 0 rows has no size to infer
    g = _acc(grad_output).reshape(rows, pooled)
    idx = indices.reshape(rows, pooled)
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


@lowering(aten.max_unpool2d.default)
def max_unpool2d(self, indices, output_size):
    """aten::max_unpool2d: `_max_unpool` over (H, W) = output_size."""
    return _max_unpool(self, indices, tuple(output_size))


@lowering(aten.max_unpool3d.default)
def max_unpool3d(self, indices, output_size, stride, padding):
    """aten::max_unpool3d: `_max_unpool` over (D, H, W) = output_size."""
    return _max_unpool(self, indices, tuple(output_size))


def _max_unpool(self, indices, size):
    """CPU's max_unpooling kernel (MaxUnpoolKernel.cpp): self (..., *in) and int64
    indices of its shape, each a flat position in the plane of `size` of its channel ->
    (..., *size), zero where no index lands, the later element where several do. An
    index outside [0, prod(size)) raises CPU's RuntimeError naming the last one, as
    its loop does single-threaded (the PyTorch decomposition raised IndexError)."""
    lead = self.shape[:self.ndim - len(size)]
    plane = math.prod(size)
    if self.size == 0 or plane * math.prod(lead) == 0:  # CPU returns before its loop
        return jnp.zeros((*lead, *size), self.dtype)
    x = self.reshape(-1, math.prod(self.shape[len(lead):]))
    idx = indices.reshape(x.shape).astype(jnp.int64)
    bad = ((idx < 0) | (idx >= plane)).reshape(-1)
    context().check(~jnp.any(bad), RuntimeError,
                    f"Found an invalid max index: {{}} (output volumes are of size {'x'.join(map(str, size))})",
                    value=idx.reshape(-1)[bad.size - 1 - jnp.argmax(bad[::-1])])
    rows = jnp.arange(x.shape[0])[:, None]
    order = jnp.broadcast_to(jnp.arange(x.shape[1]), x.shape)
    winner = jnp.full((x.shape[0], plane), -1, jnp.int64).at[rows, idx].max(order, mode="drop")
    out = jnp.where(winner >= 0, jnp.take_along_axis(x, jnp.maximum(winner, 0), axis=1), jnp.zeros((), x.dtype))
    return out.reshape(*lead, *size)


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


def _check_adaptive_nonempty(input, nsp, name):
    """AdaptiveAveragePooling{,3d}.cpp: the 2-d pool's two pooled dims are non-empty
    (its batch and channel dims may be empty); the 3-d pool's every dim but the first
    is (a 5-d input's channel dim too). PyTorch's meta kernels check the max pools'
    and the backward ops' but not the average pools' forward."""
    for d in range(1 if nsp == 3 else input.dim() - nsp, input.dim()):
        if input.shape[d] == 0:
            raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch dimensions, but input "
                               f"has sizes {list(input.shape)} with dimension {d} being empty")


for _nsp, _op in ((2, aten._adaptive_avg_pool2d.default), (3, aten._adaptive_avg_pool3d.default)):
    meta_check(_op)(lambda self, *_, _nsp=_nsp, **__: _check_adaptive_nonempty(self, _nsp, f"adaptive_avg_pool{_nsp}d"))


def _adaptive_max(x, out_sizes):
    """(values, flat indices into the pooled plane) of adaptive max pooling over the
    trailing dims, window o of a dim spanning [floor(o * I / O), ceil((o + 1) * I / O)).
    CPU scans each window in row-major order, keeping the first maximum and taking every
    NaN, so the result is the last NaN if any, else the first maximum. That rule is
    separable: reduce the innermost dim, then each outer dim over the partial results."""
    nsp = len(out_sizes)
    in_sizes = x.shape[-nsp:]
    if 0 in tuple(out_sizes) or x.size == 0:  # nothing to pool (CPU refuses empty pooled input dims before)
        shape = x.shape[:-nsp] + tuple(out_sizes)
        return jnp.zeros(shape, x.dtype), jnp.zeros(shape, jnp.int64)
    plane_strides = [int(np.prod(in_sizes[i + 1:])) for i in range(nsp)]
    floating = jnp.issubdtype(x.dtype, jnp.floating)
    val, flat = x, None
    for i in reversed(range(nsp)):
        axis = x.ndim - nsp + i
        n_in, n_out = in_sizes[i], out_sizes[i]
        o = np.arange(n_out)
        start = (o * n_in) // n_out
        end = -((-(o + 1) * n_in) // n_out)
        k = int((end - start).max())
        pos = start[:, None] + np.arange(k)[None, :]  # (O, K) window positions
        valid = pos < end[:, None]
        take = jnp.asarray(np.minimum(pos, n_in - 1).reshape(-1))
        shape = val.shape[:axis] + (n_out, k) + val.shape[axis + 1:]
        vals = jnp.take(val, take, axis=axis).reshape(shape)
        mask = jnp.asarray(valid).reshape((n_out, k) + (1,) * (val.ndim - axis - 1))
        nan = (jnp.isnan(vals) & mask) if floating else jnp.zeros(vals.shape, bool)
        low = -jnp.inf if floating else jnp.iinfo(x.dtype).min
        best = jnp.max(jnp.where(mask & ~nan, vals, low), axis=axis + 1, keepdims=True)
        first_best = jnp.argmax(mask & ~nan & (vals == best), axis=axis + 1)
        last_nan = k - 1 - jnp.argmax(jnp.flip(nan, axis=axis + 1), axis=axis + 1)
        choice = jnp.where(jnp.any(nan, axis=axis + 1), last_nan, first_best)
        picked = jnp.expand_dims(choice, axis + 1)
        val = jnp.take_along_axis(vals, picked, axis=axis + 1).squeeze(axis + 1)
        src = jnp.asarray(start, jnp.int64).reshape((n_out,) + (1,) * (val.ndim - axis - 1)) + choice
        here = src * plane_strides[i]
        if flat is not None:
            inner = jnp.take(flat, take, axis=axis).reshape(shape)
            here = here + jnp.take_along_axis(inner, picked, axis=axis + 1).squeeze(axis + 1)
        flat = here
    return val, flat


def _adaptive_max_lowerings(op, backward_op, nsp):
    def forward(self, output_size):
        """aten::adaptive_max_pool{2,3}d of (N, C, *) or (C, *): (values, int64 indices
        into the input plane), CPU's window, tie and NaN rules (`_adaptive_max`)."""
        _require_float(self, f"adaptive_max_pool{nsp}d")
        return _adaptive_max(self, context().out().shape[-nsp:])

    def backward(grad_output, self, indices):
        """aten::adaptive_max_pool{2,3}d_backward: grad routed to the argmax positions."""
        return _max_pool_backward(grad_output, self, indices, nsp)

    lowering(op)(forward)
    lowering(backward_op)(backward)


_adaptive_max_lowerings(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool2d_backward.default, 2)
_adaptive_max_lowerings(aten.adaptive_max_pool3d.default, aten.adaptive_max_pool3d_backward.default, 3)


def _fractional_starts(u, n_in, n_out, k, dtype):
    """CPU's generate_intervals: the window starts (P..., n_out) of fractional max
    pooling along one dim from the per-plane samples u (P...) in [0, 1)."""
    u = u.astype(dtype)
    i = jnp.arange(n_out, dtype=dtype)
    if n_out > 1:
        alpha = jnp.asarray(n_in - k, dtype) / jnp.asarray(n_out - 1, dtype)
        starts = (jnp.floor((i + u[..., None]) * alpha) - jnp.floor(u * alpha)[..., None]).astype(jnp.int64)
    else:
        starts = jnp.zeros(u.shape + (n_out,), jnp.int64)
    return starts.at[..., n_out - 1].set(n_in - k) if n_out else starts


def _fractional_max(x, kernel, out_sizes, samples, sample_dims):
    """(values, flat plane indices) of fractional max pooling over the trailing dims:
    the window of output o along a dim starts where `_fractional_starts` says, per
    plane; a window's last NaN, else its first maximum, wins (reduced one dim at a time,
    as `_adaptive_max`). `sample_dims[d]` is the column of `samples` dim d uses;
    `samples` may hold more batches than `x` (an unbatched `x` is one), as CPU's kernel
    reads the first ones only."""
    nsp = len(out_sizes)
    planes = x.shape[:-nsp]
    in_sizes = x.shape[-nsp:]
    plane_strides = [int(np.prod(in_sizes[i + 1:])) for i in range(nsp)]
    batches = planes[0] if len(planes) == 2 else 1
    u = samples[:batches].reshape(planes + (nsp,))
    dtype = acc_type(x.dtype)
    val, flat = x, None
    for d in reversed(range(nsp)):
        axis = len(planes) + d
        n_in, n_out, k = in_sizes[d], out_sizes[d], kernel[d]
        starts = _fractional_starts(u[..., sample_dims[d]], n_in, n_out, k, dtype)  # planes + (O,)
        pos = (starts[..., None] + jnp.arange(k)).reshape(planes + (n_out * k,))
        moved = jnp.moveaxis(val, axis, -1)
        others = moved.shape[len(planes):-1]
        idx = jnp.broadcast_to(pos.reshape(planes + (1,) * len(others) + (n_out * k,)),
                               moved.shape[:-1] + (n_out * k,))
        vals = jnp.take_along_axis(moved, idx, axis=-1).reshape(moved.shape[:-1] + (n_out, k))
        nan = jnp.isnan(vals)
        best = jnp.max(jnp.where(nan, -jnp.inf, vals), axis=-1, keepdims=True)
        first_best = jnp.argmax(~nan & (vals == best), axis=-1)
        last_nan = k - 1 - jnp.argmax(jnp.flip(nan, axis=-1), axis=-1)
        choice = jnp.where(jnp.any(nan, axis=-1), last_nan, first_best)[..., None]
        picked = jnp.take_along_axis(vals, choice, axis=-1)[..., 0]
        src = jnp.take_along_axis(idx.reshape(vals.shape), choice, axis=-1)[..., 0]
        here = src * plane_strides[d]
        if flat is not None:
            inner = jnp.take_along_axis(jnp.moveaxis(flat, axis, -1), idx, axis=-1).reshape(vals.shape)
            here = here + jnp.take_along_axis(inner, choice, axis=-1)[..., 0]
        val, flat = jnp.moveaxis(picked, -1, axis), jnp.moveaxis(here, -1, axis)
    return val, flat


@lowering(aten.fractional_max_pool2d.default)
def fractional_max_pool2d(self, kernel_size, output_size, random_samples):
    """aten::fractional_max_pool2d of (N, C, H, W) or (C, H, W): (values, int64 indices
    into H*W); random_samples (N, C, 2) holds the W sample then the H sample per plane."""
    return _fractional_max(self, tuple(kernel_size), tuple(output_size), random_samples, (1, 0))


@lowering(aten.fractional_max_pool3d.default)
def fractional_max_pool3d(self, kernel_size, output_size, random_samples):
    """aten::fractional_max_pool3d of (N, C, T, H, W) or (C, T, H, W); random_samples
    (N, C, 3) holds the T, H and W samples per plane."""
    return _fractional_max(self, tuple(kernel_size), tuple(output_size), random_samples, (0, 1, 2))


@lowering(aten.fractional_max_pool2d_backward.default)
def fractional_max_pool2d_backward(grad_output, self, kernel_size, output_size, indices):
    """aten::fractional_max_pool2d_backward: grad routed to the argmax positions."""
    return _max_pool_backward(grad_output, self, indices, 2)


@lowering(aten.fractional_max_pool3d_backward.default)
def fractional_max_pool3d_backward(grad_output, self, kernel_size, output_size, indices):
    """aten::fractional_max_pool3d_backward."""
    return _max_pool_backward(grad_output, self, indices, 3)


# ------------------------------------------------------------------ embedding
@meta_check(aten.embedding.default, aten.embedding.out)
def _embedding_meta_check(weight, indices, *_, **__):
    """CPU's RuntimeError (PyTorch's meta kernel asserts)."""
    if weight.dim() != 2:
        raise RuntimeError("'weight' must be 2-D")


@lowering(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """aten::embedding: weight[indices] -> indices.shape + (D,); indices outside
    [0, num_weights) raise IndexError("index out of range in self") at the next sync."""
    n = weight.shape[0]
    idx = indices.astype(jnp.int64)
    context().check(jnp.all((idx >= 0) & (idx < n)), IndexError, "index out of range in self")
    return jnp.take(weight, jnp.clip(idx, 0, max(n - 1, 0)), axis=0)


@lowering(aten.embedding_renorm.default, static=("norm_type",))
def embedding_renorm(self, indices, max_norm, norm_type):
    """aten::embedding_renorm (in place: embedding_renorm_, nn.Embedding's max_norm):
    `self` (num_weights, D) with each row `indices` names (int32/int64, any shape,
    repeats counted once) whose norm_type-norm exceeds max_norm scaled by
    max_norm / (norm + 1e-7). As ATen's CPU kernel (Embedding.cpp): the norm rounded to
    self's dtype, the scale computed in double and rounded to self's dtype, the product
    in self's dtype. An index outside [-num_weights, num_weights) raises IndexError at
    the next sync (CPU's select())."""
    if self.ndim != 2:
        raise RuntimeError(f"Expected 2-dimensional tensor, but got {self.ndim}-dimensional tensor for argument "
                           "#1 'self' (while checking arguments for embedding_renorm_)")
    if indices.dtype not in (jnp.int32, jnp.int64):
        raise RuntimeError("Expected tensor for argument #2 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got torch.{type_name(indices.dtype)}Tensor instead (while checking "
                           "arguments for embedding_renorm_)")
    if indices.size and not jnp.issubdtype(self.dtype, jnp.inexact):
        # CPU takes each named row's norm(), which refuses integer and bool rows
        raise RuntimeError("norm(): input dtype should be either floating point or complex. Got "
                           f"{scalar_type_name(self.dtype)} instead.")
    n = self.shape[0]
    idx = indices.reshape(-1).astype(jnp.int64)
    bad = (idx < -n) | (idx >= n)
    context().check(~jnp.any(bad), IndexError,
                    f"select(): index {{}} out of range for tensor of size [{n}, {self.shape[1]}] at dimension 0",
                    value=jnp.where(jnp.any(bad), idx[jnp.argmax(bad)], 0) if idx.size else 0)
    named = jnp.zeros((n,), bool).at[jnp.where(idx < 0, idx + n, idx)].set(True, mode="drop")
    x = _acc(self)
    norm = _vector_norm(x, norm_type, 1).astype(self.dtype).astype(jnp.float64)
    scale = jnp.where(named & (norm > max_norm), max_norm / (norm + 1e-7), 1.0).astype(self.dtype)
    return (x * _acc(scale)[:, None]).astype(self.dtype)


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


# ------------------------------------------------------------------ embedding_bag
_BAG_SUM, _BAG_MEAN, _BAG_MAX = 0, 1, 2  # at::native::EmbeddingBagMode


def _offset2bag(offsets, n: int, num_bags: int):
    """CPU's make_offset2bag: the bag of each of the `n` indices, a cumulative count of
    the bag starts at or before it (ones index_add-ed at offsets[:num_bags], minus one).
    Offsets past the last bag's start (include_last_offset) are not starts, so trailing
    indices stay in the last bag, as on CPU."""
    starts = offsets[:num_bags].astype(jnp.int64)
    starts = jnp.where(starts < 0, n + 1, starts)  # dropped; CPU rejects these offsets
    marks = jnp.zeros((n + 1,), jnp.int64).at[starts].add(1, mode="drop")
    return (jnp.cumsum(marks) - 1)[:n]


def _bag_sizes(offsets, n: int, num_bags: int):
    """CPU's make_bag_size_out: offsets[b+1] - offsets[b], the last bag up to `n`."""
    starts = offsets[:num_bags].astype(jnp.int64)
    ends = jnp.concatenate([starts[1:], jnp.full((1,), n, jnp.int64)])
    return ends - starts


def _check_bag_inputs(weight, indices, offsets, num_bags):
    """CPU's data checks of embedding_bag: offsets start at 0 and stay within the input,
    every index is a row of `weight` (RuntimeError, as CPU's TORCH_CHECKs)."""
    ctx = context()
    n, rows = indices.shape[0], weight.shape[0]
    if offsets.shape[0] > 0:
        first = offsets[0].astype(jnp.int64)
        ctx.check(first == 0, RuntimeError, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch "
                  "has to start from position 0. However, got {}", value=first)
        last = offsets[-1].astype(jnp.int64)
        ctx.check(last <= n, RuntimeError, f"offsets[-1] can not be greater than input's length {n} but got "
                  "offsets[-1] of {}", value=last)
    if n:
        idx = indices.astype(jnp.int64)
        bad = (idx < 0) | (idx >= rows)
        ctx.check(~jnp.any(bad), RuntimeError,
                  "embedding_bag: Expected idx >= 0 && idx < num_embeddings but found idx to be {}",
                  value=idx[jnp.argmax(bad)])


_BAG_FAST_TYPES = (torch.float32, torch.float16, torch.bfloat16)


def _bag_fast_path(weight, per_sample_weights, padding_idx) -> bool:
    """CPU's is_fast_path (EmbeddingBag.cpp), on meta tensors: sum and mean bags of a
    float32/float16/bfloat16 `weight` with unit column stride, no padding_idx, and
    per_sample_weights (if any) of unit stride, are reduced between consecutive offsets
    (fbgemm), not by offset2bag."""
    return (weight.dtype in _BAG_FAST_TYPES and weight.stride(1) == 1 and padding_idx < 0
            and (per_sample_weights is None or per_sample_weights.stride(0) == 1))


def _embedding_bag_meta(inner, forward_only: bool):
    """The meta kernel of _embedding_bag (`forward_only` False) or
    _embedding_bag_forward_only: PyTorch's (`inner`), with the auxiliary outputs sized
    as _embedding_bag_cpu_impl sizes them: offset2bag empty only for the fast path's sum
    (bfloat16 weights too), bag_size one per bag except for the forward-only sum (one
    per offset: make_bag_size_out without requires_grad), max_indices (bags, D) in max
    mode and bag_size's shape otherwise (its copy)."""
    def meta(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False, per_sample_weights=None,
             include_last_offset=False, padding_idx=-1):
        output, offset2bag, bag_size, max_indices = inner(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
                                                          per_sample_weights, include_last_offset, padding_idx)
        num_bags = output.shape[0]
        fast_sum = mode == _BAG_SUM and _bag_fast_path(weight, per_sample_weights, padding_idx)
        offset2bag = offset2bag.new_empty(0 if fast_sum else indices.shape[0])
        bag_size = bag_size.new_empty(offsets.shape[0] if forward_only and mode == _BAG_SUM else num_bags)
        max_indices = max_indices.new_empty((num_bags, weight.shape[1]) if mode == _BAG_MAX else bag_size.shape)
        return output, offset2bag, bag_size, max_indices
    return meta


for _op, _forward_only in ((aten._embedding_bag.default, False), (aten._embedding_bag_forward_only.default, True)):
    meta_kernel(_op)(_embedding_bag_meta(_python_meta(_op), _forward_only))


def _weight_unit_column_stride() -> bool:
    """Whether the op's first tensor argument (a 2-d weight) has unit column stride, as
    CPU's embedding_bag fast path asks: its stride where the trace knows it (compiled
    graphs), else whether it is contiguous (eager: exact but for a strided weight of
    unit column stride, a row slice with a step, whose mean bags then keep indices past
    the last offset where CPU's leave them out)."""
    ctx = context()
    if ctx.layouts:
        return ctx.layouts[0][0][1] == 1
    return ctx.contiguous[0] if ctx.contiguous else True


def _fit(x, shape, dtype):
    """`x` (1-d) zero-padded or cut to the meta kernel's `shape`: the forward-only sum's
    bag_size has an entry per offset, one more than the bags with include_last_offset;
    the extra entry is unused."""
    x = x.astype(dtype)
    if not shape:
        return x
    if shape[0] > x.shape[0]:
        return jnp.concatenate([x, jnp.zeros((shape[0] - x.shape[0],), dtype)])
    return x[:shape[0]]


@lowering(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """aten::_embedding_bag (and _embedding_bag_forward_only), following CPU's
    _embedding_bag_cpu_impl: (output (bags, D), offset2bag, bag_size, max_indices).

    Bag b reduces the rows weight[indices[i]] of the indices i with offset2bag[i] == b,
    skipping padding_idx: sum (times per_sample_weights), mean (divided by the bag's
    non-padding count, at least 1), or max per column (the first maximum wins, a NaN
    first element stays, later NaNs lose, as CPU's `>` scan). Empty bags give zeros.
    bag_size counts each bag's non-padding indices (mean and max; zeros for sum, as on
    CPU); max_indices holds the row of each maximum in max mode, else a copy of
    bag_size (CPU's `max_indices->copy_(bag_size)`). Shapes follow the meta kernel
    (`_embedding_bag_meta`). With include_last_offset, indices past the last offset
    stay in the last bag (offset2bag) except in sum and mean on CPU's fast path
    (`_bag_fast_path`), which reduces between offsets and leaves them out; the mean
    still divides by the last bag's size counted to the input's end, as CPU's does.
    Bad offsets or indices raise RuntimeError at the next synchronization."""
    ctx = context()
    n, dim = indices.shape[0], weight.shape[1]
    num_bags = ctx.out(0).shape[0]
    _check_bag_inputs(weight, indices, offsets, num_bags)
    bag = _offset2bag(offsets, n, num_bags)
    idx = jnp.clip(indices.astype(jnp.int64), 0, max(weight.shape[0] - 1, 0))
    keep = indices.astype(jnp.int64) != padding_idx
    if mode == _BAG_SUM and n:
        fast = ctx.out(1).shape[0] == 0  # the meta kernel, which saw the strides, judged it
    else:
        fast = (mode == _BAG_MEAN and padding_idx < 0 and _weight_unit_column_stride()
                and jnp.dtype(weight.dtype) in (jnp.float32, jnp.float16, jnp.bfloat16))
    summed = keep
    if fast and include_last_offset and num_bags and n:
        summed = keep & (jnp.arange(n) < offsets[num_bags].astype(jnp.int64))
    # Padding indices leave their bag's size (CPU decrements bag_size for each).
    sizes = _bag_sizes(offsets, n, num_bags) - jnp.zeros((num_bags,), jnp.int64).at[bag].add(
        (~keep).astype(jnp.int64), mode="drop")
    rows = _acc(weight)[idx]
    if mode == _BAG_MAX and n == 0:
        out, arg = jnp.zeros((num_bags, dim), rows.dtype), jnp.zeros((num_bags, dim), jnp.int64)
    elif mode == _BAG_MAX:
        pos = jnp.arange(n)
        first = jax.ops.segment_min(jnp.where(keep, pos, n), bag, num_bags)
        nonempty = first < n
        first_row = rows[jnp.clip(first, 0, max(n - 1, 0))]
        cand = keep[:, None] & ~jnp.isnan(rows)
        best = jax.ops.segment_max(jnp.where(cand, rows, -jnp.inf), bag, num_bags)
        at_best = cand & (rows == best[jnp.clip(bag, 0, num_bags - 1)])
        where = jax.ops.segment_min(jnp.where(at_best, pos[:, None], n), bag, num_bags)
        nan_first = jnp.isnan(first_row)
        where = jnp.where(nan_first, first[:, None], where)
        out = jnp.where(nan_first, first_row, best)
        arg = idx[jnp.clip(where, 0, max(n - 1, 0))]
        out = jnp.where(nonempty[:, None], out, 0)
        arg = jnp.where(nonempty[:, None], arg, 0)
    else:
        if per_sample_weights is not None:
            rows = rows * _acc(per_sample_weights)[:, None]
        out = jax.ops.segment_sum(jnp.where(summed[:, None], rows, 0), bag, num_bags)
        if mode == _BAG_MEAN:
            out = out / jnp.maximum(sizes, 1)[:, None].astype(out.dtype)
    if mode == _BAG_SUM:
        sizes = jnp.zeros_like(sizes)
    if mode != _BAG_MAX:
        arg = _fit(sizes, ctx.out(3).shape, ctx.out_dtype(3))
    out = out.reshape(num_bags, dim).astype(weight.dtype)
    return (out, _fit(bag, ctx.out(1).shape, ctx.out_dtype(1)), _fit(sizes, ctx.out(2).shape, ctx.out_dtype(2)),
            arg.astype(ctx.out_dtype(3)))


def _embedding_bag_dense_grad(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                              scale_grad_by_freq, mode, per_sample_weights, padding_idx):
    """CPU's _embedding_bag_dense_backward_cpu: sum/mean scatter each bag's gradient row
    into the rows of its non-padding indices (divided by the bag size for mean, by the
    index's count with scale_grad_by_freq, times its per-sample weight); max routes each
    column's gradient to its maximum's row, for bags with a nonzero size."""
    g = _acc(grad)
    out = jnp.zeros((num_weights, g.shape[1]), g.dtype)
    num_bags = g.shape[0]
    sizes = bag_size[:num_bags].astype(jnp.int64)
    if mode == _BAG_MAX:
        g = jnp.where((sizes != 0)[:, None], g, 0)
        cols = jnp.broadcast_to(jnp.arange(g.shape[1]), g.shape)
        return out.at[maximum_indices.astype(jnp.int64), cols].add(g, mode="drop")
    idx = indices.astype(jnp.int64)
    bag = offset2bag.astype(jnp.int64)
    scale = jnp.ones(idx.shape, g.dtype)
    if mode == _BAG_MEAN:
        scale = scale / jnp.maximum(sizes, 1)[jnp.clip(bag, 0, num_bags - 1)].astype(g.dtype)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), g.dtype).at[idx].add(1, mode="drop")
        scale = scale / counts[jnp.clip(idx, 0, num_weights - 1)]
    if per_sample_weights is not None:
        scale = scale * _acc(per_sample_weights)
    scale = jnp.where(idx == padding_idx, 0, scale)
    contrib = g[jnp.clip(bag, 0, num_bags - 1)] * scale[:, None]
    return out.at[idx].add(contrib, mode="drop")


@lowering(aten._embedding_bag_dense_backward.default)
def embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                                 scale_grad_by_freq, mode, per_sample_weights=None, padding_idx=-1):
    """aten::_embedding_bag_dense_backward: the (num_weights, D) weight gradient."""
    return _embedding_bag_dense_grad(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                                     scale_grad_by_freq, mode, per_sample_weights,
                                     padding_idx).astype(grad.dtype)


@lowering(aten._embedding_bag_backward.default)
def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx=-1):
    """aten::_embedding_bag_backward (what autograd calls for _embedding_bag's weight):
    the dense gradient, with offset2bag rebuilt from offsets when the forward left it
    empty (CPU's sum fast path). `sparse=True` asks for a sparse COO gradient, which
    has no `neuron` layout: NotImplementedError."""
    if sparse:
        raise NotImplementedError("embedding_bag(sparse=True): sparse gradients are not supported on neuron")
    n = indices.shape[0]
    if n and offset2bag.shape[0] == 0:
        offset2bag = _offset2bag(offsets, n, grad.shape[0])
    return embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                                        scale_grad_by_freq, mode, per_sample_weights, padding_idx)


@lowering(aten._embedding_bag_per_sample_weights_backward.default)
def embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1):
    """aten::_embedding_bag_per_sample_weights_backward (mode sum only, as on CPU): the
    gradient of index i's weight, <grad[bag of i], weight[indices[i]]>, 0 for padding."""
    if mode != _BAG_SUM:
        raise RuntimeError("embedding_bag_backward: per_sample_weights only supported for mode='sum'")
    n = indices.shape[0]
    if n and offset2bag.shape[0] == 0:
        offset2bag = _offset2bag(offsets, n, grad.shape[0])
    idx = indices.astype(jnp.int64)
    bag = jnp.clip(offset2bag.astype(jnp.int64), 0, max(grad.shape[0] - 1, 0))
    rows = _acc(weight)[jnp.clip(idx, 0, max(weight.shape[0] - 1, 0))]
    dots = jnp.sum(_acc(grad)[bag] * rows, axis=1)
    return jnp.where(idx == padding_idx, 0, dots).astype(grad.dtype)


# ------------------------------------------------------------------ upsampling
def _scale(n_in, n_out, scale, align_corners=False, dtype=np.float32):
    """ATen's area_pixel_compute_scale / compute_scales_value in `dtype` (float32, or
    float64 where CPU's kernel computes in double: linear modes of float64 inputs)."""
    if align_corners:
        return dtype((n_in - 1) / (n_out - 1)) if n_out > 1 else dtype(0)
    if scale is not None and scale > 0:
        return dtype(1.0 / scale)
    return dtype(n_in) / dtype(n_out)


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
    s = _scale(n_in, n_out, scale, align_corners, dtype)
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
        if x.shape[axis] == out_sizes[i]:  # CPU's compute_source_index_and_lambda copies it, whatever the scale
            continue
        i0, i1, l0, l1 = _linear_weights(x.shape[axis], out_sizes[i], align_corners, scales[i], np_dtype)
        shape = [1] * x.ndim
        shape[axis] = -1
        a = jnp.take(x, jnp.asarray(i0), axis=axis)
        b = jnp.take(x, jnp.asarray(i1), axis=axis)
        x = a * jnp.asarray(l0, x.dtype).reshape(shape) + b * jnp.asarray(l1, x.dtype).reshape(shape)
    return x


def _check_upsample_sizes(in_sizes, out_sizes):
    """ATen's upsample_{1,2,3}d_common_check: every spatial size, in and out, positive
    (PyTorch's meta kernels of the linear modes check only some calls)."""
    if min(in_sizes) > 0 and min(out_sizes) > 0:
        return
    names = "DHW"[3 - len(in_sizes):]
    sizes = [", ".join(f"{n}: {v}" for n, v in zip(names, vs)) for vs in (in_sizes, out_sizes)]
    joint = " and output" if len(in_sizes) == 1 else " output"
    raise RuntimeError(f"Input and output sizes should be greater than 0, but got input ({sizes[0]}){joint} ({sizes[1]})")


def _linear_lowerings(op, backward_op, nsp):
    def forward(self, output_size, align_corners, *scales):
        """aten::upsample_{linear1d,bilinear2d,trilinear3d}: CPU's source-index and
        weight rules (align_corners, explicit scales); uint8 bilinear2d as CPU's
        integer kernel (`_noaa_uint8_taps`, `_resample_uint8`)."""
        out_sizes = context().out().shape[-nsp:]
        _check_upsample_sizes(self.shape[-nsp:], out_sizes)
        if nsp == 2 and self.dtype == jnp.uint8:
            return _resample_uint8(self, out_sizes,
                                   lambda n_in, n_out, i: _noaa_uint8_taps(n_in, n_out, align_corners, scales[i], False))
        _require_float(self, "compute_indices_weights_linear")
        return _upsample_linear(_acc(self), out_sizes, align_corners, scales)

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


def _scale_in(n_in, n_out, scale, align_corners, dtype):
    """ATen's area_pixel_compute_scale in `dtype` (the kernel's opmath type)."""
    if align_corners:
        return dtype(n_in - 1) / dtype(n_out - 1) if n_out > 1 else dtype(0)
    if scale is not None and scale > 0:
        return dtype(1.0 / scale)
    return dtype(n_in) / dtype(n_out)


def _cubic1(x, a):
    return ((a + 2) * x - (a + 3)) * x * x + 1


def _cubic2(x, a):
    return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a


def _cubic_taps(n_in, n_out, align_corners, scale, dtype):
    """(indices, weights), each (n_out, 4), of CPU's bicubic interpolation along a dim
    (HelperInterpCubic): source index without clamping, taps at floor - 1 .. floor + 2
    clamped to the input, Keys' cubic convolution with A = -0.75."""
    s = _scale_in(n_in, n_out, scale, align_corners, dtype)
    o = np.arange(n_out).astype(dtype)
    src = s * o if align_corners else s * (o + dtype(0.5)) - dtype(0.5)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    t = np.clip(src - i0, 0, 1).astype(dtype)
    a = dtype(-0.75)
    one = dtype(1)
    w = np.stack([_cubic2(t + one, a), _cubic1(t, a), _cubic1(one - t, a), _cubic2(one - t + one, a)], axis=1)
    idx = np.clip(i0[:, None] + np.arange(-1, 3)[None, :], 0, n_in - 1)
    return idx, w.astype(dtype)


def _aa_taps(n_in, n_out, align_corners, scale, dtype, cubic):
    """(indices, weights), each (n_out, taps), of CPU's antialiased interpolation along a
    dim (`_compute_indices_min_size_weights_aa`): a triangle (bilinear) or Keys cubic
    with a = -0.5 (bicubic) filter widened by the downscale factor, normalized to sum 1;
    unused taps have weight 0."""
    s = _scale_in(n_in, n_out, scale, align_corners, dtype)
    size = 4 if cubic else 2
    support = dtype(size * 0.5 * s) if s >= 1 else dtype(size * 0.5)
    invscale = dtype(1.0 / s) if s >= 1 else dtype(1)
    taps = int(np.ceil(support)) * 2 + 1
    idx = np.zeros((n_out, taps), np.int64)
    w = np.zeros((n_out, taps), dtype)
    for i in range(n_out):
        center = dtype(s * (i + 0.5))
        xmin = max(int(center - support + 0.5), 0)
        xsize = min(max(min(int(center + support + 0.5), n_in) - xmin, 0), taps)
        x = np.abs(((np.arange(xsize) + xmin - center + 0.5) * invscale).astype(dtype))
        if cubic:
            a = dtype(-0.5)
            f = np.where(x < 1, _cubic1(x, a), np.where(x < 2, _cubic2(x, a), dtype(0)))
        else:
            f = np.where(x < 1, dtype(1) - x, dtype(0))
        f = f.astype(dtype)
        total = dtype(0)
        for v in f:  # CPU's running sum, in dtype
            total = dtype(total + v)
        if total != 0:
            f = (f / total).astype(dtype)
        w[i, :xsize] = f
        idx[i] = np.minimum(xmin + np.arange(taps), n_in - 1)
    return idx, w


def _noaa_uint8_taps(n_in, n_out, align_corners, scale, cubic):
    """(indices, float64 weights, largest partial weight), indices and weights (n_out,
    taps), of CPU's uint8 bilinear (bicubic, Keys' a = -0.75) interpolation without
    antialiasing along a dim (`_compute_indices_min_size_weights`): the float kernel's
    source index and taps, those past either edge of the input folded into the edge
    tap. The largest weight counts partial sums of a fold too, as CPU's does."""
    size = 4 if cubic else 2
    half = size // 2
    s = _scale_in(n_in, n_out, scale, align_corners, np.float64)
    idx = np.zeros((n_out, size), np.int64)
    w = np.zeros((n_out, size))
    wt_max = 0.0
    for i in range(n_out):
        src = s * i if align_corners else s * (i + 0.5) - 0.5
        if not (align_corners or cubic) and src < 0:
            src = 0.0
        index = min(int(np.floor(np.float32(src))), n_in - 1)  # CPU's floorf rounds src to float first
        lam = min(max(src - index, 0.0), 1.0)
        lo = index - half + 1
        start = max(lo, 0)
        count = min(max(min(index + half + 1, n_in) - start, 0), size)
        k = 0
        for j in range(size):
            t = abs((j + 1 - half) - lam)
            f = (_cubic1(t, -0.75) if t < 1 else _cubic2(t, -0.75) if t < 2 else 0.0) if cubic else max(1 - t, 0.0)
            if lo + j <= 0:
                k = 0
            elif lo + j >= n_in - 1:
                k = count - 1
            w[i, k] += f
            wt_max = max(wt_max, w[i, k])
            k += 1
        idx[i] = np.minimum(start + np.arange(size), n_in - 1)
    return idx, w, wt_max


def _resample(x, out_sizes, taps_fn, weight_dtype=None, skip_unchanged=False):
    """Separable resampling of the trailing dims, innermost first (CPU's nesting for
    bicubic, its horizontal-then-vertical passes for antialiasing): each output is
    sum_j x[idx[o, j]] * w[o, j], summed in tap order. `weight_dtype` rounds the
    weights first (CPU's forward kernels store them in the input's dtype);
    `skip_unchanged` copies a dim whose size does not change, whatever its scale, as
    CPU's separable (antialiasing) forward kernels do."""
    nsp = len(out_sizes)
    np_dtype = np.float64 if x.dtype == jnp.float64 else np.float32
    for i in reversed(range(nsp)):
        axis = x.ndim - nsp + i
        if skip_unchanged and x.shape[axis] == out_sizes[i]:
            continue
        idx, w = taps_fn(x.shape[axis], out_sizes[i], i, np_dtype)
        shape = [1] * x.ndim
        shape[axis] = -1
        w = jnp.asarray(w, weight_dtype or x.dtype).astype(x.dtype)
        out = None
        for j in range(idx.shape[1]):
            term = jnp.take(x, jnp.asarray(idx[:, j]), axis=axis) * w[:, j].reshape(shape)
            out = term if out is None else out + term
        x = out
    return x


def _resample_uint8(x, out_sizes, taps_fn):
    """CPU's uint8 resampling, separable (`_compute_index_ranges_int16_weights` and the
    uint8 passes, or their AVX2 twins): `taps_fn(n_in, n_out, i)` gives a dim's
    (indices, float64 weights, largest weight); the weights are scaled to int16 with
    the most precision bits that keep the largest below 2^15, each pass an int32 sum
    started at half a unit, shifted back, clamped to [0, 255] and stored as uint8
    before the next pass. A dim whose size does not change is copied."""
    nsp = len(out_sizes)
    for i in reversed(range(nsp)):
        axis = x.ndim - nsp + i
        if x.shape[axis] == out_sizes[i]:
            continue
        idx, w, wt_max = taps_fn(x.shape[axis], out_sizes[i], i)
        bits = 0
        while bits < 22 and int(0.5 + wt_max * (1 << (bits + 1))) < (1 << 15):
            bits += 1
        v = w * (1 << bits)
        w16 = np.where(v < 0, v - 0.5, v + 0.5).astype(np.int16).astype(np.int32)
        shape = [1] * x.ndim
        shape[axis] = -1
        acc = jnp.full((), 1 << (bits - 1), jnp.int32)
        for j in range(idx.shape[1]):
            term = jnp.take(x, jnp.asarray(idx[:, j]), axis=axis).astype(jnp.int32)
            acc = acc + term * jnp.asarray(w16[:, j]).reshape(shape)
        x = jnp.clip(acc >> bits, 0, 255).astype(jnp.uint8)
    return x


def _resample_lowerings(op, backward_op, kernel, taps, uint8_taps, half_kernel=None):
    """Forward and backward lowerings of a separable 2-d interpolation op; `taps(n_in,
    n_out, align_corners, scale, dtype)` gives one dim's indices and weights, and
    `uint8_taps(n_in, n_out, align_corners, scale)` those of CPU's uint8 kernel
    (`_resample_uint8`). `kernel` names the CPU kernel whose error other integer inputs
    raise; `half_kernel`, given for the antialiasing ops, the one half inputs raise
    (their forward kernels are CPU's separable ones)."""

    def fn(x, out_sizes, align_corners, scales, weight_dtype=None, skip_unchanged=False):
        return _resample(x, out_sizes, lambda n_in, n_out, i, dt: taps(n_in, n_out, align_corners, scales[i], dt),
                         weight_dtype, skip_unchanged)

    def forward(self, output_size, align_corners, *scales):
        out_sizes = context().out().shape[-2:]
        if self.dtype == jnp.uint8:
            return _resample_uint8(self, out_sizes,
                                   lambda n_in, n_out, i: uint8_taps(n_in, n_out, align_corners, scales[i]))
        _require_float(self, kernel)
        if half_kernel and self.dtype in (jnp.float16, jnp.bfloat16):  # CPU's antialiasing has no half kernels
            raise NotImplementedError(f'"{half_kernel}" not implemented for '
                                      f'\'{"Half" if self.dtype == jnp.float16 else "BFloat16"}\'')
        return fn(_acc(self), out_sizes, align_corners, scales, self.dtype, skip_unchanged=half_kernel is not None)

    def backward(grad_output, output_size, input_size, align_corners, *scales):
        """The transpose of the forward interpolation; for bicubic, whose CPU backward
        copies the gradient when no size changes, whatever the scales, that copy."""
        if half_kernel is None and tuple(output_size) == tuple(input_size[-2:]):
            return _acc(grad_output)
        zeros = jnp.zeros(input_size, acc_type(grad_output.dtype))
        return _transpose_of(lambda x: fn(x, output_size, align_corners, scales), zeros, grad_output)

    forward.__doc__ = f"aten::{op._schema.name.split('::')[1]}: CPU's weights and summation order ({taps.__name__})."
    lowering(op, static=("scales_h", "scales_w"))(forward)
    lowering(backward_op, static=("scales_h", "scales_w"))(backward)


def _aa_uint8_taps(cubic):
    def taps(n_in, n_out, align_corners, scale):
        idx, w = _aa_taps(n_in, n_out, align_corners, scale, np.float64, cubic)
        return idx, w, w.max()
    return taps


_resample_lowerings(aten.upsample_bicubic2d.default, aten.upsample_bicubic2d_backward.default,
                    "upsample_bicubic2d_out_frame", _cubic_taps, lambda *a: _noaa_uint8_taps(*a, cubic=True))
_resample_lowerings(aten._upsample_bilinear2d_aa.default, aten._upsample_bilinear2d_aa_backward.default,
                    "upsample_bilinear2d_aa", lambda *a: _aa_taps(*a, cubic=False), _aa_uint8_taps(False),
                    "compute_index_ranges_weights")
_resample_lowerings(aten._upsample_bicubic2d_aa.default, aten._upsample_bicubic2d_aa_backward.default,
                    "upsample_bicubic2d_aa", lambda *a: _aa_taps(*a, cubic=True), _aa_uint8_taps(True),
                    "compute_index_ranges_weights")


_NEAREST_UPSAMPLES = (aten.upsample_nearest1d.default, aten.upsample_nearest2d.default,
                      aten.upsample_nearest3d.default, aten._upsample_nearest_exact1d.default,
                      aten._upsample_nearest_exact2d.default, aten._upsample_nearest_exact3d.default)
_UPSAMPLES = _NEAREST_UPSAMPLES + (aten.upsample_linear1d.default, aten.upsample_bilinear2d.default,
                                   aten.upsample_trilinear3d.default, aten.upsample_bicubic2d.default,
                                   aten._upsample_bilinear2d_aa.default, aten._upsample_bicubic2d_aa.default)


def _nearest_upsample_meta(inner):
    """PyTorch's meta kernel of the nearest upsamplings hands `torch._check` the int of
    its "Non-empty" condition (`numel != 0 or prod(sizes[1:])`): TypeError for an empty
    batch, which CPU upsamples (to an empty batch). That kernel sees a batch of one."""
    def meta(input, output_size, *scales):
        if input.numel() or not math.prod(input.shape[1:]):
            return inner(input, output_size, *scales)
        one = torch.empty_strided((1, *input.shape[1:]), input.stride(), dtype=input.dtype, device=input.device)
        out = inner(one, output_size, *scales)
        return torch.empty_strided((0, *out.shape[1:]), out.stride(), dtype=out.dtype, device=out.device)
    return meta


for _op in _NEAREST_UPSAMPLES:
    meta_kernel(_op)(_nearest_upsample_meta(_python_meta(_op)))


@meta_check(*_UPSAMPLES)
def _upsample_sizes_meta_check(input, output_size, *_, **__):
    """CPU's upsample checks of an empty input (UpSample.h `upsample_Nd_common_check`, then
    the kernels' meta functions), in CPU's order and words: spatial sizes, then
    "Non-empty" for zero channels. PyTorch's meta kernels check in the other order, and
    the nearest ones raise TypeError (`_nearest_upsample_meta`)."""
    if input.numel():
        return
    nsp = len(output_size)
    sizes = list(input.shape[2:])
    if 0 in sizes or 0 in list(output_size):
        dims = "DHW"[-nsp:]
        raise RuntimeError("Input and output sizes should be greater than 0, but got input ("
                           + ", ".join(f"{d}: {n}" for d, n in zip(dims, sizes)) + ") output ("
                           + ", ".join(f"{d}: {n}" for d, n in zip(dims, output_size)) + ")")
    if not math.prod(input.shape[1:]):
        raise RuntimeError(f"Non-empty {input.dim()}D data tensor expected but got a tensor with sizes "
                           f"{list(input.shape)}")


# ------------------------------------------------------------------ attention
def _sdpa_key(philox_seed, philox_offset):
    return jax.random.wrap_key_data(jnp.stack([philox_seed, philox_offset]).astype(jnp.uint32))


@meta_layout(aten._scaled_dot_product_fused_attention_overrideable.default)
def _attention_layout(query, key, value, *args, **kwargs):
    """CPU's F.scaled_dot_product_attention takes its math path, whose output is
    contiguous, for inputs its flash kernel refuses: a last dim with a stride other
    than 1, or head sizes that differ. Its flash kernel's output is laid out like the
    query, as the meta kernel lays it out."""
    if any(t.stride(-1) != 1 for t in (query, key, value)) or not query.shape[-1] == key.shape[-1] == value.shape[-1]:
        return [torch.contiguous_format]
    return []


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


def _mask_bias(attn_mask, dtype):
    """An SDPA attn_mask as an additive float bias (a bool mask keeps True positions)."""
    if attn_mask is None:
        return None
    if attn_mask.dtype == jnp.bool_:
        return jnp.where(attn_mask, jnp.zeros((), dtype), jnp.full((), -jnp.inf, dtype))
    return attn_mask.astype(dtype)


@lowering(aten._scaled_dot_product_flash_attention_for_cpu.default, random=True, static=("dropout_p", "scale"))
def sdpa_flash_for_cpu(query, key, value, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    """aten::_scaled_dot_product_flash_attention_for_cpu (the op CPU's SDPA dispatches
    to; traced CPU graphs carry it): (output, logsumexp (B, H, L) float32), by the
    blocked attention kernel. torch._decomp's decomposition of it returns a logsumexp
    of the wrong shape, hence a lowering."""
    if not jnp.issubdtype(query.dtype, jnp.floating):
        raise RuntimeError("scaled_dot_product_attention_flash_attention: Expected data type in FP32, FP64, "
                           f"BF16, FP16, but got {scalar_type_name(query.dtype)} instead.")
    dtype = acc_type(query.dtype)
    rng = context().rng_key() if dropout_p else None
    out, lse = attention.forward(query.astype(dtype), key.astype(dtype), value.astype(dtype),
                                 _mask_bias(attn_mask, dtype), is_causal=is_causal, scale=scale,
                                 dropout_p=dropout_p, key=rng)
    return out.astype(query.dtype), lse.reshape(context().out(1).shape).astype(context().out_dtype(1))


@lowering(aten._scaled_dot_product_flash_attention_for_cpu_backward.default, static=("dropout_p", "scale"))
def sdpa_flash_for_cpu_backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, attn_mask=None,
                                scale=None):
    """aten::_scaled_dot_product_flash_attention_for_cpu_backward: (grad_query,
    grad_key, grad_value) from the saved logsumexp. The op carries no dropout seed, so
    a forward with dropout cannot be replayed: NotImplementedError."""
    if dropout_p:
        raise NotImplementedError("_scaled_dot_product_flash_attention_for_cpu_backward with dropout_p > 0 on neuron")
    dtype = acc_type(query.dtype)
    lse = logsumexp.astype(jnp.float32)
    if query.dtype == jnp.float64:  # the saved logsumexp is float32: recompute it (see sdpa_fused_backward)
        _, lse = attention.forward(query, key, value, _mask_bias(attn_mask, dtype), is_causal=is_causal, scale=scale)
    grads = attention.backward(grad_out.astype(dtype), query.astype(dtype), key.astype(dtype), value.astype(dtype),
                               _mask_bias(attn_mask, dtype), out.astype(dtype), lse, is_causal=is_causal,
                               scale=scale)
    return tuple(g.astype(query.dtype) for g in grads[:3])


def _replicate(x, padding):
    """ATen's replication padding of the last len(padding) // 2 dims (pairs from the
    last dim; negative pads crop) as a gather of clamped source indices."""
    for i in range(len(padding) // 2):
        axis = x.ndim - 1 - i
        n = x.shape[axis]
        idx = jnp.clip(jnp.arange(-padding[2 * i], n + padding[2 * i + 1]), 0, n - 1)
        x = jnp.take(x, idx, axis=axis)
    return x


def _reflect(x, padding):
    """ATen's reflection padding of the last len(padding) // 2 dims (pairs from the last
    dim; negative pads crop): source index |j| mirrored back from the far edge."""
    for i in range(len(padding) // 2):
        axis = x.ndim - 1 - i
        n = x.shape[axis]
        idx = jnp.abs(jnp.arange(-padding[2 * i], n + padding[2 * i + 1]))
        x = jnp.take(x, jnp.where(idx > n - 1, 2 * (n - 1) - idx, idx), axis=axis)
    return x


def _reflection_pad_meta(inner):
    """PyTorch's meta kernel of reflection_pad2d/3d (`inner`), except that CPU refuses an
    output only when it is empty in every padded dim: a crop to size 0 in one dim is an
    empty result (PyTorch's meta kernel needs every dim >= 1)."""
    def meta(input, padding):
        try:
            return inner(input, padding)
        except RuntimeError as exc:
            dims = len(padding) // 2
            sizes = [input.shape[-1 - i] + padding[2 * i] + padding[2 * i + 1] for i in range(dims)][::-1]
            if "Calculated output" not in str(exc) or min(sizes) < 0 or max(sizes) < 1:
                raise
            return input.new_empty((*input.shape[:input.dim() - dims], *sizes))
    return meta


for _op in (aten.reflection_pad2d.default, aten.reflection_pad3d.default):
    meta_kernel(_op)(_reflection_pad_meta(_python_meta(_op)))


@lowering(aten.replication_pad1d.default, aten.replication_pad2d.default, aten.replication_pad3d.default)
def replication_pad(self, padding):
    """aten::replication_pad{1,2,3}d: (*, *spatial) with each edge element repeated
    outward; the meta kernel makes CPU's checks."""
    return _replicate(self, padding)


@lowering(aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default)
def reflection_pad(self, padding):
    """aten::reflection_pad{1,2,3}d: (*, *spatial) mirrored about its edges (the edge
    itself not repeated); the meta kernel makes CPU's checks (pads below the size)."""
    return _reflect(self, padding)


@lowering(aten.replication_pad1d_backward.default, aten.replication_pad2d_backward.default,
          aten.replication_pad3d_backward.default)
def replication_pad_backward(grad_output, self, padding):
    """aten::replication_pad{1,2,3}d_backward: the transpose of replication padding (each
    edge element collects the gradients of its copies); self's shape and dtype."""
    return _transpose_of(lambda x: _replicate(x, padding), self, grad_output).astype(self.dtype)


@lowering(aten.reflection_pad1d_backward.default, aten.reflection_pad2d_backward.default,
          aten.reflection_pad3d_backward.default)
def reflection_pad_backward(grad_output, self, padding):
    """aten::reflection_pad{1,2,3}d_backward: the transpose of reflection padding (each
    element collects the gradients of its mirror images); self's shape and dtype. Lowered
    rather than left to PyTorch's decomposition, which a compiled graph would inline:
    the op then keeps CPU's layout there as in eager (`layouts._grad_input_layout`, a
    channels_last input's)."""
    return _transpose_of(lambda x: _reflect(x, padding), self, grad_output).astype(self.dtype)


# ------------------------------------------------------------------ CTC loss
def _ctc_check(log_probs, targets, input_lengths, target_lengths, blank):
    """CPU's checks of _ctc_loss's arguments (ctc_loss_allocate_outputs); the lengths
    are static lists, so these run at trace time."""
    t_max, batch, num_labels = log_probs.shape
    if not 0 <= blank < num_labels:
        raise RuntimeError("blank must be in label range")
    if len(input_lengths) != batch:
        raise RuntimeError("input_lengths must be of size batch_size")
    if len(target_lengths) != batch:
        raise RuntimeError("target_lengths must be of size batch_size")
    where = " (while checking arguments for ctc_loss_allocate_outputs)"
    max_target = max(target_lengths, default=0)
    if targets.ndim != 1 and targets.shape[1] < max_target:
        raise RuntimeError(f"Expected tensor to have size at least {max_target} at dimension 1, but got size "
                           f"{targets.shape[1]} for argument #2 'targets'{where}")
    for n in input_lengths:
        if n > t_max or n < 0:
            bound = f"at most {t_max}" if n > t_max else "at least 0"
            raise RuntimeError(f"Expected input_lengths to have value {bound}, but got value {n}{where}")
    for n in target_lengths:
        if n < 0:
            raise RuntimeError(f"Expected target_lengths to have value at least 0, but got value {n}{where}")


def _log_sum_exp(*terms):
    """CPU's log(sum exp(x - m)) + m with m the maximum (0 when all are -inf), written
    so that its JAX derivative is 0, not NaN, where every term is -inf."""
    m = functools.reduce(jnp.maximum, terms)
    m = jnp.where(m == -jnp.inf, 0, m)
    total = sum(jnp.exp(x - m) for x in terms)
    return jnp.where(total > 0, jnp.log(jnp.where(total > 0, total, 1)), -jnp.inf) + m


def _ctc_alpha(log_probs, targets, input_lengths, target_lengths, blank):
    """(neg_log_likelihood (N,), log_alpha (N, T, 2 S + 1)) by CPU's recursion (Graves
    et al. eq. 6-8, logsumexp with the maximum pulled out, -inf - -inf avoided).
    Entries CPU leaves unwritten (t >= input length, s > 2 target length) are -inf."""
    t_max, batch, _ = log_probs.shape
    s_max = max(target_lengths, default=0)
    width = 2 * s_max + 1
    dtype = log_probs.dtype
    neginf = jnp.asarray(-jnp.inf, dtype)
    # Per sample, the padded target (2-D targets) or its slice of the concatenation (1-D).
    rows, start = [], 0
    for b, n in enumerate(target_lengths):
        row = targets[b, :n] if targets.ndim == 2 else targets[start:start + n]
        start += n
        rows.append(jnp.pad(row.astype(jnp.int32), (0, s_max - n), constant_values=blank))
    tg = jnp.stack(rows) if rows else jnp.zeros((0, s_max), jnp.int32)
    ext = jnp.full((batch, width), blank, jnp.int32).at[:, 1::2].set(tg)  # l': blank, t1, blank, t2, ...
    s = jnp.arange(width)
    tl = jnp.asarray(target_lengths, jnp.int32).reshape(batch)
    il = jnp.asarray(input_lengths, jnp.int32).reshape(batch)
    valid_s = s[None, :] < (2 * tl + 1)[:, None]
    skip_ok = (s[None, :] > 1) & (ext != jnp.roll(ext, 2, axis=1))
    lp = jnp.moveaxis(log_probs, 1, 0)  # (N, T, C)
    emit = jnp.take_along_axis(lp, jnp.broadcast_to(ext[:, None, :], (batch, t_max, width)), axis=2)  # (N, T, W)
    first = jnp.where((s[None, :] == 0) | ((s[None, :] == 1) & (tl[:, None] > 0)), emit[:, 0], neginf)

    def step(alpha, t):
        la1 = alpha
        la2 = jnp.where(s[None, :] > 0, jnp.roll(alpha, 1, axis=1), neginf)
        la3 = jnp.where(skip_ok, jnp.roll(alpha, 2, axis=1), neginf)
        new = _log_sum_exp(la1, la2, la3) + emit[:, t]
        new = jnp.where(valid_s & (t < il)[:, None], new, neginf)
        return new, new

    if t_max > 1:
        _, rest = lax.scan(step, first, jnp.arange(1, t_max))
        log_alpha = jnp.concatenate([first[:, None], jnp.moveaxis(rest, 0, 1)], axis=1)
    else:
        log_alpha = first[:, None]
    last = jnp.take_along_axis(log_alpha, jnp.maximum(il - 1, 0)[:, None, None], axis=1)[:, 0]  # (N, W)
    l1 = jnp.take_along_axis(last, (2 * tl)[:, None], axis=1)[:, 0]
    l2 = jnp.take_along_axis(last, jnp.maximum(2 * tl - 1, 0)[:, None], axis=1)[:, 0]
    ll = jnp.where(tl == 0, last[:, 0], _log_sum_exp(l1, l2))
    ll = jnp.where(il == 0, jnp.where(tl == 0, 0, neginf), ll)
    return -ll, log_alpha


@lowering(aten._ctc_loss.default)
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    """aten::_ctc_loss: (neg_log_likelihood (N,), log_alpha (N, T, 2 S + 1)) of
    log_probs (T, N, C) with padded (N, S) or concatenated targets and static
    lengths, by CPU's alpha recursion (see `_ctc_alpha`); zero_infinity is applied
    by the ctc_loss wrapper, not here (as on CPU)."""
    _ctc_check(log_probs, targets, input_lengths, target_lengths, blank)
    return _ctc_alpha(log_probs, targets, input_lengths, target_lengths, blank)


# PyTorch has no meta kernel for it: the gradient has log_probs' shape and layout.
meta_impl("_ctc_loss_backward", lambda grad, log_probs, *args, **kwargs: torch.empty_like(log_probs))


@lowering(aten._ctc_loss_backward.default)
def ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha, blank,
                      zero_infinity=False):
    """aten::_ctc_loss_backward: CPU's gradient, which is for the logits of a
    log_softmax (exp(lp) - exp(log(alpha beta) + nll - lp)) times grad: here the JAX
    transpose of `_ctc_alpha`'s likelihood (the second term) plus exp(lp) * grad, zero
    after each input length; for infinite losses NaN as on CPU, or zero with
    zero_infinity."""
    il = jnp.asarray(input_lengths, jnp.int32).reshape(-1)
    nll, vjp = jax.vjp(lambda lp: _ctc_alpha(lp, targets, input_lengths, target_lengths, blank)[0], log_probs)
    g = grad.astype(log_probs.dtype)
    out = vjp(g)[0] + jnp.exp(log_probs) * g[None, :, None]
    live = jnp.arange(log_probs.shape[0])[:, None] < il[None, :]
    # No alignment (infinite loss): CPU's formula gives exp(-inf + inf) = NaN throughout.
    out = jnp.where(jnp.isinf(nll)[None, :, None], 0 if zero_infinity else jnp.nan, out)
    return jnp.where(live[..., None], out, 0).astype(log_probs.dtype)
