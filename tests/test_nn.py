"""Neural-network ops on `neuron` against CPU PyTorch: forward, backward, errors, and
short training runs of an MLP and a CNN."""
import copy
import math

import pytest
import torch
import torch.nn.functional as F

from helpers import check, check_like_cpu, no_fallback, to_neuron
from torchneuron.eager import install

HALF = [torch.bfloat16, torch.float16]
HALF_TOL = dict(atol=2e-2, rtol=2e-2)
F32_TOL = dict(atol=1e-5, rtol=1e-5)


def grads(fn, diff=(0,)):
    """fn(*args) -> (output, grads of args[i] for i in diff), back-propagating a fixed
    pseudo-random cotangent from the (first) output."""
    def run(*args):
        args = [a.detach().requires_grad_() if i in diff else a for i, a in enumerate(args)]
        out = fn(*args)
        first = out[0] if isinstance(out, tuple) else out
        cotangent = torch.linspace(-1, 1, first.numel()).sin().reshape(first.shape).to(first.dtype)
        first.backward(cotangent.to(first.device))
        return out, [args[i].grad for i in diff]

    return run


def raises_like_cpu(fn, *args):
    """fn raises the same exception type and message on CPU and on neuron (at sync)."""
    with pytest.raises(Exception) as cpu:
        fn(*args)
    with pytest.raises(Exception) as neuron:
        fn(*to_neuron(args))
        torch.neuron.synchronize()
    assert type(neuron.value) is type(cpu.value), (neuron.value, cpu.value)
    assert str(neuron.value) == str(cpu.value)


# ------------------------------------------------------------------ softmax
def test_softmax():
    x = torch.randn(3, 5)
    check(grads(lambda t: F.softmax(t, 1)), x, **F32_TOL)
    check(grads(lambda t: F.log_softmax(t.t(), -1)), x, **F32_TOL)


@pytest.mark.parametrize("dtype", [torch.float64] + HALF)
def test_softmax_dtypes(dtype):
    tol = HALF_TOL if dtype in HALF else {}
    check(grads(lambda t: F.log_softmax(t, 0)), torch.randn(3, 5, dtype=dtype), **tol)
    check(lambda t: F.softmax(t, 1), torch.randn(3, 5, dtype=dtype), **tol)


def test_softmax_edge_cases():
    check(lambda t: (F.softmax(t, 0), F.log_softmax(t, 0)), torch.tensor(2.0))
    check(lambda t: F.softmax(t, 1), torch.randn(0, 4))
    inf = torch.tensor([[float("-inf")] * 3, [0.0, float("-inf"), 1.0]])
    check(lambda t: (F.softmax(t, 1), F.log_softmax(t, 1)), inf)
    check(lambda t: F.softmax(t, 1, dtype=torch.float64), torch.randn(2, 3))
    raises_like_cpu(lambda t: F.softmax(t, 0), torch.arange(3))


# ------------------------------------------------------------------ losses
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(reduction):
    x, t, w = torch.randn(4, 5), torch.tensor([0, 4, 2, 2]), torch.rand(5)
    check(grads(lambda a, c, d: F.nll_loss(a, c, weight=d, ignore_index=2, reduction=reduction)), x, t, w,
          **F32_TOL)
    check(grads(lambda a, c: F.nll_loss(a, c[:, None, None].expand(4, 2, 3), reduction=reduction)),
          torch.randn(4, 5, 2, 3), t, **F32_TOL)


def test_cross_entropy():
    x, t = torch.randn(4, 5), torch.tensor([0, 4, 2, 2])
    check(grads(lambda a, c: F.cross_entropy(a, c)), x, t, **F32_TOL)
    check(grads(lambda a, c: F.cross_entropy(a, c[0])), x[0], t, **F32_TOL)


def test_cross_entropy_half_and_all_ignored():
    x, t = torch.randn(3, 4, dtype=torch.bfloat16), torch.tensor([1, 2, 3])
    check(grads(lambda a, c: F.cross_entropy(a, c)), x, t, **HALF_TOL)
    check(lambda a, c: F.cross_entropy(a, c), x.float(), torch.full_like(t, -100))  # 0/0 = nan, as on CPU


def test_nll_out_of_bounds_target_raises_at_sync():
    x = torch.randn(3, 4).log_softmax(1)
    raises_like_cpu(lambda a, t: F.nll_loss(a, t).item(), x, torch.tensor([0, 7, 1]))
    raises_like_cpu(lambda a, t: F.nll_loss(a, t), x, torch.tensor([0, -3, 9]))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_pointwise_losses(reduction):
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    p, q = torch.rand(3, 4).clamp(0.01, 0.99), torch.rand(3, 4)
    tol = dict(atol=1e-5, rtol=1e-4)
    check(grads(lambda x, y: F.mse_loss(x, y, reduction=reduction)), a, b, **tol)
    check(grads(lambda x, y: F.l1_loss(x, y, reduction=reduction)), a, b, **tol)
    check(grads(lambda x, y: F.smooth_l1_loss(x, y, reduction=reduction, beta=0.5)), a, b, **tol)
    check(grads(lambda x, y: F.huber_loss(x, y, reduction=reduction, delta=0.7)), a, b, **tol)
    check(grads(lambda x, y, w: F.binary_cross_entropy(x, y, weight=w, reduction=reduction)), p, q, b.abs(), **tol)
    check(grads(lambda x, y, w: F.binary_cross_entropy_with_logits(x, y, pos_weight=w, reduction=reduction)),
          a, q, b[0].abs(), **tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_binary_cross_entropy_gradient_is_cpus_to_the_bit(dtype, reduction, weighted, compiled):
    # CPU's kernel: g (x - t) / max((1 - x) x, eps), then * w, then / n, each rounded to
    # the dtype; a half-type product order or a folded division is an ulp off. Compiled
    # graphs keep the natively lowered binary_cross_entropy_backward (PyTorch's core-ATen
    # decomposition of it rounds otherwise).
    x = torch.rand(7, 9, dtype=dtype).clamp(0.01, 0.99)
    x[0, :2] = torch.tensor([0.0, 1.0])  # the eps clamp: CPU's EPSILON is a float
    t, w = torch.rand(7, 9, dtype=dtype), torch.rand(7, 9, dtype=dtype)

    def loss_fn(leaf, target, weight):
        return F.binary_cross_entropy(leaf, target, weight, reduction=reduction)

    def grad(device, fn=loss_fn):
        leaf = x.to(device).detach().requires_grad_()
        loss = fn(leaf, t.to(device), w.to(device) if weighted else None)
        loss.backward(torch.full_like(loss, 0.75))
        return leaf.grad.cpu()

    if compiled:
        torch._dynamo.reset()
    got = grad("neuron", torch.compile(loss_fn, backend="neuron") if compiled else loss_fn)
    torch.testing.assert_close(got, grad("cpu"), rtol=0, atol=0)


def test_loss_edge_cases():
    check(lambda x: F.binary_cross_entropy(x, torch.ones_like(x)), torch.tensor([0.0, 1.0, 0.5]))  # log clamp
    check(lambda x, y: F.smooth_l1_loss(x, y, beta=0.0), torch.randn(5), torch.randn(5))
    raises_like_cpu(lambda x: F.binary_cross_entropy(x, torch.zeros_like(x)).item(), torch.tensor([0.5, 1.5]))


# ------------------------------------------------------------------ normalization
@pytest.mark.parametrize("shape, groups", [((0, 2), 1), ((0, 4, 3), 2)])
def test_group_norm_of_an_empty_batch(shape, groups):
    # The lowering inferred a -1 size from zero elements (a ZeroDivisionError).
    x, w, b = torch.randn(shape), torch.randn(shape[1]), torch.randn(shape[1])
    check(grads(lambda x, w, b: F.group_norm(x, groups, w, b), diff=(0, 1, 2)), x, w, b)


def test_layer_and_group_norm():
    x, w, b = torch.randn(2, 4, 3, 3), torch.randn(4, 3, 3), torch.randn(3)
    check(grads(lambda a, c: F.layer_norm(a, (4, 3, 3), c, None), diff=(0, 1)), x, w, **F32_TOL)
    check(grads(lambda a, d: F.layer_norm(a, (3,), None, d), diff=(0, 1)), x, b, **F32_TOL)
    gw, gb = torch.randn(4), torch.randn(4)
    check(grads(lambda a, c, d: F.group_norm(a, 2, c, d), diff=(0, 1, 2)), x, gw, gb, **F32_TOL)
    check(grads(lambda a: F.group_norm(a, 4)), x[:, :, :, 0], **F32_TOL)


def test_norms_half_precision_forward():
    # CPU's half-precision norm backward rounds intermediates (errors ~0.1); the
    # forward rounds once, like these lowerings.
    x, w = torch.randn(2, 4, 3, dtype=torch.bfloat16), torch.randn(3, dtype=torch.bfloat16)
    check(lambda a, c: (F.layer_norm(a, (3,), c, c), F.group_norm(a, 2)), x, w, **HALF_TOL)


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_training_updates_running_stats(affine):
    x = torch.randn(4, 3, 2, 2)
    w, b = (torch.randn(3), torch.randn(3)) if affine else (None, None)

    def f(a, rm, rv, w, b):
        rm, rv = rm.clone(), rv.clone()
        y = F.batch_norm(a, rm, rv, w, b, training=True, momentum=0.3)
        return y, rm, rv

    check(grads(f, diff=(0, 3, 4) if affine else (0,)), x, torch.randn(3), torch.rand(3) + 0.5, w, b, **F32_TOL)
    check(grads(lambda a: F.batch_norm(a, None, None, training=True)), x[..., 0], **F32_TOL)


def test_batch_norm_eval_and_module():
    x, rm, rv = torch.randn(4, 3, 5), torch.randn(3), torch.rand(3) + 0.5
    check(grads(lambda a, c, d, m, v: F.batch_norm(a, m, v, c, d, training=False), diff=(0, 1, 2)),
          x, torch.randn(3), torch.randn(3), rm, rv, **F32_TOL)

    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(3)
    bn_n = copy.deepcopy(bn).to("neuron")
    x = torch.randn(2, 3, 4, 4)
    with no_fallback():
        for mode in ("train", "eval"):
            getattr(bn, mode)(), getattr(bn_n, mode)()
            torch.testing.assert_close(bn_n(x.to("neuron")).cpu(), bn(x), **F32_TOL)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(bn_n, name).cpu(), getattr(bn, name), **F32_TOL)


