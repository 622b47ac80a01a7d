"""Printing `neuron` tensors: format a host copy, as PyTorch does for XLA tensors.

`torch._tensor_str` formats a tensor with a dozen tensor ops (slicing, abs, min/max,
masked_select, ...). On a compiler-driven device each new shape would compile
executables just to print. PyTorch avoids this for its own xla/lazy/ipu/mtia devices
by copying to the CPU first (`_str_intern`); its device list is fixed, so this module
wraps the formatter the same way for `neuron`. The device suffix is still computed
from the original tensor, so the text is exactly CPU's plus `device='neuron:0'`.
"""
import torch
import torch._tensor_str as _tensor_str_module

_original = None


def _tensor_str(self, indent):
    if self.device.type == "neuron":
        self = self.detach().cpu()
    return _original(self, indent)


def install() -> None:
    """Wraps `torch._tensor_str._tensor_str`. Idempotent."""
    global _original
    if _original is None:
        _original = _tensor_str_module._tensor_str
        _tensor_str_module._tensor_str = _tensor_str
