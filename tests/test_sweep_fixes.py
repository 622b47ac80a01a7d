"""Regression tests for what the OpInfo sweep found outside its CI sample, each against
CPU PyTorch: complex variance, pad backward through the out= decomposition path and
replication padding's own backward, the FFT normalization modes, and the ops the sweep
saw on the CPU fallback (frexp, gcd/lcm, mode, ...)."""
import pytest
import torch
import torch.nn.functional as F

from helpers import check, check_grad, check_like_cpu, no_fallback


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


@pytest.mark.parametrize("dtype", [pytest.param(d, marks=pytest.mark.slow)
                                   for d in (torch.uint8, torch.int8, torch.int32)] + [torch.int64])
def test_gcd_lcm(dtype):
    low = 0 if dtype == torch.uint8 else -50
    a, b = torch.randint(low, 50, (2, 30)).to(dtype)
    check(torch.gcd, a, b)
    check(torch.lcm, a, b)
    check(torch.gcd, a.reshape(6, 5).t(), b[:6])


@pytest.mark.parametrize("dtype", [pytest.param(torch.bool, marks=pytest.mark.slow),
                                   pytest.param(torch.int64, marks=pytest.mark.slow), torch.float32])
def test_mode_smallest_most_frequent_value_and_its_last_index(dtype):
    x = torch.randint(0, 4, (5, 7, 6)).to(dtype)
    for dim in (0, 1, -1):
        check(lambda t: torch.mode(t, dim), x)
    check(lambda t: torch.mode(t.transpose(0, 2), 1, keepdim=True), x)
    check(torch.mode, torch.tensor(3, dtype=dtype))


def test_mode_of_an_empty_dim_raises_like_cpu():
    check_like_cpu(lambda t: torch.mode(t, 1), torch.zeros(3, 0))
    check(lambda t: torch.mode(t, 1), torch.zeros(0, 3))


def test_adaptive_max_pool_ties_and_nans():
    x = torch.randn(2, 3, 7, 9)
    x[0, 0, 1, 1] = x[0, 0, 2, 2] = float("nan")  # the last NaN of a window wins
    x[1, 1, 3:5, 3:5] = 5.0  # ties: the first maximum wins
    for size in [(3, 4), (1, 1), (10, 4)]:
        check(lambda t: F.adaptive_max_pool2d(t, size, return_indices=True), x)
    check(lambda t: F.adaptive_max_pool2d(t, (3, 2), return_indices=True), x[0].transpose(-1, -2))


@pytest.mark.slow
def test_adaptive_max_pool_1d_3d_half_and_gradients():
    check(lambda t: F.adaptive_max_pool1d(t, 4, return_indices=True), torch.randn(2, 3, 11))
    check(lambda t: F.adaptive_max_pool3d(t, (2, 3, 2), return_indices=True), torch.randn(2, 2, 5, 6, 4))
    check(lambda t: F.adaptive_max_pool2d(t, (3, 4)), torch.randn(2, 3, 7, 9).to(torch.bfloat16))
    check_grad(lambda t: (F.adaptive_max_pool2d(t, (3, 4)) ** 2).sum(), torch.randn(2, 3, 7, 9, dtype=torch.float64))
    check_grad(lambda t: (F.adaptive_max_pool3d(t, (2, 3, 2)) ** 2).sum(),
               torch.randn(2, 2, 5, 6, 4, dtype=torch.float64))
    check_like_cpu(lambda t: F.adaptive_max_pool2d(t, 2), torch.ones(1, 2, 3, dtype=torch.long))


