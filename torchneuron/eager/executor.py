"""Eager execution: one ATen call on `neuron` tensors -> one cached XLA executable.

An `OpKernel` is registered on PrivateUse1 for each ATen overload that has a lowering
(directly, or derived for in-place and `out=` overloads from the functional one). A
call builds a key from the op's static arguments and each tensor's geometry
(shape, strides, storage offset, dtype, which storage), looks up the executable, and
runs it on the flat storage buffers. The executable reads every view out of its
storage, runs the lowering, and writes results back into mutated storages (donated to
XLA) or returns new flat buffers for new tensors. Dispatch is asynchronous: nothing
waits for the device until a synchronization point.

On a cache miss, PyTorch's own meta kernel for the overload runs first: it raises
exactly the errors CPU raises for bad shapes and dtypes, and it gives the output
shapes, dtypes and strides that the executable then produces. Out= tensors whose dtype
is not the result's are judged by CPU's own kernel instead (`out_dtypes`).
"""
from __future__ import annotations

import hashlib
import re
import threading
import time
import warnings
from typing import Any, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false

from .. import _extension, metrics, profiler
from ..ops._common import check_scalar
from ..ops.registry import OUT_LAYOUTS, Context, Lowering, OutSpec, laid_out, tracing
from ..runtime import checks, dtypes, overlap, pjrt, storage, views
from . import executable_cache, meta_device, out_dtypes, out_overlap, refusal

# Argument kinds, from the schema.
TENSOR, TENSOR_LIST, DYNAMIC, DYNAMIC_LIST, GENERATOR, STATIC = range(6)

_tensor_meta = None  # the C++ shim's tensor_meta, bound at install time
_fast_signature = None  # the C++ shim's fast_signature, bound at install time
_new_output = None  # the C++ shim's new_output, bound at install time
_buffers = storage.buffers
_TO_JAX = dtypes.TORCH_TO_JAX
_profiling = profiler.enabled
_IDENTIFIER = re.compile(r"\W")
# Executable name -> (op, cache key) it was made for (see _executable_name).
_names: Dict[str, tuple] = {}
#: Every OpKernel: `torchneuron.metrics` sums their entries' run counts when asked.
kernels: List["OpKernel"] = []

warnings.filterwarnings("ignore", message="Some donated buffers were not usable")


def _kind(arg) -> int:
    t = arg.type
    s = str(t)
    if s in ("Tensor", "Tensor?", "Optional[Tensor]"):
        return TENSOR
    if s in ("Tensor[]", "Tensor?[]", "List[Tensor]", "List[Optional[Tensor]]"):
        return TENSOR_LIST
    if s in ("Scalar", "Scalar?", "float", "float?", "number", "complex"):
        return DYNAMIC
    if s in ("Scalar[]", "float[]", "List[number]", "List[float]"):
        return DYNAMIC_LIST
    if s in ("Generator?", "Generator", "Optional[Generator]"):
        return GENERATOR
    return STATIC


def _is_write(arg) -> bool:
    return arg.alias_info is not None and arg.alias_info.is_write


_TENSOR_OPTIONS = ("dtype", "layout", "device", "pin_memory")


def functional_counterpart(op: torch._ops.OpOverload) -> Optional[torch._ops.OpOverload]:
    """The functional overload whose lowering computes an in-place or out= overload:
    ``add_.Tensor -> add.Tensor``, ``add.out -> add.Tensor``; None if there is none."""
    schema = op._schema
    name = schema.name.split("::")[1]
    if name.endswith("_") and schema.arguments and _is_write(schema.arguments[0]):
        packet = getattr(torch.ops.aten, name[:-1], None)
        if packet is None:
            return None
        cand = getattr(packet, schema.overload_name or "default", None)
        return cand
    outs = [a for a in schema.arguments if a.kwarg_only and _is_write(a)]
    if not outs:
        return None
    inputs = [(a.name, str(a.type)) for a in schema.arguments if not (a.kwarg_only and _is_write(a))]
    names = {n for n, _ in inputs}
    packet = getattr(torch.ops.aten, name)
    for ov_name in packet.overloads():
        ov = getattr(packet, ov_name)
        if any(_is_write(a) for a in ov._schema.arguments):
            continue
        # A factory's out= overload lacks its TensorOptions: the out tensor decides them.
        own = [(a.name, str(a.type)) for a in ov._schema.arguments
               if not (a.kwarg_only and a.name in _TENSOR_OPTIONS and a.name not in names)]
        if own == inputs:
            return ov
    return None


# Held from reading an executable's input buffers until its written buffers are stored:
# executables donate the buffers they overwrite, so another thread's op on the same
# storage must not read a buffer in between (it would be deleted under it). Ops thus
# run one at a time, in order, as on one CUDA stream.
RUN_LOCK = threading.RLock()


class _Entry:
    """A compiled executable and what the executor needs to use its outputs."""

    __slots__ = ("fn", "reads", "writes", "fresh", "checks", "runs", "module", "aliased", "cpp", "scalar_checks")

    def __init__(self, fn, reads, writes, fresh, checks_, module, aliased=None, scalar_checks=None):
        self.fn = fn
        self.module = module  # the executable's HLO module name
        # Indices (into the call's tensor list) of one tensor per storage whose buffer
        # the executable reads, in argument order; storages only overwritten whole are
        # not passed.
        self.reads = reads
        self.writes = writes  # likewise, per storage whose buffer the executable replaces
        # Per non-aliased output: (shape, stride, torch dtype) of a new tensor, None for
        # an undefined tensor (a masked-out gradient), or an int for a SymInt output.
        self.fresh = fresh
        self.checks = checks_  # [(exc_type, message)] per device-side check flag
        # A written storage is also read through another argument: whether they overlap
        # depends on the storage offsets, which are not in the key, so every call checks
        # (an `_Aliasing`), else None.
        self.aliased = aliased
        # Whether the C++ hot path (csrc/eager.cpp) may run this entry by itself: no
        # device-side checks and no per-call aliasing checks, which live in Python.
        self.cpp = not checks_ and aliased is None
        # CPU's overflow checks of Python-number Scalars (`check_scalar`), made on the
        # host before each run: a tuple of (dynamic value position, lo, hi, message,
        # dtype), or None. csrc/eager.cpp reads the first four.
        self.scalar_checks = tuple(scalar_checks) if scalar_checks else None
        # Calls run so far: the hot path's only metrics cost is this increment.
        self.runs = 0


