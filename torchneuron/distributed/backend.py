"""The c10d backend `neuron`: collectives on `neuron` tensors, host-staged over gloo.

Follows the `torch.distributed.Backend` C++ interface (PyTorch's `PyBackend` trampoline
lets a Python subclass implement it). Each collective copies the `neuron` tensors it
reads to the host, runs the same collective of a `ProcessGroupGloo` built on the same
store, and copies the results back in place (`copy_`, so views and strides of the
caller's tensors are respected) when the work handle is waited on. CPU tensors go to
gloo unchanged, so one process group serves both devices.

Before each collective (barrier included) the ranks exchange the (collective, dtype,
shape, reduce op, root) of their tensors over gloo (one small all_gather, in flight
while the inputs are copied to the host), so that mismatched collectives raise
`ValueError` on every rank instead of corrupting data or hanging. An all_reduce that
the ranks' shared history predicts carries this check inside its own data instead, so
it costs no extra exchange (`piggyback`). A result that fills
a whole `neuron` storage is not copied back on XLA:CPU: its host buffer becomes the
device buffer (`staging.adopt`).
"""
from __future__ import annotations

import datetime
from typing import Callable, Dict, List, Optional

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d

from ..runtime import checks
from . import metadata, piggyback, staging

_AVG = dist.ReduceOp.AVG
_SUM = dist.ReduceOp.SUM


def _is_neuron(t: torch.Tensor) -> bool:
    return t.device.type == "neuron"


_POOL = staging.HostPool()


