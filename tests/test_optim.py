"""Optimizers on `neuron` against CPU PyTorch: the `_foreach_*` ops, the fused Adam,
AdamW, SGD and Adagrad kernels (float and tensor lr), and several optimizer steps of
each flavour."""
import copy

import pytest
import torch

import torchneuron
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


def _lr(kind, like):
    """lr for a fused kernel call on `like`'s device: a float, a 0-dim CPU tensor (a host
    scalar on neuron), or a tensor on the params' device (0-dim or 1-element)."""
    if kind == "float":
        return 0.01
    if kind == "cpu_tensor":
        return torch.tensor(0.01)
    return torch.tensor(0.01 if kind == "tensor" else [0.01], device=like.device)


@pytest.mark.parametrize("kernel", [torch._fused_adam_, torch._fused_adamw_])
@pytest.mark.parametrize("amsgrad,maximize,scaled", [(False, False, False), (True, True, True)])
@pytest.mark.parametrize("lr", ["float", "cpu_tensor", "tensor", "tensor_1d"])
def test_fused_adam_kernels(kernel, amsgrad, maximize, scaled, lr):
    def f(p, g, m, v, vmax, steps, scale, inf):
        p, g, m, v, vmax = ([t.clone() for t in x] for x in (p, g, m, v, vmax))  # check() reuses the inputs
        kernel(p, g, m, v, vmax, steps, lr=_lr(lr, p[0]), beta1=0.9, beta2=0.99, weight_decay=0.1, eps=1e-8,
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("lr", ["float", "cpu_tensor", "tensor"])
@pytest.mark.parametrize("weight_decay,lr_decay,maximize,scaled",
                         [(0.0, 0.0, False, False), (0.1, 0.05, True, False), (0.05, 0.1, False, True)])
def test_fused_adagrad_kernel(dtype, lr, weight_decay, lr_decay, maximize, scaled):
    """Three steps of aten::_fused_adagrad_ (.default or .tensor_lr) against CPU's
    kernel: params, unscaled grads, state sums; then a found_inf step changing nothing."""
    def f(p, g, sums, steps, scale, inf):
        p, g, sums, steps = ([t.clone() for t in x] for x in (p, g, sums, steps))
        outs = []
        for _ in range(3):
            torch._foreach_add_(steps, 1)
            torch._fused_adagrad_(p, [t.clone() for t in g], sums, steps, lr=_lr(lr, p[0]), lr_decay=lr_decay,
                                  weight_decay=weight_decay, eps=1e-6, maximize=maximize, grad_scale=scale,
                                  found_inf=inf)
            outs.append([t.clone() for t in p + sums])
        g2 = [t.clone() for t in g]
        torch._fused_adagrad_(p, g2, sums, steps, lr=_lr(lr, p[0]), lr_decay=lr_decay, weight_decay=weight_decay,
                              eps=1e-6, maximize=maximize, grad_scale=scale,
                              found_inf=None if inf is None else inf + 1)
        return outs, p, sums, g2, steps

    torch.manual_seed(0)
    shapes = [(3, 40), (37,), ()]  # vector bodies and scalar tails of CPU's loops
    p = [torch.randn(s).to(dtype) for s in shapes]
    g = [torch.randn(s).to(dtype) for s in shapes]
    sums = [(torch.rand(s) * 0.1).to(dtype) for s in shapes]
    steps = [torch.tensor(float(i)) for i in range(len(shapes))]
    scale, inf = (torch.tensor(4.0), torch.tensor(0.0)) if scaled else (None, None)
    check(f, p, g, sums, steps, scale, inf)


def test_fused_adagrad_runs_natively():
    assert isinstance(install.KERNELS[aten._fused_adagrad_.default], executor.OpKernel)
    assert isinstance(install.KERNELS[aten._fused_adagrad_.tensor_lr], executor.OpKernel)
    p = [torch.randn(4, device="neuron")]
    before = dict(torchneuron.fallback_ops())
    torch._fused_adagrad_(p, [torch.randn(4, device="neuron")], [torch.zeros(4, device="neuron")],
                          [torch.ones((), device="neuron")], lr=0.1, lr_decay=0.0, weight_decay=0.0, eps=1e-10,
                          maximize=False)
    assert torchneuron.fallback_ops() == before


def _t(n=2, dtype=torch.float32):
    return [torch.randn(3).to(dtype) for _ in range(n)]


def _ones(n=2):
    return [torch.ones(()) for _ in range(n)]


_ADAM = dict(beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8, maximize=False)
_ADAGRAD = dict(lr_decay=0.0, weight_decay=0.0, eps=1e-8, maximize=False)
_SGD = dict(weight_decay=0.0, momentum=0.0, dampening=0.0, nesterov=False, maximize=False, is_first_step=False)
_FUSED_ERRORS = {
    "adam_lr_2_elements": (lambda: torch._fused_adamw_(_t(), _t(), _t(), _t(), [], _ones(), lr=torch.tensor([.1, .2]),
                                                       amsgrad=False, **_ADAM),
                           RuntimeError, "a Tensor with 2 elements cannot be converted to Scalar"),
    "adam_grads_short": (lambda: torch._fused_adam_(_t(), _t(1), _t(), _t(), [], _ones(), lr=torch.tensor(.1),
                                                    amsgrad=False, **_ADAM),
                         RuntimeError, r"Expected grads.size\(\) == n_tensors"),
    "adam_amsgrad_without_max": (lambda: torch._fused_adam_(_t(), _t(), _t(), _t(), [], _ones(), lr=0.1, amsgrad=True,
                                                            **_ADAM),
                                 RuntimeError, r"Expected max_exp_avg_sqs.size\(\) == n_tensors"),
    "adam_max_without_amsgrad": (lambda: torch._fused_adam_(_t(), _t(), _t(), _t(), _t(), _ones(), lr=0.1,
                                                            amsgrad=False, **_ADAM),
                                 RuntimeError, r"Expected max_exp_avg_sqs.empty\(\)"),
    "adam_int64": (lambda: torch._fused_adam_(*[_t(1, torch.int64)] * 4, [], _ones(1), lr=0.1, amsgrad=False, **_ADAM),
                   NotImplementedError, "\"fused_adam_kernel\" not implemented for 'Long'"),
    "adam_grad_scale_float64": (lambda: torch._fused_adam_(_t(), _t(), _t(), _t(), [], _ones(), lr=0.1, amsgrad=False,
                                                           grad_scale=torch.tensor(2.0, dtype=torch.float64), **_ADAM),
                                RuntimeError, "expected scalar type Float but found Double"),
    "adagrad_lr_2_elements": (lambda: torch._fused_adagrad_(_t(), _t(), _t(), _ones(), lr=torch.tensor([.1, .2]),
                                                            **_ADAGRAD),
                              RuntimeError, "a Tensor with 2 elements cannot be converted to Scalar"),
    "adagrad_sums_short": (lambda: torch._fused_adagrad_(_t(), _t(), _t(1), _ones(), lr=0.1, **_ADAGRAD),
                           RuntimeError, r"Expected state_sums.size\(\) == n_tensors"),
    "adagrad_steps_short": (lambda: torch._fused_adagrad_(_t(), _t(), _t(), _ones(1), lr=torch.tensor(.1),
                                                          **_ADAGRAD),
                            RuntimeError, r"Expected state_steps.size\(\) == n_tensors"),
    "adagrad_int64": (lambda: torch._fused_adagrad_(*[_t(1, torch.int64)] * 3, _ones(1), lr=0.1, **_ADAGRAD),
                      NotImplementedError, "\"fused_adagrad_kernel\" not implemented for 'Long'"),
    "adagrad_mixed_dtypes": (lambda: torch._fused_adagrad_(_t(1), _t(1, torch.float64), _t(1), _ones(1), lr=0.1,
                                                           **_ADAGRAD),
                             RuntimeError, "expected scalar type Float but found Double"),
    "adagrad_found_inf_float64": (lambda: torch._fused_adagrad_(_t(), _t(), _t(), _ones(), lr=0.1,
                                                                found_inf=torch.tensor(0.0, dtype=torch.float64),
                                                                **_ADAGRAD),
                                  RuntimeError, "expected scalar type Float but found Double"),
    "sgd_lr_2_elements": (lambda: torch._fused_sgd_(_t(), _t(), [], lr=torch.tensor([.1, .2]), **_SGD),
                          RuntimeError, "a Tensor with 2 elements cannot be converted to Scalar"),
    "sgd_buffers_without_momentum": (lambda: torch._fused_sgd_(_t(), _t(), _t(), lr=0.1, **_SGD),
                                     RuntimeError, r"Expected momentum_buffer_list.empty\(\)"),
    "sgd_grad_float64": (lambda: torch._fused_sgd_(_t(1), _t(1, torch.float64), [], lr=0.1, **_SGD),
                         RuntimeError, "expected scalar type Float but found Double"),
    "sgd_buffer_float16": (lambda: torch._fused_sgd_(_t(1), _t(1), _t(1, torch.float16), lr=0.1,
                                                     **{**_SGD, "momentum": 0.9}),
                           RuntimeError, "expected scalar type Float but found Half"),
    "sgd_grad_scale_float64": (lambda: torch._fused_sgd_(_t(), _t(), [], lr=0.1,
                                                         grad_scale=torch.tensor(2.0, dtype=torch.float64), **_SGD),
                               RuntimeError, "expected scalar type Float but found Double"),
    "sgd_found_inf_float16": (lambda: torch._fused_sgd_(_t(), _t(), [], lr=0.1,
                                                        found_inf=torch.tensor(0.0, dtype=torch.float16), **_SGD),
                              RuntimeError, "expected scalar type Float but found Half"),
    "sgd_int64": (lambda: torch._fused_sgd_(_t(1, torch.int64), _t(1, torch.int64), [], lr=0.1, **_SGD),
                  NotImplementedError, "\"fused_sgd_kernel\" not implemented for 'Long'"),
}


@pytest.mark.parametrize("case", list(_FUSED_ERRORS))
def test_fused_kernels_raise_cpus_errors(case):
    fn, exc, message = _FUSED_ERRORS[case]
    with pytest.raises(exc, match=message):
        fn()
    with pytest.raises(exc, match=message):
        with torch.device("neuron"):
            fn()


OPTIMIZERS = {
    "adamw": lambda params, **kw: torch.optim.AdamW(params, lr=0.01, weight_decay=0.1, **kw),
    "adam_amsgrad": lambda params, **kw: torch.optim.Adam(params, lr=0.01, weight_decay=0.1, amsgrad=True, **kw),
    "sgd_nesterov": lambda params, **kw: torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True,
                                                         weight_decay=0.01, **kw),
    "sgd_dampening": lambda params, **kw: torch.optim.SGD(params, lr=0.1, momentum=0.5, dampening=0.3, **kw),
    "adagrad": lambda params, **kw: torch.optim.Adagrad(params, lr=0.05, lr_decay=0.01, weight_decay=0.1,
                                                        initial_accumulator_value=0.1, **kw),
}