class OpKernel:
    """The PrivateUse1 kernel of one ATen overload. Callable as the dispatcher calls
    Python kernels: ``kernel(*args, **kwargs)`` in schema order."""

    def __init__(self, op: torch._ops.OpOverload, lowering: Lowering, mode: str):
        self.op = op
        self.lowering = lowering
        self.mode = mode  # "functional" | "inplace" | "out" | "mutating"
        args = op._schema.arguments
        self.names = [a.name for a in args]
        self.kinds = [_kind(a) for a in args]
        self.defaults = [a.default_value if a.has_default_value() else None for a in args]
        self.writes = [i for i, a in enumerate(args) if _is_write(a) or a.name in lowering.writes]
        self.out_idx = [i for i, a in enumerate(args) if a.kwarg_only and _is_write(a)] if mode == "out" else []
        self.in_idx = [i for i in range(len(args)) if i not in self.out_idx]
        for i, a in enumerate(args):
            if a.name in lowering.static and self.kinds[i] in (DYNAMIC, DYNAMIC_LIST):
                self.kinds[i] = STATIC
        self.return_src = []  # per schema return: index of the argument it aliases, or None
        for r in op._schema.returns:
            src = None
            if r.alias_info is not None:
                for i, a in enumerate(args):
                    if a.alias_info is not None and set(a.alias_info.before_set) & set(r.alias_info.before_set):
                        src = i
            self.return_src.append(src)
        self.single_list = len(op._schema.returns) == 1 and str(op._schema.returns[0].type) != "Tensor"
        # Elementwise writes refuse self-overlapping or partly input-overlapping outputs
        # on CPU (TensorIterator); so do they here.
        self.checks_overlap = mode in ("inplace", "out") and (
            torch.Tag.pointwise in op.tags or op is torch.ops.aten.copy_.default)
        # Other kernels check their written tensors each their own way (cat, take,
        # index_select, bernoulli, ...): CPU's kernel is asked on stand-ins sharing
        # memory as the call's tensors do (`out_overlap`), when they do.
        # (`_foreach_` lists sharing a storage are updated in order instead, as on CPU.)
        self.probes_overlap = (mode in ("inplace", "out") and not self.checks_overlap
                               and not op.name().startswith("aten::_foreach_"))
        # Pointwise in-place and out= overloads compute in the dtype the functional
        # overload gives (TensorIterator's common dtype) and cast the result into the
        # written tensor, as ATen does: torch.add(int8, int8, out=int32) adds in int8,
        # x_f32.mul_(y_f64) multiplies in float64.
        functional = functional_counterpart(op) if mode in ("inplace", "out") else None
        self.counterpart = functional
        # The lowering takes the functional overload's arguments in its order, which an
        # in-place overload may change: polygamma_(self, n) computes polygamma(n, self).
        own = [self.names[i] for i in self.in_idx]
        order = [a.name for a in functional._schema.arguments] if functional is not None else own
        self.permute = [own.index(a) for a in order] if order != own and sorted(order) == sorted(own) else None
        self.functional = functional if functional is not None and (
            torch.Tag.pointwise in op.tags or torch.Tag.pointwise in functional.tags) else None
        self.cache: Dict[tuple, _Entry] = {}
        # TensorIterator refuses a result the written tensor cannot hold (an integer
        # tensor's mul_(2.5)); not every meta kernel checks it, so the functional
        # overload's meta result type is compared with the written tensors' dtypes.
        foreach_inplace = mode == "inplace" and op.name().startswith("aten::_foreach_")
        self.cast_check = functional if foreach_inplace else self.functional
        self.kinds_t = tuple(self.kinds)
        self.one_fresh = self.return_src == [None] and not self.single_list
        self.defaults_t = tuple(self.defaults)
        self.event = "neuron::op::" + op.name()
        kernels.append(self)

    # ------------------------------------------------------------------ call path
    def __call__(self, *args, **kwargs):
        values = list(args)
        n = len(self.names)
        if len(values) < n:
            for i in range(len(values), n):
                values.append(kwargs.get(self.names[i], self.defaults[i]))
        return self._dispatch(values, _fast_signature(values, self.kinds_t, self.defaults_t, _buffers, _TO_JAX))

    def _dispatch(self, values, fast):
        """Runs a call given all its values in schema order and their `fast_signature`
        (None: signed here). The C++ kernel (csrc/eager.cpp) resumes here for every call
        it does not run itself."""
        if fast is None:
            key, tensors, metas, dyn, device = self._signature(values)
        else:
            key, tensors, metas, dyn, device = fast
            if dyn and type(dyn[-1]) is list:
                dyn[-1] = int64_array(dyn[-1])
            if device < 0:
                device = _extension.load().current_device()
        entry = self.cache.get(key)
        if entry is None:
            return self._miss(key, values, tensors, metas, dyn, device)
        if entry.aliased is not None and entry.aliased.sequential(values, metas):
            return self._run_sequential(values)
        if _profiling():
            return self._run_profiled(entry, values, tensors, metas, dyn, device)
        return self._run(entry, values, metas, dyn, device)

    def _run_profiled(self, entry, values, tensors, metas, dyn, device):
        with profiler.record(self.event, tensors):
            profiler.mark_execution(entry.module)
            return self._run(entry, values, metas, dyn, device)

    def _miss(self, key, values, tensors, metas, dyn, device):
        """Compiles, caches and runs the executable of a new call signature. XLA
        compiles on the first run, so the compile event and time include that run."""
        start = time.perf_counter()
        if self.probes_overlap:
            # Before anything else, out= resizes included: CPU checks first.
            out_overlap.check(self.op, values, self.writes)
        with profiler.record("neuron::compile::" + self.op.name(), tensors):
            refusal.check_dtypes(self.op, values)  # its CPU calls are part of the compile
            entry = self._compile_or_cpus_error(key, values, tensors, metas, dyn, device)
            if entry is None:  # out= tensors were resized: their geometry changed
                key, tensors, metas, dyn, device = self._signature(values)
                entry = self.cache.get(key) or self._compile_or_cpus_error(key, values, tensors, metas, dyn, device)
                if entry is None:
                    # The resized out= tensor is also an input, so the result's shape
                    # moved again. CPU's kernel reads what it wrote (sum(a, 0, out=a)
                    # gives zeros; amax raises IndexError): refused, not guessed.
                    raise RuntimeError(f"{self.op.name()}: the out= tensor is also an input, and resizing it changes "
                                       "the result's shape; pass a separate out= tensor")
            current = self.cache.get(key)
            if current is None:
                executable_cache.admit(self.cache, key, entry)
            else:  # another thread compiled this signature meanwhile: one entry counts the runs
                entry = current
            if entry.aliased is not None and entry.aliased.sequential(values, metas):
                return self._run_sequential(values)
            result = self._run_profiled(entry, values, tensors, metas, dyn, device)
        metrics.count("eager_executables_compiled")
        metrics.add_time("eager_compile_seconds", time.perf_counter() - start)
        return result

    def _compile_or_cpus_error(self, key, values, tensors, metas, dyn, device):
        """`_compile`; where the lowering refuses the call, the error CPU raises for it
        (eager/refusal.py), or the lowering's own where CPU accepts the call."""
        try:
            return self._compile(key, values, tensors, metas, dyn, device)
        except Exception:  # noqa: BLE001 - the lowering refused the call: CPU words the error
            refusal.raise_cpus_error(self.op, values)
            raise

    def _signature(self, values):
        """(cache key, [tensors], [their shim metadata], [dynamic values], device index).

        The hottest code of the backend: it runs for every eager op."""
        key = []
        tensors = []
        metas = []
        dyn = []
        offsets = []
        device = None
        slots: Dict[int, int] = {}
        buffers = _buffers
        for kind, v, default in zip(self.kinds, values, self.defaults):
            if kind == TENSOR or kind == TENSOR_LIST:
                if v is None:
                    key.append(None)
                    continue
                if kind == TENSOR:
                    if not isinstance(v, torch.Tensor):  # a wrapped Python number
                        key.append(("s", type(v)))
                        dyn.append(v)
                        continue
                    group = (v,)
                else:
                    group = v
                sub = []
                for t in group:
                    if t is None:
                        sub.append(None)
                        continue
                    meta = _tensor_meta(t)
                    if meta is None:
                        sub.append(self._host_scalar(t, device, dyn))
                        continue
                    handle = meta[0]
                    if device is None:
                        device = meta[5]
                    elif meta[5] != device:
                        raise RuntimeError(
                            "Expected all tensors to be on the same device, but found at least two devices, "
                            f"neuron:{device} and neuron:{meta[5]}! (when checking argument for {self.op})")
                    slot = slots.get(handle)
                    if slot is None:
                        slot = slots[handle] = len(slots)
                    buf = buffers.get(handle)
                    # A nonzero storage offset is an argument of the executable, not
                    # part of its key: moving a view (x[i] in a loop) reuses it.
                    offset = meta[3]
                    if offset:
                        offsets.append(offset)
                    sub.append((slot, meta[1], meta[2], offset == 0) + meta[4:]
                               + (dtypes.to_jax(meta[4]) if buf is None else buf.dtype,))
                    tensors.append(t)
                    metas.append(meta)
                key.append(sub[0] if kind == TENSOR else tuple(sub))
            elif kind == DYNAMIC:
                if v is None:
                    key.append(None)
                elif _is_default(v, default):
                    key.append(("v", v))
                else:
                    if isinstance(v, torch.Tensor):
                        v = v.item()
                    key.append(("s", type(v)))
                    dyn.append(v)
            elif kind == DYNAMIC_LIST:
                key.append(tuple(("s", type(x)) for x in v))
                dyn.extend(v)
            elif kind == GENERATOR:
                key.append("g")
            else:
                key.append(_freeze(v))
        if device is None:
            if not tensors and any(k is not None and k[0] == "c" for k in key if isinstance(k, tuple) and k):
                raise RuntimeError(f"{self.op}: expected a neuron tensor argument")
            device = _extension.load().current_device()
        if offsets:
            dyn.append(np.array(offsets, dtype=np.int64))
        return tuple(key), tensors, metas, dyn, device

    def _host_scalar(self, t, device, dyn):
        """Key entry of a non-neuron tensor argument: a 0-dim CPU tensor is a scalar (as
        on CUDA); anything else is a device mismatch."""
        if t.dim() == 0 and t.device.type == "cpu":
            dyn.append(np.asarray(dtypes.numpy_view(t.detach())))
            return ("c", t.dtype)
        other = f"neuron:{device}" if device is not None else "neuron:0"
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"{other} and {t.device}! (when checking argument for {self.op})")

    def _run(self, entry: _Entry, values, metas, dyn, device):
        buffers = _buffers
        with RUN_LOCK:
            inputs = [buffers.get(metas[j][0]) for j in entry.reads]
            if None in inputs:  # storages never written yet read as zeros
                inputs = [storage.buffer(metas[j][0], metas[j][6], dtypes.to_jax(metas[j][4]), device)
                          for j in entry.reads]
            if dyn:
                if entry.scalar_checks is not None:
                    for check in entry.scalar_checks:
                        check_scalar(dyn[check[0]], check[4], check[5])
                inputs.extend(dyn)
            if self.lowering.random:
                inputs.extend(_rng_state(values, self.kinds, device))
            entry.runs += 1
            try:
                outs = entry.fn(*inputs)
            except jax.errors.JaxRuntimeError as exc:
                run_failed(exc, device)
            k = 0
            for j in entry.writes:
                buffers[metas[j][0]] = outs[k]
                k += 1
        results = []
        if entry.fresh:
            for spec in entry.fresh:
                if not isinstance(spec, tuple):
                    results.append(spec)
                    continue
                results.append(_new_output(spec[0], spec[1], spec[2], device, outs[k]))
                k += 1
        for exc_type, message in entry.checks:
            checks.add(outs[k], exc_type, message)
            k += 1
        return self._returns(values, results)

    def _returns(self, values, results):
        if self.one_fresh:
            return results[0]
        if not self.return_src:
            return None
        if self.single_list and self.return_src[0] is None:
            return results
        it = iter(results)
        out = [next(it) if src is None else values[src] for src in self.return_src]
        return out[0] if len(out) == 1 else tuple(out)

    def _check_elementwise_outs(self, values) -> None:
        """TensorIterator's checks of out= tensors, made before anything is resized (and
        before the meta kernel, which warns of a resize): a written tensor that
        overlaps itself or part of an input raises (`compute_mem_overlaps`: outer(a, b,
        out=a) leaves `a` alone); one that is itself an input is never resized
        (`mark_resize_outputs`: torch.mul(a, b, out=a) must not broadcast a)."""
        outs = [t for t in _flatten([values[i] for i in self.out_idx]) if isinstance(t, torch.Tensor)]
        ins = [t for t in _flatten([values[j] for j in self.in_idx]) if isinstance(t, torch.Tensor)]
        if self.checks_overlap:  # (tensors on other devices: the meta kernel raises for those)
            metas = [[_tensor_meta(t) for t in ts if t.device.type not in ("cpu", "meta")] for ts in (outs, ins)]
            overlap.check(*metas)
        aliased = [o for o in outs if any(t is o for t in ins)]
        if not aliased:
            return
        try:
            shape = list(torch.broadcast_shapes(*(t.shape for t in ins)))
        except RuntimeError:
            return  # the meta kernel raises CPU's error for the inputs
        for o in aliased:
            if list(o.shape) != shape:
                raise RuntimeError(f"output with shape {list(o.shape)} doesn't match the broadcast shape {shape}")

    # ------------------------------------------------------------------ compile path
    def _compile(self, key, values, tensors, metas, dyn, device) -> Optional[_Entry]:
        """Plans and traces the executable for this call's signature; None when out=
        tensors had to be resized first (the caller then signs the call again)."""
        if self.mode == "out" and (self.checks_overlap or self.functional is not None):
            self._check_elementwise_outs(values)
        metas_out, compute_metas = self._meta(values)
        if self.mode == "out":
            resized = False
            for i, m in zip(self.out_idx, metas_out):
                if m is not None and tuple(values[i].shape) != tuple(m[0]):
                    values[i].resize_(m[0])
                    # A resized out tensor takes the strides the meta kernel chose, as
                    # ATen's structured kernels do (linalg results are column-major),
                    # or the functional result's layout (`_out_layouts`).
                    if tuple(values[i].stride()) != tuple(m[1]):
                        values[i].as_strided_(m[0], m[1])
                    resized = True
                elif m is not None and self.op in OUT_LAYOUTS and tuple(values[i].stride()) != tuple(m[1]):
                    # CPU's kernel restrides the out tensor whatever its strides
                    # (`registry.out_layout`); dense strides fit where it lies.
                    values[i].as_strided_(m[0], m[1])
                    resized = True
            if resized:
                return None
        # Plan how each argument is rebuilt inside the trace.
        slots: Dict[int, int] = {}
        first: Dict[int, int] = {}  # slot -> index of the first tensor using it
        geometry = []
        dynamic_offsets = 0  # nonzero offsets arrive as one int64 array, the last dynamic value
        for j, meta in enumerate(metas):
            handle, shape, stride, offset, dtype, index, nbytes = meta
            slot = slots.setdefault(handle, len(slots))
            first.setdefault(slot, j)
            if offset:
                offset = ("dynamic", dynamic_offsets)
                dynamic_offsets += 1
            geometry.append((slot, shape, stride, offset, dtypes.to_jax(dtype)))
        n_slots = len(slots)
        lengths = {}
        buf_dtypes = {}
        for meta in metas:
            slot = slots[meta[0]]
            buf = storage.buffers.get(meta[0])
            bdt = buf.dtype if buf is not None else dtypes.to_jax(meta[4])
            buf_dtypes[slot] = bdt
            lengths[slot] = meta[6] // np.dtype(bdt).itemsize

        write_targets = self._write_targets(values, tensors, slots, geometry)
        write_slots = sorted({w[1] for w in write_targets})
        # An out= tensor may also be an input (torch.mul(x, 2, out=x)): only its
        # occurrence as the out= argument, after the inputs in schema order, is unread.
        out_pos = set()
        for i in self.out_idx:
            for o in (values[i] if isinstance(values[i], (list, tuple)) else [values[i]]):
                if o is not None:
                    out_pos.add(max(j for j, t in enumerate(tensors) if t is o and j not in out_pos))
        read_pos = [j for j in range(len(tensors)) if j not in out_pos]
        read_slots = {geometry[j][0] for j in read_pos}
        if self.checks_overlap:
            overlap.check([_tensor_meta(_at(values, w[0])) for w in write_targets], [metas[j] for j in read_pos])
        aliased = self._aliasing(values, metas, write_targets, read_pos, geometry)
        skip = set()
        for path, slot, shape, stride, offset, dt, src in write_targets:
            covers = (isinstance(offset, int) and offset == 0 and views.is_contiguous(shape, stride)
                      and int(np.prod(shape)) == lengths[slot] and buf_dtypes[slot] == dt)
            if slot not in read_slots and covers:
                skip.add(slot)
        fresh_specs = [] if self.mode in ("inplace", "out") else metas_out
        lowering = self.lowering
        kinds = self.kinds
        defaults = self.defaults
        in_idx = self.in_idx
        mode = self.mode
        names = self.names
        permute = self.permute
        n_dyn = len(dyn)
        # The trace needs only to know where tensors were: holding the tensors
        # themselves would keep their storages alive as long as the executable.
        static_values = [_placeholder(v) for v in values]
        check_info = []
        # Python-number dynamic values, whose overflow checks run on the host.
        numbers = [k for k, x in enumerate(dyn) if type(x) in (int, float)]
        scalar_info = []

        n_in = n_slots - len(skip)

        def traced(*inputs):
            it_in = iter(inputs[:n_in])
            bufs = [None if s in skip else next(it_in) for s in range(n_slots)]
            dvals = list(inputs[n_in:n_in + n_dyn])
            rng = inputs[n_in + n_dyn:]
            offsets = dvals.pop() if dynamic_offsets else None

            def at(offset):
                return offsets[offset[1]] if isinstance(offset, tuple) else offset

            it_geo = iter(geometry)
            it_dyn = iter(dvals)
            contiguous = []

            def tensor(v):
                if v is _HOST_TENSOR:
                    return jnp.asarray(next(it_dyn))
                if v is not _DEVICE_TENSOR:
                    return next(it_dyn)
                slot, shape, stride, offset, dt = next(it_geo)
                contiguous.append(views.is_contiguous(shape, stride))
                return views.read(bufs[slot], dt, shape, stride, at(offset))

            args = []
            for i in in_idx:
                kind, v = kinds[i], static_values[i]
                if kind == TENSOR:
                    args.append(None if v is None else tensor(v))
                elif kind == TENSOR_LIST:
                    args.append([None if x is None else tensor(x) for x in v])
                elif kind == DYNAMIC:
                    args.append(v if v is None or _is_default(v, defaults[i]) else next(it_dyn))
                elif kind == DYNAMIC_LIST:
                    args.append([next(it_dyn) for _ in v])
                elif kind == GENERATOR:
                    args.append(None)
                else:
                    args.append(v)
            if permute is not None:
                args = [args[k] for k in permute]
            ctx = Context(outs=[OutSpec(m[0], dtypes.to_jax(m[2])) if isinstance(m, tuple) else None
                                for m in compute_metas],
                          rng=tuple(rng) if rng else None, contiguous=tuple(contiguous),
                          scalar_args={id(dvals[k]): k for k in numbers})
            with tracing(ctx):
                result = lowering.fn(*args)
            scalar_info[:] = ctx.host_checks
            updates = {}
            if mode == "mutating":
                result, updates = result
            results = _as_list(result)
            new_bufs = dict()
            for spec in write_targets:
                path, slot, shape, stride, offset, dt, src = spec
                if src[0] == "out":
                    value = results[src[1]]
                    if isinstance(value, (list, tuple)):
                        value = value[src[2]]
                else:
                    value = updates[src[1]]
                    if src[2] is not None:
                        value = value[src[2]]
                base = new_bufs.get(slot, bufs[slot])
                new_bufs[slot] = views.write(base, lengths[slot], dt, shape, stride, at(offset), value)
            outs = [new_bufs[s] for s in write_slots]
            flat_results = _flatten(results) if mode not in ("inplace", "out") else []
            for r, m in zip(flat_results, metas_out):
                if isinstance(m, tuple):  # results at undefined or SymInt outputs are ignored
                    outs.append(_to_storage(jnp.asarray(r).astype(dtypes.to_jax(m[2])), m[0], m[1]))
            for ok, exc_type, message in ctx.checks:
                check_info.append((exc_type, message))
                outs.append(ok)
            return tuple(outs)

        live = [s for s in range(n_slots) if s not in skip]
        donate = tuple(live.index(s) for s in write_slots if s not in skip)
        reads = [first[s] for s in live]
        example = [storage.buffer(metas[j][0], metas[j][6], dtypes.to_jax(metas[j][4]), device) for j in reads]
        example.extend(dyn)
        if self.lowering.random:
            example.extend(_rng_state(values, self.kinds, device, advance=False))
        traced.__name__ = _executable_name(self.op, key)
        fn = jax.jit(traced, donate_argnums=donate)
        fn.lower(*example)  # traces now: fills check_info before the first run
        return _Entry(fn, reads, [first[s] for s in write_slots],
                      [(m[0], _fresh_stride(m[0], m[1]), m[2]) if isinstance(m, tuple) else m
                       for m in fresh_specs], check_info, "jit_" + traced.__name__, aliased, scalar_info)

    def _aliasing(self, values, metas, write_targets, read_pos, geometry) -> Optional["_Aliasing"]:
        """The per-call checks a call whose written storages are also read needs (None
        when none are): partial overlap of a written and a read tensor (CPU's error), and,
        for in-place `_foreach_` ops, overlap across list elements, which CPU resolves by
        updating the elements one after another."""
        positions = _positions(values, self.kinds)
        where = {}  # (argument, list index) -> tensor position
        for p, at in enumerate(positions):
            where.setdefault(at, p)
        written = [where[(w[0][0], w[0][1] if len(w[0]) > 1 else None)] for w in write_targets]
        slot_of = [g[0] for g in geometry]
        write_slots = {slot_of[p] for p in written}
        overlap_reads = [j for j in read_pos if slot_of[j] in write_slots] if self.checks_overlap else []
        pairs = []
        if self.op.name().startswith("aten::_foreach_") and self.mode == "inplace" and len(written) > 1:
            pairs = [(w, p) for w in written for p in range(len(positions))
                     if p != w and slot_of[p] == slot_of[w] and positions[p][1] != positions[w][1]]
        probe = self if self.probes_overlap and out_overlap.needs_probe(values, self.writes) else None
        if not overlap_reads and not pairs and probe is None:
            return None
        return _Aliasing([w[0] for w in write_targets] if overlap_reads else [], overlap_reads, pairs, probe)

    def _run_sequential(self, values):
        """Runs an in-place `_foreach_` op one list element at a time (each a call of the
        same op on one-element lists), as CPU's per-tensor loop does when the elements
        share memory: a later element sees the earlier ones' updates."""
        args = self.op._schema.arguments
        n = len(values[0])
        for k in range(n):
            one = []
            for a, v in zip(args, values):
                if isinstance(a.type, torch.ListType) and isinstance(v, (list, tuple)) and len(v) == n:
                    v = [v[k]]
                elif a.name == "scalars" and isinstance(v, torch.Tensor):  # one scalar per element
                    v = v[k:k + 1]
                one.append(v)
            self.op(*[v for v, a in zip(one, args) if not a.kwarg_only],
                    **{a.name: v for v, a in zip(one, args) if a.kwarg_only})
        return self._returns(values, [])

    def _write_targets(self, values, tensors, slots, geometry):
        """[(path, slot, shape, stride, offset, jax dtype, source)] for every tensor the
        op writes (offset as planned in `geometry`: 0 or a dynamic reference); source is
        ("out", result index, list index) or ("upd", name, index)."""
        targets = []

        def add(t, path, src):
            meta = _tensor_meta(t)
            if meta is None:  # a CPU scalar is an input only, as on CUDA
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but found at least two devices, "
                    f"neuron:{_extension.load().current_device()} and {t.device}! "
                    f"(when checking argument for {self.op})")
            offset = geometry[next(j for j, x in enumerate(tensors) if x is t)][3]
            targets.append((path, slots[meta[0]], meta[1], meta[2], offset, dtypes.to_jax(meta[4]), src))

        if self.mode == "inplace":
            v = values[0]
            if isinstance(v, torch.Tensor):
                add(v, (0,), ("out", 0, None))
            else:
                for j, t in enumerate(v):
                    add(t, (0, j), ("out", j, None))
        elif self.mode == "out":
            for r, i in enumerate(self.out_idx):
                add(values[i], (i,), ("out", r, None))
        elif self.mode == "mutating":
            for i in self.writes:
                v = values[i]
                if v is None:
                    continue
                if isinstance(v, torch.Tensor):
                    add(v, (i,), ("upd", self.names[i], None))
                else:
                    for j, t in enumerate(v):
                        add(t, (i, j), ("upd", self.names[i], j))
        return targets

    def _meta(self, values):
        """Runs PyTorch's meta kernel: raises CPU's errors. Returns, per tensor output
        (flattened over Tensor[] outputs), (shape, stride, dtype) of the tensor written
        or made, and per output what the lowering computes before the cast into it."""
        if self.op in refusal.BEYOND_CPU:  # CPU's meta branch refuses what these compute
            return self._run_meta(values)
        with meta_device.eager_meta():
            return self._run_meta(values)

    def _run_meta(self, values):
        margs = [_to_meta(v) for v in values]
        schema_args = self.op._schema.arguments
        pos = [m for m, a in zip(margs, schema_args) if not a.kwarg_only]
        kw = {a.name: m for m, a in zip(margs, schema_args) if a.kwarg_only}
        probed = self._probe_out_dtypes(values) if self.mode == "out" else None
        try:
            out = self.op(*pos, **kw)
        except NotImplementedError as exc:
            metas = self._meta_from_lowering(values, exc, probed)
            if probed == out_dtypes.ACCEPT:
                return metas, self._accepted_compute(values, metas)
            return metas, self._functional_meta(values, self.counterpart)
        except Exception:  # noqa: BLE001 - any refusal of the meta kernel's
            if probed != out_dtypes.ACCEPT:
                raise
            # CPU's kernel takes these out tensors and the meta kernel (a stricter
            # Python reference: abs(complex, out=complex)) does not: the out tensors
            # take the functional result's geometry.
            outs = _flatten([values[i] for i in self.out_idx])
            metas = [(m[0], m[1], o.dtype) for m, o in zip(self._functional_meta(values, self.counterpart), outs)]
            return metas, self._accepted_compute(values, metas)
        if self.mode == "inplace":
            outs = [margs[0]] if isinstance(margs[0], torch.Tensor) else list(margs[0])
        elif self.mode == "out":
            outs = self._out_layouts(values, [margs[i] for i in self.out_idx], pos, kw)
        else:
            rets = _as_list(out) if len(self.return_src) != 1 else [out]
            rets = laid_out(self.op, rets, pos, kw)
            outs = _flatten([r for r, src in zip(rets, self.return_src) if src is None])
        metas = [(tuple(o.shape), tuple(o.stride()), o.dtype) if isinstance(o, torch.Tensor)
                 else None if o is None else int(o) for o in outs]
        if probed == out_dtypes.ACCEPT:
            return metas, self._accepted_compute(values, metas)
        if self.cast_check is not None:
            _check_cast(self._functional_outputs(values, self.cast_check), outs)
        return metas, self._functional_meta(values) if self.functional is not None else metas

    def _accepted_compute(self, values, metas):
        """What the lowering computes for an out= call whose out tensors of other dtypes
        CPU's kernel accepts (`metas`: theirs). A kernel taking a result dtype (sum's
        dtype, _scaled_mm's out_dtype, a factory's) takes it from the out tensor and
        computes in it; every other one computes its functional result and casts it
        (TensorIterator: addr(bool, out=float) is a logical and/or, then a cast)."""
        if any("ScalarType" in str(a.real_type) for a in self.counterpart._schema.arguments):
            return metas
        return self._functional_meta(values, self.counterpart)

    def _probe_out_dtypes(self, values) -> Optional[str]:
        """For an out= call whose out tensors' dtypes are not all those of the functional
        overload's results, whether CPU's kernel accepts them (`out_dtypes.check`,
        which raises CPU's error when it does not); None when the dtypes match or there
        is no functional overload to compare with."""
        if self.counterpart is None:
            return None
        try:
            results = self._functional_outputs(values, self.counterpart)
        except Exception:  # noqa: BLE001 - the out= overload's meta kernel raises CPU's error
            return None
        return out_dtypes.check(self.op, values, results)

    def _functional_arguments(self, values, functional):
        """(positional, keyword) meta arguments of `functional`, the functional counterpart
        of this in-place or out= overload, from this call's inputs (passed by name:
        polygamma_(self, n) is polygamma(n, self))."""
        by_name = dict(zip(self.names, values))
        pos, kw = [], {}
        for a in functional._schema.arguments:
            v = _to_meta(by_name.get(a.name, a.default_value if a.has_default_value() else None))
            if a.kwarg_only:
                kw[a.name] = v
            else:
                pos.append(v)
        return pos, kw

    def _functional_outputs(self, values, functional) -> List[torch.Tensor]:
        """The meta outputs of `functional` (see `_functional_arguments`) on this call's
        inputs."""
        pos, kw = self._functional_arguments(values, functional)
        return _flatten(_as_list(functional(*pos, **kw)))

    def _out_layouts(self, values, outs, pos, kw) -> list:
        """The meta out tensors `outs` (as the out= overload's meta kernel left them)
        with the strides CPU's kernel gives them. An out tensor the kernel resizes takes
        the layout of the functional overload's result (`registry.laid_out`): ATen's
        structured kernels restride a resized out tensor to what their meta function
        chose for the functional result (`resize_out`: TensorIterator's strides, or its
        memory format), and hand-written ones resize it as their functional kernel
        allocates; PyTorch's Python out wrappers make it contiguous instead. An out
        tensor of the right shape keeps its strides, except for the kernels that restride
        it themselves (`registry.OUT_LAYOUTS`: `out.resize_(sizes, memory_format)`)."""
        resized = [isinstance(o, torch.Tensor) and isinstance(values[i], torch.Tensor)
                   and tuple(values[i].shape) != tuple(o.shape) for i, o in zip(self.out_idx, outs)]
        rule = OUT_LAYOUTS.get(self.op)
        if not any(resized) and rule is None:
            return outs
        outs = list(outs)
        if any(resized) and self.counterpart is not None:
            try:
                fpos, fkw = self._functional_arguments(values, self.counterpart)
                rets = self.counterpart(*fpos, **fkw)
                rets = [rets] if len(self.counterpart._schema.returns) == 1 else _as_list(rets)
                results = _flatten(laid_out(self.counterpart, rets, fpos, fkw))
            except Exception:  # noqa: BLE001 - the out= overload's meta kernel judged the call
                results = []
            for k, (o, r) in enumerate(zip(outs, results)):
                if (resized[k] and isinstance(r, torch.Tensor) and r.shape == o.shape and r.stride() != o.stride()
                        and is_non_overlapping_and_dense_or_false(r)):
                    outs[k] = torch.empty_strided(o.shape, r.stride(), dtype=o.dtype, device=o.device)
        if rule is not None:
            formats = rule(*pos, **kw)
            if not isinstance(formats, (list, tuple)):
                formats = [formats] * len(outs)
            for k, (o, fmt) in enumerate(zip(outs, formats)):
                if fmt is not None and isinstance(o, torch.Tensor):
                    outs[k] = torch.empty(o.shape, dtype=o.dtype, device=o.device, memory_format=fmt)
        return outs

    def _functional_meta(self, values, functional=None) -> List[Tuple[tuple, tuple, torch.dtype]]:
        """(shape, stride, dtype) per output of the functional overload (`self.functional`
        unless given) on this call's inputs: what a pointwise in-place or out= overload
        computes before casting into the tensors it writes."""
        outs = self._functional_outputs(values, functional or self.functional)
        return [(tuple(o.shape), tuple(o.stride()), o.dtype) for o in outs]

    def _meta_from_lowering(self, values, exc: NotImplementedError, probed: Optional[str]):
        """An out= overload with no meta kernel (geqrf.a): the functional overload's meta
        gives the results, which the out tensors take if CPU's kernel accepts them
        (`probed`), else if they can hold them safely (the out= contract of PyTorch's
        reference wrappers)."""
        functional = self.counterpart if self.mode == "out" else None
        if functional is None:
            raise exc  # the meta kernel's own error
        metas = []
        for (shape, stride, dtype), i in zip(self._functional_meta(values, functional), self.out_idx):
            out_dtype = values[i].dtype
            if probed != out_dtypes.ACCEPT and not torch.can_cast(dtype, out_dtype):
                raise RuntimeError(f"Attempting to cast from {dtype} to out tensor with dtype {out_dtype}, "
                                   "but this can't be cast because it is not safe!")
            metas.append((shape, stride, out_dtype))
        return metas


