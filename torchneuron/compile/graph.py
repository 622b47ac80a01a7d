"""An ATen FX graph -> one XLA executable, interpreted with the eager lowering table.

`GraphExecutable(gm)` is what the `neuron` torch.compile backend returns for each
forward and backward graph AOTAutograd produces. Calling it with `neuron` tensors reads
their views out of their storage buffers inside one `jax.jit`, runs every node's
lowering, and returns new `neuron` tensors whose buffers are the executable's outputs:
no host round trip. Inputs mutated by the graph (``copy_`` into a placeholder, which
AOTAutograd emits for BatchNorm running statistics in inference graphs) are written
back into the real tensors' storages. Random nodes draw from the device generator, so
`torch.manual_seed` makes compiled runs reproducible.
"""
from __future__ import annotations

import hashlib
import logging
import operator
import os
import time
from typing import Any, Dict, List, Optional

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.fx

from .. import config, metrics, profiler
from ..eager import executor, refusal
from ..ops.registry import LOWERINGS, Context, OutSpec, tracing
from ..runtime import checks, dtypes, pjrt, storage, transfer, views
from . import cache, flex_attention, mutation

log = logging.getLogger("torchneuron")
aten = torch.ops.aten


def _schema_args(target, args, kwargs):
    """The node's arguments in schema order, with defaults filled in."""
    schema = target._schema
    out = []
    for i, a in enumerate(schema.arguments):
        if i < len(args):
            out.append(args[i])
        elif a.name in kwargs:
            out.append(kwargs[a.name])
        else:
            out.append(a.default_value if a.has_default_value() else None)
    return out


def _out_specs(val) -> List[Optional[OutSpec]]:
    vals = val if isinstance(val, (list, tuple)) else [val]
    specs = []
    for v in vals:
        if isinstance(v, torch.Tensor):
            specs.append(OutSpec(tuple(v.shape), dtypes.to_jax(v.dtype)))
        else:
            specs.append(None)
    return specs


#: Effectful ops a graph runs inside `with_effects`, and how: the LAPACK error check of
#: torch.linalg's functions (`_linalg_check_errors(infos, api_name, is_matrix)`).
_WITH_EFFECTS = torch.ops.higher_order.with_effects
_EFFECTS = (aten._linalg_check_errors.default,)


def _linalg_check(infos, api_name: str, is_matrix: bool):
    """A host check (see runtime/checks): ATen's own `_linalg_check_errors` on the CPU
    copy of the infos, raising CPU's LinAlgError and message where one is nonzero."""
    def raise_if_failed(value):
        aten._linalg_check_errors(torch.from_numpy(np.array(value)).reshape(infos.shape), api_name,
                                  is_matrix=is_matrix)
    return raise_if_failed


