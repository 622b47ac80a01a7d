"""A fixed sample of the model sweep (torchneuron/sweep) in the default test run.

Ten small models, five per suite (two of them, the slowest, only under --runslow), go through the real worker's stages (build on the
CPU, move to neuron, forward, backward, compiled forward, each compared with the CPU)
and their stage results are asserted. The full sweep is one command:
``python -m torchneuron sweep --suite all --jobs 1`` (see the README).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from torchneuron.sweep import runner, worker

PASS = ("pass",) * 4

# model -> expected (load, forward, backward, compile) statuses; where one is not
# "pass", the comment gives the reason.
SAMPLE = {
    "transformers/bert": PASS,
    "transformers/gpt2": PASS,
    "transformers/t5": PASS,
    "transformers/llama": PASS,
    "transformers/vit": PASS,
    # timm's own test-sized variants of five families (quick to compile).
    "timm/test_resnet": PASS,
    "timm/test_efficientnet": PASS,
    "timm/test_vit": PASS,
    "timm/test_convnext": PASS,
    "timm/test_nfnet": PASS,
}


# The two slowest timm variants (nfnet 31 s, efficientnet 18 s on CI's cores) run under
# --runslow; CI keeps three convolutional families.
_SLOW = {"timm/test_nfnet", "timm/test_efficientnet"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW else n
                                  for n in sorted(SAMPLE)])
def test_sample_model(name):
    # In-process: the worker function itself, without the subprocess's start-up cost.
    result = worker.run_model(name)
    assert result["covered"], result.get("reason")
    statuses = tuple(result["stages"][s]["status"] for s in worker.STAGES)
    assert statuses == SAMPLE[name], json.dumps(result["stages"], indent=1)
    for stage in worker.STAGES:
        assert result["stages"][stage]["time_s"] >= 0


def test_runner_isolates_a_hung_model(tmp_path):
    # A worker over its time limit is killed; the result says which stage it was in.
    result = runner.run_one("timm/test_resnet", timeout_s=1.0)
    # Killed in the CPU reference run (not covered) or in a neuron stage (that stage
    # errs with a Timeout and no later stage ran), depending on how fast the machine is.
    if result["covered"]:
        stages = list(result["stages"].values())
        assert stages[-1]["status"] == "timeout" and stages[-1]["error_type"] == "Timeout", result
        assert all(s["status"] == "pass" for s in stages[:-1]), result
    else:
        assert result["reason"].startswith("Timeout"), result
    out = tmp_path / "results.json"
    results = runner.sweep(names=["timm/test_vit"], out=str(out), timeout_s=300, progress=False)
    assert runner.summary(results["models"]["timm/test_vit"]) == "pass/pass/pass/pass"
    # Resumable: a second run finds the model in the file and runs nothing.
    again = runner.sweep(names=["timm/test_vit"], out=str(out), timeout_s=0.001, progress=False)
    assert again["models"] == results["models"]


def _die_at_start(*args):
    """A worker target that is killed before it opens its log (as by the OOM killer)."""
    os.kill(os.getpid(), signal.SIGKILL)


def test_worker_dying_before_its_log_opens_is_that_models_error(tmp_path, monkeypatch):
    # The fork server imports this module by name to run the replaced target.
    monkeypatch.setattr(runner.worker, "child", _die_at_start)
    out = tmp_path / "results.json"
    names = ["timm/test_resnet", "timm/test_vit"]
    results = runner.sweep(names=names, out=str(out), timeout_s=60, progress=False)
    # Both recorded (the sweep went on after the first), with the signal that killed them.
    for name in names:
        reason = results["models"][name]["reason"]
        assert reason.startswith("Crash: worker killed by signal SIGKILL"), reason
        assert "no log" in reason, reason
    assert json.loads(out.read_text())["models"] == results["models"]


def _fork_server_of(marker: str) -> bool:
    """Whether a fork server whose environment holds `marker` runs."""
    for pid in _processes_with(marker):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"forkserver" in f.read():
                    return True
        except OSError:
            pass
    return False


def _processes_with(marker: str) -> list[int]:
    """Pids of the processes whose environment holds `marker`."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker.encode() in f.read():
                    pids.append(int(pid))
        except OSError:  # exited meanwhile, or not ours
            pass
    return pids


