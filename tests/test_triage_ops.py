"""Regression tests for cases the OpInfo sweep flagged: each compares with CPU PyTorch,
and where CPU's result cannot be reproduced (unstable sort ties, dropout masks, CPU's
own inconsistencies) checks the property that the expected-failure reason states."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import no_fallback

HALF = [torch.float16, torch.bfloat16]


# ---------------------------------------------------------------- sort ties
@pytest.mark.parametrize("dtype", HALF)
def test_sort_ties_and_gradient_equal_cpu_stable_sort(dtype):
    """neuron's sort (stable=False too) is CPU's stable sort: same indices among ties
    (many in half types), hence the same gradient; -0.0/0.0 tie, NaN sorts last."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4000, generator=g) * 4).round().to(dtype)
    x[:6] = torch.tensor([0.0, -0.0, float("nan"), -0.0, 0.0, float("nan")], dtype=dtype)
    cot = torch.randn(x.shape, generator=g).to(dtype)
    for descending in (False, True):
        xc = x.clone().requires_grad_()
        vc, ic = torch.sort(xc, stable=True, descending=descending)
        (gc,) = torch.autograd.grad(vc, xc, cot)
        xn = x.to("neuron").requires_grad_()
        vn, in_ = torch.sort(xn, descending=descending)  # stable=False
        (gn,) = torch.autograd.grad(vn, xn, cot.to("neuron"))
        assert torch.equal(in_.cpu(), ic)
        assert torch.equal(vn.detach().cpu().view(torch.int16), vc.detach().view(torch.int16))
        assert torch.equal(gn.cpu(), gc)


# ---------------------------------------------------------------- multi-head attention with dropout
class _GrabDropoutMask(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.masks = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.native_dropout.default:
            self.masks.append(out[1].cpu())
        return out


class _InjectDropoutMask(TorchDispatchMode):
    """CPU's dropout draws its keep-mask with bernoulli_: overwrite it with neuron's."""

    def __init__(self, masks):
        super().__init__()
        self.masks = list(masks)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.bernoulli_.float:
            out.copy_(self.masks.pop(0).to(out.dtype))
        return out


@pytest.mark.parametrize("dtype", [torch.float32])
def test_multi_head_attention_backward_with_dropout_matches_cpu_given_the_mask(dtype):
    """The sweep's MHA backward differs from CPU only by the dropout mask: with CPU
    given neuron's mask, every gradient (in_proj, bias_k/v, out_proj, mask) matches."""
    g = torch.Generator().manual_seed(0)

    def t(*shape):
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 4 - 2).to(dtype)

    e, heads = 4, 2
    q, k, v = t(3, 2, e), t(3, 2, e), t(3, 2, e)
    params = [t(3 * e, e), t(3 * e), t(1, 1, e), t(1, 1, e), t(e, e), t(e), t(3, 3)]
    cot = t(3, 2, e)

    def grads(device, mode):
        leaves = [a.to(device).requires_grad_() for a in [q, k, v] + params]
        qq, kk, vv, w, b, bk, bv, ow, ob, mask = leaves
        with mode:
            out, _ = F.multi_head_attention_forward(qq, kk, vv, e, heads, w, b, bk, bv, False, 0.5, ow, ob,
                                                    training=True, attn_mask=mask)
        return [x.cpu() for x in torch.autograd.grad(out, leaves, cot.to(device))]

    grab = _GrabDropoutMask()
    with no_fallback():
        got = grads("neuron", grab)
    assert len(grab.masks) == 1
    want = grads("cpu", _InjectDropoutMask(grab.masks))
    torch.testing.assert_close(got, want)


