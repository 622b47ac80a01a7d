import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from helpers import check, check_grad, check_like_cpu, no_fallback

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int8,
          torch.uint8, torch.bool]


def _make(shape, dtype):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype)
    return torch.randint(1, 50, shape).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [torch.add, torch.mul, torch.maximum, torch.eq, torch.lt])
def test_binary(op, dtype):
    a, b = _make((4, 5), dtype), _make((5,), dtype)
    check(op, a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_binary_noncontiguous_and_scalars(dtype):
    a = _make((6, 8), dtype)
    check(lambda x: x[::2, 1::3] + x[1::2, ::3], a)
    check(lambda x: x.t() * 3, a)
    check(lambda x: x * 2.5, a)
    check(lambda x: x + torch.tensor(2), a)


def test_zero_size_and_zero_dim():
    check(lambda x: x + 1, torch.randn(0, 3))
    check(lambda x: x * x, torch.tensor(3.0))


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_div(mode, dtype):
    a = torch.tensor([-7, -6, -1, 0, 1, 5, 7]).to(dtype)
    b = torch.tensor([2, -4, 3, 5, -2, 2, -3]).to(dtype)
    check(lambda x, y: torch.div(x, y, rounding_mode=mode), a, b)
    check(torch.remainder, a, b)
    check(torch.fmod, a, b)


def test_nan_propagation():
    a = torch.tensor([1.0, float("nan"), 3.0])
    b = torch.tensor([float("nan"), 2.0, 1.0])
    check(torch.maximum, a, b)
    check(torch.fmax, a, b)
    check(lambda x: x.clamp(0, 2), a)


@pytest.mark.parametrize("fn", [torch.exp, torch.log1p, torch.sin, torch.tanh, torch.sigmoid, torch.rsqrt,
                                torch.abs, torch.neg, torch.floor, torch.erf, torch.nn.functional.gelu,
                                torch.nn.functional.silu, torch.relu])
def test_unary(fn):
    check(fn, torch.rand(3, 4) + 0.1, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("shapes", [((1, 1, 5), (5, 5, 5)), ((1, 1, 5), (1, 1, 5)), ((3,), (2, 1))])
@pytest.mark.parametrize("compiled", [False, True])
def test_product_with_a_bool_tensor_keeps_nan(shapes, compiled):
    # XLA rewrites x * convert(mask) into a select, which gives 0 for inf * False.
    a = torch.tensor([float("inf"), float("nan"), -float("inf"), 2.0, -0.0], dtype=torch.float64)
    a = a.repeat(shapes[0][-1])[:shapes[0][-1]].reshape(shapes[0])
    mask = (torch.arange(torch.Size(shapes[1]).numel()) % 3 == 0).reshape(shapes[1])

    def products(x, m):  # the mask as a factor, and converted first (a separate node when compiled)
        return x * m, m * x, x * m.to(x.dtype), torch.addcmul(torch.zeros_like(x), x, m.to(x.dtype))

    fn = torch.compile(products, backend="neuron") if compiled else products
    got = fn(a.to("neuron"), mask.to("neuron"))
    for g, want in zip(got, products(a, mask)):
        torch.testing.assert_close(g.cpu(), want, equal_nan=True, rtol=0, atol=0)


def test_inplace_on_view_visible_through_base():
    def f(x):
        x = x.clone()
        v = x[:, 1]
        v.mul_(0)
        x[0].add_(10)
        return x
    check(f, torch.randn(3, 4))


def test_equal():
    a = torch.tensor([1.0, 2.0, float("nan")])
    for x, y in [(a[:2], a[:2].clone()), (a, a.clone()), (a[:2], torch.tensor([1, 2])), (a[:2], a[:1]),
                 (a[:2], torch.tensor([1.0, 3.0]))]:
        check(torch.equal, x, y)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.int8])
def test_shift_operators(dtype):
    x = torch.tensor([1, 5, 7, 100]).to(dtype)
    s = torch.tensor([0, 1, 3, 2]).to(dtype)
    check(lambda a, b: a << b, x, s)
    check(lambda a, b: a >> b, x, s)
    check(lambda a: (a << 2, a >> 1), x)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool])
