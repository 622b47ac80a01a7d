"""`transformers.Trainer` on `neuron` with no device in user code: accelerate selects
the device, and the losses of a few fine-tuning steps equal the CPU's, in eager mode,
with `torch_compile=True` (the `neuron` compile backend) and with bf16 autocast."""
import pytest
import torch
from transformers import Trainer, TrainingArguments

import hf_tiny
import torchneuron.metrics
from helpers import no_fallback

STEPS = 3


class TokenWindows(torch.utils.data.Dataset):
    """24 fixed random windows of 8 token ids, each its own language-modelling label."""

    def __init__(self):
        self.ids = torch.randint(3, 64, (24, 8), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _train(tmp_path, **kwargs):
    """(trainer, per-step training losses) of STEPS AdamW steps on a fresh tiny GPT-2."""
    model = hf_tiny.tiny_gpt2(seed=0)
    # Nothing names a device: use_cpu is only passed by the CPU reference runs.
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=STEPS, per_device_train_batch_size=8,
                             learning_rate=5e-3, logging_steps=1, report_to=[], save_strategy="no",
                             seed=0, disable_tqdm=True, **kwargs)
    trainer = Trainer(model=model.train(), args=args, train_dataset=TokenWindows())
    trainer.train()
    return trainer, [h["loss"] for h in trainer.state.log_history if "loss" in h]


@pytest.fixture(scope="module")
def cpu_losses(tmp_path_factory):
    losses = _train(tmp_path_factory.mktemp("cpu"), use_cpu=True)[1]
    assert len(losses) == STEPS and losses[-1] < losses[0]  # it learns: the steps update weights
    return losses


def test_trainer_picks_neuron_and_matches_cpu_losses(tmp_path, cpu_losses):
    with no_fallback():
        trainer, losses = _train(tmp_path)
    assert trainer.args.device == torch.device("neuron:0")
    assert {p.device.type for p in trainer.model.parameters()} == {"neuron"}
    assert losses == pytest.approx(cpu_losses, rel=1e-5)


def test_trainer_torch_compile_uses_neuron_backend(tmp_path, cpu_losses):
    before = torchneuron.metrics.get("graph_executions")
    with no_fallback():
        trainer, losses = _train(tmp_path, torch_compile=True)
    assert trainer.args.torch_compile_backend == "neuron"
    # Forward and backward graphs of every step ran as neuron executables.
    assert torchneuron.metrics.get("graph_executions") - before >= 2 * STEPS
    assert losses == pytest.approx(cpu_losses, rel=1e-5)


def test_trainer_bf16_autocasts_on_neuron(tmp_path, cpu_losses):
    dtypes = set()

    def record(module, args, out):
        if type(module).__name__ == "Conv1D":  # GPT-2's linear projections
            dtypes.add(out.dtype)

    hook = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        with no_fallback():
            trainer, losses = _train(tmp_path, bf16=True)
    finally:
        hook.remove()
    assert trainer.args.device.type == "neuron"
    assert dtypes == {torch.bfloat16}
    # bf16 rounding moves the losses a little off the float32 CPU run.
    assert losses == pytest.approx(cpu_losses, rel=5e-3)
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}  # master weights