def _executable_name(op: torch._ops.OpOverload, key: tuple) -> str:
    """The name of the executable of `op` for cache key `key`. Unique in the process:
    XLA's profiler reports device time per HLO module, named "jit_" + this name (see
    torchneuron.profiler). The same in every process: the name is part of the HLO, so
    JAX's persistent compilation cache can only serve another process (a sweep worker,
    the next run) an executable whose name does not depend on compile order."""
    base = f"neuron_{_IDENTIFIER.sub('_', op.name())}_{hashlib.sha1(repr(key).encode()).hexdigest()[:12]}"
    name, n = base, 0
    while _names.setdefault(name, (op, key)) != (op, key):  # a hash collision
        n += 1
        name = f"{base}_{n}"
    return name


def run_failed(exc: Exception, device: int):
    """Raises the error of an executable's run: PJRT's failed allocation as
    `torch.OutOfMemoryError`, anything else unchanged."""
    if isinstance(exc, jax.errors.JaxRuntimeError):
        storage.raise_if_out_of_memory(exc, device)
    raise exc


def int64_array(values) -> np.ndarray:
    """The dynamic storage offsets of a call, as the executable takes them."""
    return np.array(values, dtype=np.int64)


_SCALAR_TYPE_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
}


def _check_cast(results, outs) -> None:
    """RuntimeError (CPU's message) if a result dtype cannot be cast to the dtype of the
    tensor written in place (c10::canCast, as TensorIterator checks)."""
    for r, o in zip(results, outs):
        if isinstance(r, torch.Tensor) and isinstance(o, torch.Tensor) and not torch.can_cast(r.dtype, o.dtype):
            name = _SCALAR_TYPE_NAMES.get
            raise RuntimeError(f"result type {name(r.dtype, r.dtype)} can't be cast to the desired output type "
                               f"{name(o.dtype, o.dtype)}")


