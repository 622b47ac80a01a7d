"""all_reduce whose cross-rank check travels inside its own data, for repeated
all_reduces.

The separate check (`metadata.Checker`) is one more exchange per collective; on a
loaded machine each exchange costs both processes a wake-up, about as much as a 1 MB
all_reduce itself. It cannot simply ride along with the data: gloo, given buffers of
different sizes on different ranks, waits for bytes that never come.

So the ranks agree on the size in advance. Every rank keeps the same history of agreed
all_reduces (`Predictor`), and from it the same prediction of the next one: the one
that followed the last all_reduce the last two times. When there is a prediction, every
rank all_reduces a buffer of the predicted collective's size: its data if its own
collective is the prediction, zeros otherwise, followed by a header in which each rank
writes the digest of its own description into its row and the reduction's identity
into the others (`write_header`), so that the reduced header holds every rank's digest.
Sizes always agree, and every rank learns every rank's digest:

- all digests are the prediction's: the data is the result (the common case: one
  exchange, no separate check);
- all digests are equal but not the prediction's (a misprediction): each rank then
  runs its collective without a further check, since all agree;
- digests differ: every rank raises `ValueError` (a rank whose collective was the
  prediction, when it waits for the result).

Each rank updates its history by the same rule from what every rank learns, so
predictions stay equal on every rank.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

#: Largest predicted all_reduce run this way, in bytes: a misprediction costs an
#: all_reduce of the predicted size, and for large ones the separate check's exchange is
#: small next to the data anyway.
MAX_BYTES = 16 << 20

#: A digest travels as 8 bytes, one per header element: integers up to 255 are exact in
#: every dtype below (bfloat16 has 8 significant bits).
PIECES = 8

#: gloo's reduction dtypes whose header is exact (not int8: 255 does not fit; gloo has
#: no int16 or complex reductions, and `torch.distributed` passes complex tensors as real).
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint8, torch.int32,
          torch.int64)
_OPS = {"SUM", "PRODUCT", "MIN", "MAX"}

#: Agreed all_reduces remembered before the history restarts (at the same call on
#: every rank, so predictions stay equal).
MAX_ENTRIES = 1024


class Spec:
    """What a predicted all_reduce exchanges: its flat size, dtype and reduce op."""

    __slots__ = ("numel", "dtype", "op")

    def __init__(self, numel: int, dtype: torch.dtype, op: dist.ReduceOp):
        self.numel, self.dtype, self.op = numel, dtype, op


def spec(tensors: List[torch.Tensor], op: dist.ReduceOp) -> Optional[Spec]:
    """The `Spec` of an all_reduce of `tensors` (after AVG became SUM), or None when it
    cannot carry its check: more than one tensor, a dtype whose header would not be
    exact, an op without an identity here, or more than `MAX_BYTES`. It depends only on
    what the description states (not the device), so it is the same on every rank."""
    if len(tensors) != 1:
        return None
    t = tensors[0]
    name = op.op.name
    if t.dtype not in DTYPES or name not in _OPS or t.numel() * t.element_size() > MAX_BYTES:
        return None
    return Spec(t.numel(), t.dtype, op)


def header_len(world: int) -> int:
    return world * PIECES


def pieces(digest: int) -> Tuple[int, ...]:
    """The header row of a rank with `digest` (a signed 64-bit `metadata.digest`)."""
    return tuple((digest & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(PIECES, "little"))


def _identity(name: str, dtype: torch.dtype):
    if name == "SUM":
        return 0
    if name == "PRODUCT":
        return 1
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    return info.max if name == "MIN" else info.min


def write_header(header: torch.Tensor, rank: int, digest: int, op: dist.ReduceOp) -> None:
    """Fills `header` (``header_len(world)`` elements): `digest`'s bytes in row `rank`,
    the identity of `op` elsewhere."""
    rows = header.view(-1, PIECES)
    rows.fill_(_identity(op.op.name, header.dtype))
    rows[rank] = torch.tensor(pieces(digest), dtype=torch.int64).to(header.dtype)


def read_header(header: torch.Tensor) -> List[Tuple[int, ...]]:
    """Each rank's digest bytes from a reduced header."""
    values = header.real if header.is_complex() else header
    return [tuple(row) for row in values.view(-1, PIECES).to(torch.int64).tolist()]


def mismatch(rank: int, found: List[Tuple[int, ...]], known: Dict[Tuple[int, ...], str]) -> ValueError:
    """The error every rank raises when the digests differ; `known` names the
    descriptions this rank can tell from their digests."""
    lines = "; ".join(f"rank {r}: {known.get(d, 'a different collective')}" for r, d in enumerate(found))
    return ValueError(f"mismatched collective across ranks (shapes, dtypes or operation differ): "
                      f"{lines} (seen by rank {rank})")


class Predictor:
    """The agreed history of one process group's all_reduces: which one followed which,
    and whether that happened twice in a row."""

    def __init__(self, max_entries: int = MAX_ENTRIES):
        self._next: Dict[str, Tuple[str, Optional[Spec], bool]] = {}
        self._last: Optional[str] = None
        self._max = max_entries

    def predict(self) -> Optional[Tuple[str, Spec]]:
        """(description, spec) of the all_reduce expected next, or None."""
        entry = self._next.get(self._last) if self._last is not None else None
        if entry is None or entry[1] is None or not entry[2]:
            return None
        return entry[0], entry[1]

    def record(self, text: str, spec_: Optional[Spec]) -> None:
        """Notes that every rank ran (or, by the rules above, counts as having run)
        all_reduce `text`."""
        if len(self._next) >= self._max:
            self._next.clear()
        if self._last is not None:
            previous = self._next.get(self._last)
            self._next[self._last] = (text, spec_, previous is not None and previous[0] == text)
        self._last = text
