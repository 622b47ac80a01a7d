"""`device="neuron"` for safetensors loading (`load_file`, `load_model`, `safe_open`).

safetensors validates device strings in Rust against a fixed list of PyTorch's
built-in accelerators, so `load_file(path, device="neuron")` fails with "device
neuron is invalid" (and an integer index would mean CUDA on a machine that has it).
`install()` wraps `safetensors.safe_open` (the function every loader goes through):
for a `neuron` device it opens the file for the CPU, which memory-maps it, and moves
each tensor it hands out to the device; everything else goes to safetensors
unchanged. This is what safetensors itself does for CUDA: read on the host, then
copy.
"""
from __future__ import annotations

from typing import Optional

import torch

_original = None


def _neuron_device(device) -> Optional[torch.device]:
    """The `neuron` torch.device that `device` names, else None."""
    if isinstance(device, (str, torch.device)):
        try:
            device = torch.device(device)
        except RuntimeError:
            return None
        if device.type == "neuron":
            return device
    return None


class _Slice:
    """A lazily read tensor slice whose reads land on a `neuron` device."""

    def __init__(self, inner, device: torch.device):
        self._inner = inner
        self._device = device

    def __getitem__(self, index):
        return self._inner[index].to(self._device)

    def __getattr__(self, name):  # get_shape, get_dtype
        return getattr(self._inner, name)


class _OnNeuron:
    """A `safe_open` handle for the CPU whose tensors are moved to a `neuron` device."""

    def __init__(self, inner, device: torch.device):
        self._inner = inner
        self._device = device

    def __enter__(self):
        self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)

    def get_tensor(self, name: str) -> torch.Tensor:
        return self._inner.get_tensor(name).to(self._device)

    def get_tensors(self) -> dict:
        return {name: self.get_tensor(name) for name in self._inner.keys()}

    def get_slice(self, name: str) -> _Slice:
        return _Slice(self._inner.get_slice(name), self._device)

    def __getattr__(self, name):  # keys, offset_keys, metadata
        return getattr(self._inner, name)


def safe_open(filename, framework, device="cpu", *args, **kwargs):
    """`safetensors.safe_open` that also accepts a `neuron` device (str or torch.device)
    for the PyTorch framework. Other arguments and errors are safetensors' own."""
    target = _neuron_device(device)
    if target is None or framework not in ("pt", "torch", "pytorch"):
        return _original(filename, framework, device, *args, **kwargs)
    return _OnNeuron(_original(filename, framework, "cpu", *args, **kwargs), target)


def install() -> None:
    """Routes `safetensors.safe_open` (and the name `safetensors.torch` imported) through
    `safe_open` above. Idempotent; does nothing when safetensors is not installed."""
    global _original
    if _original is not None:
        return
    try:
        import safetensors
        import safetensors.torch
    except ImportError:
        return
    _original = safetensors.safe_open
    safetensors.safe_open = safe_open
    safetensors.torch.safe_open = safe_open
