"""`torch.neuron`: the CUDA-style device module of the `neuron` device.

Follows the `torch.cuda` API: device selection, synchronization, seeding and RNG
state, memory statistics, device properties, streams and events.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any, Dict, Optional, Union

import torch

from . import _extension

_DeviceLike = Union[int, str, torch.device, None]


def _index(device: _DeviceLike = None) -> int:
    """The device index `device` names (None: the current device). ValueError for a
    device of another type, RuntimeError for an index with no device."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        index = device
    else:
        device = torch.device(device)
        if device.type != "neuron":
            raise ValueError(f"expected a neuron device, got {device}")
        index = current_device() if device.index is None else device.index
    if not 0 <= index < device_count():
        raise RuntimeError(f"neuron: invalid device index {index} ({device_count()} device(s) available)")
    return index


def _shim():
    return _extension.load()


def is_available() -> bool:
    """True when the PJRT platform has at least one device."""
    try:
        return device_count() > 0
    except RuntimeError:
        return False


def is_initialized() -> bool:
    """Whether this process has started the PJRT client."""
    from .runtime import pjrt

    return pjrt._init_pid is not None and not pjrt.in_bad_fork()


def __getattr__(name: str):
    # torch.utils.checkpoint stashes and restores a device's RNG state only when the
    # device module reports `_initialized`, as torch.cuda does; without it a
    # recomputed dropout would draw a different mask.
    if name == "_initialized":
        return is_initialized()
    raise AttributeError(f"module 'torch.neuron' has no attribute '{name}'")


def init() -> None:
    """Initializes the PJRT client (done lazily by the first device use otherwise)."""
    _lazy_init()


def _lazy_init() -> None:
    """Starts the PJRT client; PyTorch calls it before creating the first `neuron`
    tensor of a process. RuntimeError in a forked child of a process that had started
    it (like CUDA): the child has the parent's client state but none of its threads."""
    from .runtime import pjrt

    pjrt.check_not_forked()
    device_count()


def _is_in_bad_fork() -> bool:
    """True in a forked child of a process that used the device (`torch.cuda` API)."""
    from .runtime import pjrt

    return pjrt.in_bad_fork()


def device_count() -> int:
    """Number of `neuron` devices: the PJRT devices of `TORCHNEURON_PLATFORM`."""
    from .runtime import pjrt

    return pjrt.device_count()


def current_device() -> int:
    """Index of this thread's current `neuron` device."""
    return _shim().current_device()


def set_device(device: _DeviceLike) -> None:
    """Makes `device` current for this thread; RuntimeError for an invalid index."""
    _shim().set_device(_index(device))


class device:
    """Context manager that changes the current `neuron` device (`torch.cuda.device`)."""

    def __init__(self, device: _DeviceLike):
        self.index = _index(device) if device is not None else None

    def __enter__(self):
        self.prev = current_device()
        if self.index is not None:
            set_device(self.index)

    def __exit__(self, *exc):
        set_device(self.prev)


def synchronize(device: _DeviceLike = None) -> None:
    """Blocks until all queued work has finished; raises pending device-side errors."""
    from .eager.host_kernels import synchronize as _sync

    _sync()


# ------------------------------------------------------------------ random numbers
def _generator(device: _DeviceLike = None) -> torch.Generator:
    return _shim().default_generator(_index(device))


def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seeds every device's default generator (called by `torch.manual_seed`)."""
    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    """Seeds the current device's generator with a non-deterministic number."""
    _generator().seed()


def seed_all() -> None:
    """Seeds every device's generator with a non-deterministic number."""
    for i in range(device_count()):
        _generator(i).seed()


def initial_seed() -> int:
    """The seed of the current device's default generator."""
    return _generator().initial_seed()


