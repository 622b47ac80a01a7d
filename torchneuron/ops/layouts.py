"""The layouts CPU's kernels give their results, where PyTorch's meta kernels (often
Python references) lay them out otherwise.

CPU is the oracle for strides too: a result's layout is observable (`x.view(...)`
raises on a transposed or channels_last result, `.stride()` and `is_contiguous()` tell
it), and ATen's kernels choose it in a handful of ways, each a shared rule of
`ops.registry`. Each registration below names the allocation of the CPU kernel
(aten/src/ATen/native/*.cpp) it follows:

- TensorIterator loops, and `empty_like(self)` of a dense input, take the inputs' layout
  (`elementwise_layout`). Pointwise-tagged ops get that rule without an entry
  (`registry.laid_out`); listed here are TensorIterator kernels without the tag, the
  tagged ops whose kernels allocate otherwise, and the kernels whose iterators take
  their operands in another order than the schema's (`iterator_layout`).
- `empty_like(self, MemoryFormat::Contiguous)`, `LEGACY_CONTIGUOUS_MEMORY_FORMAT`,
  `at::empty(sizes)` resized without a memory format: contiguous whatever the input
  (`contiguous_layout`).
- `empty_like(input, input.suggest_memory_format())`, `resize_(sizes,
  input.suggest_memory_format())`: channels_last kept, any other layout (a transposed
  one) made contiguous (`suggested_layout`).
- `at::empty_like(t)` of one particular argument (the input of a loss, the incoming
  gradient of log_sigmoid_backward), written without restriding: that argument's strides
  if dense, else its suggested memory format, whatever the other operands' layouts
  (`preserved_layout`).

The rules apply where the executor runs a meta kernel (a cache miss), to the results of
decompositions (eager, and in compiled graphs: `eager.meta_device.relaid`), and to fake
tensors on `neuron` in compiled graphs. Out= kernels that
restride their out tensors whatever their strides are registered with `out_layout`.
"""
from __future__ import annotations

import torch

from .registry import (contiguous_layout, elementwise_layout, elementwise_strides, iterator_layout, meta_layout,
                       out_layout, preserved_layout, promoted, suggested_layout)

aten = torch.ops.aten


# ------------------------------------------------------------------ TensorIterator's layout
@meta_layout(aten.clone.default)
def _clone_layout(self, memory_format=None):
    """clone is tagged pointwise, but its kernel allocates `empty_like(self,
    memory_format)` (Preserve: a non-dense input's suggested format), as its meta kernel
    does, not TensorIterator's layout."""
    return None


# BinaryOps.cpp `floor_divide_out` (`div_floor`), TensorFactories.cpp `complex_out` and
# `polar_out` (`TensorIteratorConfig().add_output(result).add_const_input(real)...`),
# Dropout.cpp `native_dropout_backward` (`grad * mask * scale`), Loss.cpp
# `soft_margin_loss_backward` (`at::mul_out` into an empty tensor, which the
# TensorIterator lays out as its inputs): no pointwise tag.
meta_layout(aten.floor_divide.default, aten.floor_divide.Scalar, aten.complex.default, aten.polar.default,
            aten.native_dropout_backward.default, aten.soft_margin_loss_backward.default)(elementwise_layout)


# Activation.cpp's gradients, TensorIterators over (grad_output, self) as the schema
# orders them: `hardtanh_backward` and `hardswish_backward`
# (`TensorIterator::borrowing_binary_op(grad_input, grad_output, self)`), `mish_backward`
# (`TensorIterator::binary_op` into `at::empty({0})`), and the structured meta functions
# of elu, softplus, hardsigmoid, hardshrink and softshrink's (`build_borrowing_binary_op(
# maybe_get_output(), grad_output, self)`): no pointwise tag, and PyTorch's references
# of hardtanh's and hardswish's iterate over self first (`where(self <= min_val, ...)`).
meta_layout(aten.hardtanh_backward.default, aten.hardswish_backward.default, aten.mish_backward.default,
            aten.elu_backward.default, aten.softplus_backward.default, aten.hardsigmoid_backward.default,
            aten.hardshrink_backward.default, aten.softshrink_backward.default)(elementwise_layout)


