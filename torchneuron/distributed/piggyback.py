"""all_reduce whose cross-rank check travels inside its own data, for repeated
collective sequences.

The separate check (`metadata.Checker`) is one more exchange per collective; on a
loaded machine each exchange costs both processes a wake-up, about as much as a 1 MB
all_reduce itself. It cannot simply ride along with the data: gloo, given buffers of
different sizes on different ranks, waits for bytes that never come.

So the ranks agree on the size in advance. Every rank keeps the same history of the
collectives the group agreed on (`Predictor`), and from it the same prediction of the
next one: the collective that followed the same recent collectives the last two times
(the longest such context seen, up to `CONTEXT` collectives). When the prediction is an all_reduce that can carry its check (`spec`), every
collective of every rank starts with an all_reduce of the predicted size: a rank whose
collective is the prediction all_reduces its data, any other rank zeros, each followed
by a header in which each rank writes the digest of its own description into its row
and the reduction's identity into the others (`write_header`), so that the reduced
header holds every rank's digest. Sizes always agree, and every rank learns every
rank's digest:

- all digests are the prediction's: the data is the result (the common case: one
  exchange, no separate check);
- all digests are equal but not the prediction's (a misprediction, which costs one
  all_reduce of the predicted size): each rank then runs its collective without a
  further check, since all agree;
- digests differ: every rank raises `ValueError` (a rank whose collective was the
  prediction, when it waits for the result).

Each rank updates its history by the same rule from what every rank learns, so
predictions stay equal on every rank. Point-to-point operations are not collectives
and take no part.
"""
from __future__ import annotations

from collections import deque
from typing import Deque, Dict, List, Optional, Tuple

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

#: Contexts remembered before the history restarts (at the same call on every rank, so
#: predictions stay equal).
MAX_ENTRIES = 8192

#: Most collectives a prediction is keyed on. One is not enough: DDP's equal-sized
#: buckets make patterns such as A A A B, where "after A" is A three times and B once,
#: and each B would be mispredicted.
CONTEXT = 8


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
    """The agreed history of one process group's collectives: which one followed each
    context (each of the last 1 to `CONTEXT` descriptions), and whether it did twice in
    a row.

    The longest confirmed context decides, as in prediction by partial matching, unless
    a longer context was last followed by something else: a new steady repetition is
    predicted from its fourth call on (its one-collective context), and a period such
    as A A A B, once seen twice, by the contexts that tell its steps apart."""

    def __init__(self, max_entries: int = MAX_ENTRIES, context: int = CONTEXT):
        self._next: Dict[Tuple[str, ...], Tuple[str, Optional[Spec], bool]] = {}
        self._recent: Deque[str] = deque(maxlen=context)
        self._max = max_entries

    def _contexts(self):
        recent = tuple(self._recent)
        return [recent[-n:] for n in range(len(recent), 0, -1)]

    def predict(self) -> Optional[Tuple[str, Spec]]:
        """(description, spec) of the all_reduce expected next, or None when the next
        collective is unknown, unconfirmed, or cannot carry its check."""
        longer = set()  # what followed the longer, unconfirmed contexts last time
        for key in self._contexts():
            entry = self._next.get(key)
            if entry is None:
                continue
            text, spec_, confirmed = entry
            if not confirmed:
                longer.add(text)
                continue
            if spec_ is None or longer - {text}:
                return None
            return text, spec_
        return None

    def record(self, text: str, spec_: Optional[Spec]) -> None:
        """Notes that every rank ran (or, by the rules above, counts as having run) the
        collective described by `text`; `spec_` is its `Spec` if it can carry its check."""
        if len(self._next) + len(self._recent) > self._max:
            self._next.clear()
        for key in self._contexts():
            previous = self._next.get(key)
            self._next[key] = (text, spec_, previous is not None and previous[0] == text)
        self._recent.append(text)
