"""Grouped matmul for mixture-of-experts: `aten._grouped_mm` and transformers' custom ops
`transformers::grouped_mm_fallback(_backward)` on `neuron` against CPU, forward and
gradients, eager and compiled without a graph split. (test_kernels_moe.py covers every
layout and dtype of `_grouped_mm` in eager.)"""
import pytest
import torch

import torchneuron
from helpers import check, no_fallback, to_neuron
from torchneuron import metrics
from torchneuron.ops import registry

transformers_moe = pytest.importorskip("transformers.integrations.moe")
fallback_op = torch.ops.transformers.grouped_mm_fallback

# Uneven groups, two empty ones (one in the middle, one at the end) and rows past offs[-1].
OFFS = [3, 3, 8, 8]
ROWS, K, N = 10, 8, 8  # CPU's _grouped_mm wants 16-byte strides


def _inputs(dtype, offs_dtype=torch.int32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(ROWS, K, generator=g).to(dtype).requires_grad_()
    w = torch.randn(len(OFFS), K, N, generator=g).to(dtype).requires_grad_()
    cot = torch.randn(ROWS, N, generator=g).to(dtype)
    return x, w, torch.tensor(OFFS, dtype=offs_dtype), cot


def _loop_mm(x, w, offs):
    """The reference: one mm per group, zeros past offs[-1] (transformers' fallback)."""
    out, start = torch.zeros(x.shape[0], w.shape[2], dtype=x.dtype, device=x.device), 0
    for e, end in enumerate(offs.tolist()):
        out[start:end] = x[start:end] @ w[e]
        start = end
    return out


def _value_and_grads(fn):
    def run(x, w, offs, cot):
        x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
        out = fn(x, w, offs)
        out.backward(cot)
        return out, x.grad, w.grad
    return run


@pytest.fixture
def strict_compile(monkeypatch):
    """torch.compile(backend="neuron") that fails on a graph split: strict mode raises on
    ops left out of the graph (`_assert_whole_graphs` checks the counters too)."""
    torch._dynamo.reset()
    metrics.reset()
    monkeypatch.setattr(torchneuron.config, "STRICT", True)
    return lambda fn: torch.compile(fn, backend="neuron")


def _assert_whole_graphs():
    assert metrics.get("graph_partitions") == 0
    assert metrics.get("graphs_compiled") >= 2  # forward and backward


@pytest.mark.parametrize("compiled", [False, True])
def test_aten_grouped_mm_matches_loop_of_mm(compiled, request):
    # CPU's _grouped_mm leaves rows past offs[-1] unspecified; the loop of mm pins them to
    # zeros, which the lowering promises.
    compile_ = request.getfixturevalue("strict_compile") if compiled else (lambda fn: fn)
    x, w, offs, cot = _inputs(torch.float32)
    expected = _value_and_grads(_loop_mm)(x, w, offs, cot)
    covered = slice(0, OFFS[-1])
    cpu = _value_and_grads(torch._grouped_mm)(x, w, offs, cot)
    for got, want in zip(cpu, expected):  # the oracle agrees with CPU where CPU is defined
        torch.testing.assert_close(got[covered], want[covered])
    with no_fallback():
        actual = _value_and_grads(compile_(torch._grouped_mm))(*to_neuron((x, w, offs, cot)))
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    if compiled:
        _assert_whole_graphs()


@pytest.mark.parametrize("dtype,offs_dtype", [(torch.float32, torch.int32), (torch.float32, torch.int64),
                                              (torch.bfloat16, torch.int64), (torch.float64, torch.int32)])
def test_transformers_fallback_compiled_without_split(strict_compile, dtype, offs_dtype):
    tol = 2e-2 if dtype == torch.bfloat16 else None
    run = _value_and_grads(strict_compile(lambda x, w, offs: fallback_op(x, w, offs)))
    expected = _value_and_grads(fallback_op)(*_inputs(dtype, offs_dtype))
    with no_fallback():
        actual = run(*to_neuron(_inputs(dtype, offs_dtype)))
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got.cpu(), want, atol=tol, rtol=tol)
    _assert_whole_graphs()


def test_transformers_fallback_eager_runs_its_own_implementation():
    # The by-name lowerings are compile-only: eager runs the op's Python loop of mm.
    check(_value_and_grads(fallback_op), *_inputs(torch.float32), atol=1e-5, rtol=1e-5)
    assert torch.ops.transformers.grouped_mm_fallback.default in registry.LOWERINGS
    assert not registry.LOWERINGS[torch.ops.transformers.grouped_mm_fallback.default].eager


def test_lowering_by_name_resolves_an_op_defined_later():
    name = "tnx_grouped_mm_test::twice"
    registry.lowering(name)(lambda x: x * 2)
    lib = torch.library.Library("tnx_grouped_mm_test", "DEF")
    try:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")
        op = torch.ops.tnx_grouped_mm_test.twice.default
        assert op in registry.LOWERINGS and registry.LOWERINGS.get(op).fn(3) == 6
        assert torch.ops.aten.sin.default in registry.LOWERINGS
        assert registry.LOWERINGS.get(torch.ops.tnx_grouped_mm_test.twice) is None  # a packet is not an overload
    finally:
        lib._destroy()
        del registry.BY_NAME[name]
