"""Output layouts (strides) of new tensors, against CPU PyTorch: CPU's kernels keep a
channels_last input's layout (convolution by its mkldnn/slow backend, group_norm,
padding, pixel and channel shuffles, max_unpool2d), take the math path of attention
for a query with a strided last dim, and write lstsq's solution and nonzero's result
column-major. The shared rules of `ops/layouts.py` are checked per kernel family on
transposed, channels_last and sliced inputs: TensorIterator's layout, contiguous
allocations, the input's suggested memory format, gradients, out= tensors CPU resizes
or restrides, results that view a larger storage. A layout is observable: `y.view(...)`
of a channels_last result raises on CPU. Inputs keep their strides on the device
(`strided`)."""
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
            # An empty channels_last result too: CPU's allocation gives it zero strides.
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
                                             ((5, 3), (5,)), ((3, 3, 3, 3), (3, 3, 3, 3)), ((5, 3), (5, 2)),
                                             ((2, 5, 3), (2, 5, 2)), ((2, 5, 3), (2, 5)), ((4, 5, 3), (1, 5, 2)),
                                             ((5, 3), (5, 0))])
def test_lstsq_solution_is_column_major(a_shape, b_shape):
    """For m > n CPU's solution is the top n rows of its (m, k) column-major buffer:
    columns m apart, a view of a larger storage."""
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


# ------------------------------------------------------------------ layouts of CPU's kernels
def _layouts(t: torch.Tensor) -> dict:
    """`t` in the layouts the kernels' rules tell apart: contiguous, transposed (last two
    dims), channels_last (4-d/5-d), and a slice with a step (not dense)."""
    out = {"contiguous": t, "transposed": t.mT.contiguous().mT}
    if t.dim() in _CL:
        out["channels_last"] = t.contiguous(memory_format=_CL[t.dim()])
    wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
    out["sliced"] = wide[..., ::2].copy_(t)
    return out


def _on_neuron(t: torch.Tensor) -> torch.Tensor:
    """`t` on neuron with its strides, a slice as the same view of a copy of its base."""
    if t._base is not None and not torch._prims_common.is_non_overlapping_and_dense_or_false(t):
        base = strided(t._base)
        return base.as_strided(t.shape, t.stride(), t.storage_offset())
    return strided(t)


def _same_strides(fn, *args, values=True, fallback=False):
    """fn on CPU and on neuron (tensor arguments with their layouts): the same strides
    for every tensor result (and values, unless `values` is False)."""
    expected = fn(*args)
    moved = [_on_neuron(a) if isinstance(a, torch.Tensor) else a for a in args]
    if fallback:
        actual = fn(*moved)
    else:
        with no_fallback():
            actual = fn(*moved)
    expected = expected if isinstance(expected, (tuple, list)) else [expected]
    actual = actual if isinstance(actual, (tuple, list)) else [actual]
    for e, a in zip(expected, actual):
        if isinstance(e, torch.Tensor):
            assert a.stride() == e.stride(), (a.stride(), e.stride())
            if values:
                torch.testing.assert_close(a.cpu(), e)


_ELEMENTWISE = {
    "copysign": lambda x, y: torch.copysign(x, y),
    "floor_divide": lambda x, y: torch.floor_divide(x, y),
    "div_floor": lambda x, y: torch.div(x, y, rounding_mode="floor"),
    "complex": lambda x, y: torch.complex(x, y),
    "polar": lambda x, y: torch.polar(x.abs(), y),
    "native_dropout_backward": lambda x, y: aten.native_dropout_backward(x, y > 0, 2.0),
}


@pytest.mark.parametrize("name", sorted(_ELEMENTWISE))
@pytest.mark.parametrize("layout", ["transposed", "channels_last", "sliced"])
@pytest.mark.parametrize("other", ["same", "scalar", "broadcast"])
def test_tensor_iterator_results_take_the_inputs_layout(name, layout, other):
    """CPU's TensorIterator kernels order the output's dims by the inputs' strides, with
    a 0-dim or broadcast operand not voting; PyTorch's Python references of some lay the
    result out contiguous (copysign with a 0-dim operand), and ops without the pointwise
    tag (complex, polar, floor_divide, native_dropout_backward) have references of their
    own."""
    x = _layouts(torch.randn(2, 3, 4, 5))[layout]
    y = {"same": _layouts(torch.randn(2, 3, 4, 5))[layout], "scalar": torch.tensor(1.5),
         "broadcast": torch.randn(4, 1)}[other]
    _same_strides(_ELEMENTWISE[name], x, y)


_OUT_OPS = {
    "eq": lambda x, y, out: torch.eq(x, y, out=out),
    "logical_and": lambda x, y, out: torch.logical_and(x, y, out=out),
    "heaviside": lambda x, y, out: torch.heaviside(x, y, out=out),
    "copysign": lambda x, y, out: torch.copysign(x, y, out=out),
    "signbit": lambda x, y, out: torch.signbit(x, out=out),
}


