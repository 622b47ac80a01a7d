"""One OpInfo (`torch.testing._internal.common_methods_invocations.op_db`) checked on
`neuron` against CPU PyTorch, per dtype and per check:

- ``forward``: each sample's result equals CPU's (after the sample's
  ``output_process_fn_grad``, as PyTorch's own ``test_compare_cpu`` does);
- ``noncontiguous``: the same with the sample's non-contiguous copy on `neuron`, or the
  exception type CPU raises for that copy (view_as_complex needs a unit last stride);
- ``backward``: the gradients of every input that requires grad equal CPU's, for the
  same random output gradients;
- ``out``: ``op(..., out=t)`` writes into and returns the given tensors what CPU's same
  out= call writes (compared after the sample's ``output_process_fn_grad``, as
  ``forward``), or raises the exception type CPU raises for that call;
- ``inplace``: the in-place variant returns and updates its first argument, or raises
  the exception type CPU raises;
- ``errors``: each of the OpInfo's error inputs (``error_inputs``, the bad arguments
  PyTorch's own ``test_errors`` feeds it), made on `neuron`, raises the exception type
  CPU raises for the same input, by the next synchronization at the latest (device-side
  checks raise there). Error inputs take no dtype: the case is listed under one dtype of
  the op (float32 where it has it);
- ``unsupported``: each sample made in a dtype CPU PyTorch does not support for the op
  (one of the twelve standard dtypes outside the OpInfo's CPU dtypes) that CPU refuses
  raises the exception type CPU raises on `neuron` too, by the next synchronization at
  the latest, as PyTorch's own ``test_unsupported_dtypes`` asks of a device. Samples
  CPU accepts all the same (the OpInfo's list is conservative) are not cases.

Tolerances are torch.testing's defaults for the dtype, widened to the OpInfo's own
``toleranceOverride``/``precisionOverride`` decorators for that dtype when it has any.
Each check returns an `Outcome`; none raises.
"""
from __future__ import annotations

from typing import Iterator, Optional, Tuple

import torch
from torch.utils._pytree import tree_flatten

from . import expected
from .outcome import Outcome, Recorder, describe, to_cpu, to_device

DEVICE = "neuron"
CHECKS = ("forward", "noncontiguous", "backward", "out", "inplace", "errors", "unsupported")
#: The dtypes the ``unsupported`` check draws from.
STANDARD_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                   torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)


def check_names(op) -> Tuple[str, ...]:
    """The checks that apply to `op` (backward needs autograd, out= and in-place variants)."""
    names = ["forward", "noncontiguous"]
    if op.supports_autograd:
        names.append("backward")
    if op.supports_out:
        names.append("out")
    if op.inplace_variant is not None:
        names.append("inplace")
    if op.error_inputs_func is not None:
        names.append("errors")
    if op.supported_dtypes("cpu") and dtypes_for(op, "unsupported"):  # (not CUDA-only ops)
        names.append("unsupported")
    return tuple(names)


def dtypes_for(op, check: str):
    """The dtypes CPU PyTorch supports for `op` (its backward dtypes for ``backward``;
    for ``errors``, whose inputs take no dtype, one of them: float32 where supported;
    for ``unsupported``, the standard dtypes it does not support)."""
    if check == "backward":
        return sorted(op.supported_backward_dtypes("cpu"), key=str)
    if check == "unsupported":
        supported = op.supported_dtypes("cpu")
        return sorted((d for d in STANDARD_DTYPES if d not in supported), key=str)
    dtypes = sorted(op.supported_dtypes("cpu"), key=str)
    if check == "errors":
        return [torch.float32] if torch.float32 in dtypes else dtypes[:1]
    return dtypes


def tolerances(op, dtype) -> Tuple[Optional[float], Optional[float]]:
    """(atol, rtol): the OpInfo's widest override for `dtype`, or (None, None) for
    torch.testing's defaults."""
    atol = rtol = None
    for info in op.decorators:
        for dec in getattr(info, "decorators", [info]):
            tol = getattr(dec, "d", None)
            if not isinstance(tol, dict) or dtype not in tol:
                continue
            value = tol[dtype]
            a, r = (value.atol, value.rtol) if hasattr(value, "atol") else (value, 0.0)
            atol, rtol = max(atol or 0.0, a), max(rtol or 0.0, r)
    if atol is None:
        return None, None
    default_rtol, default_atol = torch.testing._comparison.default_tolerances(dtype)
    return max(atol, default_atol), max(rtol, default_rtol)


