"""The sweep's results as a static HTML page.

The page holds: a summary (models covered per suite, the pass rates the issue's targets
are stated in), a matplotlib stacked bar chart per stage of pass / mismatch / error / timeout /
fallback / partial / skip counts (a PNG embedded as a data URI, so the page is one file), the
operators ranked by how many models they block (fell back to the CPU in one of its
stages), the failures grouped by error class and place, a table per model, and the
models the generic small config does not build, with the reason.
"""
from __future__ import annotations

import base64
import collections
import html
import io
import os
import string

from . import triage
from .worker import STAGES

STATUSES = ("pass", "mismatch", "error", "timeout", "fallback", "partial", "skip")
COLORS = {"pass": "#2e7d32", "mismatch": "#f9a825", "error": "#c62828", "timeout": "#6a1b9a",
          "fallback": "#1565c0", "partial": "#00838f", "skip": "#9e9e9e"}


def _covered(results: dict) -> list[dict]:
    return [r for _, r in sorted(results["models"].items()) if r.get("covered")]


def _status(result: dict, stage: str) -> str:
    return result["stages"].get(stage, {}).get("status", "skip")


def stage_counts(results: dict, suite: str | None = None) -> dict:
    """{stage: {status: number of covered models}} (of `suite` only, if given)."""
    counts = {s: collections.Counter() for s in STAGES}
    for r in _covered(results):
        if suite is None or r["model"].startswith(suite + "/"):
            for s in STAGES:
                counts[s][_status(r, s)] += 1
    return counts


def rates(results: dict, suite: str | None = None) -> dict:
    """The issue's target metrics over covered models (of `suite`, if given):
    ``covered``, ``not_covered``, ``eager`` (fraction passing forward and backward with
    no CPU fallback) and ``compiled`` (fraction passing compiled forward)."""
    rows = [r for r in results["models"].values() if suite is None or r["model"].startswith(suite + "/")]
    cov = [r for r in rows if r.get("covered")]
    n = len(cov)
    eager = [r for r in cov if _status(r, "forward") == "pass" and _status(r, "backward") == "pass"]
    compiled = [r for r in cov if _status(r, "compile") == "pass"]
    strict_eager = [r for r in eager if not any(_by_float64(r, s) for s in ("forward", "backward"))]
    strict_compiled = [r for r in compiled if not _by_float64(r, "compile")]
    return {"covered": n, "not_covered": len(rows) - n,
            "eager": len(eager) / n if n else 0.0, "compiled": len(compiled) / n if n else 0.0,
            "eager_strict": len(strict_eager) / n if n else 0.0,
            "compiled_strict": len(strict_compiled) / n if n else 0.0}


def _by_float64(result: dict, stage: str) -> bool:
    """Whether `stage` passed only by the float64 second opinion (its per-element
    comparison with CPU failed)."""
    return bool(result["stages"].get(stage, {}).get("criterion"))


def regenerate_command(results: dict) -> str:
    """The sweep command that runs the models of `results`: the first N of each suite,
    N the largest suite's count, with the per-model time limit it was run with."""
    counts = collections.Counter(r["model"].split("/")[0] for r in results["models"].values())
    limit = f" --limit {max(counts.values())}" if counts else ""
    timeout = results.get("meta", {}).get("timeout_s")
    return f"python -m torchneuron sweep --suite all{limit} --jobs 1" + (f" --timeout {timeout:g}" if timeout else "")


def blocking_ops(results: dict) -> list[tuple[str, int, list[str]]]:
    """[(op, number of models, the models)] of operators that ran through the CPU
    fallback in any stage of a covered model, most models first."""
    models = collections.defaultdict(set)
    for r in _covered(results):
        for s in STAGES:
            for op in r["stages"].get(s, {}).get("fallbacks", {}):
                models[op].add(r["model"])
    return sorted(((op, len(m), sorted(m)) for op, m in models.items()), key=lambda t: (-t[1], t[0]))