# ---------------------------------------------------------------- erfinv
def test_erfinv_float32_as_accurate_as_cpu():
    """ATen's erfinv refines its first guess by two Newton steps; JAX's polynomial alone
    was ~10x less accurate in float32, which the backward (exp(erfinv(x)^2)) amplified
    past the tolerance near |x| = 1."""
    x = torch.cat([torch.linspace(-1, 1, 20001), torch.tensor([0.99997, -0.9999, 0.7, -0.7, 0.0, -0.0,
                                                                1.0, -1.0, 1.5, float("nan")])])
    ref = torch.erfinv(x.double())
    got = torch.erfinv(x.to("neuron")).cpu()
    cpu = torch.erfinv(x)
    finite = ref.isfinite()
    assert (got.double() - ref)[finite].abs().max() < 4e-7  # CPU's own: 1.2e-7; JAX's: 1.1e-6
    torch.testing.assert_close(got, cpu, equal_nan=True)
    assert torch.equal(got[-6:-2], cpu[-6:-2]) and got[-2:].isnan().all()
    assert torch.equal(got[-6:-4].signbit(), cpu[-6:-4].signbit())
    xg = torch.linspace(-0.9999, 0.9999, 401, requires_grad=True)
    (want,) = torch.autograd.grad(torch.erfinv(xg).sum(), xg)
    xn = xg.detach().to("neuron").requires_grad_()
    (have,) = torch.autograd.grad(torch.erfinv(xn).sum(), xn)
    torch.testing.assert_close(have.cpu(), want)


def test_rsqrt_bfloat16_rounds_once_like_cpus_vectorized_path():
    """CPU's bfloat16 rsqrt rounds once in its vectorized loop but rounds sqrt first in
    its scalar tail; neuron rounds once everywhere (the vectorized result)."""
    x = torch.full((64,), 4.21875, dtype=torch.bfloat16)
    assert torch.rsqrt(x)[0].item() == 0.486328125  # CPU, vectorized
    assert torch.rsqrt(x[:20])[-1].item() == 0.48828125  # CPU, scalar tail (vectors of 16 or 32)
    got = torch.rsqrt(x[:20].to("neuron")).cpu()
    assert torch.equal(got, torch.full((20,), 0.486328125, dtype=torch.bfloat16))


# ---------------------------------------------------------------- grid_sampler_2d
# Each interpolation mode, padding mode and align_corners value at least once (each call
# compiles: the sweep covers the OpInfo's own combinations).
FORWARD_MODES = [("bilinear", "zeros", False), ("bilinear", "reflection", True), ("nearest", "border", False),
                 ("bicubic", "reflection", False), ("bicubic", "border", True)]
BACKWARD_MODES = [("bilinear", "reflection", False), ("bilinear", "border", True), ("bicubic", "zeros", False),
                  ("nearest", "zeros", True)]


def _grid_inputs(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 7, generator=g, dtype=torch.float64).to(dtype)
    grid = (torch.rand(2, 4, 6, 2, generator=g, dtype=torch.float64) * 3 - 1.5).to(dtype)
    # exact corners, the centre, a point past a border
    grid[0, 0, :4] = torch.tensor([[1.0, -1.0], [0.0, 0.0], [2.0, 1.0], [-1.0, 1.0]], dtype=dtype)
    return x, grid


@pytest.mark.parametrize("dtype", HALF)
def test_grid_sampler_2d_forward_matches_cpu(dtype):
    """Half types replay CPU's per-operation rounding, so the results equal CPU's bit
    for bit (float64 and float32 values: the backward test's forward and the sweep)."""
    x, grid = _grid_inputs(dtype)
    xn, gn = x.to("neuron"), grid.to("neuron")
    with no_fallback():
        for mode, pad, ac in FORWARD_MODES:
            want = F.grid_sample(x, grid, mode=mode, padding_mode=pad, align_corners=ac)
            got = F.grid_sample(xn, gn, mode=mode, padding_mode=pad, align_corners=ac).cpu()
            assert torch.equal(got, want), (mode, pad, ac)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("mode,pad,ac", [("bilinear", "zeros", False), ("bilinear", "border", True),
                                         ("bilinear", "reflection", False), ("nearest", "reflection", False)])