def get_rng_state(device: _DeviceLike = None) -> torch.Tensor:
    """The generator state of `device`: a uint8 CPU tensor (seed, offset)."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = None) -> None:
    """Restores a state from `get_rng_state`; RuntimeError for a malformed one."""
    _generator(device).set_state(new_state)


def get_rng_state_all():
    """`get_rng_state` of every device, in index order."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    """Restores the states of `get_rng_state_all`."""
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# ------------------------------------------------------------------ memory
def memory_stats(device: _DeviceLike = None) -> Dict[str, Any]:
    """Allocator statistics in bytes and counts, keyed like `torch.cuda.memory_stats`."""
    return dict(_shim().device_stats(_index(device)))


def memory_allocated(device: _DeviceLike = None) -> int:
    """Bytes held by live `neuron` storages of `device`."""
    return memory_stats(device)["allocated_bytes.all.current"]


def mem_get_info(device: _DeviceLike = None):
    """(free, total) bytes of `device`, as `torch.cuda.mem_get_info`: total is the
    device's capacity (`get_device_properties().total_memory`), free what live `neuron`
    storages leave of it."""
    total = get_device_properties(device).total_memory
    return max(total - memory_allocated(device), 0), total


def max_memory_allocated(device: _DeviceLike = None) -> int:
    """Peak of `memory_allocated` since start or the last `reset_peak_memory_stats`."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    """Sets every peak statistic of `device` to its current value."""
    _shim().reset_peak(_index(device))


def memory_summary(device: _DeviceLike = None, abbreviated: bool = False) -> str:
    """A table of `memory_stats` for `device` (`torch.cuda.memory_summary`'s role):
    tensors and bytes, current, peak, allocated and freed since start. `abbreviated`
    is accepted for API compatibility; the table is always short."""
    stats = memory_stats(device)

    def size(n: int) -> str:
        for unit in ("B", "KiB", "MiB", "GiB"):
            if abs(n) < 1024 or unit == "GiB":
                return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
            n /= 1024
        return str(n)

    rows = [("Allocated memory", "allocated_bytes", size), ("Active memory", "active_bytes", size),
            ("Reserved memory", "reserved_bytes", size), ("Allocations", "allocation", str)]
    lines = [f"neuron memory summary, device {_index(device)}",
             f"{'metric':<18} {'current':>12} {'peak':>12} {'allocated':>12} {'freed':>12}"]
    for title, key, fmt in rows:
        lines.append(f"{title:<18} " + " ".join(f"{fmt(stats[f'{key}.all.{k}']):>12}"
                                             for k in ("current", "peak", "allocated", "freed")))
    lines.append(f"OOMs: {stats['num_ooms']}")
    return "\n".join(lines)


def reset_accumulated_memory_stats(device: _DeviceLike = None) -> None:
    """Zeroes the cumulative ("allocated", "freed") statistics of `device`."""
    _shim().reset_accumulated(_index(device))


def memory_reserved(device: _DeviceLike = None) -> int:
    """Bytes reserved: PJRT frees buffers on release, so this equals `memory_allocated`."""
    return memory_allocated(device)


def max_memory_reserved(device: _DeviceLike = None) -> int:
    """Peak of `memory_reserved` (equal to `max_memory_allocated`)."""
    return memory_stats(device)["reserved_bytes.all.peak"]


def empty_cache() -> None:
    """Collects garbage so that unreachable storages release their buffers now. There
    is no allocator cache: a buffer is released as soon as its storage dies."""
    import gc

    gc.collect()


# ------------------------------------------------------------------ properties
_Properties = namedtuple("_Properties", ["name", "platform", "total_memory", "index"])


def get_device_properties(device: _DeviceLike = None):
    """Name, PJRT platform, total memory in bytes (`runtime.pjrt.capacity`: the
    allocator limit PJRT reports, host memory for XLA:CPU, 0 if unknown)."""
    from .runtime import pjrt

    d = pjrt.device(_index(device))
    return _Properties(d.device_kind, d.platform, pjrt.capacity(d), _index(device))


def get_device_name(device: _DeviceLike = None) -> str:
    """The PJRT device kind of `device` (``cpu`` on XLA:CPU)."""
    return get_device_properties(device).name


def get_device_capability(device: _DeviceLike = None):
    """(0, 0): PJRT devices have no CUDA compute capability."""
    return (0, 0)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """True: XLA supports bfloat16 on every PJRT platform (emulated where needed)."""
    return True


def get_amp_supported_dtype():
    """Dtypes autocast may use on `neuron`."""
    return [torch.bfloat16, torch.float16]


# ------------------------------------------------------------------ streams and events
class Stream:
    """A `neuron` stream. PJRT orders work by data dependencies, so every stream is the
    device's one in-order queue: waits are no-ops and `synchronize` waits for all
    queued work. Entering a stream makes it the current one, as on CUDA."""

    def __init__(self, device: _DeviceLike = None, priority: int = 0, **kwargs):
        self.device = torch.device("neuron", _index(device))
        self.priority = priority

    def synchronize(self) -> None:
        synchronize(self.device)

    def wait_stream(self, stream: "Stream") -> None:
        pass

    def wait_event(self, event: "Event") -> None:
        pass

    def record_event(self, event: Optional["Event"] = None) -> "Event":
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def __enter__(self):
        self._prev = current_stream(self.device)
        set_stream(self)
        return self

    def __exit__(self, *exc):
        set_stream(self._prev)
        return False


class Event:
    """A `neuron` event; `elapsed_time` measures host time between synchronized records (ms)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self._time = None

    def record(self, stream: Optional[Stream] = None) -> None:
        import time

        synchronize()
        self._time = time.perf_counter()

    def wait(self, stream: Optional[Stream] = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        synchronize()

    def elapsed_time(self, end: "Event") -> float:
        if self._time is None or end._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end._time - self._time) * 1000.0


_default_streams: Dict[int, Stream] = {}
_current_streams: Dict[int, Stream] = {}  # per device, set by `stream()` / `set_stream`


def default_stream(device: _DeviceLike = None) -> Stream:
    """The default stream of `device`."""
    index = _index(device)
    if index not in _default_streams:
        _default_streams[index] = Stream(index)
    return _default_streams[index]


def current_stream(device: _DeviceLike = None) -> Stream:
    """The stream made current on `device` by `stream()`/`set_stream`, else its default."""
    index = _index(device)
    return _current_streams.get(index) or default_stream(index)


def set_stream(s: Stream) -> None:
    """Makes `s` the current stream of its device."""
    _current_streams[s.device.index] = s


class _StreamContext:
    def __init__(self, s: Optional[Stream]):
        self.stream = s

    def __enter__(self):
        if self.stream is not None:
            self.stream.__enter__()
        return self.stream

    def __exit__(self, *exc):
        if self.stream is not None:
            self.stream.__exit__(*exc)
        return False


def stream(s: Optional[Stream]) -> _StreamContext:
    """Context manager making `s` the current stream (`torch.cuda.stream`); None: no-op."""
    return _StreamContext(s)