@pytest.mark.parametrize("name", sorted(_OUT_OPS))
@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
def test_resized_out_tensor_takes_the_functional_layout(name, layout):
    """An out= tensor CPU resizes (an empty one) is laid out as the functional result
    (structured kernels' `resize_out` takes the meta function's strides, TensorIterator's
    here); one of the right shape keeps its strides. PyTorch's Python out wrappers made
    the resized one contiguous."""
    x = _layouts(torch.randn(2, 3, 4, 5))[layout]
    y = torch.tensor(0.5)
    dtype = torch.bool if name in ("eq", "logical_and", "signbit") else torch.float32

    def call(a, b):
        out = torch.empty(0, dtype=dtype, device=a.device)
        _OUT_OPS[name](a, b, out)
        return out

    def call_right_shape(a, b):
        out = torch.empty(2, 3, 5, 4, dtype=dtype, device=a.device).mT
        _OUT_OPS[name](a, b, out)
        return out

    _same_strides(call, x, y)
    _same_strides(call_right_shape, x, y)


@pytest.mark.parametrize("x", [torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0]]), torch.zeros(3, 2),
                               torch.tensor([0.0, 1.0])], ids=["2d", "none", "1d"])
def test_nonzero_out_is_column_major_when_resized(x):
    """nonzero_out_cpu restrides a resized out tensor column-major, (1, n), also with no
    nonzero element (strides (1, 0)); a right-sized one keeps its strides."""
    def resized(t):
        return torch.nonzero(t, out=torch.empty(0, dtype=torch.long, device=t.device))

    def right_size(t):
        out = torch.empty(int(torch.count_nonzero(t.cpu())), t.dim(), dtype=torch.long, device=t.device)
        return torch.nonzero(t, out=out)

    _same_strides(resized, x)
    _same_strides(right_size, x)


def _rrelu_eval(t):
    return F.rrelu(t, training=False)


def _rrelu_train(t):
    return F.rrelu(t, training=True)


_ONE_INPUT = {
    # contiguous whatever the input
    "logcumsumexp": (lambda t: torch.logcumsumexp(t, 1), True),
    "rrelu_eval": (_rrelu_eval, True),
    "rrelu_train": (_rrelu_train, False),  # random slopes: strides only
    "normal_tensor_float": (lambda t: torch.normal(t, 0.5), False),
    "normal_tensor_tensor": (lambda t: torch.normal(t, t.abs()), False),
    # the input's suggested memory format
    "batch_norm_eval": (lambda t: F.batch_norm(t, torch.zeros(t.shape[1], device=t.device),
                                               torch.ones(t.shape[1], device=t.device)), True),
    "batch_norm_train": (lambda t: F.batch_norm(t, None, None, training=True), True),
    "native_batch_norm": (lambda t: aten.native_batch_norm(t, None, None, None, None, True, 0.1, 1e-5), True),
    "roll_one_dim": (lambda t: torch.roll(t, 1, 1), True),
    "roll_two_dims": (lambda t: torch.roll(t, (1, 2), (0, 2)), True),
    "roll_flat": (lambda t: torch.roll(t, 3), True),
    "native_channel_shuffle": (lambda t: torch.native_channel_shuffle(t, 2), True),
    # pointwise-tagged, yet a contiguous clone filled in place
    "masked_fill": (lambda t: t.masked_fill(t > 0, 0.5), True),
    "masked_fill_broadcast": (lambda t: t.masked_fill(t[0, 0] > 0, 0.5), True),
}


@pytest.mark.parametrize("name", sorted(_ONE_INPUT))
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "channels_last", "sliced"])
def test_kernels_allocating_contiguous_or_in_the_suggested_format(name, layout):
    """Kernels that allocate `empty_like(self, MemoryFormat::Contiguous)` (logcumsumexp,
    rrelu, normal; masked_fill's contiguous clone, though it is tagged pointwise) or
    `empty_like(input, input.suggest_memory_format())` (batch_norm, roll through cat,
    native_channel_shuffle), where PyTorch's meta kernels keep a
    transposed input's layout or drop channels_last. native_channel_shuffle of a
    transposed input raised a view error on neuron (its composite kernel views)."""
    fn, values = _ONE_INPUT[name]
    x = _layouts(torch.randn(2, 4, 3, 5))[layout]
    _same_strides(fn, x, values=values)


