"""PrivateUse1 kernels that involve the host: copies across devices and reading
scalars. These are the eager synchronization points."""
from __future__ import annotations

import numpy as np
import torch

from ..runtime import checks, dtypes, storage, transfer

aten = torch.ops.aten

_tensor_meta = None  # bound at install time
_device_copy = None  # the OpKernel of copy_ between two neuron tensors


def copy_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """`aten::copy_` with a `neuron` side: host->device, device->host, device->device.

    Broadcasting and dtype conversion follow CPU `copy_`. Device->host blocks
    (`non_blocking` is accepted; PJRT transfers are ordered, so it is not needed).
    """
    dst_neuron = self.device.type == "neuron"
    src_neuron = isinstance(src, torch.Tensor) and src.device.type == "neuron"
    if dst_neuron and src_neuron:
        if self.device != src.device:
            tmp = src.cpu()
            return copy_(self, tmp, non_blocking)
        return _device_copy(self, src, non_blocking)
    if dst_neuron:
        if self.numel() == 0:
            return self
        meta = _tensor_meta(self)
        if src.shape == self.shape and src.dtype == self.dtype and transfer.covers_storage(meta):
            storage.buffers[meta[0]] = transfer.host_to_device(src, meta[5])
            return self
        staged = torch.empty(src.shape, dtype=src.dtype, device=self.device)
        storage.buffers[staged.data_ptr()] = transfer.host_to_device(src, meta[5])
        return _device_copy(self, staged, non_blocking)
    # device -> host
    host = transfer.device_to_host(src, _tensor_meta(src))
    if not host.flags.c_contiguous:
        host = host.copy()
    self.copy_(dtypes.from_numpy(host))
    return self


def local_scalar_dense(self: torch.Tensor):
    """`aten::_local_scalar_dense`: the Python number of a one-element tensor (blocks)."""
    value = transfer.device_to_host(self, _tensor_meta(self)).reshape(())
    if self.dtype == torch.bool:
        return bool(value)
    if self.dtype.is_complex:
        return complex(value)
    if self.dtype.is_floating_point:
        return float(value)
    return int(value)


def synchronize() -> None:
    """Waits for all queued work on every `neuron` device and raises pending
    device-side check failures."""
    import jax

    checks.raise_pending()
    for buf in list(storage.buffers.values()):
        buf.block_until_ready()
    jax.effects_barrier()


KERNELS = {
    aten.copy_.default: copy_,
    aten._local_scalar_dense.default: local_scalar_dense,
}