@pytest.mark.parametrize("when", ["starting", "running"])
def test_ctrl_c_kills_the_workers_and_keeps_the_results_file(tmp_path, when):
    # The real command, interrupted by SIGINT while its fork server imports torch,
    # transformers and timm, or while a worker runs a model (one that takes far longer
    # than the time allowed for stopping).
    out = tmp_path / "results.json"
    done = {"model": "timm/finished", "covered": False, "stages": {}, "reason": "earlier run"}
    out.write_text(json.dumps({"meta": {}, "models": {"timm/finished": done}}))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # TMPDIR: where the runner puts each worker's files, and a marker every process of
    # this sweep (fork server and workers) inherits.
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=os.pathsep.join(sys.path))
    # Output to a file: the fork server and workers inherit it, so a pipe would stay
    # open as long as any of them runs.
    with open(tmp_path / "stderr", "w") as err:
        # SIGINT's default action in the child, as from a terminal: a test run started as a
        # background job of a non-interactive shell ignores SIGINT, and exec keeps that.
        proc = subprocess.Popen([sys.executable, "-m", "torchneuron", "sweep", "--model", "timm/coat_lite_tiny",
                                 "--timeout", "600", "--out", str(out), "--report", ""],
                                env=env, stdout=subprocess.DEVNULL, stderr=err,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 180
        while not (_fork_server_of(str(tmp)) if when == "starting"
                   else list(tmp.glob("torchneuron-sweep-*/result.json"))):  # a worker has started
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr").read_text()
            time.sleep(0.1)
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        while _processes_with(str(tmp)) and time.monotonic() < start + 60:
            time.sleep(0.1)
        # The time includes the interpreter's exit with torch imported, slow on a busy
        # machine; waiting for the model would take minutes.
        stopped = time.monotonic() - start
    finally:
        proc.kill()
    stderr = (tmp_path / "stderr").read_text()
    assert not _processes_with(str(tmp)) and stopped < 20, (stopped, stderr)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr, stderr
    # The file is as it was: no model finished.
    assert json.loads(out.read_text())["models"] == {"timm/finished": done}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "stderr", "tmp"]  # no temporary left

def test_compare_is_per_element_like_assert_close():
    inf, nan = float("inf"), float("nan")
    t = torch.tensor
    assert worker.compare([t([1.0, inf, -inf, nan])], [t([1.0, inf, -inf, nan])]) is None
    # Infinities: same places, same signs; NaNs: same places.
    assert "index (1,)" in worker.compare([t([1.0, -inf])], [t([1.0, inf])])
    assert worker.compare([t([1.0, 3.0])], [t([1.0, inf])]) is not None
    assert worker.compare([t([1.0, 0.0])], [t([1.0, nan])]) is not None
    assert worker.compare([t([nan, 0.0])], [t([1.0, 0.0])]) is not None
    # Per element: a small element twice its value fails next to a large one (the old
    # whole-tensor bound, 1e-3 of the largest, hid it); float32 rounding passes.
    why = worker.compare([t([1000.0, 0.2])], [t([1000.0, 0.1])])
    assert why.startswith("tensor 0[2]: Mismatched elements: 1 / 2") and "index (1,)" in why, why
    assert worker.compare([t([1000.0, 0.001]) * (1 + 5e-5)], [t([1000.0, 0.001])]) is None
    # Rounding of a sum of large terms near zero: atol counts in the tensor's scale.
    assert worker.compare([t([150.0, 3e-5])], [t([150.0, 0.0])]) is None
    assert worker.compare([t([1.0, 3e-5])], [t([1.0, 0.0])]) is not None
    # The tolerance follows the dtype: 0.4% is bfloat16 rounding, not float32's.
    x = torch.linspace(1, 2, 5)
    assert worker.compare([(x * 1.004).bfloat16()], [x.bfloat16()]) is None
    assert worker.compare([x * 1.004], [x]) is not None
    assert worker.compare([t([1, 2])], [t([1, 3])]) is not None
    assert worker.compare([t([1, 2])], [t([1, 2])]) is None