def _grads(fn, args, device, transposed_grad=False):
    """Gradients of fn's result for the floating tensor arguments, given a grad_output
    laid out as CPU's result (or transposed in its last two dims)."""
    leaves = []
    for a in args:
        if isinstance(a, torch.Tensor):
            a = (_on_neuron(a) if device == "neuron" else a).detach()
            if a.is_floating_point():
                a.requires_grad_(True)
        leaves.append(a)
    out = fn(*leaves)
    values = torch.randn(out.shape, generator=torch.Generator().manual_seed(0))
    stride = torch.empty(out.shape).mT.contiguous().mT.stride() if transposed_grad else fn(*args).stride()
    grad = torch.empty_strided(out.shape, stride, device=device).copy_(values)
    return torch.autograd.grad(out, [a for a in leaves if isinstance(a, torch.Tensor) and a.requires_grad], grad)


def _same_grads(fn, *args, fallback=False, transposed_grad=False):
    args = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    expected = _grads(fn, args, "cpu", transposed_grad)
    if fallback:
        actual = _grads(fn, args, "neuron", transposed_grad)
    else:
        with no_fallback():
            actual = _grads(fn, args, "neuron", transposed_grad)
    for e, a in zip(expected, actual):
        assert a.stride() == e.stride(), (a.stride(), e.stride())
        torch.testing.assert_close(a.cpu(), e, atol=1e-4, rtol=1e-4)


_TARGET = torch.randint(0, 4, (2, 3, 5))