def test_grid_sampler_3d_half_forward_is_cpus_to_the_bit(dtype, mode, pad, ac):
    """CPU's 3-d kernel is scalar code in the input's dtype (GridSampler.cpp): a half
    type rounds every operation of its own formulas, which neuron replays."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 4, 5, 6, generator=g, dtype=torch.float64).to(dtype)
    grid = (torch.rand(2, 3, 2, 4, 3, generator=g, dtype=torch.float64) * 3 - 1.5).to(dtype)
    with no_fallback():
        got = F.grid_sample(x.to("neuron"), grid.to("neuron"), mode=mode, padding_mode=pad, align_corners=ac)
    assert torch.equal(got.cpu(), F.grid_sample(x, grid, mode=mode, padding_mode=pad, align_corners=ac))


def test_grid_sampler_2d_backward_matches_cpu():
    """grid_sampler_2d_backward is native (no CPU fallback): input and grid gradients,
    including the zero grid gradient on borders and the sign flips of reflection."""
    dtype = torch.float64
    x, grid = _grid_inputs(dtype)
    cot = torch.randn(2, 3, 4, 6, generator=torch.Generator().manual_seed(1), dtype=dtype)
    for mode, pad, ac in BACKWARD_MODES:
        xc, gc = x.clone().requires_grad_(), grid.clone().requires_grad_()
        want = torch.autograd.grad(F.grid_sample(xc, gc, mode=mode, padding_mode=pad, align_corners=ac), (xc, gc), cot)
        xn, gn = x.to("neuron").requires_grad_(), grid.to("neuron").requires_grad_()
        with no_fallback():
            out = F.grid_sample(xn, gn, mode=mode, padding_mode=pad, align_corners=ac)
            got = torch.autograd.grad(out, (xn, gn), cot.to("neuron"))
        torch.testing.assert_close(out.detach().cpu(), F.grid_sample(x, grid, mode=mode, padding_mode=pad,
                                                                     align_corners=ac))
        torch.testing.assert_close([t.cpu() for t in got], list(want), msg=str((mode, pad, ac)))


@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_grid_sampler_2d_half_backward_is_float32_accurate(dtype):
    """Half-type gradients are computed in float32 and rounded once: within a half ulp
    or so of the float64 gradient (CPU's half kernel rounds every step, see expected.py)."""
    x, grid = _grid_inputs(dtype)
    cot = torch.randn(2, 3, 4, 6, generator=torch.Generator().manual_seed(1)).to(dtype)
    xn, gn = x.to("neuron").requires_grad_(), grid.to("neuron").requires_grad_()
    got = torch.autograd.grad(F.grid_sample(xn, gn, mode="bilinear", padding_mode="border", align_corners=False), (xn, gn), cot.to("neuron"))
    xr, gr = x.double().requires_grad_(), grid.double().requires_grad_()
    ref = torch.autograd.grad(F.grid_sample(xr, gr, mode="bilinear", padding_mode="border", align_corners=False), (xr, gr), cot.double())
    for a, r in zip(got, ref):
        assert a.dtype == dtype
        torch.testing.assert_close(a.cpu().double(), r, atol=1e-2, rtol=2 * torch.finfo(dtype).eps)


def test_grid_sampler_2d_backward_output_mask():
    """Without input gradient (output_mask[0] false) only the grid gradient comes back."""
    x, grid = _grid_inputs(torch.float32)
    cot = torch.ones(2, 3, 4, 6)
    want = torch.ops.aten.grid_sampler_2d_backward(cot, x, grid, 0, 1, False, [False, True])
    got = torch.ops.aten.grid_sampler_2d_backward(cot.to("neuron"), x.to("neuron"), grid.to("neuron"), 0, 1, False,
                                                  [False, True])
    assert got[0] is None and want[0] is None
    torch.testing.assert_close(got[1].cpu(), want[1])


# ---------------------------------------------------------------- model sweep finds
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 2, -1])
def test_weight_norm_backward_runs_natively(dtype, dim):
    """transformers' HuBERT (weight-normed positional convolution) sent
    aten::_weight_norm_interface_backward to the CPU fallback."""
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(4, 3, 5, generator=gen, dtype=torch.float64).to(dtype)
    g_shape = [1, 1, 1]
    g_shape[dim] = v.shape[dim]
    g = torch.rand(g_shape, generator=gen, dtype=torch.float64).add(0.5).to(dtype)
    w_grad = torch.randn(v.shape, generator=gen, dtype=torch.float64).to(dtype)

    def grads(device):
        vv = v.to(device).detach().requires_grad_(True)
        gg = g.to(device).detach().requires_grad_(True)
        torch._weight_norm(vv, gg, dim).backward(w_grad.to(device))
        return vv.grad.cpu(), gg.grad.cpu()

    want = grads("cpu")
    with no_fallback():
        got = grads("neuron")
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **tol)


