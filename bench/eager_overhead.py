"""Per-op eager dispatch cost on `neuron` against CPU PyTorch and a bare `jax.jit` call.

Prints microseconds per op for a 1,000-element add and a 64x64 matmul: `neuron` eager,
CPU PyTorch eager, and the same op as one `jax.jit` call from Python (the floor for
sending one op to XLA), plus the ratio neuron / jax.jit. Each timed block issues
`--number` ops and then waits for the last result, so asynchronous dispatch is measured
as throughput. Usage: python bench/eager_overhead.py [--number 2000] [--repeats 7]
"""
import argparse
import os
import sys

import jax
import jax.numpy as jnp
import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import interleaved_min  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(2)

    cases = {
        "add 1000": (lambda x, y: x + y, (1000,), (1000,)),
        "matmul 64x64": (lambda x, y: x @ y, (64, 64), (64, 64)),
    }
    print(f"{'op':<14} {'neuron us':>10} {'cpu us':>8} {'jax.jit us':>11} {'neuron/jit':>11}")
    for name, (fn, sa, sb) in cases.items():
        a, b = torch.randn(sa), torch.randn(sb)
        na, nb = a.to("neuron"), b.to("neuron")
        ja, jb = jnp.asarray(a.numpy()), jnp.asarray(b.numpy())
        jfn = jax.jit(fn)
        for _ in range(10):  # compile and warm every path
            fn(na, nb), fn(a, b), jfn(ja, jb).block_until_ready()
        torch.neuron.synchronize()

        def run_neuron():
            for _ in range(args.number - 1):
                fn(na, nb)
            fn(na, nb).cpu()

        def run_cpu():
            for _ in range(args.number):
                fn(a, b)

        def run_jax():
            for _ in range(args.number - 1):
                jfn(ja, jb)
            jfn(ja, jb).block_until_ready()

        best = interleaved_min({"neuron": run_neuron, "cpu": run_cpu, "jax": run_jax}, repeats=args.repeats)
        us = {k: v / args.number * 1e6 for k, v in best.items()}
        print(f"{name:<14} {us['neuron']:>10.1f} {us['cpu']:>8.1f} {us['jax']:>11.1f} "
              f"{us['neuron'] / us['jax']:>10.2f}x")


if __name__ == "__main__":
    main()
