"""Trains the small GPT of `model.py` on the Python standard library's source bytes.

    python examples/gpt/train.py --steps 50                 # on neuron
    python examples/gpt/train.py --steps 50 --device cpu    # the same run on the CPU
    python examples/gpt/train.py --steps 100 --resume       # continue from the checkpoint

A plain PyTorch loop: AdamW, gradient clipping, periodic train/val evaluation, a
checkpoint (model, optimizer, step, RNG states) every `--ckpt-interval` steps. The last
line printed holds the final losses and the training throughput in tokens/s.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import torch
from tqdm import tqdm

if __package__ in (None, ""):
    # Started as a file: make the repository root importable for `examples.gpt`.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.gpt.data import get_batch, load_corpus, split  # noqa: E402
from examples.gpt.model import GPT, GPTConfig  # noqa: E402

CHECKPOINT_NAME = "ckpt.pt"


@dataclass
class TrainConfig:
    """Everything a run depends on; the command-line flags mirror these fields."""

    device: str = "neuron"
    steps: int = 50
    batch_size: int = 16
    seq_len: int = 64
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    dropout: float = 0.1
    lr: float = 3e-3
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    eval_interval: int = 25  # also after the last step; 0: never evaluate
    eval_iters: int = 4
    ckpt_interval: int = 50  # also after the last step; 0: never write a checkpoint
    out_dir: str = "runs/gpt"
    resume: bool = False
    compile: bool = False  # torch.compile the model (backend "neuron" on neuron, Inductor on cpu)
    progress: bool = True

    def model_config(self) -> GPTConfig:
        return GPTConfig(seq_len=self.seq_len, n_layer=self.n_layer, n_head=self.n_head,
                         d_model=self.d_model, dropout=self.dropout)


@dataclass
class TrainResult:
    """What a call of `train` did: `losses[i]` is the training loss of step
    `start_step + i + 1`; `evals` maps a step to its {"train": loss, "val": loss};
    `step_times[i]` is the wall time of that step in seconds."""

    start_step: int
    tokens_per_step: int
    losses: List[float] = field(default_factory=list)
    evals: Dict[int, Dict[str, float]] = field(default_factory=dict)
    step_times: List[float] = field(default_factory=list)

    def tokens_per_s(self, skip: int = 0) -> float:
        """Training throughput over the steps after the first `skip` (which, on a
        compiling device, carry the one-time compilation)."""
        times = self.step_times[skip:]
        return self.tokens_per_step * len(times) / sum(times) if times else float("nan")


def make_optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and embeddings only, not on biases and
    LayerNorm parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr)


def _device_module(device: torch.device):
    return None if device.type == "cpu" else torch.get_device_module(device)


def save_checkpoint(path: str, model, optimizer, step: int, data_gen: torch.Generator,
                    config: TrainConfig) -> None:
    """Writes model, optimizer, step and every RNG state; atomic, so an interrupted
    save leaves the previous checkpoint intact."""
    device = next(model.parameters()).device
    device_module = _device_module(device)
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": step,
        "config": dataclasses.asdict(config.model_config()),
        "rng": {
            "cpu": torch.get_rng_state(),
            "device": device_module.get_rng_state(device) if device_module else None,
            "data": data_gen.get_state(),
        },
    }
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str, model, optimizer, data_gen: torch.Generator) -> int:
    """Restores what `save_checkpoint` wrote into `model`, `optimizer`, the RNGs and
    `data_gen`; returns the step the checkpoint was taken after."""
    state = torch.load(path, map_location="cpu")
    saved = GPTConfig(**state["config"])
    if saved != model.config:
        raise ValueError(f"checkpoint {path} is of a different model: {saved} != {model.config}")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    device = next(model.parameters()).device
    torch.set_rng_state(state["rng"]["cpu"])
    device_module = _device_module(device)
    if device_module and state["rng"]["device"] is not None:
        device_module.set_rng_state(state["rng"]["device"], device)
    data_gen.set_state(state["rng"]["data"])
    return state["step"]


@torch.no_grad()
def evaluate(model: torch.nn.Module, splits: Dict[str, torch.Tensor], config: TrainConfig) -> Dict[str, float]:
    """Mean loss over `eval_iters` batches of each split. The batches come from a
    generator of their own, so evaluating does not change the training batches, and
    every evaluation of a run sees the same batches."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = {}
    for name, data in splits.items():
        gen = torch.Generator().manual_seed(config.seed + 1)
        total = 0.0
        for _ in range(config.eval_iters):
            x, y = get_batch(data, config.batch_size, config.seq_len, gen)
            _, loss = model(x.to(device), y.to(device))
            total += loss.item()
        out[name] = total / config.eval_iters
    model.train(was_training)
    return out


