"""Test helpers: run the same function on CPU and on `neuron` and compare."""
from __future__ import annotations

import contextlib

import torch

import torchneuron
from torchneuron.ops import fallback


def to_neuron(v):
    if isinstance(v, torch.Tensor):
        out = v.detach().to("neuron")
        if v.requires_grad:
            out.requires_grad_(True)
        return out
    if isinstance(v, (list, tuple)):
        return type(v)(to_neuron(x) for x in v)
    if isinstance(v, dict):
        return {k: to_neuron(x) for k, x in v.items()}
    return v


def to_cpu(v):
    if isinstance(v, torch.Tensor):
        return v.detach().cpu()
    if isinstance(v, (list, tuple)):
        return type(v)(to_cpu(x) for x in v)
    if isinstance(v, dict):
        return {k: to_cpu(x) for k, x in v.items()}
    return v


@contextlib.contextmanager
def no_fallback():
    """Fails the test if any op ran through the CPU fallback inside the block."""
    before = dict(torchneuron.fallback_ops())
    yield
    after = torchneuron.fallback_ops()
    new = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    assert not new, f"ops ran through the CPU fallback: {new}"


def assert_same(actual, expected, atol=None, rtol=None, exact_dtype=True):
    """Compares (nested) results of a neuron run with a CPU run."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), type(actual)
        assert actual.device.type == "neuron" or expected.device.type == actual.device.type, actual.device
        torch.testing.assert_close(to_cpu(actual), expected, atol=atol, rtol=rtol, equal_nan=True,
                                   check_dtype=exact_dtype)
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e, atol, rtol, exact_dtype)
    else:
        assert actual == expected, (actual, expected)


def check(fn, *args, atol=None, rtol=None, allow_fallback=False, **kwargs):
    """Runs fn(*args) on CPU and on neuron copies of args; asserts equal results and,
    unless allowed, that no op used the CPU fallback. Returns the neuron result."""
    expected = fn(*args, **kwargs)
    nargs, nkwargs = to_neuron(args), to_neuron(kwargs)
    if allow_fallback:
        actual = fn(*nargs, **nkwargs)
    else:
        with no_fallback():
            actual = fn(*nargs, **nkwargs)
    assert_same(actual, expected, atol, rtol)
    return actual


def check_like_cpu(fn, *args, atol=None, rtol=None):
    """Like `check`; when fn raises on CPU, asserts that the neuron run raises the same
    exception type, at the latest at the next synchronization point."""
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - any CPU error is the expectation
        import pytest

        with pytest.raises(type(exc)):
            with no_fallback():
                fn(*to_neuron(args))
                torch.neuron.synchronize()
        return None
    return check(fn, *args, atol=atol, rtol=rtol)


def make(shape, dtype=torch.float32, seed=0):
    """A reproducible CPU tensor of `dtype`: normal floats, integers in [0, 20), random bools."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(0, 20, shape, generator=g).to(dtype)


def check_grad(fn, x):
    """Backpropagates fn(x) (a scalar) on CPU and on neuron, with no CPU fallback, and
    compares the gradients of x."""
    xc = x.clone().requires_grad_(True)
    fn(xc).backward()
    xn = to_neuron(x).requires_grad_(True)
    with no_fallback():
        fn(xn).backward()
    torch.testing.assert_close(xn.grad.cpu(), xc.grad)


class TiedModel(torch.nn.Module):
    """An embedding and an output projection sharing one weight (tied-weight tests)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(5, 3)
        self.out = torch.nn.Linear(3, 5, bias=False)
        self.out.weight = self.emb.weight


def verify_case(outcome, name, check, dtype):
    """Asserts a sweep case's verdict (`torchneuron.coverage.expected.judge`): passes, or
    is an expected failure, reported as a strict xfail with its reason."""
    import pytest

    from torchneuron.coverage import expected

    verdict, reason = expected.judge(outcome, name, check, dtype)
    if verdict == "xfail":
        pytest.xfail(reason)
    assert verdict == "pass", reason
