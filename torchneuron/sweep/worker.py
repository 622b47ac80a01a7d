"""One model through the sweep's stages, in the calling process.

Stages, each with its wall time in seconds:

- ``load``: build on the CPU with random weights from a fixed seed, run the CPU
  reference (forward, then backward of a fixed random projection of the outputs), then
  move a copy to ``neuron``.
- ``forward``: eager forward on ``neuron``, outputs compared with the CPU's.
- ``backward``: backward of the same loss, parameter gradients compared with the CPU's.
- ``compile``: ``torch.compile(model, backend="neuron")`` forward (no grad), compared
  with the CPU's outputs; the number of graphs the backend compiled, Dynamo's graph
  breaks and the graphs split around ops with no lowering are recorded.

A stage's status is ``pass``, ``mismatch`` (ran, numbers differ from the CPU beyond the
tolerance, and are further from a float64 CPU run than the CPU's own, see
`Float64Reference`), ``error`` (raised: error class and message recorded), ``fallback`` (numbers
match but operators ran through the CPU fallback; their names and call counts are
recorded from `torchneuron.fallback_ops()` deltas), ``partial`` (compile only: numbers
match but part of the forward ran outside compiled graphs), ``skip`` (an earlier stage
it needs failed) or, set by the runner, ``timeout`` (the worker was killed in this
stage). A model whose CPU reference itself fails is not covered (``covered: false`` with
the reason): the generic small config does not build it.

The runner calls `child` in a process of its own per model; by hand, run
``python -m torchneuron.sweep.worker MODEL OUT.json``. The result is rewritten to its
file after every stage, so a runner that kills a hung worker still has the stages it
finished.
"""
from __future__ import annotations

import copy
import json
import logging
import os
import sys
import time
import traceback

import torch

STAGES = ("load", "forward", "backward", "compile")

#: Per-element tolerances ``(rtol, atol)`` by dtype of the comparison with the CPU:
#: every element must satisfy ``|a - e| <= atol * scale + rtol * |e|``, as in
#: `torch.testing.assert_close`, with ``scale = max(1, max|e|)`` of the tensor.
#: torch.testing's defaults are for one operator on inputs of magnitude ~1; a model
#: accumulates reordering error layer by layer, and an element of a sum of many terms
#: (a gradient of a weight shared over positions) carries rounding error of the size of
#: those terms, not of itself: transformers/vit's patch-embedding gradient (largest
#: element 155) has elements off by 3.4e-5 from float32 summation order alone (2e-7 of
#: the scale). Hence the absolute floor in units of the tensor's scale, and float32's
#: rtol 1e-4 instead of 1.3e-6; wrong results are off by far more. Half precision and
#: float64 keep torch.testing's values.
TOLERANCES = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1e-4, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1e-4, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}


def flatten(value) -> list:
    """The tensors of a (nested) model output in a fixed order: tuples, lists, dict
    values and transformers' `ModelOutput` fields; other values are dropped."""
    if isinstance(value, torch.Tensor):
        return [value]
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flatten(v)]
    return []


def compare(actual: list, expected: list) -> str | None:
    """None when `actual` (any device) matches CPU `expected` tensor by tensor, else why.

    Each tensor is compared as `torch.testing.assert_close` compares, element by
    element with the `TOLERANCES` of its dtype (atol in units of the tensor's largest
    finite magnitude, if over 1): NaNs in the same places, infinities in the same places
    with the same signs; other dtypes must be equal."""
    if len(actual) != len(expected):
        return f"{len(actual)} output tensors, CPU has {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        a = a.detach().cpu()
        if a.shape != e.shape or a.dtype != e.dtype:
            return f"tensor {i}: {a.dtype}{list(a.shape)} vs CPU {e.dtype}{list(e.shape)}"
        rtol, atol = TOLERANCES.get(e.dtype, (0.0, 0.0))
        if atol:
            finite = e.detach()[torch.isfinite(e.detach())]
            atol *= max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
        try:
            torch.testing.assert_close(a, e.detach(), rtol=rtol, atol=atol, equal_nan=True,
                                       check_stride=False, check_layout=False)
        except AssertionError as err:
            # assert_close's message: mismatched elements, greatest differences and where.
            lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
            detail = "; ".join(ln for ln in lines if "not close" not in ln and "not equal" not in ln)
            return f"tensor {i}{list(e.shape)}: {detail or lines[0]}"
    return None


