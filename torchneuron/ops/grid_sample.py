"""Grid sampling lowerings: `aten::grid_sampler_2d`, `aten::grid_sampler_3d` and their backwards.

The sampler follows ATen's vectorized CPU kernel (ATen/native/cpu/GridSamplerKernel.cpp,
``ApplyGridSample`` and ``ComputeLocation``): grid coordinates are unnormalized to pixel
space, mapped through the padding mode (border clips, reflection reflects then clips),
and the input is read by bilinear, nearest (round half to even) or bicubic (A = -0.75)
interpolation; taps outside the image read 0. For float16/bfloat16 CPU runs that kernel
on Vectorized<Half>/<BFloat16>, which rounds every operation to the half type (results
differ from a float32 computation in up to half the elements), so the forward replays
those roundings in CPU's order of operations (`half_rounding`) and equals CPU's.

The helpers below take any number of spatial dimensions (coordinates are listed
outermost first, e.g. (y, x); the grid's last axis lists them innermost first): the
3-d backward shares them; bicubic is 2-d only, as in ATen. The 3-d forward follows
ATen's other CPU kernel, scalar code with its own formulas (`_sample_3d`).

The backward is the JAX transpose (`jax.vjp`) of the forward. The padding functions are
written with `where` rather than clip/abs so that their derivatives equal ATen's
``clip_coordinates_get_grad``/``reflect_coordinates_get_grad``: 0 on and beyond a border,
-1 where a reflection flips the direction; nearest interpolation gives a zero grid
gradient, and bicubic taps (integer positions) carry no gradient, as on CPU.
"""
from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ._common import _exact, acc_type, half_rounding
from .registry import lowering

aten = torch.ops.aten

BILINEAR, NEAREST, BICUBIC = 0, 1, 2  # at::native::GridSamplerInterpolation
ZEROS, BORDER, REFLECTION = 0, 1, 2  # at::native::GridSamplerPadding
_CUBIC_A = -0.75


def unnormalize(coord, size: int, align_corners: bool, r=_exact):
    """Grid coordinate in [-1, 1] -> pixel coordinate: [0, size - 1] with align_corners,
    else [-0.5, size - 0.5] (ComputeLocationBase::unnormalize). `r` rounds each
    operation's result (see `half_rounding`)."""
    if align_corners:
        return r(r(coord + 1) * ((size - 1) / 2))
    return r(r(r(coord + 1) * (size / 2)) - 0.5)


def clip(coord, size: int):
    """Clips to [0, size - 1]; NaN becomes 0 (ATen orders the clamp so that it does).
    Derivative 1 strictly inside, 0 on and beyond the borders."""
    c = jnp.where(coord > 0, coord, 0)
    return jnp.where(c < size - 1, c, size - 1)


def reflect(coord, size: int, align_corners: bool, r=_exact):
    """Reflects about the borders (0 and size - 1 with align_corners, else -0.5 and
    size - 0.5) until inside, as ATen's vectorized ``reflect_coordinates``."""
    twice_span = 2 * (size - 1) if align_corners else 2 * size
    if twice_span == 0:
        return jnp.zeros_like(coord)
    c = coord if align_corners else r(coord + 0.5)
    a = jnp.where(c < 0, -c, c)  # |c| with derivative -1 below 0 and +1 at 0, as ATen's
    extra = r(a - r(jnp.trunc(r(a / twice_span)) * twice_span))
    flipped = r(twice_span - extra)
    out = jnp.where(extra > flipped, flipped, extra)
    return out if align_corners else r(out - 0.5)


def apply_padding(coord, size: int, padding_mode: int, align_corners: bool, r=_exact):
    """ComputeLocation::compute_coordinates: the pixel coordinate after the padding mode."""
    if padding_mode == BORDER:
        return clip(coord, size)
    if padding_mode == REFLECTION:
        return clip(reflect(coord, size, align_corners, r), size)
    return coord


def gather(x, coords: Sequence, sizes: Sequence[int]):
    """x[n, :, coords...] for integral-valued float pixel coordinates `coords` (each of
    shape (N, *out)); 0 where a coordinate is outside [0, size) or NaN.
    Returns (N, C, *out)."""
    n, c = x.shape[:2]
    out_shape = coords[0].shape[1:]
    inside = None
    flat = None
    for coord, size in zip(coords, sizes):
        ok = (coord > -1) & (coord < size)  # false for NaN, as ATen's integer mask
        inside = ok if inside is None else inside & ok
        i = jnp.clip(jnp.where(ok, coord, 0), 0, size - 1).astype(jnp.int32)
        flat = i if flat is None else flat * size + i
    xs = x.reshape(n, c, -1)
    vals = jax.vmap(lambda a, i: a[:, i])(xs, flat.reshape(n, -1)).reshape((n, c) + out_shape)
    return jnp.where(inside[:, None], vals, 0)


