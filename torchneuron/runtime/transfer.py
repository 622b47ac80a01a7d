"""Host <-> device transfers of tensor values."""
from __future__ import annotations

import jax
import numpy as np
import torch

from .. import metrics, profiler
from ..eager import executable_cache
from . import checks, dtypes, pjrt, storage, views


def host_to_device(src: torch.Tensor, device_index: int):
    """A flat JAX buffer on `neuron:device_index` holding a CPU tensor's values in
    row-major order. Copies the bytes first, so later writes to `src` are not seen.
    RuntimeError in a forked child of a device-using process (pjrt.check_not_forked)."""
    pjrt.check_not_forked()
    with profiler.record("neuron::host_to_device", [src]):
        values = dtypes.numpy_view(src.detach().contiguous().reshape(-1))
        host = _aligned_empty(values.size, values.dtype)
        np.copyto(host, values)
        metrics.count("bytes_host_to_device", host.nbytes)
        try:
            return jax.device_put(host, pjrt.device(device_index))
        except jax.errors.JaxRuntimeError as exc:
            storage.raise_if_out_of_memory(exc, device_index)
            raise


# XLA:CPU adopts host memory with this alignment as the device buffer instead of copying
# it again; nothing else references `host_to_device`'s copy, so that is safe.
_ALIGNMENT = 64


def _aligned_empty(size: int, dtype: np.dtype) -> np.ndarray:
    """A 1-D uninitialized array of `size` elements starting on an `_ALIGNMENT` boundary."""
    dtype = np.dtype(dtype)
    raw = np.empty(size * dtype.itemsize + _ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % _ALIGNMENT
    return raw[start:start + size * dtype.itemsize].view(dtype)


def covers_storage(meta) -> bool:
    """Whether a tensor (its shim metadata) is exactly its whole storage, contiguous."""
    handle, shape, stride, offset, dtype, index, nbytes = meta
    numel = int(np.prod(shape)) if shape else 1
    return offset == 0 and views.is_contiguous(shape, stride) and numel * dtype.itemsize == nbytes


_NUMPY_MAXDIMS = 64


def device_to_host(t: torch.Tensor, meta) -> np.ndarray:
    """The values of a `neuron` tensor as a NumPy array of its shape (blocks); past
    NumPy's 64 dims, which torch tensors may have, of its shape less its size-1 dims;
    of shape (0,) when it has no elements (0 x 2**62 is too big for NumPy's shapes).

    A synchronization point: raises pending device-side check failures first, and
    refuses to run in a forked child of a device-using process (pjrt.check_not_forked).
    """
    pjrt.check_not_forked()
    checks.raise_pending()
    handle, shape, stride, offset, dtype, index, nbytes = meta
    if 0 in shape:
        return np.zeros((0,), dtype=dtypes.to_jax(dtype))
    if len(shape) > _NUMPY_MAXDIMS:  # size-1 dims do not change which elements are read
        kept = [(n, st) for n, st in zip(shape, stride) if n != 1]
        shape, stride = [n for n, _ in kept], [st for _, st in kept]
        meta = (handle, shape, stride, offset, dtype, index, nbytes)
    jdt = dtypes.to_jax(dtype)
    buf = storage.buffers.get(handle)
    if buf is None:
        return np.zeros(shape, dtype=jdt)
    with profiler.record("neuron::device_to_host", [t]):
        if covers_storage(meta) and buf.dtype == jdt:
            flat = buf
        else:
            flat = _read_view(buf, jdt, tuple(shape), tuple(stride), offset)
        try:
            host = np.asarray(jax.device_get(flat)).reshape(shape)
        except jax.errors.JaxRuntimeError as exc:  # its execution failed to allocate
            storage.raise_if_out_of_memory(exc, index)
            raise
    metrics.count("bytes_device_to_host", host.nbytes)
    return host


_read_cache: dict = {}


class _Read:
    """The executable reading one view geometry out of a storage, and its run count
    (`executable_cache` bounds these with the eager executables)."""

    __slots__ = ("fn", "runs")

    def __init__(self, fn):
        self.fn = fn
        self.runs = 0


def _read_view(buf, dtype, shape, stride, offset):
    # A nonzero offset is an argument, as in eager executables: x[i].item() in a loop
    # compiles once, not once per i.
    moved = offset != 0
    key = (buf.dtype, buf.shape, dtype, shape, stride, moved)
    entry = _read_cache.get(key)
    if entry is None:
        entry = _Read(jax.jit(lambda b, o: views.read(b, dtype, shape, stride, o if moved else 0)))
        executable_cache.admit(_read_cache, key, entry, counted=False)
    entry.runs += 1
    return entry.fn(buf, np.int64(offset))
