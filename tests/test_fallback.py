"""The CPU fallback: runs ops with no lowering, warns once, counts, strict mode raises."""
import warnings

import pytest
import torch

import torchneuron
from torchneuron import config
from torchneuron.ops import fallback

from helpers import check

_lib = torch.library.Library("tnx_test", "DEF")
_lib.define("twice(Tensor x) -> Tensor")
_lib.define("halve_(Tensor(a!) x) -> Tensor(a!)")
_lib.impl("twice", lambda x: x * 2, "CPU")


def _halve_(x):
    x.div_(2)
    return x


_lib.impl("halve_", _halve_, "CPU")


def test_fallback_runs_warns_once_and_counts():
    x = torch.arange(4.0)
    before = torchneuron.fallback_ops().get("tnx_test.twice.default", 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.ops.tnx_test.twice(x.to("neuron"))
        out2 = torch.ops.tnx_test.twice(x.to("neuron"))
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), x * 2)
    torch.testing.assert_close(out2.cpu(), x * 2)
    msgs = [str(w.message) for w in caught if "tnx_test.twice" in str(w.message)]
    assert len(msgs) <= 1  # once per op per process (the first call may be in an earlier test)
    assert torchneuron.fallback_ops()["tnx_test.twice.default"] == before + 2


def test_fallback_writes_back_mutated_arguments_through_views():
    base = torch.arange(8.0).to("neuron")
    view = base[2:6]
    out = torch.ops.tnx_test.halve_(view)
    assert out is view
    expected = torch.arange(8.0)
    expected[2:6] /= 2
    torch.testing.assert_close(base.cpu(), expected)


def test_strict_mode_raises(monkeypatch):
    monkeypatch.setattr(config, "STRICT", True)
    with pytest.raises(NotImplementedError, match="TORCHNEURON_STRICT"):
        torch.ops.tnx_test.twice(torch.ones(2, device="neuron"))


def test_decomposition_preferred_over_cpu():
    # aten.lerp.Scalar etc. have lowerings; an op PyTorch decomposes must not count as fallback.
    decomposed = [op for op in fallback.decomposition_table if op.name().startswith("aten::")]
    assert decomposed  # PyTorch provides decompositions the fallback can use


def test_a_decomposition_cycle_through_other_ops_ends_on_the_cpu(monkeypatch):
    # A decomposition that reaches its own op again, through another op (as
    # special_bessel_j0.out did through a prim before it had a lowering): the inner call
    # runs on the CPU instead of recursing.
    twice = torch.ops.tnx_test.twice.default
    monkeypatch.setitem(fallback.decomposition_table, twice, lambda x: torch.ops.tnx_test.twice(x.clone()))
    before = torchneuron.fallback_ops().get("tnx_test.twice.default", 0)
    x = torch.arange(5.0)
    out = torch.ops.tnx_test.twice(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), x * 2)
    assert torchneuron.fallback_ops()["tnx_test.twice.default"] == before + 1


def test_every_meta_kernel_torchneuron_registers_stays_registered():
    # One library object holds them all (a garbage-collected Library unregisters its
    # kernels): the margin-loss, CTC and histogram backward metas answer on meta tensors.
    import gc

    gc.collect()
    x = torch.empty(5, 4, device="meta", dtype=torch.float64)
    target = torch.empty(5, device="meta", dtype=torch.long)
    assert torch.ops.aten.multi_margin_loss_backward(torch.empty((), device="meta", dtype=torch.float64), x, target,
                                                     1, 1.0).shape == x.shape
    assert torch.ops.aten.fractional_max_pool3d_backward.default._schema.name  # exists
    hist = torch.ops.aten.histogram.bin_ct(torch.empty(10, device="meta"), bins=4)
    assert hist[0].shape == (4,) and hist[1].shape == (5,)