def train(config: TrainConfig) -> TrainResult:
    """Runs (or, with `config.resume`, continues) training up to `config.steps` steps."""
    device = torch.device(config.device)
    torch.manual_seed(config.seed)
    # Built on the CPU first so the initial weights are the same on every device.
    model = GPT(config.model_config()).to(device)
    optimizer = make_optimizer(model, config)
    data_gen = torch.Generator().manual_seed(config.seed)
    train_data, val_data = split(load_corpus())
    ckpt_path = os.path.join(config.out_dir, CHECKPOINT_NAME)

    start = 0
    if config.resume:
        if not os.path.exists(ckpt_path):
            raise FileNotFoundError(f"--resume: no checkpoint at {ckpt_path}")
        start = load_checkpoint(ckpt_path, model, optimizer, data_gen)
    result = TrainResult(start_step=start, tokens_per_step=config.batch_size * config.seq_len)
    forward = model
    if config.compile:
        # Checkpoints keep holding the plain model's state; the compiled wrapper runs it.
        forward = torch.compile(model, backend="neuron" if device.type == "neuron" else "inductor")
    n_params = sum(p.numel() for p in model.parameters())
    tqdm.write(f"device {device} | {n_params / 1e6:.2f}M parameters | {len(train_data):,} train bytes, "
               f"{len(val_data):,} val bytes | steps {start + 1}..{config.steps}", file=sys.stdout)

    model.train()
    bar = tqdm(range(start + 1, config.steps + 1), initial=start, total=config.steps, unit="step",
               disable=not config.progress, dynamic_ncols=True)
    for step in bar:
        t0 = time.perf_counter()
        x, y = get_batch(train_data, config.batch_size, config.seq_len, data_gen)
        _, loss = forward(x.to(device), y.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        value = loss.item()
        result.step_times.append(time.perf_counter() - t0)
        if not math.isfinite(value):
            raise FloatingPointError(f"loss is {value} at step {step}")
        result.losses.append(value)
        bar.set_postfix(loss=f"{value:.4f}")

        if config.eval_interval and (step % config.eval_interval == 0 or step == config.steps):
            losses = evaluate(forward, {"train": train_data, "val": val_data}, config)
            result.evals[step] = losses
            tqdm.write(f"step {step}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}",
                       file=sys.stdout)
        if config.ckpt_interval and (step % config.ckpt_interval == 0 or step == config.steps):
            save_checkpoint(ckpt_path, model, optimizer, step, data_gen, config)
    bar.close()
    return result


def parse_args(argv: Optional[List[str]] = None) -> TrainConfig:
    """The command line as a `TrainConfig`."""
    d = TrainConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=d.device, help="neuron or cpu (default %(default)s)")
    p.add_argument("--steps", type=int, default=d.steps, help="train up to this step (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--seq-len", type=int, default=d.seq_len, help="context length in bytes")
    p.add_argument("--n-layer", type=int, default=d.n_layer)
    p.add_argument("--n-head", type=int, default=d.n_head)
    p.add_argument("--d-model", type=int, default=d.d_model)
    p.add_argument("--dropout", type=float, default=d.dropout)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--grad-clip", type=float, default=d.grad_clip, help="max gradient norm, 0 to disable")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--eval-interval", type=int, default=d.eval_interval,
                   help="evaluate every N steps and after the last; 0: never")
    p.add_argument("--eval-iters", type=int, default=d.eval_iters, help="batches per evaluation")
    p.add_argument("--ckpt-interval", type=int, default=d.ckpt_interval,
                   help="checkpoint every N steps and after the last; 0: never")
    p.add_argument("--out-dir", default=d.out_dir, help="checkpoint directory (default %(default)s)")
    p.add_argument("--resume", action="store_true", help=f"continue from OUT_DIR/{CHECKPOINT_NAME}")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model: backend neuron on neuron, Inductor on cpu")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    return TrainConfig(**vars(p.parse_args(argv)))


def main(argv: Optional[List[str]] = None) -> None:
    config = parse_args(argv)
    result = train(config)
    final = result.evals.get(config.steps, {})
    val = f"{final['val']:.4f}" if final else "n/a"
    last = f"{result.losses[-1]:.4f}" if result.losses else "n/a"
    if torch.device(config.device).type == "neuron":
        import torchneuron

        fallbacks = torchneuron.fallback_ops()
        if fallbacks:
            print(f"ops that ran through the CPU fallback (calls): {fallbacks}")
    speed = f"{result.tokens_per_s():,.0f} tokens/s" if result.step_times else "no training step run"
    if len(result.step_times) > 1:
        speed += f" ({result.tokens_per_s(skip=1):,.0f} after the first step)"
    print(f"final: step {config.steps} | last batch loss {last} | val loss {val} | {speed}")


if __name__ == "__main__":
    main()