def _train(model, opt, model_n, opt_n, x, y, steps=3):
    """`steps` MSE training steps of the CPU model and its neuron copy, no CPU fallback."""
    with no_fallback():
        for _ in range(steps):
            for m, o, a, b in ((model, opt, x, y), (model_n, opt_n, x.to("neuron"), y.to("neuron"))):
                o.zero_grad()
                torch.nn.functional.mse_loss(m(a), b).backward()
                o.step()


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
    _train(model, opt, model_n, opt_n, x, y)
    for p, pn in zip(model.parameters(), model_n.parameters()):
        torch.testing.assert_close(pn.detach().cpu(), p.detach(), atol=1e-6, rtol=1e-5)
    step = opt_n.state[next(iter(model_n.parameters()))].get("step")
    if step is not None:  # foreach/for-loop keep the step count on the CPU, fused on the device
        assert step.device.type == ("neuron" if impl == "fused" else "cpu") and float(step) == 3


TENSOR_LR = {
    "adamw": lambda params, lr: torch.optim.AdamW(params, lr=lr, weight_decay=0.1, fused=True),
    "adam_amsgrad_maximize": lambda params, lr: torch.optim.Adam(params, lr=lr, weight_decay=0.1, amsgrad=True,
                                                                 maximize=True, fused=True),
    "adagrad": lambda params, lr: torch.optim.Adagrad(params, lr=lr, lr_decay=0.01, fused=True),
    "sgd": lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9, fused=True),
}


