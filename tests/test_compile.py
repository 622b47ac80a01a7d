"""torch.compile(backend="neuron") against CPU eager."""
import copy
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchneuron
from torchneuron import metrics

from helpers import no_fallback


def _pair(model):
    """A CPU model and a neuron copy with identical parameters and buffers."""
    return model, copy.deepcopy(model).to("neuron")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self, p=0.0):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(p)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = nn.functional.max_pool2d(x, 2)
        return self.fc(self.drop(x.flatten(1)))


def test_backend_registered():
    assert "neuron" in torch._dynamo.list_backends()


def test_mlp_forward_backward_parity():
    torch.manual_seed(0)
    cpu, dev = _pair(MLP())
    compiled = torch.compile(dev, backend="neuron")
    x = torch.randn(8, 16)
    with no_fallback():
        out = compiled(x.to("neuron"))
        out.square().mean().backward()
    ref = cpu(x)
    ref.square().mean().backward()
    torch.testing.assert_close(out.cpu(), ref, atol=1e-5, rtol=1e-5)
    for p, q in zip(dev.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, atol=1e-5, rtol=1e-5)


def test_cnn_batchnorm_training_and_eval():
    torch.manual_seed(0)
    cpu, dev = _pair(CNN())
    compiled = torch.compile(dev, backend="neuron")
    x = torch.randn(4, 1, 8, 8)
    with no_fallback():
        out = compiled(x.to("neuron"))
        out.sum().backward()
    ref = cpu(x)
    ref.sum().backward()
    torch.testing.assert_close(out.cpu(), ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(dev.bn.running_mean.cpu(), cpu.bn.running_mean)
    torch.testing.assert_close(dev.bn.running_var.cpu(), cpu.bn.running_var)
    torch.testing.assert_close(dev.conv.weight.grad.cpu(), cpu.conv.weight.grad, atol=1e-4, rtol=1e-4)
    dev.eval()
    cpu.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x.to("neuron")).cpu(), cpu(x), atol=1e-4, rtol=1e-4)


def test_dropout_reproducible_under_manual_seed():
    dev = CNN(p=0.5).to("neuron")
    compiled = torch.compile(dev, backend="neuron")
    x = torch.randn(4, 1, 8, 8, device="neuron")
    torch.manual_seed(123)
    a = compiled(x).cpu()
    b = compiled(x).cpu()
    torch.manual_seed(123)
    c = compiled(x).cpu()
    assert torch.equal(a, c)
    assert not torch.equal(a, b)


@pytest.mark.parametrize("compile_optimizer", [False, True])
def test_training_loop_matches_cpu(compile_optimizer):
    torch.manual_seed(0)
    cpu, dev = _pair(MLP())
    opt_c = torch.optim.AdamW(cpu.parameters(), lr=1e-2)
    opt_d = torch.optim.AdamW(dev.parameters(), lr=1e-2)
    compiled = torch.compile(dev, backend="neuron")
    step_d = torch.compile(opt_d.step, backend="neuron") if compile_optimizer else opt_d.step
    data = [(torch.randn(8, 16), torch.randn(8, 4)) for _ in range(30)]
    for x, y in data:
        opt_c.zero_grad()
        loss_c = nn.functional.mse_loss(cpu(x), y)
        loss_c.backward()
        opt_c.step()
        opt_d.zero_grad()
        loss_d = nn.functional.mse_loss(compiled(x.to("neuron")), y.to("neuron"))
        loss_d.backward()
        step_d()
        torch.testing.assert_close(loss_d.cpu(), loss_c.detach(), atol=1e-4, rtol=1e-4)


def test_graph_break():
    def f(x):
        y = torch.sin(x) * 2
        torch._dynamo.graph_break()
        return torch.cos(y) + 1

    x = torch.randn(5)
    with no_fallback():
        out = torch.compile(f, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), f(x))


def test_recompiles_for_new_shape_and_reuses_for_repeated():
    torch._dynamo.reset()
    metrics.reset()

    def f(x):
        return torch.tanh(x) * 3

    cf = torch.compile(f, backend="neuron", dynamic=False)
    for n in (4, 4, 6, 6, 4):
        x = torch.randn(n)
        torch.testing.assert_close(cf(x.to("neuron")).cpu(), f(x))
    assert metrics.get("graphs_compiled") == 2
    assert metrics.get("graph_executions") == 5