@meta_layout(aten.threshold_backward.default)
def _threshold_backward_layout(grad_output, self, threshold):
    """Activation.cpp `TORCH_META_FUNC(threshold_backward)` (ReLU's gradient): the
    iterator takes `add_const_input(self).add_const_input(grad)`, self first."""
    return iterator_layout(self, grad_output)


@meta_layout(aten.leaky_relu_backward.default)
def _leaky_relu_backward_layout(grad_output, self, negative_slope, self_is_result):
    """Activation.cpp `TORCH_META_FUNC(leaky_relu_backward)`:
    `build_borrowing_binary_op(maybe_get_output(), self_or_result, grad_output)`."""
    return iterator_layout(self, grad_output)


@meta_layout(aten.log_sigmoid_backward.default)
def _log_sigmoid_backward_layout(grad_output, self, buffer):
    """Activation.cpp `log_sigmoid_backward_cpu`: the iterator writes into
    `at::empty_like(grad_output)` (grad_output's strides if dense, else its suggested
    memory format), which it does not restride."""
    return preserved_layout(grad_output)


@meta_layout(aten.binary_cross_entropy.default)
def _binary_cross_entropy_layout(self, target, weight=None, reduction=1):
    """Loss.cpp `binary_cross_entropy_cpu`: the loss is `at::empty_like(input)`, written
    by a TensorIterator over its squeezed view (which keeps its strides) and scaled in
    place (`mul_(weight)`): the input's layout, whatever the target's or the weight's. A
    reduced loss is 0-dim."""
    return preserved_layout(self)


@meta_layout(aten.binary_cross_entropy_backward.default)
def _binary_cross_entropy_backward_layout(grad_output, self, target, weight=None, reduction=1):
    """Loss.cpp `binary_cross_entropy_backward_cpu`: `at::empty_like(input)`, written as
    the loss is (`mul_(weight)`, `div_(input.numel())` in place): the input's layout,
    whatever the incoming gradient's."""
    return preserved_layout(self)


@meta_layout(aten.where.self)
def _where_layout(condition, self, other):
    """TensorCompare.cpp `where_self_out`: self and other are cast to their result type
    (`self.to(result_type)`) before the iterator over (condition, self, other), the
    condition is not: a broadcast condition keeps its vote where a broadcast bool
    operand of `mul` is promoted."""
    dtype = torch.result_type(self, other)
    return lambda out: elementwise_strides(out.shape, [condition, promoted(self, dtype), promoted(other, dtype)])


# ------------------------------------------------------------------ contiguous
# Pow.cpp `TORCH_META_FUNC2(pow, Scalar)` (a Python number base, `2 ** x`): the output is
# `set_output_raw_strided(0, exp.sizes(), {}, ...)`, no strides (contiguous), which the
# impl fills (`fill_(1)` for a base of 1) or writes with `at::pow_out` (a TensorIterator
# over an output of the right size, which it does not restride). pow.Scalar is tagged
# pointwise; the other Scalar-first ops (rsub.Scalar, remainder.Scalar_Tensor,
# xlogy.Scalar_Self, bitwise_*.Scalar_Tensor, ...) wrap the number into a 0-dim tensor
# before a TensorIterator and take the tensor's layout.
meta_layout(aten.pow.Scalar)(contiguous_layout)


@meta_layout(aten.log_sigmoid_forward.default)
def _log_sigmoid_forward_layout(self):
    """Activation.cpp `log_sigmoid_forward_cpu` (F.logsigmoid): `result` and `buffer`
    are `at::empty_like(input, at::MemoryFormat::Contiguous)`."""
    return [torch.contiguous_format, torch.contiguous_format]


# TensorAdvancedIndexing.cpp `masked_fill` (tagged pointwise) and `masked_scatter` fill
# `_self->clone(at::MemoryFormat::Contiguous)` in place.
meta_layout(aten.masked_fill.Scalar, aten.masked_fill.Tensor, aten.masked_scatter.default)(contiguous_layout)

# ReduceOps.cpp `_logcumsumexp_cpu`: `at::empty_like(self, MemoryFormat::Contiguous)`.
meta_layout(aten._logcumsumexp.default)(contiguous_layout)

# Activation.cpp `rrelu_with_noise_cpu`: `at::empty_like(self,
# LEGACY_CONTIGUOUS_MEMORY_FORMAT)`, in eval mode too (leaky_relu_out into it).
meta_layout(aten.rrelu_with_noise.default, aten.rrelu_with_noise_functional.default)(contiguous_layout)