def test_int_pow_negative_scalar_raises_like_cpu(dtype):
    message = "Integers to negative integer powers are not allowed."
    base = torch.tensor([2, 3]).to(dtype)
    fns = [lambda t: t.pow(-1), lambda t: torch.pow(t, -2), lambda t: t ** -3]
    if dtype != torch.bool:  # bool.pow_(int): PyTorch's meta kernel raises its cast error first
        fns.append(lambda t: t.clone().pow_(-2))
    for fn in fns:
        with pytest.raises(RuntimeError, match=message):
            fn(base)
        with pytest.raises(RuntimeError, match=message):
            fn(base.to("neuron"))
            torch.neuron.synchronize()
    # Still computed like CPU: non-negative exponents, float exponents, tensor exponents.
    check(lambda t: t.pow(3), base)
    check(lambda t: t.pow(0), base)
    if dtype != torch.bool:
        check(lambda t: t.pow(-1.0), base)
        check(lambda t: t.clone().pow_(2), base)
        check(lambda t, e: t.pow(e), base, torch.tensor([1, -2]).to(dtype) if dtype.is_signed else
              torch.tensor([1, 2]).to(dtype))
        check(lambda t: torch.pow(t, torch.tensor(-2)), base)
    check(lambda e: torch.pow(2, e), torch.tensor([1, -2]))
    check(lambda t: t.pow(-2), torch.tensor([1.5, 2.0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_pow_scalar_exponent_special_values_like_cpu(dtype):
    """aten::pow.Tensor_Scalar: CPU computes exponents 0.5, -0.5, -1, 2, 3, -2 as sqrt,
    1/sqrt, 1/x and products (not IEEE pow), so signed zeros and infinities differ from
    pow: (-inf)**0.5 is nan, (-0.)**0.5 is -0., (-0.)**-0.5 is -inf."""
    x = torch.tensor([-2.0, -0.5, 0.0, -0.0, 0.5, 1.7, 7.3, float("inf"), -float("inf"), float("nan")], dtype=dtype)
    for e in [0.5, -0.5, -1, 2, 3, -2, 1 / 3, 0, 1, 2.5]:
        actual = check(lambda t: torch.pow(t, e), x)
        expected = torch.pow(x, e)
        real = ~expected.isnan()  # NaN's sign bit is not specified
        assert torch.equal(actual.cpu().signbit()[real], expected.signbit()[real]), e


def test_polygamma_and_digamma_match_cpu_at_and_near_their_poles():
    # ATen: digamma(+-0) = -+inf, reflection below zero; zeta summed directly up to 9.
    x = torch.cat([torch.linspace(-8.5, 10, 371, dtype=torch.float64),
                   torch.tensor([0., -0., -1., -2., 1e-3, -1e-3, 50., 1e4], dtype=torch.float64)])
    for dtype in (torch.float64, torch.float32):
        check(torch.digamma, x.to(dtype))
        for n in range(5):
            check(lambda x: torch.polygamma(n, x), x.to(dtype))
    check(lambda x: torch.polygamma(2, x), torch.arange(0, 6))


def test_sign_of_bool():
    b = torch.tensor([True, False])
    check(torch.sign, b)
    check(torch.sgn, b)


def test_special_zeta():
    x = torch.tensor([2., 3., 4.5, 2., 3., 1.])
    q = torch.tensor([0.5, -2.5, 10., -3., 0., 2.])  # poles at q = 0, -1, ... give inf
    check(torch.special.zeta, x, q)
    check(lambda q: torch.special.zeta(3., q), q.double())
    check(lambda x: torch.special.zeta(x, 2), torch.arange(2, 6))


def test_integer_division_with_rounding_broadcasts():
    a, b = torch.tensor([[7], [-9], [4]]), torch.tensor([2, -3])
    check(lambda a, b: torch.div(a, b, rounding_mode="floor"), a, b)
    check(lambda a, b: torch.div(a, b, rounding_mode="trunc"), a, b)
    check(torch.fmod, a, b)  # lax.rem does not broadcast either
    check(torch.fmod, a.int(), b.int())
    check(lambda a: torch.unravel_index(a, (2, 3, 4)), torch.tensor([[1, 5], [7, 23]]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_half_rounded_division_rounds_like_cpu(dtype, mode):
    # With a tensor divisor CPU's half kernels round every operation to the half type
    # (trunc(a / b) truncates the rounded quotient: 4% of float16 and 16% of bfloat16
    # quotients came out one off); a one-element divisor computes in float.
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(64, 64, generator=g) * 50).to(dtype), torch.randn(64, 64, generator=g).to(dtype)
    a[0, :4], b[0, :4] = torch.tensor([0., -1., 5., 3.]), torch.tensor([0., 0., float("inf"), -0.5])
    for divisor in (b, b[:, :1], b[0, 5], 0.37):
        check(lambda x, y: torch.div(x, y, rounding_mode=mode), a, divisor)
    check(torch.floor_divide, a, b)


@pytest.mark.parametrize("alpha", [False, True])
def test_bool_add_takes_alpha(alpha):
    # self + alpha * other in bool arithmetic: alpha=False leaves self as it is.
    a, b = torch.tensor([True, False, True, False]), torch.tensor([True, True, False, False])
    check(lambda a, b: torch.add(a, b, alpha=alpha), a, b)
    check(lambda a, b: a.add_(b, alpha=alpha), a.clone(), b)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("fn", [torch.tanh, torch.sigmoid, torch.nn.functional.tanhshrink])
def test_complex_gradients_use_the_conjugate_derivative(fn, dtype):
    # tanh_backward/sigmoid_backward multiply by conj(f'(z)) for complex inputs, as on CPU.
    gen = torch.Generator().manual_seed(0)
    x, g = torch.randn(20, dtype=dtype, generator=gen), torch.randn(20, dtype=dtype, generator=gen)
    on_cpu = x.clone().requires_grad_()
    fn(on_cpu).backward(g)
    on_neuron = x.to("neuron").requires_grad_()
    fn(on_neuron).backward(g.to("neuron"))
    torch.testing.assert_close(on_neuron.grad.cpu(), on_cpu.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("lambd", [0.5, 0.0])
def test_hardshrink_gradient(dtype, lambd):
    x = torch.tensor([-1.0, -0.5, -0.2, 0.0, 0.3, 0.5, 0.7], dtype=dtype)
    g = torch.arange(7.0, dtype=dtype) + 1
    with no_fallback():
        check(lambda a, b: torch.ops.aten.hardshrink_backward(a, b, lambd), g, x)
    check_grad(lambda t: (torch.nn.functional.hardshrink(t, lambd) * g.to(t.device)).sum(), x)
    # A NaN input, short enough for CPU's scalar loop: the gradient passes.
    nan = torch.tensor([float("nan")], dtype=dtype)
    check(lambda a, b: torch.ops.aten.hardshrink_backward(a, b, lambd), torch.ones(1, dtype=dtype), nan)


def test_efficient_zero_tensor_is_zeros_of_its_size_and_dtype():
    with no_fallback():
        z = torch.ops.aten._efficientzerotensor([2, 3], dtype=torch.float64, device="neuron")
    assert z.device.type == "neuron" and z.dtype == torch.float64
    torch.testing.assert_close(z.cpu(), torch.zeros(2, 3, dtype=torch.float64))


def test_empty_expanded_tensors_do_not_overlap():
    # An empty tensor is contiguous whatever its strides (c10), so writing one that a
    # broadcast expanded is no internal overlap: lcm's int8 decomposition converts such
    # an expanded empty input and raised CPU's overlap error.
    a = torch.ones(0, 1, 3, dtype=torch.int8)
    b = torch.ones(0, 10, 3, dtype=torch.int8)
    got = torch.lcm(a.to("neuron"), b.to("neuron"))
    assert got.shape == torch.lcm(a, b).shape == (0, 10, 3)
    x = torch.zeros(0, 1, 3, device="neuron").expand(0, 10, 3)
    assert torch.ones(0, 10, 3, device="neuron").copy_(x).shape == (0, 10, 3)


# Python numbers and 0-dim tensors of a wider type meeting a half tensor: CPU's
# TensorIterator casts them to the half result type before the float32 kernel; mul and
# div read their second operand at full precision.
HALF_SCALAR_OPERANDS = {
    "add": lambda t, s: t + s,
    "radd": lambda t, s: s + t,
    "sub": lambda t, s: t - s,
    "rsub": lambda t, s: s - t,
    "add_alpha": lambda t, s: torch.add(t, t.flip(0), alpha=s),
    "sub_alpha": lambda t, s: torch.sub(t, t.flip(0), alpha=s),
    "add_0d": lambda t, s: t + torch.tensor(s),
    "add_": lambda t, s: t.clone().add_(s),
    "mul": lambda t, s: t * s,
    "rmul_0d": lambda t, s: torch.mul(torch.tensor(s), t),
    "div": lambda t, s: t / s,
    "rdiv": lambda t, s: s / t,
    "floor_divide_0d": lambda t, s: torch.floor_divide(torch.tensor(s), t),
    "remainder": lambda t, s: torch.remainder(t, s),
    "rremainder": lambda t, s: torch.remainder(s, t),
    "fmod": lambda t, s: torch.fmod(t, s),
    "atan2_0d": lambda t, s: torch.atan2(t, torch.tensor(s)),
    "copysign_0d": lambda t, s: torch.copysign(torch.tensor(s), t),
    "xlogy": lambda t, s: torch.xlogy(s, t),
    "xlog1py": lambda t, s: torch.special.xlog1py(t, s),
    "pow_base": lambda t, s: torch.pow(s, t),
    "pow_0d_exponent": lambda t, s: torch.pow(t, torch.tensor(s)),
    "pow_scalar_exponent": lambda t, s: torch.pow(t, s),
    "lerp_0d_weight": lambda t, s: torch.lerp(t, t.flip(0), torch.tensor(s)),
    "lerp_scalar_weight": lambda t, s: torch.lerp(t, t.flip(0), s),
    "eq": lambda t, s: torch.eq(t.round(decimals=1), s),
    "ne_0d": lambda t, s: torch.ne(t.round(decimals=1), torch.tensor(s)),
    "le": lambda t, s: torch.le(t.round(decimals=1), s),
    "gt_0d_left": lambda t, s: torch.gt(torch.tensor(s), t.round(decimals=1)),
    "threshold": lambda t, s: F.threshold(t.round(decimals=1), s, 7.0),
    "threshold_backward": lambda t, s: torch.ops.aten.threshold_backward(t, t.round(decimals=1), s),
    "foreach_lerp": lambda t, s: torch._foreach_lerp([t], [t.flip(0)], s)[0],
    "foreach_lerp_list": lambda t, s: torch._foreach_lerp([t], [t.flip(0)], [s])[0],
    "logaddexp_0d": lambda t, s: torch.logaddexp(t, torch.tensor(s)),
    "logaddexp2_0d_left": lambda t, s: torch.logaddexp2(torch.tensor(s, dtype=torch.float64), t),
    "logaddexp_tensors": lambda t, s: torch.logaddexp(t, t.flip(0) * s),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", HALF_SCALAR_OPERANDS, ids=str)
def test_half_results_round_scalar_operands_as_cpu(op, dtype):
    """Bit for bit: `x_half + 0.1` differed from CPU in 13% of float16 elements and
    fmod(x_half, 0.1) in 88%, as neuron computed with the unrounded scalar. Comparisons
    round the scalar too (x_half == 0.1 holds for x = half(0.1)); threshold and
    `_foreach_lerp`'s number weight read it in float32, as CPU's kernels do."""
    x = (torch.randn(1024, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
    for s in (0.1, 1 / 3):
        expected = HALF_SCALAR_OPERANDS[op](x, s)
        with no_fallback():
            actual = HALF_SCALAR_OPERANDS[op](x.to("neuron"), s).cpu()
        assert actual.dtype == expected.dtype
        assert torch.equal(actual.nan_to_num(), expected.nan_to_num()), (s, (actual != expected).sum())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", [torch.mul, torch.div, lambda a, b: torch.div(a, b, rounding_mode="floor")],
                         ids=["mul", "div", "floor_divide"])
def test_half_scalar_times_integer_tensor_rounds_the_integers(op, dtype):
    """A 0-dim half tensor times an integer tensor has a half result, and CPU casts the
    integers to it first (2041 is 2040 in bfloat16); only a one-element second operand
    (`is_cpu_scalar`, dims or not) is read whole."""
    ints = torch.arange(2040, 2060)
    halves = torch.tensor([1.0, 3.0, 0.1], dtype=dtype)
    for args in ((torch.tensor(1.5, dtype=dtype), ints), (ints, torch.tensor(1.5, dtype=dtype)),
                 (halves, torch.tensor([2049])), (halves, torch.tensor([[2049]]))):
        expected = op(*args)
        with no_fallback():
            actual = op(*(a.to("neuron") for a in args)).cpu()
        assert torch.equal(actual, expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", [torch.eq, torch.ne, torch.lt], ids=["eq", "ne", "lt"])
def test_half_compared_with_a_complex_number_as_cpu(op, dtype):
    """A float16/bfloat16 tensor against a complex number or 0-dim complex tensor
    compares in complex32/bcomplex32 on CPU: both parts of the number rounded to the
    half type (through complex<float>), so x_half == 0.1 + 0j holds for x = half(0.1),
    1 + 1e-30j equals 1 in float16, 70000 equals a float16 inf. neuron compared in
    complex64; the ordered comparisons refuse the type as on CPU."""
    values = [0.1, 1.0, 65504.0, 65520.0, 1e5, 70000.0, 3e38, float("inf"), float("nan"), 2 ** -25, 1e-8, -2.5]
    x = torch.tensor(values).to(dtype)
    scalars = [0.1 + 0j, 1 + 1e-30j, 0.1 + 1e-9j, 1e5 + 0j, 65520 + 0j, 3e38 + 0j, 1e-8 + 1e-8j, 1 + 1j,
               complex(float("inf"), 0), 1 + 2 ** -11 + 2 ** -40 + 0j]
    for s in scalars + [torch.tensor(0.1 + 0j), torch.tensor(1 + 1e-30j, dtype=torch.complex128)]:
        outcomes = []
        for device in ("cpu", "neuron"):
            other = s.to(device) if isinstance(s, torch.Tensor) else s
            try:
                with no_fallback():
                    outcomes.append(op(x.to(device), other).cpu())
            except NotImplementedError as exc:
                outcomes.append(str(exc))
        want, got = outcomes
        assert type(got) is type(want), (s, got, want)
        assert got == want if isinstance(want, str) else torch.equal(got, want), (s, got, want)


def test_threshold_backward_computes_in_the_common_dtype():
    """CPU's threshold_backward promotes self and grad_output to their common dtype, the
    result's (bfloat16 self, float16 grad: float32); neuron kept grad_output's."""
    x = torch.tensor([-1.0, 0.1, 0.5, 2.0])
    for self_dtype, grad_dtype in [(torch.bfloat16, torch.float16), (torch.float32, torch.float16),
                                   (torch.float64, torch.float32), (torch.int64, torch.float16)]:
        s, g = x.to(self_dtype), torch.ones(4, dtype=grad_dtype)
        expected = torch.ops.aten.threshold_backward(g, s, 0.1)
        with no_fallback():
            actual = torch.ops.aten.threshold_backward(g.to("neuron"), s.to("neuron"), 0.1).cpu()
        assert actual.dtype == expected.dtype and torch.equal(actual, expected), (self_dtype, grad_dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.uint8, torch.int8, torch.bool, torch.complex64], ids=str)
def test_threshold_takes_complex_numbers_as_cpu(dtype):
    """CPU reads a complex threshold or value with a zero imaginary part as its real part
    (`Scalar::to`; 1.5+1j raises RuntimeError, 300+0j into int8 too); neuron raised
    TypeError on converting the Python complex to a real dtype."""
    x = torch.tensor([0.0, 1.0, 2.0, 3.0]).to(dtype)
    for threshold, value in [(1.5 + 0j, 0), (0j, 1.5 + 0j), (2 + 0j, 300 + 0j), (1.5, 2 + 0j),
                             (1.5 + 1j, 0), (1.5, 1j)]:
        check_like_cpu(lambda t: torch.threshold(t, threshold, value), x)
        check_like_cpu(lambda t: F.threshold(t, threshold, value, inplace=True), x.clone())


_SPECIAL = [float("inf"), -float("inf"), float("nan"), 1e308, -1e308, 0.0, -0.0, 1.0, -1.0, 800.0]


def _same_complex(actual, expected, rtol):
    """Bitwise where CPU's part is 0, infinite or NaN (signs of zeros and infinities
    included), within rtol elsewhere (as much absolute tolerance near 0, where O(1)
    terms cancel)."""
    for a, e in ((actual.real, expected.real), (actual.imag, expected.imag)):
        special = (e == 0) | ~torch.isfinite(e)
        assert torch.equal(torch.isnan(a), torch.isnan(e))
        exact = special & ~torch.isnan(e)
        assert torch.equal(a[exact], e[exact]) and torch.equal(torch.signbit(a[exact]), torch.signbit(e[exact]))
        torch.testing.assert_close(a[~special], e[~special], rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_logaddexp_exp_and_log_special_values_as_cpu(dtype):
    """Complex logaddexp over a grid of infinite, NaN, huge and zero parts, as CPU's
    _log_add_exp_helper computes it with the C library's cexp and clog (C99's special
    values: exp(inf + inf i) = inf + NaN i, exp(-inf + inf i) = 0, log(inf + NaN i) =
    inf + NaN i); neuron gave NaN + NaN i for 659 of these 4096 pairs. exp and log of
    the same grid too."""
    z = torch.tensor([complex(a, b) for a in _SPECIAL for b in _SPECIAL], dtype=dtype)
    a, b = z.repeat_interleave(len(z)), z.repeat(len(z))
    rtol = 1e-13 if dtype == torch.complex128 else 4e-6
    with no_fallback():
        got = torch.logaddexp(a.to("neuron"), b.to("neuron")).cpu()
        got_exp, got_log = torch.exp(z.to("neuron")).cpu(), torch.log(z.to("neuron")).cpu()
    _same_complex(got, torch.logaddexp(a, b), rtol)
    _same_complex(got_exp, torch.exp(z), rtol)
    finite_log = torch.log(z).abs() < 700  # XLA flushes log(1e308 + 1j)'s subnormal angle to zero
    _same_complex(got_log[~finite_log], torch.log(z)[~finite_log], rtol)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
@pytest.mark.parametrize("op", [torch.log1p, torch.expm1, torch.sigmoid, torch.tanh, torch.sqrt, torch.log2,
                                torch.log10], ids=lambda f: f.__name__)
def test_complex_special_values_as_cpu(op, dtype):
    """CPU's complex log1p and expm1 are c10's formulas (complex_math.h: log(1 + z) times
    z / ((1 + z) - 1), so log1p(1e-30 + inf i) is NaN + NaN i), sigmoid divides 1 by 1 +
    cexp(-z) with c10's division, tanh and sqrt are glibc's ctanh and csqrt (C99's
    special values, the sign of a zero imaginary part kept: sqrt(-1 - 0i) = -i), log2
    and log10 divide clog's parts; neuron followed XLA for 7 to 29 of these 100 values
    each (inf + NaN i for log2(inf + NaN i), NaN + NaN i for tanh(0 + inf i), ...)."""
    z = torch.tensor([complex(a, b) for a in _SPECIAL for b in _SPECIAL], dtype=dtype)
    rtol = 1e-13 if dtype == torch.complex128 else 4e-6
    with no_fallback():
        got = op(z.to("neuron")).cpu()
    _same_complex(got, op(z), rtol)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_log1p_of_tiny_values_as_cpu(dtype):
    """log1p(z) for |z| near 1e-30 (and 1e-300 in complex128): 1 + z rounds to 1, and
    c10's log1p returns z itself (no imaginary part: also its real part) or log(1 + z)
    times z / ((1 + z) - 1); neuron's log1p gave -inf for log1p(-1 + 1e-30i) and dropped
    the real part of log1p(1e-30 + 1e-30i). A huge imaginary part (past 1 / FLT_MIN or
    1 / DBL_MIN) made the correction's divisor reciprocal subnormal, flushed to 0 (a
    review found log1p(0.1 + 1e38i) = 0)."""
    tiny = [1e-30, -1e-30, 1e-8] + ([1e-300, -1e-300] if dtype == torch.complex128 else [])
    huge = [1e38, -9e37] if dtype == torch.complex64 else [1e308, -5e307]
    values = [complex(a, b) for a in tiny + [-1.0, 0.0, 0.1] for b in tiny + huge + [0.0, float("inf"), -float("inf")]]
    z = torch.tensor(values, dtype=dtype)
    rtol = 1e-13 if dtype == torch.complex128 else 4e-6
    with no_fallback():
        got = torch.log1p(z.to("neuron")).cpu()
    _same_complex(got, torch.log1p(z), rtol)


_POW_PARTS = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, 300.0, -300.0, float("inf"), -float("inf"), float("nan")]


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_pow_special_values_as_cpu(dtype):
    """Complex pow over a grid of zero, unit, large, infinite and NaN parts: CPU's
    std::pow is glibc's cpow, cexp(y * clog(x)) with C99's product (0 ** 0 is NaN + NaN i,
    x ** (300 + 0i) past exp's overflow inf + 0i), and pow.Tensor_Scalar's exponents 0.5,
    -0.5, -1, 2, 3, -2 are csqrt, c10's quotient and products; pow.Scalar's base 1
    gives ones. Neuron followed XLA's polar-form pow (NaN + NaN i or inf + NaN i for
    ~10000 of these 20736 pairs, 1 for 0 ** 0)."""
    z = torch.tensor([complex(a, b) for a in _POW_PARTS for b in _POW_PARTS], dtype=dtype)
    base, exp = z.repeat_interleave(len(z)), z.repeat(len(z))
    rtol = 1e-11 if dtype == torch.complex128 else 4e-6
    zn = z.to("neuron")
    with no_fallback():
        got = torch.pow(base.to("neuron"), exp.to("neuron")).cpu()
        got_scalar = [torch.pow(zn, e).cpu() for e in (0.5, -0.5, -1.0, 2.0, 3.0, -2.0, 2.5, 1j, -300 + 0j)]
        got_base = [torch.pow(b, zn).cpu() for b in (1 + 0j, 0j, -1 + 0j, 2.5 - 1j)]
    _same_complex(got, torch.pow(base, exp), rtol)
    for e, g in zip((0.5, -0.5, -1.0, 2.0, 3.0, -2.0, 2.5, 1j, -300 + 0j), got_scalar):
        _same_complex(g, torch.pow(z, e), rtol)
    for b, g in zip((1 + 0j, 0j, -1 + 0j, 2.5 - 1j), got_base):
        _same_complex(g, torch.pow(b, z), rtol)


_POW_EXPONENTS = [True, False, 0, 1, 2, 2.0, 0.5]


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int64, torch.float16, torch.float32],
                         ids=str)
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_pow_of_a_tensor_to_a_python_scalar_is_typed_as_on_cpu(dtype, compiled):
    """pow.Tensor_Scalar, pow_.Scalar and pow.Tensor_Scalar_out: CPU types the result
    `result_type(base, exponent)`, so a bool tensor to a bool exponent is bool (PyTorch's
    Python meta kernel gave int64, and refused `pow_` and a bool out tensor); dtypes and
    values as CPU's, or CPU's error."""
    x = (torch.arange(12).reshape(3, 4) % 3).to(dtype)
    fns = {
        "functional": lambda t, e: t ** e,
        "inplace": lambda t, e: t.clone().pow_(e),
        "out_resized": lambda t, e: torch.pow(t, e, out=torch.empty(0, dtype=_pow_out_dtype(t, e), device=t.device)),
        "out_bool": lambda t, e: torch.pow(t, e, out=torch.empty(3, 4, dtype=torch.bool, device=t.device)),
    }
    for (name, fn), e in itertools.product(fns.items(), _POW_EXPONENTS):
        try:
            want = fn(x, e)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                fn(x.to("neuron"), e)
            continue
        if compiled:
            torch._dynamo.reset()
        with no_fallback():
            got = (torch.compile(fn, backend="neuron") if compiled else fn)(x.to("neuron"), e)
        assert got.dtype == want.dtype, (name, e)
        torch.testing.assert_close(got.cpu(), want, msg=f"{name} {e!r}")


def _pow_out_dtype(t, e):
    return torch.result_type(t, e)


def _grid_parts(dtype, extreme=True):
    """Real and imaginary parts of the complex special-value grids: zeros, units, the
    overflow thresholds of cosh/exp (50 ... 800), and with `extreme` 1e-30, 1e30 and the
    dtype's largest magnitude (1e38 or 1e308)."""
    base = [0.0, 1.0, 0.5, 2.0, 50.0, 100.0, 400.0, 800.0, float("inf")]
    if extreme:
        base += [1e-30, 1e30, 1e38 if dtype == torch.complex64 else 1e308]
    return base + [-v for v in base] + [float("nan"), math.pi]


def _complex_grid(dtype, extreme=True):
    parts = _grid_parts(dtype, extreme)
    return torch.tensor([complex(a, b) for a in parts for b in parts], dtype=dtype)


def _complex_mismatch(actual, expected, rtol):
    """Elementwise: True where `actual` differs from `expected` beyond `rtol` (of the
    larger of the modulus and the part), in NaN-ness, or where `expected`'s part is
    infinite or zero, in value and sign."""
    if not expected.is_complex():
        actual, expected = torch.complex(actual, torch.zeros_like(actual)), \
            torch.complex(expected, torch.zeros_like(expected))
    actual, expected = actual.to(torch.complex128), expected.to(torch.complex128)
    scale = expected.abs().nan_to_num(0, 0, 0)
    bad = torch.zeros(actual.shape, dtype=torch.bool)
    for a, e in ((actual.real, expected.real), (actual.imag, expected.imag)):
        bad |= torch.isnan(a) != torch.isnan(e)
        bad |= torch.isinf(e) & (a != e)
        bad |= torch.isinf(a) & ~torch.isinf(e)
        bad |= (e == 0) & (a == 0) & (torch.signbit(a) != torch.signbit(e))
        finite = torch.isfinite(a) & torch.isfinite(e)
        bad |= finite & ((a - e).abs() > rtol * torch.maximum(scale, e.abs()))
    return bad


def _assert_like_cpu_or_flushed_cpu(fn, *args, rtol):
    """fn on neuron against CPU, elementwise as CPU computes it or as CPU computes it
    with subnormals flushed (`torch.set_flush_denormal(True)`: XLA:CPU flushes them,
    the "subnormals flushed on XLA:CPU" platform difference)."""
    with no_fallback():
        got = fn(*[a.to("neuron") if isinstance(a, torch.Tensor) else a for a in args]).cpu()
    want = fn(*args)
    torch.set_flush_denormal(True)
    try:
        want_flushed = fn(*args)
    finally:
        torch.set_flush_denormal(False)
    bad = _complex_mismatch(got, want, rtol) & _complex_mismatch(got, want_flushed, rtol)
    where = bad.nonzero()[:5, 0].tolist()
    assert not bad.any(), f"{int(bad.sum())} of {bad.numel()} differ, e.g. " + "; ".join(
        f"{[a[i].item() if isinstance(a, torch.Tensor) and a.dim() else a for a in args]}: "
        f"neuron {got[i].item()}, CPU {want[i].item()}" for i in where)


_GRID_UNARY = [torch.rsqrt, torch.reciprocal, torch.sinh, torch.cosh, torch.sin, torch.cos, torch.tan, torch.atanh,
               torch.asinh, torch.acosh, torch.acos, torch.asin, torch.atan, torch.abs]


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
@pytest.mark.parametrize("op", _GRID_UNARY, ids=lambda f: f.__name__)
def test_complex_unary_special_value_grid_as_cpu(op, dtype):
    """Complex unary functions over a 26 x 26 grid of parts (zeros of both signs, units,
    1e-30, 1e30, the largest magnitudes, cosh's and exp's overflow thresholds, inf,
    NaN): CPU calls glibc (csinh, ccosh, ccos = ccosh(iz), csin, ctan, casinh, cacos,
    catanh, ...: C99 Annex G's special values, the sign of zeros kept), c10's quotient
    for reciprocal and rsqrt (1 / csqrt(z)), hypot for abs, and for complex128 acos
    (pi/2 + 0i) - casin(z) part by part. Neuron followed XLA's formulas: 4 (abs) to 98
    (reciprocal) of these 676 values differed (sinh(1e30 + 0i) was inf + NaN i, acos(0.5 -
    0i)'s imaginary part -0, atanh(1 + 1e-30i) inf)."""
    rtol = 1e-5 if dtype == torch.complex64 else 1e-11
    _assert_like_cpu_or_flushed_cpu(op, _complex_grid(dtype), rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
@pytest.mark.parametrize("op", [torch.atan, torch.atanh], ids=lambda f: f.__name__)
def test_complex_atan_of_huge_values_keeps_the_small_part(op, dtype):
    """catanh past 16 / eps: the real part x / (4 h^2), each part as CPU's to its own
    relative tolerance (or, subnormal on CPU, flushed). XLA folded x / h / h into x / (h * h), whose h * h overflows, so
    atan(2 + 1e30i) was pi/2 + 0i (CPU: pi/2 + 1e-30i)."""
    big = [1e20, 1e30, 3e38] if dtype == torch.complex64 else [1e160, 1e300]
    parts = [0.5, 2.0, 88.0] + big
    parts += [-p for p in parts]
    z = torch.tensor([complex(a, b) for a in parts for b in parts], dtype=dtype)
    want, got = op(z), op(z.to("neuron")).cpu()
    tiny = torch.finfo(want.real.dtype).tiny  # CPU's subnormal parts are flushed (platform difference)
    torch.testing.assert_close(got.real, want.real, rtol=1e-5, atol=tiny)
    torch.testing.assert_close(got.imag, want.imag, rtol=1e-5, atol=tiny)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
@pytest.mark.parametrize("op", [torch.mul, torch.div, torch.add, torch.sub], ids=lambda f: f.__name__)
def test_complex_binary_special_value_grid_as_cpu(op, dtype):
    """Complex mul, div, add and sub over all pairs of a special-value grid, as CPU's
    vectorized kernels compute them: c10's product (ac - bd) + (ad + bc) i without a
    fused multiply-add, c10's quotient (NumPy's scaled division), and self + alpha *
    other with alpha = 1 + 0i multiplied in (so 0 + (inf i) is NaN + inf i, and -0i -
    0i is +0i). Neuron used XLA's product, quotient and sum: 6928 (mul, complex64; 8224
    complex128) and 95482 (add, sub) of the 456976 pairs differed, and 4474 of div's
    160000. (div's grid leaves out 1e-30, 1e30 and the largest magnitudes, whose
    quotients have subnormal intermediates: the "subnormals flushed on XLA:CPU" platform
    difference.)"""
    z = _complex_grid(dtype, extreme=op is not torch.div)
    a, b = z.repeat_interleave(len(z)), z.repeat(len(z))
    rtol = 1e-5 if dtype == torch.complex64 else 1e-11
    _assert_like_cpu_or_flushed_cpu(op, a, b, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
@pytest.mark.parametrize("op", [torch.add, torch.sub], ids=lambda f: f.__name__)
def test_complex_add_and_sub_with_scalars_and_alpha_as_cpu(op, dtype):
    """add/sub of a complex tensor and a Python number, a 0-dim tensor or a tensor, with
    alphas 1, 2, 1 + 0i, 0.5i and -1: CPU computes self + alpha * other with alpha a
    complex number, always multiplied (sub negates alpha), so x + inf gives inf + NaN i
    and x + (1e39 + 0i) in complex64 too (no overflow error: the number is converted
    unchecked); neuron skipped alpha = 1 and gave inf + 0i."""
    z = _complex_grid(dtype, extreme=False)
    others = [complex(float("inf"), 0), complex(0, float("inf")), 1e39 + 0j, 2 - 1j, complex(float("nan"), 0),
              float("inf"), 3]
    rtol = 1e-5 if dtype == torch.complex64 else 1e-11
    for other in others:
        for alpha in (1, 2, 1 + 0j, 0.5j, -1):
            _assert_like_cpu_or_flushed_cpu(lambda x, o: op(x, o, alpha=alpha), z, other, rtol=rtol)
            _assert_like_cpu_or_flushed_cpu(lambda x, o: op(x, o, alpha=alpha), z, torch.tensor(other), rtol=rtol)
            _assert_like_cpu_or_flushed_cpu(lambda o, x: op(x, o, alpha=alpha), torch.tensor(other), z, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_mul_and_div_by_numbers_as_cpu(dtype):
    """A complex tensor times or divided by a Python number: the number is a complex
    factor or divisor (c10's product and quotient), so (inf + 0i) * 2 is inf + NaN i."""
    z = _complex_grid(dtype, extreme=False)
    rtol = 1e-5 if dtype == torch.complex64 else 1e-11
    for s in (2, 0.5, -1.0, 1j, 2 - 1j, float("inf"), 0.0):
        _assert_like_cpu_or_flushed_cpu(torch.mul, z, s, rtol=rtol)
        _assert_like_cpu_or_flushed_cpu(torch.div, z, s, rtol=rtol)


_SCALAR_TENSOR_BITWISE = {
    "and": lambda t: torch.bitwise_and(3, t),
    "or": lambda t: torch.bitwise_or(True, t),
    "xor": lambda t: torch.bitwise_xor(6, t),
    "left_shift": lambda t: torch.bitwise_left_shift(1, t),
    "right_shift": lambda t: torch.bitwise_right_shift(-64, t),
}


@pytest.mark.parametrize("name", sorted(_SCALAR_TENSOR_BITWISE))
@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.uint8, torch.bool, torch.float32], ids=str)
def test_bitwise_ops_with_a_python_number_first_as_cpu(name, dtype):
    """bitwise_*.Scalar_Tensor (`torch.bitwise_and(3, x)`): CPU's composite kernel wraps
    the number into a 0-dim tensor; it reached neuron's Tensor kernel as a Python number,
    which PyTorch's meta call refused (RuntimeError for every dtype). Values, dtypes and
    CPU's NotImplementedError for float (and bool shifts)."""
    x = (torch.arange(12).reshape(3, 4) % 5).to(dtype)
    check_like_cpu(_SCALAR_TENSOR_BITWISE[name], x)