def test_dynamic_true_specializes_without_crashing():
    torch._dynamo.reset()

    def f(x):
        return x * 2 + 1

    cf = torch.compile(f, backend="neuron", dynamic=True)
    for n in (3, 5, 7):
        x = torch.randn(n)
        torch.testing.assert_close(cf(x.to("neuron")).cpu(), f(x))


def test_a_float_argument_that_changes_under_dynamic_shapes():
    # The third call makes `v` dynamic: Dynamo passes it as a 0-dim tensor read with
    # .item(), which the per-shape compile traced without a shape environment
    # (DataDependentOutputException). One compile per shape, not per value.
    torch._dynamo.reset()

    def f(x, v):
        return (x * v).sin().sum()

    cf = torch.compile(f, backend="neuron")
    compiled = []
    for n, v in [(2, 2.0), (3, 2.0), (4, 0.5), (4, 3.0), (5, 1.5)]:
        x = torch.randn(n, requires_grad=True)
        xd = x.detach().to("neuron").requires_grad_()
        cf(xd, v).backward()
        f(x, v).backward()
        torch.testing.assert_close(xd.grad.cpu(), x.grad)
        compiled.append(metrics.get("graphs_compiled"))
    assert compiled[3] == compiled[2]
    torch.testing.assert_close(cf(torch.ones(4, device="neuron"), 0.25).cpu(), torch.tensor(4 * math.sin(0.25)))



@pytest.mark.parametrize("make", [lambda: nn.LayerNorm(16), lambda: nn.GroupNorm(2, 8), lambda: nn.BatchNorm2d(8)],
                         ids=["LayerNorm", "GroupNorm", "BatchNorm2d"])
def test_norm_layers_under_dynamic_true(make):
    # Dynamo passes eps (and momentum) as 0-dim tensors read with .item(); ATen takes
    # them as C++ doubles, which a symbolic float cannot give (GuardOnDataDependentSymNode).
    torch._dynamo.reset()
    cpu, dev = _pair(make())
    f = torch.compile(dev, backend="neuron", dynamic=True)
    for n in (2, 3):
        x = torch.randn(n, 8, 4, 16, requires_grad=True)
        xd = x.detach().to("neuron").requires_grad_()
        y, yd = cpu(x), f(xd)
        torch.testing.assert_close(yd.cpu(), y, atol=1e-5, rtol=1e-5)
        y.square().sum().backward()
        yd.square().sum().backward()
        torch.testing.assert_close(xd.grad.cpu(), x.grad, atol=1e-4, rtol=1e-4)
    for p, pd in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(pd.grad.cpu(), p.grad, atol=1e-4, rtol=1e-4)
    for b, bd in zip(cpu.buffers(), dev.buffers()):
        torch.testing.assert_close(bd.cpu(), b)


def test_a_dynamic_float_read_as_a_double_compiles_per_value():
    # A graph whose float argument an ATen op takes by value is compiled for each value:
    # an executable of one eps must not serve another.
    torch._dynamo.reset()

    def f(x, eps):
        return F.layer_norm(x, x.shape[-1:], eps=eps)

    cf = torch.compile(f, backend="neuron", dynamic=True)
    x = torch.randn(3, 5) * 0.1
    for eps in (1e-5, 1e-5, 0.5, 2.0, 0.5):
        torch.testing.assert_close(cf(x.to("neuron"), eps).cpu(), f(x, eps))


@pytest.mark.parametrize("fn", [lambda x, w: F.conv2d(x, w), lambda x, w: F.pixel_shuffle(x, 2),
                                lambda x, w: F.group_norm(x, 2), lambda x, w: F.pad(x, (1, 2, 0, 1), mode="replicate")],
                         ids=["conv2d", "pixel_shuffle", "group_norm", "replication_pad2d"])
