"""Trains the GPT of `model.py` on several processes with torch.distributed.

    torchrun --nproc-per-node 2 examples/gpt/train_dist.py --parallel ddp --steps 20
    torchrun --nproc-per-node 2 examples/gpt/train_dist.py --parallel fsdp --steps 20
    torchrun --nproc-per-node 2 examples/gpt/train_dist.py --parallel tp --steps 20
    torchrun --nproc-per-node 2 examples/gpt/train_dist.py --device cpu   # gloo on CPU

One process per device, as torchrun launches them; the process group uses the c10d
backend `neuron` (gloo for `--device cpu`). `--parallel`:

- ``ddp``: DistributedDataParallel; each rank trains on its slice of the global batch.
- ``fsdp``: FSDP2 (`fully_shard` on each block and on the model); data parallel like ddp,
  parameters, gradients and optimizer states sharded across ranks.
- ``tp``: tensor parallel (`parallelize_module`): each block's MLP has its first linear
  sharded by columns and its second by rows over a 1-D DeviceMesh; every rank sees the
  whole batch.

Every rank draws the same global batches (the same seeded generator as `train.py`), so
the losses equal those of one process training on the whole batch. Gradient clipping
(`--grad-clip`) applies to ddp and fsdp only, so tp's losses differ from theirs. Rank 0 prints the
mean loss of each step.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import torch
import torch.distributed as dist

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.gpt.data import get_batch, load_corpus, split  # noqa: E402
from examples.gpt.model import GPT, GPTConfig  # noqa: E402

PARALLEL_MODES = ("ddp", "fsdp", "tp")


@dataclass
class DistConfig:
    """A distributed run; the command-line flags mirror these fields. `batch_size`
    is the global batch, split evenly over the ranks for ddp and fsdp."""

    parallel: str = "ddp"
    device: str = "neuron"
    steps: int = 20
    batch_size: int = 8
    seq_len: int = 32
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    lr: float = 3e-3
    grad_clip: float = 1.0  # ddp and fsdp only; 0 to disable
    seed: int = 0

    def model_config(self) -> GPTConfig:
        # No dropout: the ranks' dropout masks would differ from one process's.
        return GPTConfig(seq_len=self.seq_len, n_layer=self.n_layer, n_head=self.n_head,
                         d_model=self.d_model, dropout=0.0)


def build_model(config: DistConfig, device: torch.device) -> torch.nn.Module:
    """The GPT on `device`, wrapped for `config.parallel` over the default process
    group. Raises ValueError for an unknown mode."""
    torch.manual_seed(config.seed)
    model = GPT(config.model_config()).to(device)
    if config.parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)
    mesh = _mesh(device)
    if config.parallel == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        return fully_shard(model, mesh=mesh)
    if config.parallel == "tp":
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       parallelize_module)

        for block in model.blocks:
            parallelize_module(block.mlp, mesh, {"fc": ColwiseParallel(), "proj": RowwiseParallel()})
        return model
    raise ValueError(f"unknown parallel mode {config.parallel!r}; one of {PARALLEL_MODES}")


def _mesh(device: torch.device):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (dist.get_world_size(),))


def local_batch(config: DistConfig, x: torch.Tensor, y: torch.Tensor):
    """This rank's slice of a global batch (all of it for tensor parallelism)."""
    if config.parallel == "tp":
        return x, y
    rank, world = dist.get_rank(), dist.get_world_size()
    if config.batch_size % world:
        raise ValueError(f"batch size {config.batch_size} is not divisible by {world} ranks")
    size = config.batch_size // world
    return x[rank * size:(rank + 1) * size], y[rank * size:(rank + 1) * size]


def train(config: DistConfig, model: torch.nn.Module, device: torch.device,
          distributed: bool = True) -> List[float]:
    """Runs `config.steps` AdamW steps; returns each step's loss on the global batch
    (averaged over ranks). `distributed=False`: one process on the whole batch."""
    # Tensor parallelism mixes DTensor and plain parameters, which the multi-tensor
    # (foreach) kernels cannot take in one list.
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr,
                                  foreach=False if config.parallel == "tp" else None)
    data_gen = torch.Generator().manual_seed(config.seed)
    train_data, _ = split(load_corpus())
    losses = []
    for _ in range(config.steps):
        x, y = get_batch(train_data, config.batch_size, config.seq_len, data_gen)
        if distributed:
            x, y = local_batch(config, x, y)
        _, loss = model(x.to(device), y.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip > 0 and config.parallel != "tp":
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        loss = loss.detach().clone()
        if distributed:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        losses.append(loss.item())
    return losses


def train_single(config: DistConfig, device: torch.device) -> List[float]:
    """The same run in one process on the whole batch, without torch.distributed."""
    torch.manual_seed(config.seed)
    model = GPT(config.model_config()).to(device)
    return train(config, model, device, distributed=False)


def parse_args(argv: Optional[List[str]] = None) -> DistConfig:
    d = DistConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parallel", choices=PARALLEL_MODES, default=d.parallel)
    p.add_argument("--device", default=d.device, help="neuron or cpu (default %(default)s)")
    for name in ("steps", "batch_size", "seq_len", "n_layer", "n_head", "d_model", "seed"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--grad-clip", type=float, default=d.grad_clip)
    return DistConfig(**vars(p.parse_args(argv)))


def main(argv: Optional[List[str]] = None) -> None:
    config = parse_args(argv)
    device = torch.device(config.device)
    dist.init_process_group("neuron" if device.type == "neuron" else "gloo")
    try:
        model = build_model(config, device)
        losses = train(config, model, device)
        if dist.get_rank() == 0:
            for step, loss in enumerate(losses, 1):
                print(f"step {step}: loss {loss:.4f}")
            print(f"final: {config.parallel} on {dist.get_world_size()} x {device.type} | "
                  f"loss {losses[-1]:.4f}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