def _samples(op, dtype, requires_grad: bool, limit: Optional[int]) -> Iterator:
    for i, sample in enumerate(op.sample_inputs("cpu", dtype, requires_grad=requires_grad)):
        if limit is not None and i >= limit:
            return
        yield sample


#: OpInfos whose positional sample arguments ATen takes on the host, whatever the
#: input's device (PyTorch's own device tests build them on the CPU too).
_HOST_ARGUMENTS = {
    "tensor_split": "a tensor indices_or_sections must be on the CPU",
}


def _on_device(op, sample):
    """`sample` with its tensors on `neuron`, except the arguments ATen wants on the host."""
    if op.name not in _HOST_ARGUMENTS:
        return to_device(sample, DEVICE)
    dev = to_device(sample, DEVICE)
    dev.args = sample.args
    return dev


def _call(fn, sample, **extra):
    return fn(sample.input, *sample.args, **sample.kwargs, **extra)


def _compare(actual, want, op, dtype, values: bool = True) -> None:
    actual = to_cpu(actual)
    if not values:  # random or uninitialized results: metadata only
        flat_a, spec_a = tree_flatten(actual)
        flat_e, spec_e = tree_flatten(want)
        assert spec_a == spec_e, f"output structure {spec_a} != CPU's {spec_e}"
        for a, e in zip(flat_a, flat_e):
            if isinstance(e, torch.Tensor):
                assert (a.shape, a.dtype) == (e.shape, e.dtype), f"{a.shape} {a.dtype} != CPU's {e.shape} {e.dtype}"
        return
    atol, rtol = tolerances(op, dtype)
    torch.testing.assert_close(actual, want, atol=atol, rtol=rtol, equal_nan=True)


def _run(op, dtype, limit, body) -> Outcome:
    rec = Recorder()
    n = 0
    try:
        for sample in _samples(op, dtype, False, limit):
            n += body(sample, rec)
    except Exception as exc:  # noqa: BLE001 - any error is the outcome being measured
        return rec.outcome(n, f"sample {n}: {describe(exc)}")
    return rec.outcome(n)


def _raises_too(exc: Exception, rec, run, where: str) -> int:
    """1 (one case) if `run` on `neuron` raises `exc`'s type, as CPU did; otherwise
    AssertionError naming CPU's error (`where`: which call of the case it was)."""
    try:
        with rec.watch():
            run()
            torch.neuron.synchronize()
    except type(exc):
        return 1
    raise AssertionError(f"CPU raised {describe(exc)}{' ' + where if where else ''}; neuron did not raise it")


def _forward(op, dtype, limit, noncontiguous: bool) -> Outcome:
    values = not expected.values_not_compared(op)

    def body(sample, rec):
        try:
            want = sample.output_process_fn_grad(_call(op, sample))
        except Exception:  # noqa: BLE001 - CPU rejects the sample: not a forward case
            return 0
        dev = _on_device(op, sample)
        if noncontiguous:  # made on the device: a copy to it would come out contiguous
            try:
                cpu_nc = sample.noncontiguous()
            except Exception:  # noqa: BLE001 - no non-contiguous form (sparse inputs)
                return 0
            dev = dev.noncontiguous()
            try:  # CPU on the same layout: as_strided reads the storage, not the view
                want = cpu_nc.output_process_fn_grad(_call(op, cpu_nc))
            except Exception as exc:  # noqa: BLE001 - CPU refuses the non-contiguous form: so must neuron
                return _raises_too(exc, rec, lambda: _call(op, dev), "on the non-contiguous sample")
        with rec.watch():
            got = dev.output_process_fn_grad(_call(op, dev))
            got = to_cpu(got)
        _compare(got, want, op, dtype, values)
        return 1

    return _run(op, dtype, limit, body)


