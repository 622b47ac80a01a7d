"""Random ops on `neuron`: exact reproducibility (seeds, generator states, explicit
generators), distributions checked statistically, dtypes, and CPU's errors."""
import math

import pytest
import torch

from helpers import no_fallback

D = "neuron"
N = 4096
KS_CRITICAL = 1.95 / math.sqrt(N)  # Kolmogorov-Smirnov at alpha = 0.001


def ks_statistic(samples, cdf):
    """sup |F_n - F| of 1-D samples against a CDF (a function of a float64 tensor)."""
    x, _ = samples.detach().cpu().double().flatten().sort()
    n = x.numel()
    f = cdf(x)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return max((i / n - f).max().item(), (f - (i - 1) / n).max().item())


def draws():
    """One of each random op, as CPU tensors (for reproducibility checks)."""
    p = torch.tensor([0.2, 0.0, 0.5, 0.3], device=D)
    out = [
        torch.rand(5, device=D), torch.randn(5, device=D), torch.randint(0, 100, (5,), device=D),
        torch.empty(5, device=D).uniform_(-3, 2), torch.empty(5, device=D).normal_(1, 2),
        torch.bernoulli(torch.full((5,), 0.5, device=D)), torch.empty(5, device=D).exponential_(),
        torch.nn.functional.dropout(torch.ones(8, device=D), 0.5), torch.randperm(6, device=D),
        torch.multinomial(p, 2), torch.multinomial(p, 4, replacement=True),
        torch.normal(torch.zeros(3, device=D), torch.ones(3, device=D)),
    ]
    return [t.cpu() for t in out]


def test_manual_seed_reproduces_every_op():
    with no_fallback():
        torch.manual_seed(123)
        a = draws()
        torch.manual_seed(123)
        b = draws()
        torch.manual_seed(124)
        c = draws()
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[1], c[1])


def test_rng_state_replays():
    torch.manual_seed(7)
    torch.rand(3, device=D)
    state = torch.neuron.get_rng_state()
    first = torch.randn(6, device=D).cpu()
    assert not torch.equal(torch.randn(6, device=D).cpu(), first)
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.randn(6, device=D).cpu(), first)
    with torch.random.fork_rng(device_type="neuron"):
        torch.rand(2, device=D)
    assert not torch.equal(torch.randn(6, device=D).cpu(), first)


def test_explicit_generator_is_independent():
    g = torch.Generator(device=D).manual_seed(5)
    a = torch.randn(4, device=D, generator=g).cpu()
    before = torch.neuron.get_rng_state()
    g.manual_seed(5)
    assert torch.equal(torch.randn(4, device=D, generator=g).cpu(), a)
    assert torch.equal(torch.neuron.get_rng_state(), before)  # default generator untouched
    assert torch.equal(torch.empty(3, device=D).uniform_(generator=g.manual_seed(9)).cpu(),
                       torch.empty(3, device=D).uniform_(generator=g.manual_seed(9)).cpu())


def test_continuous_distributions():
    u = torch.empty(N, device=D).uniform_(-1, 3)
    assert ks_statistic(u, lambda x: ((x + 1) / 4).clamp(0, 1)) < KS_CRITICAL
    assert -1 <= u.min().item() and u.max().item() < 3
    z = torch.empty(N, device=D).normal_(2, 0.5)
    assert ks_statistic(z, lambda x: torch.special.ndtr((x - 2) / 0.5)) < KS_CRITICAL
    e = torch.empty(N, device=D).exponential_(3.0)
    assert ks_statistic(e, lambda x: 1 - torch.exp(-3 * x)) < KS_CRITICAL
    c = torch.empty(N, device=D).cauchy_(1.0, 2.0)
    assert ks_statistic(c, lambda x: 0.5 + torch.atan((x - 1) / 2) / math.pi) < KS_CRITICAL
    ln = torch.empty(N, device=D).log_normal_(0.5, 0.25)
    assert ks_statistic(ln.log(), lambda x: torch.special.ndtr((x - 0.5) / 0.25)) < KS_CRITICAL
    m = torch.normal(torch.full((N,), 5.0, device=D), torch.full((N,), 2.0, device=D))
    assert ks_statistic(m, lambda x: torch.special.ndtr((x - 5) / 2)) < KS_CRITICAL


