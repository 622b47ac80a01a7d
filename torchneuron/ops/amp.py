"""Lowerings of the two kernels `torch.amp.GradScaler` runs every step, so that mixed
precision training with a scaler stays on the device:

- ``_amp_foreach_non_finite_check_and_unscale_``: multiplies every gradient by
  ``inv_scale`` and sets ``found_inf`` to 1 when any gradient holds an inf or NaN;
- ``_amp_update_scale_``: backs the scale off after an overflow step, grows it after
  ``growth_interval`` clean steps.

Both follow ATen's CPU and CUDA kernels (AmpKernels.cpp, AmpGradScalerKernels.cu) in
their arithmetic: the product with ``inv_scale`` is taken in float32 for half types, the
scale update in float64 rounded to float32. The functional forms, which AOTAutograd
puts into compiled graphs, are compile-only: eager calls of them run PyTorch's
composite kernel (a clone, then the in-place kernel below).
"""
import jax.numpy as jnp
import torch

from ._common import acc_type
from .registry import lowering

aten = torch.ops.aten


def _unscale(grads, found_inf, inv_scale):
    """(grads * inv_scale in their own dtypes, found_inf set to 1 on any non-finite value)."""
    inv = inv_scale.reshape(()).astype(jnp.float32)
    new_grads, bad = [], jnp.zeros((), jnp.bool_)
    for g in grads:
        val = g.astype(acc_type(g.dtype))
        bad = bad | ~jnp.all(jnp.isfinite(val))
        # ATen skips the multiplication for inv_scale == 1 (GradScaler's inf check with a
        # dummy scale); x * 1 is x for every x, so one formula gives the same bits.
        new_grads.append((val * inv.astype(val.dtype)).astype(g.dtype))
    # found_inf is only ever set here, never cleared: GradScaler passes one zeroed flag
    # per device and dtype group and sums them afterwards.
    new_found = jnp.where(bad, jnp.ones_like(found_inf), found_inf)
    return new_grads, new_found


@lowering(aten._amp_foreach_non_finite_check_and_unscale_.default, mutates=True)
def amp_foreach_non_finite_check_and_unscale_(self, found_inf, inv_scale):
    """aten::_amp_foreach_non_finite_check_and_unscale_: unscales the gradients in
    place and records in ``found_inf`` whether any of them was inf or NaN."""
    grads, found = _unscale(self, found_inf, inv_scale)
    return (), {"self": grads, "found_inf": found}


@lowering(aten._amp_foreach_non_finite_check_and_unscale.default, eager=False)
def amp_foreach_non_finite_check_and_unscale(self, found_inf, inv_scale):
    """aten::_amp_foreach_non_finite_check_and_unscale: the functional form (compile)."""
    return _unscale(self, found_inf, inv_scale)


def _update_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """(new scale, new growth tracker), as ATen's amp_update_scale kernels compute them."""
    s = scale.reshape(()).astype(jnp.float64)
    tracker = growth_tracker.reshape(())
    overflow = found_inf.reshape(()) != 0
    backed_off = (s * jnp.asarray(backoff_factor, jnp.float64)).astype(jnp.float32)
    grown = (s * jnp.asarray(growth_factor, jnp.float64)).astype(jnp.float32)
    successful = tracker + 1
    grow_now = successful == growth_interval
    # A growth that would overflow float32 keeps the old scale (the tracker still resets).
    kept = jnp.where(grow_now & jnp.isfinite(grown), grown, s.astype(jnp.float32))
    new_scale = jnp.where(overflow, backed_off, kept).astype(scale.dtype)
    new_tracker = jnp.where(overflow | grow_now, jnp.zeros_like(tracker), successful.astype(tracker.dtype))
    return new_scale.reshape(scale.shape), new_tracker.reshape(growth_tracker.shape)


@lowering(aten._amp_update_scale_.default, mutates=True)
def amp_update_scale_(self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor, growth_interval):
    """aten::_amp_update_scale_: updates GradScaler's scale and growth tracker in place."""
    scale, tracker = _update_scale(self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor,
                                   growth_interval)
    return (), {"self": scale, "growth_tracker": tracker}


@lowering(aten._amp_update_scale.default, eager=False)
def amp_update_scale(self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor, growth_interval):
    """aten::_amp_update_scale: the functional form (compile)."""
    return _update_scale(self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor, growth_interval)
