"""Copy and conversion lowerings."""
import jax.numpy as jnp
import torch

from .registry import context, lowering

aten = torch.ops.aten


@lowering(aten.copy.default)
def copy(self, src, non_blocking=False):
    out = context().out()
    return jnp.broadcast_to(jnp.asarray(src).astype(out.dtype), out.shape)