# name -> (fn, input shape, whether the gradient coming in is transposed, as it is where a
# loss or activation meets a transposed tensor).
_BACKWARDS = {
    # class probabilities laid out as the input: log_softmax's gradient comes in so
    "cross_entropy": (lambda x: F.cross_entropy(x, torch.ones_like(x) / x.shape[1], reduction="none"), (2, 4, 3, 5)),
    "log_softmax": (lambda x: torch.log_softmax(x, 1), (2, 4, 3, 5), True),
    "softmax": (lambda x: torch.softmax(x, -1), (2, 4, 3, 5), True),
    "mse_loss": (lambda x: F.mse_loss(x, torch.ones_like(x), reduction="none"), (2, 4, 3, 5)),
    "huber_loss": (lambda x: F.huber_loss(x, torch.ones_like(x), reduction="none"), (2, 4, 3, 5)),
    "smooth_l1_loss": (lambda x: F.smooth_l1_loss(x, torch.ones_like(x), reduction="none"), (2, 4, 3, 5)),
    "soft_margin_loss": (lambda x: F.soft_margin_loss(x, torch.ones_like(x), reduction="none"), (2, 4, 3, 5)),
    "multi_margin_loss": (lambda x: F.multi_margin_loss(x, _TARGET[0, 0].to(x.device), reduction="none"), (5, 4)),
    "multilabel_margin_loss": (lambda x: F.multilabel_margin_loss(
        x, torch.zeros(x.shape, dtype=torch.long, device=x.device), reduction="none"), (5, 4)),
    "reflection_pad": (lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"), (2, 4, 3, 5)),
    "replication_pad": (lambda x: F.pad(x, (1, 2, 2, 1), mode="replicate"), (2, 4, 3, 5)),
}


@pytest.mark.parametrize("name", sorted(_BACKWARDS))
@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
def test_gradients_are_laid_out_as_cpu(name, layout):
    """Input gradients: CPU's softmax and loss backward kernels allocate contiguous
    (LEGACY_CONTIGUOUS_MEMORY_FORMAT, `at::empty({0})` resized) whatever the layout of
    the gradient coming in, soft_margin_loss's writes a TensorIterator (the inputs'
    layout), and the 2-d pads' keep a channels_last input's format
    (`input.suggest_memory_format()`)."""
    fn, shape, transposed_grad = (_BACKWARDS[name] + (False,))[:3]
    layouts = _layouts(torch.randn(shape))
    if layout not in layouts:
        pytest.skip("channels_last needs 4 or 5 dims")
    _same_grads(fn, layouts[layout], transposed_grad=transposed_grad)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("op", ["reflection_pad3d", "replication_pad3d"])
def test_3d_padding_gradients_keep_channels_last(op, layout):
    x = _layouts(torch.randn(2, 3, 4, 3, 5))[layout]
    _same_grads(lambda t: F.pad(t, (1, 2, 2, 1, 1, 1), mode=op.split("_")[0].replace("reflection", "reflect")
                                .replace("replication", "replicate")), x)


def test_ctc_and_fractional_max_pool3d_gradients_are_contiguous():
    """LossCTC.cpp's gradient is `full_like(log_probs, neginf, LEGACY_CONTIGUOUS_MEMORY_FORMAT)`;
    FractionalMaxPool3d.cpp's `at::empty({0})` resized as the input (contiguous)."""
    targets = torch.randint(1, 6, (3, 5))

    def ctc(lp):
        return F.ctc_loss(lp, targets.to(lp.device), [20, 18, 15], [5, 4, 3], reduction="none")

    _same_grads(ctc, torch.randn(20, 3, 6).log_softmax(2).mT.contiguous().mT, fallback=True)
    samples = torch.rand(2, 3, 3)
    for x in _layouts(torch.randn(2, 3, 5, 5, 5)).values():
        _same_grads(lambda t: F.fractional_max_pool3d(t, 2, output_size=3, _random_samples=samples.to(t.device)),
                    x, fallback=True)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_attention_gradients_are_laid_out_as_cpu(layout):
    """F.scaled_dot_product_attention's input gradients: CPU's flash kernel writes them
    (B, L, H, E) in memory; its math path (a strided last dim) gives bmm results, the
    key's transposed."""
    q, k, v = (_layouts(torch.randn(2, 3, n, 8))[layout] for n in (4, 6, 6))
    _same_grads(F.scaled_dot_product_attention, q, k, v)


_PAD_OUTS = [(aten.reflection_pad2d.out, (2, 3, 5, 6), [1, 1, 2, 1]),
             (aten.replication_pad2d.out, (2, 3, 5, 6), [1, 1, 2, 1]),
             (aten.reflection_pad3d.out, (2, 3, 4, 5, 6), [1] * 6),
             (aten.replication_pad3d.out, (2, 3, 4, 5, 6), [1] * 6),
             (aten.reflection_pad2d.out, (3, 5, 6), [1, 1, 2, 1]),
             (aten.reflection_pad1d.out, (2, 3, 6), [1, 2])]


@pytest.mark.parametrize("op,shape,pads", _PAD_OUTS,
                         ids=[f"{op.__name__}-{len(shape)}d" for op, shape, pads in _PAD_OUTS])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("out_kind", ["empty", "transposed"])
def test_padding_out_tensors_are_restrided_as_cpu(op, shape, pads, layout, out_kind):
    """CPU's 2-d (batched) and 3-d padding out= kernels call `out.resize_(sizes,
    input.suggest_memory_format())` themselves: a right-sized out tensor of another
    layout is restrided too; 1-d and unbatched 2-d keep its strides."""
    x = _layouts(torch.randn(shape)).get(layout, torch.randn(shape))
    size = list(op.overloadpacket.default(x, pads).shape)

    def call(t):
        out = (torch.empty(0, device=t.device) if out_kind == "empty"
               else torch.empty(size[:-2] + size[-2:][::-1], device=t.device).mT)
        op(t, pads, out=out)
        return out

    _same_strides(call, x)


_PAD_GRAD_OUTS = [(aten.reflection_pad2d_backward.grad_input, (2, 3, 5, 6), [1, 1, 2, 1]),
                  (aten.replication_pad2d_backward.grad_input, (2, 3, 5, 6), [1, 1, 2, 1]),
                  (aten.replication_pad3d_backward.grad_input, (2, 3, 4, 5, 6), [1] * 6),
                  (aten.reflection_pad3d_backward.grad_input, (2, 3, 4, 5, 6), [1] * 6)]


@pytest.mark.parametrize("op,shape,pads", _PAD_GRAD_OUTS, ids=[op.__name__ for op, _, _ in _PAD_GRAD_OUTS])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_padding_backward_grad_input_is_restrided_as_cpu(op, shape, pads, layout):
    x = _layouts(torch.randn(shape))[layout]
    forward = getattr(aten, op.__name__.split("_backward")[0]).default
    grad = torch.randn(forward(x, pads).shape)

    def call(g, t):
        out = torch.empty(list(t.shape[:-2]) + list(t.shape[-2:])[::-1], device=t.device).mT
        op(g, t, pads, grad_input=out)
        return out

    _same_strides(call, grad, x)


@pytest.mark.parametrize("op", [aten.diagonal_scatter.default, aten.select_scatter.default, aten.slice_scatter.default,
                                aten.as_strided_scatter.default])
def test_scatter_ops_keep_a_strided_inputs_strides(op):
    """CPU's *_scatter kernels start from `clone_preserve_strides(self)`: a sliced input
    gives a result with its (not dense) strides, a view of a larger storage."""
    x = _layouts(torch.randn(6, 5))["sliced"]
    src = {aten.diagonal_scatter.default: torch.randn(5), aten.select_scatter.default: torch.randn(5),
           aten.slice_scatter.default: torch.randn(6, 5), aten.as_strided_scatter.default: torch.randn(5)}[op]
    extra = {aten.diagonal_scatter.default: (), aten.select_scatter.default: (0, 1), aten.slice_scatter.default: (),
             aten.as_strided_scatter.default: ((5,), (1,))}[op]
    _same_strides(lambda t, s: op(t, s, *extra), x, src)


def test_decomposition_with_a_named_tuple_result_on_a_strided_input():
    """F.logsigmoid of a sliced input runs log_sigmoid_forward's decomposition, whose
    result is a named tuple; copying it into the meta kernel's layout kept its type."""
    x = _layouts(torch.randn(4, 6))["sliced"]
    _same_strides(lambda t: aten.log_sigmoid_forward(t), x, fallback=True)
    _same_strides(F.logsigmoid, x, fallback=True)


@pytest.mark.parametrize("weight_channels_last", [False, True])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_conv1d_of_a_length_major_input_is_laid_out_as_cpu(weight_channels_last, transposed, dtype):
    """An (N, L, C)-major input (`x.transpose(1, 2)`, common before conv1d) gives CPU a
    contiguous result with a contiguous weight, and channel-stride-1 results with a
    channel-stride-1 weight: CPU picks the 1-d backend's format from the weight."""
    x = torch.randn(2, 7, 6, dtype=dtype).transpose(1, 2).requires_grad_()
    w = torch.randn(6, 6, 3, dtype=dtype)
    if weight_channels_last:
        w = w.transpose(1, 2).contiguous().transpose(1, 2)
    conv = F.conv_transpose1d if transposed else F.conv1d
    y = conv(x, w)
    gx = torch.autograd.grad(y, x, torch.ones_like(y))[0]
    xn = strided(x.detach()).requires_grad_()
    yn = conv(xn, strided(w))
    gxn = torch.autograd.grad(yn, xn, torch.ones_like(yn))[0]
    assert (yn.stride(), gxn.stride()) == (y.stride(), gx.stride())
    torch.testing.assert_close(yn.cpu(), y)


# ------------------------------------------------------------------ operand order and promotion
_ACTIVATION_BACKWARDS = {
    # self first: threshold_backward (ReLU's), leaky_relu_backward
    "threshold_backward": lambda g, x: aten.threshold_backward(g, x, 0.5),
    "relu": lambda g, x: _input_grad(F.relu, g, x),
    "threshold": lambda g, x: _input_grad(lambda t: F.threshold(t, 0.5, 2.0), g, x),
    "leaky_relu_backward": lambda g, x: aten.leaky_relu_backward(g, x, 0.1, False),
    # grad_output first, without the pointwise tag
    "hardtanh_backward": lambda g, x: aten.hardtanh_backward(g, x, -1.0, 1.0),
    "hardtanh": lambda g, x: _input_grad(F.hardtanh, g, x),
    "hardswish_backward": lambda g, x: aten.hardswish_backward(g, x),
    "hardswish": lambda g, x: _input_grad(F.hardswish, g, x),
    "elu_backward": lambda g, x: aten.elu_backward(g, 1.0, 1.0, 1.0, False, x),
    "softplus_backward": lambda g, x: aten.softplus_backward(g, x, 1.0, 20.0),
    "hardsigmoid_backward": lambda g, x: aten.hardsigmoid_backward(g, x),
    "mish_backward": lambda g, x: aten.mish_backward(g, x),
    "softshrink_backward": lambda g, x: aten.softshrink_backward(g, x, 0.5),
    # grad_output first, tagged pointwise
    "gelu_backward": lambda g, x: aten.gelu_backward(g, x),
    "silu_backward": lambda g, x: aten.silu_backward(g, x),
    "sigmoid_backward": lambda g, x: aten.sigmoid_backward(g, x),
    "tanh_backward": lambda g, x: aten.tanh_backward(g, x),
    # into empty_like(grad_output)
    "log_sigmoid_backward": lambda g, x: aten.log_sigmoid_backward(g, x, aten.log_sigmoid_forward(x)[1]),
}


def _input_grad(fn, grad, x):
    x = x.detach().requires_grad_()
    return torch.autograd.grad(fn(x), x, grad)[0]


@pytest.mark.parametrize("name", sorted(_ACTIVATION_BACKWARDS))
def test_activation_gradients_order_operands_as_cpus_iterator(name):
    """CPU's activation gradients are TensorIterators whose operand order decides the
    layout where grad_output and self disagree: threshold_backward's and
    leaky_relu_backward's take self first, hardtanh's and hardswish's (and the other
    `build_borrowing_binary_op(out, grad_output, self)` kernels) grad_output first;
    PyTorch's references of these took the other one. All 16 pairs of layouts."""
    grads, inputs = _layouts(torch.randn(2, 3, 4, 5)), _layouts(torch.randn(2, 3, 4, 5) * 3)
    for g, x in itertools.product(grads.values(), inputs.values()):
        _same_strides(_ACTIVATION_BACKWARDS[name], g, x)


def _mixed(dtype, kind):
    """A (4, 3) operand of `dtype`, no zeros (integer division): transposed, a
    transposed slice, or a broadcast (an expanded row, column or transposed row)."""
    def values(*shape):
        return (torch.rand(shape) * 5 + 1).to(dtype)

    return {"transposed": lambda: values(3, 4).t(), "sliced_t": lambda: values(3, 8)[:, ::2].t(),
            "expanded": lambda: values(3).expand(4, 3), "expanded_col": lambda: values(4, 1).expand(4, 3),
            "expanded_t": lambda: values(4).expand(3, 4).t()}[kind]()


@pytest.mark.parametrize("op", [torch.mul, torch.add, torch.div, torch.eq, torch.maximum, torch.atan2],
                         ids=lambda op: op.__name__)
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.complex64), (torch.int64, torch.float32),
                                    (torch.int32, torch.int64), (torch.bool, torch.float32),
                                    (torch.int64, torch.int64)], ids=lambda d: f"{d[0]}-{d[1]}".replace("torch.", ""))
