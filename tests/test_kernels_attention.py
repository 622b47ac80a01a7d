"""The blocked attention kernel against PyTorch CPU: F.scaled_dot_product_attention on
`neuron` (forward and gradients) over masks, GQA, odd lengths and head dims, and the
kernel itself with tiny blocks so that every case spans several key blocks."""
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers import check, check_like_cpu, no_fallback, to_neuron
from torchneuron.eager import install
from torchneuron.kernels import attention

TOL = dict(atol=2e-5, rtol=2e-4)


def grads(fn, n_diff):
    """fn(*args) -> (out, grads of the first n_diff args) under a fixed cotangent."""
    def run(*args):
        args = [a.detach().requires_grad_() if i < n_diff else a for i, a in enumerate(args)]
        out = fn(*args)
        cot = torch.linspace(-1, 1, out.numel()).sin().reshape(out.shape).to(out.device, out.dtype)
        out.backward(cot)
        return out, [a.grad for a in args[:n_diff]]

    return run


def _case(kind, L, S, E, Ev=None, H=2, Hk=2, B=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, E, generator=g)
    k = torch.randn(B, Hk, S, E, generator=g)
    v = torch.randn(B, Hk, S, Ev or E, generator=g)
    mask, kw = None, {}
    if kind == "causal":
        kw = dict(is_causal=True)
    elif kind == "bool":
        mask = torch.rand(L, S, generator=g) > 0.5
        mask[min(1, L - 1)] = False  # a fully masked row: zeros, as CPU's safe softmax
    elif kind == "additive":
        mask, kw = torch.randn(B, 1, L, S, generator=g), dict(scale=0.37)
    elif kind == "gqa":
        kw = dict(enable_gqa=True)
    return q, k, v, mask, kw


def _sdpa_runs():
    return install.KERNELS[torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default].cache


@pytest.mark.parametrize("kind,L,S,E,Ev,H,Hk", [
    ("none", 7, 13, 5, 3, 2, 2),
    ("causal", 9, 9, 12, None, 2, 2),
    ("causal", 5, 11, 8, None, 3, 3),  # L < S: top-left causal
    ("bool", 6, 10, 7, None, 2, 2),
    ("additive", 5, 9, 4, 6, 2, 2),
    ("gqa", 7, 5, 8, None, 4, 2),
    ("gqa", 3, 1037, 16, None, 2, 1),  # several 512-key blocks, ragged last block
    pytest.param("causal", 521, 521, 8, None, 1, 1, marks=pytest.mark.slow),
])
def test_sdpa_matches_cpu(kind, L, S, E, Ev, H, Hk):
    q, k, v, mask, kw = _case(kind, L, S, E, Ev, H, Hk, B=2 if S < 512 else 1)
    f = grads(lambda a, b, c, m: F.scaled_dot_product_attention(a, b, c, attn_mask=m, **kw), 3)
    before = len(_sdpa_runs())
    check(f, q, k, v, mask, **TOL)
    assert len(_sdpa_runs()) > before  # the kernel ran, not PyTorch's math path


def test_sdpa_additive_mask_gradient():
    q, k, v, mask, kw = _case("additive", 6, 11, 4)
    check(grads(lambda m, a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=m, **kw), 4),
          mask, q, k, v, **TOL)


def test_sdpa_3d_inputs_and_half():
    q, k, v = torch.randn(3, 5, 8), torch.randn(3, 7, 8), torch.randn(3, 7, 8)
    check(grads(F.scaled_dot_product_attention, 3), q, k, v, **TOL)
    check(grads(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), 3),
          q.bfloat16(), k.bfloat16(), v.bfloat16(), atol=3e-2, rtol=3e-2)


def test_multihead_attention_with_masks():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(12, 3, batch_first=True)
    x = torch.randn(2, 6, 12)
    attn_mask = torch.rand(6, 6) > 0.3
    attn_mask.fill_diagonal_(False)
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    mha_n = torch.nn.MultiheadAttention(12, 3, batch_first=True).to("neuron")
    mha_n.load_state_dict(mha.state_dict())
    for kw in (dict(attn_mask=attn_mask), dict(key_padding_mask=pad, attn_mask=torch.randn(6, 6))):
        out = mha(x, x, x, need_weights=False, **kw)[0]
        out.sum().backward()
        expected = [p.grad.clone() for p in mha.parameters()]
        mha.zero_grad()
        with no_fallback():
            got = mha_n(*to_neuron([x, x, x]), need_weights=False, **to_neuron(kw))[0]
            got.sum().backward()
        torch.testing.assert_close(got.cpu(), out.detach(), **TOL)
        for p, e in zip(mha_n.parameters(), expected):
            torch.testing.assert_close(p.grad.cpu(), e, **TOL)
        mha_n.zero_grad()