# Distributions.cpp `normal_impl`: `at::empty_like(mean, MemoryFormat::Contiguous)`,
# `at::empty_like(std, MemoryFormat::Contiguous)`, `at::empty(shape, options,
# MemoryFormat::Contiguous)`.
meta_layout(aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.Tensor_Tensor)(contiguous_layout)

# Gradients: SoftMax.cpp's structured meta functions of `_softmax_backward_data` and
# `_log_softmax_backward_data` (`grad.options().memory_format(
# LEGACY_CONTIGUOUS_MEMORY_FORMAT)`); LossMultiMargin.cpp
# `multi_margin_loss_cpu_backward` and FractionalMaxPool3d.cpp
# `fractional_max_pool3d_backward_cpu` (`at::empty({0})` resized by `resize_as_(input)`
# without a memory format); LossMultiLabelMargin.cpp
# `multilabel_margin_loss_backward_cpu` (`at::zeros_like(input,
# LEGACY_CONTIGUOUS_MEMORY_FORMAT)`); LossCTC.cpp `ctc_loss_backward_cpu_template`
# (`at::full_like(log_probs, neginf, LEGACY_CONTIGUOUS_MEMORY_FORMAT)`).
meta_layout(aten._softmax_backward_data.default, aten._log_softmax_backward_data.default,
            aten.multi_margin_loss_backward.default, aten.multilabel_margin_loss_backward.default,
            aten.fractional_max_pool3d_backward.default, aten._ctc_loss_backward.default,
            aten._ctc_loss_backward.Tensor)(contiguous_layout)


@meta_layout(aten.mse_loss_backward.default, aten.smooth_l1_loss_backward.default, aten.huber_loss_backward.default)
def _pointwise_loss_backward_layout(grad_output, self, target, reduction, *args, **kwargs):
    """Loss.cpp `mse_loss_backward`, `smooth_l1_loss_backward` (`at::zeros_like(input,
    LEGACY_CONTIGUOUS_MEMORY_FORMAT)`) and `huber_loss_backward` (`at::zeros_like(input,
    MemoryFormat::Contiguous)`), written by a TensorIterator over (input, target,
    grad_output): contiguous, unless target or grad_output broadcast the input to a
    larger shape, when the iterator resizes the gradient to that shape in its own
    layout."""
    if torch.broadcast_shapes(grad_output.shape, self.shape, target.shape) == self.shape:
        return contiguous_layout()
    return iterator_layout(self, target, grad_output)


# ------------------------------------------------------------------ the input's suggested format
@meta_layout(aten.native_batch_norm.default, aten._native_batch_norm_legit.default,
             aten._native_batch_norm_legit.no_stats, aten._native_batch_norm_legit_no_training.default,
             aten._batch_norm_with_update.default, aten._batch_norm_with_update_functional.default,
             aten._batch_norm_no_update.default)
def _batch_norm_layout(input, *args, **kwargs):
    """Normalization.cpp `batch_norm_cpu` / `_batch_norm_legit_cpu`: the output is
    `at::empty_like(self, self.suggest_memory_format())` (a transposed input gives a
    contiguous output, a channels_last one a channels_last output); the statistics are
    1-d."""
    return [suggested_layout(input)]


@meta_layout(aten.roll.default)
def _roll_layout(self, shifts, dims=()):
    """TensorTransformations.cpp `roll_cpu`: along one dim, `at::cat` of two narrowed
    pieces, whose memory format is the pieces' suggested one (cat's
    `compute_output_memory_format`); along several, roll after roll (`roll_common`); of
    the flattened tensor (`dims` empty), a view of the rolled flat copy (contiguous);
    an empty input, `clone(MemoryFormat::Preserve)` (the meta kernel's)."""
    if self.numel() == 0:
        return None
    return contiguous_layout() if not dims else suggested_layout(self)


def _grad_input_layout(grad_output, input, padding, **kwargs):
    """ReflectionPad.cpp `reflection_pad2d_backward_cpu` (`at::zeros_like(input,
    input.suggest_memory_format())`, its out= overload `grad_input.resize_as_(input,
    input.suggest_memory_format())`) and ReplicationPadding.cpp's 2-d and 3-d
    backward templates (`gradInput.resize_(input.sizes(),
    input.suggest_memory_format())`): the gradient keeps a channels_last input's layout."""
    return suggested_layout(input)