def test_compiled_outputs_are_laid_out_as_cpu(fn):
    # Fake tensors on neuron follow the eager executor's layouts (CPU's), as CPU eager
    # keeps channels_last through these ops.
    torch._dynamo.reset()
    x = torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last)
    w = torch.randn(8, 4, 3, 3)
    xd = torch.empty_strided(x.shape, x.stride(), device="neuron").copy_(x)
    want = fn(x, w)
    got = torch.compile(fn, backend="neuron")(xd, w.to("neuron"))
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)

def test_interpolation_compiles_to_the_lowered_op(monkeypatch):
    # PyTorch's Python kernels decompose upsample ops while tracing into index
    # arithmetic; the graph keeps the ATen op, so compiled results are eager's: CPU's
    # weights, its uint8 integer kernel, its backward.
    from torchneuron.compile import backend

    seen = []
    compile_graph = backend.compile_graph
    monkeypatch.setattr(backend, "compile_graph", lambda gm, inputs, name: (
        seen.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"}),
        compile_graph(gm, inputs, name=name))[1])
    for mode, kw in [("bilinear", dict(scale_factor=2)), ("bicubic", dict(scale_factor=(1.1, 0.5)))]:
        torch._dynamo.reset()
        seen.clear()

        def fn(t):
            return F.interpolate(t, mode=mode, **kw)

        cf = torch.compile(fn, backend="neuron")
        x = torch.randn(2, 3, 5, 7, dtype=torch.float64, requires_grad=True)
        xd = x.detach().to("neuron").requires_grad_()
        g = torch.randn(fn(x).shape, dtype=torch.float64)
        fn(x).backward(g)
        cf(xd).backward(g.to("neuron"))
        torch.testing.assert_close(xd.grad.cpu(), x.grad)
        u = torch.randint(0, 256, (1, 3, 5, 7), dtype=torch.uint8)
        assert torch.equal(cf(u.to("neuron")).cpu(), fn(u))
        name = "aten.upsample_bilinear2d" if mode == "bilinear" else "aten.upsample_bicubic2d"
        assert {f"{name}.default"} in seen and f"{name}_backward.default" in set().union(*seen)
    torch._dynamo.reset()


def test_dump_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(torchneuron.config, "DUMP_DIR", str(tmp_path))
    torch._dynamo.reset()
    torch.compile(lambda x: torch.exp(x) - 1, backend="neuron")(torch.randn(3, device="neuron"))
    files = os.listdir(tmp_path)
    fx = [f for f in files if f.endswith(".fx.py")]
    hlo = [f for f in files if f.endswith(".stablehlo.mlir")]
    assert fx and hlo
    assert "aten.exp" in open(tmp_path / fx[0]).read()
    text = open(tmp_path / hlo[0]).read()
    assert "stablehlo.exponential" in text


_CHILD = textwrap.dedent("""
    import torch
    from torchneuron import metrics
    f = torch.compile(lambda x: torch.sin(x) * 4 + x, backend="neuron")
    out = f(torch.arange(6.0, device="neuron"))
    expected = torch.sin(torch.arange(6.0)) * 4 + torch.arange(6.0)
    torch.testing.assert_close(out.cpu(), expected)
    print("HITS", metrics.get("graph_cache_hits"), "MISSES", metrics.get("graph_cache_misses"))
""")


def _run_child(cache_dir):
    env = dict(os.environ, TORCHNEURON_CACHE_DIR=str(cache_dir))
    # The C++ shim is built once per machine; reuse it instead of rebuilding under the new cache dir.
    env["TORCHNEURON_EXTENSION_DIR"] = torchneuron._extension._build_dir()
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    line = [l for l in out.stdout.splitlines() if l.startswith("HITS")][-1].split()
    return int(line[1]), int(line[3]), out.stderr


def test_disk_cache_hit_in_second_process(tmp_path):
    assert _run_child(tmp_path)[:2] == (0, 1)
    assert _run_child(tmp_path)[:2] == (1, 0)


