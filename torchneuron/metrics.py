"""Counters and timings of the backend: `report()` prints them, `reset()` clears them.

Counters: ops executed, executables compiled, graphs compiled and executed, on-disk
cache hits and misses, CPU fallbacks by op. Timings in seconds.
"""
from __future__ import annotations

import collections

_counters: collections.Counter = collections.Counter()
_times: collections.Counter = collections.Counter()


def count(name: str, n: int = 1) -> None:
    _counters[name] += n


def add_time(name: str, seconds: float) -> None:
    _times[name] += seconds


def get(name: str) -> int:
    return _counters[name]


def counters() -> dict:
    """All counters, the CPU fallback calls included as ``fallback::<op>``."""
    from .ops import fallback

    out = dict(_counters)
    for op, n in fallback.fallback_ops().items():
        out[f"fallback::{op}"] = n
    return out


def times() -> dict:
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
    from .ops import fallback

    _counters.clear()
    _times.clear()
    fallback.reset()
