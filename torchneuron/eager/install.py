"""Registers the eager kernels on PrivateUse1: lowered ops, derived in-place and out=
variants, host kernels, and the fallback for everything else."""
from __future__ import annotations

import torch

from .. import _extension, config
from ..ops import fallback, registry
from ..runtime import dtypes
from . import cpu_routes, executor, host_kernels, math_bits, meta_device

_libs = []
#: OpOverload -> the kernel registered for it (used by tests and the coverage report).
KERNELS: dict = {}


def _is_composite_implicit(op: torch._ops.OpOverload) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


def _variants(op: torch._ops.OpOverload):
    """In-place and out= overloads computed by `op`'s lowering."""
    name = op._schema.name.split("::")[1]
    packets = [getattr(torch.ops.aten, name, None), getattr(torch.ops.aten, name + "_", None)]
    for packet in packets:
        if packet is None:
            continue
        for ov_name in packet.overloads():
            ov = getattr(packet, ov_name)
            if ov is op or ov in registry.LOWERINGS:
                continue
            if executor.functional_counterpart(ov) is op:
                yield ov


# Argument types the C++ kernel converts to Python values exactly as the dispatcher's
# Python kernels receive them (ScalarType is special-cased there, as here).
_CPP_ARGUMENT_KINDS = {torch.TensorType, torch.NumberType, torch.IntType, torch.FloatType, torch.BoolType,
                       torch.SymIntType, torch.ComplexType, torch.NoneType}


def _is_dtype(t) -> bool:
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return str(t) == "ScalarType"


def _runs_in_cpp(op: torch._ops.OpOverload, kernel) -> bool:
    """Whether `op` gets the C++ eager kernel (csrc/eager.cpp) in front of `kernel`:
    plain OpKernels of deterministic ops with Tensor returns and plain arguments. The
    others keep the Python registration (host kernels, conjugate/negative bit
    resolution, random ops drawing from a generator, unusual argument types)."""
    if type(kernel) is not executor.OpKernel or kernel.lowering.random or math_bits.sees_math_bits(op):
        return False
    schema = op._schema
    if any(str(r.type) != "Tensor" for r in schema.returns):
        return False
    for a in schema.arguments:
        t = a.type
        if isinstance(t, torch.OptionalType):
            t = t.getElementType()
        if isinstance(t, torch.ListType):
            t = t.getElementType()
            if isinstance(t, torch.OptionalType):
                t = t.getElementType()
        if type(t) not in _CPP_ARGUMENT_KINDS and not _is_dtype(t):
            return False
    return True


def install() -> None:
    """Registers every kernel. Idempotent."""
    if _libs:
        return
    shim = _extension.load()
    executor._tensor_meta = shim.tensor_meta
    executor._fast_signature = shim.fast_signature
    executor._new_output = shim.new_output
    host_kernels._tensor_meta = shim.tensor_meta
    meta_device.install()
    # Import the lowering modules so they fill the table.
    from .. import ops as _ops  # noqa: F401
    from ..kernels import grouped_mm  # noqa: F401  (the kernel library's ATen lowerings)

    shim.set_eager_callbacks(dtypes.TORCH_TO_JAX, executor.int64_array, executor.run_failed,
                             executor.RUN_LOCK)
    lib = torch.library.Library("aten", "IMPL")
    _libs.append(lib)

    def register(op, kernel):
        if op in KERNELS or _is_composite_implicit(op):
            return
        KERNELS[op] = kernel
        if config.EAGER_CPP and _runs_in_cpp(op, kernel):
            schema = op._schema
            name = schema.name.split("::")[1] + ("." + schema.overload_name if schema.overload_name else "")
            shim.register_eager(name, kernel, [_is_dtype(a.real_type) for a in schema.arguments])
            return
        impl = kernel
        if isinstance(kernel, executor.OpKernel) and math_bits.sees_math_bits(op):
            impl = math_bits.resolving(kernel, op)  # host kernels handle the bits themselves
        lib.impl(op, impl, "PrivateUse1")

    host_kernels._device_copy = executor.OpKernel(
        torch.ops.aten.copy_.default, registry.LOWERINGS[torch.ops.aten.copy.default], "inplace")
    for op, fn in host_kernels.KERNELS.items():
        register(op, fn)
    for op, low in list(registry.LOWERINGS.items()):
        if not low.eager:
            continue
        if low.writes or any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments):
            if low.mutates:
                register(op, executor.OpKernel(op, low, "mutating"))
            continue
        register(op, executor.OpKernel(op, low, "functional"))
        for variant in _variants(op):
            mode = "out" if any(a.kwarg_only and a.alias_info is not None and a.alias_info.is_write
                                for a in variant._schema.arguments) else "inplace"
            register(variant, executor.OpKernel(variant, low, mode))
    cpu_routes.install(lib)
    fb = torch.library.Library("_", "IMPL")
    _libs.append(fb)
    fb.fallback(fallback.run, "PrivateUse1")
