"""transformers' grouped matmul custom ops: ``transformers::grouped_mm_fallback`` and
``transformers::grouped_mm_fallback_backward`` (transformers/integrations/moe.py).

transformers calls ``grouped_mm_fallback(input[S, K], weight[E, K, N], offs[E]) -> [S, N]``
instead of ``torch._grouped_mm`` (lowered in kernels/grouped_mm.py) whenever Dynamo is
tracing and the expert weights are not bfloat16, whatever the device: so every float32
MoE model compiled for `neuron` meets it. Its Python implementation loops over experts
with ``offs.tolist()``, which Dynamo cannot trace; a lowering keeps the graph whole.

Both ops are registered by qualified name: transformers defines them when it is
imported, which may be after torchneuron. The lowerings are compile-only; in eager the
ops' own implementations run natively on `neuron`, one ``mm`` per expert (see
`registry.lowering`).

Semantics are the Python implementation's: ``offs`` (int32 or int64) holds each
expert's cumulative end row, an expert with no rows contributes nothing, and rows past
``offs[-1]`` (of the output and of the input gradient) are zeros, as are the weight
gradients of empty experts; `jax.lax.ragged_dot_general` gives exactly that.
"""
from __future__ import annotations

from ..kernels.grouped_mm import ragged_dot
from .registry import context, lowering


@lowering("transformers::grouped_mm_fallback")
def grouped_mm_fallback(input, weight, offs):
    """transformers::grouped_mm_fallback: rows offs[e-1]:offs[e] of `input` times
    weight[e], one ragged dot (rows past offs[-1] are zeros)."""
    out = ragged_dot(input, weight, offs, ((1,), (1,)), (0,), (0,))
    return out.astype(context().out_dtype())


@lowering("transformers::grouped_mm_fallback_backward")
def grouped_mm_fallback_backward(input, weight, offs, grad_output):
    """transformers::grouped_mm_fallback_backward -> (grad_input, grad_weight):
    grad_input rows of expert e are grad_output's rows times weight[e]^T (a ragged dot
    contracting N); grad_weight[e] = input[rows of e]^T @ grad_output[rows of e] (a ragged
    contraction over the token dimension, zeros for an empty expert)."""
    grad_input = ragged_dot(grad_output, weight, offs, ((1,), (2,)), (0,), (0,))
    grad_weight = ragged_dot(input, grad_output, offs, ((0,), (0,)), (0,), ())
    return grad_input.astype(context().out_dtype(0)), grad_weight.astype(context().out_dtype(1))
