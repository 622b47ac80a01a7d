"""Autocast on `neuron` (CUDA's op policy) and GradScaler, against CPU references."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import no_fallback, to_cpu, to_neuron

BF16 = torch.bfloat16


def test_autocast_available_and_default_dtype():
    assert torch.amp.is_autocast_available("neuron")
    # bfloat16 by default (CUDA's is float16): see the README's Autocast paragraph.
    assert torch.get_autocast_dtype("neuron") == BF16
    with torch.autocast("neuron"):
        assert torch.is_autocast_enabled("neuron")
        assert not torch.is_autocast_enabled("cpu")


_GEN = torch.Generator().manual_seed(0)  # the cases' inputs are made at collection


def _r(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=_GEN).to(dtype)


# (name, fn, inputs (CPU), dtype autocast runs the op in). The expectation is the op run
# on CPU, outside autocast, on the inputs cast to that dtype: that is the whole contract
# of CUDA's policy lists. Inputs of fp32-policy ops come in bfloat16, as they do after a
# lower-precision op.
CASES = [
    # lower_precision_fp: run in bfloat16
    ("matmul", lambda a, b: a @ b, (_r(4, 8), _r(8, 5)), BF16),
    ("mm", torch.mm, (_r(4, 8), _r(8, 5)), BF16),
    ("bmm", torch.bmm, (_r(2, 4, 8), _r(2, 8, 5)), BF16),
    ("addmm", torch.addmm, (_r(4, 5), _r(4, 8), _r(8, 5)), BF16),
    ("baddbmm", torch.baddbmm, (_r(2, 4, 5), _r(2, 4, 8), _r(2, 8, 5)), BF16),
    ("addbmm", torch.addbmm, (_r(4, 5), _r(2, 4, 8), _r(2, 8, 5)), BF16),
    ("linear", F.linear, (_r(4, 8), _r(5, 8), _r(5)), BF16),
    ("conv1d", F.conv1d, (_r(2, 3, 10), _r(4, 3, 3), _r(4)), BF16),
    ("conv2d", F.conv2d, (_r(2, 3, 6, 6), _r(4, 3, 3, 3), _r(4)), BF16),
    ("conv_transpose2d", F.conv_transpose2d, (_r(2, 3, 5, 5), _r(3, 4, 3, 3)), BF16),
    ("prelu", F.prelu, (_r(2, 3, 4), _r(3)), BF16),
    ("einsum", lambda a, b: torch.einsum("ij,jk->ik", a, b), (_r(4, 8), _r(8, 5)), BF16),
    ("multi_dot", lambda a, b, c: torch.linalg.multi_dot([a, b, c]), (_r(3, 4), _r(4, 5), _r(5, 2)), BF16),
    ("sdpa", F.scaled_dot_product_attention, (_r(1, 2, 4, 8), _r(1, 2, 4, 8), _r(1, 2, 4, 8)), BF16),
    # fp32 (and fp32_set_opt_dtype, fp32_append_dtype): run in float32
    ("softmax", lambda x: torch.softmax(x, -1), (_r(4, 8, dtype=BF16),), torch.float32),
    ("log_softmax", lambda x: F.log_softmax(x, -1), (_r(4, 8, dtype=BF16),), torch.float32),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (8,), w, b), (_r(4, 8, dtype=BF16), _r(8), _r(8)), torch.float32),
    ("group_norm", lambda x: F.group_norm(x, 2), (_r(2, 4, 3, dtype=BF16),), torch.float32),
    ("sum", torch.sum, (_r(4, 8, dtype=BF16),), torch.float32),
    ("sum_dim", lambda x: x.sum(1), (_r(4, 8, dtype=BF16),), torch.float32),
    ("prod", lambda x: x.prod(1), (_r(4, 3, dtype=BF16),), torch.float32),
    ("cumsum", lambda x: x.cumsum(1), (_r(4, 8, dtype=BF16),), torch.float32),
    ("exp", torch.exp, (_r(4, 8, dtype=BF16),), torch.float32),
    ("log", torch.log, ((torch.rand(4, 8, generator=_GEN) + 0.5).to(BF16),), torch.float32),
    ("pow", lambda x: torch.pow(x, 2), (_r(4, 8, dtype=BF16),), torch.float32),
    ("norm", lambda x: x.norm(), (_r(4, 8, dtype=BF16),), torch.float32),
    ("vector_norm", torch.linalg.vector_norm, (_r(4, 8, dtype=BF16),), torch.float32),
    ("mse_loss", F.mse_loss, (_r(4, 8, dtype=BF16), _r(4, 8, dtype=BF16)), torch.float32),
    ("cross_entropy", lambda x, t: F.cross_entropy(x, t), (_r(4, 5, dtype=BF16), torch.tensor([0, 3, 4, 1])),
     torch.float32),
    ("nll_loss", lambda x, t: F.nll_loss(x, t), (_r(4, 5, dtype=BF16), torch.tensor([0, 3, 4, 1])), torch.float32),
    ("bce_with_logits", F.binary_cross_entropy_with_logits,
     (_r(4, 3, dtype=BF16), torch.rand(4, 3, generator=_GEN).to(BF16)), torch.float32),
]


@pytest.mark.parametrize("name,fn,inputs,dtype", CASES, ids=[c[0] for c in CASES])
def test_op_policy(name, fn, inputs, dtype):
    expected = fn(*[x.to(dtype) if x.is_floating_point() else x for x in inputs])
    assert expected.dtype == dtype
    with no_fallback(), torch.autocast("neuron", dtype=BF16):
        actual = fn(*to_neuron(inputs))
    assert actual.dtype == dtype, (name, actual.dtype)
    tol = 1e-2 if dtype == BF16 else 1e-5
    torch.testing.assert_close(to_cpu(actual), expected, atol=tol, rtol=tol)


def test_promote_and_fallthrough_ops():
    a, b = _r(3, 4, dtype=BF16), _r(3, 4)
    na, nb = to_neuron((a, b))
    with no_fallback(), torch.autocast("neuron", dtype=BF16):
        # promote: the widest floating type among the inputs
        assert torch.cat([na, nb]).dtype == torch.float32
        assert torch.stack([na, nb]).dtype == torch.float32
        out = torch.addcmul(nb, na, na)
        assert out.dtype == torch.float32
        torch.testing.assert_close(out.cpu(), torch.addcmul(b, a.float(), a.float()))
        out = torch.atan2(na, nb)
        assert out.dtype == torch.float32
        torch.testing.assert_close(out.cpu(), torch.atan2(a.float(), b))
        idx = torch.tensor([0, 2], device="neuron")
        assert torch.index_put(nb, (idx,), na[:2]).dtype == torch.float32
        # ops on no list run in the dtypes they get
        assert torch.relu(na).dtype == BF16
        assert (nb + 1).dtype == torch.float32
    # float16 on request
    with torch.autocast("neuron", dtype=torch.float16):
        assert (nb @ nb.t()).dtype == torch.float16
    # outside autocast nothing is cast
    assert (nb @ nb.t()).dtype == torch.float32


def test_binary_cross_entropy_refused_like_cuda():
    x = torch.rand(4, device="neuron")
    with torch.autocast("neuron"):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(x, x)


def test_autocast_backward_grads_in_param_dtype():
    lin = nn.Linear(8, 4).to("neuron")
    x = torch.randn(3, 8, device="neuron")
    with no_fallback():
        with torch.autocast("neuron"):
            y = lin(x)
            loss = y.float().square().mean()
        loss.backward()
    assert y.dtype == BF16
    assert lin.weight.grad.dtype == torch.float32
    # the same in fp32 math on CPU: within bfloat16's precision
    ref = nn.Linear(8, 4)
    ref.load_state_dict({k: v.cpu() for k, v in lin.state_dict().items()})
    ref(x.cpu()).square().mean().backward()
    torch.testing.assert_close(lin.weight.grad.cpu(), ref.weight.grad, atol=3e-2, rtol=3e-2)


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 4))


def test_bf16_autocast_training_tracks_fp32():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 16, generator=g), torch.randint(0, 4, (64,), generator=g)
    losses = {}
    for amp in (False, True):
        model = _mlp().to("neuron")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        xs, ys = x.to("neuron"), y.to("neuron")
        run = []
        with no_fallback():
            for _ in range(20):
                with torch.autocast("neuron", enabled=amp):
                    loss = F.cross_entropy(model(xs), ys)
                assert loss.dtype == torch.float32
                opt.zero_grad()
                loss.backward()
                opt.step()
                run.append(loss.item())
        losses[amp] = torch.tensor(run)
    assert losses[False][-1] < 0.6 * losses[False][0]  # it trains
    torch.testing.assert_close(losses[True], losses[False], atol=5e-2, rtol=5e-2)


def _scaler_run(device, inf_steps=(2,)):
    """Six fp16-autocast SGD steps with a GradScaler; an inf written into a gradient at
    `inf_steps`. Returns per-step (scale, growth tracker) and the final parameters."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 16, growth_interval=2)
    g = torch.Generator().manual_seed(1)
    history = []
    for step in range(6):
        x = torch.randn(4, 8, generator=g).to(device)
        with torch.autocast(device, dtype=torch.float16):
            loss = model(x).float().square().mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        if step in inf_steps:
            model[0].weight.grad[0, 0] = float("inf")
        before = [p.detach().cpu().clone() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        skipped = all(torch.equal(b, p.detach().cpu()) for b, p in zip(before, model.parameters()))
        history.append((scaler.get_scale(), int(scaler._growth_tracker.item()), skipped))
    return history, [p.detach().cpu() for p in model.parameters()]


def test_grad_scaler_fp16_matches_cpu():
    with no_fallback():
        hist, params = _scaler_run("neuron")
    ref_hist, ref_params = _scaler_run("cpu")
    assert hist == ref_hist
    # step 2 had an inf gradient: skipped, the scale halved and the tracker reset
    assert hist[2] == (hist[1][0] / 2, 0, True)
    assert not any(skipped for *_, skipped in hist[:2] + hist[3:])
    for p, r in zip(params, ref_params):
        torch.testing.assert_close(p, r, atol=2e-3, rtol=2e-3)


def test_grad_scaler_unscale_and_nan():
    grads = [torch.tensor([2.0, 4.0]), torch.tensor([1.0, float("nan")], dtype=torch.float16)]
    for ng in (grads[:1], grads):
        found = torch.zeros((), device="neuron")
        dev = to_neuron(ng)
        with no_fallback():
            torch._amp_foreach_non_finite_check_and_unscale_(dev, found, torch.tensor(0.5, device="neuron"))
        ref, ref_found = [t.clone() for t in ng], torch.zeros(())
        torch._amp_foreach_non_finite_check_and_unscale_(ref, ref_found, torch.tensor(0.5))
        assert found.item() == ref_found.item() == (len(ng) == 2)
        for d, r in zip(dev, ref):
            torch.testing.assert_close(d.cpu(), r, equal_nan=True)


@pytest.mark.parametrize("found,tracker", [(0.0, 0), (0.0, 2), (1.0, 2)])
def test_update_scale_matches_cpu(found, tracker):
    scale, tr = torch.tensor([3.0e38]), torch.tensor([tracker], dtype=torch.int32)
    ns, ntr = to_neuron((scale, tr))
    with no_fallback():
        torch._amp_update_scale_(ns, ntr, torch.tensor([found], device="neuron"), 2.0, 0.5, 3)
    torch._amp_update_scale_(scale, tr, torch.tensor([found]), 2.0, 0.5, 3)
    # (0, 2): a growth step whose grown scale overflows float32 keeps the scale
    assert ns.cpu().item() == scale.item() and ntr.cpu().item() == tr.item()


def test_compiled_forward_under_autocast():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 8),
                          nn.LayerNorm(8)).to("neuron")
    x = torch.randn(2, 3, 6, 6, device="neuron")

    def fwd(inp):
        h = model[:4](inp)
        return h, model[4](h), torch.softmax(h, -1)

    compiled = torch.compile(fwd, backend="neuron")
    with torch.autocast("neuron"):
        eager = fwd(x)
        with no_fallback():
            got = compiled(x)
    assert [t.dtype for t in eager] == [BF16, torch.float32, torch.float32]
    assert [t.dtype for t in got] == [t.dtype for t in eager]
    for g, e in zip(got, eager):
        torch.testing.assert_close(g.cpu(), e.cpu(), atol=1e-2, rtol=1e-2)


