"""Float8 scaled matrix multiplication: ``aten::_scaled_mm`` and ``aten::_scaled_mm_v2``.

Follows ATen's CPU kernel (``_scaled_mm_out_cpu_emulated`` in
aten/src/ATen/native/Blas.cpp): both float8 operands are widened to float32 and
multiplied by their scales (one per tensor, or one per row of ``self`` and per column of
``mat2``), multiplied in float32, the bias added in float32, a float8 result divided by
``scale_result``, and the product rounded once to the output dtype. ``use_fast_accum``
changes nothing on the CPU, nor here.
"""
from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._common import convert
from .indexing import type_name
from .registry import context, lowering, meta_check, meta_kernel

aten = torch.ops.aten

# torch.nn.functional.ScalingType / SwizzleType values that the CPU kernel accepts.
_TENSORWISE, _ROWWISE = 0, 1
_NO_SWIZZLE = 0
_FLOAT8_OUT_WITH_SCALE = (jnp.float8_e4m3fn, jnp.float8_e5m2)


def _scaling(mat_a, mat_b, scale_a, scale_b, contiguous: bool = False) -> int:
    """_TENSORWISE or _ROWWISE, as ATen's ``get_joint_scaling`` decides (torch tensors,
    meta ones included); ValueError, the CPU's error type, for any other configuration.
    `contiguous`: row-wise scales must be contiguous (aten::_scaled_mm's rule;
    _scaled_mm_v2 checks their last stride alone)."""
    if (mat_a.dtype.is_floating_point and mat_a.element_size() == 1 and mat_b.dtype.is_floating_point
            and mat_b.element_size() == 1 and scale_a.dtype == torch.float32 and scale_b.dtype == torch.float32):
        if scale_a.numel() == 1 and scale_b.numel() == 1:
            return _TENSORWISE
        if (mat_a.dim() == 2 and mat_b.dim() == 2 and tuple(scale_a.shape) == (mat_a.shape[0], 1)
                and tuple(scale_b.shape) == (1, mat_b.shape[1])
                and (not contiguous or (scale_a.is_contiguous() and scale_b.is_contiguous()))):
            return _ROWWISE
    raise ValueError(
        "Invalid scaling configuration.\n- For TensorWise scaling, a and b should be float8, scales should be "
        "float and singletons.\n- For RowWise scaling, a and b should be float8, scales should be float, scale_a "
        f"should be ({mat_a.shape[0]}, 1) and scale_b should be (1, {mat_b.shape[-1]}), and both should be "
        f"contiguous.\nGot mat_a.dtype()={type_name(mat_a.dtype)}, scale_a.dtype()={type_name(scale_a.dtype)}, "
        f"scale_a.size()={list(scale_a.shape)}, scale_a.stride()={list(scale_a.stride())}, "
        f"mat_b.dtype()={type_name(mat_b.dtype)}, scale_b.dtype()={type_name(scale_b.dtype)}, "
        f"scale_b.size()={list(scale_b.shape)} and scale_b.stride()={list(scale_b.stride())}")


def _check_matrices(mat_a, mat_b, bias, scale_result) -> None:
    """The emulated CPU kernel's checks (RuntimeError), after the scaling check."""
    torch._check(mat_a.dim() == 2, lambda: "mat_a must be a matrix")
    torch._check(mat_b.dim() == 2, lambda: "mat_b must be a matrix")
    torch._check(mat_a.shape[1] == mat_b.shape[0], lambda: (
        f"mat_a and mat_b shapes cannot be multiplied ({mat_a.shape[0]}x{mat_a.shape[1]} and "
        f"{mat_b.shape[0]}x{mat_b.shape[1]})"))
    torch._check(scale_result is None or (scale_result.numel() == 1 and scale_result.dtype == torch.float32),
                 lambda: "scale_result must be a float scalar")
    torch._check(bias is None or bias.numel() == mat_b.shape[1],
                 lambda: f"Bias must be size {mat_b.shape[1]} but got {bias.numel()}")


@meta_kernel(aten._scaled_mm.default)
def _scaled_mm_meta(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                    use_fast_accum=False):
    """aten::_scaled_mm's Meta kernel with CPU's checks and error types, replacing
    PyTorch's, which follows CUDA's kernel: RuntimeError where CPU raises ValueError,
    and layouts CPU accepts (a non-contiguous `self`; CPU makes it contiguous) refused."""
    if _scaling(self, mat2, scale_a, scale_b, contiguous=True) == _ROWWISE:
        _check_unit_last_strides(scale_a, scale_b)
    _check_matrices(self, mat2, bias, scale_result)
    return self.new_empty((self.shape[0], mat2.shape[1]), dtype=out_dtype or self.dtype)



