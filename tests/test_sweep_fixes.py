"""Regression tests for what the OpInfo sweep found outside its CI sample: complex
variance, pad backward through the out= decomposition path and replication padding's
own backward, and the FFT normalization modes, each against CPU PyTorch."""
import pytest
import torch

from helpers import check, check_grad


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