def failure_classes(results: dict) -> list[tuple[str, str, str, int, list[str]]]:
    """[(stage, error class, place in torchneuron, number of models, the models)] of
    failed stages (``error``, ``timeout``, ``mismatch`` and compile's ``partial``), most
    models first."""
    groups = collections.defaultdict(list)
    for r in _covered(results):
        for s in STAGES:
            e = r["stages"].get(s, {})
            if e.get("status") in ("error", "timeout", "mismatch", "partial"):
                kind = e.get("error_type", "Mismatch") if e["status"] != "mismatch" else "Mismatch"
                groups[(s, kind, e.get("where", ""))].append(r["model"])
    return sorted(((s, k, w, len(m), m) for (s, k, w), m in groups.items()), key=lambda t: (-t[3], t))


def chart_png(results: dict) -> bytes:
    """A stacked bar chart (PNG) of status counts per stage, one panel per suite."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = sorted({r["model"].split("/")[0] for r in _covered(results)}) or ["none"]
    fig, axes = plt.subplots(1, len(suites), figsize=(5 * len(suites), 3.6), squeeze=False)
    for ax, suite in zip(axes[0], suites):
        counts = stage_counts(results, suite)
        bottom = [0] * len(STAGES)
        for status in STATUSES:
            heights = [counts[s][status] for s in STAGES]
            ax.bar(STAGES, heights, bottom=bottom, color=COLORS[status], label=status)
            bottom = [b + h for b, h in zip(bottom, heights)]
        ax.set_title(f"{suite} ({rates(results, suite)['covered']} models)")
        ax.set_ylabel("models")
    axes[0][-1].legend(loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


_PAGE = string.Template("""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>torchneuron model sweep</title>
<style>
body { font-family: sans-serif; margin: 2em; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
.pass { background: #c8e6c9; } .mismatch { background: #fff59d; } .error { background: #ffcdd2; }
.fallback { background: #bbdefb; } .skip { background: #eeeeee; } .timeout { background: #e1bee7; }
.partial { background: #b2ebf2; }
.msg { font-size: 11px; color: #555; max-width: 50em; }
</style></head><body>
<h1>torchneuron model sweep</h1>
<p>$meta</p>
<p>Regenerate: <code>$regenerate</code> then
<code>python -m torchneuron report</code>.</p>
<h2>Summary</h2>
$summary
<p>In parentheses: the stages that passed the per-element comparison with the CPU alone,
without the float64 check (see Models).</p>
<h2>Status per stage</h2>
<img id="chart" alt="stacked bar chart of status counts per stage"
 src="data:image/png;base64,$chart">
<h2>Operators that fell back to the CPU, by models blocked</h2>
$ops
<h2>Failures by stage, error class and place</h2>
$failures
<h2>Models</h2>
<p>A result that differs from the CPU's beyond the per-element tolerance still passes
when it is as close to a float64 CPU run as the CPU's own float32 result is (PyTorch's
accuracy check for compiler backends, <code>torch._dynamo.utils.same</code>); the notes
name those stages and the strict difference.</p>
$models
<h2>Not covered</h2>
<p>Models the generic small config or generic inputs do not build or run on the CPU itself.</p>
$uncovered
</body></html>
""")


def _table(header, rows) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    return f"<table><tr>{head}</tr>" + "".join(rows) + "</table>"


def _cell(text, cls="") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<td{attr}>{html.escape(str(text))}</td>"


def render_html(results: dict) -> str:
    """The report page for `results` (a results file's content) as an HTML string."""
    meta = results.get("meta", {})
    versions = ", ".join(f"{k} {v}" for k, v in sorted(meta.get("versions", {}).items()))
    meta_text = html.escape(f"Updated {meta.get('updated', '?')}; seed {meta.get('seed', '?')}; "
                            f"{meta.get('timeout_s', '?')} s per model; {versions}. "
                            f"Last command: {meta.get('command') or '?'}")
    suites = sorted({r["model"].split("/")[0] for r in results["models"].values()})
    summary = []
    for suite in suites + [None]:
        rt = rates(results, suite)
        summary.append("<tr>" + _cell(suite or "all") + _cell(rt["covered"]) + _cell(rt["not_covered"])
                       + _cell(f"{100 * rt['eager']:.1f}% ({100 * rt['eager_strict']:.1f}%)")
                       + _cell(f"{100 * rt['compiled']:.1f}% ({100 * rt['compiled_strict']:.1f}%)") + "</tr>")
    summary_html = _table(["suite", "models covered", "not covered",
                           "forward + backward pass, no CPU fallback (per element)",
                           "compiled forward pass (per element)"], summary)
    ops = [("<tr>" + _cell(op) + _cell(n) + f'<td class="msg">{html.escape(", ".join(m))}</td></tr>')
           for op, n, m in blocking_ops(results)]
    failures = [("<tr>" + _cell(s) + _cell(k) + _cell(w) + _cell(n)
                 + f'<td class="msg">{html.escape(", ".join(m))}</td></tr>')
                for s, k, w, n, m in failure_classes(results)]
    rows = []
    for r in _covered(results):
        cells = "".join(_cell(_status(r, s), _status(r, s)) for s in STAGES)
        notes = []
        for s in STAGES:
            e = r["stages"].get(s, {})
            if e.get("error"):
                notes.append(f"{s}: {e.get('error_type', 'Mismatch')}: {e['error']}")
            if e.get("fallbacks"):
                notes.append(f"{s} fallbacks: {', '.join(sorted(e['fallbacks']))}")
            if e.get("criterion"):
                notes.append(f"{s} passed against the {e['criterion']} (strictly: {e['strict_error']})")
            if triage.cause(r["model"], s) and e.get("status") != "pass":
                notes.append(f"{s} cause: {triage.cause(r['model'], s)}")
        times = "/".join(f"{r['stages'].get(s, {}).get('time_s', 0):.1f}" for s in STAGES)
        rows.append("<tr>" + _cell(r["model"]) + _cell(f"{r.get('params', 0):,}") + cells + _cell(times)
                    + f'<td class="msg">{html.escape(" | ".join(notes))}</td></tr>')
    uncovered = [("<tr>" + _cell(r["model"]) + f'<td class="msg">{html.escape(r.get("reason", ""))}</td></tr>')
                 for _, r in sorted(results["models"].items()) if not r.get("covered")]
    return _PAGE.substitute(
        meta=meta_text, summary=summary_html, regenerate=html.escape(regenerate_command(results)),
        chart=base64.b64encode(chart_png(results)).decode("ascii"),
        ops=_table(["operator", "models", "which"], ops) if ops else "<p>None.</p>",
        failures=_table(["stage", "class", "where", "models", "which"], failures) if failures else "<p>None.</p>",
        models=_table(["model", "parameters", *STAGES, "seconds per stage", "errors and fallbacks"], rows),
        uncovered=_table(["model", "reason"], uncovered) if uncovered else "<p>None.</p>")


def render(results: dict, path: str) -> None:
    """Writes the report page for `results` to `path`, creating its directory."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(render_html(results))


def text_summary(results: dict) -> str:
    """A few lines for the terminal: covered models and pass rates per suite and stage."""
    lines = []
    suites = sorted({r["model"].split("/")[0] for r in results["models"].values()})
    for suite in suites + [None]:
        rt = rates(results, suite)
        counts = stage_counts(results, suite)
        per_stage = "; ".join(f"{s} " + " ".join(f"{k}={counts[s][k]}" for k in STATUSES if counts[s][k])
                              for s in STAGES)
        lines.append(f"{suite or 'all'}: {rt['covered']} covered, {rt['not_covered']} not covered; "
                     f"fwd+bwd pass {100 * rt['eager']:.1f}%, compiled {100 * rt['compiled']:.1f}%; {per_stage}")
    return "\n".join(lines)
