"""out= tensors of another dtype than the result, on `neuron` against CPU PyTorch.

For every OpInfo of `op_db` with an out= variant, each dtype CPU supports, and a few out
dtypes (the input's, float64, int32, bool, complex128; those equal to the result's are
the coverage sweep's ``out`` check), the first sample CPU accepts runs on CPU and on
`neuron` with its first out tensor of that dtype (the others keep their result
dtypes). The two agree when both raise the same exception type, or both write the same
values. CPU's rule varies by kernel (TensorIterator computes in the common dtype and
casts safely, some kernels compute in the out tensor's dtype, torchgen's out wrappers
demand the exact dtype), so this is what checks `eager/out_dtypes.py`.

    python -m torchneuron.coverage.out_dtype_sweep [--op NAME ...] [--jsonl FILE]

prints every disagreement and the totals, and exits with 1 if a disagreement is not
listed in `expected.OUT_DTYPE_FAILURES` or a listed one agrees; ``--jsonl`` keeps
per-case results, and a rerun with the same file resumes after the cases it holds.
Errors of the same type whose messages differ count as agreeing and are counted apart.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import warnings
from typing import Iterator, List, Optional, Tuple

import torch
from torch.utils._pytree import tree_flatten

from . import expected
from .opinfo import _on_device, tolerances
from .outcome import describe, to_cpu

#: Out dtypes tried for every (op, dtype), besides the input dtype.
OUT_DTYPES = (torch.float64, torch.int32, torch.bool, torch.complex128)

AGREE, SKIP = "agree", "skip"
#: Kinds of disagreement: neuron raised and CPU did not, or the reverse, or another
#: exception type, or other values.
RAISED, DID_NOT_RAISE, OTHER_ERROR, VALUES = "raised", "did not raise", "other error", "values"


def _name(op) -> str:
    return expected.opinfo_name(op)


def out_ops(names=None) -> list:
    """The OpInfos of `op_db` with an out= variant (those named in `names` if given)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return [op for op in op_db if op.supports_out and (not names or _name(op) in names or op.name in names)]


def cases(ops) -> Iterator[Tuple[object, torch.dtype, torch.dtype]]:
    """(op, dtype, out dtype) for every CPU dtype of each op (those neuron has) and each
    out dtype tried."""
    for op in ops:
        for dtype in sorted(op.supported_dtypes("cpu"), key=str):
            if expected.EXPECTED_DTYPE_FAILURES.get(str(dtype).replace("torch.", "")):
                continue  # no tensor of it lives on neuron
            for out_dtype in dict.fromkeys((dtype,) + OUT_DTYPES):
                yield op, dtype, out_dtype


def _first_sample(op, dtype):
    """The first sample CPU computes, and its flattened results (None if there is none)."""
    torch.manual_seed(0)
    for sample in op.sample_inputs("cpu", dtype):
        try:
            want = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - CPU rejects the sample: try the next
            continue
        flat, spec = tree_flatten(want)
        if flat and all(isinstance(t, torch.Tensor) for t in flat):
            return sample, flat, spec, isinstance(want, torch.Tensor)
        return None
    return None


def _run(op, sample, flat, spec, single, out_dtype, device):
    """op(sample, out=...) with the first out tensor of `out_dtype`: (outs, error)."""
    outs = [torch.empty(t.shape, dtype=out_dtype if k == 0 else t.dtype, device=device)
            for k, t in enumerate(flat)]
    arg = outs[0] if single else spec.unflatten(outs)
    s = _on_device(op, sample) if device != "cpu" else \
        sample.transform(lambda t: t.clone() if isinstance(t, torch.Tensor) else t)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op(s.input, *s.args, **s.kwargs, out=arg)
            if device != "cpu":
                torch.neuron.synchronize()
    except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
        return None, exc
    return outs, None


