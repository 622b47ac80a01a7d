"""torchneuron: a native PyTorch backend for compiler-driven accelerators over PJRT.

``import torch`` loads this package through the ``torch.backends`` entry point, which
registers the ``neuron`` device (PrivateUse1), the ``torch.neuron`` module and the
eager kernels. See README.md for use and DESIGN.md for the architecture.
"""
from __future__ import annotations

import atexit

__all__ = ["fallback_ops", "install", "kernel"]

_installed = False


def install() -> None:
    """Registers the `neuron` device with PyTorch. Idempotent; called on `import torch`."""
    global _installed
    if _installed:
        return
    _installed = True
    import torch

    from . import _extension, device
    from .runtime import pjrt, storage

    _configure_logging()
    shim = _extension.load()
    torch.utils.rename_privateuse1_backend("neuron")
    shim.register_hooks()
    from .eager import host_kernels

    shim.set_callbacks(storage.buffers, storage.resize, storage.copy_bytes, pjrt.device_count,
                       host_kernels.synchronize)
    atexit.register(shim.python_shutdown)
    torch._register_device_module("neuron", device)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
    from .eager import install as eager_install

    eager_install.install()
    from . import printing, profiler, safetensors_device

    safetensors_device.install()
    printing.install()
    profiler.install()
    from . import distributed

    distributed.register()


def _configure_logging() -> None:
    """Applies TORCHNEURON_LOG_LEVEL to the `torchneuron` logger; when the variable is
    set, log records also go to stderr (a library adds no handler otherwise)."""
    import logging
    import os

    from . import config

    logger = logging.getLogger("torchneuron")
    logger.setLevel(config.LOG_LEVEL.upper())
    if os.environ.get("TORCHNEURON_LOG_LEVEL") and not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[torchneuron %(levelname)s] %(message)s"))
        logger.addHandler(handler)


def fallback_ops() -> dict:
    """{ATen op name: calls} of every op that ran through the CPU fallback so far."""
    from .ops import fallback

    return fallback.fallback_ops()


def kernel(name: str, fn=None, **options):
    """Decorator turning a JAX function into the PyTorch operator `name` that runs on
    `neuron` tensors in eager mode and inside compiled graphs; see
    `torchneuron.kernels.interface.kernel` for the arguments and errors."""
    from .kernels.interface import kernel as define

    return define(name, fn, **options)


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group: runs at the end of ``import torch``."""
    install()


# Last, once `_autoload` exists: a program whose first import is a submodule
# (`import torchneuron.ops.registry`) loads torch here, whose autoload installs the backend
# before that submodule runs its own imports (they would otherwise meet it half-initialized).
import torch  # noqa: E402,F401
