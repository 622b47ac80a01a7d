"""The C++ eager hot path (csrc/eager.cpp) against the Python executor it stands in for.

Most of the suite runs on the C++ path already (it is the default); these tests check
that it really is the registered kernel, and that switching it off
(`TORCHNEURON_EAGER_CPP=0`) gives bit-identical results, so the two paths cannot drift.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]

# Covers what the C++ kernel converts itself: Scalar and dtype arguments, optional
# tensors, in-place on views (storage offsets), out=, several returns, aliasing returns,
# and a training step (autograd, foreach optimizer ops).
_PROGRAM = r"""
import json, torch
torch.manual_seed(0)
x = torch.randn(6, 5)
n = x.to("neuron")
out = {}
base = n.clone()
v = base[2:, 1:]
v.add_(1.5).mul_(-2)
out["views"] = base.cpu().tolist()
out["dtype_arg"] = torch.sum(n, 1, dtype=torch.float64).cpu().tolist()
out["scalar"] = (n * 3 + 0.25).cpu().tolist()
buf = torch.empty(6, 5, device="neuron")
torch.add(n, n, alpha=2, out=buf)
out["out"] = buf.cpu().tolist()
values, indices = torch.max(n, 1)
out["max"] = [values.cpu().tolist(), indices.cpu().tolist()]
model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.GELU(), torch.nn.Linear(7, 1)).to("neuron")
opt = torch.optim.AdamW(model.parameters(), lr=0.1)
losses = []
for _ in range(3):
    opt.zero_grad()
    loss = model(n).pow(2).mean()
    loss.backward()
    opt.step()
    losses.append(loss.item())
out["losses"] = losses
print(json.dumps(out))
"""


def _start(cpp: bool) -> subprocess.Popen:
    env = dict(os.environ, TORCHNEURON_EAGER_CPP="1" if cpp else "0")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.Popen([sys.executable, "-c", _PROGRAM], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)


def _result(proc: subprocess.Popen) -> dict:
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


def test_lowered_ops_are_registered_from_the_cpp_kernel():
    torch.ones(1, device="neuron")  # loads the backend
    dump = torch._C._dispatch_dump("aten::add.Tensor")
    line = next(entry for entry in dump.splitlines() if entry.startswith("PrivateUse1"))
    assert "eager.cpp" in line, line
    # Ops that resolve conjugate bits keep the Python kernel.
    mm = next(entry for entry in torch._C._dispatch_dump("aten::mm").splitlines()
              if entry.startswith("PrivateUse1"))
    assert "eager.cpp" not in mm, mm


def test_cpp_path_equals_python_executor_bit_for_bit():
    # Both processes at once: each spends most of its time importing torch.
    cpp, python = _start(cpp=True), _start(cpp=False)
    assert _result(cpp) == _result(python)
