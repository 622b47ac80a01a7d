"""FFT lowerings: ATen's three FFT primitives, which every `torch.fft` function
(fft, ifft, rfft, irfft, hfft, fftn, stft, istft, ...) is built from, via `jnp.fft`.

`normalization` is ATen's fft_norm_mode: 0 none, 1 by 1/sqrt(n), 2 by 1/n, where n is
the number of points of the transformed signal (the output's sizes for c2r). JAX's
transforms are asked for their unscaled direction and scaled here.
"""
import math

import jax.numpy as jnp
import torch

from .registry import context, lowering

aten = torch.ops.aten


def _scaled(x, normalization, n):
    if normalization == 1:
        return x * (1 / math.sqrt(n))
    if normalization == 2:
        return x * (1 / n)
    return x


def _points(shape, dim):
    return math.prod(shape[d] for d in dim)


@lowering(aten._fft_r2c.default, static=("dim", "normalization", "onesided"))
def fft_r2c(self, dim, normalization, onesided):
    """aten::_fft_r2c: the FFT over `dim` of a real tensor; with `onesided`, the last
    dim of `dim` keeps n // 2 + 1 frequencies. Output complex, same rank."""
    out = context().out_dtype()
    dim = tuple(dim)
    if onesided:
        y = jnp.fft.rfftn(self, axes=dim)
    else:
        y = jnp.fft.fftn(self.astype(out), axes=dim)
    return _scaled(y, normalization, _points(self.shape, dim)).astype(out)


@lowering(aten._fft_c2r.default, static=("dim", "normalization", "last_dim_size"))
def fft_c2r(self, dim, normalization, last_dim_size):
    """aten::_fft_c2r: the inverse FFT over `dim` of a one-sided Hermitian tensor,
    real output whose last dim of `dim` has `last_dim_size` points (unscaled inverse,
    then `normalization`)."""
    dim = tuple(dim)
    sizes = [self.shape[d] for d in dim[:-1]] + [last_dim_size]
    y = jnp.fft.irfftn(self, s=sizes, axes=dim, norm="forward")
    return _scaled(y, normalization, math.prod(sizes)).astype(context().out_dtype())


@lowering(aten._fft_c2c.default, static=("dim", "normalization", "forward"))
def fft_c2c(self, dim, normalization, forward):
    """aten::_fft_c2c: the complex FFT (or unscaled inverse) over `dim`, then `normalization`."""
    dim = tuple(dim)
    y = jnp.fft.fftn(self, axes=dim) if forward else jnp.fft.ifftn(self, axes=dim, norm="forward")
    return _scaled(y, normalization, _points(self.shape, dim)).astype(context().out_dtype())
