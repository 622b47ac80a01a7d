"""The `neuron` torch.compile backend: Dynamo -> AOTAutograd -> StableHLO -> XLA.

``torch.compile(model, backend="neuron")``: Dynamo captures a graph, AOTAutograd
decomposes it to core ATen ops, functionalizes it and traces the backward; each
resulting forward and backward graph becomes one `GraphExecutable` (one `jax.jit`,
built by interpreting the graph with the eager lowering table). Nodes with no lowering
are split out by PyTorch's capability-based partitioner and run eagerly at that node
(through the eager kernels and, failing those, the counted CPU fallback; strict mode
raises). Collectives (`_c10d_functional` ops, from DTensor or traced torch.distributed
calls) are split out the same way and run through the process group's backend; they are
communication, not a fallback, so they are allowed in strict mode and not warned about. Dynamic shapes are specialized per concrete shape, with a cache.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import warnings

import torch
import torch.fx
from torch._decomp import core_aten_decompositions, decomposition_table
from torch._dynamo import trace_rules
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from .. import config, metrics
from ..eager import refusal
from ..ops import elementwise
from ..ops.registry import LAYOUTS, LOWERINGS
from . import flex_attention
from .graph import GraphExecutable, lowerable
from .graph import refusal_of_dtypes as graph_refusal

log = logging.getLogger("torchneuron")

# Dynamo must never trace the backend's own Python: after a graph break, code such as
# `.item()` runs eagerly while Dynamo's frame hook is active, and the eager kernels of
# `neuron` (Python, calling into JAX) would otherwise be traced as user code.
for _package in ("torchneuron", "torch_neuronx", "jax", "jaxlib", "ml_dtypes"):
    trace_rules.add(_package)


flex_attention.allow_neuron_device()


class _Support(OperatorSupport):
    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        return node.op == "call_function" and lowerable(node)


class _Submodule(torch.nn.Module):
    """A fused partition: returns what the partition's graph module returned."""

    def __init__(self, gm: torch.fx.GraphModule, name: str):
        super().__init__()
        out = next(n for n in gm.graph.nodes if n.op == "output")
        self.single = not isinstance(out.args[0], (list, tuple))
        if self.single:
            out.args = ((out.args[0],),)
            gm.recompile()
        self.exe = GraphExecutable(gm, name)

    def forward(self, *args):
        out = self.exe(*args)
        return out[0] if self.single else out


def _unsupported(gm: torch.fx.GraphModule):
    return [n for n in gm.graph.nodes if n.op == "call_function" and not lowerable(n)]


#: Namespaces of the ops that communicate through a torch.distributed process group.
_COLLECTIVE_NAMESPACES = ("_c10d_functional", "_c10d_functional_autograd", "c10d")


def _is_collective(node: torch.fx.Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and node.target.namespace in _COLLECTIVE_NAMESPACES


def compile_graph(gm: torch.fx.GraphModule, example_inputs, name: str = "graph"):
    """A boxed callable running an AOTAutograd ATen graph on `neuron`; one that raises
    CPU's error where CPU's kernel of an op of the graph, or of an op traced through
    its decomposition, does not implement its dtypes (raised when the graph runs, as
    eager raises it: Dynamo would wrap an error raised while compiling)."""
    refused = refusal.take_traced() if name != "backward" else None
    refused = refused or graph_refusal(gm)
    if refused is not None:
        exc_type, message = refused

        def refuse(*args):
            raise exc_type(message)

        return make_boxed_func(refuse)
    elementwise.register_inductor_prims()
    unsupported = _unsupported(gm)
    if not unsupported:
        exe = GraphExecutable(gm, name)
        return make_boxed_func(lambda *args: exe(*args))
    names = sorted({str(n.target) for n in unsupported if not _is_collective(n)})
    if names and config.STRICT:
        raise NotImplementedError(
            f"torch.compile(backend='neuron'): no lowering for {names} and TORCHNEURON_STRICT=1 forbids "
            "running them outside the compiled graph")
    metrics.count("graph_partitions")
    if names:
        log.warning("torchneuron: compiled graph is split around ops with no lowering: %s", names)
    partitioner = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=True)
    fused = partitioner.fuse_partitions(partitioner.propose_partitions())
    for child, sub in list(fused.named_children()):
        setattr(fused, child, _Submodule(sub, f"{name}_{child}"))
    return make_boxed_func(fused)


