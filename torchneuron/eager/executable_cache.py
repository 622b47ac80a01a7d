"""A bound on the eager executables one process keeps compiled.

Each XLA:CPU executable owns its JIT-compiled code: three memory maps per kernel, from
a few for one elementwise op to hundreds for a factorization (lstsq's gelsy: about
340). A Linux process may hold at most ``vm.max_map_count`` maps (65,530 by default),
and one that keeps meeting new signatures (a test suite, a sweep over models, inputs of
changing shapes, a loop reading views to the host) would reach it and crash inside
XLA's compiler, where LLVM cannot map more code. So the eager caches of all operators,
and the executables that read views to the host, together keep at most
`config.EXECUTABLE_CACHE_SIZE` executables (``TORCHNEURON_EXECUTABLE_CACHE_SIZE``; 0 or
less: no count bound), and every `CHECK_EVERY` compiles the process's map count is
read: past `map_budget` (half the kernel's limit) a quarter of the executables go, and
another quarter while that released maps and the count is still over. What goes is
what has not run since the last pass over it: the CLOCK approximation of
least-recently-used eviction (Corbató, 1968), which costs a cache hit nothing beyond the
run count the hot path already keeps. A dropped signature that comes back is compiled
again.
"""
from __future__ import annotations

import collections
import logging
import threading
from typing import Optional

from .. import config, metrics

#: Compiles between two reads of the process's memory-map count (a read costs about
#: a microsecond per map).
CHECK_EVERY = 32

# [cache, key, entry, entry.runs when last passed, whether its runs count as ops], oldest
# first. An item whose key now holds another entry, or none, is stale and is skipped.
_ring: collections.deque = collections.deque()
_lock = threading.Lock()
_admitted = 0
_warned = False
log = logging.getLogger("torchneuron")


def _kernel_map_limit() -> Optional[int]:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):  # not Linux: no map count to watch
        return None


_limit = _kernel_map_limit()
#: Memory maps past which executables are dropped (None: the count is not watched).
map_budget: Optional[int] = _limit // 2 if _limit else None


def process_maps() -> int:
    """The memory maps this process holds now (Linux: lines of /proc/self/maps)."""
    with open("/proc/self/maps", "rb") as f:
        return f.read().count(b"\n")


def admit(cache: dict, key, entry, counted: bool = True) -> None:
    """Stores `entry` (anything with a `runs` count, an executor `_Entry`) at `key` of
    `cache`, after dropping executables while the process holds more than `map_budget`
    memory maps (read every `CHECK_EVERY` admissions), then while more than
    `config.EXECUTABLE_CACHE_SIZE` are held. `counted`: the entry's runs are eager ops
    (``ops_executed`` keeps those of dropped entries)."""
    global _admitted
    with _lock:
        _admitted += 1
        if map_budget is not None and _admitted % CHECK_EVERY == 0:
            _shed_maps()
        cache[key] = entry
        # Admitted as if its first run, which follows, were already seen: a signature
        # met once is dropped on the first pass, one met again gets its second chance.
        _ring.append([cache, key, entry, entry.runs + 1, counted])
        limit = config.EXECUTABLE_CACHE_SIZE
        while limit > 0 and len(_ring) > limit:
            _drop_one(f"more than {limit} eager executables")


def _shed_maps() -> None:
    maps = process_maps()
    while _ring and maps > map_budget:
        reason = f"{maps} memory maps, over the budget of {map_budget}"
        for _ in range(max(1, len(_ring) // 4)):
            _drop_one(reason)
        now = process_maps()
        if now >= maps:  # the maps are held by something else: dropping more cannot help
            return
        maps = now


def _drop_one(reason: str) -> None:
    """Drops the first executable the clock hand finds not run since its last pass."""
    global _warned
    while _ring:
        item = _ring.popleft()
        cache, key, entry, seen, counted = item
        if cache.get(key) is not entry:
            continue
        if entry.runs != seen:  # run since the last pass: a second chance
            item[3] = entry.runs
            _ring.append(item)
            continue
        del cache[key]
        if not _warned:
            _warned = True
            # A working set over the bound (a training step that alone needs more) would
            # be compiled again and again: say so once.
            log.warning("eager executable cache: %s; the least recently used executables are dropped and "
                        "compiled again when met (TORCHNEURON_EXECUTABLE_CACHE_SIZE sets the count bound, "
                        "vm.max_map_count the maps')", reason)
        metrics.count("eager_executables_evicted")
        if counted:
            metrics.count(metrics.EVICTED_RUNS, entry.runs)
        return


def size() -> int:
    """How many executables are held now (stale bookkeeping excluded)."""
    with _lock:
        return sum(1 for cache, key, entry, *_ in _ring if cache.get(key) is entry)
