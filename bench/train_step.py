"""ms per GPT training step (forward, backward, AdamW): eager `neuron` vs eager CPU.

Timing: both configurations in one process, interleaved, minimum over repetitions of
`--steps` steps each (each repetition ends with `loss.item()`, so device work is
included). Peak RSS: each configuration runs alone in a child process (RSS is per
process), reporting its peak resident set size.
Usage: python bench/train_step.py [--layers 4 --d-model 256 --seq 128 --batch 8]
"""
import argparse
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import interleaved_min, peak_rss_mib  # noqa: E402
from gpt_step import DEFAULT, make_step, sync  # noqa: E402


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--layers", type=int, default=DEFAULT["n_layer"])
    p.add_argument("--d-model", type=int, default=DEFAULT["d_model"])
    p.add_argument("--heads", type=int, default=DEFAULT["n_head"])
    p.add_argument("--seq", type=int, default=DEFAULT["seq_len"])
    p.add_argument("--batch", type=int, default=DEFAULT["batch"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rss-only", choices=["neuron", "cpu"], help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _shape(a):
    return dict(n_layer=a.layers, d_model=a.d_model, n_head=a.heads, seq_len=a.seq, batch=a.batch)


def _rss_child(a, device):
    step = make_step(device, **_shape(a))
    for _ in range(a.steps + 2):
        sync(device, step())
    print(json.dumps({"peak_rss_mib": peak_rss_mib()}))


def _rss(device):
    cmd = [sys.executable, __file__, "--rss-only", device] + sys.argv[1:]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mib"]


def main():
    a = _args()
    torch.set_num_threads(2)
    if a.rss_only:
        return _rss_child(a, a.rss_only)
    steps = {dev: make_step(dev, **_shape(a)) for dev in ("neuron", "cpu")}
    for dev, step in steps.items():  # compile and warm up
        for _ in range(2):
            sync(dev, step())

    def timed(dev):
        def run():
            for _ in range(a.steps):
                loss = steps[dev]()
            sync(dev, loss)
        return run

    best = interleaved_min({dev: timed(dev) for dev in steps}, repeats=a.repeats)
    ms = {dev: t / a.steps * 1e3 for dev, t in best.items()}
    rss = {dev: _rss(dev) for dev in steps}
    print(f"GPT {_shape(a)}")
    print(f"{'config':<14} {'ms/step':>9} {'peak RSS MiB':>13}")
    for dev in steps:
        print(f"{'eager ' + dev:<14} {ms[dev]:>9.1f} {rss[dev]:>13.0f}")
    print(f"ratio neuron/cpu: time {ms['neuron'] / ms['cpu']:.2f}x, peak RSS {rss['neuron'] / rss['cpu']:.2f}x")


if __name__ == "__main__":
    main()
