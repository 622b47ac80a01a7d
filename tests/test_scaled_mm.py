"""Float8 scaled matmul (aten._scaled_mm, aten._scaled_mm_v2) against CPU PyTorch, and
the float8_e4m3fn conversion it rounds through."""
import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

from helpers import no_fallback
from torchneuron.coverage.outcome import to_device

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]
OPS = [o for o in op_db if o.name in ("torch._scaled_mm", "torch._scaled_mm_v2")]


@pytest.mark.parametrize("dtype", FLOAT8)
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_opinfo_samples_match_cpu(op, dtype):
    samples = list(op.sample_inputs("cpu", dtype))
    assert samples
    for s in samples:
        want = op(s.input, *s.args, **s.kwargs)
        dev = to_device(s, "neuron")
        with no_fallback():
            got = op(dev.input, *dev.args, **dev.kwargs)
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)


def _fp8(shape, seed, dtype=torch.float8_e4m3fn):
    return (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 4).to(dtype)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32, torch.float8_e4m3fn])
def test_rowwise_scales_bias_and_result_scale(out_dtype):
    a, b = _fp8((8, 32), 0), _fp8((16, 32), 1).t()  # mat2 column-major, as float8 GEMMs take it
    scale_a = torch.rand(8, 1, generator=torch.Generator().manual_seed(2)) + 0.5
    scale_b = torch.rand(1, 16, generator=torch.Generator().manual_seed(3)) + 0.5
    bias = torch.randn(16, generator=torch.Generator().manual_seed(4)).to(out_dtype if out_dtype != torch.float8_e4m3fn
                                                                       else torch.bfloat16)
    kwargs = dict(out_dtype=out_dtype)
    if out_dtype != torch.float8_e4m3fn:
        kwargs["bias"] = bias
    else:
        kwargs["scale_result"] = torch.tensor(4.0)
    want = torch._scaled_mm(a, b, scale_a, scale_b, **kwargs)
    dev = {k: v.to("neuron") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with no_fallback():
        got = torch._scaled_mm(a.to("neuron"), b.to("neuron"), scale_a.to("neuron"), scale_b.to("neuron"), **dev)
    assert got.dtype == want.dtype
    # float32 results: 32 products summed in another order (the scaled operands are not
    # exact in float32), so allow float32 rounding of the sum's size.
    tol = dict(rtol=1e-4, atol=1e-3) if out_dtype == torch.float32 else {}
    torch.testing.assert_close(got.cpu(), want, **tol)


@pytest.mark.parametrize("make", [
    lambda: (torch.randn(4, 8), torch.randn(8, 4), torch.tensor(1.0), torch.tensor(1.0)),  # not float8
    lambda: (_fp8((4, 8), 0), _fp8((8, 4), 1), torch.ones(2, 1), torch.tensor(1.0)),  # scale shape
    lambda: (_fp8((4, 8), 0), _fp8((6, 4), 1), torch.tensor(1.0), torch.tensor(1.0)),  # K differs
])
def test_bad_input_raises_like_cpu(make):
    args = make()
    with pytest.raises(Exception) as on_cpu:
        torch._scaled_mm(*args)
    with pytest.raises(type(on_cpu.value)):
        torch._scaled_mm(*(t.to("neuron") for t in args))


@pytest.mark.parametrize("src", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.float8_e5m2,
                                 torch.int64, torch.uint8])
def test_conversion_to_float8_e4m3fn_saturates_like_cpu(src):
    # float8_e4m3fn has no infinity: ATen's conversion clamps to +-448 (XLA's gives NaN).
    if src.is_floating_point:
        x = torch.tensor([1e4, -1e4, 464.0, 479.0, 100.0, 0.3, float("inf"), -float("inf"), float("nan")]).to(src)
    else:
        x = torch.tensor([255, 200, 100]).to(src)
    want = x.to(torch.float8_e4m3fn).float()
    got = x.to("neuron").to(torch.float8_e4m3fn).cpu().float()
    torch.testing.assert_close(got, want, equal_nan=True)
    compiled = torch.compile(lambda t: t.to(torch.float8_e4m3fn), backend="neuron")
    torch.testing.assert_close(compiled(x.to("neuron")).cpu().float(), want, equal_nan=True)


