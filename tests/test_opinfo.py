"""PyTorch's OpInfo database (`op_db`) on `neuron`, compared with CPU PyTorch.

Instantiated by `instantiate_device_type_tests` for PrivateUse1 (classes
`TestOpInfoNEURON`... named by the backend). Each test runs one check of
`torchneuron.coverage.opinfo` (forward, non-contiguous, backward, out=, in-place, error
inputs, dtypes CPU does not support) for one (OpInfo, dtype) and fails on a mismatch with CPU or a CPU fallback not in
`torchneuron.coverage.expected`; listed expected failures are strict xfails with their
reason. CI runs the fixed sample `coverage.sample.CI_OPS` on a few samples per case;
`--runslow` (or TORCHNEURON_OPINFO=full) runs every OpInfo on every sample.
"""
import os

import torch
from torch.testing._internal.common_device_type import OpDTypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

from helpers import verify_case

from torchneuron.coverage import expected, opinfo, sample

FULL = os.environ.get("TORCHNEURON_OPINFO") == "full"
OPS = op_db if FULL else sample.ci_opinfos(op_db)
LIMIT = None if FULL else sample.CI_SAMPLES


def _verify(op, dtype, check):
    verify_case(opinfo.run_check(op, dtype, check, LIMIT), expected.opinfo_name(op), check, dtype)


def _ops(check, **kw):
    kw.setdefault("allowed_dtypes", None if FULL else
                  sample.CI_UNSUPPORTED_DTYPES if check == "unsupported" else sample.CI_DTYPES)
    return ops([op for op in OPS if check in opinfo.check_names(op)], **kw)


class TestOpInfo(TestCase):
    @_ops("forward", dtypes=OpDTypes.supported)
    def test_forward(self, device, dtype, op):
        _verify(op, dtype, "forward")

    @_ops("noncontiguous", dtypes=OpDTypes.supported)
    def test_noncontiguous(self, device, dtype, op):
        _verify(op, dtype, "noncontiguous")

    @_ops("backward", dtypes=OpDTypes.supported_backward)
    def test_backward(self, device, dtype, op):
        _verify(op, dtype, "backward")

    @_ops("out", dtypes=OpDTypes.supported)
    def test_out(self, device, dtype, op):
        _verify(op, dtype, "out")

    @_ops("inplace", dtypes=OpDTypes.supported)
    def test_inplace(self, device, dtype, op):
        _verify(op, dtype, "inplace")

    # Error inputs take no dtype: one test per OpInfo. Each compiles executables of new
    # shapes, which one process never frees (about 7,000 memory maps for all 226), so
    # CI runs the sample's; the coverage sweep and --runslow run all of them.
    @ops([op for op in OPS if "errors" in opinfo.check_names(op)], dtypes=OpDTypes.none)
    def test_errors(self, device, op):
        _verify(op, opinfo.dtypes_for(op, "errors")[0], "errors")


    @_ops("unsupported", dtypes=OpDTypes.unsupported,
          **({"allowed_dtypes": opinfo.STANDARD_DTYPES} if FULL else {}))
    def test_unsupported(self, device, dtype, op):
        _verify(op, dtype, "unsupported")


instantiate_device_type_tests(TestOpInfo, globals(), only_for="privateuse1")