def test_batch_norm_mixed_precision_input():
    x = torch.randn(4, 3, 2, dtype=torch.bfloat16)
    def f(a, rm, rv, w):
        rm, rv = rm.clone(), rv.clone()
        return F.batch_norm(a, rm, rv, w, None, training=True), rm, rv

    check(f, x, torch.zeros(3), torch.ones(3), torch.rand(3), **HALF_TOL)


# ------------------------------------------------------------------ convolution
CONV_CASES = [
    (F.conv1d, (2, 4, 9), (6, 2, 3), dict(stride=2, padding=2, dilation=2, groups=2)),
    (F.conv2d, (2, 4, 7, 6), (6, 2, 3, 2), dict(stride=(2, 1), padding=1, dilation=(1, 2), groups=2)),
    (F.conv2d, (1, 3, 5, 5), (4, 3, 3, 3), dict(padding="same")),
    (F.conv3d, (1, 2, 4, 5, 4), (3, 2, 2, 3, 2), dict(stride=(1, 2, 1), padding=(1, 0, 1))),
    (F.conv_transpose1d, (2, 4, 5), (4, 3, 3), dict(stride=2, padding=1, output_padding=1, groups=2)),
    (F.conv_transpose2d, (2, 4, 4, 5), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1, dilation=2,
                                                          groups=2)),
    (F.conv_transpose3d, (1, 2, 3, 3, 3), (2, 2, 2, 2, 2), dict(stride=2)),
]


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_convolution(case):
    fn, xs, ws, kw = CONV_CASES[case]
    out_channels = ws[1] * kw.get("groups", 1) if "transpose" in fn.__name__ else ws[0]
    f = grads(lambda x, w, b: fn(x, w, b, **kw), diff=(0, 1, 2))
    check(f, torch.randn(xs), torch.randn(ws), torch.randn(out_channels), atol=1e-4, rtol=1e-4)


def test_convolution_dtypes_and_layouts():
    x, w = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3)
    check(grads(lambda a, c: F.conv2d(a, c, None, padding=1), diff=(0, 1)), x.bfloat16(), w.bfloat16(),
          **HALF_TOL)
    check(lambda a, c: F.conv2d(a, c), torch.randint(-4, 4, (1, 2, 4, 4)), torch.randint(-4, 4, (3, 2, 2, 2)))
    check(grads(lambda a, c: F.conv2d(a.permute(0, 3, 1, 2), c), diff=(0, 1)), x.permute(0, 2, 3, 1).contiguous(),
          w, atol=1e-4, rtol=1e-4)
    raises_like_cpu(F.conv2d, torch.ones(1, 1, 3, 3, dtype=torch.bool), torch.ones(1, 1, 2, 2, dtype=torch.bool))


# ------------------------------------------------------------------ pooling
def test_max_pool():
    x = torch.randn(2, 3, 7, 7)
    check(grads(lambda a: F.max_pool2d(a, 3, 2, 1, return_indices=True)), x)
    check(grads(lambda a: F.max_pool2d(a, (3, 2), (1, 2), 1, dilation=2, ceil_mode=True, return_indices=True)),
          x[0])
    check(grads(lambda a: F.max_pool3d(a, 2, return_indices=True)), torch.randn(1, 2, 4, 5, 4))


def test_max_pool_ties_nan_and_integers():
    ties = torch.tensor([[[[1.0, 1.0, 0.0], [1.0, float("-inf"), 2.0], [2.0, 2.0, 2.0]]]])
    check(lambda a: F.max_pool2d(a, 2, 1, return_indices=True), ties)
    nan = torch.tensor([[[[float("nan"), 1.0, float("nan")], [3.0, float("nan"), 0.0], [0.0, 1.0, 2.0]]]])
    check(lambda a: F.max_pool2d(a, 2, 1, return_indices=True), nan)
    check(lambda a: F.max_pool2d(a, 2, 1, padding=1, return_indices=True), torch.full((1, 1, 3, 3), float("-inf")))
    check(lambda a: F.max_pool2d(a, 2, return_indices=True), torch.randint(-50, 50, (1, 2, 5, 5)).to(torch.int8))


def test_avg_pool():
    x = torch.randn(2, 3, 7, 7)
    check(grads(lambda a: F.avg_pool2d(a, 3, 2, 1)), x, **F32_TOL)
    check(grads(lambda a: F.avg_pool2d(a, 3, 2, 1, ceil_mode=True, count_include_pad=False)), x, **F32_TOL)
    check(grads(lambda a: F.avg_pool2d(a, 2, ceil_mode=True, divisor_override=3)), x[0], **F32_TOL)
    check(grads(lambda a: F.avg_pool3d(a, 2, 1, 1)), torch.randn(1, 2, 3, 4, 3), **F32_TOL)
    check(lambda a: (F.avg_pool2d(a, 2, ceil_mode=True), F.avg_pool2d(a.bfloat16(), 2)),
          torch.randint(-9, 9, (1, 2, 5, 5)), **HALF_TOL)


def test_adaptive_avg_pool():
    check(grads(lambda a: F.adaptive_avg_pool2d(a, (3, 2))), torch.randn(2, 3, 7, 5), **F32_TOL)
    check(grads(lambda a: F.adaptive_avg_pool2d(a, 1)), torch.randn(2, 3, 4, 4), **F32_TOL)
    check(grads(lambda a: F.adaptive_avg_pool3d(a, (2, 3, 1))), torch.randn(1, 2, 5, 4, 3), **F32_TOL)
    raises_like_cpu(lambda a: F.adaptive_avg_pool2d(a, 2), torch.ones(1, 1, 3, 3, dtype=torch.long))


