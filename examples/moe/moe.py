"""A token-routing mixture-of-experts layer on grouped matmuls, and a short training run.

`MoE` follows the top-k routed feed-forward layer of Switch/Mixtral-style transformers:
a linear router scores every token against every expert, each token goes to its
`top_k` experts with softmax-normalized weights, tokens are sorted by expert so that
each expert's tokens are contiguous, two `torch._grouped_mm` calls (one group of rows
per expert) apply every expert's MLP (up projection, SiLU, down projection) in one
kernel each, and the weighted expert outputs are summed back per
token. The same code runs on CPU and on `neuron`.

Run: ``python examples/moe/moe.py --steps 20`` (trains on a synthetic regression task
on `neuron` and prints the loss).
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class MoE(nn.Module):
    """Top-k routed experts. Input (..., dim) float32/bfloat16 -> output of the same
    shape. `dim` and `hidden` must be multiples of 4 (grouped matmul's 16-byte rows)."""

    def __init__(self, dim: int, hidden: int, n_experts: int, top_k: int = 2):
        super().__init__()
        self.n_experts, self.top_k = n_experts, top_k
        self.router = nn.Linear(dim, n_experts, bias=False)
        self.w_up = nn.Parameter(torch.randn(n_experts, dim, hidden) / dim ** 0.5)
        self.w_down = nn.Parameter(torch.randn(n_experts, hidden, dim) / hidden ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        # Route: each token's top-k experts and their renormalized probabilities.
        probs = F.softmax(self.router(tokens), dim=-1)
        weights, experts = probs.topk(self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        # Dispatch: (token, expert) pairs sorted by expert; offs = each expert's end row.
        flat_experts = experts.reshape(-1)
        order = flat_experts.argsort(stable=True)
        token_of = order // self.top_k
        counts = F.one_hot(flat_experts, self.n_experts).sum(0)
        offs = counts.cumsum(0).to(torch.int32)
        # Experts: one grouped matmul per projection over all experts at once.
        h = F.silu(torch._grouped_mm(tokens[token_of], self.w_up, offs))
        y = torch._grouped_mm(h, self.w_down, offs)
        # Combine: weighted sum of each token's expert outputs.
        y = y * weights.reshape(-1)[order, None]
        out = torch.zeros_like(tokens).index_add(0, token_of, y)
        return out.reshape(shape)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="neuron")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), MoE(32, 64, n_experts=4, top_k=2), nn.Linear(32, 1)).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.randn(256, 8)
    y = (x[:, :1] * x[:, 1:2]).sin() + x[:, 2:3].abs()
    x, y = x.to(args.device), y.to(args.device)
    for step in range(args.steps):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step:3d} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
