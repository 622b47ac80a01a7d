"""Functionalized calls of mutating operators in compiled graphs.

AOTAutograd functionalizes a call of an operator that mutates its arguments (a
`torch.library.custom_op` with `mutates_args`, e.g. a `torchneuron.kernel`) into the
higher-order op ``auto_functionalized_v2(op, **kwargs, _all_bases=[...], _<arg>_base_index=i,
...view info...)`` (``auto_functionalized(op, **kwargs)`` in v1), which returns the
op's outputs followed by the new values of the mutated bases (v1: of the mutated
arguments). `run` evaluates one such node in JAX with the op's lowering (registered
with ``mutates=True``: it returns ``(outputs, {arg_name: new_value})``), regenerating
each mutated argument as a view of its base with PyTorch's own view-information
records and writing the new value back into the base.
"""
from __future__ import annotations

from typing import Any, List

import jax.numpy as jnp
import torch
from torch._higher_order_ops import auto_functionalize as af

from ..ops.registry import LOWERINGS
from ..runtime import views

HOPS = (torch.ops.higher_order.auto_functionalized, torch.ops.higher_order.auto_functionalized_v2)


def lowerable(node: torch.fx.Node) -> bool:
    """Whether an auto_functionalized node's operator has a mutating lowering."""
    op = node.args[0]
    return isinstance(op, torch._ops.OpOverload) and op in LOWERINGS and LOWERINGS[op].mutates


def _view(base, info, base_val: torch.Tensor):
    if isinstance(info, (af.NotView, af.AliasViewInfo)):
        return base
    if isinstance(info, af.SliceViewInfo):
        return base[(slice(None),) * info.dim + (slice(info.start, info.end),)]
    if isinstance(info, af.AsStridedViewInfo):
        return views.read(base.reshape(-1), base.dtype, tuple(info.size), tuple(info.stride),
                          info.storage_offset - base_val.storage_offset())
    raise NotImplementedError(f"torchneuron compile: view kind {type(info).__name__} of a mutated argument")


def _write(base, info, value, base_val: torch.Tensor):
    value = jnp.asarray(value).astype(base.dtype)
    if isinstance(info, (af.NotView, af.AliasViewInfo)):
        return jnp.broadcast_to(value, base.shape)
    if isinstance(info, af.SliceViewInfo):
        return base.at[(slice(None),) * info.dim + (slice(info.start, info.end),)].set(value)
    flat = views.write(base.reshape(-1), base.size, base.dtype, tuple(info.size), tuple(info.stride),
                       info.storage_offset - base_val.storage_offset(), value)
    return flat.reshape(base.shape)


def run(node: torch.fx.Node, op: torch._ops.OpOverload, kwargs: dict, call) -> List[Any]:
    """The node's results: the op's outputs then the new bases (v2) or the new mutated
    arguments (v1). `kwargs` are the node's keyword arguments as JAX values; `call`
    runs the op's lowering on schema-ordered arguments."""
    kwargs = dict(kwargs)
    schema = op._schema
    names, types = af.get_mutable_args_from_schema(schema)
    v2 = node.target is torch.ops.higher_order.auto_functionalized_v2
    if v2:
        bases = list(kwargs.pop("_all_bases"))
        base_vals = [b.meta.get("val") for b in node.kwargs["_all_bases"]]
        infos = af.read_view_information_from_args(names, types, kwargs, bases)
        for name in names:
            info = infos[name]
            if isinstance(info, list):
                kwargs[name] = [_view(bases[i.base_index], i, base_vals[i.base_index]) for i in info]
            elif info is not None:
                kwargs[name] = _view(bases[info.base_index], info, base_vals[info.base_index])
            else:
                kwargs[name] = None
    values = [kwargs[a.name] if a.name in kwargs else a.default_value if a.has_default_value() else None
              for a in schema.arguments]
    outs, updates = call(values)
    if not schema.returns:
        outs = [None]
    elif len(schema.returns) == 1:
        outs = [outs]
    else:
        outs = list(outs)
    if not v2:
        return outs + [updates.get(name) for name in names]
    for name in names:
        info = infos[name]
        pairs = zip(info, updates[name]) if isinstance(info, list) else [(info, updates.get(name))]
        for i, value in pairs:
            if i is not None and value is not None:
                bases[i.base_index] = _write(bases[i.base_index], i, value, base_vals[i.base_index])
    return outs + bases
