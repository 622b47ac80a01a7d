"""The fixed OpInfo sample the default test run (CI) checks: a listed set of ops that
touches every op family, on a few dtypes and a few samples per case, so that it runs
in a few minutes on two cores. The full sweep (`python -m torchneuron coverage`, or
pytest with `--runslow`) runs every OpInfo, dtype and sample."""
from __future__ import annotations

import torch

#: OpInfo names (every variant of each is included), grouped by family.
CI_OPS = (
    # elementwise unary, binary, ternary
    "exp", "angle", "add", "div", "remainder", "where", "clamp",
    # reductions, scans, sorting and searching
    "sum", "var", "cumsum", "sort", "topk", "histc", "searchsorted",
    # indexing
    "gather", "scatter_reduce", "index_put", "masked_fill",
    # shape and views
    "cat", "permute", "flip",
    # factories and conversions
    "full_like", "arange",
    # FFT
    "fft.rfft",
    # linear algebra
    "matmul", "linalg.solve", "linalg.cholesky", "cholesky_solve", "cdist",
    # nn
    "nn.functional.conv2d", "nn.functional.layer_norm", "softmax", "nn.functional.cross_entropy",
    "nn.functional.embedding", "nn.functional.max_pool2d", "nn.functional.gelu",
    "nn.functional.scaled_dot_product_attention",
    # random
    "bernoulli",
    # dtypes CPU's kernels do not implement: lowered, decomposed, host kernel, own check
    "lerp", "nn.functional.relu", "nn.functional.glu", "unique", "maximum",
)

#: The dtypes of the CI sample (each op runs those of them it supports).
CI_DTYPES = (torch.float32,)
#: The dtypes of the CI sample's ``unsupported`` check (each op runs those of them it
#: does not support): one of each kind CPU kernels leave out.
CI_UNSUPPORTED_DTYPES = (torch.bool, torch.int64, torch.float16, torch.complex64)


#: Samples per case in the CI sample.
CI_SAMPLES = 1


def ci_opinfos(op_db):
    """The OpInfos of `op_db` in the CI sample, every variant of the listed names."""
    names = set(CI_OPS)
    return [op for op in op_db if op.name in names]

#: ModuleInfo names of the CI sample of the module sweep (float32, CI_SAMPLES inputs).
CI_MODULES = (
    "nn.Linear", "nn.Conv2d", "nn.LayerNorm", "nn.BatchNorm2d", "nn.Embedding", "nn.LSTM", "nn.GRU",
    "nn.TransformerEncoderLayer", "nn.CrossEntropyLoss", "nn.MaxPool2d",
)


def ci_moduleinfos(module_db):
    """The ModuleInfos of `module_db` in the CI sample."""
    names = set(CI_MODULES)
    return [info for info in module_db if info.name in names]