# Each cross-process test starts two or three interpreters (20-30 s): CI runs the plain
# hit-in-a-second-process case, --runslow the corrupt-entry and concurrent-writer ones.
@pytest.mark.slow
def test_corrupt_cache_entry_recompiles(tmp_path):
    _run_child(tmp_path)
    entries = [p for p in (tmp_path / "executables").iterdir() if p.suffix == ".bin"]
    assert entries
    for p in entries:
        data = p.read_bytes()
        p.write_bytes(data[: len(data) // 2])  # truncated
    hits, misses, err = _run_child(tmp_path)
    assert (hits, misses) == (0, 1)
    assert "discarding unreadable executable cache entry" in err
    assert _run_child(tmp_path)[:2] == (1, 0)  # rewritten entry is good again


def test_graphs_differing_only_in_an_unused_input_dtype_get_their_own_executables():
    # The backward of an order-0 norm ignores its output gradient, and jax.jit leaves an
    # unused argument out of the StableHLO text: the float32 graph's cached executable
    # used to be loaded for the bfloat16 one, which then refused its argument.
    for dtype in (torch.float32, torch.bfloat16):
        torch._dynamo.reset()
        x = torch.ones(5, 5, dtype=dtype, device="neuron", requires_grad=True)
        out = torch.compile(lambda t: torch.linalg.vector_norm(t, 0), backend="neuron")(x)
        assert out.dtype == dtype and out.item() == 25
        out.backward()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_compiled_renorm_lowers_every_node_in_half_types(dtype, monkeypatch):
    # PyTorch's renorm decomposition converts with prims.convert_element_type, which
    # used to have no lowering: the graph was split around it (strict mode refused).
    monkeypatch.setattr(torchneuron.config, "STRICT", True)
    torch._dynamo.reset()
    x = torch.randn(3, 4, 5, dtype=dtype)
    got = torch.compile(lambda t: torch.renorm(t, 2, 1, 0.5), backend="neuron", fullgraph=True)(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), torch.renorm(x, 2, 1, 0.5), rtol=0, atol=0)


@pytest.mark.parametrize("opt_cls", [torch.optim.Adam, torch.optim.RMSprop])
def test_compiled_single_tensor_optimizer_step_is_one_graph(opt_cls, monkeypatch):
    # Dynamo rewrites addcmul_(value=...) into prims.fma, which had no lowering: the
    # step was split around it (refused under strict mode).
    monkeypatch.setattr(torchneuron.config, "STRICT", True)
    torch._dynamo.reset()
    torch.manual_seed(0)
    ref = nn.Linear(8, 4)
    model = copy.deepcopy(ref).to("neuron")
    opt, ref_opt = opt_cls(model.parameters(), foreach=False), opt_cls(ref.parameters(), foreach=False)
    step = torch.compile(opt.step, backend="neuron")
    x = torch.randn(2, 8)
    before = metrics.get("graph_partitions")
    for _ in range(3):
        model(x.to("neuron")).sum().backward()
        step()
        opt.zero_grad()
        ref(x).sum().backward()
        ref_opt.step()
        ref_opt.zero_grad()
    assert metrics.get("graph_partitions") == before
    torch.testing.assert_close(model.weight.cpu(), ref.weight)


@pytest.mark.parametrize("fn", [torch.linalg.inv, torch.linalg.cholesky, torch.linalg.lu_factor,
                                lambda a: torch.linalg.solve(a, a[..., :1])], ids=["inv", "cholesky", "lu_factor", "solve"])
def test_compiled_linalg_checks_lapack_errors_in_the_graph(fn, monkeypatch):
    # torch.linalg's LAPACK error check is an effectful op (with_effects): graphs were
    # split around it, and strict mode refused them. It now runs as a check of the
    # graph, raising CPU's error and message (its batch element too) at the sync.
    monkeypatch.setattr(torchneuron.config, "STRICT", True)
    good = torch.randn(3, 3) @ torch.randn(3, 3).T + 3 * torch.eye(3)
    for x in (good, torch.zeros(3, 3), torch.stack([torch.eye(3), torch.zeros(3, 3)])):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="neuron", fullgraph=True)
        try:
            want = fn(x)
        except Exception as cpu:  # noqa: BLE001 - CPU's error is the expected outcome
            with pytest.raises(type(cpu)) as dev:
                compiled(x.to("neuron"))
                torch.neuron.synchronize()
            assert str(dev.value) == str(cpu)
            continue
        got = compiled(x.to("neuron"))
        torch.testing.assert_close([t.cpu() for t in got] if isinstance(got, tuple) else got.cpu(),
                                   list(want) if isinstance(want, tuple) else want)


