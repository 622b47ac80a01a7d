"""Optimizers on `neuron` against CPU PyTorch: the `_foreach_*` ops, the fused Adam,
AdamW and SGD kernels, and several optimizer steps of each flavour."""
import copy

import pytest
import torch

from helpers import check, no_fallback
from torchneuron.eager import executor, install

aten = torch.ops.aten


def _lists(dtype=torch.float32):
    """Tensor lists of mixed shapes, 0-dim and empty included."""
    shapes = [(3, 4), (5,), (), (0, 2)]
    make = (lambda s: torch.randn(s, dtype=dtype)) if dtype.is_floating_point else \
        (lambda s: torch.randint(1, 9, s, dtype=dtype))
    return [make(s) for s in shapes], [make(s) for s in shapes], [make(s).abs() + 1 for s in shapes]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_foreach_binary(dtype):
    a, b, c = _lists(dtype)
    tol = dict(atol=1e-2, rtol=1e-2) if dtype == torch.bfloat16 else {}
    check(lambda x, y: torch._foreach_add(x, y, alpha=2), a, b, **tol)
    check(lambda x: torch._foreach_mul(x, 3), a, **tol)
    check(lambda x: torch._foreach_sub(x, [1, 2, 3, 4]), a, **tol)
    check(lambda x, y: torch._foreach_maximum(x, y), a, b, **tol)
    check(lambda x, t: torch._foreach_mul(x, t), a, torch.tensor(2.5) if dtype.is_floating_point else
          torch.tensor(2), **tol)
    if dtype.is_floating_point:
        check(lambda x, y: torch._foreach_div(x, y), a, c, **tol)
        check(lambda x: torch._foreach_pow(x, 2.0), a, **tol)
        check(lambda x: torch._foreach_pow(2.0, x), a, **tol)
        check(lambda x: torch._foreach_clamp_min(x, 0.1), a, **tol)
        check(lambda x: torch._foreach_clamp_max(x, [0.1, 0.2, 0.3, 0.4]), a, **tol)


def test_foreach_unary_ternary_and_reductions():
    a, b, c = _lists()
    for fn in (torch._foreach_sqrt, torch._foreach_neg, torch._foreach_abs, torch._foreach_exp,
               torch._foreach_sign, torch._foreach_reciprocal):
        check(fn, c if fn is torch._foreach_sqrt else a, atol=1e-6, rtol=1e-5)
    check(lambda x, y, z: torch._foreach_addcmul(x, y, z, value=0.5), a, b, c, atol=1e-6, rtol=1e-5)
    check(lambda x, y, z: torch._foreach_addcdiv(x, y, z, [0.1, 0.2, 0.3, 0.4]), a, b, c, atol=1e-6, rtol=1e-5)
    check(lambda x, y: torch._foreach_lerp(x, y, 0.3), a, b, atol=1e-6, rtol=1e-5)
    check(lambda x, y, z: torch._foreach_lerp(x, y, z), a, b, [t / 10 for t in c], atol=1e-6, rtol=1e-5)
    for ord in (2, 1, 0, 3):
        check(lambda x: torch._foreach_norm(x, ord), a, atol=1e-5, rtol=1e-5)
    check(lambda x: torch._foreach_norm(x, float("inf")), a[:3])  # empty tensors have no inf-norm
    check(lambda x: torch._foreach_norm(x), [t.bfloat16() for t in a], atol=1e-2, rtol=1e-2)
    check(torch._foreach_max, a[:3])


def test_foreach_inplace_and_noncontiguous():
    a, b, c = _lists()

    def f(x, y, z):
        x, y = [t.clone() for t in x], [t.clone() for t in y]
        torch._foreach_add_(x, y, alpha=-1)
        torch._foreach_addcdiv_(x, y, z, value=2)
        torch._foreach_copy_(x[:2], [z[0], z[1]])
        torch._foreach_zero_(x[2:])
        view = [y[0].t(), y[1][::2]]
        torch._foreach_mul_(view, 2)
        return x, y

    check(f, a, b, c, atol=1e-6, rtol=1e-5)
    assert isinstance(install.KERNELS[aten._foreach_addcdiv_.Scalar], executor.OpKernel)


def _fused_state(n_tensors=3, amsgrad=True):
    torch.manual_seed(0)
    shapes = [(3, 4), (5,), ()][:n_tensors]
    p = [torch.randn(s) for s in shapes]
    g = [torch.randn(s) for s in shapes]
    m = [torch.randn(s) * 0.1 for s in shapes]
    v = [torch.rand(s) * 0.1 for s in shapes]
    vmax = [t + 0.05 for t in v] if amsgrad else []
    steps = [torch.tensor(float(i + 3)) for i in range(len(shapes))]
    return p, g, m, v, vmax, steps


