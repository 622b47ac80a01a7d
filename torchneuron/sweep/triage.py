"""Why the failures the sweep still shows are left as they are, by (model, stage).

Each entry states a cause found by looking at that model, so the report can show it
next to the failure. A fixed failure should leave this table: an entry whose stage
passes is reported as stale by `stale`.
"""
from __future__ import annotations

#: (model, stage) -> the cause of its failure.
CAUSES = {
    ("timm/dla46x_c", "backward"):
        "a ReLU input within rounding of zero (level2.tree1, one element: CPU -2.6e-8, neuron +4.1e-8, "
        "float64 -1.3e-7, from sums of magnitude ~10) takes the other side of the kink, so one "
        "gradient element differs by its full value and every earlier layer's weight gradient "
        "follows; a float32 rounding difference, not a lowering error",
}


def cause(model: str, stage: str) -> str:
    """The recorded cause of `model`'s failure in `stage`, or ''."""
    return CAUSES.get((model, stage), "")


def stale(results: dict) -> list:
    """[(model, stage)] of causes whose stage now passes (or whose model is not in
    `results`), to be removed from `CAUSES`."""
    out = []
    for (model, stage) in CAUSES:
        entry = results["models"].get(model, {}).get("stages", {}).get(stage, {})
        if entry.get("status", "pass") == "pass":
            out.append((model, stage))
    return out
