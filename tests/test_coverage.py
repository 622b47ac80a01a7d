"""The coverage harness itself: it must catch mismatches and fallbacks, judge expected
failures strictly, classify core ATen overloads, and write the report."""
import copy

import torch
from torch.testing._internal.common_methods_invocations import op_db

from torchneuron.coverage import core_aten, expected, opinfo, report
from torchneuron.coverage.outcome import DECOMPOSED, FAILING, FALLBACK, NATIVE, Outcome, to_device


def _opinfo(name):
    return next(op for op in op_db if op.name == name and not op.variant_test_name)


def test_forward_match_is_native():
    assert opinfo.run_check(_opinfo("exp"), torch.float32, "forward", 1).status == NATIVE


def test_mismatch_on_neuron_is_failing():
    op = copy.copy(_opinfo("exp"))
    op.op = lambda x, **kw: torch.exp(x) + (x.device.type == "neuron")
    outcome = opinfo.run_check(op, torch.float32, "forward", 1)
    assert outcome.status == FAILING and "Tensor-likes are not close" in outcome.reason


_lib = torch.library.Library("covtest", "DEF")
_lib.define("twice(Tensor x) -> Tensor")
_lib.impl("twice", lambda x: x * 2, "CPU")  # no neuron kernel: the CPU fallback runs it


def test_cpu_fallback_is_recorded_and_fails_unless_listed():
    op = copy.copy(_opinfo("exp"))
    op.op = lambda x, **kw: torch.ops.covtest.twice(x)
    outcome = opinfo.run_check(op, torch.float32, "forward", 1)
    assert outcome.status == FALLBACK and "covtest.twice.default" in outcome.fallbacks
    assert expected.judge(outcome, "exp", "forward", torch.float32)[0] == "fail"


def test_expected_failures_are_strict(monkeypatch):
    monkeypatch.setitem(expected.EXPECTED_FAILURES, ("exp", "forward", "*"), "a reason")
    assert expected.judge(Outcome(FAILING, "boom"), "exp", "forward", torch.float32) == ("xfail", "a reason")
    assert expected.judge(Outcome(NATIVE), "exp", "forward", torch.float32)[0] == "xpass"
    assert expected.judge(Outcome(DECOMPOSED), "exp", "backward", torch.float32) == ("pass", "")


def test_core_aten_classification():
    by_op = {c["op"]: c["status"] for c in core_aten.report()}
    assert len(by_op) > 150
    assert by_op["aten.add.Tensor"] == core_aten.NATIVE
    assert all(s in (core_aten.NATIVE, core_aten.DECOMPOSED, core_aten.FALLBACK) for s in by_op.values())


def test_report_totals_and_markdown():
    recs = [
        {"name": "exp", "check": "forward", "dtype": "float32", **Outcome(NATIVE, samples=1).as_dict()},
        {"name": "histc", "check": "forward", "dtype": "float32",
         **Outcome(FALLBACK, samples=1, fallbacks={"aten.histc.default": 1}).as_dict()},
    ]
    core = [{"op": "aten.add.Tensor", "status": "native", "how": "lowering"}]
    meta = {"command": "c", "date": "d", "platform": "p", "torch": "t", "jax": "j", "seconds": 1.0,
            "samples_per_case": 1, "cases_planned": {"opinfo": 3}, "cases_run": {"opinfo": 2}, "case_seconds": 1,
            "cases_by_check": {"opinfo": {"forward": [2, 3]}, "modules": {}}}
    rep = report.build(report._judged(recs), [], core, meta)
    fwd = rep["totals"]["opinfo"]["forward"]
    assert (fwd["pairs"], fwd["pass_no_fallback"], fwd["pass_rate"]) == (2, 1, 0.5)
    md = report.markdown(rep)
    assert "Cases run per check (run of planned): opinfo forward 2 of 3." in md
    assert "; 1 s; samples per case: 1)." in md
    merged = dict(meta, samples_per_case=None, cases_by_samples_run={"with 1 sample": 2, "with more": 5})
    assert "samples per case as each record ran: 2 cases with 1 sample, 5 cases with more)." in report.markdown(
        report.build(report._judged(recs), [], core, merged))
    assert "1/2 (50.0%)" in md and "| histc | forward | float32 | fail | CPU fallback: aten.histc.default |" in md
    # expected failures a one-sample run does not reach are listed with their reasons
    for (name, check, dtype), first in expected.FIRST_FAILING_SAMPLE.items():
        assert expected.expected_failure(name, check, dtype), (name, check, dtype)
        assert f"- {name} {check} {dtype}, from sample {first}: {expected.expected_failure(name, check, dtype)}" in md
    # so are the differences kept outside the samples, with their pinning tests
    for name, (why, test) in expected.KNOWN_DIFFERENCES.items():
        assert f"- **{name}**: {why} Test: `{test}`." in md


def test_rates_of_a_check_with_no_passing_pair():
    from torchneuron.coverage import report

    rates = report._rates([{"check": "out", "status": "failing", "verdict": "fail"}])
    assert rates["out"]["pass_no_fallback"] == 0 and rates["out"]["pass_rate"] == 0.0
    assert report._pct(rates["out"]) == "0/1 (0.0%)"


