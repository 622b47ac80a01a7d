"""Peak memory and time of F.scaled_dot_product_attention on `neuron` (the blocked
online-softmax kernel) against the naive softmax(QK^T/sqrt(E))V on `neuron`, forward
plus backward, for sequence lengths 512 to 8192; ratios SDPA / naive.

Two memory measures per length:
- `peak MiB`: torch.neuron.max_memory_allocated over one forward+backward minus the
  memory held before it (reset_peak_memory_stats first). It counts tensors, so the
  naive version's (B, H, L, L) scores, probabilities and their gradients show; an
  executable's internal temporaries do not.
- `xla tmp MiB`: XLA's temporary buffer size of the compiled SDPA forward and backward
  executables (`memory_analysis().temp_size_in_bytes`), for the blocked kernel and for
  the dense formulation it replaced: this is where the kernel's memory lives, and it
  must grow linearly in the sequence length.

Usage: python bench/attention.py [--seqs 512,1024,2048,4096,8192] [--heads 4] [--dim 64]
[--repeats 3]. Prints one row per length.
"""
import argparse
import math
import os
import sys

import jax
import jax.numpy as jnp
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from common import interleaved_min  # noqa: E402

from torchneuron.kernels import attention  # noqa: E402

MiB = 2 ** 20


def naive(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def step(fn, q, k, v):
    """One forward and backward; returns after the gradients are on the host side of
    a synchronization."""
    out = fn(q, k, v)
    out.backward(torch.ones_like(out))
    torch.neuron.synchronize()


def peak_bytes(fn, q, k, v) -> int:
    torch.neuron.synchronize()
    base = torch.neuron.memory_allocated()
    torch.neuron.reset_peak_memory_stats()
    step(fn, q, k, v)
    peak = torch.neuron.max_memory_allocated() - base
    for t in (q, k, v):
        t.grad = None
    return peak


def dense_reference(q, k, v):
    """The dense formulation the kernel replaced: (L, S) scores in one piece."""
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1), v)


def xla_temp_bytes(shape) -> tuple:
    """(blocked, dense) temporary bytes of the compiled forward+backward."""
    x = jax.ShapeDtypeStruct(shape, jnp.float32)
    lse = jax.ShapeDtypeStruct(shape[:-1], jnp.float32)

    def blocked(q, k, v, do, o, l):
        return attention.forward(q, k, v)[0], attention.backward(do, q, k, v, None, o, l)

    def dense(q, k, v, do):
        out, vjp = jax.vjp(dense_reference, q, k, v)
        return out, vjp(do)

    b = jax.jit(blocked).lower(x, x, x, x, x, lse).compile().memory_analysis().temp_size_in_bytes
    d = jax.jit(dense).lower(x, x, x, x).compile().memory_analysis().temp_size_in_bytes
    return b, d


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqs", default="512,1024,2048,4096,8192")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(2)
    print(f"B=1 H={args.heads} E={args.dim} float32, forward+backward; ratios are sdpa / naive")
    print(f"{'L':>6} {'sdpa s':>8} {'naive s':>8} {'time x':>7} {'sdpa peak MiB':>14} {'naive peak MiB':>15} "
          f"{'mem x':>7} {'kernel xla tmp MiB':>19} {'dense xla tmp MiB':>18}")
    for L in (int(s) for s in args.seqs.split(",")):
        shape = (1, args.heads, L, args.dim)
        q, k, v = (torch.randn(shape).to("neuron").requires_grad_() for _ in range(3))
        fns = {"sdpa": F.scaled_dot_product_attention, "naive": naive}
        peaks = {name: peak_bytes(fn, q, k, v) for name, fn in fns.items()}  # also warms up

        def timed(fn):
            def run():
                step(fn, q, k, v)
                for t in (q, k, v):
                    t.grad = None
            return run

        times = interleaved_min({name: timed(fn) for name, fn in fns.items()}, repeats=args.repeats)
        blocked_tmp, dense_tmp = xla_temp_bytes(shape)
        print(f"{L:>6} {times['sdpa']:>8.3f} {times['naive']:>8.3f} {times['sdpa'] / times['naive']:>7.2f} "
              f"{peaks['sdpa'] / MiB:>14.1f} {peaks['naive'] / MiB:>15.1f} {peaks['sdpa'] / peaks['naive']:>7.3f} "
              f"{blocked_tmp / MiB:>19.1f} {dense_tmp / MiB:>18.1f}", flush=True)
        del q, k, v


if __name__ == "__main__":
    main()