def test_promoted_operands_vote_as_their_cast_copies(op, dtypes):
    """CPU's TensorIterator casts an operand whose dtype is not the common one
    (`.to(common_dtype)`, which makes a broadcast or sliced operand contiguous) before
    it orders the output's dims: a broadcast real operand times a transposed complex one
    gives a contiguous result, not a transposed one; true division casts both integer
    operands."""
    for first, second in itertools.product(["expanded", "expanded_col", "expanded_t", "sliced_t"],
                                           ["transposed", "sliced_t"]):
        a, b = _mixed(dtypes[0], first), _mixed(dtypes[1], second)
        if op is torch.atan2 and (a.is_complex() or b.is_complex()):
            continue
        if op is torch.maximum and (a.is_complex() or b.is_complex()):
            continue
        _same_strides(op, a, b)
        _same_strides(op, b, a)


def test_where_does_not_promote_its_condition():
    """`where_self_out` casts self and other to their result type, not the condition: a
    broadcast condition keeps its (non-)vote."""
    cond = torch.rand(4, 1).expand(4, 3) > 0.5
    a, b = torch.randn(3, 4).t(), torch.randn(3, 4, dtype=torch.float64).t()
    _same_strides(torch.where, cond, a, b)
    _same_strides(torch.where, cond, a.to(torch.int64), torch.randn(3).expand(4, 3))