class Float64Reference:
    """The second opinion on a float comparison that failed: the model's outputs and
    parameter gradients computed on the CPU in float64, built (from the same seed) only
    when first needed.

    `accepts` applies PyTorch's accuracy check for compiler backends
    (`torch._dynamo.utils.same` with a float64 reference, as its benchmark suites use):
    a result passes when its RMS error against float64 is at most a small multiple of
    the CPU float32 result's own. Argmax ties and long sums rounded in another order
    then pass; a wrong result does not, its error being far larger than CPU's."""

    def __init__(self, name: str, seed: int, inputs: dict, weights: list):
        self._args = (name, seed, inputs, weights)
        self._values = None

    def _compute(self):
        from . import enumerate as models

        name, seed, inputs, weights = self._args
        model, _ = models.build(name, seed)
        model.double()
        wide = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
        outputs = flatten(model(**wide))
        loss = _loss(outputs, [w.double() if w is not None else None for w in weights])
        if isinstance(loss, torch.Tensor):
            loss.backward()
        return [o.detach() for o in outputs], _grads(model)

    def values(self):
        """(outputs, [(name, grad)]) in float64, or None when the model does not run in
        float64 (a dtype it insists on, an op with no float64 kernel)."""
        if self._values is None:
            try:
                self._values = self._compute()
            except Exception:  # noqa: BLE001 - no float64 opinion: the strict verdict stands
                self._values = False
        return self._values or None

    def accepts(self, actual: list, expected: list, which: str) -> bool:
        """Whether `actual` (neuron) is as close to float64 as CPU's `expected` is, tensor
        by tensor; `which` is "outputs" or "grads"."""
        from torch._dynamo.utils import same

        values = self.values()
        if values is None:
            return False
        wide = values[0] if which == "outputs" else [g for _, g in values[1]]
        if len(wide) != len(expected):
            return False
        for a, e, w in zip(actual, expected, wide):
            a = a.detach().cpu()
            if not e.is_floating_point():
                if not torch.equal(a, e):
                    return False
            elif not same(e.detach(), a, w, tol=TOLERANCES.get(e.dtype, (1e-4,))[0], equal_nan=True,
                          log_error=lambda *args: None):
                return False
        return True


def _loss(outputs: list, weights: list):
    """A fixed random projection of every floating output: its gradient reaches every
    output element (a plain sum has zero gradient through normalization layers)."""
    total = 0
    for out, w in zip(outputs, weights):
        if w is not None:
            total = total + (out.float() * w.to(out.device)).sum()
    return total


def _projection(outputs: list) -> list:
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(o.shape, generator=gen) if o.is_floating_point() and o.requires_grad else None
            for o in outputs]


def _reference_inputs(model, candidates: list):
    """(inputs, CPU outputs) of the first input candidate the CPU model runs; raises the
    first (fullest) candidate's error when none runs."""
    first = None
    for inputs in candidates:
        try:
            return inputs, flatten(model(**inputs))
        except Exception as exc:  # noqa: BLE001 - the next candidate may run
            first = first or exc
    raise first


def _judge(why: str | None, second_opinion, st: dict) -> str | None:
    """The stage's mismatch reason: `why` from the strict comparison, unless the
    float64 reference accepts the result (`second_opinion()`), which `st` then records
    (``criterion`` and the strict comparison's ``strict_error``)."""
    if why and second_opinion():
        st.update(criterion="float64 reference", strict_error=why)
        return None
    return why


def _grads(model) -> list:
    return [(n, p.grad) for n, p in model.named_parameters() if p.grad is not None]


class _Stage:
    """Times one stage and records its status, error and the fallback calls it made."""

    def __init__(self, result: dict, name: str, path: str | None):
        self.result, self.name, self.path = result, name, path

    def __enter__(self):
        import torchneuron
        from torchneuron import metrics

        self.before = dict(torchneuron.fallback_ops())
        self.compiles = _compile_work(metrics)
        self.start = time.perf_counter()
        self.entry = {"status": "error"}
        self.result["stages"][self.name] = self.entry
        return self.entry

    def __exit__(self, kind, exc, tb):
        import torchneuron
        from torchneuron import metrics

        self.entry["time_s"] = round(time.perf_counter() - self.start, 3)
        # Where the stage's time went: XLA compiles of eager ops and of graphs.
        executables, seconds = (b - a for a, b in zip(self.compiles, _compile_work(metrics)))
        if executables:
            self.entry.update(executables_compiled=executables, compile_s=round(seconds, 3))
        after = torchneuron.fallback_ops()
        new = {op: n - self.before.get(op, 0) for op, n in after.items() if n != self.before.get(op, 0)}
        if new:
            self.entry["fallbacks"] = new
        if exc is not None:
            self.entry.update(status="error", error_type=type(exc).__name__,
                              error=_short(str(exc)), where=_where(tb))
        elif self.entry.get("status") == "pass" and new:
            self.entry["status"] = "fallback"
        _save(self.result, self.path)
        return exc is not None and not isinstance(exc, KeyboardInterrupt)


