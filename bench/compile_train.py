"""torch.compile(backend="neuron") training steps against eager and Inductor.

For an MLP and the GPT example (4 layers, d=256, seq 128, batch 8 by default), prints
ms per training step (forward, backward, AdamW) for compiled `neuron`, eager `neuron`,
CPU eager and CPU torch.compile (Inductor), interleaved in one process, minimum over
repetitions; the ratio of compiled `neuron` to Inductor; and, from child processes
(one per configuration, so the numbers are not mixed): time to the first finished step
(compile latency) with a cold and with a warm on-disk cache, and peak RSS.
Usage: python bench/compile_train.py [--models mlp,gpt] [--skip-cold-inductor]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import interleaved_min, peak_rss_mib  # noqa: E402
from gpt_step import DEFAULT, make_step, sync  # noqa: E402

CONFIGS = {
    "neuron compiled": ("neuron", "neuron"),
    "neuron eager": ("neuron", None),
    "cpu eager": ("cpu", None),
    "cpu inductor": ("cpu", "inductor"),
}


def mlp_step(device, compile_backend=None, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024),
                                torch.nn.GELU(), torch.nn.Linear(1024, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    forward = torch.compile(model, backend=compile_backend) if compile_backend else model
    x = torch.randn(64, 512).to(device)
    y = torch.randint(0, 10, (64,)).to(device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def build(model, config):
    device, backend = CONFIGS[config]
    if model == "mlp":
        return mlp_step(device, backend)
    return make_step(device, **DEFAULT, compile_backend=backend)


def child(model, config):
    start = time.perf_counter()
    step = build(model, config)
    step().item()
    first = time.perf_counter() - start
    for _ in range(3):
        step().item()
    print(json.dumps({"first_step_s": first, "peak_rss_mib": peak_rss_mib()}))


def run_child(model, config, cache_dir):
    env = dict(os.environ, TORCHNEURON_CACHE_DIR=cache_dir, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_dir, "ind"))
    from torchneuron import _extension
    env["TORCHNEURON_EXTENSION_DIR"] = _extension._build_dir()
    out = subprocess.run([sys.executable, __file__, "--child", model, config], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--models", default="mlp,gpt")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    torch.set_num_threads(2)
    if a.child:
        return child(*a.child)
    for model in a.models.split(","):
        steps = {c: build(model, c) for c in CONFIGS}
        for step in steps.values():  # compile and warm up
            step().item()
            step().item()

        def timed(c):
            def run():
                for _ in range(a.steps):
                    loss = steps[c]()
                sync(CONFIGS[c][0], loss)
            return run

        best = interleaved_min({c: timed(c) for c in CONFIGS}, repeats=a.repeats)
        ms = {c: t / a.steps * 1e3 for c, t in best.items()}
        cold, warm = {}, {}
        for c in CONFIGS:
            with tempfile.TemporaryDirectory() as d:
                cold[c] = run_child(model, c, d)
                warm[c] = run_child(model, c, d)
        print(f"\n{model}: {'config':<16} {'ms/step':>9} {'first step cold s':>18} {'warm s':>8} {'peak RSS MiB':>13}")
        for c in CONFIGS:
            print(f"{'':<{len(model) + 2}}{c:<16} {ms[c]:>9.1f} {cold[c]['first_step_s']:>18.2f} "
                  f"{warm[c]['first_step_s']:>8.2f} {cold[c]['peak_rss_mib']:>13.0f}")
        print(f"{model}: neuron compiled / inductor = {ms['neuron compiled'] / ms['cpu inductor']:.2f}x step time; "
              f"neuron compiled / cpu eager = {ms['neuron compiled'] / ms['cpu eager']:.2f}x; "
              f"peak RSS neuron compiled / cpu eager = "
              f"{cold['neuron compiled']['peak_rss_mib'] / cold['cpu eager']['peak_rss_mib']:.2f}x")


if __name__ == "__main__":
    main()
