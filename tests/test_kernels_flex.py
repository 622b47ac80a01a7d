"""torch.nn.attention.flex_attention under torch.compile(backend="neuron") against the
same attention written in plain PyTorch on CPU (flex_attention has no CPU backward):
score_mod with a captured, differentiated bias table, block masks from mask_mod,
grouped-query heads, odd lengths and head dims; forward and gradients."""
import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from helpers import no_fallback


def _reference(q, k, v, bias, mask, scale):
    """softmax(q k^T * scale + bias[h, |i - j| % n], masked) v, expanding grouped heads."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    L, S = q.shape[-2], k.shape[-2]
    i, j = torch.arange(L)[:, None], torch.arange(S)[None]
    s = q @ k.transpose(-1, -2) * scale
    if bias is not None:
        s = s + bias[:, (i - j).abs() % bias.shape[1]]
    if mask is not None:
        s = s.masked_fill(~mask(i, j), -float("inf"))
    return torch.softmax(s, -1) @ v


def _causal(i, j):
    return i >= j


def _window(i, j):
    return (i - j).abs() <= 2


@pytest.mark.parametrize("L,S,E,H,Hk,use_bias,mask", [
    (9, 9, 16, 4, 4, True, _causal),
    (7, 11, 12, 2, 2, False, _window),
    (5, 5, 8, 4, 2, True, None),  # grouped-query heads
])
def test_flex_attention_compiled_matches_cpu(L, S, E, H, Hk, use_bias, mask):
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, H, L, E, generator=g), torch.randn(2, Hk, S, E, generator=g), \
        torch.randn(2, Hk, S, E, generator=g)
    bias = torch.randn(H, 5, generator=g) if use_bias else None
    cpu = [t.clone().requires_grad_() for t in (q, k, v)] + ([bias.clone().requires_grad_()] if use_bias else [])
    expected = _reference(*cpu[:3], cpu[3] if use_bias else None, mask, 0.3)
    cot = torch.randn(expected.shape, generator=g)
    expected.backward(cot)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + bias_n[h, (q_idx - kv_idx).abs() % 5]

    dev = [t.detach().to("neuron").requires_grad_() for t in cpu]
    bias_n = dev[3] if use_bias else None
    block_mask = None
    if mask is not None:
        block_mask = create_block_mask(lambda b, h, i, j: mask(i, j), None, None, L, S, device="neuron")

    def run(q, k, v):
        return flex_attention(q, k, v, score_mod=score_mod if use_bias else None, block_mask=block_mask, scale=0.3,
                              enable_gqa=H != Hk)

    with no_fallback():
        out = torch.compile(run, backend="neuron", fullgraph=True)(*dev[:3])
        out.backward(cot.to("neuron"))
    torch.testing.assert_close(out.detach().cpu(), expected.detach(), atol=1e-5, rtol=1e-5)
    for d, c in zip(dev, cpu):
        torch.testing.assert_close(d.grad.cpu(), c.grad, atol=1e-5, rtol=1e-5)
