"""The PJRT client behind the `neuron` device: one `neuron:i` per PJRT device.

JAX owns the PJRT client; the platform comes from `TORCHNEURON_PLATFORM` (empty: JAX's
default backend, XLA:CPU on a machine with no accelerator plugin).
"""
from __future__ import annotations

import functools

import jax

from .. import config

# 64-bit types are exact on `neuron`: int64 and float64 never pass through 32 bits.
jax.config.update("jax_enable_x64", True)


@functools.lru_cache(maxsize=None)
def devices():
    """The PJRT devices of the configured platform, in `neuron:i` order.

    Raises RuntimeError (from JAX) if the platform has no PJRT plugin installed.
    """
    if config.PLATFORM:
        return tuple(jax.devices(config.PLATFORM))
    return tuple(jax.devices())


def device(index: int):
    """The PJRT device behind `neuron:index`; IndexError-free: the C++ guard validates."""
    return devices()[index]


def device_count() -> int:
    return len(devices())


def platform() -> str:
    """The PJRT platform name (``cpu``, ``gpu``, ``tpu``, ...)."""
    return devices()[0].platform
