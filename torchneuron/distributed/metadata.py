"""Cross-rank agreement on what a collective is about to do (name, dtypes, shapes).

gloo, given tensors of different sizes or dtypes on different ranks, may reinterpret
bytes, fail with a transport error, or wait until the timeout. Before each collective the
`neuron` backend all_gathers one 64-bit digest of its description; when the digests
differ, the ranks exchange the descriptions themselves and every rank raises the same
`ValueError` naming what each rank called. Costs one small all_gather per collective;
`Checker.begin` only issues it, so the caller can stage its tensors to the host while
the digests travel.
"""
from __future__ import annotations

import hashlib
from typing import Callable, Iterable

import torch

#: Longest description exchanged after a mismatch, in bytes (longer ones are cut).
_DESCRIPTION_BYTES = 512


def describe(name: str, items: Iterable) -> str:
    """``name(dtype[shape], ..., extra)`` for the tensors (nested lists) and other
    values (reduce op, ...) that every rank must agree on."""
    parts = []

    def add(item):
        if isinstance(item, torch.Tensor):
            parts.append(f"{str(item.dtype).replace('torch.', '')}{list(item.shape)}")
        elif isinstance(item, (list, tuple)):
            for sub in item:
                add(sub)
        else:
            parts.append(str(item))
    add(items)
    return f"{name}({', '.join(parts)})"


def digest(text: str) -> int:
    """64-bit digest of a collective's description, as the ranks exchange it."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)


class Checker:
    """Cross-rank agreement on collectives for `group` (a gloo `Backend`): `begin(text)`
    starts the exchange and returns a function that waits for it and raises
    `ValueError` on every rank unless all ranks describe the same collective."""

    def __init__(self, group, rank: int, size: int):
        self._group = group
        self._rank = rank
        self._size = size

    def _all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        out = torch.empty(self._size * tensor.numel(), dtype=tensor.dtype)
        self._group._allgather_base(out, tensor).wait()
        return out.view(self._size, -1)

    def begin(self, text: str) -> Callable[[], None]:
        """Issues the exchange of this rank's digest of `text` (a `describe` result);
        the returned function must be called before the collective itself is issued."""
        if self._size == 1:
            return agreed
        mine = torch.full((1,), digest(text), dtype=torch.int64)
        digests = torch.empty(self._size, dtype=torch.int64)
        work = self._group._allgather_base(digests, mine)

        def finish() -> None:
            work.wait()
            if len(set(digests.tolist())) > 1:
                self._raise(text)
        return finish

    def _raise(self, text: str) -> None:
        raw = text.encode()[:_DESCRIPTION_BYTES]
        mine = torch.zeros(_DESCRIPTION_BYTES, dtype=torch.uint8)
        mine[:len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        texts = self._all_gather(mine)
        described = [bytes(row.tolist()).rstrip(b"\0").decode(errors="replace") for row in texts]
        lines = "; ".join(f"rank {r}: {d}" for r, d in enumerate(described))
        raise ValueError(f"mismatched collective across ranks (shapes, dtypes or operation "
                         f"differ): {lines}")


def agreed() -> None:
    """A world of one agrees with itself."""