# The default run keeps antialiased bilinear without align_corners; --runslow all.
@pytest.mark.parametrize("mode,antialias", [pytest.param("bicubic", False, marks=pytest.mark.slow), ("bilinear", True),
                                            pytest.param("bicubic", True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("align_corners", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_bicubic_and_antialiased_interpolation(mode, antialias, align_corners):
    x = torch.randn(2, 3, 7, 9, dtype=torch.float64)
    for kw in [dict(size=(4, 13)), dict(scale_factor=(2.5, 0.37))]:
        fn = lambda t: F.interpolate(t, mode=mode, antialias=antialias, align_corners=align_corners, **kw)  # noqa: E731
        check(fn, x.float())
        check(fn, x.float().transpose(-1, -2))
        check_grad(lambda t: (fn(t) ** 2).sum(), x)


@pytest.mark.slow
def test_interpolation_dtypes():
    x = torch.randn(2, 3, 7, 9)
    bicubic = lambda t: F.interpolate(t, mode="bicubic", size=(4, 12))  # noqa: E731
    check(bicubic, x.to(torch.bfloat16))  # weights rounded to bfloat16, as CPU stores them
    check(bicubic, x.to(torch.float16))
    for mode in ("bilinear", "bicubic"):
        antialiased = lambda t: F.interpolate(t, mode=mode, antialias=True, size=(4, 12))  # noqa: E731
        check_like_cpu(antialiased, x.to(torch.float16))  # CPU has no half kernel
        for channels in (3, 6):  # CPU's int16 fixed-point uint8 path, exactly
            check(antialiased, torch.randint(0, 256, (1, channels, 17, 19), dtype=torch.uint8))


@pytest.mark.parametrize("shape", [pytest.param((5, 5), marks=pytest.mark.slow),
                                   pytest.param((2, 4, 6), marks=pytest.mark.slow), (6, 4)])
def test_lu_unpack_and_lu_solve_backward(shape):
    lu, piv = torch.linalg.lu_factor(torch.randn(*shape, dtype=torch.float64))
    check(torch.lu_unpack, lu, piv)
    check(lambda a, p: torch.lu_unpack(a.mT.contiguous().mT, p, unpack_pivots=False), lu, piv)
    check(lambda a, p: torch.lu_unpack(a, p, unpack_data=False), lu, piv)
    if shape[-1] == shape[-2]:
        b = torch.randn(*shape[:-1], 2, dtype=torch.float64)
        check_grad(lambda t: torch.linalg.lu_solve(t, piv.to(t.device), b.to(t.device)).sum(), lu)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex128])
def test_matrix_exp(dtype):
    x = torch.randn(3, 5, 5, dtype=dtype)
    check(torch.linalg.matrix_exp, x, atol=1e-5, rtol=1e-5)
    check(torch.linalg.matrix_exp, x.mT, atol=1e-5, rtol=1e-5)
    check(torch.linalg.matrix_exp, torch.zeros(0, 3, 3, dtype=dtype))
    check_grad(lambda t: (torch.linalg.matrix_exp(t) ** 2).sum().abs(), torch.randn(4, 4, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.complex64, pytest.param(torch.complex128, marks=pytest.mark.slow)])
def test_norms_of_complex_use_the_modulus(dtype):
    x, y = torch.randn(2, 3, 4, dtype=dtype)
    check(lambda a, b: torch.dist(a, b), x, y)
    check(lambda a: torch.linalg.vector_norm(a, 3, dim=1), x)
    check(lambda a: torch.norm(a, 2, dim=0), x)
    check(lambda a: F.normalize(a), x)
    check_grad(lambda a: F.normalize(a).abs().sum(), x)


def test_uniform_of_complex_fills_both_parts():
    x = torch.zeros(1000, dtype=torch.complex64, device="neuron").uniform_(-2, 3)
    parts = torch.view_as_real(x.cpu())
    assert parts.min() >= -2 and parts.max() < 3 and parts.std(0).min() > 1


@pytest.mark.parametrize("shape", [(4, 4), pytest.param((2, 3, 5), marks=pytest.mark.slow),
                                   pytest.param((5, 3), marks=pytest.mark.slow)])
def test_linalg_lu(shape):
    x = torch.randn(*shape, dtype=torch.float64)
    check(torch.linalg.lu, x)
    check_grad(lambda t: sum(m.sum() for m in torch.linalg.lu(t)[1:]), x)


@pytest.mark.slow
def test_igamma_boundaries_bessel_i1_and_softshrink_backward():
    inf, nan = float("inf"), float("nan")
    a = torch.tensor([0, 0, 0, 1, 2, inf, inf, -1, 1, 3.5, 0.5, nan, 1, 5], dtype=torch.float64)
    x = torch.tensor([0, 1, -1, 0, inf, 1, inf, 1, -1, 2.5, 0.1, 1, nan, 30], dtype=torch.float64)
    check(torch.igamma, a, x)
    check(torch.igammac, a, x)
    check(torch.igamma, a.float().reshape(2, 7).t(), x.float().reshape(7, 2), atol=1e-5, rtol=1e-4)
    check(torch.special.i1, torch.randn(20, dtype=torch.float64) * 5)
    check_grad(lambda t: torch.i0(t).sum(), torch.randn(10, dtype=torch.float64))
    check_grad(lambda t: F.softshrink(t, 0.5).sum(), torch.tensor([-1, -0.5, 0.2, 0.5, 0.7, nan], dtype=torch.float64))


def test_sdpa_flash_attention_for_cpu_op():
    """The op CPU's SDPA dispatches to, called directly: output and logsumexp, and the
    gradients through its backward op."""
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    q, k, v = (torch.randn(2, 2, n, 6, dtype=torch.float64) for n in (3, 5, 5))
    check(lambda a, b, c: op(a, b, c, is_causal=True), q, k, v)
    check(lambda a, b, c: op(a, b.transpose(-1, -2).contiguous().transpose(-1, -2), c, scale=0.3), q, k, v)
    check_grad(lambda a: op(a, k.to(a.device), v.to(a.device))[0].sum(), q)


@pytest.mark.parametrize("p", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_margin_loss_backward(p):
    x = torch.randn(5, 4, dtype=torch.float64)
    target = torch.tensor([0, 3, 1, 1, 2])
    w = torch.rand(4, dtype=torch.float64)
    check_grad(lambda a: F.multi_margin_loss(a, target.to(a.device), p=p, margin=0.7, weight=w.to(a.device),
                                             reduction="sum"), x)
    labels = torch.tensor([[3, 0, -1, 1], [1, 2, 3, -1], [0, -1, 2, 2], [-1, 1, 1, 1], [2, 2, 0, -1]])
    check_grad(lambda a: (F.multilabel_margin_loss(a, labels.to(a.device), reduction="none") * 1.3).sum(), x)
    scalar = torch.tensor(0.5, dtype=torch.float64)  # one sample of one class
    check_grad(lambda a: F.multi_margin_loss(a, torch.tensor(0, device=a.device)), scalar)
    check_grad(lambda a: F.multilabel_margin_loss(a, torch.tensor(0, device=a.device)), scalar)


@pytest.mark.parametrize("shape", [(5, 3), pytest.param((2, 3, 5), marks=pytest.mark.slow)])
def test_geqrf_ormqr(shape):
    x = torch.randn(*shape, dtype=torch.float64)
    check(torch.geqrf, x)
    a, tau = torch.geqrf(x)
    m = shape[-2]
    check(lambda a_, t, c: torch.ormqr(a_, t, c, transpose=True), a, tau, torch.randn(*shape[:-2], m, 2,
                                                                                     dtype=torch.float64))
    check(lambda a_, t, c: torch.ormqr(a_, t, c, left=False), a, tau, torch.randn(*shape[:-2], 2, m,
                                                                                 dtype=torch.float64))


def test_rrelu_draws_slopes_and_backpropagates_through_them():
    x = torch.randn(6, 5, dtype=torch.float64)
    check(lambda t: F.rrelu(t, 0.1, 0.3), x)
    xn = x.to("neuron").requires_grad_(True)
    with no_fallback():
        y = F.rrelu(xn, 0.1, 0.3, training=True)
        y.sum().backward()
        z = x.to("neuron")
        F.rrelu(z, 0.1, 0.3, training=True, inplace=True)
    negative = x <= 0
    slopes = y.detach().cpu()[negative] / x[negative]
    assert slopes.min() >= 0.1 and slopes.max() <= 0.3
    assert torch.equal(y.detach().cpu()[~negative], x[~negative])
    torch.testing.assert_close(xn.grad.cpu()[negative], slopes)
    inplace_slopes = z.cpu()[negative] / x[negative]
    assert inplace_slopes.min() >= 0.1 and inplace_slopes.max() <= 0.3


def test_fractional_max_pool_follows_cpu_for_given_samples():
    x = torch.randn(2, 3, 11, 13)
    x[0, 0, 2, 2] = float("nan")
    samples = torch.rand(2, 3, 2)
    for kernel, size in [((3, 2), (4, 5)), ((3, 3), (1, 1))]:
        check(lambda t, r: F.fractional_max_pool2d(t, kernel, output_size=size, return_indices=True,
                                                   _random_samples=r), x, samples)
    check_grad(lambda t: (F.fractional_max_pool2d(t, (3, 2), output_size=(4, 5),
                                                  _random_samples=samples.double().to(t.device)) ** 2).sum(),
               torch.randn(2, 3, 11, 13, dtype=torch.float64))


@pytest.mark.slow
def test_fractional_max_pool3d():
    samples = torch.rand(2, 2, 3, dtype=torch.float64)
    fn = lambda t: F.fractional_max_pool3d(t, (2, 3, 2), output_size=(4, 3, 5),  # noqa: E731
                                           _random_samples=samples.to(t.device), return_indices=True)
    x = torch.randn(2, 2, 7, 8, 9, dtype=torch.float64)
    check(fn, x)
    check(fn, x.transpose(-1, -3))
    check_grad(lambda t: (fn(t)[0] ** 2).sum(), x)


def test_module_sweep_fixes():
    # (the all-samples ModuleInfo sweep) FractionalMaxPool3d of an unbatched input whose
    # samples hold two batches: CPU reads the first only.
    x = torch.randn(4, 5, 5, 5)
    samples = torch.rand(2, 4, 3)
    check(lambda t, r: torch.ops.aten.fractional_max_pool3d(t, [2, 2, 2], [2, 2, 2], r), x, samples)
    check(lambda t, r: torch.ops.aten.fractional_max_pool2d(t, [2, 2], [2, 2], r), x[:, 0], samples[:, :, :2])
    # MultiLabelMarginLoss of a 1-D input, unreduced, is 0-dim (PyTorch's meta said (1,));
    # every target, also past the first -1, must be in range.
    x, labels = torch.randn(10, dtype=torch.float64), torch.randint(0, 10, (10,))
    check(lambda t: F.multilabel_margin_loss(t, labels.to(t.device), reduction="none"), x)
    check_grad(lambda a: F.multilabel_margin_loss(a, labels.to(a.device), reduction="none") * 1.5, x)
    check_like_cpu(lambda t, y: F.multilabel_margin_loss(t, y), torch.randn(2, 4), torch.tensor([[0, 1, -1, 5], [1, -1, 0, 0]]))