def refusal_of_dtypes(gm: torch.fx.GraphModule):
    """CPU's refusal (exception type, message) of the first node whose dtypes CPU's
    kernel does not implement (`eager/refusal.py`), or None: a lowering computes in any
    dtype."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload):
            vals = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: a.meta.get("val"))
            refused = refusal.refusal_of_dtypes(n.target, _schema_args(n.target, *vals))
            if refused is not None:
                return refused
    return None


def lowerable(node: torch.fx.Node) -> bool:
    """Whether a call_function node has a lowering (getitem always does)."""
    if node.target is operator.getitem:
        return True
    if node.target is _WITH_EFFECTS:
        return node.args[1] in _EFFECTS
    if node.target in mutation.HOPS:
        return mutation.lowerable(node)
    if node.target in flex_attention.HOPS:
        return flex_attention.lowerable(node)
    if not isinstance(node.target, torch._ops.OpOverload):
        return False
    if node.target is aten.copy_.default:
        return node.args[0].op == "placeholder"
    return node.target in LOWERINGS and not LOWERINGS[node.target].mutates


class GraphExecutable:
    """Compiles and runs one functional ATen graph. Callable like the graph module."""

    def __init__(self, gm: torch.fx.GraphModule, name: str = "graph"):
        self.gm = gm
        self.name = name
        self.nodes = list(gm.graph.nodes)
        self.placeholders = [n for n in self.nodes if n.op == "placeholder"]
        self.random = any(n.op == "call_function" and n.target in LOWERINGS and LOWERINGS[n.target].random
                          for n in self.nodes)
        self.mutated = []  # placeholder indices written by copy_ nodes, in node order
        for n in self.nodes:
            if n.op == "call_function" and n.target is aten.copy_.default:
                self.mutated.append(self.placeholders.index(n.args[0]))
        out_node = next(n for n in self.nodes if n.op == "output")
        self.out_vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in out_node.args[0]]
        self._execs: Dict[tuple, Any] = {}
        self._module_names: Dict[int, str] = {}  # id(executable) -> HLO module name

    # ------------------------------------------------------------------ tracing
    def _interpret(self, geometry, found, *inputs):
        """Traces the graph. Device-side checks (out-of-range indices) become extra
        boolean outputs; their (exception type, message) are appended to `found`."""
        n_in = len(geometry)
        bufs, rest = inputs[:n_in], inputs[n_in:]
        rng = tuple(rest[:2]) if self.random else None
        env: Dict[torch.fx.Node, Any] = {}
        mutations = []
        flags = []
        it = iter(zip(geometry, bufs))
        for index, node in enumerate(self.nodes):
            if node.op == "placeholder":
                geo, buf = next(it)
                if geo is None:
                    env[node] = buf
                else:
                    shape, stride, offset, dt = geo
                    env[node] = views.read(buf, dt, shape, stride, offset)
            elif node.op == "call_function":
                args = torch.fx.node.map_arg(node.args, lambda n: env[n])
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
                if node.target is operator.getitem:
                    env[node] = args[0][args[1]]
                    continue
                if node.target is aten.copy_.default:
                    spec = _out_specs(node.meta.get("val"))[0]
                    value = jnp.broadcast_to(jnp.asarray(args[1]).astype(spec.dtype), spec.shape)
                    mutations.append(value)
                    env[node] = value
                    continue
                if node.target is _WITH_EFFECTS:  # (token, _linalg_check_errors, infos, api_name, is_matrix)
                    token, op, *op_args = args
                    infos, api_name, is_matrix = _schema_args(op, op_args, kwargs)
                    flags.append(infos)
                    found.append((None, _linalg_check(infos, api_name, is_matrix)))
                    # AOTAutograd passes the effect token as None and drops the new one
                    env[node] = (jnp.zeros((0,), jnp.float32) if token is None else token, None)
                    continue
                if node.target in flex_attention.HOPS:
                    env[node] = flex_attention.run(node, args, _schema_args, _out_specs, _cast)
                    continue
                if node.target in mutation.HOPS:
                    target, low = args[0], LOWERINGS[args[0]]
                    ctx = Context(outs=_out_specs(node.meta.get("val")), rng=rng, salt=index)

                    def call(values):
                        with tracing(ctx):
                            return low.fn(*values)

                    result = mutation.run(node, target, kwargs, call)
                else:
                    low = LOWERINGS[node.target]
                    ctx = Context(outs=_out_specs(node.meta.get("val")), rng=rng, salt=index,
                                  contiguous=_contiguity(node.args), layouts=_layouts(node.args))
                    with tracing(ctx):
                        result = low.fn(*_schema_args(node.target, args, kwargs))
                for ok, exc_type, message in ctx.checks:
                    flags.append(ok)
                    found.append((exc_type, message))
                env[node] = _cast(result, ctx.outs)
            elif node.op == "get_attr":
                env[node] = _constant(getattr(self.gm, node.target))
            elif node.op == "output":
                outs = torch.fx.node.map_arg(node.args[0], lambda n: env[n])
                flat = []
                for v, val in zip(outs, self.out_vals):
                    if isinstance(val, torch.Tensor):
                        flat.append(_layout(jnp.asarray(v).astype(dtypes.to_jax(val.dtype)), val))
                return tuple(flat), tuple(m.reshape(-1) for m in mutations), tuple(flags)
            else:
                raise NotImplementedError(f"torchneuron compile: unsupported FX node {node.op}")

    # ------------------------------------------------------------------ running
    def __call__(self, *args):
        args = list(args)
        geometry, bufs, device = [], [], None
        for a in args:
            if isinstance(a, torch.Tensor) and (a.is_conj() or a.is_neg()):
                # A lazily conjugated/negated view (from ops run outside the graph, such
                # as a split): the graph reads storage buffers, so it takes the values
                # as they read.
                a = a.resolve_conj().resolve_neg()
            meta = executor._tensor_meta(a) if isinstance(a, torch.Tensor) else None
            if meta is None:
                if isinstance(a, torch.Tensor):
                    # CPU tensors in a graph are host state such as torch.optim's step
                    # counters: they enter the executable as values.
                    a = dtypes.numpy_view(a.detach().contiguous()).copy()
                geometry.append(None)
                bufs.append(a)
                continue
            handle, shape, stride, offset, dtype, index, nbytes = meta
            device = index if device is None else device
            geometry.append((shape, stride, offset, dtypes.to_jax(dtype)))
            bufs.append(storage.buffer(handle, nbytes, dtypes.to_jax(dtype), index))
        if device is None:
            device = torch.neuron.current_device()
        geometry = tuple(geometry)
        extra = list(executor._rng_state([], [], device)) if self.random else []
        key = (geometry, tuple(b.dtype for b in bufs if hasattr(b, "dtype")), device)
        if key not in self._execs:
            self._execs[key] = self._compile(geometry, bufs + extra, device)
        fn, check_info = self._execs[key]
        metrics.count("graph_executions")
        with profiler.record(f"neuron::graph::{self.name}"):
            if profiler.enabled():
                profiler.mark_execution(self._module_name(fn))
            try:
                outs, mutations, flags = fn(*bufs, *extra)
            except jax.errors.JaxRuntimeError as exc:
                storage.raise_if_out_of_memory(exc, device)
                raise
        results = []
        it = iter(outs)
        dev = torch.device("neuron", device)
        for val in self.out_vals:
            if isinstance(val, torch.Tensor) and val.device.type != "neuron":
                results.append(dtypes.from_numpy(np.array(next(it))).reshape(val.shape))
            elif isinstance(val, torch.Tensor):
                t = torch.empty_strided(tuple(val.shape), tuple(val.stride()), dtype=val.dtype, device=dev)
                storage.buffers[t.data_ptr()] = next(it)
                results.append(t)
            else:
                results.append(val)
        for i, value in zip(self.mutated, mutations):
            self._write_back(args[i], value, dev)
        for flag, (exc_type, message) in zip(flags, check_info):
            checks.add(flag, exc_type, message)
        return tuple(results)

    def _module_name(self, fn) -> str:
        """The HLO module name of a compiled executable, by which XLA's profiler
        reports its device time (read once: it materializes the HLO module)."""
        name = self._module_names.get(id(fn))
        if name is None:
            name = self._module_names[id(fn)] = fn.runtime_executable().hlo_modules()[0].name
        return name

    def _write_back(self, target: torch.Tensor, flat, dev) -> None:
        meta = executor._tensor_meta(target)
        if (meta is not None and not (target.is_conj() or target.is_neg()) and transfer.covers_storage(meta)
                and storage.buffers.get(meta[0], flat).dtype == flat.dtype):
            storage.buffers[meta[0]] = flat
            return
        staged = torch.empty(target.shape, dtype=target.dtype, device=dev)
        storage.buffers[staged.data_ptr()] = flat
        with torch.no_grad():
            target.copy_(staged)

    def _compile(self, geometry, example, device: int):
        """(compiled executable for `neuron:device`, [(exception type, message)] of its
        check outputs)."""
        start = time.perf_counter()
        found = []
        with profiler.record(f"neuron::compile_graph::{self.name}"):
            def interpret(*xs):
                return self._interpret(geometry, found, *xs)

            # The HLO module's name ("jit_" + this) tells graphs apart in XLA's profiler;
            # derived from the graph's code, it is the same in every process, so the
            # on-disk cache keeps hitting.
            interpret.__name__ = "neuron_graph_" + hashlib.sha256(self.gm.code.encode()).hexdigest()[:12]
            jitted = jax.jit(interpret)
            lowered = jitted.lower(*example)
            if config.DUMP_DIR:
                self._dump(lowered)
            compiled, hit = cache.load_or_compile(lowered, pjrt.device(device))
        metrics.count("graph_cache_hits" if hit else "graph_cache_misses")
        metrics.count("graphs_compiled")
        metrics.add_time("graph_compile_seconds", time.perf_counter() - start)
        return compiled, found

    def _dump(self, lowered) -> None:
        os.makedirs(config.DUMP_DIR, exist_ok=True)
        stem = os.path.join(config.DUMP_DIR, f"{self.name}_{metrics.get('graphs_compiled')}")
        with open(stem + ".fx.py", "w") as f:
            f.write(self.gm.code)
        with open(stem + ".stablehlo.mlir", "w") as f:
            f.write(lowered.as_text())


def _contiguity(args) -> tuple:
    """Whether each tensor argument of a node is contiguous, from its fake tensor."""
    vals = [a.meta.get("val") for a in args if isinstance(a, torch.fx.Node)]
    return tuple(v.is_contiguous() for v in vals if isinstance(v, torch.Tensor))


def _layouts(args) -> tuple:
    """(stride, storage offset) of each tensor argument of a node, from its fake tensor:
    where a value sits in the storage it is a view of, which `as_strided` reads."""
    vals = [a.meta.get("val") for a in args if isinstance(a, torch.fx.Node)]
    return tuple((tuple(v.stride()), int(v.storage_offset())) for v in vals if isinstance(v, torch.Tensor))


def _constant(value):
    """A graph constant (a lifted tensor attribute) as a JAX value."""
    if isinstance(value, torch.Tensor):
        return jnp.asarray(dtypes.numpy_view(value.detach().cpu().contiguous()))
    return value


def _layout(value, val: torch.Tensor):
    """`value` as the flat storage of a tensor with `val`'s exact strides (AOTAutograd
    relies on graph outputs having the strides it traced)."""
    shape, stride = tuple(val.shape), tuple(val.stride())
    if executor._dense_stride(shape, stride) == stride:
        return executor._to_layout(value, shape, stride)
    numel = 1
    for n in shape:
        numel *= n
    length = 0 if numel == 0 else 1 + sum((n - 1) * st for n, st in zip(shape, stride))
    return views.write(jnp.zeros((length,), value.dtype), length, value.dtype, shape, stride, 0, value)


def _cast(result, specs):
    if isinstance(result, (list, tuple)):
        return type(result)(r if s is None else jnp.asarray(r).astype(s.dtype)
                            for r, s in zip(result, list(specs) + [None] * (len(result) - len(specs))))
    spec = specs[0] if specs else None
    return result if spec is None else jnp.asarray(result).astype(spec.dtype)