# ------------------------------------------------------------------ embedding, upsampling
def test_embedding():
    w, idx = torch.randn(6, 4), torch.tensor([[1, 2, 2], [5, 0, 1]])
    check(grads(lambda a, i: F.embedding(i, a)), w, idx)
    check(grads(lambda a, i: F.embedding(i, a, padding_idx=1, scale_grad_by_freq=True)), w, idx)
    check(grads(lambda a, i: F.embedding(i.t(), a)), w.bfloat16(), idx, **HALF_TOL)
    raises_like_cpu(lambda a, i: F.embedding(i, a), w, torch.tensor([0, 6]))


@pytest.mark.parametrize("mode,kw", [
    ("nearest", dict(size=(7, 4))), ("nearest", dict(scale_factor=2)), ("nearest-exact", dict(scale_factor=1.7)),
    ("bilinear", dict(size=(7, 4))), ("bilinear", dict(scale_factor=2.3, align_corners=True)),
    ("bilinear", dict(scale_factor=0.6)),
])
def test_upsample_2d(mode, kw):
    check(grads(lambda a: F.interpolate(a, mode=mode, **kw)), torch.randn(1, 2, 3, 5), **F32_TOL)


def test_upsample_1d_3d():
    check(grads(lambda a: F.interpolate(a, scale_factor=2.5, mode="linear")), torch.randn(1, 2, 4), **F32_TOL)
    check(grads(lambda a: F.interpolate(a, size=(3, 4, 2), mode="trilinear")), torch.randn(1, 1, 2, 3, 3),
          **F32_TOL)
    check(grads(lambda a: F.interpolate(a, scale_factor=3, mode="nearest")), torch.randn(1, 2, 2, 2, 2))
    check(lambda a: F.interpolate(a, scale_factor=2), torch.randint(0, 255, (1, 2, 3, 3), dtype=torch.uint8))


@pytest.mark.parametrize("mode,kw,shape", [
    ("nearest", {}, (0, 2, 4)), ("nearest", {}, (0, 2, 4, 4)), ("nearest", {}, (0, 2, 3, 3, 3)),
    ("nearest-exact", {}, (0, 2, 4)), ("nearest-exact", {}, (0, 2, 4, 4)), ("nearest-exact", {}, (0, 2, 3, 3, 3)),
    ("linear", {}, (0, 2, 4)), ("bilinear", {}, (0, 2, 4, 4)), ("bilinear", dict(align_corners=True), (0, 2, 4, 4)),
    ("bicubic", {}, (0, 2, 4, 4)), ("trilinear", {}, (0, 2, 3, 3, 3)), ("area", {}, (0, 2, 4, 4)),
    ("bilinear", dict(antialias=True), (0, 2, 4, 4)), ("bicubic", dict(antialias=True), (0, 2, 4, 4)),
], ids=str)
def test_interpolate_of_an_empty_batch(mode, kw, shape):
    """CPU upsamples an empty batch (N = 0) to an empty batch, gradient too; PyTorch's
    meta kernel of the nearest modes, which the executor runs, raised TypeError."""
    x = torch.randn(shape)
    for size in (dict(scale_factor=2), dict(size=[3] * (len(shape) - 2))):
        check(grads(lambda a: F.interpolate(a, mode=mode, **size, **kw)), x)


@pytest.mark.parametrize("mode,shape", [("nearest", (2, 0, 4, 4)), ("nearest", (0, 0, 4)), ("nearest", (2, 2, 0, 4)),
                                        ("bilinear", (2, 0, 4, 4)), ("bicubic", (0, 2, 0, 4)),
                                        ("trilinear", (2, 0, 3, 3, 3)), ("nearest-exact", (0, 0, 3, 3, 3))], ids=str)
def test_interpolate_of_empty_channels_or_sizes_raises_as_cpu(mode, shape):
    """Zero channels or spatial sizes: CPU's RuntimeError, sizes checked first; neuron
    computed (bilinear) or raised TypeError (nearest)."""
    raises_like_cpu(lambda a: F.interpolate(a, size=[3] * (len(shape) - 2), mode=mode), torch.randn(shape))


@pytest.mark.parametrize("loss", [F.mse_loss, F.smooth_l1_loss, F.huber_loss], ids=lambda f: f.__name__)
def test_mean_loss_gradient_of_an_empty_input(loss):
    """CPU's mean loss of an empty input is NaN and its gradient empty; PyTorch's Python
    kernel of the backward, which the executor runs for the shape, divided by zero."""
    check(grads(lambda a, b: loss(a, b), diff=(0, 1)), torch.randn(0, 3), torch.randn(0, 3))
    check(grads(lambda a, b: loss(a, b, reduction="mean"), diff=(0,)), torch.randn(0), torch.randn(0))


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_uint8_interpolation_without_antialiasing_equals_cpu(mode):
    # CPU's int16 fixed-point kernel, bit for bit: taps past the edges folded into the
    # edge tap (a 2-pixel input for bicubic), align_corners, explicit scales, and both of
    # CPU's paths (AVX2 up to 4 channels, the generic one above).
    gen = torch.Generator().manual_seed(0)
    for shape, kw in [((1, 3, 9, 10), dict(size=(4, 23))), ((2, 5, 2, 7), dict(size=(5, 3), align_corners=True)),
                      ((1, 1, 6, 6), dict(scale_factor=(0.37, 1.7))), ((1, 4, 5, 1), dict(size=(11, 2)))]:
        x = torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen)
        check(lambda t: F.interpolate(t, mode=mode, **kw), x)
    check(lambda t: F.interpolate(t, mode=mode, size=(4, 5)), x.contiguous(memory_format=torch.channels_last))
    check_like_cpu(lambda t: F.interpolate(t, mode=mode, size=(4, 5)), x.to(torch.int8))


def test_a_dim_whose_size_does_not_change_is_copied_whatever_its_scale():
    # CPU's linear kernels and its separable (antialiased, uint8) forward kernels copy
    # such a dim; its non-antialiased bicubic kernel and antialiased backward use the scale.
    x = torch.randn(1, 2, 5, 7)
    for mode, aa in [("bilinear", False), ("bilinear", True), ("bicubic", False), ("bicubic", True)]:
        fn = lambda t: F.interpolate(t, scale_factor=(1.1, 2.0), mode=mode, antialias=aa)  # noqa: E731
        check(fn, x, **F32_TOL)
        check(fn, (x * 40 + 128).clamp(0, 255).to(torch.uint8))
        check(grads(fn), x.double())
    check(grads(lambda t: F.interpolate(t, scale_factor=2.0, mode="linear")), torch.randn(1, 2, 2), **F32_TOL)
    check(lambda t: torch.ops.aten.upsample_linear1d(t, [7], False, 2.0), torch.randn(1, 2, 7))
    check(lambda t: torch.ops.aten.upsample_trilinear3d(t, [3, 5, 8], False, 1.3, 1.1, 2.0), torch.randn(1, 1, 3, 5, 4),
          **F32_TOL)
    # bicubic's backward copies the gradient when no size changes (its forward resamples)
    check(lambda g: torch.ops.aten.upsample_bicubic2d_backward(g, [4, 4], [1, 1, 4, 4], False, 1.1, None),
          torch.randn(1, 1, 4, 4, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_interpolation_to_an_empty_size_raises_like_cpu(dtype):
    x = torch.ones(1, 1, 4, 4, dtype=dtype)
    check_like_cpu(lambda t: F.interpolate(t, size=(4, 0), mode="bilinear", align_corners=True), x)
    check_like_cpu(lambda t: F.interpolate(t, scale_factor=(0.1, 1.0), mode="bilinear"), x)
    check_like_cpu(lambda t: torch.ops.aten.upsample_linear1d(t, [0], True), x[0])
    check_like_cpu(lambda t: torch.ops.aten.upsample_trilinear3d(t, [4, 0, 4], True), x[None])


# ------------------------------------------------------------------ attention
def _sdpa_calls():
    return len(install.KERNELS[torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default].cache)


@pytest.mark.parametrize("kind", ["plain", "causal", "bool_mask", "float_mask", "gqa"])
def test_scaled_dot_product_attention(kind):
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 5)
    mask, kw = None, {}
    if kind == "causal":
        kw = dict(is_causal=True)
    elif kind == "bool_mask":
        mask = torch.rand(4, 6) > 0.4
        mask[1] = False  # a fully masked row gives zeros, as CPU's safe softmax does
    elif kind == "float_mask":
        mask, kw = torch.randn(3, 4, 6), dict(scale=0.3)
    elif kind == "gqa":
        k, v, kw = k[:, :1], v[:, :1], dict(enable_gqa=True)
    f = grads(lambda a, b, c, m: F.scaled_dot_product_attention(a, b, c, attn_mask=m, **kw), diff=(0, 1, 2))
    before = _sdpa_calls()
    check(f, q, k, v, mask, atol=1e-5, rtol=1e-4)
    assert _sdpa_calls() > before  # the blocked kernel, grouped heads included


def test_sdpa_mask_gradient_and_half():
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4)
    check(grads(lambda a, m, b: F.scaled_dot_product_attention(a, b, b, attn_mask=m), diff=(0, 1)),
          q, torch.randn(2, 3, 5), k, atol=1e-5, rtol=1e-4)
    check(grads(lambda a: F.scaled_dot_product_attention(a, a, a, is_causal=True)), q.bfloat16(), **HALF_TOL)


