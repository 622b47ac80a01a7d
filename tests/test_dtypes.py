"""Dtypes on `neuron` against CPU PyTorch: exact round trips, 64-bit values beyond
32-bit range and precision, conversions, `view(dtype)` reinterpretation, complex."""
import pytest
import torch

from helpers import check, no_fallback

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
ALL = FLOATS + INTS + [torch.bool]


def _values(dtype):
    """Edge values of `dtype`: extremes, signed zeros, inf and nan, ordinary numbers."""
    if dtype == torch.bool:
        return torch.tensor([True, False, True, True, False])
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        return torch.tensor([0.0, -0.0, 1.5, -2.25, info.max, info.min, info.tiny, info.eps,
                             float("inf"), float("-inf"), float("nan"), 1e-3], dtype=dtype)
    info = torch.iinfo(dtype)
    return torch.tensor([info.min, info.max, 0, 1, info.max - 1, info.min + 1], dtype=dtype)


def _same_bits(a, b):
    """Bitwise equality (NaN payloads and signed zeros included)."""
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.view(width), b.view(width))


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_round_trip_is_bit_exact(dtype):
    cpu = _values(dtype)
    with no_fallback():
        dev = cpu.to("neuron")
        assert dev.dtype == dtype
        assert _same_bits(dev.cpu(), cpu)
        assert _same_bits(dev.clone().cpu(), cpu)
        assert _same_bits(torch.empty_like(dev).copy_(dev).cpu(), cpu)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_identity_arithmetic_is_exact(dtype):
    cpu = _values(dtype)
    check(lambda x: (x + 0, x * 1, x - 0), cpu)


