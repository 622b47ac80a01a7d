"""Counters and timings of the backend: `report()` prints them, `reset()` clears them.

Counters: eager ops executed (``ops_executed``), eager executables compiled and the
in-memory executable cache's hits and misses, executables dropped from that cache to
keep it within its bound (``eager_executables_evicted``), graphs compiled and executed, the
on-disk graph cache's hits and misses, synchronizations, bytes transferred
host->device and device->host, CPU fallbacks by op (``fallback::<op>``). Timings in
seconds: eager compile time (tracing, lowering and the first run, where XLA
compiles) and graph compile time.

Eager ops are not counted on the hot path by a call here: each cached executable
counts its own runs (one integer increment) and `counters()` sums them when asked.
"""
from __future__ import annotations

import collections

_counters: collections.Counter = collections.Counter()
#: The runs of eager executables dropped from the cache (part of ``ops_executed``).
EVICTED_RUNS = "evicted_executable_runs"
_times: collections.Counter = collections.Counter()


def count(name: str, n: int = 1) -> None:
    """Adds `n` to counter `name` (for cold paths: compiles, transfers, syncs)."""
    _counters[name] += n


def add_time(name: str, seconds: float) -> None:
    """Adds `seconds` to timing `name`."""
    _times[name] += seconds


def get(name: str) -> int:
    """One counter (0 if never counted); see `counters()` for the eager op counts."""
    return _counters[name]


def counters() -> dict:
    """All counters: eager op executions summed over every cached executable
    (``ops_executed``; ``eager_cache_hits`` are those that found their executable
    compiled), and the CPU fallback calls as ``fallback::<op>``."""
    from .eager import executor
    from .ops import fallback

    out = dict(_counters)
    # Dropped executables' runs were moved into a counter when they were dropped.
    runs = sum(e.runs for k in executor.kernels for e in k.cache.values()) + out.pop(EVICTED_RUNS, 0)
    compiled = out.get("eager_executables_compiled", 0)
    out["ops_executed"] = runs
    out["eager_cache_misses"] = compiled
    out["eager_cache_hits"] = max(runs - compiled, 0)
    for op, n in fallback.fallback_ops().items():
        out[f"fallback::{op}"] = n
    return out


def times() -> dict:
    """All timings, in seconds."""
    return dict(_times)


def report() -> str:
    """A table of every counter and timing; also printed."""
    lines = [f"{'metric':<40} {'value':>14}"]
    for k, v in sorted(counters().items()):
        lines.append(f"{k:<40} {v:>14}")
    for k, v in sorted(times().items()):
        lines.append(f"{k:<40} {v:>14.4f}")
    text = "\n".join(lines)
    print(text)
    return text


def reset() -> None:
    """Zeroes every counter and timing (compiled executables stay cached)."""
    from .eager import executor
    from .ops import fallback

    _counters.clear()
    _times.clear()
    fallback.reset()
    for k in executor.kernels:
        for e in k.cache.values():
            e.runs = 0
