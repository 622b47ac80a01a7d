"""The `torchneuron.kernel` decorator: user JAX kernels as PyTorch operators in eager
and compiled code, with jax.vjp or user-registered backward, mutation and errors,
compared with the same computation written in PyTorch on CPU."""
import jax
import jax.numpy as jnp
import pytest
import torch
from jax.experimental import pallas as pl

import torchneuron
from helpers import no_fallback, to_neuron
from torchneuron import metrics
from torchneuron.eager import install  # noqa: F401  (registers the device kernels)


@torchneuron.kernel("kt::gated")
def gated(x, y, alpha: float = 2.0):
    return jnp.tanh(x) * jax.nn.sigmoid(y) * alpha


def gated_ref(x, y, alpha=2.0):
    return torch.tanh(x) * torch.sigmoid(y) * alpha


@torchneuron.kernel("kt::split_norm")
def split_norm(x) -> tuple[torch.Tensor, torch.Tensor]:
    n = jnp.sqrt(jnp.sum(x * x, -1, keepdims=True))
    return x / n, n[..., 0]


def split_norm_ref(x):
    n = x.norm(dim=-1, keepdim=True)
    return x / n, n[..., 0]


@torchneuron.kernel("kt::clipped_square", dtypes=(torch.float32, torch.float64))
def clipped_square(x):
    return x * x


# A custom backward: a straight-through estimator (gradient 1 instead of the true 2x).
def _ste_backward(ctx, grad):
    return grad


clipped_square.register_autograd(_ste_backward)


def _axpy_block(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] * 2 + y_ref[...]


@torchneuron.kernel("kt::pallas_axpy")
def pallas_axpy(x, y):
    """A Pallas kernel (interpret mode: XLA:CPU has no Pallas backend)."""
    return pl.pallas_call(_axpy_block, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x, y)


@torchneuron.kernel("kt::ema_", mutates_args=("avg",))
def ema_(avg, x, decay: float = 0.9):
    return None, {"avg": avg * decay + x * (1 - decay)}


@torchneuron.kernel("kt::accumulate", mutates_args=("acc",))
def accumulate(acc, x) -> torch.Tensor:
    return x * 2, {"acc": acc + x}


def _pair(seed=0, shape=(3, 5)):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g), torch.randn(shape, generator=g)


def _grads(fn, *args):
    args = [a.detach().requires_grad_() for a in args]
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    sum(o.sin().sum() for o in outs).backward()
    return [o.detach().cpu() for o in outs], [a.grad.cpu() for a in args]


@pytest.mark.parametrize("compiled", [False, True])
def test_user_kernel_forward_and_vjp_gradients(compiled):
    x, y = _pair()

    def f(a, b):
        return gated(a, b, 0.5) + 1

    def f_ref(a, b):
        return gated_ref(a, b, 0.5) + 1

    run = torch.compile(f, backend="neuron", fullgraph=True) if compiled else f
    with no_fallback():
        got = _grads(run, *to_neuron([x, y]))
    expected = _grads(f_ref, x, y)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("compiled", [False, True])
def test_user_kernel_multiple_outputs(compiled):
    x = _pair(1, (4, 6))[0]
    run = torch.compile(split_norm, backend="neuron", fullgraph=True) if compiled else split_norm
    with no_fallback():
        got = _grads(run, to_neuron(x))
    torch.testing.assert_close(got, _grads(split_norm_ref, x))


def test_compiled_kernel_is_inlined_in_the_graph():
    """One compiled graph runs the kernel: no graph break, no eager call of the op."""
    x, y = to_neuron(_pair(2))
    torch._dynamo.reset()
    eager_runs = sum(e.runs for e in install.KERNELS[gated._opoverload].cache.values())
    before = metrics.get("graph_executions")
    out = torch.compile(lambda a, b: gated(a, b).exp(), backend="neuron", fullgraph=True)(x, y)
    assert metrics.get("graph_executions") == before + 1
    assert sum(e.runs for e in install.KERNELS[gated._opoverload].cache.values()) == eager_runs
    torch.testing.assert_close(out.cpu(), gated_ref(*_pair(2)).exp())


@pytest.mark.parametrize("compiled", [False, True])
def test_user_registered_backward(compiled):
    x = _pair(3)[0]
    run = torch.compile(clipped_square, backend="neuron", fullgraph=True) if compiled else clipped_square
    xn = to_neuron(x).requires_grad_()
    out = run(xn)
    out.backward(torch.ones_like(out))
    torch.testing.assert_close(out.detach().cpu(), x * x)
    torch.testing.assert_close(xn.grad.cpu(), torch.ones_like(x))  # the user's, not jax.vjp's 2x


@pytest.mark.parametrize("compiled", [False, True])
def test_mutating_kernel(compiled):
    def f(a, x):
        ema_(a, x, 0.5)
        ema_(a[1:3], x[:2], 0.25)  # a view of the mutated argument
        return accumulate(a, x) + 1

    def f_ref(a, x):
        a.mul_(0.5).add_(x * 0.5)
        a[1:3].mul_(0.25).add_(x[:2] * 0.75)
        a.add_(x)
        return x * 2 + 1

    a, x = torch.randn(4), torch.randn(4)
    a_ref = a.clone()
    expected = f_ref(a_ref, x)
    an, xn = to_neuron([a, x])
    run = torch.compile(f, backend="neuron", fullgraph=True) if compiled else f
    with no_fallback():
        got = run(an, xn)
    torch.testing.assert_close(got.cpu(), expected)
    torch.testing.assert_close(an.cpu(), a_ref)


@pytest.mark.parametrize("compiled", [False, True])
def test_pallas_kernel(compiled):
    """Pallas calls have no jax.vjp rule: differentiating fails with a hint, and a
    registered backward works."""
    x, y = _pair(4)
    run = torch.compile(pallas_axpy, backend="neuron", fullgraph=True) if compiled else pallas_axpy
    xn, yn = to_neuron([x, y])
    with no_fallback():
        torch.testing.assert_close(run(xn, yn).cpu(), 2 * x + y)
    if not compiled:
        with pytest.raises(ValueError) as info:
            pallas_axpy(xn.requires_grad_(), yn).sum().backward()
        assert "register_autograd" in str(info.value.__notes__)


def test_errors():
    x, y = _pair()
    with pytest.raises(RuntimeError, match="runs on 'neuron' tensors only, but argument 'x' is on 'cpu'"):
        gated(x, y)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        gated(x.to("neuron"), y)
    with pytest.raises(RuntimeError, match="argument 'x' has dtype torch.int64"):
        clipped_square(torch.arange(3, device="neuron"))
    with pytest.raises(ValueError, match="Incompatible shapes"):  # JAX's error, before anything runs
        gated(torch.ones(2, 3, device="neuron"), torch.ones(4, device="neuron"))


@torchneuron.kernel("kt::pair_sum")
def pair_sum(xs: list[torch.Tensor]):
    return xs[0] + 2 * xs[1]


def test_tensor_list_argument_forward_and_clear_error_for_its_gradient():
    p, q = torch.randn(3), torch.randn(3)
    with torch.no_grad():
        torch.testing.assert_close(pair_sum([p.to("neuron"), q.to("neuron")]).cpu(), p + 2 * q)
    with pytest.raises(NotImplementedError, match="Tensor\\[\\] argument"):
        pair_sum([p.to("neuron").requires_grad_(), q.to("neuron")])
