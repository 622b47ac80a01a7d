"""Regression tests for what the OpInfo sweep found outside its CI sample, each against
CPU PyTorch: complex variance, pad backward through the out= decomposition path and
replication padding's own backward, the FFT normalization modes, and the ops the sweep
saw on the CPU fallback (frexp, gcd/lcm, mode, ...)."""
import pytest
import torch

from helpers import check, check_grad, check_like_cpu


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_var_mean_of_complex_uses_the_imaginary_part(dtype):
    x = torch.randn(5, 4, dtype=dtype)
    check(lambda t: torch.var_mean(t, dim=1), x)
    check(lambda t: torch.std(t, 0, correction=2), x)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 10), (3, 2)), ((2, 3, 6, 7), (1, 2, 2, 1))])
def test_pad_backward(mode, shape, pad):
    check_grad(lambda t: (torch.nn.functional.pad(t, pad, mode=mode) ** 2).sum(),
               torch.randn(*shape, dtype=torch.float64))


def test_replicate_negative_pad_backward():
    check_grad(lambda t: (torch.nn.functional.pad(t, (-1, 2, 2, -2), mode="replicate") ** 2).sum(),
               torch.randn(2, 3, 6, 7, dtype=torch.float64))


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_fft_normalizations(norm):
    x = torch.randn(4, 6, dtype=torch.float64)
    check(lambda t: torch.fft.irfftn(torch.fft.rfftn(t, norm=norm), s=(4, 6), norm=norm), x)
    check(lambda t: torch.fft.ifft(torch.fft.fft(t, norm=norm), norm=norm), x)
    check(lambda t: torch.fft.hfft(t.to(torch.complex128), norm=norm), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_frexp_special_and_subnormal_values(dtype):
    tiny = torch.finfo(dtype).smallest_normal
    x = torch.tensor([0.0, -0.0, 1.5, -3.25, float("inf"), float("-inf"), float("nan")], dtype=dtype)
    check(torch.frexp, torch.cat([x, torch.tensor([tiny / 2, -tiny / 8, tiny * 3], dtype=dtype)]))
    check(torch.frexp, torch.randn(4, 6, dtype=dtype)[:, ::2])


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int32, torch.int64])
def test_gcd_lcm(dtype):
    low = 0 if dtype == torch.uint8 else -50
    a, b = torch.randint(low, 50, (2, 30)).to(dtype)
    check(torch.gcd, a, b)
    check(torch.lcm, a, b)
    check(torch.gcd, a.reshape(6, 5).t(), b[:6])


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.float32])
def test_mode_smallest_most_frequent_value_and_its_last_index(dtype):
    x = torch.randint(0, 4, (5, 7, 6)).to(dtype)
    for dim in (0, 1, -1):
        check(lambda t: torch.mode(t, dim), x)
    check(lambda t: torch.mode(t.transpose(0, 2), 1, keepdim=True), x)
    check(torch.mode, torch.tensor(3, dtype=dtype))


def test_mode_of_an_empty_dim_raises_like_cpu():
    check_like_cpu(lambda t: torch.mode(t, 1), torch.zeros(3, 0))
    check(lambda t: torch.mode(t, 1), torch.zeros(0, 3))