@pytest.mark.parametrize("op", ["mse", "smooth_l1", "huber", "soft_margin"])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 1), (3, 4)), ((4,), (3, 4)), ((1, 4), (3, 1)),
                                    ((3, 4), (4,))], ids=str)
def test_loss_gradients_with_a_broadcast_target(op, shapes):
    """Loss.cpp's mse, smooth_l1 and huber gradients are a contiguous zeros_like(input)
    written by a TensorIterator over (input, target, grad_output): a target that
    broadcasts the input to a larger shape makes the iterator resize it, in its own
    layout; a mean divides by the input's numel, not the broadcast shape's. All
    reductions, for contiguous, transposed and sliced operands."""
    fn = {"mse": lambda g, x, y, r: aten.mse_loss_backward(g, x, y, r),
          "smooth_l1": lambda g, x, y, r: aten.smooth_l1_loss_backward(g, x, y, r, 1.0),
          "huber": lambda g, x, y, r: aten.huber_loss_backward(g, x, y, r, 1.0),
          "soft_margin": lambda g, x, y, r: aten.soft_margin_loss_backward(g, x, y, r)}[op]
    shape = torch.broadcast_shapes(*shapes)

    def layouts(s):
        t = torch.randn(s)
        return _layouts(t) if len(s) == 2 and min(s) > 1 else {"contiguous": t}

    for (x, y), reduction in itertools.product(itertools.product(layouts(shapes[0]).values(),
                                                                 layouts(shapes[1]).values()), [0, 1, 2]):
        for g in (layouts(shape).values() if reduction == 0 else [torch.tensor(1.3)]):
            _same_strides(lambda g, x, y: fn(g, x, y, reduction), g, x, y)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape,pads", [((2, 3, 7), (1, 2)), ((2, 3, 5, 6), (1, 2, 2, 1)), ((3, 4, 5, 6), (1, 2, 2, 1, 1, 1)),
                                        ((2, 3, 4, 5, 6), (1, 2, 2, 1, 1, 1))], ids=["1d", "2d", "3d-unbatched", "3d"])