@pytest.mark.parametrize("lr_device", ["cpu", "neuron"])
@pytest.mark.parametrize("name", list(TENSOR_LR))
def test_fused_optimizers_with_tensor_lr_match_cpu(name, lr_device):
    """`fused=True` with lr=torch.tensor(...) (the kernels' .tensor_lr overloads), the lr
    on the CPU or on neuron, against CPU for three steps: params and optimizer state."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    model_n = copy.deepcopy(model).to("neuron")
    x, y = torch.randn(8, 5), torch.randn(8, 2)
    opt = TENSOR_LR[name](model.parameters(), torch.tensor(0.01))
    opt_n = TENSOR_LR[name](model_n.parameters(), torch.tensor(0.01, device=lr_device))
    _train(model, opt, model_n, opt_n, x, y)
    for p, pn in zip(model.parameters(), model_n.parameters()):
        torch.testing.assert_close(pn.detach().cpu(), p.detach(), atol=1e-6, rtol=1e-5)
        for key, value in opt.state[p].items():
            torch.testing.assert_close(opt_n.state[pn][key].cpu(), value, atol=1e-6, rtol=1e-5)


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


FUSED_KERNELS = {
    "adam": lambda p, g, m, v, steps, **kw: torch._fused_adam_(p, g, m, v, [], steps, lr=0.01, beta1=0.9, beta2=0.99,
                                                                weight_decay=0.1, eps=1e-8, amsgrad=False,
                                                                maximize=False, **kw),
    "adamw": lambda p, g, m, v, steps, **kw: torch._fused_adamw_(p, g, m, v, [], steps, lr=0.01, beta1=0.9,
                                                                  beta2=0.99, weight_decay=0.1, eps=1e-8,
                                                                  amsgrad=False, maximize=False, **kw),
    "sgd": lambda p, g, m, v, steps, **kw: torch._fused_sgd_(p, g, m, weight_decay=0.01, momentum=0.9, lr=0.1,
                                                              dampening=0.0, nesterov=False, maximize=False,
                                                              is_first_step=False, **kw),
    "adagrad": lambda p, g, m, v, steps, **kw: torch._fused_adagrad_(p, g, v, steps, lr=0.1, lr_decay=0.0,
                                                                      weight_decay=0.0, eps=1e-10, maximize=False,
                                                                      **kw),
}


@pytest.mark.parametrize("kernel", FUSED_KERNELS)
@pytest.mark.parametrize("found_inf,grad_scale", [([1.0, 0.0], None), ([0.0, 1.0], [4.0, 2.0]),
                                                  ([[0.0]], [[8.0]]), (None, [2.0, 0.5, 3.0])])
def test_fused_kernels_read_the_first_element_of_found_inf_and_grad_scale(kernel, found_inf, grad_scale):
    """ATen's fused CPU kernels read found_inf and grad_scale as *data_ptr<float>(): the
    first element of a tensor of any size (found_inf [1, 0] skips the step, [0, 1]
    takes it). neuron refused a 2-element found_inf (a reshape error)."""
    p, g, m, v, _, steps = _fused_state(amsgrad=False)
    outs = []
    for device in ("cpu", "neuron"):
        state = [[t.clone().to(device) for t in x] for x in (p, g, m, v, steps)]
        kw = {name: None if value is None else torch.tensor(value, device=device)
              for name, value in (("found_inf", found_inf), ("grad_scale", grad_scale))}
        with no_fallback():
            FUSED_KERNELS[kernel](*state, **kw)
        outs.append([[t.cpu() for t in x] for x in state])
    torch.testing.assert_close(outs[1], outs[0], atol=1e-6, rtol=1e-5)