def _spd(*batch):
    a = torch.randn(*batch, 3, 3, dtype=torch.float64)
    return torch.linalg.cholesky(a @ a.mT + 3 * torch.eye(3, dtype=torch.float64))


# Ops whose eager kernel is ATen's composite (no lowering of their own) used to split
# compiled graphs: strict mode refused them. Now each has a lowering for graphs or
# takes PyTorch's decomposition (ldexp, dist).
COMPOSITES = {
    "cholesky_solve": (lambda x, L: torch.cholesky_solve(x, L),
                       lambda: (torch.randn(3, 2, dtype=torch.float64), _spd(2))),
    "cholesky_solve_upper": (lambda x, L: torch.cholesky_solve(x, L.mT, upper=True),
                             lambda: (torch.randn(2, 3, 2, dtype=torch.float64), _spd())),
    "ldexp": (torch.ldexp, lambda: (torch.randn(3, 2), torch.tensor([[1], [-2], [3]]).expand(3, 2).contiguous())),
    "rope": (lambda x, f: torch.view_as_complex(x.reshape(4, 2, 2)) * torch.polar(torch.ones_like(f), f),
             lambda: (torch.randn(4, 4), torch.randn(4, 2))),
    "complex": (torch.complex, lambda: (torch.rand(4, 1), torch.randn(4))),
    "dist": (lambda a, b: torch.dist(a, b, 3), lambda: (torch.randn(4, 3), torch.randn(3))),
    "pinv": (torch.linalg.pinv, lambda: (torch.randn(2, 4, 3),)),
    "pinv_rank_deficient": (lambda a, b: torch.linalg.pinv(a @ b),
                            lambda: (torch.randn(4, 2, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64))),
    "pinv_hermitian_rtol": (lambda a: torch.linalg.pinv(a @ a.mT, rtol=1e-3, hermitian=True),
                            lambda: (torch.randn(3, 3, dtype=torch.float64),)),
    "pinv_atol_complex": (lambda a: torch.linalg.pinv(a, atol=0.5), lambda: (torch.randn(3, 3, dtype=torch.cfloat),)),
    "masked_scatter": (lambda x, s, m: x.masked_scatter(m, s),
                       lambda: (torch.randn(3, 4), torch.randn(3, 5), torch.rand(4) > 0.5)),
}


@pytest.mark.parametrize("name", list(COMPOSITES))
def test_compiled_composite_ops_stay_in_the_graph(name, monkeypatch):
    monkeypatch.setattr(torchneuron.config, "STRICT", True)
    torch._dynamo.reset()
    fn, make = COMPOSITES[name]
    torch.manual_seed(0)
    args = make()
    grads = [a.is_floating_point() or a.is_complex() for a in args]  # differentiated
    cpu = [a.clone().requires_grad_(g) for a, g in zip(args, grads)]
    dev = [a.to("neuron").requires_grad_(g) for a, g in zip(args, grads)]
    want = fn(*cpu)
    got = torch.compile(fn, backend="neuron", fullgraph=True)(*dev)
    torch.testing.assert_close(got.cpu(), want)
    w = torch.randn(want.shape, dtype=want.dtype)
    want_grads = torch.autograd.grad(want, [a for a in cpu if a.requires_grad], w)
    got_grads = torch.autograd.grad(got, [a for a in dev if a.requires_grad], w.to("neuron"))
    torch.testing.assert_close([g.cpu() for g in got_grads], list(want_grads))


def test_masked_scatter_backward_is_native_and_matches_cpu():
    # Its gradient was ATen's composite, which synchronizes for masked_select's count.
    grad = torch.randn(3, 4)
    mask = torch.tensor([True, False, True, True])
    want = torch.ops.aten.masked_scatter_backward(grad, mask, [2, 5])
    with no_fallback():
        got = torch.ops.aten.masked_scatter_backward(grad.to("neuron"), mask.to("neuron"), [2, 5])
    assert torch.equal(got.cpu(), want)
    with pytest.raises(RuntimeError, match="selects more elements"):
        torch.ops.aten.masked_scatter_backward(grad.to("neuron"), mask.to("neuron"), [2, 4])
        torch.neuron.synchronize()