@pytest.mark.parametrize("kind", ["none", "causal", "bool", "additive", "gqa"])
def test_kernel_with_small_blocks_matches_torch(kind):
    """The JAX kernel with 4-key blocks (so 13 keys span 4 blocks, the last ragged)
    against torch's math SDPA on CPU, forward and all gradients."""
    q, k, v, mask, kw = _case(kind, 6, 13, 5, 3, H=4 if kind == "gqa" else 2, Hk=2)
    if mask is not None and mask.dtype == torch.bool:
        bias = torch.zeros(mask.shape).masked_fill(~mask, -float("inf"))
    else:
        bias = mask
    ts = [t.double().requires_grad_() for t in (q, k, v)]
    b = None if bias is None else bias.double().requires_grad_()
    ref = F.scaled_dot_product_attention(*ts, attn_mask=b, **kw)
    cot = torch.randn(ref.shape, dtype=torch.float64)
    ref.backward(cot)
    j = [jnp.asarray(t.detach().numpy()) for t in ts]
    jb = None if b is None else jnp.asarray(b.detach().numpy())
    out, lse = attention.forward(*j, jb, is_causal=kw.get("is_causal", False), scale=kw.get("scale"), block_k=4)
    np.testing.assert_allclose(np.asarray(out), ref.detach().numpy(), atol=1e-10)
    got = attention.backward(jnp.asarray(cot.numpy()), *j, jb, out, lse, is_causal=kw.get("is_causal", False),
                             scale=kw.get("scale"), bias_grad=b is not None, block_k=4)
    for g, t in zip(got, ts + [b]):
        if t is not None:
            np.testing.assert_allclose(np.asarray(g), t.grad.numpy(), atol=1e-10)


def test_dropout_mask_regenerated_per_block():
    """With v = I the output is the dropped-out probabilities; sum(y)'s gradient with
    respect to v equals their column sums only if the backward regenerated the mask
    of every key block (1100 keys: three blocks)."""
    torch.manual_seed(0)
    S = 1100
    q, k = torch.randn(1, 1, 4, 8).to("neuron"), torch.randn(1, 1, S, 8).to("neuron")
    v = torch.eye(S)[None, None].to("neuron").requires_grad_()
    y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    y.sum().backward()
    torch.testing.assert_close(v.grad[..., 0].cpu(), y.sum(-2).detach().cpu(), atol=1e-5, rtol=1e-5)
    kept = (y.cpu() != 0).float().mean().item()
    assert 0.6 < kept < 0.8, kept


@pytest.mark.parametrize("q_shape,k_shape,kw", [
    ((2, 2, 5, 8), (1, 2, 7, 8), {}),  # key batch broadcast
    ((1, 2, 5, 8), (2, 2, 7, 8), {}),  # query batch broadcast (math path)
    ((1, 2, 5, 8), (1, 2, 0, 8), {}),  # no keys
    ((1, 2, 0, 8), (1, 2, 7, 8), {}),  # no queries
    ((2, 4, 5, 8), (2, 1, 7, 8), {}),  # one key head broadcast
    ((2, 3, 5, 8), (2, 2, 7, 8), dict(enable_gqa=True)),  # not a multiple: CPU's error
    ((2, 4, 5, 8), (2, 2, 7, 8), {}),  # grouped heads without enable_gqa: CPU's error
])
def test_sdpa_edge_shapes_like_cpu(q_shape, k_shape, kw):
    def run(q, k, v):
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, **kw)
        out.backward(torch.ones_like(out))
        return out, q.grad, k.grad, v.grad

    check_like_cpu(run, torch.randn(q_shape), torch.randn(k_shape), torch.randn(k_shape), **TOL)


def test_sdpa_float64_gradients_are_float64_accurate():
    """float64 attention is exact to float64 rounding, forward and backward (the
    float32 logsumexp the op saves is not used for float64)."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 7, 5, generator=g, dtype=torch.float64) for _ in range(3))
    check(lambda a, b, c: torch.autograd.grad(
        F.scaled_dot_product_attention(a.requires_grad_(), b.requires_grad_(), c.requires_grad_(), is_causal=True
                                       ).square().sum(), (a, b, c)), q, k, v, atol=1e-12, rtol=1e-10)