def test_a_non_contiguous_self_is_accepted_like_cpu():
    # PyTorch's meta kernel (CUDA's rules) requires a row-major self; CPU's copies it.
    a = (torch.randn(16, 64, generator=torch.Generator().manual_seed(0)) * 4).to(torch.float8_e4m3fn)[:, ::2]
    b = (torch.randn(16, 32, generator=torch.Generator().manual_seed(1)) * 4).to(torch.float8_e4m3fn).t()
    scale_a, scale_b = torch.tensor(0.5), torch.tensor(2.0)
    want = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    with no_fallback():
        got = torch._scaled_mm(a.to("neuron"), b.to("neuron"), scale_a.to("neuron"), scale_b.to("neuron"),
                               out_dtype=torch.bfloat16)
    torch.testing.assert_close(got.cpu(), want)


def _stretched(t, dim):
    """`t`'s values in a view whose dim `dim` has twice the stride."""
    shape = list(t.shape)
    shape[dim] *= 2
    wide = torch.zeros(shape, dtype=t.dtype)
    index = tuple(slice(None, None, 2) if d == dim else slice(None) for d in range(t.dim()))
    wide[index] = t
    return wide[index]


@pytest.mark.parametrize("position, dim", [(1, 1), (4, 1), (1, 0), (4, 0)],
                         ids=["scale_a_dim1", "scale_b_dim1", "scale_a_dim0", "scale_b_dim0"])
def test_rowwise_v2_scales_need_a_unit_last_stride_like_cpu(position, dim):
    """CPU's row-wise kernel refuses a scale whose stride(1) is not 1, even where that
    dim has size 1 (ValueError), and accepts a stride on dim 0. Neuron computed."""
    op = next(o for o in OPS if o.name == "torch._scaled_mm_v2")
    sample = next(s for s in op.sample_inputs("cpu", torch.float8_e4m3fn) if s.args[1][0].numel() > 1)
    args = list(sample.args)
    args[position] = [_stretched(args[position][0], dim)]
    sample.args = tuple(args)
    try:
        want = op(sample.input, *sample.args, **sample.kwargs)
    except ValueError as exc:
        dev = to_device(sample, "neuron")
        with pytest.raises(ValueError, match=str(exc).replace("(", r"\(").replace(")", r"\)")):
            op(dev.input, *dev.args, **dev.kwargs)
        return
    dev = to_device(sample, "neuron")
    with no_fallback():
        torch.testing.assert_close(op(dev.input, *dev.args, **dev.kwargs).cpu(), want)


@pytest.mark.parametrize("scale, dim", [("a", 1), ("b", 1), ("a", 0), ("b", 0)])
def test_rowwise_scales_must_be_contiguous_like_cpu(scale, dim):
    """aten::_scaled_mm's row-wise scaling needs contiguous scales: CPU's ValueError
    and message otherwise (a scale_b of one row strided on dim 0 is contiguous)."""
    a, b = _fp8((8, 32), 0), _fp8((16, 32), 1).t()
    scales = {"a": torch.rand(8, 1, generator=torch.Generator().manual_seed(2)) + 0.5,
              "b": torch.rand(1, 16, generator=torch.Generator().manual_seed(3)) + 0.5}
    scales[scale] = _stretched(scales[scale], dim)
    args = (a, b, scales["a"], scales["b"])
    try:
        want = torch._scaled_mm(*args, out_dtype=torch.bfloat16)
    except ValueError as exc:
        with pytest.raises(ValueError) as got:
            torch._scaled_mm(*to_device(args, "neuron"), out_dtype=torch.bfloat16)
        assert str(got.value) == str(exc)
        return
    with no_fallback():
        torch.testing.assert_close(torch._scaled_mm(*to_device(args, "neuron"), out_dtype=torch.bfloat16).cpu(), want)


def test_rowwise_scales_need_a_unit_last_stride_like_cpu():
    """A (M, 1) scale made by transposing a row is contiguous but has stride(1) == M:
    CPU's row-wise kernel refuses it (ValueError) for aten::_scaled_mm as for
    _scaled_mm_v2; neuron computed."""
    a, b = _fp8((8, 32), 0), _fp8((16, 32), 1).t()
    scale_a = (torch.rand(1, 8, generator=torch.Generator().manual_seed(2)) + 0.5).t()
    scale_b = torch.rand(1, 16, generator=torch.Generator().manual_seed(3)) + 0.5
    with pytest.raises(ValueError) as cpu:
        torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    with pytest.raises(ValueError) as got:
        torch._scaled_mm(*to_device((a, b, scale_a, scale_b), "neuron"), out_dtype=torch.bfloat16)
    assert str(got.value) == str(cpu.value) == "expected scale_a.stride(1) to be 1, but got 8"
