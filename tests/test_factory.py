import pytest
import torch

from helpers import no_fallback

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int8, torch.int16, torch.int32,
          torch.int64, torch.uint8, torch.bool]


def same(fn, exact=True):
    """fn(device) on CPU and on neuron: equal values, dtype and shape, no fallback;
    the same exception type when CPU raises. `exact`: bitwise, else assert_close."""
    try:
        expected = fn("cpu")
    except Exception as exc:  # noqa: BLE001 - any CPU error is the expectation
        with pytest.raises(type(exc)), no_fallback():
            fn("neuron")
            torch.neuron.synchronize()
        return
    with no_fallback():
        actual = fn("neuron")
    assert actual.device.type == "neuron"
    if exact:
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        assert torch.equal(actual.cpu(), expected), (actual.cpu(), expected)
    else:
        torch.testing.assert_close(actual.cpu(), expected)


@pytest.mark.parametrize("args", [(10,), (2, 11, 3), (-3, 4), (5.0,), (0, 1, 0.1), (1.5, -2.5, -0.5), (3, 3)])
def test_arange(args):
    same(lambda d: torch.arange(*args, device=d))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_arange_dtypes(dtype):
    same(lambda d: torch.arange(0, 7, 2, dtype=dtype, device=d))
    # Fractional steps, long enough for ATen's vectorized loop and its scalar tail:
    # bitwise equal, except float64 (ATen's fused multiply-add: one ulp).
    for args in [(-3.3, 10.7, 0.37), (0.1, 5.0, 0.013)]:
        same(lambda d: torch.arange(*args, dtype=dtype, device=d), exact=dtype != torch.float64)


def test_arange_errors_and_cache_keys():
    same(lambda d: torch.arange(0, 10, 0, device=d))  # step zero
    same(lambda d: torch.arange(0, -10, 1, device=d))  # wrong sign
    # 5 and 5.0 hash alike but give different dtypes: separate executables.
    same(lambda d: torch.arange(5, device=d))
    same(lambda d: torch.arange(5.0, device=d))


def test_arange_out_resizes():
    def run(d):
        out = torch.empty(2, device=d)
        torch.arange(1, 6, out=out)
        return out

    same(run)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_linspace_logspace(dtype):
    for start, end, steps in [(0, 1, 5), (-2.5, 7.3, 11), (3, -7, 9), (0, 10, 101), (2, 9, 1), (1, 5, 0)]:
        exact = dtype != torch.float64  # float64 can differ from ATen's fused multiply-add by one ulp
        same(lambda d: torch.linspace(start, end, steps, dtype=dtype, device=d), exact)
        same(lambda d: torch.logspace(start / 10, end / 10, steps, dtype=dtype, device=d), exact=False)
        same(lambda d: torch.logspace(start / 4, end / 4, steps, base=2, dtype=dtype, device=d), exact=False)


def test_linspace_scalar_conversion_errors():
    same(lambda d: torch.linspace(300, 5, 3, dtype=torch.int8, device=d))  # overflow
    same(lambda d: torch.linspace(-1, 5, 3, dtype=torch.uint8, device=d))
    same(lambda d: torch.linspace(1e10, 5, 3, dtype=torch.float16, device=d))
    same(lambda d: torch.linspace(0, 5, -1, device=d))

    def out(d):
        o = torch.empty(1, dtype=torch.float64, device=d)
        torch.linspace(0, 1, 4, out=o)
        return o

    same(out)


def test_eye_full_scalar_tensor():
    for dtype in (torch.float32, torch.int32, torch.bool, torch.bfloat16):
        same(lambda d: torch.eye(3, dtype=dtype, device=d))
        same(lambda d: torch.eye(2, 5, dtype=dtype, device=d))
        same(lambda d: torch.full((2, 3), 7, dtype=dtype, device=d))
    same(lambda d: torch.full((2, 3), 1.5, device=d))
    same(lambda d: torch.full((2,), 7, device=d))
    same(lambda d: torch.full((0, 3), True, device=d))
    same(lambda d: torch.scalar_tensor(3.5, device=d))
    same(lambda d: torch.scalar_tensor(2, dtype=torch.int16, device=d))
    same(lambda d: torch.eye(0, device=d))