def _cubic_coefficients(t, r=_exact):
    """The four cubic-convolution weights of taps -1, 0, 1, 2 at fraction `t`
    (ApplyGridSample<..., Bicubic>::get_cubic_coefficients; the constants are exact)."""
    a = _CUBIC_A

    def near(x):  # |x| <= 1
        return r(r(r(r(r((a + 2) * x) - (a + 3)) * x) * x) + 1)

    def far(x):  # 1 < |x| < 2
        return r(r(r(r(r(r(a * x) - 5 * a) * x) + 8 * a) * x) - 4 * a)

    return far(r(t + 1)), near(t), near(r(1 - t)), far(r(2 - t))


def _dot(weights, values, r):
    """w0 * v0 + w1 * v1 + ..., left to right, each operation rounded by `r`."""
    out = None
    for w, v in zip(weights, values):
        term = r(w * v)
        out = term if out is None else r(out + term)
    return out


def sample(x, coords: Sequence, interpolation_mode: int, padding_mode: int, align_corners: bool, r=_exact):
    """Samples `x` (N, C, *spatial) at the normalized coordinates `coords` (one array of
    shape (N, *out) per spatial dim, outermost first); returns (N, C, *out) in x's dtype,
    which must already be the compute dtype. `r` rounds each arithmetic operation's
    result, in ATen's order of operations (see `half_rounding`)."""
    sizes = x.shape[2:]
    pix = [unnormalize(g, s, align_corners, r) for g, s in zip(coords, sizes)]
    if interpolation_mode == BICUBIC:
        if len(sizes) != 2:
            raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
        (y, xx), (h, w) = pix, sizes
        y0, x0 = jnp.floor(y), jnp.floor(xx)
        cy, cx = _cubic_coefficients(r(y - y0), r), _cubic_coefficients(r(xx - x0), r)

        def tap(dy, dx):  # get_value_bounded: the padding mode applies to each tap
            return gather(x, [apply_padding(y0 + dy, h, padding_mode, align_corners, r),
                              apply_padding(x0 + dx, w, padding_mode, align_corners, r)], sizes)

        rows = [_dot([c[:, None] for c in cx], [tap(i - 1, j - 1) for j in range(4)], r) for i in range(4)]
        return _dot([c[:, None] for c in cy], rows, r)
    pix = [apply_padding(p, s, padding_mode, align_corners, r) for p, s in zip(pix, sizes)]
    if interpolation_mode == NEAREST:
        return gather(x, [jnp.round(p) for p in pix], sizes)  # nearbyint: half to even
    if interpolation_mode != BILINEAR:
        raise RuntimeError(f"grid_sampler(): unknown interpolation mode {interpolation_mode}")
    lo = [jnp.floor(p) for p in pix]
    frac = [r(p - f) for p, f in zip(pix, lo)]
    rest = [r(1 - f) for f in frac]
    weights, values = [], []
    # Corners in ATen's order (nw, ne, sw, se for 2-d: outer dims vary slowest); each
    # weight is the product of the per-dim weights, outermost first (nw = s * e).
    for corner in range(2 ** len(sizes)):
        bits = [(corner >> (len(sizes) - 1 - d)) & 1 for d in range(len(sizes))]
        weight = None
        for b, f, g in zip(bits, frac, rest):
            wd = f if b else g
            weight = wd if weight is None else r(weight * wd)
        weights.append(weight[:, None])
        values.append(gather(x, [f + b for f, b in zip(lo, bits)], sizes))
    # ATen multiplies value * weight; the product is the same either way round.
    return _dot(weights, values, r)


def _coords(grid):
    """The grid's last axis (x, y[, z]: innermost first) as a list outermost first."""
    return [grid[..., i] for i in reversed(range(grid.shape[-1]))]


def _forward(input, grid, interpolation_mode, padding_mode, align_corners, r=_exact):
    c = acc_type(input.dtype)
    return sample(input.astype(c), _coords(grid.astype(c)), interpolation_mode, padding_mode, align_corners, r)


@lowering(aten.grid_sampler_2d.default)
def grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners):
    """`aten::grid_sampler_2d` (`F.grid_sample` on 4-d input): ATen's vectorized CPU
    kernel (GridSamplerKernel.cpp). For half types that kernel runs on Vectorized<Half>
    (<BFloat16>), rounding every operation to the half type (its results differ from a
    float32 computation in up to half the elements), so the same operations are rounded
    here in the same order: the results equal CPU's."""
    r = half_rounding(input.dtype)
    return _forward(input, grid, interpolation_mode, padding_mode, align_corners, r).astype(input.dtype)


# ---- the 3-d sampler: ATen's scalar CPU kernel (GridSampler.cpp, grid_sampler_3d_cpu_impl,
# with GridSampler.h's scalar coordinate helpers), in the input's own dtype: a half type
# rounds every operation, and the formulas differ from the vectorized 2-d kernel's.
def _clip_scalar(coord, size: int):
    """std::min(size - 1, std::max(coord, 0)): NaN becomes size - 1."""
    c = jnp.where(coord < 0, 0, coord)
    return jnp.where(c < size - 1, c, size - 1)