def _reflection_pad3d_grad_input_layout(grad_output, input, padding, **kwargs):
    """ReflectionPad.cpp `reflection_pad3d_backward_out_cpu`: as `_grad_input_layout`,
    except that an empty grad_output returns before the resize (the meta function's
    contiguous allocation stays)."""
    return None if grad_output.numel() == 0 else suggested_layout(input)


meta_layout(aten.reflection_pad2d_backward.default, aten.replication_pad2d_backward.default,
            aten.replication_pad3d_backward.default)(_grad_input_layout)
meta_layout(aten.reflection_pad3d_backward.default)(_reflection_pad3d_grad_input_layout)


# ------------------------------------------------------------------ out= kernels that restride
@out_layout(aten.reflection_pad2d.out)
def _reflection_pad2d_out_layout(self, padding, *, out):
    """ReflectionPad.cpp `reflection_pad2d_out_template`: `output.resize_(sizes,
    input.suggest_memory_format())` for a batch (4-d), a plain `resize_(sizes)` (which
    keeps the strides of a right-sized out tensor) otherwise."""
    return suggested_layout(self) if self.dim() == 4 else None


@out_layout(aten.reflection_pad3d.out, aten.replication_pad2d.out, aten.replication_pad3d.out)
def _pad_out_layout(self, padding, *, out):
    """ReflectionPad.cpp `reflection_pad3d_out_cpu` and ReplicationPadding.cpp
    `replication_pad2d_out_cpu` / `replication_pad3d_out_cpu`: `output.resize_(
    output.sizes(), input.suggest_memory_format())` after the meta function sized it."""
    return suggested_layout(self)


out_layout(aten.reflection_pad2d_backward.grad_input, aten.replication_pad2d_backward.grad_input,
           aten.replication_pad3d_backward.grad_input)(_grad_input_layout)
out_layout(aten.reflection_pad3d_backward.grad_input)(_reflection_pad3d_grad_input_layout)


@out_layout(aten.log_sigmoid_forward.output)
def _log_sigmoid_forward_out_layout(self, *, output, buffer):
    """Activation.cpp `log_sigmoid_forward_out_cpu`: `result.resize_as_(input)` (a
    right-sized result keeps its strides), `buffer.resize_as_(input,
    MemoryFormat::Contiguous)` (restrided whatever its strides)."""
    return [None, torch.contiguous_format]


# ------------------------------------------------------------------ attention's gradients
def _transposed_strides(shape) -> tuple:
    """The strides of a contiguous tensor of `shape` with its last two dims swapped,
    transposed back: a `bmm` result's `.transpose(-2, -1)`."""
    shape = tuple(shape)
    return torch.empty(shape[:-2] + shape[-2:][::-1], device="meta").mT.stride()


def _heads_transposed_strides(shape) -> tuple:
    """The strides of a contiguous (B, L, H, E) tensor viewed as (B, H, L, E)."""
    b, h, seq, e = shape
    return torch.empty((b, seq, h, e), device="meta").transpose(1, 2).stride()


@meta_layout(aten._scaled_dot_product_fused_attention_overrideable_backward.default)
def _attention_backward_layout(grad_out, query, key, value, *args, **kwargs):
    """The gradients of CPU's F.scaled_dot_product_attention. Its flash kernel's
    (attention.cpp `_scaled_dot_product_flash_attention_cpu_backward`) are
    `at::zeros(q.transpose(1, 2).sizes()).transpose(1, 2)`: (B, L, H, E) in memory.
    Where it takes its math path instead (nn's `_attention_layout`: a last dim of stride
    other than 1, head sizes that differ), they are those of `softmax(q @ k.transpose(-2,
    -1) * scale) @ v` (`_scaled_dot_product_attention_math`) through bmm: grad_query and
    grad_value are bmm results (contiguous), grad_key the transpose of one."""
    from .nn import _attention_layout

    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return None
    if not _attention_layout(query, key, value):
        return [_heads_transposed_strides(t.shape) for t in (query, key, value)] + [None]
    return [torch.contiguous_format, _transposed_strides(key.shape), torch.contiguous_format, None]
