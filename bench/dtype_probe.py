"""First-call cost of the dtype probe (`torchneuron/eager/refusal.py`): eager calls of new
signatures on `neuron` with the probe against the same calls with it switched off.

Each timed block runs a dozen common ops (elementwise, reductions, matmul, norms,
convolution, pooling, a loss) on shapes no earlier block used, so every call misses the
executable cache and compiles, as the first step of a model does; the probe's cache of
decisions is cleared before each block. Prints milliseconds per block for both
configurations and the ratio with / without. Usage: python bench/dtype_probe.py
[--repeats 5]
"""
import argparse
import itertools
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from common import interleaved_min  # noqa: E402

from torchneuron.eager import refusal  # noqa: E402

_sizes = itertools.count(8)


def block():
    n = next(_sizes)
    x = torch.randn(4, n, device="neuron")
    w = torch.randn(n, n, device="neuron")
    img = torch.randn(2, 3, n, n, device="neuron")
    kernel = torch.randn(4, 3, 3, 3, device="neuron")
    target = torch.randint(0, n, (4,), device="neuron")
    outs = [x + 1, x * x, x.exp(), F.gelu(x), x.sum(1), x.amax(1), x @ w, F.layer_norm(x, (n,)),
            torch.softmax(x, 1), F.conv2d(img, kernel), F.max_pool2d(img, 2), F.cross_entropy(x, target)]
    torch.neuron.synchronize()
    return outs


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(2)
    check = refusal.check_dtypes

    def with_probe():
        refusal._refusals.clear()
        refusal.check_dtypes = check
        block()

    def without_probe():
        refusal.check_dtypes = lambda op, values: None
        block()

    block()  # first-use costs (imports, JAX's own caches) out of the timed blocks
    best = interleaved_min({"probe": with_probe, "no probe": without_probe}, repeats=args.repeats)
    refusal.check_dtypes = check
    for name, seconds in best.items():
        print(f"{name:>9}: {seconds * 1e3:8.1f} ms per block of 12 new signatures (min of {args.repeats})")
    print(f"    ratio: {best['probe'] / best['no probe']:.3f} (probe / no probe)")


if __name__ == "__main__":
    main()
