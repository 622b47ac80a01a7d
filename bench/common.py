"""Timing helpers for benchmarks: interleaved configurations, minimum over repetitions.

The machine is shared and noisy, so every benchmark runs its configurations in turn
(A, B, C, A, B, C, ...) and reports the minimum per configuration.
"""
from __future__ import annotations

import resource
import time
from typing import Callable, Dict, Optional


def interleaved_min(configs: Dict[str, Callable[[], None]], repeats: int = 7, number: int = 1,
                    settle: float = 0.3, prepare: Optional[Callable[[], None]] = None) -> Dict[str, float]:
    """{name: minimum seconds per call} over `repeats` rounds of `number` calls each.

    Each callable must include its own synchronization (the benchmark measures work
    completed, not work queued). Before each timed block the process idles `settle`
    seconds: XLA's and PyTorch's worker threads spin for a while after work, and on two
    cores the previous configuration's spinning threads would slow the next one. Then
    `prepare` runs, untimed (a multi-process benchmark's barrier, so that every process
    starts the block together)."""
    best = {name: float("inf") for name in configs}
    for _ in range(repeats):
        for name, fn in configs.items():
            time.sleep(settle)
            if prepare is not None:
                prepare()
            start = time.perf_counter()
            for _ in range(number):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / number)
    return best


def peak_rss_mib() -> float:
    """Peak resident set size of this process's own memory so far, in MiB.

    Read from /proc (VmHWM), not getrusage: Linux carries ru_maxrss across exec, so a
    child started by a large parent would report the parent's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