class _Tiny(torch.nn.Module):
    """A linear layer, then a second one; `kind` says what Dynamo sees in between."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)

    def forward(self, x):
        x = self.a(x).relu()
        if self.kind == "break":
            torch._dynamo.graph_break()
        if self.kind == "unlowered":
            x = x + _no_lowering(x.detach())
        return self.b(x)


@torch.library.custom_op("sweep_test::no_lowering", mutates_args=())
def _no_lowering(x: torch.Tensor) -> torch.Tensor:
    """An op the neuron backend has no lowering for: compiled graphs are split around it."""
    return x * 2


@_no_lowering.register_fake
def _(x):
    return torch.empty_like(x)


class _Eager(_Tiny):
    """Dynamo skips this forward: nothing reaches the backend."""

    forward = torch._dynamo.disable(_Tiny.forward)


def test_a_worker_killed_in_the_move_to_neuron_is_a_load_error(monkeypatch, tmp_path):
    """The result file says `covered` before any neuron stage starts, so the runner files
    a worker that dies there under that stage, counted in the pass rates."""
    from torchneuron.sweep import enumerate as models

    monkeypatch.setattr(models, "build", lambda name, seed=0: (_Tiny("whole").eval(), [{"x": torch.randn(3, 4)}]))
    path = tmp_path / "result.json"
    on_disk = []
    to = torch.nn.Module.to

    def record_then_move(self, *args, **kwargs):
        if args and str(args[0]) == "neuron" and not on_disk:
            on_disk.append(json.loads(path.read_text()))
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "to", record_then_move)
    worker.run_model("test/whole", path=str(path), compile=False)
    assert on_disk and on_disk[0]["covered"] and on_disk[0]["stages"] == {}, on_disk
    result = dict(on_disk[0])
    runner._record_failure(result, "Crash", "worker killed by signal SIGKILL")
    assert result["stages"]["load"] == {"status": "error", "error_type": "Crash",
                                        "error": "worker killed by signal SIGKILL"}


@pytest.mark.parametrize("kind, status, graphs, breaks", [
    ("whole", "pass", 1, 0),
    ("break", "partial", 2, 1),
    ("eager", "error", 0, 1),  # Dynamo counts the skipped call as a graph break
    ("unlowered", "partial", 1, 0),
])
def test_compile_stage_counts_what_the_backend_compiled(monkeypatch, kind, status, graphs, breaks):
    from torchneuron.sweep import enumerate as models

    def build(name, seed=0):
        torch.manual_seed(seed)
        model = _Eager(kind) if kind == "eager" else _Tiny(kind)
        return model.eval(), [{"x": torch.randn(3, 4)}]

    monkeypatch.setattr(models, "build", build)
    result = worker.run_model(f"test/{kind}")
    assert [result["stages"][s]["status"] for s in worker.STAGES[:3]] == ["pass"] * 3, result
    compiled = result["stages"]["compile"]
    assert (compiled["status"], compiled["graphs"], compiled["graph_breaks"]) == (status, graphs, breaks), compiled
    assert compiled["split_graphs"] == (kind == "unlowered")
    # Where the time went: every graph the backend got was compiled (or loaded) once.
    assert compiled.get("executables_compiled", 0) >= graphs and compiled.get("compile_s", 0) >= 0
    if kind == "eager":
        assert compiled["error_type"] == "NotCompiled"
    if kind == "break":
        assert compiled["error_type"] == "GraphBreak" and "1 graph breaks" in compiled["error"], compiled
    if kind == "unlowered":
        assert compiled["error_type"] == "GraphSplit" and compiled["split_ops"] == ["sweep_test.no_lowering.default"]
        assert compiled["where"] == "no lowering: sweep_test.no_lowering.default"


def test_timm_models_are_built_shallow():
    from torchneuron.sweep import enumerate as models

    # One block per stage (ConvNeXt takes `depths`), 2 blocks (ViT takes `depth`).
    assert models._shallow("convnext_atto") == {"depths": (1, 1, 1, 1)}
    assert models._shallow("vit_tiny_patch16_224") == {"depth": 2}
    assert models._shallow("resnet18") == {}  # its depth is not a keyword with a default
    model, _ = models.build("timm/test_convnext")
    assert [len(stage.blocks) for stage in model.stages] == [1, 1, 1, 1]
    model, candidates = models.build("timm/test_vit")
    assert len(model.blocks) == 2 and candidates[0]["x"].shape[-1] == models.TIMM_IMAGE


def test_float64_reference_accepts_rounding_and_rejects_wrong_results():
    # A sum of many terms in float32: CPU and a reordered sum both carry rounding error
    # of the same size against float64; a 1% error is far beyond it.
    gen = torch.Generator().manual_seed(0)
    terms = torch.randn(4096, 64, dtype=torch.float64, generator=gen)
    exact = terms.sum(0)
    cpu = terms.float().sum(0)
    reordered = terms.float().flip(0).cumsum(0)[-1]
    ref = worker.Float64Reference("unused", 0, {}, [])
    ref._values = ([exact], [("w", exact)])
    assert ref.accepts([reordered], [cpu], "outputs")
    assert ref.accepts([reordered], [cpu], "grads")
    assert not ref.accepts([cpu * 1.01], [cpu], "outputs")
    assert not ref.accepts([cpu.clone().index_fill_(0, torch.tensor([3]), 0.0)], [cpu], "grads")


def test_a_model_that_cannot_run_in_float64_keeps_the_strict_verdict(monkeypatch):
    ref = worker.Float64Reference("unused", 0, {}, [])
    monkeypatch.setattr(ref, "_compute", lambda: (_ for _ in ()).throw(RuntimeError("no float64 kernel")))
    st = {}
    assert worker._judge("tensor 0[3]: differs", lambda: ref.accepts([torch.ones(3)], [torch.ones(3)], "outputs"),
                         st) == "tensor 0[3]: differs"
    assert st == {}
    st = {}
    assert worker._judge("tensor 0[3]: differs", lambda: True, st) is None
    assert st == {"criterion": "float64 reference", "strict_error": "tensor 0[3]: differs"}


# --- shrink_config's rules (config objects only: no model is built) -----------------


def _config(**attrs):
    from transformers import PretrainedConfig

    config = PretrainedConfig()
    for key, value in attrs.items():
        setattr(config, key, value)
    return config


def _shrunk(width_scale=1, **attrs):
    from torchneuron.sweep.enumerate import shrink_config

    config = _config(**attrs)
    shrink_config(config, width_scale)
    return config


def test_shrunk_heads_stay_whole_and_divide_the_width():
    c = _shrunk(hidden_size=15, num_attention_heads=2)  # an odd width keeps 1 head
    assert c.num_attention_heads == 1
    c = _shrunk(hidden_size=768, num_attention_heads=12, num_key_value_heads=4)
    assert (c.hidden_size, c.num_attention_heads, c.num_key_value_heads) == (32, 2, 2)
    # Swin-style per-stage heads (3 would divide no power-of-two stage width).
    c = _shrunk(embed_dim=96, num_heads=(3, 6, 12, 24), depths=(2, 2, 6, 2))
    assert c.num_heads == (2, 4, 8, 16) and c.depths == (1, 1, 1, 1)
    assert all(32 * 2 ** i % h == 0 for i, h in enumerate(c.num_heads))
    assert _shrunk(num_heads=(1, 0)).num_heads == (1, 1)


def test_restated_widths_and_heads_shrink_alike():
    c = _shrunk(hidden_size=2048, hidden_size_global=4096, encoder_hidden_size=1408,
                cross_num_attention_heads=16, cross_num_key_value_heads=16, cross_head_dim=128,
                backbone_hidden_size=2048, decoder_intermediate_size=2304, decoder_num_layers=12)
    assert (c.hidden_size_global, c.encoder_hidden_size, c.backbone_hidden_size) == (32, 32, 32)
    assert (c.cross_num_attention_heads, c.cross_num_key_value_heads, c.cross_head_dim) == (2, 2, 16)
    assert (c.decoder_intermediate_size, c.decoder_num_layers) == (64, 2)
    # A width restating the original hidden or head size under its own name (BROS).
    c = _shrunk(hidden_size=768, num_attention_heads=12, dim_bbox_projection=64, max_position_embeddings=768)
    assert c.dim_bbox_projection == c.hidden_size // c.num_attention_heads == 16
    assert c.max_position_embeddings == 768  # not a width


def test_sub_configs_shrink_consistently():
    vision = _config(hidden_size=1408, num_attention_heads=16)
    qformer = _config(hidden_size=768, encoder_hidden_size=1408, num_attention_heads=12)
    c = _shrunk(vision_config=vision, qformer_config=qformer, rope_parameters={"rope_theta": 5.0})
    assert c.qformer_config.encoder_hidden_size == c.vision_config.hidden_size == 32
    assert c.vision_config.rope_theta == 5.0  # the legacy attribute some sub-configs are read for


def test_derived_head_sizes_follow_their_parts():
    c = _shrunk(hidden_size=4096, num_attention_heads=32, head_dim=128, rotary_dim=64)
    assert c.rotary_dim <= c.head_dim == 16
    c = _shrunk(qk_nope_head_dim=128, qk_rope_head_dim=64, qk_head_dim=192, v_head_dim=128)
    assert (c.qk_head_dim, c.v_head_dim) == (c.qk_nope_head_dim + c.qk_rope_head_dim, 16)
    # Mamba-2 heads times head size is the expanded width.
    c = _shrunk(hidden_size=4096, mamba_expand=2, mamba_n_heads=128, mamba_d_head=64)
    assert c.mamba_n_heads * c.mamba_d_head == c.mamba_expand * c.hidden_size


def test_group_counts_divide_the_shrunk_widths():
    c = _shrunk(hidden_sizes=[256, 512, 1024, 2048], num_groups=32, upsample_groups=512)
    assert all(w % c.num_groups == 0 and w % c.upsample_groups == 0 for w in c.hidden_sizes)
    c = _shrunk(n_routed_experts=256, n_group=8, topk_group=4)
    assert c.n_routed_experts % c.n_group == 0 and c.n_routed_experts // c.n_group >= 2
    assert 1 <= c.topk_group <= c.n_group
    # Explicit stage channel lists restate the stage widths: both stay as they are.
    c = _shrunk(hidden_sizes=[256, 512], stage_out_channels=(128, 512))
    assert c.hidden_sizes == [256, 512]


def test_width_scale_doubles_widths_only_and_unset_horizons_get_one():
    c = _shrunk(2, hidden_size=768, intermediate_size=3072, num_attention_heads=12, num_hidden_layers=12)
    assert (c.hidden_size, c.intermediate_size, c.num_attention_heads, c.num_hidden_layers) == (64, 128, 2, 2)
    c = _shrunk(prediction_length=None, context_length=None, label_length=10)
    assert c.prediction_length and c.context_length and c.label_length <= c.context_length


def test_image_tokens_get_an_id_inside_the_text_vocabulary():
    c = _shrunk(vocab_size=65536, vocabulary_map=None)  # Chameleon: a map only a tokenizer fills
    assert c.vocabulary_map == {"<image>": 255}
    c = _shrunk(vocab_size=50272, num_query_tokens=32, image_token_index=None)  # BLIP-2
    assert c.image_token_index == 255
