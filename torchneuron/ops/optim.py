"""Optimizer lowerings: the `_foreach_*` list ops torch.optim's foreach path uses, and
the fused Adam, AdamW, SGD and Adagrad kernels (`fused=True`).

Each `_foreach_<op>` applies the elementwise lowering of `aten.<op>` to every tensor of
the list inside one executable, with the output dtype PyTorch computed for that
element; in-place forms (`_foreach_add_`) derive from these as usual. Overloads whose
per-tensor lowering does not exist yet are left to PyTorch's composite kernel (a loop
of per-tensor ops, still native). The fused kernels follow ATen's CPU kernels
(FusedAdamKernel.cpp, FusedSGDKernel.cpp, FusedAdagradKernel.cpp) step for step:
scalar coefficients in float64, per-element math in float32 for half types (float64 for
float64). Each takes lr as a float (`.default`) or as a 1-element tensor (`.tensor_lr`,
torch.optim's `lr=torch.tensor(...)`), on the CPU (0-dim) or on `neuron`.
"""
import jax.numpy as jnp
import numpy as np
import torch

from ._common import acc_type, not_implemented_for, scalar_type_name, true_divide
from .registry import LOWERINGS, Context, context, lowering, meta_impl, tracing

aten = torch.ops.aten


def _each(fn, n, *lists):
    """[fn(*(l[i] for l in lists))] with each call traced against output i's spec.
    Arguments that are not lists (a scalar, a single tensor) are shared by all calls."""
    ctx = context()
    outs = []
    for i in range(n):
        args = [a[i] if isinstance(a, list) else a for a in lists]
        with tracing(Context(outs=[ctx.out(i)], checks=ctx.checks, scalar_args=ctx.scalar_args,
                             host_checks=ctx.host_checks)):
            outs.append(fn(*args))
    return outs


def _elementwise(op):
    low = LOWERINGS.get(op)
    return None if low is None else low.fn


_UNARY = ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor", "frac",
          "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign", "sin",
          "sinh", "sqrt", "tan", "tanh", "trunc"]


def _register_unary(name):
    fn = _elementwise(getattr(aten, name).default)
    if fn is None:
        return

    def lower(self):
        return _each(fn, len(self), self)

    lower.__doc__ = f"aten::_foreach_{name}: aten::{name} of each tensor of the list."
    lowering(getattr(aten, f"_foreach_{name}").default)(lower)


for _name in _UNARY:
    _register_unary(_name)

# _foreach_<name> -> the elementwise overloads computing one element, by foreach overload.
_BINARY = {
    "add": (aten.add.Tensor, True), "sub": (aten.sub.Tensor, True), "mul": (aten.mul.Tensor, False),
    "div": (aten.div.Tensor, False), "maximum": (aten.maximum.default, False),
    "minimum": (aten.minimum.default, False), "clamp_min": (aten.clamp_min.Tensor, False),
    "clamp_max": (aten.clamp_max.Tensor, False), "pow": (aten.pow.Tensor_Tensor, False),
}


def _register_binary(name, op, has_alpha):
    fn = _elementwise(op)
    if fn is None:
        return
    packet = getattr(aten, f"_foreach_{name}")

    def lower(self, other, alpha=1):
        # `other`: a list (List, ScalarList) or one Scalar/Tensor shared by all (Scalar, Tensor).
        return _each(fn, len(self), self, other, alpha) if has_alpha else _each(fn, len(self), self, other)

    lower.__doc__ = f"aten::_foreach_{name}: aten::{name} of each tensor with its own or a shared operand."
    for ov in ("List", "ScalarList", "Scalar", "Tensor"):
        if ov in packet.overloads():
            lowering(getattr(packet, ov))(lower)


for _name, (_op, _alpha) in _BINARY.items():
    _register_binary(_name, _op, _alpha)


@lowering(aten._foreach_pow.ScalarAndTensor)
def foreach_pow_scalar_and_tensor(self, exponent):
    """aten::_foreach_pow.ScalarAndTensor: self (a number) ** each exponent tensor."""
    return _each(LOWERINGS[aten.pow.Scalar].fn, len(exponent), self, exponent)