def test_complex64_fill_values_past_float32_range_raise():
    """CPU checks a fill value into complex64 part by part against float32's range
    (`Scalar::to<c10::complex<float>>`); neuron filled inf. The value is a dynamic
    argument in eager, so the check runs on the device, for a second call of one shape
    too."""
    for value in (1e39, -1e39, 1e39 + 0j, 1e39j, 3.5e38 + 1j, 3.4e38 + 0j, complex(float("inf"), 2.0)):
        for _ in range(2):
            same(lambda d: torch.scalar_tensor(value, dtype=torch.complex64, device=d))
            same(lambda d: torch.full((2,), value, dtype=torch.complex64, device=d))
            same(lambda d: torch.zeros(2, dtype=torch.complex64, device=d).fill_(value))
            same(lambda d: torch.zeros(2, dtype=torch.complex64, device=d).new_full((2,), value))


def test_tril_triu_indices():
    for row, col, offset in [(4, 5, 0), (4, 3, -1), (3, 6, 2), (0, 3, 0)]:
        same(lambda d: torch.tril_indices(row, col, offset, device=d))
        same(lambda d: torch.triu_indices(row, col, offset, device=d))


def test_common_factories_need_no_fallback():
    same(lambda d: torch.zeros(2, 3, dtype=torch.int8, device=d))
    same(lambda d: torch.ones(4, device=d))
    same(lambda d: torch.tensor([[1, 2], [3, 4]], device=d))
    same(lambda d: torch.zeros_like(torch.ones(2, 3, device=d)))
    same(lambda d: torch.ones_like(torch.ones(2, 3, device=d), dtype=torch.bfloat16))
    same(lambda d: torch.full_like(torch.ones(2, 3, device=d), 2.5))
    same(lambda d: torch.ones(3, device=d).new_zeros(2))
    same(lambda d: torch.ones(3, device=d).new_full((2,), 4))
    same(lambda d: torch.ones(3, device=d).new_tensor([5, 6]))
    with no_fallback():
        assert torch.empty_like(torch.ones(2, 3, device="neuron")).shape == (2, 3)
        assert torch.empty(4, 5, device="neuron").shape == (4, 5)


def test_compile_only_lowerings(monkeypatch):
    # torch.compile graphs hold full_like and arange, which eager builds from empty + fill.
    import torchneuron

    monkeypatch.setattr(torchneuron.config, "STRICT", True)  # no op may run outside the graph

    def f(t):
        return torch.full_like(t, 2.5) + torch.arange(t.shape[1], device=t.device), torch.zeros(3, device=t.device)

    x = torch.randn(2, 4)
    expected = f(x)
    actual = torch.compile(f, backend="neuron")(x.to("neuron"))
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_logspace_of_a_decreasing_integer_range(dtype):
    # end - start promotes to int for narrow integer types on the CPU: no wraparound.
    for start, end, steps, base in ((1, 0, 4, 2.0), (3, 0, 5, 2.0), (0, 2, 3, 3.0), (2, -1, 4, 2.0)):
        if dtype == torch.uint8 and min(start, end) < 0:
            continue
        want = torch.logspace(start, end, steps, base, dtype=dtype)
        with no_fallback():
            got = torch.logspace(start, end, steps, base, dtype=dtype, device="neuron")
        assert torch.equal(got.cpu(), want), (start, end, steps, base, got, want)


@pytest.mark.parametrize("args,kwargs", [((0, 3, 7), dict(dtype=torch.uint8)), ((0, 3, 7), dict(dtype=torch.int8)),
                                         ((0, 10, 5), dict(base=2, dtype=torch.int8)),
                                         ((0, 20, 5), dict(dtype=torch.int32))])
def test_logspace_of_integers_wraps_on_overflow_like_cpu(args, kwargs):
    # ATen computes in double and casts: values past the type's range wrap (uint8 1000 -> 232).
    with no_fallback():
        got = torch.logspace(*args, **kwargs, device="neuron")
    assert torch.equal(got.cpu(), torch.logspace(*args, **kwargs))