def _reflect_scalar(coord, twice_low: int, twice_high: int, r):
    """GridSampler.h's reflect_coordinates."""
    if twice_low == twice_high:
        return jnp.zeros_like(coord)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    a = jnp.abs(r(coord - low))
    extra = r(jnp.fmod(a, span))
    even = jnp.floor(r(a / span)) % 2 == 0
    return jnp.where(even, r(extra + low), r(r(span - extra) + low))


def _source_index_scalar(coord, size: int, padding_mode: int, align_corners: bool, r):
    """GridSampler.h's grid_sampler_compute_source_index: unnormalize, pad, and -100
    for what cannot become an int (safe_downgrade_to_int_range)."""
    if align_corners:
        c = r(r(r(coord + 1) / 2) * (size - 1))
    else:
        c = r(r(r(r(coord + 1) * size) - 1) / 2)
    if padding_mode == BORDER:
        c = _clip_scalar(c, size)
    elif padding_mode == REFLECTION:
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        c = _clip_scalar(_reflect_scalar(c, *twice, r), size)
    bad = ~jnp.isfinite(c) | (c > 2.0 ** 31 - 2) | (c < -2.0 ** 31)
    return jnp.where(bad, -100.0, c).astype(c.dtype)


def _sample_3d(x, coords, interpolation_mode: int, padding_mode: int, align_corners: bool, r):
    """grid_sampler_3d_cpu_impl on `x` (N, C, D, H, W) at `coords` (z, y, x), each
    operation rounded by `r`: per-dim weights (lo + 1 - i, i - lo), each corner's the
    product x * y * z, and the in-bounds corners added to 0 in ATen's order."""
    sizes = x.shape[2:]
    pix = [_source_index_scalar(g, s, padding_mode, align_corners, r) for g, s in zip(coords, sizes)]
    if interpolation_mode == NEAREST:
        return gather(x, [jnp.round(p) for p in pix], sizes)  # nearbyint: half to even
    if interpolation_mode != BILINEAR:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    lo = [jnp.floor(p) for p in pix]
    below = [r((f + 1) - p) for p, f in zip(pix, lo)]  # weight of the lower tap
    above = [r(p - f) for p, f in zip(pix, lo)]
    out = None
    for corner in range(8):  # tnw, tne, tsw, tse, bnw, bne, bsw, bse: z slowest, x fastest
        bits = [(corner >> (2 - d)) & 1 for d in range(3)]
        wz, wy, wx = (a if b else w for b, a, w in zip(bits, above, below))
        weight = r(r(wx * wy) * wz)[:, None]
        taps = [f + b for f, b in zip(lo, bits)]
        inside = None
        for t, size in zip(taps, sizes):
            ok = (t > -1) & (t < size)
            inside = ok if inside is None else inside & ok
        term = r(gather(x, taps, sizes) * weight)
        out = jnp.where(inside[:, None], term, 0) if out is None else jnp.where(inside[:, None], r(out + term), out)
    return out


@lowering(aten.grid_sampler_3d.default)
def grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners):
    """`aten::grid_sampler_3d` (`F.grid_sample` on 5-d input): ATen's scalar 3-d CPU
    kernel, its operations and their order (`_sample_3d`), rounded to a half type as
    its Half/BFloat16 arithmetic rounds them: the results equal CPU's. Bilinear means
    trilinear; bicubic raises, as on CPU."""
    r = half_rounding(input.dtype)
    c = acc_type(input.dtype)
    return _sample_3d(input.astype(c), _coords(grid.astype(c)), interpolation_mode, padding_mode, align_corners,
                      r).astype(input.dtype)


@lowering(aten.grid_sampler_2d_backward.default, aten.grid_sampler_3d_backward.default)
def grid_sampler_backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners,
                          output_mask):
    """`aten::grid_sampler_2d_backward` and `grid_sampler_3d_backward`: (grad_input,
    grad_grid), the transpose of the forward; grad_input is None (undefined) when
    output_mask[0] is false, as on CPU. Half types compute in float32 and round once:
    CPU's 2-d half kernel also scatter-adds into grad_input in the half type in its loop
    order, which a parallel scatter cannot replay (listed in coverage/expected.py, with
    CPU's far larger error against float64)."""
    c = acc_type(input.dtype)
    _, vjp = jax.vjp(lambda x, g: _forward(x, g, interpolation_mode, padding_mode, align_corners),
                     input.astype(c), grid.astype(c))
    gi, gg = vjp(grad_output.astype(c))
    return (gi.astype(input.dtype) if output_mask[0] else None,
            gg.astype(grid.dtype) if output_mask[1] else None)
