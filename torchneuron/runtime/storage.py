"""The storage registry: storage handle (the `data_ptr()` of a `neuron` storage) -> one
flat PJRT buffer (a 1-D `jax.Array`) holding the storage's bytes.

The C++ allocator hands out handles and deletes a handle's entry when its storage is
freed, which drops the last reference to the buffer and releases the device memory.
A storage that was allocated but never written has no entry; reading it yields zeros,
one valid value of uninitialized memory.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch

from . import pjrt

#: handle -> flat jax.Array. Read and written by the eager executor and transfers;
#: entries are removed by the C++ allocator's deleter.
buffers: dict = {}


def buffer(handle: int, nbytes: int, dtype, device_index: int):
    """The flat buffer of a storage, created as zeros of `dtype` if never written.

    nbytes: the storage's size in bytes; dtype: a JAX dtype, used only when the
    buffer must be created (the storage's bytes are later reinterpreted as needed).
    """
    buf = buffers.get(handle)
    if buf is None:
        itemsize = np.dtype(dtype).itemsize
        try:
            buf = jax.device_put(np.zeros(nbytes // itemsize, dtype=dtype), pjrt.device(device_index))
        except MemoryError as exc:  # the host could not even stage the zeros
            raise _oom(device_index, str(exc)) from exc
        except jax.errors.JaxRuntimeError as exc:
            raise_if_out_of_memory(exc, device_index)
            raise
        buffers[handle] = buf
    return buf


def raise_if_out_of_memory(exc: Exception, device_index: int) -> None:
    """Raises `torch.OutOfMemoryError` (from `exc`) if `exc` is PJRT's failed
    allocation (RESOURCE_EXHAUSTED); returns otherwise. Callers raise it before storing
    any result, so other tensors are untouched and the process keeps working."""
    message = str(exc)
    if "RESOURCE_EXHAUSTED" in message or "out of memory" in message.lower():
        raise _oom(device_index, message) from exc


def _oom(device_index: int, detail: str) -> torch.OutOfMemoryError:
    from .. import _extension

    _extension.load().count_oom(device_index)
    held = live_bytes() / 2**30
    return torch.OutOfMemoryError(
        f"neuron out of memory on neuron:{device_index}: {detail.strip()} "
        f"(live neuron tensors hold {held:.2f} GiB). Free tensors, reduce the batch size, "
        f"or call torch.neuron.empty_cache() to release unreachable ones.")


def _bytes_of(buf) -> np.ndarray:
    host = np.asarray(jax.device_get(buf))
    return host.view(np.uint8) if host.dtype != np.bool_ else host.astype(np.uint8)


def resize(old: int, new: int, nbytes: int) -> None:
    """Carries a storage's bytes from handle `old` to `new`, truncated or zero-padded to
    `nbytes`. Called by the C++ shim for `resize_` and `untyped_storage().resize_()`."""
    buf = buffers.get(old)
    if buf is None:
        return
    device = next(iter(buf.devices()))
    itemsize = buf.dtype.itemsize
    if nbytes % itemsize == 0:
        n = nbytes // itemsize
        if n <= buf.shape[0]:
            buffers[new] = buf[:n]
        else:
            buffers[new] = jnp.pad(buf, (0, n - buf.shape[0]))
        return
    raw = _bytes_of(buf)[:nbytes]
    buffers[new] = jax.device_put(np.pad(raw, (0, nbytes - raw.shape[0])), device)


def copy_bytes(dst: int, src: int, nbytes: int) -> None:
    """Copies the first `nbytes` bytes of storage `src` into storage `dst` (the
    allocator's `copy_data`, used when PyTorch clones a storage)."""
    buf = buffers.get(src)
    if buf is None:
        buffers.pop(dst, None)
        return
    if buf.dtype.itemsize * buf.shape[0] == nbytes:
        buffers[dst] = jnp.array(buf, copy=True)
        return
    device = next(iter(buf.devices()))
    buffers[dst] = jax.device_put(_bytes_of(buf)[:nbytes].copy(), device)


def live_bytes() -> int:
    """Bytes held by all buffers in the registry (what the device really holds)."""
    return sum(b.size * b.dtype.itemsize for b in buffers.values())
