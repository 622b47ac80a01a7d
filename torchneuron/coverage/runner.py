"""Runs the sweeps in worker processes, resumably.

`run_shard` (one worker process) walks its share of the OpInfo or ModuleInfo cases
and appends one JSON line per case to its results file: a ``started`` line before the
case, the Outcome after it. A case already finished in any results file of the sweep is
not run again, so a restarted worker resumes (with any number of shards); a case that started but never finished (the worker hung past
the time limit or crashed) is recorded as failing with that reason.

`run_all` starts the workers (`python -m torchneuron.coverage.runner ...`), restarts a
worker that stops making progress for longer than the per-case time limit, and returns
when every shard is done.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import time
from typing import Dict, Iterator, List, Optional, Tuple

from .outcome import FAILING, Outcome

KINDS = ("opinfo", "modules")


def _cases(kind: str, ops: Optional[List[str]], checks: Optional[List[str]] = None
           ) -> Iterator[Tuple[str, str, object, object]]:
    """(name, check, dtype, info) of every case of the sweep `kind`, in a fixed order."""
    from . import expected

    if kind == "opinfo":
        from torch.testing._internal.common_methods_invocations import op_db

        from . import opinfo
        for op in op_db:
            name = expected.opinfo_name(op)
            if ops and name not in ops:
                continue
            for check in opinfo.check_names(op):
                if checks and check not in checks:
                    continue
                for dtype in opinfo.dtypes_for(op, check):
                    yield name, check, dtype, op
    else:
        from torch.testing._internal.common_modules import module_db

        from . import modules
        for info in module_db:
            name = modules.name(info)
            if ops and name not in ops:
                continue
            for check in modules.CHECKS:
                if checks and check not in checks:
                    continue
                for dtype in modules.dtypes_for(info):
                    yield name, check, dtype, info


def case_key(name: str, check: str, dtype) -> str:
    return f"{name}|{check}|{str(dtype).replace('torch.', '')}"


def read_results(path: str) -> Tuple[Dict[str, dict], set]:
    """({case key: finished record}, {case keys started but not finished}) of a results file."""
    done, started = {}, set()
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a killed worker
                if rec.get("started"):
                    started.add(rec["key"])
                else:
                    done[rec["key"]] = rec
    return done, started - set(done)


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def run_shard(kind: str, shard: int, shards: int, path: str, limit: Optional[int], timeout: int,
              ops: Optional[List[str]] = None, checks: Optional[List[str]] = None) -> None:
    """Runs the cases of shard `shard` of `shards` (cases are dealt out by op) and
    appends their results to `path`."""
    import torch

    from . import modules, opinfo

    run = opinfo.run_check if kind == "opinfo" else modules.run_check
    done, lost = read_results(path)
    for other in glob.glob(os.path.join(os.path.dirname(path) or ".", f"{kind}-*.jsonl")):
        done.update(read_results(other)[0])  # finished under another shard count
    lost -= set(done)
    signal.signal(signal.SIGALRM, _alarm)
    names: Dict[str, int] = {}
    with open(path, "a") as f:
        def write(rec):
            f.write(json.dumps(rec) + "\n")
            f.flush()

        for key in sorted(lost):
            name, check, dtype = key.split("|")
            write({"key": key, "name": name, "check": check, "dtype": dtype, **Outcome(
                FAILING, f"timed out after {timeout} s or crashed the process").as_dict()})
            done[key] = True
        for name, check, dtype, info in _cases(kind, ops, checks):
            if names.setdefault(name, len(names)) % shards != shard:
                continue
            key = case_key(name, check, dtype)
            if key in done:
                continue
            write({"key": key, "started": True})
            torch.manual_seed(0)
            start = time.time()
            signal.alarm(timeout)
            try:
                outcome = run(info, dtype, check, limit)
            except _Timeout:
                outcome = Outcome(FAILING, f"timed out after {timeout} s")
            finally:
                signal.alarm(0)
            write({"key": key, "name": name, "check": check, "dtype": str(dtype).replace("torch.", ""),
                   "seconds": round(time.time() - start, 2), **outcome.as_dict()})


def run_all(kind: str, workdir: str, jobs: int, limit: Optional[int], timeout: int,
            ops: Optional[List[str]] = None, checks: Optional[List[str]] = None, log=print) -> List[str]:
    """Runs sweep `kind` in `jobs` worker processes writing `workdir/<kind>-<i>.jsonl`;
    returns those paths. Existing results are kept (resume)."""
    os.makedirs(workdir, exist_ok=True)
    paths = [os.path.join(workdir, f"{kind}-{i}.jsonl") for i in range(jobs)]
    env = dict(os.environ, PYTHONWARNINGS="ignore")

    def start(i):
        cmd = [sys.executable, "-m", "torchneuron.coverage.runner", kind, str(i), str(jobs), paths[i],
               "--timeout", str(timeout)] + (["--limit", str(limit)] if limit else [])
        cmd += [a for name in ops or () for a in ("--op", name)]
        cmd += [a for name in checks or () for a in ("--check", name)]
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(paths[i] + ".log", "a"))

    procs = {i: start(i) for i in range(jobs)}
    sizes = {i: (-1, time.time()) for i in range(jobs)}
    while procs:
        time.sleep(5)
        for i, p in list(procs.items()):
            if p.poll() is not None:
                if p.returncode == 0:
                    del procs[i]
                    log(f"{kind} shard {i}/{jobs} done")
                else:  # crashed: the restarted worker records the case it was on
                    log(f"{kind} shard {i}/{jobs} exited with {p.returncode}; restarting")
                    procs[i] = start(i)
                continue
            size = os.path.getsize(paths[i]) if os.path.exists(paths[i]) else 0
            if size != sizes[i][0]:
                sizes[i] = (size, time.time())
            elif time.time() - sizes[i][1] > 2 * timeout + 60:
                log(f"{kind} shard {i}/{jobs} made no progress for {2 * timeout + 60} s; restarting")
                p.kill()
                p.wait()
                procs[i] = start(i)
                sizes[i] = (size, time.time())
    return paths


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="one worker of the coverage sweep")
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("shard", type=int)
    parser.add_argument("shards", type=int)
    parser.add_argument("path")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--timeout", type=int, default=120)
    parser.add_argument("--op", action="append", default=None)
    parser.add_argument("--check", action="append", default=None)
    a = parser.parse_args(argv)
    run_shard(a.kind, a.shard, a.shards, a.path, a.limit, a.timeout, a.op, a.check)


if __name__ == "__main__":
    main()
