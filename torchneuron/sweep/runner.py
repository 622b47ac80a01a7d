"""Runs the sweep: one process per model with a time limit, a progress bar, and a
resumable results file.

The results file is one JSON object, ``{"meta": {...}, "models": {name: result}}``
(a result as `worker.run_model` returns it), rewritten atomically after every model.
Models already in it are not run again, so an interrupted sweep continues where it
stopped. An interrupt (Ctrl-C) kills the running workers at once and keeps the file as
it was after the last finished model. A worker that crashes (at any point, even before
it opens its log) or outlives its time limit is killed; the stages it finished are kept
and the stage it was in is recorded with status ``timeout`` or as an ``error`` of class
``Crash`` (exit code or signal, last log words).
"""
from __future__ import annotations

import concurrent.futures
import datetime
import difflib
import itertools
import json
import os
import multiprocessing
import platform
import signal
import tempfile
import threading
import time

from . import enumerate as models
from . import worker
from .worker import STAGES


class SweepError(Exception):
    """A mistake in what the sweep was asked to do (an unknown model, a results file it
    cannot read): the command line prints the message, without a traceback."""


def load(path: str, missing_ok: bool = True) -> dict:
    """The results file at `path`, or an empty one when it does not exist and
    `missing_ok`. Raises `SweepError` for a missing (unless `missing_ok`), unreadable,
    truncated or otherwise not-a-results file: a sweep must not overwrite one, whose
    models would be lost."""
    if not os.path.exists(path):
        if missing_ok:
            return {"meta": {}, "models": {}}
        raise SweepError(f"no results file {path} (run `python -m torchneuron sweep` first)")
    fix = "fix it, or move it away to start a new one"
    try:
        with open(path) as f:
            results = json.load(f)
    except OSError as e:
        raise SweepError(f"cannot read the results file {path}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SweepError(f"the results file {path} is not valid JSON (truncated?): {e}; {fix}") from None
    if not isinstance(results, dict) or not isinstance(results.get("models"), dict):
        raise SweepError(f"{path} is not a sweep results file (no \"models\" object); {fix}")
    for name, entry in results["models"].items():
        if not (isinstance(entry, dict) and entry.get("model") == name and isinstance(entry.get("stages"), dict)):
            raise SweepError(f"{path}: the entry for {name!r} is not a model's result (it needs its "
                             f"\"model\" name and a \"stages\" object); {fix}")
    return results


def save(results: dict, path: str) -> None:
    """Writes `results` to `path` atomically (a reader never sees half a file)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        # Interrupted or failed: `path` is untouched; leave no partial temporary behind.
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for pkg in ("torch", "jax", "transformers", "timm"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


#: What the fork server imports once, so each model's process starts without paying
#: for importing torch, transformers and timm (none of them starts the PJRT client, so
#: a forked child may start its own).
PRELOAD = ["torchneuron.sweep.worker", "transformers.modeling_utils", "timm"]

_context = None


def _processes():
    """The multiprocessing context every worker starts from: a fork server that has
    imported `PRELOAD`. Each model still gets a fresh process of its own."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


class Interrupted(Exception):
    """Raised by `run_one` for a model whose sweep was interrupted before it started."""


class _Workers:
    """The worker processes one sweep has running, so that an interrupt can kill them:
    the thread pool would otherwise wait for each to finish or reach its time limit."""

    def __init__(self):
        self.lock = threading.Lock()
        self.procs = set()
        self.stopped = False

    def start(self, proc) -> None:
        """Starts `proc`, unless the sweep was interrupted (then raises `Interrupted`)."""
        with self.lock:
            # Under the lock: a worker starting while `kill_all` runs is either killed
            # by it or never started.
            if self.stopped:
                raise Interrupted
            proc.start()
            self.procs.add(proc)

    def finished(self, proc) -> None:
        with self.lock:
            self.procs.discard(proc)

    def kill_all(self) -> None:
        """Kills every running worker and the fork server, and starts no more workers."""
        with self.lock:
            self.stopped = True
            procs = list(self.procs)
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.join(5)
        # The fork server would outlive this process until it finished importing
        # `PRELOAD` (many seconds), holding the terminal's output open. multiprocessing
        # restarts a dead server on its next use.
        from multiprocessing import forkserver

        pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _ready() -> None:
    """The target of `_start_fork_server`'s first process: nothing to do."""


def _start_fork_server() -> None:
    """Starts the fork server from this (the main) thread and waits until it has
    imported `PRELOAD`: an interrupt then arrives here, where it stops the sweep at
    once, instead of waiting for a worker thread blocked on that start-up."""
    proc = _processes().Process(target=_ready)
    proc.start()
    proc.join()


def run_one(name: str, timeout_s: float, seed: int = 0, compile: bool = True,
            workers: _Workers | None = None) -> dict:
    """Runs `name` in a fresh process (forked from a server that preloaded the imports).

    Returns the worker's result; on a crash or after `timeout_s` seconds (the process is
    killed) the stages it finished plus an error for the one it was in. `workers` (of the
    calling sweep) tracks the process so that an interrupt can kill it."""
    from .. import config

    workers = workers or _Workers()
    cache = os.environ.get("JAX_COMPILATION_CACHE_DIR") or os.path.join(config.CACHE_DIR, "sweep-jax-cache")
    with tempfile.TemporaryDirectory(prefix="torchneuron-sweep-") as tmp:
        path, log = os.path.join(tmp, "result.json"), os.path.join(tmp, "log.txt")
        proc = _processes().Process(target=worker.child, args=(name, path, log, seed, compile, cache),
                                    daemon=True)
        workers.start(proc)
        start = time.perf_counter()
        proc.join(timeout_s)
        timed_out = proc.is_alive()
        if timed_out:
            proc.kill()
            proc.join()
        workers.finished(proc)
        if timed_out:
            failure = ("Timeout", f"model exceeded the {timeout_s:.0f} s limit")
        elif proc.exitcode != 0:
            failure = ("Crash", f"worker {_exit_reason(proc.exitcode)}: {_log_tail(log)}")
        else:
            failure = None
        try:
            with open(path) as f:
                result = json.load(f)
        except (OSError, json.JSONDecodeError):
            result = {"model": name, "covered": False, "stages": {}}
            # A worker that exits cleanly always leaves its result file.
            failure = failure or ("Crash", f"worker exited without a result: {_log_tail(log)}")
    result["time_s"] = round(time.perf_counter() - start, 3)
    if failure is not None:
        _record_failure(result, *failure)
    return result


def _exit_reason(code: int) -> str:
    """``exited with code N`` or, for a negative multiprocessing exit code, the signal."""
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def _log_tail(log: str, words: int = 40) -> str:
    """The last `words` words of a worker's log; a worker may die before it opens it."""
    try:
        with open(log, errors="replace") as f:
            return " ".join(f.read().split()[-words:])
    except OSError:
        return "(no log: the worker died before opening it)"


def _record_failure(result: dict, kind: str, message: str) -> None:
    """Records a killed or crashed worker in `result`: as the reason the model is not
    covered when it had not finished the CPU reference, else in the first stage it had
    not finished. A time-out gets status ``timeout``, anything else ``error``, so the
    report tells a slow model from a broken one."""
    if not result.get("covered"):
        result["reason"] = f"{kind}: {message} (before the neuron stages)"
        return
    status = "timeout" if kind == "Timeout" else "error"
    for stage in STAGES:
        entry = result["stages"].get(stage)
        if entry is None or "time_s" not in entry:
            result["stages"][stage] = {"status": status, "error_type": kind, "error": message}
            return


def _check_names(names: list[str]) -> None:
    """Raises `SweepError` naming the models of `names` the enumerator does not know, with
    the closest known names: a typo would otherwise be recorded as a model that does not
    build."""
    known = {}
    unknown = []
    for name in names:
        suite = name.partition("/")[0]
        if suite not in models.SUITES:
            unknown.append(f"{name} (the name starts with one of {', '.join(models.SUITES)}, then '/')")
            continue
        if suite not in known:
            known[suite] = models.model_names(suite)
        if name not in known[suite]:
            close = difflib.get_close_matches(name, known[suite], n=3)
            unknown.append(name + (f" (did you mean {', '.join(close)}?)" if close else ""))
    if unknown:
        raise SweepError("unknown model " + "; ".join(unknown))


def sweep(suite: str = "all", limit: int | None = None, jobs: int = 1, out: str = "sweep/results.json",
          timeout_s: float = 600.0, seed: int = 0, names: list[str] | None = None, progress: bool = True,
          compile: bool = True, command: str = "") -> dict:
    """Runs the models of `suite` (the first `limit` of each suite, or `names`) that
    `out` does not hold yet, `jobs` at a time, saving `out` after each; `command` is
    recorded in the file's meta data. Returns the results. Raises ValueError for an
    unknown suite, `SweepError` for an unknown name in `names` or a results file it
    cannot read (before running anything)."""
    from tqdm import tqdm

    if names is None:
        suites = models.SUITES if suite == "all" else (suite,)
        # Alternating suites: a sweep stopped early still covers both.
        per_suite = [models.model_names(s)[:limit] for s in suites]
        names = [n for group in itertools.zip_longest(*per_suite) for n in group if n is not None]
    else:
        _check_names(names)
    results = load(out)
    results["meta"] = {"updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       "seed": seed, "timeout_s": timeout_s, "versions": _versions(),
                       "command": command}
    todo = [n for n in names if n not in results["models"]]
    bar = tqdm(total=len(names), initial=len(names) - len(todo), disable=not progress, unit="model",
               dynamic_ncols=True)
    workers = _Workers()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    try:
        if todo:
            _start_fork_server()
        futures = {pool.submit(run_one, n, timeout_s, seed, compile, workers): n for n in todo}
        # Only this thread touches `results` and the file.
        for fut in concurrent.futures.as_completed(futures):
            result = fut.result()
            results["models"][futures[fut]] = result
            save(results, out)
            bar.set_postfix_str(f"{futures[fut]}: {summary(result)}", refresh=False)
            bar.update()
    except BaseException:
        # Ctrl-C (KeyboardInterrupt) or a failure here: the file already holds every
        # finished model; kill the running workers instead of waiting for them.
        workers.kill_all()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
    return results


def summary(result: dict) -> str:
    """One word per stage, e.g. ``pass/pass/mismatch/error``, or ``not covered``."""
    if not result.get("covered"):
        return "not covered"
    return "/".join(result["stages"].get(s, {}).get("status", "skip") for s in STAGES)