def test_sdpa_dropout_is_reproducible_and_backward_consistent():
    q = torch.randn(1, 2, 8, 8).to("neuron")

    def run(seed):
        torch.manual_seed(seed)
        x = q.detach().requires_grad_()
        y = F.scaled_dot_product_attention(x, x, x, dropout_p=0.5)
        y.sum().backward()
        return y.cpu(), x.grad.cpu()

    (y1, g1), (y2, g2), (y3, _) = run(1), run(1), run(2)
    assert torch.equal(y1, y2) and torch.equal(g1, g2)
    assert not torch.equal(y1, y3)
    # With v = I the output is the dropped-out probability matrix P itself, and the
    # gradient of sum(y) w.r.t. v is P's column sums: equal only if the backward
    # regenerated the forward's dropout mask.
    v = torch.eye(8).expand(1, 2, 8, 8).to("neuron").requires_grad_()
    y = F.scaled_dot_product_attention(q, q, v, dropout_p=0.5)
    y.sum().backward()
    torch.testing.assert_close(v.grad[..., 0].cpu(), y.sum(-2).detach().cpu(), atol=1e-5, rtol=1e-5)
    assert (y.cpu() == 0).any()


# ------------------------------------------------------------------ training end to end
def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Dropout(0.0),
                               torch.nn.Linear(16, 3))


def _cnn():
    return torch.nn.Sequential(
        # No bias before BatchNorm: its gradient is rounding noise, which Adam amplifies.
        torch.nn.Conv2d(3, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(4, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 3))


@pytest.mark.parametrize("make,shape", [(_mlp, (8, 10)), (_cnn, (4, 3, 8, 8))])
def test_training_matches_cpu(make, shape):
    torch.manual_seed(0)
    model = make()
    model_n = copy.deepcopy(model).to("neuron")
    x, y = torch.randn(shape), torch.randint(0, 3, (shape[0],))
    xn, yn = x.to("neuron"), y.to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    opt_n = torch.optim.AdamW(model_n.parameters(), lr=1e-2)
    with no_fallback():
        for _ in range(3):
            losses = []
            for m, o, a, t in ((model, opt, x, y), (model_n, opt_n, xn, yn)):
                o.zero_grad()
                loss = F.cross_entropy(m(a), t)
                loss.backward()
                o.step()
                losses.append(loss.item())
            assert abs(losses[0] - losses[1]) < 1e-5, losses
    for p, pn in zip(model.parameters(), model_n.parameters()):
        torch.testing.assert_close(pn.detach().cpu(), p.detach(), atol=1e-5, rtol=1e-4)


class _Block(torch.nn.Module):
    """A GPT-style block: embeddings, layer norm, causal attention, GELU MLP."""

    def __init__(self, vocab=20, dim=16, heads=2, seq=6):
        super().__init__()
        self.heads = heads
        self.tok, self.pos = torch.nn.Embedding(vocab, dim), torch.nn.Embedding(seq, dim)
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.fc, self.out = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, vocab)

    def forward(self, idx):
        b, t = idx.shape
        x = self.tok(idx) + self.pos.weight[:t]
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, -1))
        return self.out(F.gelu(self.fc(self.ln2(x))))


