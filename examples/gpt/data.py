"""Training text available offline: the Python standard library's own source files,
as a byte-level token stream (vocabulary of 256)."""
from __future__ import annotations

import functools
import os
import sysconfig
from typing import Tuple

import torch

#: Directories under the stdlib that are not the standard library's own source.
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}


def source_files(root: str | None = None) -> list[str]:
    """The `.py` files under the stdlib directory, in a fixed (sorted) order so that
    every machine with the same Python builds the same corpus."""
    root = root or sysconfig.get_paths()["stdlib"]
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        files.extend(os.path.join(dirpath, f) for f in filenames if f.endswith(".py"))
    return sorted(files, key=lambda p: os.path.relpath(p, root))


@functools.lru_cache(maxsize=1)
def load_corpus() -> torch.Tensor:
    """All standard-library source bytes, concatenated: a 1-D uint8 tensor (about 34 MB
    for CPython 3.11). Cached, since tests build several trainers in one process."""
    chunks = []
    for path in source_files():
        with open(path, "rb") as f:
            chunks.append(f.read())
    return torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8)


def split(data: torch.Tensor, val_fraction: float = 0.1) -> Tuple[torch.Tensor, torch.Tensor]:
    """(train, val): the first and the last `val_fraction` of the stream."""
    n_val = int(len(data) * val_fraction)
    return data[: len(data) - n_val], data[len(data) - n_val:]


def get_batch(data: torch.Tensor, batch_size: int, seq_len: int,
              generator: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` random windows of `seq_len` bytes (inputs) and the same windows
    shifted by one byte (targets), as int64 CPU tensors. Drawing from an explicit CPU
    generator makes the batches identical on every device and restorable on resume."""
    starts = torch.randint(len(data) - seq_len - 1, (batch_size,), generator=generator).tolist()
    windows = torch.stack([data[s: s + seq_len + 1] for s in starts]).long()
    return windows[:, :-1], windows[:, 1:]