def test_gpt_example_training_parity():
    from examples.gpt.model import GPT, GPTConfig

    torch.manual_seed(0)
    config = GPTConfig(vocab_size=64, seq_len=16, n_layer=2, n_head=2, d_model=32, dropout=0.0)
    cpu, dev = _pair(GPT(config))
    opt_c = torch.optim.AdamW(cpu.parameters(), lr=3e-3)
    opt_d = torch.optim.AdamW(dev.parameters(), lr=3e-3)
    compiled = torch.compile(dev, backend="neuron")
    gen = torch.Generator().manual_seed(1)
    for _ in range(30):
        x = torch.randint(0, 64, (4, 16), generator=gen)
        y = torch.randint(0, 64, (4, 16), generator=gen)
        opt_c.zero_grad()
        _, loss_c = cpu(x, y)
        loss_c.backward()
        opt_c.step()
        opt_d.zero_grad()
        _, loss_d = compiled(x.to("neuron"), y.to("neuron"))
        loss_d.backward()
        opt_d.step()
        torch.testing.assert_close(loss_d.cpu(), loss_c.detach(), atol=1e-4, rtol=1e-4)


def test_transformers_gpt2_tiny_forward_backward():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    cpu, dev = _pair(transformers.GPT2LMHeadModel(config))
    ids = torch.randint(0, 100, (2, 16))
    ref = cpu(ids, labels=ids)
    ref.loss.backward()
    out = torch.compile(dev, backend="neuron")(ids.to("neuron"), labels=ids.to("neuron"))
    out.loss.backward()
    torch.testing.assert_close(out.logits.cpu(), ref.logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out.loss.cpu(), ref.loss, atol=1e-5, rtol=1e-5)
    for (name, p), q in zip(dev.named_parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, atol=1e-4, rtol=1e-4, msg=name)


_lib = torch.library.Library("tnx_compile_test", "DEF")
_lib.define("triple(Tensor x) -> Tensor")
_lib.impl("triple", lambda x: x * 3, "CPU")
_lib.impl("triple", lambda x: torch.empty_like(x), "Meta")


def test_unlowered_op_is_partitioned_and_runs_through_fallback():
    torch._dynamo.reset()
    metrics.reset()

    def f(x):
        return torch.ops.tnx_compile_test.triple(torch.sin(x)) + 1

    x = torch.randn(6)
    out = torch.compile(f, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), torch.sin(x) * 3 + 1)
    assert metrics.get("graph_partitions") >= 1
    assert torchneuron.fallback_ops().get("tnx_compile_test.triple.default", 0) >= 1


def test_unlowered_op_in_graph_raises_under_strict(monkeypatch):
    torch._dynamo.reset()
    monkeypatch.setattr(torchneuron.config, "STRICT", True)

    def f(x):
        return torch.ops.tnx_compile_test.triple(x) * 2

    with pytest.raises(Exception, match="TORCHNEURON_STRICT"):
        torch.compile(f, backend="neuron")(torch.randn(3, device="neuron"))


def test_default_backend_and_module_compile():
    torch._dynamo.reset()
    metrics.reset()
    torch.compiler.set_default_backend("neuron")
    try:
        torch.manual_seed(0)
        cpu, dev = _pair(MLP())
        dev.compile()
        x = torch.randn(4, 16)
        torch.testing.assert_close(dev(x.to("neuron")).cpu(), cpu(x), atol=1e-5, rtol=1e-5)
        assert metrics.get("graphs_compiled") >= 1
    finally:
        torch.compiler.set_default_backend(None)


@pytest.mark.parametrize("case", ["branch_on_value", "item", "tolist"])
def test_graph_breaks_on_tensor_values(case):
    def branch_on_value(x):
        y = x * 2
        if y.sum() > 0:
            return y + 1
        return y - 1

    def item(x):
        return x * x.max().item()

    def tolist(x):
        return torch.tensor(x.tolist(), device=x.device) + 1

    f = {"branch_on_value": branch_on_value, "item": item, "tolist": tolist}[case]
    torch._dynamo.reset()
    x = torch.randn(5)
    torch.testing.assert_close(torch.compile(f, backend="neuron")(x.to("neuron")).cpu(), f(x))