def test_transformer_block_gradients_match_cpu():
    torch.manual_seed(0)
    model = _Block()
    model_n = copy.deepcopy(model).to("neuron")
    idx, target = torch.randint(0, 20, (2, 6)), torch.randint(0, 20, (12,))
    with no_fallback():
        losses = []
        for m, i, t in ((model, idx, target), (model_n, idx.to("neuron"), target.to("neuron"))):
            loss = F.cross_entropy(m(i).flatten(0, 1), t)
            loss.backward()
            losses.append(loss.item())
    assert abs(losses[0] - losses[1]) < 1e-5, losses
    for p, pn in zip(model.parameters(), model_n.parameters()):
        torch.testing.assert_close(pn.grad.cpu(), p.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("shape,target_shape", [((3, 4), (3,)), ((2, 3, 4, 4), (2, 4, 4))])
def test_nll_loss_backward_all_ignored_like_cpu(shape, target_shape):
    # Mean reduction with total_weight == 0: the loss is NaN but CPU skips ignored samples
    # in the backward (zero gradient) while zero-weight non-ignored ones get 0 * inf = NaN.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    n_class = shape[1]
    weight = torch.ones(n_class)
    weight[0] = 0
    mixed = torch.zeros(target_shape, dtype=torch.long)
    mixed.view(-1)[::2] = -100
    cases = [dict(target=torch.full(target_shape, -100)),
             dict(target=torch.full(target_shape, 2), ignore_index=2),
             dict(target=torch.zeros(target_shape, dtype=torch.long), weight=weight),
             dict(target=mixed, weight=weight)]
    for loss in (F.cross_entropy, F.nll_loss):
        for kw in cases:
            grads = []
            for dev in ("cpu", "neuron"):
                xx = x.clone().to(dev).requires_grad_()
                args = {k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
                out = loss(xx, args.pop("target"), **args)
                out.backward()
                grads.append((out.detach().cpu(), xx.grad.cpu()))
            (e_out, e_grad), (a_out, a_grad) = grads
            torch.testing.assert_close(a_out, e_out, equal_nan=True)
            torch.testing.assert_close(a_grad, e_grad, equal_nan=True)
    # The backward op itself, against CPU.
    t = torch.full(target_shape, -100)
    op = torch.ops.aten.nll_loss_backward.default if len(shape) == 2 else torch.ops.aten.nll_loss2d_backward.default
    check(lambda x, t: op(torch.tensor(1.), x, t, None, 1, -100, torch.tensor(0.)), x, t)


@pytest.mark.parametrize("conv,rank", [(F.conv1d, 1), (F.conv2d, 2), (F.conv3d, 3), (F.conv_transpose2d, 2)])
def test_conv_mismatched_dtypes_raise_like_cpu(conv, rank):
    k = (2,) * rank
    x = (1, 1) + (3,) * rank
    for xd, wd in [(torch.float32, torch.float64), (torch.float64, torch.float32), (torch.float16, torch.float32),
                   (torch.int64, torch.float32)]:
        args = (torch.ones(x, dtype=xd), torch.ones((1, 1) + k, dtype=wd))
        with pytest.raises(RuntimeError) as expected:
            conv(*args)
        with pytest.raises(RuntimeError) as actual:
            conv(*to_neuron(args))
        assert str(actual.value) == str(expected.value)
    # A float64 bias: CPU raises for the forward convolutions, not for conv_transpose2d.
    check_like_cpu(conv, torch.ones(x), torch.ones((1, 1) + k), torch.ones(1, dtype=torch.float64))


# ------------------------------------------------------------------ grid_sampler_3d, CTC, batch norm out=
@pytest.mark.parametrize("mode, padding, align", [("bilinear", "reflection", False), ("nearest", "border", True)])
def test_grid_sample_3d_matches_cpu(mode, padding, align):
    x = torch.randn(2, 3, 4, 5, 6, dtype=torch.float64)
    g = torch.rand(2, 3, 2, 4, 3, dtype=torch.float64) * 2.6 - 1.3  # partly outside [-1, 1]

    def fn(a, b):
        a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
        out = F.grid_sample(a.transpose(3, 4).transpose(3, 4), b, mode=mode, padding_mode=padding, align_corners=align)
        out.backward(torch.arange(out.numel(), dtype=out.dtype, device=out.device).reshape(out.shape).sin())
        return out, a.grad, b.grad

    check(fn, x, g, atol=1e-6, rtol=1e-6)


def test_grid_sample_2d_matches_cpu():
    # The 2-d forward and backward are lowered too: bicubic with reflection, and a half
    # type computed in that type as CPU's vectorized kernel does (bitwise equal).
    x, g = torch.randn(2, 3, 5, 6, dtype=torch.float64), torch.rand(2, 4, 3, 2, dtype=torch.float64) * 2.6 - 1.3

    def fn(a, b):
        a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
        out = F.grid_sample(a, b, mode="bicubic", padding_mode="reflection", align_corners=False)
        out.backward(torch.ones_like(out))
        return out, a.grad, b.grad

    check(fn, x, g, atol=1e-6, rtol=1e-6)
    check(lambda a, b: F.grid_sample(a, b, align_corners=False), x.bfloat16(), g.bfloat16(), atol=0, rtol=0)


def test_grid_sample_3d_out_noncontiguous_and_errors():
    x, g = torch.randn(1, 2, 3, 4, 3), torch.rand(1, 2, 2, 2, 3) * 2 - 1
    check(lambda a, b, o: torch.ops.aten.grid_sampler_3d.out(a.transpose(2, 4), b, 0, 0, False, out=o), x, g,
          torch.empty(0), **F32_TOL)
    check_like_cpu(lambda a, b: F.grid_sample(a, b, mode="bicubic", align_corners=False), x, g)
    check_like_cpu(lambda a, b: F.grid_sample(a, b, align_corners=False), x, g[..., :2])


def test_ctc_loss_matches_cpu():
    T, N, C = 6, 3, 5
    lp = torch.randn(T, N, C, dtype=torch.float64).log_softmax(2)
    tg = torch.randint(1, C, (N, 3))
    tg[0, 1] = tg[0, 2]  # a repeated label needs a blank between
    # Empty input and target; then a sample that cannot align (2 frames, 3 labels): infinite loss, NaN gradient.
    for lengths, zero_infinity in ((([6, 5, 0], [3, 2, 0]), True), (([2, 6, 3], [3, 1, 2]), False)):
        def fn(a, b):
            a = a.detach().requires_grad_()
            loss = F.ctc_loss(a, b, *lengths, reduction="none", zero_infinity=zero_infinity)
            loss.sum().backward()
            return loss, a.grad
        check(fn, lp, tg)
    # Concatenated targets with tensor lengths, a non-contiguous input, and CPU's argument errors.
    check(lambda a, b, il, tl: F.ctc_loss(a.transpose(0, 1).contiguous().transpose(0, 1), b, il, tl),
          lp, torch.randint(1, C, (5,)), torch.tensor([6, 4, 5]), torch.tensor([2, 0, 3]))
    for il, tl, blank in (([6, 5, 7], [3, 2, 0], 0), ([6, 5, 6], [3, 2, -1], 0), ([6, 5], [3, 2, 0], 0),
                          ([6, 5, 6], [3, 2, 4], 0), ([6, 5, 6], [3, 2, 1], 7)):
        check_like_cpu(lambda a, b: torch.ops.aten._ctc_loss(a, b, il, tl, blank, False), lp, tg)


def test_native_batch_norm_legit_out():
    def fn(x, rm, rv, outs, training=True):
        rm, rv = rm.clone(), rv.clone()  # written in place: each run starts from the same statistics
        res = torch.ops.aten._native_batch_norm_legit.out(x, None, None, rm, rv, training, 0.1, 1e-5, out=outs[0],
                                                          save_mean=outs[1], save_invstd=outs[2])
        return res, rm, rv

    x, rm, rv = torch.randn(2, 3, 4), torch.randn(3), torch.rand(3) + 0.5
    empty = lambda dtype=torch.float32: tuple(torch.empty(0, dtype=dtype) for _ in range(3))  # noqa: E731
    check(fn, x, rm, rv, empty(), **F32_TOL)
    check(fn, x, rm, rv, empty(), False, **F32_TOL)  # eval: CPU leaves save_mean and save_invstd empty
    check_like_cpu(fn, x, rm, rv, (torch.empty(0, dtype=torch.float64),) + empty()[1:])  # exact dtypes only
    check(lambda a, o: torch.ops.aten._native_batch_norm_legit.no_stats_out(a, None, None, True, 0.1, 1e-5, out=o[0],
                                                                           save_mean=o[1], save_invstd=o[2]),
          x, empty(), **F32_TOL)


@pytest.mark.parametrize("op", [torch.ops.aten.native_batch_norm.default, torch.ops.aten._native_batch_norm_legit.default])
def test_eval_batch_norm_statistics_are_cpus_in_eager_and_compiled_graphs(op):
    # CPU returns empty save_mean and save_invstd in eval; PyTorch's meta kernel and
    # decomposition give other devices CUDA's (C,) running mean and invstd. Eager and
    # compiled graphs on neuron give CPU's.
    x, w, b = torch.randn(4, 3, 5), torch.randn(3), torch.randn(3)
    mean, var = torch.randn(3), torch.rand(3) + 0.5
    args = [t.to("neuron") for t in (x, w, b, mean, var)]
    eager = op(*args, False, 0.1, 1e-5)
    compiled = torch.compile(lambda *a: op(*a, False, 0.1, 1e-5), backend="neuron")(*args)
    for e, c, want in zip(eager, compiled, op(x, w, b, mean, var, False, 0.1, 1e-5)):
        assert (e.shape, e.dtype) == (c.shape, c.dtype) == (want.shape, want.dtype)
        torch.testing.assert_close(e.cpu(), want)
        torch.testing.assert_close(c.cpu(), want)


@pytest.mark.parametrize("shape,dim", [((5, 0, 0), -1), ((2, 3, 0), -1), ((0, 4), 1), ((2, 0, 3), 1)])
@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax, F.softmin])
def test_softmax_over_empty_tensors(fn, shape, dim):
    # The row maximum of an empty row has no identity in JAX; ATen returns the empty result.
    x = torch.randn(shape)
    cpu, dev = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    want, got = fn(cpu, dim), fn(dev, dim)
    torch.testing.assert_close(got.cpu(), want)
    want.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(dev.grad.cpu(), cpu.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf"), 0.0])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_embedding_renorm_in_place_like_cpu(dtype, norm_type, index_dtype):
    # nn.Embedding(max_norm=...) calls it on every forward; it had no lowering (CPU fallback).
    weight = torch.randn(10, 6, dtype=dtype) * 2
    indices = torch.tensor([[1, 3, -1], [3, 7, 0]], dtype=index_dtype)  # a repeat and a negative index
    want, got = weight.clone(), weight.to("neuron")
    torch.embedding_renorm_(want, indices, 1.5, norm_type)
    with no_fallback():
        returned = torch.embedding_renorm_(got, indices.to("neuron"), 1.5, norm_type)
    assert returned is got
    # Half types are CPU's bits (norm, scale and product rounded as CPU rounds them);
    # float32/64 norms may sum in another order (an ulp).
    exact = dtype in (torch.float16, torch.bfloat16)
    torch.testing.assert_close(got.cpu(), want, rtol=0 if exact else None, atol=0 if exact else None)


def test_embedding_max_norm_module_and_bag_and_compiled():
    cpu = torch.nn.Embedding(10, 6, max_norm=1.0)
    dev = torch.nn.Embedding(10, 6, max_norm=1.0).to("neuron")
    dev.weight.data.copy_(cpu.weight.data)
    i = torch.tensor([[1, 2, 2, 9]])
    with no_fallback():
        torch.testing.assert_close(dev(i.to("neuron")).cpu(), cpu(i))
        torch.testing.assert_close(dev.weight.cpu(), cpu.weight)
        bag = F.embedding_bag(i.to("neuron"), dev.weight.detach() * 3, max_norm=0.5, mode="mean")
    torch.testing.assert_close(bag.cpu(), F.embedding_bag(i, cpu.weight.detach() * 3, max_norm=0.5, mode="mean"))
    w = torch.randn(5, 3) * 3
    compiled = torch.compile(lambda w, i: torch.embedding_renorm_(w, i, 1.0, 2.0), backend="neuron")
    got = compiled(w.to("neuron"), torch.tensor([0, 4]).to("neuron"))
    torch.testing.assert_close(got.cpu(), torch.embedding_renorm_(w.clone(), torch.tensor([0, 4]), 1.0, 2.0))


@pytest.mark.parametrize("weight,indices", [
    (torch.randn(10), torch.tensor([1])),  # not 2-D
    (torch.randn(10, 4), torch.tensor([1.0])),  # float indices
    (torch.randn(10, 4), torch.tensor([1], dtype=torch.int16)),
    (torch.randn(10, 4), torch.tensor([10])),  # out of range: IndexError at the sync
    (torch.randn(10, 4), torch.tensor([-11])),
])
def test_embedding_renorm_errors_like_cpu(weight, indices):
    raises_like_cpu(lambda w, i: torch.embedding_renorm_(w, i, 1.0, 2.0).cpu(), weight, indices)


def test_cdist_gradients_when_only_one_side_is_batched():
    # x2's gradient is _cdist_backward with the sides swapped, so its x2 carries the
    # batch dims its x1 lacks; an empty batch gives zeros (found by the all-samples
    # spot check: JAX's broadcast error).
    x2 = torch.randn(3, 5, dtype=torch.float64)
    for batch in (2, 0):
        x1 = torch.randn(batch, 4, 5, dtype=torch.float64)
        for p in (1.0, 2.0, 3.0):
            grads = []
            for d in ("cpu", "neuron"):
                a, b = x1.to(d, copy=True).requires_grad_(), x2.to(d, copy=True).requires_grad_()
                torch.cdist(a, b, p, compute_mode="donot_use_mm_for_euclid_dist").sum().backward()
                grads.append([None if g is None else g.cpu() for g in (a.grad, b.grad)])
            torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("case", [
    ([0.5, 0.2], [2.0, 0.0]), ([0.5, 0.2], [float("nan"), 0.0]), ([0.5, 0.2], [-1.0, 0.0]),
    ([0.5, 1.5], [2.0, 0.0]), ([1.5, 0.2], [2.0, 0.0]), ([0.5, 0.2], [1.0, 0.0])],
    ids=["target_2", "target_nan", "target_negative", "target_first", "input_first", "valid"])
def test_binary_cross_entropy_checks_targets_like_cpu(case):
    """CPU checks input then target element by element: the first bad element decides
    the error. Targets outside [0, 1] used to compute."""
    x, t = (torch.tensor(v) for v in case)
    try:
        want = F.binary_cross_entropy(x, t)
    except RuntimeError as exc:
        with pytest.raises(RuntimeError, match=str(exc)):
            F.binary_cross_entropy(x.to("neuron"), t.to("neuron"))
            torch.neuron.synchronize()
        compiled = torch.compile(F.binary_cross_entropy, backend="neuron")
        with pytest.raises(RuntimeError, match=str(exc)):
            compiled(x.to("neuron"), t.to("neuron"))
            torch.neuron.synchronize()
        return
    with no_fallback():
        torch.testing.assert_close(F.binary_cross_entropy(x.to("neuron"), t.to("neuron")).cpu(), want)


@pytest.mark.parametrize("conv, x, w, kwargs", [
    (F.conv_transpose1d, (1, 3, 4), (3, 2, 3), dict(stride=1, output_padding=1)),
    (F.conv_transpose2d, (1, 3, 4, 4), (3, 2, 3, 3), dict(stride=2, output_padding=2)),
    (F.conv_transpose2d, (1, 3, 4, 4), (3, 2, 3, 3), dict(stride=1, dilation=2, output_padding=1)),
    (F.conv_transpose3d, (1, 3, 3, 3, 3), (3, 2, 2, 2, 2), dict(stride=(2, 1, 1), output_padding=(1, 0, 1))),
], ids=["1d", "2d", "2d_dilation_allows", "3d"])
def test_conv_transpose_output_padding_must_be_below_stride_or_dilation(conv, x, w, kwargs):
    """slow_conv_transpose's shape check, with CPU's message; neuron computed a larger
    output."""
    x, w = torch.ones(x), torch.ones(w)
    try:
        want = conv(x, w, **kwargs)
    except RuntimeError as exc:
        with pytest.raises(RuntimeError) as got:
            conv(x.to("neuron"), w.to("neuron"), **kwargs)
        assert str(got.value) == str(exc)
        return
    check(lambda x, w: conv(x, w, **kwargs), x, w)


@pytest.mark.parametrize("unpool, x, indices", [
    (F.max_unpool2d, (1, 2, 2, 2), [[[0, 100], [3, 2]], [[0, 1], [2, 3]]]),
    (F.max_unpool2d, (1, 2, 2, 2), [[[0, 1], [2, 3]], [[7, 99], [-5, 3]]]),
    (F.max_unpool2d, (1, 2, 2, 2), [[[0, 0], [0, 0]], [[5, 1], [15, 1]]]),
    (F.max_unpool1d, (1, 2, 2), [[0, 3], [100, 1]]),
    (F.max_unpool3d, (1, 1, 2, 2, 2), [[[[0, 63], [3, 2]], [[9, 9], [2, 64]]]]),
], ids=["2d_too_large", "2d_last_of_two_named", "2d_repeated_last_wins", "1d", "3d"])
def test_max_unpool_places_values_and_checks_indices_like_cpu(unpool, x, indices):
    """CPU's kernel: a repeated index keeps the later value; a bad index raises its
    RuntimeError naming the last bad one (the decomposition raised IndexError)."""
    x, indices = torch.arange(float(math.prod(x))).reshape(x), torch.tensor([indices])
    try:
        want = unpool(x, indices, 2)
    except RuntimeError as exc:
        with pytest.raises(RuntimeError) as got:
            unpool(x.to("neuron"), indices.to("neuron"), 2)
            torch.neuron.synchronize()
        assert str(got.value) == str(exc)
        return
    with no_fallback():
        assert torch.equal(unpool(x.to("neuron"), indices.to("neuron"), 2).cpu(), want)


@pytest.mark.parametrize("call", [
    lambda d: F.max_unpool2d(torch.zeros(0, 3, 2, 2, device=d), torch.zeros(0, 3, 2, 2, dtype=torch.long, device=d), 2),
    lambda d: F.max_unpool1d(torch.zeros(0, 3, 2, device=d), torch.zeros(0, 3, 2, dtype=torch.long, device=d), 2),
    lambda d: F.max_unpool3d(torch.zeros(0, 3, 2, 2, 2, device=d), torch.zeros(0, 3, 2, 2, 2, dtype=torch.long,
                                                                                  device=d), 2),
    lambda d: torch.ops.aten.max_unpool2d(torch.ones(1, 2, 2, 2, device=d),
                                          torch.full((1, 2, 2, 2), 99, dtype=torch.long, device=d), [0, 4]),
    lambda d: torch.ops.aten.max_unpool3d(torch.ones(1, 2, 2, 2, 2, device=d),
                                          torch.ones(1, 2, 2, 2, 2, dtype=torch.long, device=d), [0, 4, 4], [2, 2, 2],
                                          [0, 0, 0]),
], ids=["2d_empty_batch", "1d_empty_batch", "3d_empty_batch", "2d_empty_output", "3d_empty_output"])
def test_max_unpool_of_nothing_is_empty_as_on_cpu(call):
    """CPU returns an empty (or all-zero) result before its loop, checking no index; the
    lowering raised ValueError (argmax of nothing) or named an index."""
    want = call("cpu")
    with no_fallback():
        got = call("neuron")
    assert got.shape == want.shape and torch.equal(got.cpu(), want)


@pytest.mark.parametrize("params", [
    ([2, 2], [0, 0], [1, 1], True, [1, 1, 1]), ([2, 2], [0, 0, 0], [1, 1], True, [1, 1]),
    ([2, 2, 2], [0, 0], [1, 1], False, [0, 0]), ([1, 1], [0, 0], [1, 1, 1], False, [0]), ([1, 1], [0], [1], False, []),
], ids=["output_padding", "padding", "stride", "dilation", "empty_output_padding"])
def test_convolution_parameter_lists_match_the_spatial_dims(params):
    """expand_param_if_needed: one value or one per spatial dim, else CPU's RuntimeError
    naming the list (neuron computed with a list one too long)."""
    x, w = torch.randn(1, 2, 5, 5), torch.randn(2, 2, 3, 3)
    with pytest.raises(RuntimeError) as cpu:
        torch.ops.aten.convolution(x, w, None, *params, 1)
    with pytest.raises(RuntimeError) as neuron:
        torch.ops.aten.convolution(x.to("neuron"), w.to("neuron"), None, *params, 1)
    assert str(neuron.value) == str(cpu.value)


_BN_EMPTY = {  # (input, weight, bias, running_mean, running_var) -> the op's call
    "native_batch_norm": lambda x, w, b, m, v: torch.ops.aten.native_batch_norm(x, w, b, m, v, True, 0.1, 1e-5),
    "native_batch_norm_no_weight": lambda x, w, b, m, v: torch.ops.aten.native_batch_norm(x, None, None, m, v, True,
                                                                                          0.1, 1e-5),
    "legit": lambda x, w, b, m, v: torch.ops.aten._native_batch_norm_legit(x, w, b, m, v, True, 0.1, 1e-5),
    "legit_no_stats": lambda x, w, b, m, v: torch.ops.aten._native_batch_norm_legit(x, w, b, True, 0.1, 1e-5),
    "with_update_no_weight": lambda x, w, b, m, v: torch.ops.aten._batch_norm_with_update(x, None, None, m, v, 0.1,
                                                                                         1e-5),
    "with_update": lambda x, w, b, m, v: torch.ops.aten._batch_norm_with_update(x, w, b, m, v, 0.1, 1e-5),
    "no_update": lambda x, w, b, m, v: torch.ops.aten._batch_norm_no_update(x, w, b, m, v, 0.1, 1e-5),
    "eval": lambda x, w, b, m, v: torch.ops.aten.native_batch_norm(x, w, b, m, v, False, 0.1, 1e-5),
    "functional_train": lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, True),
}