@meta_check(aten._scaled_mm_v2.default)
def _scaled_mm_v2_checks(self, mat2, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias=None,
                         out_dtype=None, contraction_dim=(), use_fast_accum=False, **_):
    """CPU's checks of aten::_scaled_mm_v2, in its order and with its error types."""
    if self.dim() != 2 or mat2.dim() != 2:
        raise ValueError("mat_a must be a matrix" if self.dim() != 2 else "mat_b must be a matrix")
    if 0 in (self.shape[0], self.shape[1], mat2.shape[1]):
        return  # an empty product: CPU returns early
    if len(contraction_dim) not in (0, 2):
        raise ValueError("contraction_dim must have exactly 2 elements")
    if self.shape[1] != mat2.shape[0]:
        raise ValueError(f"mat_a and mat_b shapes cannot be multiplied ({self.shape[0]}x{self.shape[1]} and "
                         f"{mat2.shape[0]}x{mat2.shape[1]})")
    if bias is not None and bias.numel() != mat2.shape[1]:
        raise ValueError(f"Bias must be size {mat2.shape[1]} but got {bias.numel()}")
    if bias is not None and bias.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"Bias must be Float32 or BFloat16 or Half, but got {bias.dtype}")
    if list(swizzle_a)[:1] != [_NO_SWIZZLE] or list(swizzle_b)[:1] != [_NO_SWIZZLE]:
        raise ValueError("CPU does not support swizzle.")
    kind = _scaling(self, mat2, scale_a[0], scale_b[0])
    if list(recipe_a)[:1] != [kind] or list(recipe_b)[:1] != [kind]:
        raise ValueError("Invalid scaling configuration: the CPU supports TensorWise or RowWise recipes, "
                         "matching the scales' shapes")
    if kind == _ROWWISE:
        _check_unit_last_strides(scale_a[0], scale_b[0])


def _check_unit_last_strides(scale_a, scale_b) -> None:
    """The row-wise kernel reads each scale with a unit last stride, whatever the size
    of that dim (a contiguous (M, 1) scale may have another): CPU's ValueError."""
    for name, scale in (("scale_a", scale_a), ("scale_b", scale_b)):
        if scale.stride(1) != 1:
            raise ValueError(f"expected {name}.stride(1) to be 1, but got {scale.stride(1)}")


def _emulated(mat_a, mat_b, scale_a, scale_b, bias, scale_result, out_dtype):
    """The float32 computation of ATen's emulated kernel on checked inputs; `out_dtype`
    is the result's."""
    if scale_a.size == 1 and scale_b.size == 1:  # tensorwise
        scale_a, scale_b = scale_a.reshape(()), scale_b.reshape(())
    a = mat_a.astype(jnp.float32) * scale_a
    b = mat_b.astype(jnp.float32) * scale_b
    out = jnp.matmul(a, b, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
    if bias is not None:
        out = out + bias.astype(jnp.float32)
    if scale_result is not None and any(out_dtype == d for d in _FLOAT8_OUT_WITH_SCALE):
        out = out * (1 / scale_result.reshape(()).astype(jnp.float32))
    return convert(out, out_dtype)  # float8_e4m3fn saturates, as on the CPU


@lowering(aten._scaled_mm.default)
def scaled_mm(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False):
    """aten::_scaled_mm: self [M, K] and mat2 [K, N], both float8, with float32 scales
    (singletons, or [M, 1] and [1, N]) -> [M, N] in out_dtype (default self's dtype)."""
    return _emulated(self, mat2, scale_a, scale_b, bias, scale_result, context().out_dtype())


@lowering(aten._scaled_mm_v2.default)
def scaled_mm_v2(self, mat2, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias, out_dtype,
                 contraction_dim=(), use_fast_accum=False):
    """aten::_scaled_mm_v2: `_scaled_mm` with the scales as lists and their recipes named
    (TensorWise or RowWise, no swizzle: what the CPU kernel supports)."""
    if 0 in (self.shape[0], self.shape[1], mat2.shape[1]):
        return jnp.zeros((self.shape[0], mat2.shape[1]), context().out_dtype())
    return _emulated(self, mat2, scale_a[0], scale_b[0], bias, None, context().out_dtype())