def test_backward_inside_compiled_step():
    torch._dynamo.reset()
    torch.manual_seed(0)
    cpu, dev = _pair(nn.Linear(4, 2))
    opt_c = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt_d = torch.optim.SGD(dev.parameters(), lr=0.1)

    def make_step(model):
        def step(x):
            loss = model(x).square().mean()
            loss.backward()
            return loss
        return step

    step_d = torch.compile(make_step(dev), backend="neuron")
    step_c = make_step(cpu)
    for _ in range(3):
        x = torch.randn(3, 4)
        opt_c.zero_grad()
        opt_d.zero_grad()
        loss_c = step_c(x)
        loss_d = step_d(x.to("neuron"))
        opt_c.step()
        opt_d.step()
        torch.testing.assert_close(loss_d.cpu(), loss_c.detach(), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("case", ["index", "index_select", "embedding", "gather"])
def test_out_of_range_index_raises_in_compiled_graph(case):
    torch._dynamo.reset()
    fns = {
        "index": (lambda x, i: x[i] * 2, IndexError),
        "index_select": (lambda x, i: torch.index_select(x, 0, i) + 1, IndexError),
        "embedding": (lambda x, i: nn.functional.embedding(i, x.view(4, 1)) * 3, IndexError),
        "gather": (lambda x, i: torch.gather(x, 0, i) - 1, RuntimeError),
    }
    f, exc = fns[case]
    x = torch.arange(4.0)
    good, bad = torch.tensor([1, 3]), torch.tensor([1, 7])
    with pytest.raises(exc):  # CPU's exception type
        f(x, bad)
    cf = torch.compile(f, backend="neuron")
    torch.testing.assert_close(cf(x.to("neuron"), good.to("neuron")).cpu(), f(x, good))
    with pytest.raises(exc):
        cf(x.to("neuron"), bad.to("neuron")).cpu()
    torch.testing.assert_close(cf(x.to("neuron"), good.to("neuron")).cpu(), f(x, good))


def test_mark_dynamic_specializes_without_crashing():
    torch._dynamo.reset()

    def f(x):
        return torch.relu(x) * 2

    cf = torch.compile(f, backend="neuron")
    for n in (3, 5):
        x = torch.randn(n, 4)
        xn = x.to("neuron")
        torch._dynamo.mark_dynamic(xn, 0)
        torch.testing.assert_close(cf(xn).cpu(), f(x))


@pytest.mark.slow
def test_concurrent_processes_share_one_cache_dir(tmp_path):
    env = dict(os.environ, TORCHNEURON_CACHE_DIR=str(tmp_path))
    env["TORCHNEURON_EXTENSION_DIR"] = torchneuron._extension._build_dir()
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert not [f for f in os.listdir(tmp_path / "executables") if f.endswith(".tmp")]
    assert _run_child(tmp_path)[:2] == (1, 0)  # the entry they left is whole


def test_conjugate_views_in_and_into_compiled_graphs():
    # Autoformer's autocorrelation: irfft(rfft(q) * conj(rfft(k))). aten._conj used to
    # split the graph, and the next subgraph read the conj view's stored values.
    def autocorrelation(q, k):
        return torch.fft.irfft(torch.fft.rfft(q, dim=-1) * torch.conj(torch.fft.rfft(k, dim=-1)), n=q.shape[-1])

    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 8, 9, generator=gen), torch.randn(2, 8, 9, generator=gen)
    got = torch.compile(autocorrelation, backend="neuron")(q.to("neuron"), k.to("neuron"))
    torch.testing.assert_close(got.cpu(), autocorrelation(q, k), rtol=1e-4, atol=1e-5)
    z = torch.randn(4, dtype=torch.complex64, generator=gen)
    affine = torch.compile(lambda t: t * 2 + 1, backend="neuron")
    torch.testing.assert_close(affine(z.to("neuron").conj()).cpu(), z.conj() * 2 + 1)
    torch.testing.assert_close(affine(torch._neg_view(z.to("neuron"))).cpu(), -z * 2 + 1)