def _ternary(op, name):
    fn = LOWERINGS[op].fn

    def lower(self, tensor1, tensor2, value=1):
        return _each(fn, len(self), self, tensor1, tensor2, value)

    lower.__doc__ = f"aten::_foreach_{name}.Scalar/ScalarList: aten::{name} per tensor."
    packet = getattr(aten, f"_foreach_{name}")
    lowering(packet.Scalar, packet.ScalarList)(lower)


_ternary(aten.addcmul.default, "addcmul")
_ternary(aten.addcdiv.default, "addcdiv")


@lowering(aten._foreach_lerp.List)
def foreach_lerp(self, tensors1, weights):
    """aten::_foreach_lerp.List: self + weight * (end - self) per tensor (aten::lerp.Tensor)."""
    return _each(LOWERINGS[aten.lerp.Tensor].fn, len(self), self, tensors1, weights)


@lowering(aten._foreach_lerp.Scalar, aten._foreach_lerp.ScalarList)
def foreach_lerp_scalar(self, tensors1, weight):
    """aten::_foreach_lerp.Scalar/ScalarList: aten::lerp.Scalar per tensor, which reads
    its weight in the compute type (not rounded to a half type as lerp.Tensor's is)."""
    return _each(LOWERINGS[aten.lerp.Scalar].fn, len(self), self, tensors1, weight)


@lowering(aten._foreach_zero.default)
def foreach_zero(self):
    """aten::_foreach_zero (_foreach_zero_): zeros like each tensor."""
    return [jnp.zeros(t.shape, t.dtype) for t in self]


@lowering(aten._foreach_copy.default)
def foreach_copy(self, src, non_blocking=False):
    """aten::_foreach_copy (_foreach_copy_): each src broadcast and cast to self[i]."""
    ctx = context()
    return [jnp.broadcast_to(s.astype(ctx.out(i).dtype), ctx.out(i).shape) for i, s in enumerate(src)]


def _vector_norm(x, ord):
    """linalg.vector_norm of all elements of x (float types) for ord 2, 1, inf, -inf, 0, p."""
    a = jnp.abs(x.astype(acc_type(x.dtype)))
    if x.size == 0:
        return jnp.zeros((), a.dtype)
    if ord == 2:
        return jnp.sqrt(jnp.sum(a * a))
    if ord == 1:
        return jnp.sum(a)
    if ord == float("inf"):
        return jnp.max(a)
    if ord == float("-inf"):
        return jnp.min(a)
    if ord == 0:
        return jnp.sum(a != 0).astype(a.dtype)
    return jnp.sum(a ** ord) ** (1.0 / ord)


@lowering(aten._foreach_norm.Scalar, static=("ord",))
def foreach_norm(self, ord=2, dtype=None):
    """aten::_foreach_norm.Scalar: the vector `ord`-norm of each tensor, 0-dim each
    (computed in float32 for half types, returned in the dtype PyTorch chose)."""
    return [_vector_norm(t, ord) for t in self]


@lowering(aten._foreach_max.default)
def foreach_max(self):
    """aten::_foreach_max: the max of each (non-empty) tensor; NaN propagates."""
    return [jnp.max(t) for t in self]


# ------------------------------------------------------------------ fused optimizers
def _opmath(x):
    return x.astype(acc_type(x.dtype))


def _pointee(t):
    """`*t.data_ptr<float>()`, how ATen's fused CPU kernels read grad_scale and
    found_inf: the first element, whatever the tensor's size (a 2-element found_inf
    skips the step when its first element is 1). An empty tensor (CPU reads memory it
    does not own) raises IndexError."""
    return t.reshape(-1)[0]


def _skip_if_inf(found_inf, new, old):
    """ATen's fused kernels do nothing when found_inf == 1 (an AMP overflow step)."""
    if found_inf is None:
        return new
    skip = _pointee(found_inf) == 1
    return [jnp.where(skip, o, n) for n, o in zip(new, old)]


def _unscale(grads, grad_scale):
    """Grads divided by grad_scale in opmath (written back to the grads, as on CPU)."""
    g = [_opmath(x) for x in grads]
    if grad_scale is None:
        return g
    return [true_divide(x, _pointee(grad_scale).astype(x.dtype)) for x in g]


def _require(ok, what):
    """ATen's TORCH_CHECK(cond) with no message, as the fused CPU kernels word it."""
    if not ok:
        raise RuntimeError(f"Expected {what} to be true, but got false.  (Could this error message be improved?  "
                           "If so, please report an enhancement request to PyTorch.)")