def test_samples_that_read_beyond_their_view_run_on_the_same_storage():
    # as_strided.partial_views passes base[5:15] with storage offsets that read the rest
    # of base: a copy of the view alone would give neuron other elements than CPU. The
    # in-place check's CPU copy is made the same way (a clone of the view gave CPU others).
    op = next(op for op in op_db if op.name == "as_strided" and op.variant_test_name == "partial_views")
    for check in ("forward", "backward", "inplace"):
        assert opinfo.run_check(op, torch.float32, check, 3).status == NATIVE
    base = torch.arange(20.)
    for device in ("neuron", "cpu"):
        dev = to_device(base[5:15], device)
        assert (dev.storage_offset(), dev.stride()) == (5, (1,))
        assert torch.equal(dev.as_strided((2, 2), (1, 2), 0).cpu(), base.as_strided((2, 2), (1, 2), 0))
        dev.as_strided_((1,), (1,), 0).fill_(-1.)  # a copy: base is not written
    assert torch.equal(base, torch.arange(20.))
    real = torch.view_as_real(torch.randn(6, dtype=torch.cfloat))[1:4]  # a base of another dtype: copied
    assert torch.equal(to_device(real, "neuron").cpu(), real)
    c = torch.randn(3, 4, dtype=torch.cfloat)
    for view in (c[1].conj(), c.conj()[1:], c[1]._neg_view()):  # math bits kept in the values
        assert torch.equal(to_device(view, "neuron").cpu().resolve_conj().resolve_neg(),
                           view.resolve_conj().resolve_neg())


def test_inplace_check_copies_samples_with_dtype_arguments():
    # SampleInput.transform maps dtype arguments too (cumsum's dtype=): the in-place
    # check's CPU copy cloned them and failed at sample 3.
    op = next(op for op in op_db if op.name == "cumsum")
    assert opinfo.run_check(op, torch.float32, "inplace", 4).status == NATIVE


def test_out_check_compares_with_cpus_out_call():
    # CPU's linear(out=) adds the bias after the product, rounding twice, where its
    # functional linear rounds once: neuron's out= matches the former, as it should.
    op = next(op for op in op_db if op.name == "nn.functional.linear")
    torch.manual_seed(0)
    assert opinfo.run_check(op, torch.float16, "out", 4).status == NATIVE
    # ATen's fft_ihfftn_out leaves its out tensor unwritten for sample 2's short `s`, on
    # CPU too: both sides' out tensors start with the same values (`empty`'s differed).
    op = next(op for op in op_db if op.name == "fft.ihfftn")
    torch.manual_seed(0)
    assert opinfo.run_check(op, torch.float64, "out", 3).status == NATIVE


def test_noncontiguous_cases_take_the_forward_cases_first_failing_sample():
    # A forward case listed from a later sample passes a shorter run, and so does its
    # non-contiguous case, which inherits the forward case's reason.
    key = ("nn.functional.linear_cross_entropy.chunked", "forward", "bfloat16")
    first = expected.FIRST_FAILING_SAMPLE[key]
    assert ("nn.functional.linear_cross_entropy.chunked", "noncontiguous", "bfloat16") not in expected.FIRST_FAILING_SAMPLE
    for check in ("forward", "noncontiguous"):
        assert expected.judge(Outcome(NATIVE, samples=1), key[0], check, torch.bfloat16) == ("pass", "")
        assert expected.judge(Outcome(NATIVE, samples=first + 1), key[0], check, torch.bfloat16)[0] == "xpass"


def test_a_forward_failure_refused_on_every_noncontiguous_sample_is_not_inherited():
    # view_as_complex needs a unit last stride: CPU and neuron refuse each non-contiguous
    # sample alike, so its float16 case passes where the forward case fails (complex32).
    assert expected.expected_failure("view_as_complex", "forward", torch.float16)
    assert expected.expected_failure("view_as_complex", "noncontiguous", torch.float16) is None
    assert expected.judge(Outcome(NATIVE, samples=3), "view_as_complex", "noncontiguous", torch.float16) == ("pass", "")
    assert expected.expected_failure("matrix_exp", "noncontiguous", torch.float16)  # others still inherit


def test_a_tensor_passed_twice_is_one_tensor_on_the_device():
    # ModuleInfo KLDivLoss passes one tensor as input and target: autograd sums both
    # uses' gradients into it on CPU, so the device copy must be one tensor too.
    from torchneuron.coverage.outcome import to_device

    x = (torch.rand(3) + 0.1).requires_grad_()
    a, b = to_device((x, x), "neuron")
    assert a is b and a.requires_grad and a.device.type == "neuron"
    loss = torch.nn.functional.kl_div(a, b, reduction="sum")
    torch.testing.assert_close(torch.autograd.grad(loss, a)[0].cpu(),
                               torch.autograd.grad(torch.nn.functional.kl_div(x, x, reduction="sum"), x)[0])