class _Aliasing:
    """Per-call checks of an executable whose written storages are also read through
    other arguments (see OpKernel._aliasing); positions index the call's tensor list."""

    __slots__ = ("write_paths", "overlap_reads", "pairs", "probe")

    def __init__(self, write_paths, overlap_reads, pairs, probe=None):
        self.write_paths = write_paths  # written arguments' paths, for the overlap check
        self.overlap_reads = overlap_reads  # read positions sharing a written storage
        self.pairs = pairs  # (written, other) positions in different _foreach_ elements
        self.probe = probe  # the OpKernel whose CPU kernel decides overlap (out_overlap), or None

    def sequential(self, values, metas) -> bool:
        """Raises CPU's RuntimeError on a partial overlap of a written and a read tensor;
        True when `_foreach_` elements overlap, so they must be updated in order."""
        if self.overlap_reads:
            overlap.check([_tensor_meta(_at(values, path)) for path in self.write_paths],
                          [metas[j] for j in self.overlap_reads])
        if self.probe is not None:
            out_overlap.check(self.probe.op, values, self.probe.writes)
        return any(_spans_meet(metas[w], metas[p]) for w, p in self.pairs)


def _span(meta):
    """[first, last] byte touched by a tensor (shim metadata) in its storage."""
    shape, stride, offset, dtype = meta[1], meta[2], meta[3], meta[4]
    size = dtype.itemsize
    extent = sum((n - 1) * st for n, st in zip(shape, stride))
    return offset * size, (offset + extent) * size + size - 1