def test_masked_put_of_no_values_with_an_all_false_mask():
    """transformers' Higgs Audio v2 assigns an empty tensor through an all-False mask:
    nothing is written, as on CPU; a non-empty mask with no values still raises."""
    for device in ("cpu", "neuron"):
        x = torch.arange(6.0, device=device).view(2, 3)
        x[torch.zeros(2, 3, dtype=torch.bool, device=device)] = torch.empty(0, device=device)
        assert x.cpu().equal(torch.arange(6.0).view(2, 3))
        mask = torch.tensor([[True, False, False], [False, False, False]], device=device)
        with pytest.raises(RuntimeError, match="shape mismatch"):
            x[mask] = torch.empty(0, device=device)
            x.cpu()


@pytest.mark.parametrize("msg", [None, "my message"])
def test_assert_async_runs_natively_and_raises_like_cpu(msg):
    """timm's Gemma 4 ViT encoder sent aten::_assert_async to the CPU fallback."""
    def call(t):
        return torch._assert_async(t) if msg is None else torch._assert_async(t, msg)

    for value in (torch.tensor(3), torch.tensor([True]), torch.tensor(0.5)):
        with no_fallback():
            call(value.to("neuron"))
            torch.neuron.synchronize()
    for bad in (torch.tensor(0), torch.tensor([1, 2]), torch.tensor([])):
        with pytest.raises(RuntimeError) as cpu:
            call(bad)
        with pytest.raises(RuntimeError) as dev:
            call(bad.to("neuron"))
            torch.neuron.synchronize()
        assert str(dev.value) == str(cpu.value)


# ---------------------------------------------------------------- half-type roundings
# CPU's half-type kernels round some intermediate results to the type (xlogy's log(y),
# logit's 1 - x and quotient) and compute others in float32 with unrounded scalars
# (leaky_relu's slope, hardswish); neuron must give the same bits, not a more or less
# accurate neighbour, since the difference grows past tolerance downstream (kl_div's
# target gradient subtracts two nearly equal terms).
_ROUNDING_OPS = {
    "xlogy": lambda x, y: torch.xlogy(x, y),
    "xlog1py": lambda x, y: torch.special.xlog1py(x, y),
    "entr": lambda x, y: torch.special.entr(y),
    "logit": lambda x, y: torch.logit(y / 10),
    "logit_eps": lambda x, y: torch.logit(y / 10, eps=0.01),
    "logit_eps_over_half": lambda x, y: torch.logit(y / 10, eps=0.6),  # bounds cross: below lo gives lo
    "leaky_relu": lambda x, y: F.leaky_relu(x),
    "rrelu_eval": lambda x, y: F.rrelu(x, training=False),
    "hardsigmoid": lambda x, y: F.hardsigmoid(x),
    "hardswish": lambda x, y: F.hardswish(x),
}


@pytest.mark.parametrize("dtype", HALF + [torch.float32])
@pytest.mark.parametrize("name", sorted(_ROUNDING_OPS))
def test_half_type_intermediate_roundings_equal_cpu_bit_for_bit(name, dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(4096, generator=g) * 20 - 10).to(dtype)
    y = (torch.rand(4096, generator=g) * 10).to(dtype)
    x[:4] = torch.tensor([0.0, float("nan"), 1.0, 0.0])
    y[:4] = torch.tensor([float("nan"), 1.0, 0.0, 0.0])  # NaN with x == 0, log(0), 0 * log(0)
    fn = _ROUNDING_OPS[name]
    with no_fallback():
        got = fn(x.to("neuron"), y.to("neuron")).cpu()
    # float32: the two libms' log may differ in the last bit, so the usual tolerance
    exact = dict(atol=0, rtol=0) if dtype in HALF else {}
    torch.testing.assert_close(got, fn(x, y), equal_nan=True, **exact)


