"""Host buffers for host-staged collectives, reused across calls, and the way results
move from them onto the device.

A fresh large CPU tensor costs a page fault per 4 KiB page on first touch (glibc maps
allocations above 32 MiB anew each time), which on a loaded machine costs more than
the copy into it. Collectives of the same sizes repeat (DDP buckets, FSDP2 shards,
training steps), so released buffers are kept, up to `MAX_FREE_BYTES` in all.

A host -> device copy on XLA:CPU is such a fresh allocation too (XLA allocates the new
device buffer). When the whole storage of a `neuron` tensor is written, `adopt` instead
makes the host buffer itself the storage's device buffer (DLPack, zero-copy on
XLA:CPU, whose device memory is host memory). The pool then holds a buffer the device
still reads, so it hands a buffer out again only once nothing but the pool references
its storage. Whole-storage reads (`read`) likewise copy straight from the device
buffer's memory.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from typing import Dict, List, Tuple

import jax
import numpy as np
import torch

#: Most bytes of released buffers kept for reuse; a release beyond it frees the buffer.
MAX_FREE_BYTES = 1 << 30


def _shared(flat: torch.Tensor) -> bool:
    """Whether anything besides the pool's own `flat` references its storage: another
    tensor, or a device buffer adopted from it (a DLPack import holds a tensor)."""
    # The count includes `flat`'s reference and that of the temporary storage object.
    return torch._C._storage_Use_Count(flat.untyped_storage()._cdata) > 2


def _alias(tensor: torch.Tensor) -> torch.Tensor:
    """A 1-D tensor over `tensor`'s storage that is no view of it: a view would keep
    `tensor` (its `_base`) alive, and with it a second reference to the storage."""
    flat = torch.empty(0, dtype=tensor.dtype)
    return flat.set_(tensor.untyped_storage(), tensor.storage_offset(), (tensor.numel(),), (1,))


class HostPool:
    """Free lists of contiguous CPU tensors by (dtype, number of elements)."""

    def __init__(self, max_free_bytes: int = MAX_FREE_BYTES):
        self._free: Dict[Tuple[torch.dtype, int], List[torch.Tensor]] = defaultdict(list)
        self._free_bytes = 0
        self._max = max_free_bytes
        self._lock = threading.Lock()

    def acquire(self, shape, dtype: torch.dtype) -> torch.Tensor:
        """A contiguous CPU tensor of `shape` and `dtype` with arbitrary values, which
        nothing else references."""
        numel = 1
        for size in shape:
            numel *= size
        with self._lock:
            free = self._free.get((dtype, numel), ())
            for i, flat in enumerate(free):
                if not _shared(flat):
                    del free[i]
                    self._free_bytes -= flat.nbytes
                    return flat.view(shape)
        return torch.empty(shape, dtype=dtype)

    def release(self, tensor: torch.Tensor) -> None:
        """Gives back a tensor from `acquire`; the caller no longer uses it, though a
        device buffer adopted from it (`adopt`) may still read it."""
        with self._lock:
            if self._free_bytes + tensor.nbytes > self._max:
                self._drop_shared()
            if self._free_bytes + tensor.nbytes > self._max:
                return
            self._free[(tensor.dtype, tensor.numel())].append(_alias(tensor))
            self._free_bytes += tensor.nbytes

    def _drop_shared(self) -> None:
        """Forgets the buffers that device buffers still hold: they stay alive as
        long as those do, and no longer count against the pool's budget."""
        for free in self._free.values():
            kept = []
            for flat in free:
                if _shared(flat):
                    self._free_bytes -= flat.nbytes
                else:
                    kept.append(flat)
            free[:] = kept


def _whole_storage_on_cpu(device_tensor: torch.Tensor, host: torch.Tensor):
    """(storage handle, PJRT device) of `device_tensor` if it is a `neuron` tensor that
    is all of its storage (contiguous, no offset, no lazy conjugate/negative bit) on
    XLA:CPU, where device memory is host memory, and `host` is a contiguous CPU tensor
    of its shape and dtype; None otherwise."""
    from ..runtime import pjrt

    if (device_tensor.device.type != "neuron" or device_tensor.dtype != host.dtype
            or device_tensor.shape != host.shape
            or device_tensor.numel() == 0 or device_tensor.is_conj() or device_tensor.is_neg()
            or device_tensor.storage_offset() != 0 or not device_tensor.is_contiguous()
            or not host.is_contiguous()):
        return None
    whole = device_tensor.untyped_storage()
    device = pjrt.device(device_tensor.device.index or 0)
    if device.platform != "cpu" or whole.nbytes() != host.nbytes:
        return None
    return whole.data_ptr(), device


def read(device_tensor: torch.Tensor, host: torch.Tensor) -> bool:
    """Copies `device_tensor`'s values into `host` straight from its device buffer's
    memory (no intermediate array), if `_whole_storage_on_cpu` holds and the buffer
    holds the tensor's dtype. Returns False (and copies nothing) otherwise; the caller
    then uses copy_. Like copy_, it raises pending device-side check failures first
    and waits for the buffer."""
    from ..runtime import checks, dtypes, storage

    found = _whole_storage_on_cpu(device_tensor, host)
    if found is None:
        return False
    buffer = storage.buffers.get(found[0])
    if buffer is None or buffer.dtype != dtypes.to_jax(host.dtype):
        return False
    checks.raise_pending()
    # np.asarray of an XLA:CPU array waits for it and views its memory.
    # (1-D: numpy_view reads a 0-dim tensor as a number, not as its memory.)
    np.copyto(dtypes.numpy_view(host.view(-1)), np.asarray(buffer))
    return True


def adopt(device_tensor: torch.Tensor, host: torch.Tensor) -> bool:
    """Makes `host`'s memory the device buffer of `device_tensor`'s storage, if that is
    exactly a copy (`_whole_storage_on_cpu`). Returns False (and changes nothing)
    otherwise; the caller then copies.

    As a copy_ would, it bumps `device_tensor`'s version counter. `host` must not be
    written afterwards while anything else references its storage.
    """
    from ..runtime import dtypes, storage

    found = _whole_storage_on_cpu(device_tensor, host)
    if found is None:
        return False
    handle, device = found
    # A new tensor object, so that its storage reference (held by the DLPack import
    # until the device buffer is freed) is what `_shared` sees.
    buffer = jax.dlpack.from_dlpack(host.detach().view(-1))
    if buffer.devices() != {device} or buffer.dtype != dtypes.to_jax(host.dtype):
        return False
    storage.buffers[handle] = buffer
    torch.autograd.graph.increment_version(device_tensor)
    return True
