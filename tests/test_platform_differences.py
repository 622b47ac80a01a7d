"""Differences from CPU PyTorch that come from the platform under the lowerings
(`torchneuron.coverage.expected.PLATFORM_DIFFERENCES`), each pinned by a strict xfail:
a platform that removes the difference makes the test fail until its entry goes."""
import pytest
import torch

from torchneuron.coverage.expected import PLATFORM_DIFFERENCES
from torchneuron.runtime import pjrt

_ON_XLA_CPU = pjrt.device(0).platform == "cpu"
_SUBNORMALS = PLATFORM_DIFFERENCES["subnormals flushed on XLA:CPU"]


def test_entries_name_their_tests():
    for name, (_, test) in PLATFORM_DIFFERENCES.items():
        path, _, function = test.partition("::")
        assert path == "tests/test_platform_differences.py" and function in globals(), name


# The smallest positive normal number scaled down: a subnormal of each dtype.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.xfail(_ON_XLA_CPU, reason=_SUBNORMALS[0], strict=True)
def test_subnormals_kept(dtype):
    tiny = torch.finfo(dtype).tiny
    x = torch.tensor([tiny / 4, -tiny / 64, 1.0], dtype=dtype)
    for fn in (lambda t: t + torch.zeros_like(t), torch.sqrt, lambda t: t * 0.5):
        want = fn(x.abs() if fn is torch.sqrt else x)
        assert want[0] != 0  # CPU keeps the subnormal
        got = fn((x.abs() if fn is torch.sqrt else x).to("neuron")).cpu()
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_float16_subnormals_kept():
    """float16 computes in float32, where its subnormals are normal numbers."""
    x = torch.tensor([6e-8, -3e-6, 1.0], dtype=torch.float16)
    for fn in (lambda t: t + torch.zeros_like(t), lambda t: t * 0.5, lambda t: t.abs().sqrt()):
        torch.testing.assert_close(fn(x.to("neuron")).cpu(), fn(x), rtol=0, atol=0)
