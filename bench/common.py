"""Timing helpers for benchmarks: interleaved configurations, minimum over repetitions.

The machine is shared and noisy, so every benchmark runs its configurations in turn
(A, B, C, A, B, C, ...) and reports the minimum per configuration.
"""
from __future__ import annotations

import resource
import time
from typing import Callable, Dict


def interleaved_min(configs: Dict[str, Callable[[], None]], repeats: int = 7, number: int = 1) -> Dict[str, float]:
    """{name: minimum seconds per call} over `repeats` rounds of `number` calls each.

    Each callable must include its own synchronization (the benchmark measures work
    completed, not work queued)."""
    best = {name: float("inf") for name in configs}
    for _ in range(repeats):
        for name, fn in configs.items():
            start = time.perf_counter()
            for _ in range(number):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / number)
    return best


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