def _compile_work(metrics) -> tuple[int, float]:
    """(executables compiled, seconds spent compiling them) so far, eager ops and graphs."""
    counts, times = metrics.counters(), metrics.times()
    return (counts.get("eager_executables_compiled", 0) + counts.get("graphs_compiled", 0),
            times.get("eager_compile_seconds", 0.0) + times.get("graph_compile_seconds", 0.0))


def _short(message: str, limit: int = 400) -> str:
    message = " ".join(message.split())
    return message if len(message) <= limit else message[:limit] + "..."


def _where(tb) -> str:
    """The innermost frame of the traceback inside torchneuron (where to fix it)."""
    frames = [f for f in traceback.extract_tb(tb) if "torchneuron" in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f"{f.filename.split('torchneuron', 1)[-1].lstrip(os.sep)}:{f.lineno}"


def _save(result: dict, path: str | None) -> None:
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, path)


def run_model(name: str, seed: int = 0, path: str | None = None, compile: bool = True) -> dict:
    """Runs model `name` (``"<suite>/<model>"``, see `enumerate.build`) through the stages.

    Returns ``{"model", "covered", "stages": {stage: {"status", "time_s", ...}}}``, also
    written to `path` (JSON) after each stage. Never raises for a model's failure."""
    from . import enumerate as models

    result = {"model": name, "covered": False, "stages": {}}
    _save(result, path)
    start = time.perf_counter()
    try:
        model, candidates = models.build(name, seed)
        # Copied before any forward: a model may cache non-leaf tensors while it runs,
        # and those cannot be deep-copied (timm's TinyViT attention biases).
        pristine = copy.deepcopy(model)
        inputs, ref_out = _reference_inputs(model, candidates)
        weights = _projection(ref_out)
        if not ref_out:
            raise ValueError("the model returned no tensors")
        # The reference backward goes through the reference forward's own graph (the
        # model is in eval mode: a second forward would compute the same outputs).
        loss = _loss(ref_out, weights)
        ref_out = [o.detach() for o in ref_out]
        if isinstance(loss, torch.Tensor):
            loss.backward()
        ref_grads = _grads(model)
        model.zero_grad(set_to_none=True)
        wide = Float64Reference(name, seed, inputs, weights)
    except Exception as exc:  # noqa: BLE001 - any failure means "not buildable here"
        result["reason"] = f"{type(exc).__name__}: {_short(str(exc), 200)}"
        _save(result, path)
        return result
    result["covered"] = True
    result["params"] = sum(p.numel() for p in model.parameters())
    # On disk before the move to neuron: a worker killed from here on (a crash, a hang,
    # the OOM killer) is that stage's error, not a model the sweep could not build.
    _save(result, path)
    cpu_time = time.perf_counter() - start

    with _Stage(result, "load", path) as st:
        dev_model = pristine.to("neuron")
        dev_inputs = {k: v.to("neuron") for k, v in inputs.items()}
        st["status"] = "pass"
    st["cpu_reference_s"] = round(cpu_time, 3)
    ok = st["status"] in ("pass", "fallback")

    out = None
    with _Stage(result, "forward", path) as st:
        if not ok:
            st["status"] = "skip"
        else:
            out = flatten(dev_model(**dev_inputs))
            why = _judge(compare(out, ref_out), lambda: wide.accepts(out, ref_out, "outputs"), st)
            st["status"] = "mismatch" if why else "pass"
            if why:
                st["error"] = why

    with _Stage(result, "backward", path) as st:
        if out is None:
            st["status"] = "skip"
        else:
            loss = _loss(out, weights)
            if isinstance(loss, torch.Tensor):
                loss.backward()
            grads = _grads(dev_model)
            names = [n for n, _ in ref_grads]
            if [n for n, _ in grads] != names:
                st["status"] = "mismatch"
                st["error"] = f"{len(grads)} parameters got gradients, CPU {len(names)}"
            else:
                why = _judge(compare([g for _, g in grads], [g for _, g in ref_grads]),
                             lambda: wide.accepts([g for _, g in grads], [g for _, g in ref_grads], "grads"), st)
                st["status"] = "mismatch" if why else "pass"
                if why:
                    # Name the parameter: "tensor 3" alone says little.
                    i = int(why.split()[1].split("[")[0].rstrip(":"))
                    st["error"] = f"grad of {names[i]}: {why}"

    with _Stage(result, "compile", path) as st:
        if not ok or not compile:
            st["status"] = "skip"
        else:
            _compiled_forward(dev_model, dev_inputs, ref_out, st, wide)
    return result