def _grad_outputs(outputs, seed: int):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in outputs]


def _backward(op, dtype, limit) -> Outcome:
    rec = Recorder()
    n = 0
    try:
        for sample in _samples(op, dtype, True, limit):
            leaves = [t for t in tree_flatten((sample.input, sample.args, sample.kwargs))[0]
                      if isinstance(t, torch.Tensor) and t.requires_grad]
            try:
                outs = [t for t in tree_flatten(sample.output_process_fn_grad(_call(op, sample)))[0]
                        if isinstance(t, torch.Tensor) and t.requires_grad]
                if not outs or not leaves:
                    continue
                grads_out = _grad_outputs(outs, n)
                want = torch.autograd.grad(outs, leaves, grads_out, allow_unused=True)
            except Exception:  # noqa: BLE001 - CPU cannot differentiate this sample
                continue
            dev = _on_device(op, sample)
            dleaves = [t for t in tree_flatten((dev.input, dev.args, dev.kwargs))[0]
                       if isinstance(t, torch.Tensor) and t.requires_grad]
            with rec.watch():
                douts = [t for t in tree_flatten(dev.output_process_fn_grad(_call(op, dev)))[0]
                         if isinstance(t, torch.Tensor) and t.requires_grad]
                # each output gradient on its output's device (`to` may return a CPU tensor)
                dgrads = [g.to(o.device) for g, o in zip(grads_out, douts)]
                got = torch.autograd.grad(douts, dleaves, dgrads, allow_unused=True)
                got = to_cpu(got)
            _compare(got, want, op, dtype, not expected.values_not_compared(op))
            n += 1
    except Exception as exc:  # noqa: BLE001 - any error is the outcome being measured
        return rec.outcome(n, f"sample {n}: {describe(exc)}")
    return rec.outcome(n)


def _out(op, dtype, limit) -> Outcome:
    values = not expected.values_not_compared(op)

    def body(sample, rec):
        try:
            want = _call(op, sample)
        except Exception:  # noqa: BLE001 - CPU rejects the sample
            return 0
        flat, spec = tree_flatten(want)
        if not flat or not all(isinstance(t, torch.Tensor) for t in flat):
            return 0

        def out_arg(device):
            # The same values on both sides, not `empty`'s: an out= overload may leave
            # its tensor unwritten, on CPU too (ATen's fft_ihfftn_out for a short `s`).
            outs = [torch.full(t.shape, 7, dtype=t.dtype, device=device) for t in flat]
            return outs, outs[0] if isinstance(want, torch.Tensor) else spec.unflatten(outs)

        dev = _on_device(op, sample)
        cpu_outs, cpu_arg = out_arg("cpu")
        try:  # CPU refuses this out= call (some ops take their outs by other names): so must neuron
            cpu_returned = _call(op, to_device(sample, "cpu"), out=cpu_arg)
        except Exception as exc:  # noqa: BLE001
            return _raises_too(exc, rec, lambda: _call(op, dev, out=out_arg(DEVICE)[1]), "for out=")
        with rec.watch():
            outs, arg = out_arg(DEVICE)
            got = _call(op, dev, out=arg)
            if cpu_returned is None:  # an out= overload returning nothing (split_with_sizes_copy.out)
                assert got is None, "out= returned a value where CPU returns None"
            else:
                returned = tree_flatten(got)[0]
                assert len(returned) == len(outs) and all(r is o for r, o in zip(returned, outs)), \
                    "out= did not return the given tensors"
            got = to_cpu(spec.unflatten(outs))
        # Against what CPU's out= call wrote, whose kernel may round otherwise than the
        # functional one (linear's out= adds the bias after the product); compared as the
        # forward check compares: after the sample's output processing, which fixes what
        # the op leaves free (the signs of eigenvectors).
        process = sample.output_process_fn_grad
        want = spec.unflatten(cpu_outs)
        _compare(tree_flatten(process(got))[0], tree_flatten(process(want))[0], op, dtype, values)
        return 1

    return _run(op, dtype, limit, body)


