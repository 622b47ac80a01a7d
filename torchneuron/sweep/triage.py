"""Why the failures the sweep still shows are left as they are, by (model, stage).

Each entry states a cause found by looking at that model, so the report can show it
next to the failure. A fixed failure should leave this table: an entry whose stage
passes is reported as stale by `stale`.
"""
from __future__ import annotations

_KINK = ("a ReLU input within float32 rounding of zero takes the other side of the kink ({}: CPU {}, "
         "neuron {}, float64 {}), so one gradient element differs by its full value and every earlier "
         "layer's weight gradient follows; a rounding difference, not a lowering error "
         "(found with forward pre-hooks on the ReLUs of the CPU, neuron and float64 models)")

#: (model, stage) -> the cause of its failure.
CAUSES = {
    ("timm/dla46x_c", "backward"): _KINK.format("level2.tree1.relu", "-2.6e-8", "+4.1e-8", "exactly 0"),
    ("timm/dla169", "backward"): _KINK.format("level3.tree2.tree2.tree1.relu", "-1.5e-5", "+1.5e-4", "-1.3e-5"),
    ("timm/skresnet50d", "backward"): _KINK.format("layer3.4.conv2.paths.1.bn.act", "-1.5e-7", "+2.3e-7",
                                                   "-3.2e-7"),
    ("timm/densenet264d", "backward"): _KINK.format("denseblock1.denselayer5.norm2.act and "
                                                    "denseblock3.denselayer37.norm1.act", "+1.6e-7, -9.9e-7",
                                                    "-4.1e-7, +1.2e-6", "+1.3e-7, -3.3e-7"),
    ("transformers/maskformer", "backward"): _KINK.format("pixel_level_module.decoder.fpn.layers.2.block.2",
                                                          "+3.0e-7", "-1.1e-7", "+6.7e-7"),
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