class _SplitOps(logging.Handler):
    """Collects the ops the compile backend split out of its graphs for want of a
    lowering, from the one warning in which the backend names them."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.ops = set()

    def emit(self, record):
        if record.msg.startswith("torchneuron: compiled graph is split around ops") and record.args:
            self.ops.update(record.args[0])


def _compiled_forward(dev_model, dev_inputs, ref_out: list, st: dict, wide: Float64Reference) -> None:
    """The compile stage: runs ``torch.compile(dev_model, backend="neuron")`` (no grad),
    compares with the CPU and records in `st` how much of the forward the backend ran:
    ``graphs`` it compiled, Dynamo's ``graph_breaks`` (Python between graphs ran
    eagerly) and ``split_graphs`` (graphs split around ops with no lowering, which ran
    eagerly; ``split_ops`` names those ops). Matching outputs are ``pass`` only when all
    of the forward was compiled: with breaks or splits the status is ``partial``, with
    no graph at all (Dynamo skipped the code, so it all ran eagerly) an ``error`` of
    class ``NotCompiled``."""
    from torch._dynamo.utils import counters

    from .. import metrics

    torch._dynamo.reset()
    counters.clear()
    splits = metrics.get("graph_partitions")
    neuron = torch._dynamo.lookup_backend("neuron")
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return neuron(gm, example_inputs)

    dev_model.zero_grad(set_to_none=True)
    compiled = torch.compile(dev_model, backend=counting_backend)
    split_ops = _SplitOps()
    logging.getLogger("torchneuron").addHandler(split_ops)
    try:
        with torch.no_grad():
            out = flatten(compiled(**dev_inputs))
    finally:
        logging.getLogger("torchneuron").removeHandler(split_ops)
    breaks = counters["graph_break"]
    st.update(graphs=len(graphs), graph_breaks=sum(breaks.values()),
              split_graphs=metrics.get("graph_partitions") - splits)
    if split_ops.ops:
        st["split_ops"] = sorted(split_ops.ops)
    why = _judge(compare(out, ref_out), lambda: wide.accepts(out, ref_out, "outputs"), st)
    if why:
        st.update(status="mismatch", error=why)
    elif not graphs:
        st.update(status="error", error_type="NotCompiled",
                  error="Dynamo compiled no graph: the whole forward ran eagerly")
    elif breaks or st["split_graphs"]:
        reasons = "; ".join(_short(r, 120) for r, _ in breaks.most_common(3))
        st.update(status="partial", error_type="GraphBreak" if breaks else "GraphSplit",
                  error=f"{st['graph_breaks']} graph breaks{f' ({reasons})' if reasons else ''}, "
                        f"{st['split_graphs']} of {len(graphs)} graphs split around ops with no lowering")
        if split_ops.ops:
            # The report groups failures by "where": here, the lowerings to add.
            st["where"] = "no lowering: " + ", ".join(sorted(split_ops.ops))
    else:
        st["status"] = "pass"


def child(name: str, path: str, log: str, seed: int, compile: bool, jax_cache: str | None) -> None:
    """Entry point of a runner's worker process: output goes to the file `log`; with
    `jax_cache`, JAX's persistent compilation cache is on, so the eager executables one
    model compiled (same op, shapes, dtypes) load in the next model's process."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    _quiet()
    if jax_cache:
        import jax

        jax.config.update("jax_compilation_cache_dir", jax_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    run_model(name, seed, path, compile=compile)


def _quiet() -> None:
    import warnings

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)


def main(argv=None) -> int:
    """``python -m torchneuron.sweep.worker MODEL OUT.json [--seed S] [--no-compile]``."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args(argv)
    _quiet()
    run_model(args.model, args.seed, args.out, compile=not args.no_compile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
