"""Host buffers for host-staged collectives, reused across calls.

A fresh large CPU tensor costs a page fault per 4 KiB page on first touch (glibc maps
allocations above 32 MiB anew each time), which on a loaded machine costs more than
the copy into it. Collectives of the same sizes repeat (DDP buckets, FSDP2 shards,
training steps), so released buffers are kept, up to `MAX_FREE_BYTES` in all.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from typing import Dict, List, Tuple

import torch

#: Most bytes of released buffers kept for reuse; a release beyond it frees the buffer.
MAX_FREE_BYTES = 1 << 30


class HostPool:
    """Free lists of contiguous CPU tensors by (dtype, number of elements)."""

    def __init__(self, max_free_bytes: int = MAX_FREE_BYTES):
        self._free: Dict[Tuple[torch.dtype, int], List[torch.Tensor]] = defaultdict(list)
        self._free_bytes = 0
        self._max = max_free_bytes
        self._lock = threading.Lock()

    def acquire(self, shape, dtype: torch.dtype) -> torch.Tensor:
        """A contiguous CPU tensor of `shape` and `dtype` with arbitrary values."""
        numel = 1
        for size in shape:
            numel *= size
        with self._lock:
            free = self._free.get((dtype, numel))
            if free:
                flat = free.pop()
                self._free_bytes -= flat.nbytes
                return flat.view(shape)
        return torch.empty(shape, dtype=dtype)

    def release(self, tensor: torch.Tensor) -> None:
        """Gives back a tensor from `acquire`; the caller no longer uses it."""
        with self._lock:
            if self._free_bytes + tensor.nbytes > self._max:
                return
            self._free[(tensor.dtype, tensor.numel())].append(tensor.view(-1))
            self._free_bytes += tensor.nbytes
