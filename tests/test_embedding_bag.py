"""aten::_embedding_bag and its backward ops, native on `neuron`, against CPU PyTorch:
every mode, per-sample weights, include_last_offset, padding_idx, empty bags, the
forward's bookkeeping outputs (offset2bag, bag_size, max_indices) and gradients, and
CPU's errors for bad indices and offsets."""
import pytest
import torch
import torch.nn.functional as F

from helpers import assert_same, check_like_cpu, no_fallback, to_neuron

# Bags [1, 2, 4, 5], [], [4, 3], [2, 9, 4, 4]: an empty bag and repeated rows.
INDICES = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 4, 4])
OFFSETS = torch.tensor([0, 4, 4, 6])


def _run(fn, weight, psw=None):
    """fn(weight, psw) and the gradients of weight (and psw) on CPU and on neuron."""
    results = []
    for device in ("cpu", "neuron"):
        w = weight.detach().to(device).requires_grad_(True)
        p = None if psw is None else psw.detach().to(device).requires_grad_(True)
        with no_fallback():
            out = fn(w, p)
            (out * torch.arange(out.numel(), device=device).reshape(out.shape).to(out.dtype)).sum().backward()
        results.append((out, w.grad) + (() if p is None else (p.grad,)))
    (cpu, neuron) = results
    assert_same(neuron, tuple(t.detach() for t in cpu))


# The default run keeps padding_idx without include_last_offset per mode; --runslow all.
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [pytest.param(None, marks=pytest.mark.slow), 4])
@pytest.mark.parametrize("include_last_offset", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_embedding_bag_forward_and_backward(mode, padding_idx, include_last_offset):
    offsets = torch.cat([OFFSETS, torch.tensor([8])]) if include_last_offset else OFFSETS
    weight = torch.randn(10, 3, dtype=torch.float64)
    _run(lambda w, _: F.embedding_bag(to_dev(INDICES, w), w, to_dev(offsets, w), mode=mode, padding_idx=padding_idx,
                                      include_last_offset=include_last_offset), weight)


def to_dev(t, like):
    return t.to(like.device)


@pytest.mark.slow
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag_per_sample_weights(padding_idx):
    weight = torch.randn(10, 3, dtype=torch.float64)
    psw = torch.randn(INDICES.numel(), dtype=torch.float64)
    _run(lambda w, p: F.embedding_bag(to_dev(INDICES, w), w, to_dev(OFFSETS, w), mode="sum",
                                      per_sample_weights=p, padding_idx=padding_idx), weight, psw)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_scale_grad_by_freq_and_2d_input(mode):
    weight = torch.randn(6, 4)
    indices = torch.tensor([[0, 2, 2], [5, 0, 0]], dtype=torch.int32)
    _run(lambda w, _: F.embedding_bag(to_dev(indices, w), w, mode=mode, scale_grad_by_freq=True), weight)


@pytest.mark.slow
def test_embedding_bag_max_keeps_the_first_maximum_and_a_leading_nan():
    weight = torch.tensor([[1.0, float("nan")], [1.0, 2.0], [float("nan"), 3.0], [0.5, 0.5]])
    indices = torch.tensor([0, 1, 3, 2, 1])
    offsets = torch.tensor([0, 3])
    for device in ("cpu", "neuron"):
        out = torch.ops.aten._embedding_bag(weight.to(device), indices.to(device), offsets.to(device), False, 2)
        if device == "cpu":
            expected = out
    assert_same(out, expected)


@pytest.mark.parametrize("mode", [pytest.param(1, marks=pytest.mark.slow), 2])
def test_embedding_bag_bookkeeping_outputs_match_cpu(mode):
    """offset2bag, bag_size and max_indices, which the backward reads, equal CPU's."""
    weight = torch.randn(10, 3)
    for device in ("cpu", "neuron"):
        with no_fallback():
            out = torch.ops.aten._embedding_bag(weight.to(device), INDICES.to(device), OFFSETS.to(device), False,
                                                mode, False, None, False, 4)
        if device == "cpu":
            expected = out
    assert_same(out, expected)


@pytest.mark.parametrize("op", [torch.ops.aten._embedding_bag, torch.ops.aten._embedding_bag_forward_only],
                         ids=["embedding_bag", "forward_only"])
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("dtype,padding_idx", [(torch.float32, -1), (torch.bfloat16, -1), (torch.float64, -1),
                                               (torch.float32, 4)])
def test_embedding_bag_all_four_outputs_match_cpu(op, mode, include_last_offset, dtype, padding_idx):
    """Every output of _embedding_bag and _embedding_bag_forward_only, shapes included:
    CPU returns bag_size again as the mean's max_indices (neuron gave zeros), sizes the
    forward-only sum's bag_size (and so its max_indices) by offsets and its other modes'
    by bags, and skips offset2bag for a bfloat16 sum as for float32. With
    include_last_offset and a last offset short of the input (8 of 10 here), CPU's fast
    path (float32/float16/bfloat16 weight, no padding_idx) leaves the indices past it out
    of the sum and mean bags, while its mean still divides by the size counted to the
    input's end; its other paths (float64, a padding_idx) and max keep them in the last
    bag. neuron kept them everywhere."""
    offsets = torch.cat([OFFSETS, torch.tensor([8])]) if include_last_offset else OFFSETS
    weight = torch.randn(10, 3).to(dtype)
    outs = []
    for device in ("cpu", "neuron"):
        with no_fallback():
            outs.append(op(weight.to(device), INDICES.to(device), offsets.to(device), False, mode, False, None,
                           include_last_offset, padding_idx))
    expected, actual = outs
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, e.shape)
    assert_same(actual, expected)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_of_no_indices(mode):
    weight = torch.randn(5, 2)
    _run(lambda w, _: F.embedding_bag(torch.zeros(0, dtype=torch.long, device=w.device), w,
                                      torch.tensor([0, 0, 0], device=w.device), mode=mode), weight)


@pytest.mark.slow
def test_embedding_bag_noncontiguous_weight():
    weight = torch.randn(3, 10).t()
    _run(lambda w, _: F.embedding_bag(to_dev(INDICES, w), w, to_dev(OFFSETS, w), mode="mean"), weight)


@pytest.mark.parametrize("mode", ["sum", pytest.param("max", marks=pytest.mark.slow)])
@pytest.mark.parametrize("indices,offsets", [([1, 10], [0]), ([-1, 2], [0]), ([1, 2], [1]),
                                             pytest.param([1, 2], [0, 3], marks=pytest.mark.slow)])
def test_embedding_bag_bad_input_raises_like_cpu(mode, indices, offsets):
    weight = torch.randn(10, 3)
    check_like_cpu(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode), weight, torch.tensor(indices),
                   torch.tensor(offsets))


@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.int64])
def test_max_mode_with_a_last_offset_is_probed_with_real_shapes(weight_dtype):
    """The dtype probe ran CPU's kernel on one-element stand-ins: offsets shrunk to one
    element with include_last_offset make zero bags, which CPU's max mode reads out of
    bounds (the process crashed). Real-shape stand-ins still find CPU's refusal of an
    integer weight."""
    weight = (torch.arange(50) % 7).reshape(5, 10).to(weight_dtype)[:, ::2]  # non-contiguous
    indices, offsets = torch.tensor([0, 2, 1, 4, 3, 3]), torch.tensor([0, 2, 4])
    check_like_cpu(lambda w, i, o: F.embedding_bag(i, w, o, mode="max", include_last_offset=True),
                   weight, indices, offsets)