def _host_copy(t: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU tensor with the values of `t` (gloo needs dense host memory)."""
    if not _is_neuron(t):
        return t
    host = _POOL.acquire(t.shape, t.dtype)
    if not staging.read(t, host):
        with torch.no_grad():
            host.copy_(t)
    return host


def _host_empty(t: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU tensor of `t`'s shape and dtype, for a result gloo writes."""
    if not _is_neuron(t):
        return t
    return _POOL.acquire(t.shape, t.dtype)


def _flatten(nested) -> List[torch.Tensor]:
    if isinstance(nested, torch.Tensor):
        return [nested]
    return [t for item in nested for t in _flatten(item)]


def _map(fn: Callable, nested):
    if isinstance(nested, torch.Tensor):
        return fn(nested)
    return [_map(fn, item) for item in nested]


class StagedWork(c10d.Work):
    """Work handle of a host-staged collective (the `torch.distributed.Work` API).

    `wait()` waits for the works it depends on (gloo's, or other staged works), then
    moves the host results into the caller's `neuron` tensors and runs the collective's
    epilogue (e.g. the division of `ReduceOp.AVG`); it raises what gloo raised (a
    `DistBackendError` on a timeout or a lost peer). `is_completed()` is True once those
    works have completed (the results are then usable through `wait()`, which moves them
    without waiting for the network), or once waited. `get_future()` completes the work
    first and returns a completed future whose value is the list of output tensors, as
    gloo's work does.

    Callers of `torch.distributed` get it wrapped in PyTorch's `PyWorkHolder`, which
    forwards only `wait()` and `get_future()`: their `is_completed()` stays False, even
    after `wait()` (a PyTorch limitation of Python backends). The exception is the
    receive from any source (`AnySourceRecvWork`).
    """

    def __init__(self, deps: List[c10d.Work], copies, outputs: List[torch.Tensor],
                 epilogue: Optional[Callable[[], None]] = None, staged=(),
                 verify: Optional[Callable[[], None]] = None):
        super().__init__()
        self._deps = deps
        self._copies = copies
        self._staged = staged
        self._outputs = outputs
        self._epilogue = epilogue
        self._verify = verify  # raises before any result is used (piggyback's check)
        self._error: Optional[Exception] = None
        self._done = False
        self._forget: Optional[Callable[[], None]] = None  # set by NeuronBackend._note_writes

    def wait(self, timeout: datetime.timedelta = datetime.timedelta(0)) -> bool:
        if self._error is not None:
            raise self._error
        if self._done:
            return True
        for dep in self._deps:
            dep.wait(timeout)
        if self._verify is not None:
            try:
                self._verify()
            except ValueError as e:
                self._error, self._copies, self._epilogue = e, [], None
                self._finish()
                raise
        for device_tensor, host_tensor in self._copies:
            if not staging.adopt(device_tensor, host_tensor):
                with torch.no_grad():
                    device_tensor.copy_(host_tensor)
        if self._epilogue is not None:
            self._epilogue()
        self._finish()
        return True

    def _finish(self) -> None:
        # The copies took the host values (host -> device copies copy first); the pool
        # keeps an adopted buffer from reuse while its device buffer lives.
        for host_tensor in self._staged:
            _POOL.release(host_tensor)
        self._done = True
        self._deps = self._copies = self._epilogue = self._staged = self._verify = None
        if self._forget is not None:
            self._forget()
            self._forget = None

    def is_completed(self) -> bool:
        return self._done or all(dep.is_completed() for dep in self._deps)

    def is_success(self) -> bool:
        return self._done

    def get_future(self) -> torch.futures.Future:
        self.wait()
        future = torch.futures.Future()
        future.set_result(self._outputs)
        return future

    def result(self) -> List[torch.Tensor]:
        return self._outputs


#: Receives from any source that were handed to callers and not yet waited for.
_UNWAITED_RECVS: set = set()


class AnySourceRecvWork(StagedWork):
    """A `StagedWork` of a receive from any source, which also tells the sender's rank
    (`_source_rank()`, as gloo's work does; `dist.recv` asks for it).

    It reaches callers unwrapped (`_recv_any_source`), so nothing on the C++ side keeps
    this Python object alive: it keeps itself (in `_UNWAITED_RECVS`) until waited.
    """

    def __init__(self, deps: List[c10d.Work], copies, outputs: List[torch.Tensor], staged=()):
        super().__init__(deps, copies, outputs, staged=staged)
        self._recv = deps[0]
        self._source: Optional[int] = None
        _UNWAITED_RECVS.add(self)

    def wait(self, timeout: datetime.timedelta = datetime.timedelta(0)) -> bool:
        try:
            done = super().wait(timeout)
            if self._source is None:
                # Read now: the gloo work holds the host buffer, which the pool may reuse
                # only once the gloo work is gone.
                self._source, self._recv = self._recv._source_rank(), None
            return done
        finally:
            _UNWAITED_RECVS.discard(self)

    def _source_rank(self) -> int:
        return self._source if self._source is not None else self._recv._source_rank()

    def source_rank(self) -> int:
        return self._source_rank()


def _recv_any_source(tensors, process_group, tag):
    """c10d's `recv_any_source_` kernel for `neuron` tensors, in place of c10d's own.

    c10d's returns the backend's work wrapped in PyTorch's `PyWorkHolder`, which
    forwards no `_source_rank()`, so `dist.recv(t)` without `src` raised. This one does
    the same call and returns the backend's work itself.
    """
    group = dist.ProcessGroup.unbox(process_group)
    return group._get_backend(tensors[0].device).recv_anysource(tensors, tag).boxed()


_C10D = torch.library.Library("c10d", "IMPL")
_C10D.impl("recv_any_source_", _recv_any_source, "PrivateUse1")


class NeuronBackend(c10d.Backend):
    """`torch.distributed` backend for `neuron` (and CPU) tensors of one process group.

    Args follow `torch.distributed.Backend.register_backend`'s creator function: the
    group's store (its keys are put under the prefix ``gloo/``), this process's rank in
    the group, the group's world size and the collective timeout. One process drives
    one `neuron` device, as torchrun launches them.
    """

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: datetime.timedelta):
        super().__init__(rank, size)
        self._rank = rank
        self._size = size
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, size, timeout)
        self._check = metadata.Checker(self._gloo, rank, size)
        self._predictor = piggyback.Predictor()
        # Works issued since start_coalescing(), or None outside a coalescing block.
        self._coalesced: Optional[List[StagedWork]] = None
        # Storage data_ptr -> the latest work that writes it (see _after_pending_writes).
        self._writing: Dict[int, StagedWork] = {}

    # -- identity -----------------------------------------------------------------
    def getBackendName(self) -> str:
        return "neuron"

    # PyTorch's trampoline reads these capability properties through Python attribute
    # lookup; one not defined here would resolve to the base binding, which calls the
    # trampoline again (infinite recursion). So each is stated.
    @property
    def supports_coalescing(self) -> bool:
        return True

    @property
    def supports_splitting(self) -> bool:
        return False

    @property
    def supports_shrinking(self) -> bool:
        return False

    @property
    def supports_reconfigure(self) -> bool:
        return False

    @property
    def supports_time_estimate(self) -> bool:
        return False

    @property
    def supports_window(self) -> bool:
        return False

    def supports_tensor_alloc(self, device_index: int) -> bool:
        return False

    def start_coalescing(self) -> None:
        """Opens a coalescing block (`torch.distributed._coalescing_manager`,
        `batch_isend_irecv`). Its collectives are issued at once, in order; the block
        yields one work that waits for all of them."""
        self._coalesced = []

    def end_coalescing(self) -> StagedWork:
        works, self._coalesced = self._coalesced or [], None
        return StagedWork(works, [], [t for w in works for t in w.result()])

    def _record(self, work: StagedWork) -> StagedWork:
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    # -- helpers ------------------------------------------------------------------
    def _staged(self, name: str, run: Callable, inputs, outputs, inplace=(),
                epilogue: Optional[Callable[[], None]] = None, check=None,
                spec: Optional[piggyback.Spec] = None) -> StagedWork:
        """Stages `inputs` (read) and `outputs` (written) to the host, runs `run` on
        the host versions and returns the work that copies `outputs` back. `inplace`
        are tensors both read and written (e.g. all_reduce's). `check` is the
        metadata every rank must agree on (default: all tensors' dtypes and shapes);
        `spec` is the collective's `piggyback.Spec` where it has one."""
        self._after_pending_writes(_flatten(inplace) + _flatten(inputs) + _flatten(outputs))
        # A failed device-side check (an out-of-range index earlier on this rank) raises
        # here, before this rank takes part in any exchange: raised by the host copies
        # below, after the agreement began, it would leave this rank's history a
        # collective short of the others' and their predictions apart.
        checks.raise_pending()
        agreed = self._agree(metadata.describe(name, check if check is not None else (inplace, inputs, outputs)),
                             spec)
        host_of = {}

        def host(t, fill):
            key = id(t)
            if key not in host_of:
                host_of[key] = _host_copy(t) if fill else _host_empty(t)
            return host_of[key]

        host_inplace = _map(lambda t: host(t, True), inplace)
        host_inputs = _map(lambda t: host(t, True), inputs)
        host_outputs = _map(lambda t: host(t, False), outputs)
        agreed()  # the device -> host copies above overlapped the check's round trip
        inner = run(host_inplace, host_inputs, host_outputs)
        written = _flatten(inplace) + _flatten(outputs)
        copies = [(t, host_of[id(t)]) for t in written if _is_neuron(t)]
        staged = [host_of[id(t)] for t in _flatten(inplace) + _flatten(inputs) + _flatten(outputs)
                  if _is_neuron(t)]
        return self._note_writes(self._record(StagedWork([inner], copies, written, epilogue,
                                                         list({id(h): h for h in staged}.values()))),
                                 written)

    def _agree(self, text: str, spec: Optional[piggyback.Spec] = None) -> Callable[[], None]:
        """Starts the ranks' agreement that each is about to run the collective
        described by `text`; the returned function finishes it, raising `ValueError` on
        every rank if they differ, and must be called before the collective is issued.
        While the history predicts an all_reduce, the agreement is that prediction's
        exchange, run with zeros (see `piggyback`): every rank's first exchange must be
        the same one, whichever collective it runs."""
        if self._size == 1:
            return metadata.agreed
        predicted = self._predictor.predict()
        if predicted is None:
            finish = self._check.begin(text)

            def agreed() -> None:
                finish()
                self._predictor.record(text, spec)
            return agreed
        predicted_text, predicted_spec = predicted
        mine = metadata.digest(text)
        numel, header_len = predicted_spec.numel, piggyback.header_len(self._size)
        flat = torch.zeros(numel + header_len, dtype=predicted_spec.dtype)
        piggyback.write_header(flat[numel:], self._rank, mine, predicted_spec.op)
        opts = c10d.AllreduceOptions()
        opts.reduceOp = predicted_spec.op
        self._gloo.allreduce([flat], opts).wait()
        found = piggyback.read_header(flat[numel:])
        if any(d != found[0] for d in found):
            predicted_pieces = piggyback.pieces(metadata.digest(predicted_text))
            if predicted_pieces in found:
                self._predictor.record(predicted_text, predicted_spec)  # as the ranks that ran it did
            raise piggyback.mismatch(self._rank, found, {piggyback.pieces(mine): text,
                                                         predicted_pieces: predicted_text})
        self._predictor.record(text, spec)
        return metadata.agreed

    def _after_pending_writes(self, tensors) -> None:
        """Waits for the unfinished works that write the storage of one of `tensors`
        (`neuron` ones): their results reach the device only in `wait()`, and a
        collective issued later must see them, as collectives on one CUDA stream do
        (all_reduce(t, async_op=True) twice, then both waits)."""
        for t in tensors:
            if _is_neuron(t):
                work = self._writing.get(t.untyped_storage().data_ptr())
                if work is not None and not work._done:
                    try:
                        work.wait()
                    except ValueError:
                        # A mismatch found by that work's own check belongs to its
                        # wait(), which raises it again; raised here, this collective
                        # would not take part and the other ranks would hang in it.
                        pass

    def _note_writes(self, work: StagedWork, written) -> StagedWork:
        """Records `work` as the latest writer of its `neuron` tensors' storages until
        it is waited (holding a finished work would keep its tensors alive)."""
        keys = [t.untyped_storage().data_ptr() for t in written if _is_neuron(t)]
        writing = self._writing

        def forget() -> None:
            for key in keys:
                if writing.get(key) is work:
                    del writing[key]
        for key in keys:
            writing[key] = work
        work._forget = forget
        return work

    def _avg_epilogue(self, opts, tensors) -> Optional[Callable[[], None]]:
        """gloo has no ReduceOp.AVG: sum, then divide by the world size (integer
        tensors by truncating division, as NCCL's average does)."""
        if opts.reduceOp != _AVG:
            return None
        opts.reduceOp = _SUM
        size = self._size

        def divide():
            with torch.no_grad():
                for t in tensors:
                    if t.is_floating_point() or t.is_complex():
                        t.div_(size)
                    else:
                        t.copy_(torch.div(t, size, rounding_mode="trunc"))
        return divide

    # -- collectives ----------------------------------------------------------------
    def allreduce(self, tensors, opts):
        check = (tensors, [opts.reduceOp.op.name])  # before AVG becomes SUM
        epilogue = self._avg_epilogue(opts, tensors)
        text = metadata.describe("allreduce", check)
        predicted = self._predictor.predict() if self._size > 1 else None
        if predicted is not None and predicted[0] == text:
            return self._piggybacked(text, predicted[1], tensors, opts, epilogue)
        return self._staged("allreduce", lambda io, i, o: self._gloo.allreduce(io, opts),
                            (), (), inplace=tensors, epilogue=epilogue, check=check,
                            spec=piggyback.spec(tensors, opts.reduceOp))

    def _piggybacked(self, text: str, spec: piggyback.Spec, tensors, opts, epilogue) -> StagedWork:
        """The predicted all_reduce: its check travels in the data's buffer (see
        `piggyback`); a mismatch raises when the work is waited."""
        mine = metadata.digest(text)
        header_len = piggyback.header_len(self._size)
        (t,) = tensors
        self._after_pending_writes(tensors)
        flat = _POOL.acquire((spec.numel + header_len,), spec.dtype)
        host = flat[:spec.numel].view(t.shape)
        if not staging.read(t, host):
            with torch.no_grad():
                host.copy_(t)
        header = flat[spec.numel:]
        piggyback.write_header(header, self._rank, mine, opts.reduceOp)
        inner = self._gloo.allreduce([flat], opts)
        self._predictor.record(text, spec)

        def verify() -> None:
            found = piggyback.read_header(header)
            if any(d != found[0] for d in found):
                raise piggyback.mismatch(self._rank, found, {piggyback.pieces(mine): text})
        work = StagedWork([inner], [(t, host)], list(tensors), epilogue, [flat], verify)
        return self._note_writes(self._record(work), tensors)

    def allreduce_coalesced(self, tensors, opts):
        # gloo coalesces tensors of one dtype only: one gloo call per dtype.
        by_dtype = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        works = []
        for group in by_dtype.values():
            group_opts = c10d.AllreduceCoalescedOptions()
            group_opts.reduceOp, group_opts.timeout = opts.reduceOp, opts.timeout
            check = (group, [opts.reduceOp.op.name])
            epilogue = self._avg_epilogue(group_opts, group)
            works.append(self._staged(
                "allreduce_coalesced",
                lambda io, i, o, group_opts=group_opts: self._gloo.allreduce_coalesced(io, group_opts),
                (), (), inplace=group, epilogue=epilogue, check=check))
        if len(works) == 1:
            return works[0]
        return StagedWork(works, [], list(tensors))

    def broadcast(self, tensors, opts):
        return self._staged("broadcast", lambda io, i, o: self._gloo.broadcast(io, opts),
                            (), (), inplace=tensors, check=(tensors, [f"root {opts.rootRank}"]))

    def reduce(self, tensors, opts):
        check = (tensors, [opts.reduceOp.op.name, f"root {opts.rootRank}"])
        epilogue = self._avg_epilogue(opts, tensors) if self._rank == opts.rootRank else None
        if opts.reduceOp == _AVG:
            opts.reduceOp = _SUM
        return self._staged("reduce", lambda io, i, o: self._gloo.reduce(io, opts),
                            (), (), inplace=tensors, epilogue=epilogue, check=check)

    def allgather(self, output_lists, inputs, opts):
        return self._staged("allgather", lambda io, i, o: self._gloo.allgather(o, i, opts),
                            inputs, output_lists)

    def all_gather_single(self, output, input, opts):
        return self._staged("all_gather_single",
                            lambda io, i, o: self._gloo._allgather_base(o[0].view(-1), i[0].view(-1),
                                                                        opts),
                            [input], [output])


    def allgather_coalesced(self, output_lists, inputs, opts):
        return self._staged("allgather_coalesced",
                            lambda io, i, o: self._gloo.allgather_coalesced(o, i, opts),
                            inputs, output_lists)

    def all_gather_single_coalesced(self, outputs, inputs, opts):
        return self._staged("all_gather_single_coalesced",
                            lambda io, i, o: self._gloo.all_gather_single_coalesced(o, i, opts),
                            inputs, outputs)

    def gather(self, output_lists, inputs, opts):
        return self._staged("gather", lambda io, i, o: self._gloo.gather(o, i, opts),
                            inputs, output_lists,
                            check=(inputs, [f"root {opts.rootRank}"]))

    def scatter(self, outputs, input_lists, opts):
        return self._staged("scatter", lambda io, i, o: self._gloo.scatter(o, i, opts),
                            input_lists, outputs, check=(outputs, [f"root {opts.rootRank}"]))

    def reduce_scatter(self, outputs, input_lists, opts):
        check = (input_lists, outputs, [opts.reduceOp.op.name])
        epilogue = self._avg_epilogue(opts, outputs)
        return self._staged("reduce_scatter",
                            lambda io, i, o: self._gloo.reduce_scatter(o, i, opts),
                            input_lists, outputs, epilogue=epilogue, check=check)

    def reduce_scatter_single(self, output, input, opts):
        check = ([input], [output], [opts.reduceOp.op.name])
        epilogue = self._avg_epilogue(opts, [output])
        return self._staged("reduce_scatter_single",
                            lambda io, i, o: self._gloo._reduce_scatter_base(o[0].view(-1),
                                                                             i[0].view(-1), opts),
                            [input], [output], epilogue=epilogue, check=check)


    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        check = (inputs, outputs, [opts.reduceOp.op.name])
        epilogue = self._avg_epilogue(opts, outputs)
        return self._staged("reduce_scatter_single_coalesced",
                            lambda io, i, o: self._gloo.reduce_scatter_single_coalesced(o, i, opts),
                            inputs, outputs, epilogue=epilogue, check=check)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts):
        def run(io, i, o):
            self._check_splits(input, output, input_split_sizes, output_split_sizes)
            return self._gloo.alltoall_base(o[0], i[0], output_split_sizes, input_split_sizes, opts)

        return self._staged("all_to_all_single", run, [input], [output], check=([input.dtype], [output.dtype]))

    def _check_splits(self, input, output, input_split_sizes, output_split_sizes) -> None:
        """Raises `ValueError` on every rank unless what each rank sends to each other
        rank is what that rank expects to receive from it (in elements), and each rank's
        split sizes add up to its tensors' first dimension. The ranks differ in their
        splits, so this is an exchange of the split sizes themselves (after the
        agreement: every rank is in this all_to_all), not of a digest; gloo given
        mismatched splits hangs or corrupts the data."""
        def elements(t, splits):
            rows = t.shape[0] if t.dim() else 1
            per_row = t.numel() // rows if rows else 0
            splits = list(splits) or [rows // self._size] * self._size
            return sum(splits) == rows and len(splits) == self._size, [n * per_row for n in splits]

        ok_in, sends = elements(input, input_split_sizes)
        ok_out, receives = elements(output, output_split_sizes)
        mine = torch.tensor([int(ok_in and ok_out)] + sends + receives, dtype=torch.int64)
        every = torch.empty(self._size * mine.numel(), dtype=torch.int64)
        self._gloo._allgather_base(every, mine).wait()
        every = every.view(self._size, -1)
        bad = [r for r in range(self._size) if not every[r, 0]]
        if bad:
            raise ValueError(f"mismatched collective across ranks: all_to_all split sizes of rank(s) {bad} do "
                             f"not add up to their tensors' first dimension (or are not one per rank)")
        sent = every[:, 1:1 + self._size]  # sent[r, j]: elements rank r sends to rank j
        expected = every[:, 1 + self._size:]  # expected[r, j]: elements rank r receives from rank j
        if not torch.equal(sent, expected.T):
            raise ValueError(f"mismatched collective across ranks: all_to_all split sizes do not fit (elements "
                             f"rank r sends to rank j: {sent.tolist()}; rank j expects from rank r: "
                             f"{expected.T.tolist()})")


    def alltoall(self, outputs, inputs, opts):
        """gloo has only the single-tensor all_to_all: the lists travel as one flat
        buffer split by each tensor's number of elements."""
        if len({t.dtype for t in list(inputs) + list(outputs)}) > 1:
            raise ValueError("all_to_all: all input and output tensors must have the same dtype")
        flat_in = torch.cat([t.reshape(-1) for t in inputs])
        flat_out = torch.empty(sum(t.numel() for t in outputs), dtype=flat_in.dtype,
                               device=flat_in.device)
        inner = self.all_to_all_single(flat_out, flat_in, [t.numel() for t in outputs],
                                       [t.numel() for t in inputs], c10d.AllToAllOptions())

        def unpack():
            with torch.no_grad():
                for t, part in zip(outputs, flat_out.split([t.numel() for t in outputs])):
                    t.copy_(part.view(t.shape))
        return self._record(StagedWork([inner], [], list(outputs), unpack))

    def send(self, tensors, dst_rank, tag):
        # Point-to-point pairs are matched by (peer, tag) alone; nothing to check.
        self._check_peer(dst_rank, "destination")
        return self._staged_p2p(lambda host: self._gloo.send(host, dst_rank, tag), tensors, fill=True)

    def recv(self, tensors, src_rank, tag):
        self._check_peer(src_rank, "source")
        return self._staged_p2p(lambda host: self._gloo.recv(host, src_rank, tag), tensors, fill=False)

    def recv_anysource(self, tensors, tag):
        return self._staged_p2p(lambda host: self._gloo.recv_anysource(host, tag), tensors,
                                fill=False, work_type=AnySourceRecvWork)

    def _check_peer(self, peer: int, role: str) -> None:
        """Raises `DistStoreError` for a peer rank outside the group. gloo does not
        check it: a send on our inner gloo group crashes the process (SIGSEGV), and
        CPU tensors on a plain gloo group wait for that rank's address in the store
        and raise `DistStoreError` after the timeout. Same type, at once."""
        if not 0 <= peer < self._size:
            raise dist.DistStoreError(f"invalid {role} rank {peer}: the group has ranks "
                                      f"0 to {self._size - 1}")

    def _staged_p2p(self, run, tensors, fill: bool, work_type=StagedWork) -> StagedWork:
        self._after_pending_writes(tensors)
        host = [_host_copy(t) if fill else _host_empty(t) for t in tensors]
        inner = run(host)
        copies = [] if fill else [(t, h) for t, h in zip(tensors, host) if _is_neuron(t)]
        staged = [h for t, h in zip(tensors, host) if _is_neuron(t)]
        work = self._record(work_type([inner], copies, list(tensors), staged=staged))
        return work if fill else self._note_writes(work, tensors)

    def barrier(self, opts):
        # Agreed like any collective: a barrier facing another rank's all_reduce would
        # otherwise pair gloo operations of different kinds.
        self._agree(metadata.describe("barrier", ()))()
        return self._record(StagedWork([self._gloo.barrier(opts)], [], []))

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        self._gloo.set_timeout(timeout)

    def abort(self) -> None:
        self._gloo.abort()


def create_backend(options: c10d._DistributedBackendOptions, backend_options=None) -> NeuronBackend:
    """Creator function given to `Backend.register_backend` (``extended_api=True``)."""
    return NeuronBackend(options.store, options.group_rank, options.group_size, options.timeout)