def test_compiled_padding_gradients_keep_channels_last(mode, shape, pads):
    """Under torch.compile the input gradient of a reflection pad was PyTorch's
    decomposition inlined into the graph (contiguous); lowered, it keeps the layout CPU
    gives a channels_last input, as eager does. `torch.autograd.grad`, not `.grad`:
    AccumulateGrad restrides a leaf's gradient to the leaf's layout."""
    def pad(t):
        return F.pad(t, pads, mode=mode)

    for x in _layouts(torch.randn(shape)).values():
        torch._dynamo.reset()
        expected = _input_grad(pad, torch.ones(pad(x).shape), x)
        xn = _on_neuron(x).detach().requires_grad_()
        with no_fallback():
            y = torch.compile(pad, backend="neuron")(xn)
            actual = torch.autograd.grad(y, xn, torch.ones_like(y))[0]
        assert actual.stride() == expected.stride()
        torch.testing.assert_close(actual.cpu(), expected)


_EVAL_BATCH_NORMS = {
    "native_batch_norm": lambda x, w, rm, rv: aten.native_batch_norm(x, w, w, rm.clone(), rv.clone(), False, 0.1, 1e-5),
    "legit": lambda x, w, rm, rv: aten._native_batch_norm_legit(x, w, w, rm.clone(), rv.clone(), False, 0.1, 1e-5),
    "legit_no_training": lambda x, w, rm, rv: aten._native_batch_norm_legit_no_training(x, w, w, rm, rv, 0.1, 1e-5),
    "legit_functional": lambda x, w, rm, rv: aten._native_batch_norm_legit_functional(x, w, w, rm, rv, False, 0.1,
                                                                                       1e-5),
    "no_update": lambda x, w, rm, rv: aten._batch_norm_no_update(x, w, w, rm, rv, 0.1, 1e-5),
    "with_update": lambda x, w, rm, rv: aten._batch_norm_with_update(x, w, w, rm.clone(), rv.clone(), 0.1, 1e-5),
}


@pytest.mark.parametrize("name", sorted(_EVAL_BATCH_NORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_eval_batch_norm_statistics_are_empty_as_on_cpu(name, dtype):
    """CPU's batch norm in eval mode returns empty (0,) save_mean and save_invstd
    (float32 for a half input with float32 parameters); PyTorch's meta kernels give the
    running statistics, (C,), as CUDA does. `_batch_norm_with_update`/`_no_update`
    without weight and bias raised a TypeError (PyTorch's reserve-size query)."""
    x = _layouts(torch.randn(2, 4, 3, 5).to(dtype))["channels_last"]
    rm, rv = torch.randn(4), torch.rand(4) + 0.5
    for w in (torch.randn(4), None):
        expected = _EVAL_BATCH_NORMS[name](x, w, rm, rv)
        with no_fallback():
            actual = _EVAL_BATCH_NORMS[name](*(None if t is None else _on_neuron(t) for t in (x, w, rm, rv)))
        for e, a in zip(expected, actual):
            assert (a.shape, a.dtype, a.stride()) == (e.shape, e.dtype, e.stride())
            torch.testing.assert_close(a.cpu(), e)


def test_eval_batch_norm_backward_uses_the_running_statistics():
    """native_batch_norm_backward with training=False, given CPU's empty saved
    statistics, normalizes by the running ones."""
    x, w, rm, rv = torch.randn(2, 4, 3, 5), torch.randn(4), torch.randn(4), torch.rand(4) + 0.5
    g = torch.randn(2, 4, 3, 5)

    def backward(x, w, rm, rv, g):
        _, save_mean, save_invstd = aten.native_batch_norm(x, w, None, rm, rv, False, 0.1, 1e-5)
        return aten.native_batch_norm_backward(g, x, w, rm, rv, save_mean, save_invstd, False, 1e-5, [True] * 3)

    _same_strides(backward, x, w, rm, rv, g)


# ------------------------------------------------------------------ Scalar-first ops, logsigmoid, BCE
_SCALAR_FIRST = {
    # Pow.cpp's pow.Scalar meta function sets no strides: contiguous whatever the exponent's layout
    "pow_scalar": lambda t: torch.pow(2, t),
    "rpow_int": lambda t: 2 ** t,
    "rpow_float": lambda t: 2.5 ** t,
    "rpow_one": lambda t: 1 ** t,  # CPU fills ones
    "float_power": lambda t: torch.float_power(2, t),
    "pow_scalar_out_resized": lambda t: torch.pow(2, t, out=torch.empty(0, device=t.device)),
    # a right-sized out tensor keeps its strides
    "pow_scalar_out_transposed": lambda t: torch.pow(2, t, out=torch.empty(
        t.shape[:-2] + t.shape[-2:][::-1], device=t.device).mT),
    # the number wrapped into a 0-dim tensor before a TensorIterator: the tensor's layout
    "rsub": lambda t: 2 - t,
    "remainder": lambda t: torch.remainder(2, t),
    "xlogy": lambda t: torch.xlogy(2, t),
    "rdiv": lambda t: 2 / t,
}


@pytest.mark.parametrize("name", sorted(_SCALAR_FIRST))
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "channels_last", "sliced"])
def test_scalar_first_ops_are_laid_out_as_cpu(name, layout):
    """`2 ** x` (pow.Scalar) is contiguous on CPU, as are its out= tensors it resizes;
    the other ops with a Python number first take the tensor's layout. neuron kept a
    transposed or channels_last exponent's layout (pow.Scalar is tagged pointwise)."""
    x = _layouts(torch.rand(2, 4, 3, 5) + 0.5)[layout]
    _same_strides(_SCALAR_FIRST[name], x)


