"""PrivateUse1 kernels that involve the host: copies across devices and reading
scalars. These are the eager synchronization points."""
from __future__ import annotations

import torch

from .. import metrics, profiler
from ..runtime import checks, dtypes, pjrt, storage, transfer

aten = torch.ops.aten

_tensor_meta = None  # bound at install time
_device_copy = None  # the OpKernel of copy_ between two neuron tensors


def stored(t: torch.Tensor) -> torch.Tensor:
    """An alias of `t` (same storage and geometry) without its lazy conjugate/negative
    bits, i.e. the values its storage holds. Kernels move stored values."""
    if not (t.is_conj() or t.is_neg()):
        return t
    raw = t.view(t.shape)
    torch._C._set_conj(raw, False)
    torch._C._set_neg(raw, False)
    return raw


def conj_neg(t: torch.Tensor, conj: bool, neg: bool) -> torch.Tensor:
    """conj(t) if `conj`, negated if `neg`, as a new tensor without lazy bits (`t`
    itself when neither). On `neuron` only lowered ops run: conjugation negates the
    imaginary half of a view_as_real."""
    if not (conj or neg):
        return t
    out = t.clone()
    if conj and out.is_complex():
        torch.view_as_real(out).select(-1, 1).neg_()
    if neg:
        out.neg_()
    return out


def copy_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """`aten::copy_` with a `neuron` side: host->device, device->host, device->device.

    Broadcasting, dtype conversion and lazy conjugate/negative views (`x.conj()`,
    `x.conj().imag`) follow CPU `copy_`: `self` takes `src`'s values as they read, not
    as stored. Device->host blocks (`non_blocking` is accepted; PJRT transfers are
    ordered, so it is not needed).
    """
    if self.device.type != "neuron":
        return _to_host(self, src)
    conj = src.is_conj() != self.is_conj()
    neg = src.is_neg() != self.is_neg()
    return _copy_stored(stored(self), conj_neg(stored(src), conj, neg), non_blocking)


def _to_host(self: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    host = transfer.device_to_host(src, _tensor_meta(src))
    if not host.flags.c_contiguous:
        host = host.copy()
    values = dtypes.from_numpy(host).view(src.shape)  # (its size-1 dims past NumPy's 64)
    self.copy_(conj_neg(values, src.is_conj(), src.is_neg()))
    return self


def _copy_stored(self: torch.Tensor, src: torch.Tensor, non_blocking: bool) -> torch.Tensor:
    """copy_ into a `neuron` tensor of stored values (neither side has lazy bits)."""
    src_neuron = src.device.type == "neuron"
    if src_neuron:
        if self.device != src.device:
            return _copy_stored(self, src.cpu(), non_blocking)
        return _device_copy(self, src, non_blocking)
    if self.numel() == 0:
        return self
    meta = _tensor_meta(self)
    if src.shape == self.shape and src.dtype == self.dtype and transfer.covers_storage(meta):
        storage.buffers[meta[0]] = transfer.host_to_device(src, meta[5])
        return self
    staged = torch.empty(src.shape, dtype=src.dtype, device=self.device)
    storage.buffers[staged.data_ptr()] = transfer.host_to_device(src, meta[5])
    return _device_copy(self, staged, non_blocking)


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

    pjrt.check_not_forked()
    metrics.count("synchronizations")
    with profiler.record("neuron::synchronize"):
        checks.raise_pending()
        for buf in list(storage.buffers.values()):
            try:
                buf.block_until_ready()
            except jax.errors.JaxRuntimeError as exc:  # an execution failed to allocate
                storage.raise_if_out_of_memory(exc, next(iter(buf.devices())).id)
                raise
        jax.effects_barrier()


def equal(self: torch.Tensor, other: torch.Tensor) -> bool:
    """`aten::equal`: same shape and equal values (NaN never equals); blocks for the
    answer. Values compare after type promotion, as on CPU."""
    if self.shape != other.shape:
        return False
    return bool(torch.eq(self, other).all().item())


KERNELS = {
    aten.copy_.default: copy_,
    aten.equal.default: equal,
    aten._local_scalar_dense.default: local_scalar_dense,
}
