"""Which device PyTorch's Python meta kernels and fake tensors lay outputs out for.

Several of `torch._meta_registrations`' kernels pick the output layout (or a check) by
the device of their input, through `device_hint`: CPU's pixel_shuffle and 2-d padding
keep channels_last, its eigenvectors are column-major, its embedding_bag returns other
bag sizes. A plain meta tensor has no device, and `device_hint` then answers "cuda"; a
fake tensor answers its fake device. CPU is torchneuron's oracle, so the meta kernels
the eager executor runs on meta stand-ins of `neuron` tensors (`eager_meta`), and those
fake tensors on `neuron` run in compiled graphs, read them as CPU tensors. Everyone
else's meta and fake tensors keep PyTorch's answer.

Layouts no meta kernel can tell (`ops.registry.LAYOUTS`: convolution's backend, pads,
group_norm, ...) are applied to the eager executor's meta outputs by the executor, and
to fake tensors on `neuron` here (`_fake_dispatch`), so a compiled graph's outputs are
laid out as eager ones.
"""
from __future__ import annotations

import contextlib
import threading

import torch
import torch._meta_registrations as _meta_registrations
from torch._subclasses import fake_tensor
from torch.utils import _pytree as pytree

from ..ops import registry

_local = threading.local()
_pytorch_device_hint = _meta_registrations.device_hint
_pytorch_fake_dispatch = fake_tensor.FakeTensorMode._dispatch_impl


def device_hint(tensor) -> str:
    """`torch._meta_registrations.device_hint`, with "cpu" for meta tensors inside
    `eager_meta()` and for fake tensors on `neuron`."""
    hint = _pytorch_device_hint(tensor)
    if hint == "neuron" or (in_eager_meta() and tensor.device.type == "meta"):
        return "cpu"
    return hint


@contextlib.contextmanager
def eager_meta():
    """While the eager executor runs a meta kernel on meta stand-ins of `neuron` tensors."""
    previous = getattr(_local, "eager", False)
    _local.eager = True
    try:
        yield
    finally:
        _local.eager = previous


def in_eager_meta() -> bool:
    """Whether the eager executor is running a meta kernel on this thread."""
    return getattr(_local, "eager", False)


def _on_neuron_with_concrete_sizes(flat) -> bool:
    fakes = [t for t in flat if isinstance(t, fake_tensor.FakeTensor)]
    # Layout rules ask ATen (convolution's backend) about concrete geometry; symbolic
    # sizes keep PyTorch's layout, as its own conv fake kernel does.
    return (any(t.fake_device.type == "neuron" for t in fakes)
            and not any(isinstance(s, torch.SymInt) for t in fakes for s in (*t.shape, *t.stride())))


def _as_meta(value):
    if isinstance(value, fake_tensor.FakeTensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return value


def _fake_dispatch(self, func, types, args, kwargs):
    """`FakeTensorMode._dispatch_impl`, whose new outputs of an op in `registry.LAYOUTS`
    on `neuron` fake tensors take the layout the eager executor gives them."""
    out = _pytorch_fake_dispatch(self, func, types, args, kwargs)
    if func not in registry.LAYOUTS or out is NotImplemented:
        return out
    if not _on_neuron_with_concrete_sizes(pytree.tree_leaves((args, kwargs))):
        return out
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    with fake_tensor.unset_fake_temporarily():
        metas = registry.laid_out(func, [_as_meta(o) for o in outs], *pytree.tree_map(_as_meta, (args, kwargs)))
    for i, (o, m) in enumerate(zip(outs, metas)):
        if isinstance(o, fake_tensor.FakeTensor) and o.stride() != m.stride():
            with self:
                outs[i] = torch.empty_strided(o.shape, m.stride(), dtype=o.dtype, device=o.device)
    if isinstance(out, tuple) and hasattr(out, "_fields"):  # a named tuple (log_sigmoid_forward.output's)
        return type(out)(*outs)
    return type(out)(outs) if isinstance(out, (tuple, list)) else outs[0]


def relaid(op, args, kwargs, out):
    """`out`, the results of `op`'s decomposition in a compiled graph, copied into the
    layouts `registry.LAYOUTS` gives `op`'s results where they differ (log_sigmoid_forward's
    contiguous ones), as the eager executor lays out a decomposition's results
    (`ops.fallback`): fake tensors on `neuron` of concrete sizes only."""
    if not _on_neuron_with_concrete_sizes(pytree.tree_leaves((args, kwargs))):
        return out
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    with fake_tensor.unset_fake_temporarily():
        margs, mkwargs = pytree.tree_map(_as_meta, (args, kwargs))
        try:
            metas = op(*margs, **mkwargs)
        except Exception:  # noqa: BLE001 - no meta kernel: the decomposition's layout stays
            return out
        metas = list(metas) if isinstance(metas, (tuple, list)) else [metas]
        metas = registry.laid_out(op, metas, margs, mkwargs)
    for i, (o, m) in enumerate(zip(outs, metas)):
        if (isinstance(o, torch.Tensor) and isinstance(m, torch.Tensor) and o.shape == m.shape
                and o.stride() != m.stride()):
            # functional (a traced graph holds no mutation): a copy of `o` in m's strides
            outs[i] = torch.ops.aten.copy.default(
                torch.empty_strided(m.shape, m.stride(), dtype=o.dtype, device=o.device), o)
    if not isinstance(out, (tuple, list)):
        return outs[0]
    return type(out)(*outs) if hasattr(out, "_fields") else type(out)(outs)


def install() -> None:
    """Replaces the module's `device_hint`, which its kernels look up at each call, and
    FakeTensorMode's dispatch (see `_fake_dispatch`)."""
    _meta_registrations.device_hint = device_hint
    fake_tensor.FakeTensorMode._dispatch_impl = _fake_dispatch