@pytest.mark.parametrize("name", sorted(_BN_EMPTY))
def test_batch_norm_of_an_empty_batch_raises_or_computes_as_cpu(name):
    # CPU's batch_norm_cpu refuses batch statistics of no element; a review found the
    # ops computing on neuron (F.batch_norm returns before them, on both).
    args = (torch.randn(0, 3, 4, 4), torch.ones(3), torch.zeros(3), torch.zeros(3), torch.ones(3))
    check_like_cpu(_BN_EMPTY[name], *args)


@pytest.mark.parametrize("shape", [(0, 4), (0,), (3, 0, 2)])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_binary_cross_entropy_of_an_empty_input_as_cpu(shape, reduction, weighted, compiled):
    """An empty input: CPU's loss is empty, nan (mean) or 0 (sum), its gradient empty;
    neuron's range check took the argmax of no elements (ValueError)."""
    x, t, w = torch.rand(shape), torch.rand(shape), torch.rand(shape)

    def loss_fn(leaf, target, weight):
        return F.binary_cross_entropy(leaf, target, weight if weighted else None, reduction=reduction)

    def run(device, fn=loss_fn):
        leaf = x.to(device).requires_grad_()
        loss = fn(leaf, t.to(device), w.to(device))
        (grad,) = torch.autograd.grad(loss, leaf, torch.ones_like(loss))
        return loss.detach().cpu(), grad.cpu()

    if compiled:
        torch._dynamo.reset()
    with no_fallback():
        got = run("neuron", torch.compile(loss_fn, backend="neuron") if compiled else loss_fn)
    for g, e in zip(got, run("cpu")):
        assert (g.shape, g.dtype) == (e.shape, e.dtype)
        torch.testing.assert_close(g, e, equal_nan=True)