def test_discrete_distributions():
    b = torch.bernoulli(torch.full((N,), 0.3, device=D)).cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean().item() - 0.3) < 0.03
    g = torch.empty(N, device=D).geometric_(0.25).cpu()
    assert g.min().item() >= 1 and abs(g.mean().item() - 4.0) < 0.25  # mean 1/p
    r = torch.randint(3, 9, (N,), device=D).cpu()
    counts = torch.bincount(r - 3, minlength=6).double()
    assert r.min().item() >= 3 and r.max().item() <= 8
    chi2 = ((counts - N / 6) ** 2 / (N / 6)).sum().item()
    assert chi2 < 20.5  # chi-square, 5 degrees of freedom, alpha = 0.001


def test_random_dtypes_and_ranges():
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        x = torch.rand(N, device=D, dtype=dtype).cpu()
        assert x.dtype == dtype and 0 <= x.min().item() and x.max().item() < 1
    assert torch.empty(64, device=D, dtype=torch.bool).random_().cpu().unique().numel() == 2
    i8 = torch.empty(N, device=D, dtype=torch.int8).random_(-128, 128).cpu()
    assert i8.min().item() == -128 and i8.max().item() == 127
    u8 = torch.empty(N, device=D, dtype=torch.uint8).random_().cpu()
    assert u8.max().item() == 255 and u8.min().item() == 0
    big = torch.empty(N, device=D, dtype=torch.int64).random_(-2 ** 63, 2 ** 63 - 1).cpu()
    assert big.min().item() < -2 ** 61 and big.max().item() > 2 ** 61
    f = torch.empty(N, device=D).random_().cpu()
    assert f.max().item() <= 2 ** 24 and torch.equal(f, f.round())


def test_randperm_and_multinomial():
    p = torch.randperm(50, device=D).cpu()
    assert torch.equal(p.sort().values, torch.arange(50)) and not torch.equal(p, torch.arange(50))
    assert torch.randperm(5, device=D, dtype=torch.float32).dtype == torch.float32
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 0.0, 2.0]], device=D)
    s = torch.multinomial(probs, N, replacement=True).cpu()
    freq = torch.stack([torch.bincount(row, minlength=4) for row in s]).double() / N
    expected = (probs / probs.sum(1, keepdim=True)).cpu().double()
    assert (freq - expected).abs().max().item() < 0.03
    w = torch.multinomial(probs, 3).cpu()
    assert all(len(set(row.tolist())) == 3 for row in w)
    assert 1 not in w[0].tolist() and 2 not in w[1].tolist()


def test_dropout():
    x = torch.randn(N, device=D)
    y, mask = torch.ops.aten.native_dropout(x, 0.25, True)
    y, mask, xc = y.cpu(), mask.cpu(), x.cpu()
    assert mask.dtype == torch.bool and abs(mask.double().mean().item() - 0.75) < 0.03
    torch.testing.assert_close(y, xc * mask / 0.75)
    g = torch.randn(N)
    grad = torch.ops.aten.native_dropout_backward(g.to(D), mask.to(D), 1 / 0.75).cpu()
    torch.testing.assert_close(grad, torch.ops.aten.native_dropout_backward(g, mask, 1 / 0.75))
    ye, me = torch.ops.aten.native_dropout(x, 0.25, False)
    assert torch.equal(ye.cpu(), xc) and bool(me.cpu().all())
    y1, m1 = torch.ops.aten.native_dropout(torch.tensor([1.0, float("nan")], device=D), 1.0, True)
    assert torch.equal(m1.cpu(), torch.tensor([False, False]))
    assert y1.cpu()[0].item() == 0 and math.isnan(y1.cpu()[1].item())  # NaN * 0, as on CPU

    xd = x.detach().requires_grad_()
    out = torch.nn.functional.dropout(xd, 0.5)
    out.sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), (out != 0).cpu().float() * 2)


# PyTorch's meta kernels (run first, for CPU's errors) print floats the Python way
# ("lambda=-1.0" where CPU says "lambda=-1"): these compare the type only.
_META_FORMATTED = {"log_normal", "cauchy", "exponential"}


