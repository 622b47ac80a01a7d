"""The PJRT client behind the `neuron` device: one `neuron:i` per PJRT device.

JAX owns the PJRT client; the platform comes from `TORCHNEURON_PLATFORM` (empty: JAX's
default backend, XLA:CPU on a machine with no accelerator plugin).
"""
from __future__ import annotations

import functools
import os
import warnings
from typing import Optional

import jax

from .. import config

# 64-bit types are exact on `neuron`: int64 and float64 never pass through 32 bits.
jax.config.update("jax_enable_x64", True)


# JAX warns on every fork that a multithreaded client cannot survive it. DataLoader
# workers fork all the time; a forked child refuses to use the device instead
# (torch.neuron._lazy_init, as CUDA does), so the warning is only noise here.
warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)

#: The process that started the PJRT client; None until then. A forked child inherits
#: the client's state but not its threads, so it must not use it (see in_bad_fork).
_init_pid: Optional[int] = None


@functools.lru_cache(maxsize=None)
def devices():
    """The PJRT devices of the configured platform, in `neuron:i` order.

    Raises RuntimeError (from JAX) if the platform has no PJRT plugin installed.
    """
    global _init_pid
    _host_devices_per_local_rank()
    found = tuple(jax.devices(config.PLATFORM) if config.PLATFORM else jax.devices())
    _init_pid = os.getpid()
    from .. import _extension

    shim = _extension.load()
    for index, d in enumerate(found):
        shim.set_capacity(index, capacity(d))
    return found


def _host_devices_per_local_rank() -> None:
    """Under torchrun (`LOCAL_WORLD_SIZE` processes on this host), gives XLA:CPU one
    device per local process, as a host with that many accelerators has, so that what
    launcher users write (``torch.neuron.set_device(local_rank)``,
    ``torch.device("neuron", local_rank)``, `init_device_mesh`, which sets the device
    from `LOCAL_RANK`) names a device on every rank. Each process still uses only its
    own. Left alone when the count was chosen already (`jax_num_cpu_devices`,
    ``--xla_force_host_platform_device_count``) or JAX's backends already started."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    if local <= 1 or "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return
    from jax._src import xla_bridge

    if jax.config.jax_num_cpu_devices == -1 and not xla_bridge.backends_are_initialized():
        jax.config.update("jax_num_cpu_devices", local)


def capacity(d) -> int:
    """The bytes PJRT device `d` can hold: its allocator's limit where the plugin
    reports one, the host's physical memory for XLA:CPU, 0 if unknown."""
    try:
        limit = int((d.memory_stats() or {}).get("bytes_limit", 0))
    except Exception:  # noqa: BLE001 - some PJRT plugins do not implement memory_stats
        limit = 0
    if not limit and d.platform == "cpu":
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return limit


def in_bad_fork() -> bool:
    """Whether this process is a fork of one that had started the PJRT client
    (`torch.cuda._is_in_bad_fork` semantics)."""
    return _init_pid is not None and _init_pid != os.getpid()


def check_not_forked() -> None:
    """RuntimeError (CUDA's) in a forked child of a process that had started the client:
    the child has the client's state but none of its threads, so using it may hang."""
    if in_bad_fork():
        raise RuntimeError("Cannot re-initialize neuron in forked subprocess. To use neuron with "
                           "multiprocessing, you must use the 'spawn' start method")


def device(index: int):
    """The PJRT device behind `neuron:index`; IndexError-free: the C++ guard validates."""
    return devices()[index]


def device_count() -> int:
    return len(devices())


def platform() -> str:
    """The PJRT platform name (``cpu``, ``gpu``, ``tpu``, ...)."""
    return devices()[0].platform
