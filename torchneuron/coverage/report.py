"""`python -m torchneuron coverage`: runs the OpInfo and ModuleInfo sweeps and the core
ATen classification, and writes `coverage.json` and `COVERAGE.md`.

Each case's verdict comes from `expected.judge`, the same function the tests use. The
totals count a (name, dtype) pair of a check as passing when it ran natively or
decomposed with no CPU fallback and matched CPU; pairs with no sample CPU accepts are
left out of the rates and counted apart.
"""
from __future__ import annotations

import collections
import datetime
import glob
import json
import os
import platform
import time
from typing import Dict, List

from . import core_aten, expected, runner
from .outcome import FALLBACK, NO_SAMPLES

_CODE = {"native": "N", "decomposed": "D", "cpu_fallback": "F", "failing": "X", "no_samples": "-"}


def _records(paths: List[str]) -> List[dict]:
    out = {}
    for path in paths:
        out.update(runner.read_results(path)[0])
    return [out[k] for k in sorted(out)]


def _judged(records: List[dict]) -> List[dict]:
    class _O:  # the fields `expected.judge` reads
        def __init__(self, rec):
            self.status, self.reason, self.fallbacks = rec["status"], rec["reason"], rec["fallbacks"]
            self.samples = rec.get("samples", 0)

    for rec in records:
        rec["verdict"], rec["why"] = expected.judge(_O(rec), rec["name"], rec["check"], rec["dtype"])
    return records


def _rates(records: List[dict]) -> Dict[str, dict]:
    totals: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for rec in records:
        t = totals[rec["check"]]
        if rec["status"] == NO_SAMPLES:
            t["no_samples"] += 1
            continue
        t["pairs"] += 1
        t[rec["status"]] += 1
        if rec["verdict"] == "pass" and rec["status"] != FALLBACK:
            t["pass_no_fallback"] += 1
        t[rec["verdict"]] += 1
    out = {}
    for check, t in sorted(totals.items()):
        # (Counter reads a missing count as 0: a check with no passing pair still has one.)
        out[check] = dict(t, pass_no_fallback=t["pass_no_fallback"],
                          pass_rate=round(t["pass_no_fallback"] / t["pairs"], 4) if t["pairs"] else None)
    return out


def build(opinfo_records: List[dict], module_records: List[dict], core: List[dict], meta: dict) -> dict:
    """The report as a JSON-able dict: metadata, totals, then every case."""
    core_counts = collections.Counter(c["status"] for c in core)
    return {
        "meta": meta,
        "totals": {
            "core_aten": {"overloads": len(core), **core_counts,
                          "no_cpu_fallback_rate": round(1 - core_counts[core_aten.FALLBACK] / len(core), 4)},
            "opinfo": _rates(opinfo_records),
            "modules": _rates(module_records),
        },
        "core_aten": core,
        "opinfo": opinfo_records,
        "modules": module_records,
    }


def _pct(t: dict) -> str:
    return f"{t['pass_no_fallback']}/{t['pairs']} ({100 * t['pass_rate']:.1f}%)" if t.get("pairs") else "n/a"


def _table(records: List[dict], checks) -> List[str]:
    rows = collections.defaultdict(dict)
    for rec in records:
        code = _CODE[rec["status"]]
        if rec["verdict"] == "fail":
            code = "X!"
        elif rec["verdict"] == "xfail":
            code = "x"
        elif rec["status"] == "failing":
            code = "X"
        rows[(rec["name"], rec["dtype"])][rec["check"]] = code
    lines = ["| op | dtype | " + " | ".join(checks) + " |", "|---|---|" + "---|" * len(checks)]
    for (name, dtype), cells in sorted(rows.items()):
        lines.append(f"| {name} | {dtype} | " + " | ".join(cells.get(c, "") for c in checks) + " |")
    return lines


def _failures(records: List[dict]) -> List[str]:
    lines = []
    for rec in records:
        if rec["verdict"] in ("fail", "xfail", "xpass") or rec["status"] == FALLBACK:
            reason = rec["why"] or ("CPU fallback (allowed): " + ", ".join(sorted(rec["fallbacks"])))
            if rec["verdict"] == "xfail":
                reason = f"{reason} (observed: {rec['reason'] or 'CPU fallback ' + ', '.join(rec['fallbacks'])})"
            reason = reason.replace("|", "\\|")
            lines.append(f"| {rec['name']} | {rec['check']} | {rec['dtype']} | {rec['verdict']} | {reason} |")
    if not lines:
        return ["None."]
    return ["| op | check | dtype | verdict | reason |", "|---|---|---|---|---|"] + lines