def _check_lr(lr):
    """A tensor lr is read with lr.item() (CPU, and CUDA for a CPU lr): one element."""
    if isinstance(lr, torch.Tensor) and lr.numel() != 1:
        raise RuntimeError(f"a Tensor with {lr.numel()} elements cannot be converted to Scalar")


def _check_float_ptrs(*tensors):
    """grad_scale and found_inf are read through data_ptr<float>(): float32 only."""
    for t in tensors:
        if t is not None and t.dtype != torch.float32:
            raise RuntimeError(f"expected scalar type Float but found {scalar_type_name(t.dtype)}")


_FUSED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _check_dtypes(kernel, self, *lists):
    """Per param, CPU's AT_DISPATCH_FLOATING_TYPES_AND2(BFloat16, Half) of `kernel` on
    its dtype, then data_ptr<scalar_t>() of its state and grad (`lists`, empty ones
    skipped): the same dtype."""
    for i, p in enumerate(self):
        if p.dtype not in _FUSED_DTYPES:
            raise not_implemented_for(kernel, p.dtype)
        for lst in lists:
            if lst and lst[i].dtype != p.dtype:
                raise RuntimeError(f"expected scalar type {scalar_type_name(p.dtype)} but found "
                                   f"{scalar_type_name(lst[i].dtype)}")


def _check_arguments(lr, grad_scale, found_inf, n, **lists) -> None:
    """The fused kernels' first checks, in their order: lr, grad_scale/found_inf, then
    each named tensor list holds `n` tensors."""
    _check_lr(lr)
    _check_float_ptrs(grad_scale, found_inf)
    for name, tensors in lists.items():
        _require(len(tensors) == n, f"{name}.size() == n_tensors")


def _fused_adam_meta(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *args, lr=None,
                     amsgrad=False, grad_scale=None, found_inf=None, **kwargs):
    """Meta kernel of aten::_fused_adam_/_fused_adamw_ (.default and .tensor_lr, which
    ATen has none for): the checks of the CPU kernel (FusedAdam.cpp) in its order. (CPU
    skips the list checks when found_inf is 1, a value a meta kernel cannot read.)"""
    n = len(self)
    _check_arguments(lr, grad_scale, found_inf, n, grads=grads, exp_avgs=exp_avgs, exp_avg_sqs=exp_avg_sqs)
    if amsgrad:
        _require(len(max_exp_avg_sqs) == n, "max_exp_avg_sqs.size() == n_tensors")
    else:
        _require(len(max_exp_avg_sqs) == 0, "max_exp_avg_sqs.empty()")
    _require(len(state_steps) == n, "state_steps.size() == n_tensors")
    _check_dtypes("fused_adam_kernel", self, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, grads)


for _ov in (aten._fused_adam_.default, aten._fused_adam_.tensor_lr, aten._fused_adamw_.default,
            aten._fused_adamw_.tensor_lr):
    meta_impl(_ov, _fused_adam_meta)


def _adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2, weight_decay, eps,
          amsgrad, maximize, grad_scale, found_inf, adamw):
    grads_unscaled = _unscale(grads, grad_scale)
    lr = jnp.asarray(lr, jnp.float64).reshape(())
    new_p, new_m, new_v, new_vmax = [], [], [], []
    for i, p in enumerate(self):
        op = acc_type(p.dtype)
        step = state_steps[i].reshape(()).astype(jnp.float64)
        bc1 = 1 - jnp.power(jnp.float64(beta1), step)
        bc2_sqrt = jnp.sqrt(1 - jnp.power(jnp.float64(beta2), step))
        step_size = lr / bc1
        g = grads_unscaled[i]
        if maximize:
            g = -g
        param = _opmath(p)
        if weight_decay != 0:
            if adamw:
                param = param * (1 - lr * weight_decay).astype(op)
            else:
                g = g + param * jnp.asarray(weight_decay, op)
        m = _opmath(exp_avgs[i])
        w = 1 - beta1  # exp_avg.lerp_(grad, 1 - beta1), ATen's two-sided lerp
        if abs(w) < 0.5:
            m = m + np.asarray(w, op) * (g - m)
        else:
            m = g - (g - m) * np.asarray(1 - w, op)
        v = _opmath(exp_avg_sqs[i]) * np.asarray(beta2, op) + np.asarray(1 - beta2, op) * g * g
        if amsgrad:
            v_hat = jnp.maximum(_opmath(max_exp_avg_sqs[i]), v)
            new_vmax.append(v_hat)
        else:
            v_hat = v
        denom = true_divide(jnp.sqrt(v_hat), bc2_sqrt.astype(op)) + np.asarray(eps, op)
        new_p.append(param - step_size.astype(op) * m / denom)
        new_m.append(m)
        new_v.append(v)
    updates = {
        "self": _skip_if_inf(found_inf, new_p, self),
        "grads": _skip_if_inf(found_inf, grads_unscaled, grads),
        "exp_avgs": _skip_if_inf(found_inf, new_m, exp_avgs),
        "exp_avg_sqs": _skip_if_inf(found_inf, new_v, exp_avg_sqs),
        "max_exp_avg_sqs": _skip_if_inf(found_inf, new_vmax, max_exp_avg_sqs) if amsgrad else max_exp_avg_sqs,
    }
    return (), updates