def _spans_meet(a, b) -> bool:
    if any(n == 0 for n in a[1]) or any(n == 0 for n in b[1]):
        return False
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 <= b1 and b0 <= a1


def _positions(values, kinds):
    """Per tensor of a call's tensor list (OpKernel._signature's order): (argument
    index, list index or None)."""
    out = []
    for i, (kind, v) in enumerate(zip(kinds, values)):
        if kind == TENSOR:
            if isinstance(v, torch.Tensor) and _tensor_meta(v) is not None:
                out.append((i, None))
        elif kind == TENSOR_LIST and v is not None:
            out.extend((i, j) for j, t in enumerate(v) if t is not None and _tensor_meta(t) is not None)
    return out


def _to_meta(v):
    """`v` with `neuron` tensors (and devices) replaced by meta ones, for meta kernels."""
    if isinstance(v, torch.Tensor):
        return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
    if isinstance(v, (list, tuple)):
        return type(v)(_to_meta(x) for x in v)
    if isinstance(v, torch.Generator):
        return None
    if isinstance(v, torch.device) and v.type == "neuron":  # factory ops
        return torch.device("meta")
    return v


def _dense_stride(shape, stride):
    """`stride` if it is a dense permutation of `shape` or the tensor is empty (any
    strides address its no elements: CPU's channels_last allocation of an empty
    tensor has zero strides), else contiguous strides."""
    if 0 in shape:
        return tuple(stride)
    order = sorted(range(len(shape)), key=lambda d: -stride[d])
    expected = 1
    ok = True
    for d in reversed(order):
        if shape[d] != 1 and stride[d] != expected:
            ok = False
            break
        expected *= shape[d]
    if ok:
        return tuple(stride)
    return tuple(torch.empty(shape, device="meta").stride())


