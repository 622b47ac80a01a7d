"""Output layouts (strides) of new tensors, against CPU PyTorch: CPU's kernels keep a
channels_last input's layout (convolution by its mkldnn/slow backend, group_norm,
padding, pixel and channel shuffles, max_unpool2d), take the math path of attention
for a query with a strided last dim, and write lstsq's solution and nonzero's result
column-major. A layout is observable: `y.view(...)` of a channels_last result raises
on CPU. Inputs keep their strides on the device (`strided`)."""
import itertools
import re

import pytest
import torch
import torch.nn.functional as F

from helpers import no_fallback

aten = torch.ops.aten
_CL = {4: torch.channels_last, 5: torch.channels_last_3d}


def strided(t: torch.Tensor) -> torch.Tensor:
    """`t` on neuron with its strides (`.to` would make it contiguous)."""
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="neuron")
    return out.copy_(t)


def _same_layout(fn, *args):
    """fn on CPU and on neuron (tensor args with their strides, no CPU fallback): equal
    values (to float tolerance) and strides per tensor output."""
    expected = fn(*args)
    with no_fallback():
        actual = fn(*(strided(a) if isinstance(a, torch.Tensor) else a for a in args))
    expected = expected if isinstance(expected, (tuple, list)) else [expected]
    actual = actual if isinstance(actual, (tuple, list)) else [actual]
    for e, a in zip(expected, actual):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a.cpu(), e)
            assert a.stride() == e.stride(), (a.stride(), e.stride())


def _size_one_strides_free(t: torch.Tensor) -> tuple:
    """Strides with those of size-1 dims left out (CPU's slow kernels and mkldnn set
    them differently for a depthwise weight's single input channel)."""
    return tuple(s for s, n in zip(t.stride(), t.shape) if n != 1)


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("transposed", [False, True])
# The default run keeps float32 (mkldnn) and float64 (the slow kernels); --runslow the halves.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, pytest.param(torch.bfloat16, marks=pytest.mark.slow),
                                   pytest.param(torch.float16, marks=pytest.mark.slow)])
def test_convolution_lays_out_output_and_gradients_as_cpu(dims, transposed, dtype):
    """Forward and both gradients, for channels_last input, weight, both or neither,
    and groups 1, 2 and depthwise: CPU's layout depends on the backend it picks (mkldnn
    keeps channels_last but not for float64, the slow 2-d kernels keep it, the slow
    3-d ones do not)."""
    for which, groups in itertools.product(["input", "weight", "both", "neither"], [1, 2, 4]):
        x = torch.randn(2, 4, *(5,) * dims, dtype=dtype)
        w = torch.randn(4, 4 // groups, *(3,) * dims, dtype=dtype)
        if which in ("input", "both"):
            x = x.to(memory_format=_CL[dims + 2])
        if which in ("weight", "both"):
            w = w.to(memory_format=_CL[dims + 2])
        params = ([1] * dims, [0] * dims, [1] * dims, transposed, [0] * dims, groups)
        y = aten.convolution(x, w, None, *params)
        g = torch.randn_like(y)
        grads = aten.convolution_backward(g, x, w, [4], *params, [True, True, False])
        with no_fallback():
            yn = aten.convolution(strided(x), strided(w), None, *params)
            gradsn = aten.convolution_backward(strided(g), strided(x), strided(w), [4], *params, [True, True, False])
        assert yn.stride() == y.stride(), (which, groups)
        assert gradsn[0].stride() == grads[0].stride(), (which, groups)
        assert _size_one_strides_free(gradsn[1]) == _size_one_strides_free(grads[1]), (which, groups)


def test_conv2d_module_output_views_as_on_cpu():
    """The user-visible consequence: a channels_last model's activations refuse a view
    on CPU, and so on neuron."""
    conv = torch.nn.Conv2d(3, 8, 3).to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 9, 9).to(memory_format=torch.channels_last)
    y = conv(x)
    with pytest.raises(RuntimeError):
        y.view(2, -1)
    yn = conv.to("neuron")(strided(x))
    assert yn.is_contiguous(memory_format=torch.channels_last)
    with pytest.raises(RuntimeError):
        yn.view(2, -1)


@pytest.mark.parametrize("shape", [(2, 6, 5, 3), (2, 6, 3, 4, 5)])
def test_group_norm_keeps_channels_last(shape):
    x = torch.randn(shape).to(memory_format=_CL[len(shape)])
    _same_layout(lambda t, w, b: aten.native_group_norm(t, w, b, 2, 6, t[0, 0].numel(), 3, 1e-5), x,
                 torch.randn(6), torch.randn(6))
    _same_layout(lambda t: F.group_norm(t, 3), x)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.complex64])
def test_padding_is_native_and_keeps_channels_last(mode, dtype):
    """reflection_pad/replication_pad 1-3d, negative pads included, with CPU's values,
    strides and errors (a reflection pad as large as the input; a crop to nothing in one
    dim is an empty reflection but an error for replication)."""
    cases = [((2, 3, 5), (1, 2)), ((2, 3, 5), (-1, 2)), ((3, 5), (4, 4)), ((2, 3, 5), (5, 0)),
             ((2, 3, 5, 6), (-3, -3, 0, 0)), ((2, 3, 5, 6), (-3, -3, -2, -3)), ((2, 3, 4, 5, 6), (-3, -3, 0, 0, 0, 0)),
             ((2, 3, 5, 6), (1, 2, 3, 4)), ((2, 3, 5, 6), (-2, 1, 0, 3)), ((3, 5, 6), (2, 2, 2, 2)),
             ((2, 3, 4, 5, 6), (1, 2, 3, 1, 2, 3)), ((2, 3, 4, 5, 6), (-1, 2, 0, 1, 3, -2)), ((2, 0, 3, 4), (1, 1, 1, 1))]
    for shape, pads in cases:
        x = (torch.randn(shape) * 5).to(dtype)
        layouts = [x] + ([x.to(memory_format=_CL[x.dim()])] if x.dim() in _CL else [])
        for t in layouts:
            try:
                expected = F.pad(t, pads, mode=mode)
            except Exception as exc:  # noqa: BLE001 - CPU's error is the expectation
                with pytest.raises(type(exc), match=re.escape(str(exc))):
                    F.pad(strided(t), pads, mode=mode)
                continue
            with no_fallback():
                actual = F.pad(strided(t), pads, mode=mode)
            assert torch.equal(actual.cpu(), expected), (shape, pads)
            if expected.numel():  # an empty result's strides are left as the executor makes them
                assert actual.stride() == expected.stride(), (shape, pads)