def _samples_line(meta: dict) -> str:
    # A report written with --no-run merges records of runs with different --samples.
    ran = meta.get("cases_by_samples_run")
    if ran is None:
        return f"samples per case: {meta['samples_per_case'] or 'all'}"
    return "samples per case as each record ran: " + ", ".join(f"{n} cases {k}" for k, n in ran.items())


def markdown(report: dict) -> str:
    """COVERAGE.md: totals first, then the core ATen table, the per-(op, dtype) tables
    and every failure or fallback with its reason."""
    t, meta = report["totals"], report["meta"]
    core = t["core_aten"]
    out = [
        "# Operator coverage on `neuron`", "",
        f"Generated by `{meta['command']}` on {meta['date']} ({meta['platform']}, torch {meta['torch']}, "
        f"jax {meta['jax']}; {meta['seconds']:.0f} s; {_samples_line(meta)}).", "",
        f"Cases run: " + ", ".join(f"{k} {meta['cases_run'][k]} of {meta['cases_planned'][k]}"
                                    for k in meta["cases_planned"]) +
        f" ({meta['case_seconds']} s of case time). Cases not run are not counted in the rates.", "",
        *([("Cases run per check (run of planned): " + "; ".join(
            f"{kind} " + ", ".join(f"{c} {rp[0]} of {rp[1]}" for c, rp in checks.items())
            for kind, checks in meta["cases_by_check"].items() if checks) + "."), ""]
          if meta.get("cases_by_check") else []),
        "## Totals", "",
        f"- Core ATen overloads (`torch.Tag.core`) with no CPU fallback: "
        f"{core['overloads'] - core.get('cpu_fallback', 0)}/{core['overloads']} "
        f"({100 * core['no_cpu_fallback_rate']:.1f}%): native {core.get('native', 0)}, "
        f"decomposed {core.get('decomposed', 0)}, CPU fallback {core.get('cpu_fallback', 0)}.",
    ]
    for kind in ("opinfo", "modules"):
        for check, r in t[kind].items():
            out.append(f"- {kind} {check}: (name, dtype) pairs passing with no CPU fallback: {_pct(r)}; "
                       f"failing {r.get('failing', 0)} (expected {r.get('xfail', 0)}), "
                       f"CPU fallback {r.get('cpu_fallback', 0)}, no sample CPU accepts {r.get('no_samples', 0)}.")
    out += ["", "## Platform differences", "",
            "Expected failures outside the sweeps' samples, from the platform below the lowerings "
            "(`coverage/expected.py` PLATFORM_DIFFERENCES); each is pinned by a strict-xfail test.", ""]
    out += [f"- **{name}**: {why} Test: `{test}`." for name, (why, test) in expected.PLATFORM_DIFFERENCES.items()]
    out += ["", "## Known differences", "",
            "Differences from CPU outside the sweeps' samples that torchneuron keeps, with why "
            "(`coverage/expected.py` KNOWN_DIFFERENCES); each is pinned by a strict-xfail test.", ""]
    out += [f"- **{name}**: {why} Test: `{test}`." for name, (why, test) in expected.KNOWN_DIFFERENCES.items()]
    out += ["", "## out= tensors of other dtypes", "",
            "out= calls whose out tensor has another dtype than the result, where neuron still differs from "
            "CPU (`coverage/expected.py` OUT_DTYPE_FAILURES; the sweep is "
            "`python -m torchneuron.coverage.out_dtype_sweep`); each is a strict xfail in "
            "`tests/test_out_inplace.py::test_out_dtype_expected_failures`.", ""]
    out += [f"- {name} {dtype} out={out_dtype}: {why}"
            for (name, dtype, out_dtype), why in expected.OUT_DTYPE_FAILURES.items()] or ["None."]
    out += ["", "## Expected failures at later samples", "",
            "Differences from CPU that the all-samples spot checks found first at a later sample "
            "(`coverage/expected.py` FIRST_FAILING_SAMPLE): a run of fewer samples per case does not reach "
            "them, and the tables below count such a case as passing.", ""]
    out += [f"- {name} {check} {dtype}, from sample {first}: {expected.expected_failure(name, check, dtype)}"
            for (name, check, dtype), first in sorted(expected.FIRST_FAILING_SAMPLE.items())]
    out += ["", "Codes: N native, D decomposed (no CPU fallback), F CPU fallback, x expected failure, "
            "X! unexpected failure, - no sample. Reasons are in the failure lists below.", "",
            "## Core ATen overloads", "", "| overload | status | how |", "|---|---|---|"]
    out += [f"| {c['op']} | {c['status']} | {c['how']} |" for c in report["core_aten"]]
    from . import modules, opinfo
    out += ["", "## OpInfo sweep (`op_db`)", ""] + _table(report["opinfo"], opinfo.CHECKS)
    out += ["", "### OpInfo failures and fallbacks", ""] + _failures(report["opinfo"])
    out += ["", "## ModuleInfo sweep (`module_db`)", ""] + _table(report["modules"], modules.CHECKS)
    out += ["", "### ModuleInfo failures and fallbacks", ""] + _failures(report["modules"])
    return "\n".join(out) + "\n"


