"""The fixed OpInfo sample the default test run (CI) checks: a listed set of ops that
touches every op family, on a few dtypes and a few samples per case, so that it runs
in a few minutes on two cores. The full sweep (`python -m torchneuron coverage`, or
pytest with `--runslow`) runs every OpInfo, dtype and sample."""
from __future__ import annotations

import torch

#: OpInfo names (every variant of each is included), grouped by family.
CI_OPS = (
    # elementwise unary, binary, ternary
    "abs", "exp", "log1p", "sin", "sigmoid", "erf", "round", "sqrt", "bitwise_not", "nan_to_num", "angle",
    "conj_physical",
    "add", "mul", "div", "pow", "remainder", "floor_divide", "maximum", "atan2", "eq", "bitwise_and",
    "where", "clamp", "addcmul", "lerp",
    # reductions, scans, sorting and searching
    "sum", "mean", "amax", "argmax", "prod", "var", "logsumexp", "cumsum", "cummax", "sort", "topk", "histc",
    "argsort", "searchsorted", "bucketize",
    # indexing
    "index_select", "gather", "scatter", "scatter_reduce", "index_put", "index_add", "masked_fill",
    "take_along_dim", "__getitem__",
    # shape and views
    "cat", "stack", "reshape", "permute", "transpose", "flip", "roll", "narrow", "expand", "repeat", "tril",
    "diagonal", "split",
    # factories and conversions
    "full_like", "ones_like", "arange", "zeros", "to", "view_as_real",
    # FFT
    "fft.rfft", "fft.irfftn", "fft.fft",
    # linear algebra
    "matmul", "addmm", "bmm", "linalg.solve", "linalg.cholesky", "linalg.qr", "linalg.inv", "linalg.det",
    "linalg.vector_norm", "linalg.eigh", "cholesky_solve", "cholesky_inverse", "cdist", "nn.functional.pdist",
    # nn
    "nn.functional.conv2d", "nn.functional.linear", "nn.functional.layer_norm", "nn.functional.batch_norm",
    "softmax", "log_softmax", "nn.functional.cross_entropy", "nn.functional.embedding",
    "nn.functional.max_pool2d", "nn.functional.avg_pool2d", "nn.functional.interpolate", "nn.functional.pad",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.mse_loss", "nn.functional.group_norm",
    "nn.functional.scaled_dot_product_attention", "nn.functional.grid_sample",
    # random
    "bernoulli", "nn.functional.dropout",
)

#: The dtypes of the CI sample per check (each op runs those it supports): every check
#: in float32, the forward check also in int64.
CI_DTYPES = {"forward": (torch.float32, torch.int64)}
CI_DEFAULT_DTYPES = (torch.float32,)


def ci_dtypes(check: str):
    """The dtypes the CI sample runs `check` in."""
    return CI_DTYPES.get(check, CI_DEFAULT_DTYPES)

#: Samples per case in the CI sample.
CI_SAMPLES = 1


def ci_opinfos(op_db):
    """The OpInfos of `op_db` in the CI sample, every variant of the listed names."""
    names = set(CI_OPS)
    return [op for op in op_db if op.name in names]

#: ModuleInfo names of the CI sample of the module sweep (float32, CI_SAMPLES inputs).
CI_MODULES = (
    "nn.Linear", "nn.Conv2d", "nn.LayerNorm", "nn.BatchNorm2d", "nn.GroupNorm", "nn.Embedding", "nn.LSTM",
    "nn.GRU", "nn.MultiheadAttention", "nn.TransformerEncoderLayer", "nn.GELU", "nn.ReLU", "nn.CrossEntropyLoss",
    "nn.MaxPool2d", "nn.AvgPool2d",
)


def ci_moduleinfos(module_db):
    """The ModuleInfos of `module_db` in the CI sample."""
    names = set(CI_MODULES)
    return [info for info in module_db if info.name in names]