def test_autocast_inside_compiled_function():
    lin = nn.Linear(8, 8).to("neuron")

    def fwd(x):
        with torch.autocast("neuron", dtype=BF16):
            return lin(x), torch.log_softmax(lin(x), -1)

    x = torch.randn(4, 8, device="neuron")
    with no_fallback():
        got = torch.compile(fwd, backend="neuron")(x)
    eager = fwd(x)
    assert [t.dtype for t in got] == [BF16, torch.float32]
    for g, e in zip(got, eager):
        torch.testing.assert_close(g.cpu(), e.cpu(), atol=1e-2, rtol=1e-2)


def test_grad_scaler_kernels_compiled():
    def step(grads, found, inv, scale, tracker):
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
        torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 2)

    def make():
        grads = [torch.tensor([2.0, float("inf")]), torch.tensor([1.0, 2.0], dtype=torch.float16)]
        return [grads, torch.zeros(()), torch.tensor(0.5), torch.tensor([8.0]), torch.tensor([1], dtype=torch.int32)]

    ref, dev = make(), to_neuron(make())
    step(*ref)
    with no_fallback():
        torch.compile(step, backend="neuron")(*dev)
    for d, r in zip(dev, ref):
        for dt, rt in zip(d if isinstance(d, list) else [d], r if isinstance(r, list) else [r]):
            torch.testing.assert_close(dt.cpu(), rt)