@pytest.mark.parametrize("dtype", HALF)
def test_kl_div_target_gradient_matches_cpu(dtype):
    """The OpInfo sample (reduction='none') whose target gradient was off by 4% in
    bfloat16: log(target) rounded before `+ 1 - input`, as CPU's xlogy rounds it."""
    g = torch.Generator().manual_seed(0)
    inp = -torch.rand(64, generator=g, dtype=torch.float64).mul(6).to(dtype)
    target = torch.rand(64, generator=g, dtype=torch.float64).to(dtype)
    grad = torch.randn(64, generator=g, dtype=torch.float64).to(dtype)

    def target_grad(device):
        t = target.to(device).requires_grad_()
        out = F.kl_div(inp.to(device), t, reduction="none")
        return torch.autograd.grad(out, t, grad.to(device))[0].cpu()

    torch.testing.assert_close(target_grad("neuron"), target_grad("cpu"), atol=0, rtol=0)


# ---------------------------------------------------------------- division by a broadcast
@pytest.mark.parametrize("case", ["python scalar", "0-dim tensor", "row", "trunc", "floor", "mean", "compiled"])
def test_division_by_a_broadcast_is_ieee_division(case):
    """XLA rewrites x / broadcast(d) into x * (1 / d), one ulp off for about a third of
    the quotients; CPU divides. Bit-equal results, also for divisors shared by rows."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, 300, generator=g) * 10
    d = torch.rand(64, 1, generator=g) + 1
    fns = {
        "python scalar": lambda x, d: x / 3,
        "0-dim tensor": lambda x, d: x / d[0, 0],
        "row": lambda x, d: x / d,
        "trunc": lambda x, d: torch.div(x * 3, 3, rounding_mode="trunc"),
        "floor": lambda x, d: torch.div(x, d, rounding_mode="floor"),
        "mean": lambda x, d: x.floor()[:, :7].mean(1),  # sums of small integers are exact
        "compiled": torch.compile(lambda x, d: x / d, backend="neuron"),
    }
    fn = fns[case]
    got = fn(x.to("neuron"), d.to("neuron")).cpu()
    torch.testing.assert_close(got, fns[case if case != "compiled" else "row"](x, d), atol=0, rtol=0)


# ---------------------------------------------------------------- all-samples OpInfo finds
@pytest.mark.parametrize("padding, stride", [("valid", 2), ("same", 1)])
def test_conv2d_string_padding_forward_and_backward_match_cpu(padding, stride):
    """padding='valid' reaches aten::convolution as [0]: one value for every spatial dim."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 4, 5, 5, generator=g, requires_grad=True)
    w = torch.randn(2, 4, 2, 3, generator=g, requires_grad=True)

    def run(device):
        xd, wd = (t.detach().to(device).requires_grad_() for t in (x, w))
        out = F.conv2d(xd, wd, stride=stride, padding=padding)
        return [out.cpu(), *(t.cpu() for t in torch.autograd.grad(out.sum(), (xd, wd)))]

    with no_fallback():
        got = run("neuron")
    for a, b in zip(got, run("cpu")):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("mode, shape", [("linear", (2, 3, 4)), ("bilinear", (2, 3, 4, 4)), ("trilinear", (1, 2, 3, 4, 4))])
