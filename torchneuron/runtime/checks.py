"""Device-side checks (out-of-range indices), raised like CUDA's device asserts.

An op that can fail on values it only sees on the device (an index past the end)
returns a boolean flag next to its result. The flags are kept here and read at the next
synchronization point (`.item()`, `.cpu()`, printing, `torch.neuron.synchronize()`),
where the first failed one raises its error; with `TORCHNEURON_SYNC_CHECKS=1` every
flag is read right after its op.
"""
from __future__ import annotations

import jax

from .. import config

_MAX_PENDING = 256
_pending: list = []


def add(flag, exc_type, message) -> None:
    """Records a device-side check: `flag` (a JAX bool scalar) false means
    `exc_type(message)`. With `exc_type` None, `flag` is any JAX array and `message` a
    callable that gets its host value and raises if the check failed (ATen's own
    `_linalg_check_errors` reading a compiled graph's LAPACK infos)."""
    _pending.append((flag, exc_type, message))
    if config.SYNC_CHECKS or len(_pending) >= _MAX_PENDING:
        raise_pending()


def raise_pending() -> None:
    """Reads every pending flag and raises the first failed check's error, clearing the
    queue either way. Blocks until the checked ops have run."""
    if not _pending:
        return
    items = list(_pending)
    _pending.clear()
    oks = jax.device_get([flag for flag, _, _ in items])
    for ok, (_, exc_type, message) in zip(oks, items):
        if exc_type is None:
            message(ok)
            continue
        if getattr(ok, "ndim", 0):  # (flag, value) of a message naming the offending value
            ok, message = ok[0], message.format(int(ok[1]))
        if not bool(ok):
            raise exc_type(message)
