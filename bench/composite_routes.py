"""Per-call cost of CPU's dtype checks in front of composite ops (`torchneuron/eager/
cpu_routes.py`): `F.dropout` and `F.max_pool1d` on `neuron` against ATen's composite
kernels they run, called directly (`OpOverload._op_dk(CompositeImplicitAutograd)`:
what the dispatcher ran before the checks were registered).

Both sides run the same executables (warmed up first), so the difference is the
check's Python kernel. Prints microseconds per call, min over interleaved repetitions,
and the ratio checked / composite. Usage:
python bench/composite_routes.py [--repeats 7] [--calls 200]
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from common import interleaved_min  # noqa: E402

import torchneuron  # noqa: E402,F401  (registers the device)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(2)
    x = torch.randn(64, 256, device="neuron")
    seq = torch.randn(8, 64, 32, device="neuron")

    def timed(fn):
        def run():
            for _ in range(args.calls):
                fn()
            torch.neuron.synchronize()
        return run

    aten, composite = torch.ops.aten, torch._C.DispatchKey.CompositeImplicitAutograd
    configs = {
        "F.dropout": timed(lambda: F.dropout(x, 0.1)),
        "dropout composite": timed(lambda: aten.dropout.default._op_dk(composite, x, 0.1, True)),
        "F.max_pool1d": timed(lambda: F.max_pool1d(seq, 2)),
        "max_pool1d composite": timed(lambda: aten.max_pool1d.default._op_dk(composite, seq, [2], [], [0], [1],
                                                                              False)),
    }
    for fn in configs.values():
        fn()
    best = interleaved_min(configs, repeats=args.repeats)
    us = {name: seconds / args.calls * 1e6 for name, seconds in best.items()}
    for name, value in us.items():
        print(f"{name:>24}: {value:7.1f} us per call (min of {args.repeats})")
    print(f"ratio F.dropout / composite: {us['F.dropout'] / us['dropout composite']:.2f}")
    print(f"ratio F.max_pool1d / composite: {us['F.max_pool1d'] / us['max_pool1d composite']:.2f}")

if __name__ == "__main__":
    main()