_ADAM_STATIC = ("beta1", "beta2", "weight_decay", "eps")


@lowering(aten._fused_adam_.default, aten._fused_adam_.tensor_lr, mutates=True, static=_ADAM_STATIC)
def fused_adam_(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2, weight_decay,
                eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    """aten::_fused_adam_ (.default, .tensor_lr): one Adam step (L2 weight decay) over
    lists of params and their state, in place. Lists of n tensors, each state tensor
    (and grad) of its param's shape and dtype (float32/64, bfloat16, float16);
    max_exp_avg_sqs empty unless amsgrad; state_steps[i] a 1-element tensor (already
    incremented) driving the bias corrections; lr a float or a 1-element tensor (read
    in float64, as CPU's lr.item<double>()); grad_scale/found_inf 1-element float32."""
    return _adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2, weight_decay,
                 eps, amsgrad, maximize, grad_scale, found_inf, adamw=False)


@lowering(aten._fused_adamw_.default, aten._fused_adamw_.tensor_lr, mutates=True, static=_ADAM_STATIC)
def fused_adamw_(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2, weight_decay,
                 eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    """aten::_fused_adamw_ (.default, .tensor_lr): one AdamW step (decoupled weight
    decay), in place; arguments as in `fused_adam_`."""
    return _adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2, weight_decay,
                 eps, amsgrad, maximize, grad_scale, found_inf, adamw=True)


def _fused_sgd_meta(self, grads, momentum_buffer_list, weight_decay, momentum, *args, lr=None, **kwargs):
    """Meta kernel of aten::_fused_sgd_ (.default and .tensor_lr; ATen has none): the
    checks of the CPU kernel (FusedSGD.cpp) in its order."""
    _check_arguments(lr, kwargs.get("grad_scale"), kwargs.get("found_inf"), len(self), grads=grads)
    if momentum != 0:
        _require(len(momentum_buffer_list) == len(self), "momentum_buffer_list.size() == n_tensors")
    else:
        _require(len(momentum_buffer_list) == 0, "momentum_buffer_list.empty()")
    _check_dtypes("fused_sgd_kernel", self, grads, momentum_buffer_list)


for _ov in (aten._fused_sgd_.default, aten._fused_sgd_.tensor_lr):
    meta_impl(_ov, _fused_sgd_meta)


def _decayed(grad, param, maximize: bool, weight_decay: float, op):
    """The gradient as the fused SGD and Adagrad kernels step along it (in opmath type
    `op`): negated under maximize, plus weight_decay * param."""
    g = -grad if maximize else grad
    return g + param * np.asarray(weight_decay, op) if weight_decay != 0 else g


@lowering(aten._fused_sgd_.default, aten._fused_sgd_.tensor_lr, mutates=True,
          static=("weight_decay", "momentum", "dampening"))
