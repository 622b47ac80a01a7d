"""The sweep report: its aggregates from a small hand-made results file, and the page
loaded in a real headless browser (Debian's chromium; scripts/install_chromium.sh)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from torchneuron.sweep import report

STAGES = ("load", "forward", "backward", "compile")


def _model(name, statuses, fallbacks=None, error=None):
    stages = {s: {"status": st, "time_s": 1.0} for s, st in zip(STAGES, statuses)}
    for stage, ops in (fallbacks or {}).items():
        stages[stage]["fallbacks"] = ops
    if error:
        stage, kind, where = error
        stages[stage].update(error_type=kind, error="boom <b>", where=where)
    return {"model": name, "covered": True, "params": 1000, "stages": stages}


RESULTS = {
    "meta": {"updated": "2026-01-01T00:00:00+00:00", "seed": 0, "timeout_s": 180,
             "versions": {"torch": "2.14.1"}},
    "models": {m["model"]: m for m in [
        _model("timm/a", ["pass"] * 4),
        _model("timm/b", ["pass", "fallback", "fallback", "pass"],
               fallbacks={"forward": {"aten::foo": 2}, "backward": {"aten::foo": 1, "aten::bar": 1}}),
        _model("transformers/c", ["pass", "pass", "mismatch", "error"],
               error=("compile", "NotImplementedError", "compile/graph.py:10")),
        _model("transformers/d", ["pass", "fallback", "pass", "fallback"],
               fallbacks={"forward": {"aten::foo": 1}, "compile": {"aten::baz": 1}}),
        {"model": "transformers/e", "covered": False, "stages": {}, "reason": "ValueError: no"},
    ]},
}


def test_aggregates_match_hand_counts():
    counts = report.stage_counts(RESULTS)
    assert counts["forward"] == {"pass": 2, "fallback": 2}
    assert counts["backward"] == {"pass": 2, "fallback": 1, "mismatch": 1}
    assert counts["compile"] == {"pass": 2, "error": 1, "fallback": 1}
    # Forward and backward both pass with no fallback: timm/a only, of 4 covered.
    assert report.rates(RESULTS) == {"covered": 4, "not_covered": 1, "eager": 0.25, "compiled": 0.5,
                                     "eager_strict": 0.25, "compiled_strict": 0.5}
    assert report.rates(RESULTS, "timm")["eager"] == 0.5
    # A stage passed by the float64 check counts, and is left out of the strict rates.
    by_float64 = json.loads(json.dumps(RESULTS))
    by_float64["models"]["timm/a"]["stages"]["backward"]["criterion"] = "float64 reference"
    assert report.rates(by_float64)["eager"] == 0.25 and report.rates(by_float64)["eager_strict"] == 0.0
    assert report.rates(by_float64)["compiled_strict"] == 0.5
    # The first N models of each suite (N the larger suite's count), at the recorded time limit.
    assert report.regenerate_command(RESULTS) == "python -m torchneuron sweep --suite all --limit 3 --jobs 1 --timeout 180"
    ops = report.blocking_ops(RESULTS)
    assert ops[0] == ("aten::foo", 2, ["timm/b", "transformers/d"])
    assert {op for op, _, _ in ops} == {"aten::foo", "aten::bar", "aten::baz"}
    failures = report.failure_classes(RESULTS)
    assert ("compile", "NotImplementedError", "compile/graph.py:10", 1, ["transformers/c"]) in failures


def test_page_escapes_messages():
    page = report.render_html(RESULTS)
    assert "boom &lt;b&gt;" in page and "boom <b>" not in page
    assert page.count('<td class="pass">pass</td>') == 4 + 2 + 2 + 2


def test_recorded_causes_show_beside_their_failures(monkeypatch):
    from torchneuron.sweep import triage

    monkeypatch.setattr(triage, "CAUSES", {("transformers/c", "backward"): "a kink <here>",
                                           ("timm/a", "backward"): "fixed since"})
    page = report.render_html(RESULTS)
    assert "backward cause: a kink &lt;here&gt;" in page
    assert "fixed since" not in page  # timm/a passes: no cause shown
    assert triage.stale(RESULTS) == [("timm/a", "backward")]


def test_committed_causes_are_for_failures_in_the_committed_results():
    """A cause left in the table after its failure was fixed would mislabel the page."""
    from torchneuron.sweep import runner, triage

    results = runner.load(os.path.join(os.path.dirname(__file__), "..", "sweep", "results.json"),
                          missing_ok=False)
    assert triage.stale(results) == []


# Runs after the page loads: records whether the chart decoded and any script error.
_PROBE = """<script>
window.addEventListener("error", e => document.body.dataset.jsError = String(e.message));
window.addEventListener("load", () => {
  const img = document.getElementById("chart");
  document.body.dataset.chart = img.complete && img.naturalWidth > 0 ? "loaded" : "broken";
  document.body.dataset.rows = document.querySelectorAll("table tr").length;
});
</script></body>"""


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium missing: run scripts/install_chromium.sh")
def test_report_renders_in_headless_chromium(tmp_path):
    page = tmp_path / "report.html"
    # The real CLI renders the page from a results file.
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RESULTS))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-m", "torchneuron", "report", "--results", str(results), "--out", str(page)],
                   check=True, env=env, capture_output=True, timeout=120)
    page.write_text(page.read_text().replace("</body>", _PROBE))
    proc = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", proc.stdout)
    assert body, proc.stdout[:2000]
    assert 'data-chart="loaded"' in body.group(1), body.group(1)
    assert "data-js-error" not in body.group(1), body.group(1)
    # Table rows with headers: summary 1+3 (timm, transformers, all), operators 1+3,
    # failures 1+2, models 1+4, not covered 1+1.
    assert 'data-rows="18"' in body.group(1), body.group(1)
    # Chromium logs every console message as "...:CONSOLE:<line>] ..." (script errors
    # included); the page itself logs nothing.
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console


def test_timeout_and_partial_compile_are_statuses_of_their_own():
    slow = _model("timm/slow", ["pass", "pass", "timeout", "skip"])
    slow["stages"]["backward"].update(error_type="Timeout", error="model exceeded the 150 s limit")
    broken = _model("timm/broken", ["pass", "pass", "pass", "partial"])
    broken["stages"]["compile"].update(error_type="GraphBreak", error="1 graph breaks", graphs=2, graph_breaks=1)
    results = {"meta": {}, "models": {"timm/slow": slow, "timm/broken": broken}}
    counts = report.stage_counts(results)
    assert counts["backward"] == {"timeout": 1, "pass": 1} and counts["compile"] == {"skip": 1, "partial": 1}
    assert report.rates(results)["compiled"] == 0.0
    assert report.failure_classes(results) == [("backward", "Timeout", "", 1, ["timm/slow"]),
                                               ("compile", "GraphBreak", "", 1, ["timm/broken"])]
    assert "backward pass=1 timeout=1" in report.text_summary(results)
    page = report.render_html(results)
    assert '<td class="timeout">timeout</td>' in page and '<td class="partial">partial</td>' in page


def _cli(capsys, *argv):
    """(exit status, stderr) of ``python -m torchneuron ARGV``, run in this process."""
    from torchneuron.__main__ import main

    status = main(list(argv))
    return status, capsys.readouterr().err


def test_cli_refuses_unknown_models_and_bad_results_files(tmp_path, capsys):
    out = tmp_path / "results.json"
    # A typo is refused before anything runs, with the closest names.
    status, err = _cli(capsys, "sweep", "--model", "timm/resnet1", "--out", str(out), "--report", "")
    assert status == 2 and "unknown model timm/resnet1 (did you mean" in err and "timm/resnet18" in err, err
    status, err = _cli(capsys, "sweep", "--model", "resnet18", "--out", str(out), "--report", "")
    assert status == 2 and "unknown model resnet18" in err, err
    assert not out.exists()
    status, err = _cli(capsys, "report", "--results", str(out), "--out", str(tmp_path / "r.html"))
    assert status == 2 and "no results file" in err, err
    # A truncated file: reported, and never overwritten by a sweep.
    text = json.dumps(RESULTS)[:-20]
    out.write_text(text)
    status, err = _cli(capsys, "report", "--results", str(out), "--out", str(tmp_path / "r.html"))
    assert status == 2 and "not valid JSON" in err and str(out) in err, err
    status, err = _cli(capsys, "sweep", "--model", "timm/test_resnet", "--out", str(out), "--report", "")
    assert status == 2 and "not valid JSON" in err, err
    assert out.read_text() == text
    out.write_text("[1, 2]")
    status, err = _cli(capsys, "report", "--results", str(out), "--out", str(tmp_path / "r.html"))
    assert status == 2 and "not a sweep results file" in err, err
    assert not (tmp_path / "r.html").exists()
    for entry in ({"covered": True, "stages": {}}, {"model": "timm/a", "covered": True}):
        out.write_text(json.dumps({"meta": {}, "models": {"timm/a": entry}}))
        status, err = _cli(capsys, "report", "--results", str(out), "--out", str(tmp_path / "r.html"))
        assert status == 2 and "the entry for 'timm/a' is not a model's result" in err, err
    # The report's directory is made, as the sweep makes its results file's.
    out.write_text(json.dumps(RESULTS))
    status, err = _cli(capsys, "report", "--results", str(out), "--out", str(tmp_path / "new" / "r.html"))
    assert status == 0 and (tmp_path / "new" / "r.html").exists(), err


@pytest.mark.parametrize("flag, value", [("--jobs", "0"), ("--limit", "-1"), ("--timeout", "-5")])
def test_cli_refuses_out_of_range_counts(flag, value, capsys):
    """argparse's usage error (exit 2) before anything runs: `--limit -1` would slice off
    the last model and `--jobs 0` fail inside the process pool."""
    with pytest.raises(SystemExit) as exit_:
        _cli(capsys, "sweep", "--model", "timm/test_resnet", flag, value, "--report", "")
    assert exit_.value.code == 2
    assert f"argument {flag}: must be at least" in capsys.readouterr().err
