"""A GPT training step (forward, backward, AdamW) for the benchmarks, from examples/gpt."""
from __future__ import annotations

import copy
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from examples.gpt.model import GPT, GPTConfig  # noqa: E402

#: The reference configuration of the benchmarks (4-layer GPT, d=256, seq 128, batch 8).
DEFAULT = dict(n_layer=4, d_model=256, n_head=4, seq_len=128, batch=8)


def make_step(device: str, n_layer: int, d_model: int, n_head: int, seq_len: int, batch: int,
              compile_backend: str | None = None, seed: int = 0):
    """A zero-argument function running one training step on `device` and returning the
    loss tensor; dropout is off so every configuration does the same work."""
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=256, seq_len=seq_len, n_layer=n_layer, n_head=n_head, d_model=d_model,
                       dropout=0.0)
    model = GPT(config).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    forward = torch.compile(model, backend=compile_backend) if compile_backend else model
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (batch, seq_len), generator=gen).to(device)
    y = torch.randint(0, 256, (batch, seq_len), generator=gen).to(device)

    def step():
        opt.zero_grad(set_to_none=True)
        _, loss = forward(x, y)
        loss.backward()
        opt.step()
        return loss

    return step


def sync(device: str, loss: torch.Tensor) -> float:
    """Waits for the step, optimizer update included, to finish; returns the loss."""
    value = loss.item()
    if device.startswith("neuron"):
        torch.neuron.synchronize()
    return value