_BN_STATS_OPS = {  # (input, weight, bias, running_mean, running_var) -> (outputs, running stats after)
    "native_batch_norm": lambda x, w, b, m, v: torch.ops.aten.native_batch_norm(x, w, b, m, v, True, 0.1, 1e-5),
    "legit": lambda x, w, b, m, v: torch.ops.aten._native_batch_norm_legit(x, w, b, m, v, True, 0.1, 1e-5),
    "legit_no_stats": lambda x, w, b, m, v: torch.ops.aten._native_batch_norm_legit(x, w, b, True, 0.1, 1e-5),
    "with_update": lambda x, w, b, m, v: torch.ops.aten._batch_norm_with_update(x, w, b, m, v, 0.1, 1e-5),
    "eval": lambda x, w, b, m, v: torch.ops.aten.native_batch_norm(x, w, b, m, v, False, 0.1, 1e-5),
}


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(_BN_STATS_OPS))
def test_batch_norm_statistics_dtypes_and_values_are_cpus_in_eager_and_compiled_graphs(name, dtype, affine):
    # CPU keeps save_mean/save_invstd (and normalizes by them) in the input's half dtype
    # unless a parameter or running statistic is float32; a review found neuron's in
    # float32 (the meta kernel's) for a half input without weight or running statistics.
    x = torch.randn(4, 3, 5, 5).to(dtype).contiguous(memory_format=torch.channels_last)
    w, b = (torch.randn(3, dtype=dtype), torch.randn(3, dtype=dtype)) if affine else (None, None)
    stats = (torch.randn(3, dtype=dtype), torch.rand(3, dtype=dtype) + 0.5)

    def run(op, x, w, b, m, v):
        m, v = m.clone(), v.clone()
        return op(x, w, b, m, v), m, v

    fn = _BN_STATS_OPS[name]
    want = run(fn, x, w, b, *stats)
    tol = HALF_TOL if dtype in HALF else F32_TOL
    for op in (fn, torch.compile(fn, backend="neuron", dynamic=False)):
        with no_fallback():
            got = run(op, *to_neuron((x, w, b) + stats))
        for g, e in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)):
            assert (g.shape, g.dtype) == (e.shape, e.dtype)
            torch.testing.assert_close(g.cpu(), e, **tol)


