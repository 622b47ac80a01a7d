"""JAX functions as PyTorch operators on `neuron`: the `kernel` decorator.

``@torchneuron.kernel("mylib::op")`` turns a JAX function into a
`torch.library.custom_op` whose `neuron` implementation is the JAX function itself,
registered in the one lowering table (`ops.registry`): in eager mode the executor
calls it inside a cached `jax.jit` on the tensors' device buffers (no host round trip),
and in `torch.compile(backend="neuron")` graphs the op stays one node that is traced
into the graph's StableHLO like any ATen op (no graph break). Its fake (shape)
implementation is `jax.eval_shape` of the function; its autograd is `jax.vjp` of the
function (a second kernel, ``<name>_vjp``, recomputing the forward), unless the user
registers a backward with `register_autograd`.
"""
from __future__ import annotations

import inspect
from typing import Callable, Collection, Dict, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import torch

from ..ops import registry
from ..runtime import dtypes as dt

_libs: list = []  # torch.library.Library objects must outlive their registrations


def kernel(name: str, fn: Optional[Callable] = None, *, mutates_args: Sequence[str] = (),
           schema: Optional[str] = None,
           dtypes: Union[None, Collection[torch.dtype], Dict[str, Collection[torch.dtype]]] = None):
    """Decorator: registers the JAX function `fn` as the PyTorch operator `name`
    ("namespace::op") and returns its `torch.library.CustomOpDef` (call it like a
    function; `torch.ops.namespace.op` is the same operator).

    `fn` receives `neuron` tensors as `jax.Array`s (same shape and dtype), other
    arguments as Python values, and returns an array or a tuple of arrays. The operator
    schema comes from `schema` or from `fn`'s signature: annotated parameters as
    `torch.library.custom_op` reads them, unannotated ones as `Tensor` (no default) or
    the type of their default; an unannotated return is `Tensor` (`None` for a kernel
    with `mutates_args`). A kernel that mutates arguments returns
    ``(outputs, {arg_name: new_value})`` (outputs None when the op returns nothing); the
    operator writes the new values into those tensors.

    `dtypes` restricts the tensor arguments' dtypes (one collection for all, or a dict
    per argument name). Errors: RuntimeError when an argument has another dtype, or when
    the operator is called with tensors that are not on `neuron` (the kernel has no
    CPU implementation, as a CUDA-only operator has none); JAX's own TypeError or
    ValueError when `fn` rejects the shapes, raised while PyTorch computes the output
    shapes, before anything runs.
    """
    def wrap(f):
        return _define(name, f, tuple(mutates_args), schema or _infer_schema(f, mutates_args), dtypes, True)

    return wrap if fn is None else wrap(fn)


def _infer_schema(fn: Callable, mutates_args) -> str:
    sig = inspect.signature(fn)
    params = []
    for p in sig.parameters.values():
        ann = p.annotation
        if ann is inspect.Parameter.empty:
            if p.default is inspect.Parameter.empty:
                ann = torch.Tensor
            elif p.default is None:
                ann = Optional[torch.Tensor]
            else:
                ann = type(p.default)
        params.append(p.replace(annotation=ann))
    ret = sig.return_annotation
    if ret is inspect.Signature.empty:
        ret = None if mutates_args else torch.Tensor

    def prototype(*args, **kwargs):
        raise AssertionError("schema prototype")

    prototype.__signature__ = sig.replace(parameters=params, return_annotation=ret)
    return torch.library.infer_schema(prototype, mutates_args=mutates_args)


def _define(name: str, fn: Callable, mutates_args: tuple, schema: str, dtypes, differentiable: bool):
    """Defines the custom op, its lowering, its `neuron` kernel, fake and autograd."""
    from ..eager import executor, install

    names = [a.name for a in torch._C.parse_schema(name + schema).arguments]
    op_def = torch.library.custom_op(name, _host_impl(name, names), mutates_args=mutates_args, schema=schema)
    op = op_def._opoverload
    args = op._schema.arguments
    is_tensor = [str(a.type) in ("Tensor", "Optional[Tensor]") for a in args]
    floats = tuple(a.name for a in args if str(a.type) in ("float", "Optional[float]"))

    install.install()  # the table's ATen kernels first: this op registers its own below
    registry.lowering(op, mutates=bool(mutates_args), static=floats)(fn)
    ns, op_name = name.split("::")
    lib = torch.library.Library(ns, "IMPL")
    _libs.append(lib)
    eager = executor.OpKernel(op, registry.LOWERINGS[op], "mutating" if mutates_args else "functional")
    lib.impl(op_name, eager, "PrivateUse1")
    install.KERNELS[op] = eager

    def fake(*values, **kwargs):
        values = _schema_values(op, values, kwargs)
        _check_dtypes(name, names, values, dtypes)
        leaves, tree = jax.tree_util.tree_flatten(values, is_leaf=lambda v: isinstance(v, torch.Tensor))
        tensors = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
        device = leaves[tensors[0]].device if tensors else torch.device("neuron")

        def call(*arrays):
            full = list(leaves)
            for i, a in zip(tensors, arrays):
                full[i] = a
            return fn(*jax.tree_util.tree_unflatten(tree, full))

        structs = [jax.ShapeDtypeStruct(tuple(int(n) for n in leaves[i].shape), dt.to_jax(leaves[i].dtype))
                   for i in tensors]
        try:
            shapes = jax.eval_shape(call, *structs)
        except (TypeError, ValueError) as exc:
            exc.add_note(f"while computing the output shapes of torchneuron kernel {name}")
            raise
        if mutates_args:
            shapes = shapes[0]
        return jax.tree_util.tree_map(
            lambda s: torch.empty(s.shape, dtype=dt.to_torch(s.dtype), device=device), shapes)

    op_def.register_fake(fake)
    # PyTorch refuses autograd formulas for operators that mutate their arguments.
    if differentiable and op._schema.returns and not mutates_args:
        _register_vjp(name, fn, op_def, op, is_tensor, schema)
    return op_def