def _fresh_stride(shape, stride):
    """The strides of a new output of the meta kernel's `stride`: those, dense or not,
    unless elements overlap (then `_dense_stride`'s). CPU's kernels return some results
    as views of a larger buffer: lstsq's solution (n of the m rows of its column-major
    right-hand side), the scatter ops' `clone_preserve_strides` of a strided input."""
    dense = _dense_stride(shape, stride)
    if dense == tuple(stride):
        return dense
    dims = sorted((st, n) for n, st in zip(shape, stride) if n != 1)
    span = 1  # elements addressed by the dims so far, of smaller strides
    for st, n in dims:
        if st < span:
            return dense
        span = st * (n - 1) + span
    return tuple(stride)


def _to_storage(value, shape, stride):
    """The flat storage of a new output with strides `_fresh_stride(shape, stride)`: the
    elements in memory order for a dense layout, else scattered into a storage that
    spans them (the gaps hold zeros)."""
    stride = _fresh_stride(shape, stride)
    if _dense_stride(shape, stride) == stride:
        return _to_layout(value, shape, stride)
    length = 1 + sum((n - 1) * st for n, st in zip(shape, stride))
    return views.write(jnp.zeros((length,), value.dtype), length, value.dtype, shape, stride, 0, value)


def _to_layout(value, shape, stride):
    """Flattens `value` in the memory order given by `stride` (dense layouts only)."""
    stride = _dense_stride(shape, stride)
    value = jnp.broadcast_to(value, shape)
    order = sorted(range(len(shape)), key=lambda d: (-stride[d], d))
    if order != list(range(len(shape))):
        value = jnp.transpose(value, order)
    return value.reshape(-1)