def run_case(op, dtype, out_dtype, sample_cache: Optional[dict] = None) -> Tuple[str, str]:
    """Runs one case: (AGREE | SKIP | a kind of disagreement, detail). Message
    differences of errors of the same type count as agreement; the detail says so."""
    key = (_name(op), dtype)
    if sample_cache is not None and key in sample_cache:
        found = sample_cache[key]
    else:
        found = _first_sample(op, dtype)
        if sample_cache is not None:
            sample_cache[key] = found
    if found is None:
        return SKIP, "no sample CPU computes with tensor results"
    sample, flat, spec, single = found
    if out_dtype == flat[0].dtype:
        return SKIP, "out dtype is the result dtype (the coverage sweep's out check)"
    want, cpu_exc = _run(op, sample, flat, spec, single, out_dtype, "cpu")
    got, exc = _run(op, sample, flat, spec, single, out_dtype, "neuron")
    if cpu_exc is not None:
        if exc is None:
            return DID_NOT_RAISE, f"CPU raised {describe(cpu_exc)}"
        if type(exc) is not type(cpu_exc):
            return OTHER_ERROR, f"CPU raised {describe(cpu_exc)}; neuron {describe(exc)}"
        same = str(exc) == str(cpu_exc)
        return AGREE, "" if same else f"messages differ: CPU {describe(cpu_exc)}; neuron {describe(exc)}"
    if exc is not None:
        return RAISED, describe(exc)
    got = to_cpu(got)
    # Ties, random numbers and uninitialized memory: values are compared elsewhere, if at all.
    if expected.values_not_compared(op) or expected.expected_failure(_name(op), "out", dtype):
        ok = all((a.shape, a.dtype) == (e.shape, e.dtype) for a, e in zip(got, want))
        return (AGREE, "") if ok else (VALUES, "shapes or dtypes differ")
    process = sample.output_process_fn_grad
    try:
        got_p = tree_flatten(process(got[0] if single else spec.unflatten(got)))[0]
        want_p = tree_flatten(process(want[0] if single else spec.unflatten(want)))[0]
    except Exception:  # noqa: BLE001 - processing written for the result dtypes
        got_p, want_p = got, want
    # The coarsest of the input's, the result's and the out tensor's tolerances: which of
    # two float dtypes a result was computed in shows in rounding only; these cases are
    # about raising, and about integer, boolean or complex arithmetic versus float. A float
    # result truncated into an integer out tensor turns a last-place difference at an
    # integer boundary into 1; float8 tensors compare bitwise only.
    atol, rtol = tolerances(op, dtype)
    d_rtol, d_atol = torch.testing._comparison.default_tolerances(dtype, flat[0].dtype, out_dtype)
    atol, rtol = max(atol or 0, d_atol), max(rtol or 0, d_rtol)
    if flat[0].dtype.is_floating_point and not (out_dtype.is_floating_point or out_dtype.is_complex):
        atol = max(atol, 1)
    if out_dtype.is_floating_point and out_dtype.itemsize == 1:
        atol = rtol = 0
    try:
        torch.testing.assert_close(got_p, want_p, atol=atol, rtol=rtol, equal_nan=True)
    except AssertionError as err:
        return VALUES, describe(err, 200)
    return AGREE, ""


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout("case took over 120 s")


def main(argv: Optional[List[str]] = None) -> int:
    """The command line (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", action="append", help="only this OpInfo name (repeatable)")
    parser.add_argument("--jsonl", help="per-case results; an existing file is resumed")
    args = parser.parse_args(argv)
    import torchneuron  # noqa: F401  (registers the device)

    done = {}
    if args.jsonl and os.path.exists(args.jsonl):
        with open(args.jsonl) as f:
            for line in f:
                r = json.loads(line)
                done[(r["op"], r["dtype"], r["out"])] = r
    sink = open(args.jsonl, "a") if args.jsonl else None
    signal.signal(signal.SIGALRM, _alarm)
    samples: dict = {}
    records = list(done.values())
    start = time.time()
    for op, dtype, out_dtype in cases(out_ops(args.op)):
        key = (_name(op), str(dtype), str(out_dtype))
        if key in done:
            continue
        signal.alarm(120)
        try:
            verdict, detail = run_case(op, dtype, out_dtype, samples)
        except Exception as exc:  # noqa: BLE001 - a failure of the harness is a disagreement too
            verdict, detail = "harness", describe(exc)
        finally:
            signal.alarm(0)
        r = {"op": key[0], "dtype": key[1], "out": key[2], "verdict": verdict, "detail": detail}
        records.append(r)
        if sink:
            sink.write(json.dumps(r) + "\n")
            sink.flush()
    bad = [r for r in records if r["verdict"] not in (AGREE, SKIP)]
    listed = 0
    for r in sorted(bad, key=lambda r: (r["op"], r["dtype"], r["out"])):
        why = _listed(r)
        listed += bool(why)
        print(f"{r['op']} {r['dtype']} out={r['out']}: {r['verdict']}: {r['detail']}"
              + (f" [expected: {why}]" if why else ""))
    stale = [r for r in records if r["verdict"] == AGREE and _listed(r)]
    for r in stale:
        print(f"{r['op']} {r['dtype']} out={r['out']}: agrees, but is listed in OUT_DTYPE_FAILURES")
    ran = [r for r in records if r["verdict"] != SKIP]
    messages = [r for r in ran if r["verdict"] == AGREE and r["detail"]]
    print(f"cases run {len(ran)}, disagreements {len(bad)} ({listed} listed in expected.OUT_DTYPE_FAILURES), "
          f"same error type with another message {len(messages)} ({time.time() - start:.0f} s)")
    return 1 if len(bad) > listed or stale else 0


def _listed(record) -> Optional[str]:
    """The OUT_DTYPE_FAILURES reason of a per-case record, or None."""
    return expected.OUT_DTYPE_FAILURES.get(
        (record["op"], record["dtype"].replace("torch.", ""), record["out"].replace("torch.", "")))


if __name__ == "__main__":
    sys.exit(main())