_LOG_SIGMOID = {
    "logsigmoid": F.logsigmoid,
    "forward": lambda t: aten.log_sigmoid_forward(t),
    # Activation.cpp's out= kernel: result.resize_as_(input) (a right-sized one keeps its
    # strides), buffer.resize_as_(input, MemoryFormat::Contiguous) (always restrided)
    "forward_out_resized": lambda t: aten.log_sigmoid_forward.output(
        t, output=torch.empty(0, device=t.device), buffer=torch.empty(0, device=t.device)),
    "forward_out_transposed": lambda t: aten.log_sigmoid_forward.output(
        t, output=torch.empty(t.shape[:-2] + t.shape[-2:][::-1], device=t.device).mT,
        buffer=torch.empty(t.shape[:-2] + t.shape[-2:][::-1], device=t.device).mT),
}


@pytest.mark.parametrize("name", sorted(_LOG_SIGMOID))
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "channels_last", "sliced"])
def test_log_sigmoid_forward_is_contiguous_as_on_cpu(name, layout):
    """log_sigmoid_forward_cpu allocates result and buffer `empty_like(input,
    MemoryFormat::Contiguous)`; neuron kept a transposed or channels_last input's layout."""
    x = _layouts(torch.randn(2, 4, 3, 5))[layout]
    _same_strides(_LOG_SIGMOID[name], x)


# (A right-sized out tensor made inside the compiled function takes the functional
# result's strides there, as with backend="aot_eager" on CPU: AOTAutograd's, not listed.)
@pytest.mark.parametrize("name", ["forward", "forward_out_resized"])
@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
def test_compiled_log_sigmoid_forward_is_laid_out_as_cpu(name, layout):
    """The same in a compiled graph, where log_sigmoid_forward takes PyTorch's
    decomposition (pointwise ops keeping the input's layout): its results are copied
    into the layout rule's strides (`meta_device.relaid`). The out= overload's result is a
    named tuple, which the fake tensors' layout step rebuilt wrongly (TypeError)."""
    x = _layouts(torch.randn(2, 4, 3, 5))[layout]
    expected = _LOG_SIGMOID[name](x)
    torch._dynamo.reset()
    actual = torch.compile(_LOG_SIGMOID[name], backend="neuron")(_on_neuron(x))
    for e, a in zip(expected, actual):
        assert a.stride() == e.stride(), (a.stride(), e.stride())
        torch.testing.assert_close(a.cpu(), e)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "channels_last", "sliced"])
@pytest.mark.parametrize("transposed_grad", [False, True])
def test_log_sigmoid_gradient_is_laid_out_as_cpu(layout, transposed_grad):
    _same_grads(F.logsigmoid, _layouts(torch.randn(2, 4, 3, 5))[layout], transposed_grad=transposed_grad)


def _bce(reduction, weighted):
    def fn(x, t, w):
        return F.binary_cross_entropy(x, t, w if weighted else None, reduction=reduction)
    return fn


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "channels_last", "sliced"])
@pytest.mark.parametrize("target_layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("weight", ["none", "same", "broadcast"])
def test_binary_cross_entropy_takes_the_inputs_layout(layout, target_layout, weight):
    """binary_cross_entropy_cpu and its backward allocate `at::empty_like(input)`: the
    input's layout whatever the target's, the weight's or the incoming gradient's
    (neuron followed TensorIterator's vote of all of them, or the gradient's)."""
    x = _layouts(torch.rand(2, 4, 3, 5) * 0.8 + 0.1)[layout]
    t = _layouts(torch.rand(2, 4, 3, 5))[target_layout]
    w = {"none": torch.rand(5), "same": torch.rand(2, 4, 3, 5).mT.contiguous().mT, "broadcast": torch.rand(5)}[weight]
    fn = _bce("none", weight != "none")
    _same_strides(fn, x, t, w)
    for reduction in ("none", "mean", "sum"):
        loss = _bce(reduction, weight != "none")

        def input_only(leaf):  # the gradient of the input alone, target and weight laid out as on CPU
            def moved(a):
                return a if leaf.device.type == "cpu" else _on_neuron(a)
            return loss(leaf, moved(t), moved(w))

        for transposed_grad in (False, True):
            _same_grads(input_only, x, transposed_grad=transposed_grad)