def _noting_refusal(op, decomposition):
    """`decomposition` of `op`, noting CPU's refusal of the call's dtypes (the ops it
    decomposes into may take them: glu of bool) for `compile_graph`."""
    @functools.wraps(decomposition)
    def run(*args, **kwargs):
        refused = refusal.refusal_of_dtypes(op, refusal.schema_values(op, args, kwargs))
        if refused is not None:
            refusal.note_traced(refused)
        out = decomposition(*args, **kwargs)
        if op in LAYOUTS and out is not NotImplemented:
            from ..eager import meta_device

            out = meta_device.relaid(op, args, kwargs, out)
        return out

    return run


@functools.lru_cache(maxsize=None)
def _decompositions():
    """PyTorch's core-ATen decompositions, less the ops the lowering table lowers
    natively: DESIGN's resolution order (native lowering first) holds in compiled graphs
    as in eager, so a compiled op computes what the same eager op computes.
    (In-place overloads need no filtering: functionalization turns them into the
    functional ones before decompositions apply.) Functional ops with a composite kernel
    and no lowering (ldexp, dist) also take PyTorch's decomposition, which
    follows that kernel: eager runs the composite, and a graph would otherwise be split
    around them. Each notes CPU's refusal of dtypes its op's CPU kernel does not
    implement (`_noting_refusal`)."""
    table = {op: fn for op, fn in core_aten_decompositions().items()
             if op not in LOWERINGS or LOWERINGS[op].mutates}
    for op, fn in decomposition_table.items():
        if (isinstance(op, torch._ops.OpOverload) and op not in table and op not in LOWERINGS
                and not op._schema.is_mutable
                and torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeExplicitAutograd")):
            table[op] = fn
    return {op: _noting_refusal(op, fn) for op, fn in table.items()}


#: Interpolation ops PyTorch decomposes while tracing (Python kernels at their Autograd
#: and CompositeImplicitAutograd keys) into index arithmetic, where the lowering table
#: lowers them as CPU computes them (its weights, integer kernels, size checks).
_INTERPOLATIONS = ("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
                   "_upsample_nearest_exact2d", "_upsample_nearest_exact3d", "upsample_linear1d",
                   "upsample_bilinear2d", "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bilinear2d_aa",
                   "_upsample_bicubic2d_aa")
_TRACING_KEYS = (torch._C.DispatchKey.Autograd, torch._C.DispatchKey.CompositeImplicitAutograd)


@contextlib.contextmanager
def _interpolations_kept():
    """Traces with the Python kernels of `_INTERPOLATIONS` set aside: a `.vec` overload
    then runs ATen's own composite (the output size, then `.default`) and `.default`
    its autograd kernel, so the graph holds the ops eager runs, and their backward ops.
    (Dynamo compiles under one lock, so no other trace sees them missing.)"""
    saved = []
    for name in _INTERPOLATIONS:
        packet = getattr(torch.ops.aten, name)
        if packet.default not in LOWERINGS:
            continue
        for op in (packet.default, packet.vec):
            for key in _TRACING_KEYS:
                if key in op.py_kernels:
                    saved.append((op, key, op.py_kernels.pop(key)))
            op._dispatch_cache.clear()
    try:
        yield
    finally:
        for op, key, kernel in saved:
            op.py_kernels[key] = kernel
            op._dispatch_cache.clear()


def _traced(gm, inputs):
    """AOTAutograd's trace and compile of a Dynamo graph (`_aot`), interpolations kept."""
    with _interpolations_kept():
        return _aot()(gm, inputs)


def _aot():
    return aot_autograd(
        fw_compiler=functools.partial(compile_graph, name="forward"),
        bw_compiler=functools.partial(compile_graph, name="backward"),
        inference_compiler=functools.partial(compile_graph, name="inference"),
        decompositions=_decompositions(),
        keep_inference_input_mutations=True,
    )


def _is_symbolic(x) -> bool:
    if isinstance(x, torch.SymInt):
        return True
    return isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in x.shape)