@pytest.mark.parametrize("name,case", [
    ("uniform_bounds", lambda d: torch.empty(3, device=d).uniform_(2, 1)),
    ("uniform_int", lambda d: torch.empty(3, device=d, dtype=torch.long).uniform_()),
    ("bernoulli_p", lambda d: torch.empty(3, device=d).bernoulli_(1.5)),
    ("random_bounds", lambda d: torch.empty(3, device=d).random_(5, 5)),
    ("random_int8", lambda d: torch.empty(3, device=d, dtype=torch.int8).random_(0, 1000)),
    ("log_normal", lambda d: torch.empty(3, device=d).log_normal_(0, -1)),
    ("cauchy", lambda d: torch.empty(3, device=d).cauchy_(0, -1)),
    ("exponential", lambda d: torch.empty(3, device=d).exponential_(-1)),
    ("bernoulli_tensor", lambda d: torch.bernoulli(torch.full((3,), 1.5, device=d)).cpu()),
    ("normal_std", lambda d: torch.normal(torch.zeros(3, device=d), -torch.ones(3, device=d)).cpu()),
    ("multinomial_negative", lambda d: torch.multinomial(torch.tensor([0.5, -0.1], device=d), 1).cpu()),
    ("multinomial_zero", lambda d: torch.multinomial(torch.zeros(2, device=d), 1).cpu()),
    ("multinomial_too_many", lambda d: torch.multinomial(torch.tensor([0.0, 1.0], device=d), 3)),
    ("multinomial_int", lambda d: torch.multinomial(torch.tensor([0, 1], device=d), 1)),
])
def test_errors_match_cpu(name, case):
    with pytest.raises(Exception) as cpu:
        case("cpu")
    with pytest.raises(Exception) as neuron:
        case(D)
        torch.neuron.synchronize()
    assert type(neuron.value) is type(cpu.value)
    if name not in _META_FORMATTED:
        assert str(neuron.value) == str(cpu.value)


# Each compiled function's samples and the CDF they follow.
_COMPILED = {
    "rand": (lambda v: v + torch.rand(N, device=v.device), lambda x: x.clamp(0, 1)),
    "randn_like": (lambda v: torch.randn_like(v), torch.special.ndtr),
    "randint": (lambda v: torch.randint(3, 9, (N,), device=v.device) + v,
                lambda x: ((x.floor() - 2) / 6).clamp(0, 1)),
    "uniform_": (lambda v: v.clone().uniform_(-2, 5), lambda x: ((x + 2) / 7).clamp(0, 1)),
    "normal_": (lambda v: v.clone().normal_(2.0, 3.0), lambda x: torch.special.ndtr((x - 2) / 3)),
    "exponential_": (lambda v: v.clone().exponential_(2.0), lambda x: (1 - torch.exp(-2 * x)).clamp(min=0)),
    "bernoulli": (lambda v: torch.bernoulli(torch.full_like(v, 0.3)), lambda x: (x >= 0) * 0.7 + (x >= 1) * 0.3),
}


@pytest.mark.parametrize("name", sorted(_COMPILED))
def test_random_factories_lower_in_compiled_graphs(name, monkeypatch):
    """Compiled random ops run inside the graph (strict mode: no split, no fallback),
    replay under the same seed, and follow their distribution."""
    import torchneuron.config

    monkeypatch.setattr(torchneuron.config, "STRICT", True)
    fn, cdf = _COMPILED[name]
    compiled = torch.compile(fn, backend="neuron")
    x = torch.zeros(N, device=D)
    torch.manual_seed(7)
    first = compiled(x).cpu()
    torch.manual_seed(7)
    assert torch.equal(first, compiled(x).cpu())
    if name in ("randint", "bernoulli"):  # discrete: compare the frequencies
        values, counts = first.unique(return_counts=True)
        expected = (cdf(values.double()) - cdf(values.double() - 1)).double()
        assert torch.allclose(counts.double() / N, expected, atol=0.03)
    else:
        assert ks_statistic(first, cdf) < KS_CRITICAL


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_activation_checkpointing_replays_dropout(use_reentrant):
    """torch.utils.checkpoint restores the neuron RNG before recomputing: gradients
    equal those of the plain forward."""
    from torch.utils.checkpoint import checkpoint

    lin = torch.nn.Linear(32, 32).to(D)
    x = torch.randn(16, 32, device=D, requires_grad=True)

    def f(t):
        return torch.nn.functional.dropout(lin(t), 0.5)

    torch.manual_seed(5)
    f(x).sum().backward()
    expected, x.grad = x.grad.cpu(), None
    torch.manual_seed(5)
    checkpoint(f, x, use_reentrant=use_reentrant).sum().backward()
    assert torch.equal(x.grad.cpu(), expected)
