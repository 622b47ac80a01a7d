"""Grouped matmul (`torch._grouped_mm`) and the mixture-of-experts example on `neuron`
against PyTorch CPU, forward and gradients, eager and compiled."""
import copy
import sys
from pathlib import Path

import pytest
import torch

from helpers import check, check_like_cpu, no_fallback, to_neuron

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from examples.moe.moe import MoE  # noqa: E402

OFFS = torch.tensor([3, 3, 8], dtype=torch.int32)  # an empty group, and 2 rows past the last


def _grads(a, b, offs, rows):
    """(out, grad a, grad b) of _grouped_mm, restricted to the rows the groups cover
    (CPU leaves the others unspecified)."""
    a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
    out = torch._grouped_mm(a, b, offs)
    cot = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(out.device)
    out.backward(cot if rows is None else cot.index_fill(0, torch.arange(rows, out.shape[0]).to(out.device), 0))
    cut = slice(None) if rows is None else slice(0, rows)
    return out[cut], a.grad[cut], b.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["2d_3d", "2d_2d", "3d_2d", "3d_3d"])
def test_grouped_mm_matches_cpu(layout, dtype):
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    offs_k = torch.tensor([4, 4, 12], dtype=torch.int32)
    a, b, offs, rows = {
        "2d_3d": (r(10, 8), r(3, 8, 4), OFFS, 8),
        "2d_2d": (r(4, 12), r(12, 4), offs_k, None),
        "3d_2d": (r(3, 8, 4), r(4, 12), offs_k, None),
        "3d_3d": (r(3, 5, 8), r(3, 8, 4), None, None),
    }[layout]
    tol = 1e-5
    if dtype == torch.bfloat16:  # CPU's 16-bit kernels want 16-byte strides
        a, b, offs, rows = {
            "2d_3d": (r(10, 8), r(3, 8, 8), OFFS, 8),
            "2d_2d": (r(8, 16), r(16, 8), torch.tensor([8, 8, 16], dtype=torch.int32), None),
            "3d_2d": (r(3, 8, 16), r(16, 24), torch.tensor([8, 8, 24], dtype=torch.int32), None),
            "3d_3d": (r(3, 8, 16), r(3, 16, 8), None, None),
        }[layout]
        tol = 2e-2
    check(_grads, a.to(dtype), b.to(dtype), offs, rows, atol=tol, rtol=tol)


def test_grouped_mm_bfloat16_and_errors():
    a, b = torch.randn(16, 8), torch.randn(2, 8, 8)
    offs = torch.tensor([5, 16], dtype=torch.int32)
    check(lambda x, y, o: torch._grouped_mm(x, y, o), a.bfloat16(), b.bfloat16(), offs, atol=2e-2, rtol=2e-2)
    check_like_cpu(lambda x, y, o: torch._grouped_mm(x, y, o), a, b, offs.long())
    check_like_cpu(lambda x, y, o: torch._grouped_mm(x, y, o), a.double(), b.double(), offs)
    check_like_cpu(lambda x, y: torch._grouped_mm(x, y), a, b)


@pytest.mark.parametrize("compiled", [False, True])
def test_moe_layer_matches_cpu(compiled):
    torch.manual_seed(0)
    moe = MoE(16, 32, n_experts=4, top_k=2)
    moe_n = copy.deepcopy(moe).to("neuron")
    x = torch.randn(2, 9, 16)
    out = moe(x)
    out.backward(torch.ones_like(out))
    run = torch.compile(moe_n, backend="neuron") if compiled else moe_n
    with no_fallback():
        got = run(to_neuron(x))
        got.backward(torch.ones_like(got))
    torch.testing.assert_close(got.detach().cpu(), out.detach(), atol=1e-5, rtol=1e-5)
    for (name, p), pn in zip(moe.named_parameters(), moe_n.parameters()):
        torch.testing.assert_close(pn.grad.cpu(), p.grad, atol=1e-5, rtol=1e-5, msg=name)


def test_empty_and_assert_async_lower():
    """The MoE graph's decompositions emit empty_permuted and _assert_async.msg: both
    run in the compiled graph (no split, no fallback), and the assertion raises as CPU's."""
    f = torch.compile(lambda i, x: torch.zeros_like(x).index_add(0, i, x) + torch.nn.functional.one_hot(i, 5).sum(),
                      backend="neuron", fullgraph=True)
    i, x = torch.tensor([0, 2, 0]), torch.randn(3, 4).t().contiguous().t()
    with no_fallback():
        got = f(*to_neuron([i, x]))
    torch.testing.assert_close(got.cpu(), torch.zeros_like(x).index_add(0, i, x) + 3)
    torch._assert_async(torch.tensor(1, device="neuron"), "fine")
    with pytest.raises(RuntimeError, match="boom"):
        torch._assert_async(torch.tensor(0, device="neuron"), "boom")
        torch.neuron.synchronize()