def _schema_values(op, values, kwargs) -> list:
    """The call's arguments in schema order, defaults filled in."""
    out = list(values)
    for a in op._schema.arguments[len(values):]:
        out.append(kwargs[a.name] if a.name in kwargs else a.default_value if a.has_default_value() else None)
    return out


def _check_dtypes(name, names, values, dtypes) -> None:
    if dtypes is None:
        return
    for arg, v in zip(names, values):
        allowed = dtypes.get(arg) if isinstance(dtypes, dict) else dtypes
        if isinstance(v, torch.Tensor) and allowed is not None and v.dtype not in allowed:
            raise RuntimeError(f"{name}: argument '{arg}' has dtype {v.dtype}, but the kernel supports "
                               f"{', '.join(sorted(str(d) for d in allowed))}")


def _host_impl(name: str, names):
    """The operator's implementation for every device but `neuron`: an error naming
    the argument that is elsewhere."""
    def host(*args, **kwargs):
        for arg, v in list(zip(names, args)) + list(kwargs.items()):
            if isinstance(v, (list, tuple)):
                v = next((t for t in v if isinstance(t, torch.Tensor)), None)
            if isinstance(v, torch.Tensor) and v.device.type != "neuron":
                raise RuntimeError(
                    f"{name} is a torchneuron kernel and runs on 'neuron' tensors only, but argument '{arg}' is on "
                    f"'{v.device}'; move the inputs with .to('neuron')")
        raise RuntimeError(f"{name} is a torchneuron kernel and needs a 'neuron' tensor argument")

    return host


def _differentiable(values, is_tensor):
    """Positions of the arguments the vjp differentiates: defined floating-point tensors."""
    return [i for i, (v, t) in enumerate(zip(values, is_tensor))
            if t and v is not None and (v.is_floating_point() if isinstance(v, torch.Tensor) else jnp.issubdtype(v.dtype, jnp.inexact))]


def _register_vjp(name, fn, op_def, op, is_tensor, schema):
    """Registers autograd through `<name>_vjp(Tensor[] cotangents, *args) -> Tensor[]`,
    a kernel computing `jax.vjp(fn)` at the call's arguments (the gradients of the
    differentiable arguments, in order)."""
    args_part = schema[schema.index("(") + 1:schema.rindex(") ->")]
    vjp_schema = f"(Tensor[] cotangents{', ' + args_part if args_part else ''}) -> Tensor[]"

    def vjp(cotangents, *values):
        diff = _differentiable(values, is_tensor)

        def primal(*xs):
            full = list(values)
            for i, x in zip(diff, xs):
                full[i] = x
            return fn(*full)

        try:
            outs, pullback = jax.vjp(primal, *[values[i] for i in diff])
        except (TypeError, ValueError) as exc:  # e.g. a Pallas call: no reverse-mode rule
            exc.add_note(f"jax.vjp cannot differentiate {name}: register a backward with its register_autograd")
            raise
        leaves, tree = jax.tree_util.tree_flatten(outs)
        cts = [jnp.asarray(c).astype(o.dtype) for c, o in zip(cotangents, leaves)]
        return list(pullback(jax.tree_util.tree_unflatten(tree, cts)))

    vjp_op = _define(name + "_vjp", vjp, (), vjp_schema, None, False)

    def setup_context(ctx, inputs, output):
        for v in inputs:
            if isinstance(v, (list, tuple)) and any(isinstance(t, torch.Tensor) and t.requires_grad for t in v):
                raise NotImplementedError(
                    f"{name}: gradients through a Tensor[] argument are not derived by jax.vjp; register a "
                    f"backward with {name}.register_autograd, or call it under torch.no_grad()")
        ctx.tensor_pos = [i for i, v in enumerate(inputs) if isinstance(v, torch.Tensor)]
        ctx.others = [None if isinstance(v, torch.Tensor) else v for v in inputs]
        ctx.save_for_backward(*[inputs[i] for i in ctx.tensor_pos])

    def backward(ctx, *grads):
        values = list(ctx.others)
        for i, t in zip(ctx.tensor_pos, ctx.saved_tensors):
            values[i] = t
        got = vjp_op(list(grads), *values)
        result = [None] * len(values)
        for i, g in zip(_differentiable(values, is_tensor), got):
            result[i] = g
        return tuple(result)

    op_def.register_autograd(backward, setup_context=setup_context)