def test_linear_upsampling_of_float64_scales_in_double(mode, shape):
    """CPU computes a float64 input's source coordinates in double: 1 / 1.7 rounded to
    float32 moved them by about 1e-6, past float64's tolerance."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with no_fallback():
        got = F.interpolate(x.to("neuron"), scale_factor=1.7, mode=mode).cpu()
    torch.testing.assert_close(got, F.interpolate(x, scale_factor=1.7, mode=mode))


# ---------------------------------------------------------------- histc bin arithmetic
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_histc_bins_follow_cpus_kernel_arithmetic(dtype):
    """histc puts each value in the bin CPU's histogramdd kernel computes, each
    operation rounded to the input's dtype (float16: -1.2011 in [-10, 10] by 100 bins
    is bin 43, not 44) and the division an IEEE one. Fewer than 256 values per bin, so
    the counts are exact in the half types."""
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(3000, generator=g) * 7).to(dtype)
    x[0] = -1.201171875
    for args in ((100, -10, 10), (97, -9, 11.3), (1000,)):
        assert torch.equal(torch.histc(x.to("neuron"), *args).cpu(), torch.histc(x, *args)), args


# ---------------------------------------------------------------- sign of NaN and -0.0
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_sign_of_nan_and_negative_zero_is_cpus_positive_zero(dtype):
    """CPU's sign is (0 < x) - (x < 0): NaN and -0.0 give +0.0, bit for bit."""
    x = torch.tensor([float("nan"), -float("nan"), 0.0, -0.0, float("inf"), -float("inf"), 2.0, -3.0], dtype=dtype)
    for fn in (torch.sign, torch.sgn):
        assert torch.equal(fn(x.to("neuron")).cpu().view(torch.uint8), fn(x).view(torch.uint8))


# ---------------------------------------------------------------- LU with a NaN pivot
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.complex128])
def test_lu_with_a_nan_pivot_propagates_nan_as_lapack(dtype):
    """getrf divides by a NaN pivot (XLA skips it as a zero one): L's column and the
    trailing matrix become NaN, so linalg.solve is all NaN, as on CPU."""
    A = torch.tensor([[2., 1., 0.], [1., float("nan"), 1.], [0., 1., 4.]]).to(dtype)
    b = torch.ones(3, 2, dtype=dtype)
    x = torch.linalg.solve(A.to("neuron"), b.to("neuron")).cpu()
    assert torch.equal(x.isnan(), torch.linalg.solve(A, b).isnan()) and x.isnan().all()
    lu, piv = torch.linalg.lu_factor(A.to("neuron"))
    lu_cpu, piv_cpu = torch.linalg.lu_factor(A)
    assert torch.equal(lu.cpu().isnan(), lu_cpu.isnan()) and torch.equal(piv.cpu(), piv_cpu)
    assert torch.equal(lu.cpu().nan_to_num(7), lu_cpu.nan_to_num(7))


@pytest.mark.parametrize("pool", ["max_pool2d", "max_pool3d", "fractional_max_pool3d"])
def test_max_pool_backward_of_an_empty_batch(pool):
    """A batch of 0: the gradient is empty, as on CPU (reshape(0, -1) has no size to infer)."""
    shape = (0, 1, 4, 5, 4) if pool.endswith("3d") else (0, 1, 4, 5)
    call = {"max_pool2d": lambda x: F.max_pool2d(x, 2), "max_pool3d": lambda x: F.max_pool3d(x, 2),
            "fractional_max_pool3d": lambda x: F.fractional_max_pool3d(x, (2, 2, 1), output_size=2)}[pool]
    x = torch.randn(shape, device="neuron", requires_grad=True)
    (g,) = torch.autograd.grad(call(x), x, torch.ones(call(x.detach()).shape, device="neuron"))
    assert g.shape == x.shape and g.device.type == "neuron"


@pytest.mark.parametrize("offset", [0, 1])
def test_as_strided_scatter_addresses_the_whole_storage_of_a_view(offset):
    """ATen copies the input's whole storage and keeps its strides and storage offset
    (clone_preserve_strides): a view at offset 1 of a 2-element storage is not hit by a
    window at offset 0. The OpInfo's non-contiguous sample."""
    base = torch.tensor([5.0, 7.0])
    want = torch.as_strided_scatter(base.as_strided((1,), (2,), 1), torch.tensor(3.0), (), (), offset)
    with no_fallback():
        view = base.to("neuron").as_strided((1,), (2,), 1)
        got = torch.as_strided_scatter(view, torch.tensor(3.0, device="neuron"), (), (), offset).cpu()
    torch.testing.assert_close(got, want)