def _inplace(op, dtype, limit) -> Outcome:
    values = not expected.values_not_compared(op)
    fn = op.inplace_variant

    def body(sample, rec):
        cpu = to_device(sample, "cpu")  # a copy, views of part of their storage included
        dev = _on_device(op, sample)
        try:
            want = _call(fn, cpu)
        except Exception as exc:  # noqa: BLE001 - CPU refuses: neuron must raise the same type
            return _raises_too(exc, rec, lambda: _call(fn, dev), "")
        with rec.watch():
            got = _call(fn, dev)
            assert got is dev.input, "the in-place variant did not return its first argument"
            got = to_cpu(dev.input)
        _compare(got, cpu.input, op, dtype, values)
        _compare(got, want, op, dtype, values)
        return 1

    return _run(op, dtype, limit, body)


def _errors(op, limit) -> Outcome:
    """The ``errors`` check: CPU's and neuron's error inputs, made from the same seed,
    side by side; an input CPU does not refuse with the OpInfo's stated type is skipped."""
    rec = Recorder()
    n = 0
    try:
        torch.manual_seed(0)
        on_cpu = list(op.error_inputs("cpu"))
        torch.manual_seed(0)
        with rec.watch():
            on_device = list(op.error_inputs(DEVICE))
    except Exception as exc:  # noqa: BLE001 - the OpInfo's generator itself fails on neuron
        return rec.outcome(0, f"making the error inputs: {describe(exc)}")
    for i, (cpu, dev) in enumerate(zip(on_cpu, on_device)):
        if limit is not None and i >= limit:
            break
        try:
            _call(op, cpu.sample_input)
            continue  # CPU accepts it: not an error input here
        except Exception as exc:  # noqa: BLE001 - CPU's refusal is what neuron must match
            want = exc
        if not isinstance(want, cpu.error_type):
            continue
        try:
            with rec.watch():
                _call(op, dev.sample_input)
                torch.neuron.synchronize()
        except type(want):
            n += 1
            continue
        except Exception as exc:  # noqa: BLE001 - another type than CPU's is the finding
            return rec.outcome(n, f"error input {i}: CPU raised {describe(want, 150)}; neuron raised {describe(exc, 150)}")
        return rec.outcome(n, f"error input {i}: CPU raised {describe(want, 200)}; neuron did not raise")
    return rec.outcome(n)


def _unsupported(op, dtype, limit) -> Outcome:
    rec = Recorder()
    n = 0
    try:
        samples = list(_samples(op, dtype, False, limit))
    except Exception:  # noqa: BLE001 - the OpInfo cannot make samples of this dtype: no case
        return rec.outcome(0)
    for i, sample in enumerate(samples):
        try:
            _call(op, sample)
            continue  # CPU accepts it after all
        except Exception as exc:  # noqa: BLE001 - CPU's refusal is what neuron must match
            want = exc
        try:
            n += _raises_too(want, rec, lambda: _call(op, _on_device(op, sample)), "")
        except AssertionError as exc:  # neuron accepted it
            return rec.outcome(n, f"sample {i}: {exc}")
        except Exception as exc:  # noqa: BLE001 - another type than CPU's is the finding
            return rec.outcome(n, f"sample {i}: CPU raised {describe(want, 150)}; neuron raised {describe(exc, 150)}")
    return rec.outcome(n)


def run_check(op, dtype, check: str, limit: Optional[int] = None) -> Outcome:
    """Runs one check (one of CHECKS) of OpInfo `op` for `dtype` on up to `limit`
    samples (all when None) and returns its Outcome."""
    if check == "forward":
        return _forward(op, dtype, limit, noncontiguous=False)
    if check == "noncontiguous":
        return _forward(op, dtype, limit, noncontiguous=True)
    if check == "backward":
        return _backward(op, dtype, limit)
    if check == "out":
        return _out(op, dtype, limit)
    if check == "inplace":
        return _inplace(op, dtype, limit)
    if check == "errors":
        return _errors(op, limit)
    if check == "unsupported":
        return _unsupported(op, dtype, limit)
    raise ValueError(f"unknown check {check!r}; expected one of {CHECKS}")