def _as_list(result):
    if isinstance(result, (list, tuple)):
        return list(result)
    return [result]


def _flatten(results):
    out = []
    for r in results:
        if isinstance(r, (list, tuple)):
            out.extend(r)
        else:
            out.append(r)
    return out


def _is_default(v, default) -> bool:
    return default is not None and type(v) is type(default) and v == default


def _freeze(v):
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, (bool, int, float)):  # 1 == 1.0 == True, yet they give different dtypes
        return (type(v), v)
    return v


_DEVICE_TENSOR = object()  # stands for a `neuron` tensor argument in a trace's static values
_HOST_TENSOR = object()  # stands for a CPU scalar tensor argument (its value is dynamic)


def _placeholder(v):
    """`v` with tensors replaced by _DEVICE_TENSOR / _HOST_TENSOR (lists too)."""
    if isinstance(v, torch.Tensor):
        return _DEVICE_TENSOR if v.device.type == "neuron" else _HOST_TENSOR
    if isinstance(v, (list, tuple)):
        return type(v)(_placeholder(x) for x in v)
    return v


def _at(values, path):
    v = values[path[0]]
    for p in path[1:]:
        v = v[p]
    return v


def _rng_state(values, kinds, device, advance=True):
    gen = None
    for kind, v in zip(kinds, values):
        if kind == GENERATOR and v is not None:
            gen = v
    if gen is None:
        gen = _extension.load().default_generator(device)
    seed = gen.initial_seed()
    offset = gen.get_offset()
    if advance:
        gen.set_offset(offset + 1)
    return [np.uint64(seed), np.uint64(offset)]