@pytest.mark.parametrize("op,factor,shape", [(F.pixel_shuffle, 2, (2, 8, 3, 5)), (F.pixel_shuffle, 3, (3, 2, 18, 4, 5)),
                                             (F.pixel_unshuffle, 2, (2, 2, 4, 6)), (F.pixel_unshuffle, 3, (3, 2, 2, 6, 9)),
                                             (F.pixel_shuffle, 2, (1, 4, 0, 3))])
def test_pixel_shuffles_are_native_and_keep_channels_last(op, factor, shape):
    x = torch.randn(shape)
    _same_layout(lambda t: op(t, factor), x)
    if x.dim() == 4:
        _same_layout(lambda t: op(t, factor), x.to(memory_format=torch.channels_last))


@pytest.mark.parametrize("op,factor,shape", [(F.pixel_shuffle, 2, (2, 3, 4, 4)), (F.pixel_shuffle, 2, (4, 4)),
                                             (F.pixel_shuffle, 0, (2, 4, 4, 4)), (F.pixel_shuffle, -2, (2, 4, 4, 4)),
                                             (F.pixel_unshuffle, 2, (2, 3, 5, 4)), (F.pixel_unshuffle, 2, (2, 3, 4, 5)),
                                             (F.pixel_unshuffle, 2, (4, 4)), (F.pixel_unshuffle, 0, (2, 4, 4, 4))])
def test_pixel_shuffles_raise_cpus_errors(op, factor, shape):
    x = torch.randn(shape)
    with pytest.raises(RuntimeError) as cpu:
        op(x, factor)
    with pytest.raises(RuntimeError) as neuron:
        op(x.to("neuron"), factor)
    assert str(neuron.value) == str(cpu.value)


def test_channel_shuffle_and_max_unpool2d_keep_channels_last():
    x = torch.randn(2, 6, 5, 5).to(memory_format=torch.channels_last)
    _same_layout(lambda t: F.channel_shuffle(t, 3), x)
    y, i = F.max_pool2d(torch.randn(2, 3, 8, 8), 2, return_indices=True)
    _same_layout(lambda t, idx: F.max_unpool2d(t, idx, 2), y.to(memory_format=torch.channels_last), i)


def test_attention_output_is_contiguous_where_cpu_takes_its_math_path():
    """A query whose last dim is strided (channels_last, transposed) sends CPU's
    F.scaled_dot_product_attention to its math path, with a contiguous output; the
    usual (B, L, H, E)-transposed inputs keep the query's layout."""
    b, h, q_len, kv_len, e = 2, 4, 3, 5, 8
    k, v = torch.randn(b, h, kv_len, e), torch.randn(b, h, kv_len, e)
    queries = [torch.randn(b, h, q_len, e).to(memory_format=torch.channels_last),
               torch.randn(b, h, e, q_len).transpose(-1, -2), torch.randn(b, q_len, h, e).transpose(1, 2)]
    for q in queries:
        _same_layout(F.scaled_dot_product_attention, q, k, v)
    _same_layout(F.scaled_dot_product_attention, queries[2], torch.randn(b, h, e, kv_len).transpose(-1, -2), v)


@pytest.mark.parametrize("a_shape,b_shape", [((3, 3), (3, 2)), ((3, 5), (3, 2)), ((2, 3, 3), (2, 3, 3)),
                                             ((5, 3), (5,)), ((3, 3, 3, 3), (3, 3, 3, 3))])
def test_lstsq_solution_is_column_major(a_shape, b_shape):
    a, b = torch.randn(a_shape, dtype=torch.float64), torch.randn(b_shape, dtype=torch.float64)
    _same_layout(lambda x, y: torch.linalg.lstsq(x, y).solution, a, b)
    if a.dim() == 4:
        _same_layout(lambda x, y: torch.linalg.lstsq(x, y).solution, a.to(memory_format=torch.channels_last), b)


def test_eig_vectors_are_column_major():
    """PyTorch's meta kernel lays eigenvectors out row-major for CUDA; CPU writes them
    column-major (the meta kernels now read `neuron` as CPU)."""
    a = torch.randn(2, 4, 4, dtype=torch.float64)
    expected = torch.linalg.eig(a).eigenvectors
    actual = torch.linalg.eig(a.to("neuron")).eigenvectors
    assert actual.stride() == expected.stride()


@pytest.mark.parametrize("x", [torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]), torch.zeros(3, 4), torch.tensor(1.0),
                               torch.tensor(0.0), torch.tensor([0.0, 1.0, 1.0, 0.0]), torch.ones(1, 1)],
                         ids=["2d", "none", "0d", "0d_zero", "1d", "one"])
def test_nonzero_is_column_major(x):
    for fn in (torch.nonzero, torch.argwhere):
        _same_layout(fn, x)
    if x.dim():
        _same_layout(lambda t: torch.nonzero(t, as_tuple=True)[0], x)