@pytest.mark.parametrize("kernel", [torch._fused_adam_, torch._fused_adamw_])
@pytest.mark.parametrize("amsgrad,maximize,scaled", [(False, False, False), (True, True, True)])
def test_fused_adam_kernels(kernel, amsgrad, maximize, scaled):
    def f(p, g, m, v, vmax, steps, scale, inf):
        p, g, m, v, vmax = ([t.clone() for t in x] for x in (p, g, m, v, vmax))  # check() reuses the inputs
        kernel(p, g, m, v, vmax, steps, lr=0.01, beta1=0.9, beta2=0.99, weight_decay=0.1, eps=1e-8,
               amsgrad=amsgrad, maximize=maximize, grad_scale=scale, found_inf=inf)
        return p, g, m, v, vmax

    state = _fused_state(amsgrad=amsgrad)
    scale, inf = (torch.tensor(4.0), torch.tensor(0.0)) if scaled else (None, None)
    check(f, *state, scale, inf, atol=1e-6, rtol=1e-5)
    if scaled:  # found_inf == 1 skips the step, grads still unscaled as on CPU
        check(f, *state, scale, torch.tensor(1.0), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("momentum,nesterov,first", [(0.0, False, False), (0.9, True, False), (0.5, False, True)])
def test_fused_sgd_kernel(momentum, nesterov, first):
    def f(p, g, bufs):
        p, g, bufs = ([t.clone() for t in x] for x in (p, g, bufs))
        torch._fused_sgd_(p, g, bufs, weight_decay=0.01, momentum=momentum, lr=0.1, dampening=0.2,
                          nesterov=nesterov, maximize=False, is_first_step=first)
        return p, bufs

    p, g, m, *_ = _fused_state()
    check(f, p, g, m if momentum else [], atol=1e-6, rtol=1e-5)


OPTIMIZERS = {
    "adamw": lambda params, **kw: torch.optim.AdamW(params, lr=0.01, weight_decay=0.1, **kw),
    "adam_amsgrad": lambda params, **kw: torch.optim.Adam(params, lr=0.01, weight_decay=0.1, amsgrad=True, **kw),
    "sgd_nesterov": lambda params, **kw: torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True,
                                                         weight_decay=0.01, **kw),
    "sgd_dampening": lambda params, **kw: torch.optim.SGD(params, lr=0.1, momentum=0.5, dampening=0.3, **kw),
}


@pytest.mark.parametrize("impl", ["for_loop", "foreach", "fused", "default"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_steps_match_cpu(name, impl):
    kw = {"for_loop": dict(foreach=False), "foreach": dict(foreach=True), "fused": dict(fused=True),
          "default": {}}[impl]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    model_n = copy.deepcopy(model).to("neuron")
    x, y = torch.randn(8, 5), torch.randn(8, 2)
    opt, opt_n = OPTIMIZERS[name](model.parameters(), **kw), OPTIMIZERS[name](model_n.parameters(), **kw)
    with no_fallback():
        for _ in range(3):
            for m, o, a, b in ((model, opt, x, y), (model_n, opt_n, x.to("neuron"), y.to("neuron"))):
                o.zero_grad()
                torch.nn.functional.mse_loss(m(a), b).backward()
                o.step()
    for p, pn in zip(model.parameters(), model_n.parameters()):
        torch.testing.assert_close(pn.detach().cpu(), p.detach(), atol=1e-6, rtol=1e-5)
    step = opt_n.state[next(iter(model_n.parameters()))].get("step")
    if step is not None:  # foreach/for-loop keep the step count on the CPU, fused on the device
        assert step.device.type == ("neuron" if impl == "fused" else "cpu") and float(step) == 3


def test_default_is_foreach_and_capturable_works():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    model_n = copy.deepcopy(model).to("neuron")
    opt = torch.optim.Adam(model.parameters(), lr=0.01, capturable=False)
    opt_n = torch.optim.Adam(model_n.parameters(), lr=0.01, capturable=True)
    x = torch.randn(6, 4)
    with no_fallback():
        for _ in range(2):
            for m, o, a in ((model, opt, x), (model_n, opt_n, x.to("neuron"))):
                o.zero_grad(set_to_none=False)
                m(a).square().mean().backward()
                torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
                o.step()
    for p, pn in zip(model.parameters(), model_n.parameters()):
        torch.testing.assert_close(pn.detach().cpu(), p.detach(), atol=1e-6, rtol=1e-5)
    assert len(install.KERNELS[aten._foreach_addcdiv_.Scalar].cache) or \
        len(install.KERNELS[aten._foreach_div_.List].cache)
