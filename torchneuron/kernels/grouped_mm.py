"""Grouped matrix multiplication for mixture-of-experts: `aten::_grouped_mm`.

`torch._grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None)` multiplies
groups of rows or columns by per-group matrices; `offs` (int32, (G,)) holds each
group's cumulative end along the grouped dimension. The four layouts:

- 2-d (M, K) x 3-d (G, K, N) -> (M, N): rows offs[g-1]:offs[g] of mat_a times mat_b[g]
  (tokens sorted by expert, times the experts' weights);
- 2-d (M, K) x 2-d (K, N) -> (G, M, N): out[g] = mat_a[:, s_g:e_g] @ mat_b[s_g:e_g] (a
  ragged contraction: the experts' weight gradients);
- 3-d (G, M, K) x 2-d (K, N) -> (M, N): columns s_g:e_g of the result are
  mat_a[g] @ mat_b[:, s_g:e_g];
- 3-d (G, M, K) x 3-d (G, K, N) -> (G, M, N): a batched matmul (no offs).

Each maps onto `jax.lax.ragged_dot_general` (or `dot_general`), accumulating in float32.
Rows (or columns) past offs[-1] are zeros here; CPU leaves them unspecified. Shape and
dtype errors are PyTorch's meta kernel's, raised before the lowering runs. Gradients
come from PyTorch's own derivative formula (GroupedMmBackward0), which is _grouped_mm
again.
"""
from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax
from torch._decomp import meta_table
from torch._meta_registrations import _create_grouped_mm_output_tensor

from ..ops.registry import context, lowering, meta_kernel

aten = torch.ops.aten
_HIGHEST = lax.Precision.HIGHEST


def ragged_dot(lhs, rhs, offs, contracting, ragged, group):
    """`lax.ragged_dot_general` over the groups that end at the cumulative row counts
    `offs` (int32 or int64), accumulating in float32 (float64 for float64 operands).

    contracting: (lhs dims, rhs dims); ragged: the lhs dimension split into groups;
    group: the rhs group dimension, or () for a ragged contraction. Rows past offs[-1]
    come out as zeros."""
    offs = offs.astype(jnp.int32)
    sizes = jnp.diff(offs, prepend=jnp.zeros((1,), jnp.int32))
    acc = jnp.promote_types(jnp.result_type(lhs, rhs), jnp.float32)
    dims = lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(contracting, ((), ())),
                                         lhs_ragged_dimensions=ragged, rhs_group_dimensions=group)
    # XLA:CPU has no half x half -> float32 ragged dot; products of half-precision
    # values are exact in float32, so widening first gives the same float32 sums.
    return lax.ragged_dot_general(lhs.astype(acc), rhs.astype(acc), sizes, dims, precision=_HIGHEST,
                                  preferred_element_type=acc)


@lowering(aten._grouped_mm.default)
def grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """aten::_grouped_mm: see the module docstring for the layouts."""
    if offs is None:  # 3-d x 3-d
        out = lax.dot_general(mat_a, mat_b, (((2,), (1,)), ((0,), (0,))), precision=_HIGHEST,
                              preferred_element_type=jnp.float32)
    elif mat_a.ndim == 2 and mat_b.ndim == 3:
        out = ragged_dot(mat_a, mat_b, offs, ((1,), (1,)), (0,), (0,))
    elif mat_a.ndim == 2:  # ragged contraction over K
        out = ragged_dot(mat_a, mat_b, offs, ((1,), (0,)), (1,), ())
    else:  # 3-d x 2-d: the transpose of the 2-d x 3-d case
        out = ragged_dot(mat_b.T, jnp.swapaxes(mat_a, 1, 2), offs, ((1,), (1,)), (0,), (0,)).T
    if bias is not None:
        out = out + bias.astype(out.dtype)
    return out.astype(context().out_dtype())


# PyTorch's meta kernel for _grouped_mm follows the CUDA kernel and accepts bfloat16
# only, while the CPU kernel, our oracle, also computes float32 and float16. `_meta`
# applies CPU's checks to those two dtypes and defers to PyTorch's meta otherwise. It
# replaces the Meta kernel that the eager executor and fake tensors consult; CPU's own
# kernel is untouched.
_torch_meta = meta_table[aten._grouped_mm.default]


def _meta(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    if mat_a.dtype not in (torch.float32, torch.float16):
        return _torch_meta(mat_a, mat_b, offs, bias, out_dtype)
    torch._check(mat_b.dtype == mat_a.dtype, lambda: f"Expected mat_b dtype to match mat_a dtype, got "
                 f"mat_a.dtype={mat_a.dtype} and mat_b.dtype={mat_b.dtype}.")
    torch._check(mat_a.dim() in (2, 3) and mat_b.dim() in (2, 3), lambda: "Multiplicands must be 2D or 3D")
    if mat_a.dim() == 3 or mat_b.dim() == 3:
        torch._check(mat_a.size(-1) == mat_b.size(-2), lambda: "contraction dimension of mat_a and mat_b must match")
    needs_offs = mat_a.dim() == 2 or mat_b.dim() == 2
    torch._check(needs_offs == (offs is not None), lambda: "Have to provide offsets if there is a 2d matrix, or no "
                 "offset if both matrices are 3d")
    torch._check(offs is None or offs.dtype == torch.int32, lambda: "Offsets have to be int32")
    for t in (mat_a, mat_b):
        torch._check(all(s == 1 or s * t.element_size() % 16 == 0 for s in t.stride()[-2:]),
                     lambda: "strides should be multiple of 16 bytes")
    torch._check(bias is None, lambda: "Bias tensor provided, but it is not supported yet.")
    torch._check(out_dtype is None or out_dtype == mat_a.dtype,
                 lambda: "Grouped gemm output dtype must match `mat_a` dtype.")
    return _create_grouped_mm_output_tensor(mat_a, mat_b, offs, mat_a.dtype)


meta_kernel(aten._grouped_mm.default)(_meta)