def test_int64_beyond_2_pow_53():
    cpu = torch.tensor([2**53 + 1, 2**62 + 3, -(2**63), 2**63 - 1, -(2**53) - 1])
    check(lambda x: (x, x + 0, x * 1, x[1:] - 1, x // 1), cpu)
    dev = cpu.to("neuron")
    assert dev[1].item() == 2**62 + 3
    assert dev.tolist() == cpu.tolist()
    assert torch.tensor(2**62 + 1, device="neuron").item() == 2**62 + 1


def test_float64_beyond_float32():
    cpu = torch.tensor([1 + 2**-40, 1e300, -1e-300, 3.141592653589793, 2.0**100 + 2.0**48], dtype=torch.float64)
    check(lambda x: (x, x + 0, x * 1, x * x), cpu)
    dev = cpu.to("neuron")
    assert dev[0].item() == 1 + 2**-40
    assert (dev + 0)[1].item() == 1e300


def test_subnormals_survive_transfers_and_copies():
    cpu = torch.tensor([1e-40, -1e-45, 5e-39])
    dev = cpu.to("neuron")
    assert _same_bits(dev.cpu(), cpu)
    assert _same_bits(dev.clone().cpu(), cpu)
    d64 = torch.tensor([5e-324, 1e-310], dtype=torch.float64)
    assert _same_bits(d64.to("neuron").cpu(), d64)


@pytest.mark.xfail(strict=True, reason="XLA:CPU runs with flush-to-zero/denormals-are-zero: arithmetic on "
                                       "subnormal floats gives 0 where CPU PyTorch keeps them")
def test_subnormal_arithmetic():
    cpu = torch.tensor([1e-40, 5e-39])
    assert _same_bits((cpu.to("neuron") * 1).cpu(), cpu * 1)


CONVERSIONS = [
    (torch.float32, torch.int32), (torch.float32, torch.int64), (torch.float32, torch.bool),
    (torch.float32, torch.bfloat16), (torch.float32, torch.float16), (torch.float64, torch.float32),
    (torch.int64, torch.float32), (torch.int64, torch.float64), (torch.int32, torch.int8),
    (torch.bool, torch.float32), (torch.uint8, torch.int64), (torch.bfloat16, torch.float64),
]


@pytest.mark.parametrize("src,dst", CONVERSIONS, ids=str)
def test_conversions(src, dst):
    if src.is_floating_point:
        cpu = (torch.randn(64, dtype=torch.float64) * 100).to(src)
    elif src == torch.bool:
        cpu = torch.rand(64) > 0.5
    else:
        cpu = torch.randint(0, 100, (64,)).to(src)
    if src == torch.int64 and dst == torch.float32:
        cpu = torch.tensor([2**53 + 1, 2**31 + 3, -(2**40) - 7, 16777217])  # float32 rounding
    if src == torch.int32 and dst == torch.int8:
        cpu = torch.tensor([300, -300, 127, 128, -129], dtype=torch.int32)  # wraps
    check(lambda x: x.to(dst), cpu)


@pytest.mark.parametrize("dst", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64], ids=str)
def test_float_to_int_conversion_wraps_like_cpu(dst):
    """CPU converts floating -> integer by truncation through a 32/64-bit integer and
    wraps (-1.5 -> uint8 255); XLA's convert saturates. Eager (copy_) and compiled
    (_to_copy) conversions follow CPU."""
    x = torch.tensor([-0.3, -1.5, -3.7, 2.5, 300.7, -300.2, 1e10, -1e10, float("nan"), float("inf")])
    for src in (torch.float32, torch.float64, torch.bfloat16):
        check(lambda t: t.to(dst), x.to(src))
    compiled = torch.compile(lambda t: (t * 1).to(dst), backend="neuron")
    assert torch.equal(compiled(x.to("neuron")).cpu(), x.to(dst))


REINTERPRET = [
    (torch.float32, torch.int32), (torch.float32, torch.uint8), (torch.float32, torch.bfloat16),
    (torch.float32, torch.int16), (torch.uint8, torch.float32), (torch.bfloat16, torch.int16),
    (torch.float64, torch.int64), (torch.float32, torch.int64), (torch.float64, torch.float32),
    (torch.int64, torch.float64), (torch.uint8, torch.bool), (torch.bool, torch.uint8), (torch.int8, torch.bool),
]


def _bits_source(dtype):
    if dtype in (torch.uint8, torch.int8, torch.bool):
        return torch.randint(0, 2, (4, 8)).to(dtype)  # valid as bool too
    return (torch.randn(4, 8) * 10).to(dtype)  # normal numbers: no NaN payloads


@pytest.mark.parametrize("src,dst", REINTERPRET, ids=str)
def test_view_dtype_reinterprets_bytes(src, dst):
    cpu = _bits_source(src)

    def run(x):
        v = x.view(dst)
        return v, x[1:3].view(dst), v.clone()

    check(run, cpu)
    dev = cpu.to("neuron")
    assert dev.view(dst).untyped_storage().data_ptr() == dev.untyped_storage().data_ptr()


@pytest.mark.parametrize("src,dst", REINTERPRET[:6], ids=str)
def test_write_through_dtype_view(src, dst):
    def run(x):
        x = x.clone()
        v = x.view(dst)
        v[1].zero_()
        v[2, :2].copy_(torch.ones(2, dtype=dst, device=x.device))
        return x, x * 1 if src != torch.bool else x

    check(run, _bits_source(src))


def test_view_dtype_of_transposed_and_mixed_writes():
    check(lambda x: x.t().view(torch.int32), torch.randn(4, 6))

    def run(x):
        x = x.clone()
        x.view(torch.int32)[1] = 7  # storage now last written as int32
        return x, x.clone(), x.view(torch.uint8)[4:8]

    check(run, torch.zeros(4))


def test_view_dtype_errors_like_cpu():
    for dev in ("cpu", "neuron"):
        with pytest.raises(RuntimeError, match="must be divisible by 2"):
            torch.ones(3, device=dev).view(torch.int64)


COMPLEX = [torch.complex64, torch.complex128]


def _complex(dtype, *shape):
    return torch.randn(*shape, dtype=dtype)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_round_trip_and_arithmetic(dtype):
    a, b = _complex(dtype, 5), _complex(dtype, 5)
    with no_fallback():
        assert _same_bits(a.to("neuron").cpu().view(torch.float32 if dtype == torch.complex64 else torch.float64),
                          a.view(torch.float32 if dtype == torch.complex64 else torch.float64))
    check(lambda x, y: (x + y, x * y, x - y, x * 2.5, x.abs()), a, b)
    check(lambda x: torch.tensor(x[1].item()), a)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_views(dtype):
    a = _complex(dtype, 2, 3)
    check(lambda x: (torch.view_as_real(x), x.real, x.imag, torch.view_as_real(x) * 1, x.imag * 1), a)
    check(lambda x: torch.view_as_complex(x) * 1, torch.view_as_real(a).clone())

    def write(x):
        x = x.clone()
        x.real.mul_(2)
        torch.view_as_real(x)[:, 1, 1] = -1
        return x

    check(write, a)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_conj_and_neg_views(dtype):
    """x.conj() and x.conj().imag are lazy views (conj/neg bits) on every device."""
    a = _complex(dtype, 3, 3)

    def run(x):
        c = x.conj()
        return (c * 1, c + x, c.clone(), c.resolve_conj(), c.imag.clone(), c.imag * 1, c.cpu(),
                c @ x, x.mH @ x, torch.vdot(x[0], x[1]), torch.zeros(3, device=x.device).copy_(c.imag[0]))

    check(run, a, atol=1e-5, rtol=1e-5)

    def write(x):
        x = x.clone()
        x.conj().add_(1 + 2j)
        x.conj().imag.mul_(3)
        y = torch.zeros_like(x)
        y.conj().copy_(x)
        return x, y

    check(write, a)


def test_complex_runs_without_fallback():
    a = torch.randn(4, dtype=torch.complex64).to("neuron")
    with no_fallback():
        (a * a + a).abs().cpu()
        torch.view_as_real(a).cpu()


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fnuz, torch.float8_e5m2fnuz])
def test_float8_fnuz_round_trip(dtype):
    # The fnuz float8 types (no negative zero, NaN at 0x80) map to ml_dtypes' types.
    x = torch.tensor([0.5, -1.25, 3., 100., float("nan"), 0.]).to(dtype)
    assert torch.equal(x.to("neuron").cpu().view(torch.uint8), x.view(torch.uint8))
    assert torch.equal(torch.eye(3, dtype=dtype, device="neuron").cpu().view(torch.uint8),
                       torch.eye(3, dtype=dtype).view(torch.uint8))
