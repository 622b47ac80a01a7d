"""PyTorch's ModuleInfo database (`module_db`) on `neuron`, compared with CPU PyTorch:
forward outputs and backward gradients (inputs and parameters) of each module moved
with `.to("neuron")`, per dtype, via `torchneuron.coverage.modules`. A mismatch or a
CPU fallback not in `torchneuron.coverage.expected` fails; listed expected failures are
strict xfails with their reason. CI runs `coverage.sample.CI_MODULES` in float32;
`--runslow` (or TORCHNEURON_OPINFO=full) runs every module and dtype.
"""
import os

from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_modules import TrainEvalMode, module_db, modules
from torch.testing._internal.common_utils import TestCase

from helpers import verify_case

from torchneuron.coverage import modules as sweep
from torchneuron.coverage import sample

FULL = os.environ.get("TORCHNEURON_OPINFO") == "full"
INFOS = module_db if FULL else sample.ci_moduleinfos(module_db)
LIMIT = None if FULL else sample.CI_SAMPLES
DTYPES = None if FULL else sample.CI_DTYPES


def _verify(info, dtype, check):
    verify_case(sweep.run_check(info, dtype, check, LIMIT), sweep.name(info), check, dtype)


class TestModuleDb(TestCase):
    @modules(INFOS, allowed_dtypes=DTYPES, train_eval_mode=TrainEvalMode.train_only)
    def test_forward(self, device, dtype, module_info, training):
        _verify(module_info, dtype, "forward")

    @modules(INFOS, allowed_dtypes=DTYPES, train_eval_mode=TrainEvalMode.train_only)
    def test_backward(self, device, dtype, module_info, training):
        _verify(module_info, dtype, "backward")


instantiate_device_type_tests(TestModuleDb, globals(), only_for="privateuse1")