_warned_dynamic = False


class _Specializing:
    """Compiles a Dynamo graph captured with symbolic shapes once per concrete shape.

    A float argument Dynamo made dynamic reaches the graph as a 0-dim tensor read with
    `.item()`, which fake tensors without a shape environment refuse
    (DataDependentOutputException): such a graph is traced again on fake copies of the
    call's tensors under one, where `.item()` gives a symbolic float. Where the graph
    needs that float's value (a norm layer's eps, which ATen takes as a C++ double:
    GuardOnDataDependentSymNode), the graph is traced with the values and compiled once
    per value as well."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.cache = {}
        self.by_value = False

    def _key(self, args):
        return tuple((tuple(a.shape), a.dtype, a.requires_grad) + ((a.item(),) if self.by_value and _is_read(a) else ())
                     if isinstance(a, torch.Tensor) else a for a in args)

    def __call__(self, *args):
        fn = self.cache.get(self._key(args))
        if fn is None:
            refusal.take_traced()
            fn = self._trace(args)
            self.cache[self._key(args)] = fn
        return fn(*args)

    def _trace(self, args):
        try:
            return _traced(self.gm, list(args))
        except Exception as exc:  # noqa: BLE001 - retried only for a data-dependent read
            if not _caused_by(exc, "DataDependentOutputException"):
                raise
        try:
            return _traced(self.gm, _fakes_with_shape_env(args))
        except Exception as exc:  # noqa: BLE001 - retried only for a guard on a read value
            if not _caused_by(exc, "GuardOnDataDependentSymNode"):
                raise
        self.by_value = True
        return _traced(self.gm, _fakes_with_values(args))


def _is_read(a) -> bool:
    """Whether `a` is how Dynamo passes a dynamic Python number: a 0-dim CPU tensor."""
    return isinstance(a, torch.Tensor) and a.dim() == 0 and a.device.type == "cpu"


def _caused_by(exc: BaseException, name: str) -> bool:
    """Whether `exc` (or an exception it was raised from) is fake tensors' exception
    `name`: DataDependentOutputException (`.item()` of a dynamic float argument without
    a shape environment) or GuardOnDataDependentSymNode (its symbolic value asked for)."""
    while exc is not None:
        if type(exc).__name__ == name:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _fakes_with_shape_env(args):
    """Fake copies of the call's tensors, of their concrete shapes, under a shape
    environment, where `.item()` gives a symbolic value."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv())
    return [mode.from_tensor(a, static_shapes=True) if isinstance(a, torch.Tensor) else a for a in args]


def _fakes_with_values(args):
    """Fake copies of the call's tensors whose `.item()` gives the call's value for the
    numbers Dynamo passes as tensors (`_is_read`)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    # A constant fake tensor computes on its value where an op reads it.
    return [mode.fake_tensor_converter.from_real_tensor(mode, a, make_constant=True) if _is_read(a)
            else mode.from_tensor(a, static_shapes=True) if isinstance(a, torch.Tensor) else a for a in args]


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The Dynamo backend registered as ``"neuron"``."""
    global _warned_dynamic
    if any(_is_symbolic(x) for x in example_inputs):
        if not _warned_dynamic:
            _warned_dynamic = True
            warnings.warn("torch.compile(backend='neuron'): dynamic shapes are specialized per concrete shape "
                          "(one executable per shape, cached)", stacklevel=2)
        return _Specializing(gm)
    refusal.take_traced()
    return _traced(gm, example_inputs)