@pytest.mark.parametrize("params", ["none", "weight", "bias", "both"])
def test_batch_norm_with_update_without_weight_or_bias_compiles_as_cpu_computes(params):
    # PyTorch's decomposition of _batch_norm_with_update_functional (the functionalized
    # op) asks torch._C._select_batch_norm_backend for the reserve, which refuses a
    # missing weight or bias (TypeError; CPU's own aot_eager too, with fullgraph=True);
    # CPU's kernel normalizes without them, as eager on neuron did.
    x, rm, rv = torch.randn(4, 3, 5, 5), torch.randn(3), torch.rand(3) + 0.5
    w = torch.randn(3) if params in ("weight", "both") else None
    b = torch.randn(3) if params in ("bias", "both") else None

    def fn(x, w, b, m, v):
        out = torch.ops.aten._batch_norm_with_update(x, w, b, m, v, 0.1, 1e-5)
        return out, m, v

    want = fn(x, w, b, rm.clone(), rv.clone())
    with no_fallback():
        got = torch.compile(fn, backend="neuron", fullgraph=True)(*to_neuron((x, w, b, rm, rv)))
    for g, e in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)):
        assert (g.shape, g.dtype) == (e.shape, e.dtype)
        torch.testing.assert_close(g.cpu(), e, **F32_TOL)


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("shape", [(4, 3, 5, 5), (8, 16, 7, 7), (16, 32, 8, 8)])
def test_batch_norm_backward_follows_cpus_kernel(shape, layout):
    # Normalization's CPU backward kernel: eval invstd = 1 / sqrt(var + eps) in double
    # and dx = dy * invstd * w (bitwise here); training sums in double for float32
    # (at::acc_type<float>), then dx = ((dy - sum/N) - (x - mean) * k) * invstd * w.
    # A review found grad_input 2-5e-6 off CPU's in training (float32 sums).
    torch.manual_seed(0)
    x, g = (torch.randn(shape).contiguous(memory_format=layout) for _ in range(2))
    w, rm, rv = torch.randn(shape[1]), torch.randn(shape[1]), torch.rand(shape[1]) + 0.5
    op = torch.ops.aten.native_batch_norm_backward
    for train in (False, True):
        _, mean, invstd = torch.ops.aten.native_batch_norm(x, w, None, rm.clone(), rv.clone(), train, 0.1, 1e-5)
        want = op(g, x, w, rm, rv, mean, invstd, train, 1e-5, [True, True, True])
        with no_fallback():
            got = op(*to_neuron((g, x, w, rm, rv, mean, invstd)), train, 1e-5, [True, True, True])
        if not train:
            torch.testing.assert_close(got[0].cpu(), want[0], atol=0, rtol=0)
        else:  # CPU's float32 partial sums (per plane or per thread) are its own rounding
            torch.testing.assert_close(got[0].cpu(), want[0], atol=1e-6, rtol=1e-6)
        # grad_weight and grad_bias are sums of N * H * W terms: CPU's float32 partials
        torch.testing.assert_close(got[1].cpu(), want[1], atol=2e-4, rtol=1e-5)
        torch.testing.assert_close(got[2].cpu(), want[2], atol=2e-4, rtol=1e-5)


_ADAPTIVE_EMPTY = {
    "area2d": (lambda x: F.interpolate(x, size=(2, 2), mode="area"), (1, 2, 0, 4)),
    "area2d_batch_and_plane": (lambda x: F.interpolate(x, scale_factor=2, mode="area"), (0, 3, 0, 4)),
    "avg1d": (lambda x: F.adaptive_avg_pool1d(x, 2), (2, 3, 0)),
    "avg2d_unbatched": (lambda x: F.adaptive_avg_pool2d(x, 2), (3, 4, 0)),
    "avg3d": (lambda x: F.adaptive_avg_pool3d(x, 2), (1, 2, 4, 0, 4)),
    "avg2d_backward": (lambda x: torch.ops.aten._adaptive_avg_pool2d_backward(x.new_ones(1, 2, 0, 2), x),
                       (1, 2, 4, 4)),
    "avg3d_backward": (lambda x: torch.ops.aten._adaptive_avg_pool3d_backward(x.new_ones(1, 2, 2, 0, 2), x),
                       (1, 2, 4, 4, 4)),
    "max2d": (lambda x: F.adaptive_max_pool2d(x, 2), (1, 2, 0, 4)),
    # empty batch or channels, or an output size 0: CPU computes (empty results)
    "avg2d_empty_batch": (lambda x: F.adaptive_avg_pool2d(x, 2), (0, 2, 4, 4)),
    "avg2d_empty_channels": (lambda x: F.adaptive_avg_pool2d(x, 2), (2, 0, 4, 4)),
    "avg3d_unbatched_empty_channels": (lambda x: F.adaptive_avg_pool3d(x, 2), (0, 4, 4, 4)),
    # ... but the 3-d pool checks every dim after the first: a batch's channels too
    "avg3d_empty_channels": (lambda x: F.adaptive_avg_pool3d(x, 2), (2, 0, 4, 4, 4)),
    "area2d_output_0": (lambda x: F.interpolate(x, size=(0, 2), mode="area"), (1, 2, 4, 4)),
    "avg3d_output_0": (lambda x: F.adaptive_avg_pool3d(x, (1, 0, 2)), (1, 2, 4, 4, 4)),
    "max1d_output_0": (lambda x: F.adaptive_max_pool1d(x, 0, return_indices=True), (1, 2, 4)),
    "max2d_output_0": (lambda x: F.adaptive_max_pool2d(x, (0, 2), return_indices=True), (1, 2, 4, 4)),
    "max3d_output_0": (lambda x: F.adaptive_max_pool3d(x, (1, 0, 2), return_indices=True), (1, 2, 4, 4, 4)),
}


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", sorted(_ADAPTIVE_EMPTY))
def test_adaptive_pooling_of_empty_dims_raises_or_computes_as_cpu(name, compiled):
    # CPU refuses an empty pooled input dim (RuntimeError, the op's message) and pools
    # to an output size 0; a review found area/average pooling computing on neuron and
    # max pooling to size 0 raising ValueError (JAX's max of no element).
    fn, shape = _ADAPTIVE_EMPTY[name]
    x = torch.randn(shape)
    try:
        want = fn(x)
    except RuntimeError as exc:
        run = torch.compile(fn, backend="neuron") if compiled else fn
        with pytest.raises(RuntimeError) as got:
            run(x.to("neuron"))
            torch.neuron.synchronize()
        chain, err = [], got.value
        while err is not None:  # Dynamo words its own error around the fake kernel's
            chain.append(str(err))
            err = err.__cause__ or err.__context__
        assert any(str(exc) in text for text in chain), chain
        return
    with no_fallback():
        got = (torch.compile(fn, backend="neuron") if compiled else fn)(x.to("neuron"))
    for g, e in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)):
        assert (g.shape, g.dtype) == (e.shape, e.dtype)


@pytest.mark.parametrize("stats_dtype", [None, torch.float32], ids=["same", "float32_stats"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("op", ["_native_batch_norm_legit_functional", "_batch_norm_with_update_functional"])
def test_functional_batch_norm_keeps_the_running_statistics_dtype(op, dtype, stats_dtype):
    # Functionalized graphs' batch norm: the new running statistics in their own dtype, as
    # CPU's kernel updates them in place (PyTorch's meta kernel said float32 for half ones).
    fn = getattr(torch.ops.aten, op).default
    x = torch.randn(4, 3, 5, generator=torch.Generator().manual_seed(0)).to(dtype)

    def run(device):  # CPU's mixed precision: a half input with float32 parameters and statistics
        params = [torch.full((3,), v, dtype=stats_dtype or dtype, device=device) for v in (1.5, 0.25)]
        stats = [torch.full((3,), v, dtype=stats_dtype or dtype, device=device) for v in (0.5, 2.0)]
        extra = (True,) if "legit" in op else ()
        return fn(x.to(device), *params, *stats, *extra, 0.1, 1e-5)

    want, got = run("cpu"), run("neuron")
    assert [t.dtype for t in got] == [t.dtype for t in want]
    for g, w in zip(got, want):  # (half results within an ulp or two of the half type)
        torch.testing.assert_close(g.cpu(), w, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("shape,channels_last", [((8, 4, 5, 5), False), ((8, 4, 5, 5), True), ((16, 6), False),
                                                 ((2, 3, 4, 4, 4), False)])
def test_bfloat16_batch_norm_running_statistics_are_cpus(shape, channels_last):
    # Three training steps of a bfloat16 BatchNorm: CPU moves the running statistics in
    # BFloat16 arithmetic with momentum rounded to bfloat16 (0.10009765625); neuron's
    # were an ulp off in 6 of 8 of these.
    cls = {2: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d, 5: torch.nn.BatchNorm3d}[len(shape)]
    cpu, dev = cls(shape[1]).bfloat16(), cls(shape[1]).bfloat16().to("neuron")
    for step in range(3):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(step)).bfloat16()
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        torch.testing.assert_close(dev(x.to("neuron")).cpu(), cpu(x), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(dev.running_mean.cpu(), cpu.running_mean, atol=0, rtol=0)
    torch.testing.assert_close(dev.running_var.cpu(), cpu.running_var, atol=0, rtol=0)