def main(args) -> int:
    """Runs the sweeps (resuming from `args.workdir`) and writes the report into `args.out`."""
    import jax
    import torch

    start = time.time()
    workdir = args.workdir or os.path.join(args.out, ".work")
    results = {}
    for kind in runner.KINDS:
        if kind not in args.kinds:
            results[kind] = []
            continue
        if not args.no_run:
            runner.run_all(kind, workdir, args.jobs, args.samples, args.timeout, args.op or None, args.checks)
        # Every shard file counts, also those of an earlier run with another --jobs.
        results[kind] = _judged(_records(glob.glob(os.path.join(workdir, f"{kind}-*.jsonl"))))
    wanted = set(args.checks or ()) or None
    for kind in results:  # the workdir may hold cases of other checks or ops than those asked for
        results[kind] = [r for r in results[kind] if (wanted is None or r["check"] in wanted)
                         and (not args.op or r["name"] in args.op)]
    planned_by_check = {kind: dict(collections.Counter(c for _, c, _, _ in runner._cases(kind, args.op, args.checks)))
                        if kind in args.kinds else {} for kind in runner.KINDS}
    run_by_check = {kind: dict(collections.Counter(r["check"] for r in v)) for kind, v in results.items()}
    meta = {"cases_planned": {k: sum(v.values()) for k, v in planned_by_check.items()},
            "cases_run": {k: len(v) for k, v in results.items()},
            "cases_by_check": {kind: {c: [run_by_check[kind].get(c, 0), n] for c, n in planned_by_check[kind].items()}
                               for kind in runner.KINDS},
            "case_seconds": round(sum(r.get("seconds", 0) for v in results.values() for r in v)),
            "command": "python -m torchneuron coverage " + " ".join(args.argv), "date":
            datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "platform": platform.platform(), "torch": torch.__version__, "jax": jax.__version__,
            "seconds": time.time() - start, "samples_per_case": args.samples,
            "checks": args.checks or "all"}
    if args.no_run:
        ran = collections.Counter(r.get("samples", 0) for v in results.values() for r in v)
        meta["samples_per_case"] = None
        meta["cases_by_samples_run"] = {"with 1 sample": ran[1],
                                        "with more": sum(n for k, n in ran.items() if k > 1)}
    report = build(results["opinfo"], results["modules"], core_aten.report(), meta)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "coverage.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    with open(os.path.join(args.out, "COVERAGE.md"), "w") as f:
        f.write(markdown(report))
    print(json.dumps(report["totals"], indent=1))
    return 0


def add_arguments(parser) -> None:
    """The `coverage` subcommand's options."""
    parser.add_argument("--out", default="docs/coverage", help="where coverage.json and COVERAGE.md go")
    parser.add_argument("--workdir", default=None, help="per-case results, kept for resuming (default OUT/.work)")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="worker processes")
    parser.add_argument("--samples", type=int, default=None, help="samples per case (default: all)")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per case before it counts as failing")
    parser.add_argument("--kinds", nargs="+", default=list(runner.KINDS), choices=runner.KINDS)
    parser.add_argument("--op", action="append", help="only this OpInfo/ModuleInfo name (repeatable)")
    parser.add_argument("--no-run", action="store_true",
                        help="write the report from the results already in the workdir, running nothing")
    parser.add_argument("--checks", nargs="+", default=None,
                        help="only these checks (forward noncontiguous backward out inplace errors unsupported; "
                             "default all)")