def fused_sgd_(self, grads, momentum_buffer_list, weight_decay, momentum, lr, dampening, nesterov, maximize,
               is_first_step, grad_scale=None, found_inf=None):
    """aten::_fused_sgd_: one SGD step (weight decay, momentum with dampening,
    Nesterov, maximize) in place; momentum_buffer_list is empty when momentum == 0."""
    grads_unscaled = _unscale(grads, grad_scale)
    lr = jnp.asarray(lr, jnp.float64).reshape(())
    new_p, new_buf = [], []
    for i, p in enumerate(self):
        op = acc_type(p.dtype)
        param = _opmath(p)
        g = _decayed(grads_unscaled[i], param, maximize, weight_decay, op)
        if momentum != 0:
            if is_first_step:
                buf = g
            else:
                buf = _opmath(momentum_buffer_list[i]) * np.asarray(momentum, op) + g * np.asarray(1 - dampening, op)
            new_buf.append(buf)
            g = g + buf * np.asarray(momentum, op) if nesterov else buf
        new_p.append(param - g * lr.astype(op))
    updates = {
        "self": _skip_if_inf(found_inf, new_p, self),
        "grads": _skip_if_inf(found_inf, grads_unscaled, grads),
        "momentum_buffer_list": _skip_if_inf(found_inf, new_buf, momentum_buffer_list),
    }
    return (), updates


def _fused_adagrad_meta(self, grads, state_sums, state_steps, *args, lr=None, grad_scale=None, found_inf=None,
                        **kwargs):
    """Meta kernel of aten::_fused_adagrad_ (.default and .tensor_lr; ATen has none):
    the checks of the CPU kernel (FusedAdagrad.cpp) in its order."""
    _check_arguments(lr, grad_scale, found_inf, len(self), grads=grads, state_sums=state_sums,
                     state_steps=state_steps)
    _check_dtypes("fused_adagrad_kernel", self, grads, state_sums)


for _ov in (aten._fused_adagrad_.default, aten._fused_adagrad_.tensor_lr):
    meta_impl(_ov, _fused_adagrad_meta)


@lowering(aten._fused_adagrad_.default, aten._fused_adagrad_.tensor_lr, mutates=True,
          static=("lr_decay", "weight_decay", "eps"))
def fused_adagrad_(self, grads, state_sums, state_steps, lr, lr_decay, weight_decay, eps, maximize, grad_scale=None,
                   found_inf=None):
    """aten::_fused_adagrad_ (.default, .tensor_lr): one Adagrad step in place, as ATen's
    CPU kernel (FusedAdagradKernel.cpp). Lists of n tensors: params, grads and
    state_sums of one shape and dtype per i (float32/64, bfloat16, float16);
    state_steps[i] a 1-element tensor (already incremented), read as a float32;
    lr a float or a 1-element tensor; grad_scale/found_inf 1-element float32.

    clr = lr / (1 + (step - 1) * lr_decay) in float64, then per element in the opmath
    type (float32 for half types, every constant in it): g = grad / grad_scale
    (written back to the grads), negated under maximize, plus weight_decay * param;
    state_sum += g * g; param -= clr * g / (sqrt(state_sum) + eps). found_inf == 1
    leaves everything as it was. (CPU's build contracts `g + param * weight_decay` and
    `state_sum + g * g` into fused multiply-adds, as XLA's CPU backend does: results
    are CPU's bitwise there; a backend that does not contract them can differ by an
    ulp in float32/float64.)"""
    grads_unscaled = _unscale(grads, grad_scale)
    lr = jnp.asarray(lr, jnp.float64).reshape(())
    new_p, new_sum = [], []
    for i, p in enumerate(self):
        op = acc_type(p.dtype)
        step = state_steps[i].reshape(()).astype(jnp.float32).astype(jnp.float64)  # state_step.item<float>()
        clr = (lr / (1 + (step - 1) * lr_decay)).astype(op)
        param = _opmath(p)
        g = _decayed(grads_unscaled[i], param, maximize, weight_decay, op)
        s = _opmath(state_sums[i]) + g * g
        new_p.append(param - clr * g / (jnp.sqrt(s) + np.asarray(eps, op)))
        new_sum.append(s)
    updates = {
        "self": _skip_if_inf(found_inf, new_p, self),
        "grads": _skip_if_inf(found_inf, grads_unscaled, grads),
        "state_sums": _skip_if_inf(found_inf, new_sum, state_sums),
        "state_steps": state_steps,  # written per .default's schema (Tensor(d!)[]), never changed
    }
    return (), updates
