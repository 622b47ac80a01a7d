"""torch.special's Bessel, Airy, orthogonal-polynomial and error-function ops
(torchneuron/ops/special.py) against PyTorch CPU, with no CPU fallback.

Each case compiles an executable (a few tenths of a second for the ops with loops), so
the checks are folded together: the float32 grid runs through a non-contiguous view and
the float64 grid through out=, and integer inputs are one more call per op.
"""
import math

import pytest
import torch

from helpers import check

S = torch.special
INF, NAN = math.inf, math.nan

UNARY = ["airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0", "modified_bessel_i1",
         "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
         "spherical_bessel_j0", "erfcx", "ndtri", "log_ndtr"]
POLYNOMIALS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
               "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
               "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
               "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]

# The branch points of the CPU kernels (Math.h) and the values around them: 1e-5 (J0's
# series), 2 and 8 (I and K), 2.09 and 8.3203353 and 103.892 (Ai), 5 (J and Y), 6.1 and
# 26.7 (erfcx), 50 (erfcx's continued fraction). Subnormal inputs are left out: XLA:CPU
# flushes them to zero.
EDGES = [0.0, -0.0, 1e-6, -1e-6, 1e-5, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 2.09, -2.09, 5.0, -5.0, 6.1, -6.1, 8.0,
         -8.0, 8.3203353, 26.7, -26.7, 27.0, -27.0, 50.0, 51.0, 103.8, 104.0, -104.0, 700.0, -700.0, 1e10, -1e10,
         1e30, INF, -INF, NAN, 1e-30, 0.3, 0.975, 1 - 1e-7]


def _grid(dtype):
    return torch.cat([torch.tensor(EDGES, dtype=torch.float64), torch.linspace(-30, 30, 241, dtype=torch.float64),
                      torch.linspace(0, 1, 101, dtype=torch.float64)]).to(dtype)


@pytest.mark.parametrize("name", UNARY)
def test_unary(name):
    fn = getattr(S, name)
    x32 = _grid(torch.float32)
    check(lambda a: fn(a[::2]), torch.stack([x32, x32 + 1], 1).flatten())  # non-contiguous
    x64 = _grid(torch.float64)
    check(lambda a: fn(a, out=torch.empty_like(a)), x64)
    check(fn, torch.arange(-30, 31, dtype=torch.int32))  # -> float32


# Degrees: negative and fractional ones (truncated, as CPU's static_cast does), the
# thresholds of the trigonometric forms (4, 6, 8), Hermite's NaN limits (128 for
# float32, 512 for float64), and NaN, infinities and 1e30 (all of which CPU makes a
# negative degree, so 0).
DEGREES = [-5, -1, -0.5, 0, 0.7, 1, 1.9, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 20, 127, 128, 129, 511, 512, 513,
           1e30, INF, -INF, NAN]
# |x| = 1 and x = 0, 1 (the shifted polynomials' special points), inside and outside
# [-1, 1], values whose recurrences overflow to inf and then NaN, and NaN.
POINTS = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.25, 0.75, 0.999, -0.999, 1.001, 1.5, -1.5, 2.0, -2.0, 9.0, -9.0,
          100.0, INF, -INF, NAN]


@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomial(name):
    fn = getattr(S, name)
    x, n = torch.meshgrid(torch.tensor(POINTS, dtype=torch.float64), torch.tensor(DEGREES, dtype=torch.float64),
                          indexing="ij")
    x32, n32 = x.float(), n.float()
    check(lambda a, b: fn(a.t(), b.t()), x32, n32)  # non-contiguous
    check(lambda a, b: fn(a, b, out=torch.empty_like(a)), x.flatten(), n.flatten())
    check(fn, torch.arange(-4, 5).repeat(3), torch.arange(-3, 24))  # int64 -> float32


@pytest.mark.parametrize("name", ["chebyshev_polynomial_t", "hermite_polynomial_h"])
def test_polynomial_scalar_overloads(name):
    fn = getattr(S, name)
    check(lambda n: fn(0.3, n), torch.arange(-2, 12, dtype=torch.int16))  # x_scalar
    check(lambda x: fn(x, 5), torch.linspace(-2, 2, 9, dtype=torch.float64))  # n_scalar


def test_zeta_domain_cases_follow_cephes_order():
    # s == 1 is a pole and s < 1 is outside the domain before q's poles are looked at
    # (CPU's zeta): zeta(0, -4) is NaN, not inf (found by the all-samples spot check).
    s = torch.tensor([0., 0., -5., 1., 1., 2., 2., 2.5, 2.5, 3.])
    q = torch.tensor([-4., 2., -1., -3., 2., -2., -1.5, -1.5, 3., 0.])
    want = torch.special.zeta(s, q)
    got = torch.special.zeta(s.to("neuron"), q.to("neuron")).cpu()
    torch.testing.assert_close(got, want, equal_nan=True)
    ints = torch.arange(-3, 4)
    torch.testing.assert_close(torch.special.zeta(ints[:, None].to("neuron"), ints.to("neuron")).cpu(),
                               torch.special.zeta(ints[:, None], ints), equal_nan=True)
