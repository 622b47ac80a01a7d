"""One rank of the multi-process tests of tests/test_distributed.py, launched by torchrun.

    torchrun --standalone --nproc-per-node 2 tests/dist_worker.py OUT_DIR SCENARIO...

Runs each scenario in turn on the default process group (backend `neuron`) and writes
OUT_DIR/rank<r>.json: {"scenarios": {name: "ok" or the failure's traceback}, "seconds":
{name: wall time}, "fallback": the ops that ran through the CPU fallback}.
Expected values are computed by hand from the ranks' inputs (or, for training, by one
process on the CPU). A failing scenario does not stop the others.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from torch.testing import assert_close

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torchneuron  # noqa: E402
from torchneuron.distributed import piggyback  # noqa: E402

DEV = torch.device("neuron")
SCENARIOS = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def _rank_world():
    return dist.get_rank(), dist.get_world_size()


def _close(actual, expected, **kw):
    assert actual.device.type == expected.device.type or actual.device.type == "neuron", actual.device
    assert_close(actual.cpu(), expected.cpu() if isinstance(expected, torch.Tensor) else expected, **kw)


def _value(rank, n=4, dtype=torch.float32):
    """Rank r's input: [r*10 + 1, r*10 + 2, ...]."""
    return torch.arange(1, n + 1, dtype=dtype) + 10 * rank


@scenario
def local_rank_device():
    """What torchrun users write names this rank's device on every rank, before any
    `neuron` tensor exists: the device count follows LOCAL_WORLD_SIZE, and set_device,
    torch.device("neuron", LOCAL_RANK) and init_device_mesh (which sets the device from
    LOCAL_RANK) work; later scenarios then run on device LOCAL_RANK."""
    from torch.distributed.device_mesh import init_device_mesh

    rank, world = _rank_world()
    local = int(os.environ["LOCAL_RANK"])
    assert not torch.neuron.is_initialized(), "a neuron tensor existed before the scenario"
    mesh = init_device_mesh("neuron", (world,))
    assert torch.neuron.device_count() == int(os.environ["LOCAL_WORLD_SIZE"])
    assert torch.neuron.current_device() == local
    torch.neuron.set_device(local)
    t = torch.ones(3, device=torch.device("neuron", local))
    assert torch.ones(1, device=DEV).device == t.device == torch.device("neuron", local)
    dist.all_reduce(t)
    _close(t, torch.full((3,), float(world)))
    assert t.device.index == local
    assert mesh.get_group().size() == world


@scenario
def all_reduce():
    rank, world = _rank_world()
    inputs = [_value(r) for r in range(world)]
    stacked = torch.stack(inputs)
    expected = {
        dist.ReduceOp.SUM: stacked.sum(0), dist.ReduceOp.AVG: stacked.mean(0),
        dist.ReduceOp.MIN: stacked.min(0).values, dist.ReduceOp.MAX: stacked.max(0).values,
        dist.ReduceOp.PRODUCT: stacked.prod(0),
    }
    for op, want in expected.items():
        t = inputs[rank].to(DEV)
        dist.all_reduce(t, op=op)
        _close(t, want)
    for dtype in (torch.int64, torch.int32, torch.float16, torch.bfloat16, torch.float64):
        t = _value(rank, dtype=dtype).to(DEV)
        dist.all_reduce(t)
        _close(t, torch.stack([_value(r, dtype=dtype) for r in range(world)]).sum(0, dtype=dtype))
    # In place into a strided view: only the viewed column of the base changes.
    base = torch.zeros(4, 3, device=DEV)
    column = base[:, 1]
    column.copy_(inputs[rank].to(DEV))
    dist.all_reduce(column)
    want = torch.zeros(4, 3)
    want[:, 1] = stacked.sum(0)
    _close(base, want)
    # Async handle: the result is there after wait().
    t = inputs[rank].to(DEV)
    work = dist.all_reduce(t, async_op=True)
    assert work.wait()
    _close(t, stacked.sum(0))
    # Collectives issued on one tensor before either is waited run in issue order, as on
    # one CUDA stream: the second sees the first's result.
    t = inputs[rank].to(DEV)
    first, second = dist.all_reduce(t, async_op=True), dist.all_reduce(t, async_op=True)
    first.wait(), second.wait()
    _close(t, stacked.sum(0) * world)
    t = inputs[rank].to(DEV)
    first, second = dist.broadcast(t, src=world - 1, async_op=True), dist.all_reduce(t, async_op=True)
    second.wait(), first.wait()
    _close(t, inputs[world - 1] * world)
    # CPU tensors go through the same process group.
    c = inputs[rank].clone()
    dist.all_reduce(c)
    _close(c, stacked.sum(0))
    # The backend's own work (PyTorch's wrapper around it does not forward
    # is_completed): it turns True once gloo's work has, and then wait() has the result.
    backend = dist.group.WORLD._get_backend(DEV)
    work = backend.allreduce([inputs[rank].to(DEV)], dist.AllreduceOptions())
    deadline = time.monotonic() + 30
    while not work.is_completed():
        assert time.monotonic() < deadline, "is_completed() stayed False"
        time.sleep(0.001)
    assert work.wait()
    _close(work.result()[0], stacked.sum(0))


@scenario
def all_gather():
    rank, world = _rank_world()
    mine = _value(rank, 3).to(DEV)
    outs = [torch.empty(3, device=DEV) for _ in range(world)]
    dist.all_gather(outs, mine)
    for r in range(world):
        _close(outs[r], _value(r, 3))
    flat = torch.empty(world * 3, device=DEV)
    dist.all_gather_into_tensor(flat, mine)
    _close(flat, torch.cat([_value(r, 3) for r in range(world)]))
    stacked = torch.empty(world, 3, device=DEV)
    dist.all_gather_into_tensor(stacked, mine)
    _close(stacked, torch.stack([_value(r, 3) for r in range(world)]))
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": r} for r in range(world)], objs


@scenario
def reduce_scatter():
    rank, world = _rank_world()
    # Rank r's chunk j is [r, r, j, j] + 1.
    chunks = lambda r: [torch.tensor([r, r, j, j], dtype=torch.float32) + 1 for j in range(world)]  # noqa: E731
    want = sum(chunks(r)[rank] for r in range(world))
    out = torch.empty(4, device=DEV)
    dist.reduce_scatter(out, [c.to(DEV) for c in chunks(rank)])
    _close(out, want)
    out = torch.empty(4, device=DEV)
    dist.reduce_scatter_tensor(out, torch.cat(chunks(rank)).to(DEV))
    _close(out, want)
    dist.reduce_scatter_tensor(out, torch.cat(chunks(rank)).to(DEV), op=dist.ReduceOp.AVG)
    _close(out, want / world)


@scenario
def broadcast_reduce_gather_scatter():
    rank, world = _rank_world()
    root = world - 1
    t = _value(rank).to(DEV)
    dist.broadcast(t, src=root)
    _close(t, _value(root))
    t = _value(rank).to(DEV)
    dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
    if rank == root:
        _close(t, sum(_value(r) for r in range(world)))
    gathered = [torch.empty(4, device=DEV) for _ in range(world)] if rank == root else None
    dist.gather(_value(rank).to(DEV), gathered, dst=root)
    if rank == root:
        for r in range(world):
            _close(gathered[r], _value(r))
    out = torch.empty(4, device=DEV)
    pieces = [_value(100 + r).to(DEV) for r in range(world)] if rank == root else None
    dist.scatter(out, pieces, src=root)
    _close(out, _value(100 + rank))
    objs = [f"from {rank}", rank] if rank == root else [None, None]
    dist.broadcast_object_list(objs, src=root)
    assert objs == [f"from {root}", root], objs
    dist.barrier()


@scenario
def all_to_all():
    rank, world = _rank_world()
    # Rank r sends [r, j] to rank j.
    ins = [torch.tensor([rank, j], dtype=torch.float32).to(DEV) for j in range(world)]
    outs = [torch.empty(2, device=DEV) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for j in range(world):
        _close(outs[j], torch.tensor([j, rank], dtype=torch.float32))
    out = torch.empty(2 * world, device=DEV)
    dist.all_to_all_single(out, torch.cat(ins))
    _close(out, torch.cat([torch.tensor([j, rank], dtype=torch.float32) for j in range(world)]))
    # Uneven splits: rank r sends j + 1 copies of r to rank j.
    send = torch.cat([torch.full((j + 1,), float(rank)) for j in range(world)]).to(DEV)
    recv = torch.empty(world * (rank + 1), device=DEV)
    dist.all_to_all_single(recv, send, output_split_sizes=[rank + 1] * world,
                           input_split_sizes=[j + 1 for j in range(world)])
    _close(recv, torch.cat([torch.full((rank + 1,), float(j)) for j in range(world)]))


@scenario
def point_to_point():
    rank, world = _rank_world()
    nxt, prev = (rank + 1) % world, (rank - 1) % world
    if rank == 0:
        dist.send(_value(7).to(DEV), dst=1)
    elif rank == 1:
        got = torch.empty(4, device=DEV)
        dist.recv(got, src=0)
        _close(got, _value(7))
    # A ring with isend/irecv: everyone sends first, then receives.
    got = torch.empty(4, device=DEV)
    send = dist.isend(_value(rank).to(DEV), dst=nxt)
    recv = dist.irecv(got, src=prev)
    send.wait()
    recv.wait()
    _close(got, _value(prev))
    got = torch.zeros(2, 4, device=DEV)
    ops = [dist.P2POp(dist.isend, _value(rank).to(DEV), nxt),
           dist.P2POp(dist.irecv, got[1], prev)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    _close(got, torch.stack([torch.zeros(4), _value(prev)]))
    # From any source, as on gloo: recv says who sent; irecv's work tells it too.
    if rank == 0:
        dist.send(_value(3).to(DEV), dst=1)
        dist.send(_value(4).to(DEV), dst=1)
    elif rank == 1:
        got = torch.empty(4, device=DEV)
        assert dist.recv(got) == 0
        _close(got, _value(3))
        work = dist.irecv(got)
        assert work.wait() and work.is_completed() and work._source_rank() == 0
        _close(got, _value(4))
    # A peer outside the group raises what gloo raises for CPU tensors (after its
    # timeout there), at once and without crashing.
    for bad in (world, -1):
        for t in (_value(rank).to(DEV), _value(rank)):
            for call in (lambda: dist.send(t, dst=bad), lambda: dist.recv(t, src=bad)):
                try:
                    call()
                except dist.DistStoreError as e:
                    assert f"rank {bad}" in str(e), e
                else:
                    raise AssertionError(f"no error for peer {bad}")
    # The backend's own receive is not completed before its message is sent.
    got = torch.empty(4, device=DEV)
    work = dist.group.WORLD._get_backend(DEV).recv([got], 1, 5) if rank == 0 else None
    if work is not None:
        assert not work.is_completed()
    dist.barrier()
    if rank == 1:
        dist.send(_value(9).to(DEV), dst=0, tag=5)
    if work is not None:
        assert work.wait() and work.is_completed()
        _close(got, _value(9))


@scenario
def coalesced():
    rank, world = _rank_world()
    a, b = _value(rank).to(DEV), _value(rank, 2, torch.float64).to(DEV)
    with dist._coalescing_manager(device=DEV, async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    _close(a, sum(_value(r) for r in range(world)))
    _close(b, sum(_value(r, 2, torch.float64) for r in range(world)))
    outs = [torch.empty(world * 3, device=DEV), torch.empty(world * 2, device=DEV)]
    with dist._coalescing_manager(device=DEV):
        dist.all_gather_into_tensor(outs[0], _value(rank, 3).to(DEV))
        dist.all_gather_into_tensor(outs[1], _value(rank, 2).to(DEV))
    _close(outs[0], torch.cat([_value(r, 3) for r in range(world)]))
    _close(outs[1], torch.cat([_value(r, 2) for r in range(world)]))
    outs = [torch.empty(2, device=DEV), torch.empty(1, device=DEV)]
    with dist._coalescing_manager(device=DEV):
        dist.reduce_scatter_tensor(outs[0], torch.ones(2 * world, device=DEV))
        dist.reduce_scatter_tensor(outs[1], torch.ones(world, device=DEV))
    _close(outs[0], torch.full((2,), float(world)))
    _close(outs[1], torch.full((1,), float(world)))


@scenario
def functional_collectives():
    import torch.distributed._functional_collectives as funcol

    rank, world = _rank_world()
    group = dist.group.WORLD
    x = _value(rank).to(DEV)
    _close(funcol.all_reduce(x, "sum", group), sum(_value(r) for r in range(world)))
    _close(funcol.all_gather_tensor(x, 0, group), torch.cat([_value(r) for r in range(world)]))
    big = torch.arange(4 * world, dtype=torch.float32).to(DEV)
    _close(funcol.reduce_scatter_tensor(big, "sum", 0, group),
           torch.arange(4 * world, dtype=torch.float32)[rank * 4:(rank + 1) * 4] * world)
    _close(funcol.all_to_all_single(big, None, None, group),
           torch.cat([torch.arange(4 * world, dtype=torch.float32)[rank * 4:(rank + 1) * 4]] * world))
    _close(x, _value(rank))  # functional: the input is unchanged


@scenario
def compiled_functional_collectives():
    import torch.distributed._functional_collectives as funcol

    rank, world = _rank_world()
    group = dist.group.WORLD

    def step(x, w):
        h = funcol.all_reduce(x @ w, "sum", group)
        g = funcol.all_gather_tensor(torch.relu(h), 0, group)
        return g.sum(0) * 2

    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(rank))
    w = torch.randn(4, 5, generator=torch.Generator().manual_seed(99))
    xs = [torch.randn(3, 4, generator=torch.Generator().manual_seed(r)) for r in range(world)]
    h = torch.relu(sum(xr @ w for xr in xs))
    want = torch.cat([h] * world).sum(0) * 2
    compiled = torch.compile(step, backend="neuron")
    _close(compiled(x.to(DEV), w.to(DEV)), want, atol=1e-4, rtol=1e-4)


def _raises_mismatch(call, what: str) -> None:
    try:
        call()
    except ValueError as e:
        assert "mismatched collective" in str(e), e
    else:
        raise AssertionError(f"no error for {what}")


@scenario
def mismatch_raises():
    rank, world = _rank_world()
    for t in (torch.ones(3 + rank, device=DEV),
              torch.ones(3, device=DEV, dtype=torch.float32 if rank == 0 else torch.int32)):
        _raises_mismatch(lambda: dist.all_reduce(t), f"a mismatched all_reduce of {t.dtype}{list(t.shape)}")
    t = torch.ones(3, device=DEV)
    _raises_mismatch(lambda: dist.broadcast(t, src=rank), "a broadcast from a different root on each rank")
    _raises_mismatch(lambda: dist.reduce(t, dst=0, op=dist.ReduceOp.SUM if rank else dist.ReduceOp.MAX),
                     "a reduce with a different op on each rank")
    _raises_mismatch(lambda: dist.all_reduce(t, op=dist.ReduceOp.AVG if rank else dist.ReduceOp.SUM),
                     "an all_reduce averaging on some ranks and summing on others")
    _raises_mismatch(lambda: dist.barrier() if rank == 0 else dist.all_reduce(t),
                     "a barrier facing an all_reduce")
    # all_to_all whose sends do not fit the receiving rank's output splits (rank 0 sends
    # 2 elements to every rank, which expect 1 from it), or splits not adding up.
    _raises_mismatch(lambda: dist.all_to_all_single(torch.empty(world, device=DEV),
                                                    torch.ones(world * (2 if rank == 0 else 1), device=DEV)),
                     "all_to_all_single with sizes that do not fit each other")
    _raises_mismatch(lambda: dist.all_to_all_single(torch.empty(world, device=DEV), torch.ones(world, device=DEV),
                                                    input_split_sizes=[1] * world if rank else [world] + [0] * (world - 1),
                                                    output_split_sizes=[1] * world),
                     "all_to_all_single with splits that send rank 0's all to rank 0")
    _raises_mismatch(lambda: dist.all_to_all([torch.empty(1, device=DEV) for _ in range(world)],
                                             [torch.ones(1 + (rank == 0), device=DEV) for _ in range(world)]),
                     "all_to_all with lists of tensors that do not fit each other")
    dist.all_reduce(t)  # the group still works afterwards
    _close(t, torch.full((3,), float(world)))


@scenario
def predicted_all_reduce():
    """Repeated all_reduces carry their check in their data (torchneuron.distributed.
    piggyback): results stay exact for every op and header dtype, a mispredicted
    collective that all ranks agree on runs, and a mismatch raises on every rank whether
    a rank repeated the prediction or not, in either size direction, leaving the group
    usable."""
    rank, world = _rank_world()

    def repeat(n=4, op=dist.ReduceOp.SUM, dtype=torch.float32, size=4):
        for _ in range(n):
            t = _value(rank, size, dtype).to(DEV)
            dist.all_reduce(t, op=op)
        stacked = torch.stack([_value(r, size, dtype) for r in range(world)])
        want = {dist.ReduceOp.SUM: lambda: stacked.sum(0, dtype=dtype),
                dist.ReduceOp.AVG: lambda: stacked.sum(0, dtype=dtype) / world,
                dist.ReduceOp.MIN: lambda: stacked.min(0).values,
                dist.ReduceOp.MAX: lambda: stacked.max(0).values,
                dist.ReduceOp.PRODUCT: lambda: stacked.prod(0, dtype=dtype)}[op]()
        _close(t, want)

    def until_predicted(size=4, op=dist.ReduceOp.SUM, dtype=torch.float32):
        """Repeats an all_reduce until the history predicts it."""
        text = f"allreduce({str(dtype).replace('torch.', '')}[{size}], {op.name})"
        for _ in range(2 * piggyback.CONTEXT + 3):
            prediction = predictor.predict()
            if prediction is not None and prediction[0] == text:
                return
            repeat(n=1, op=op, dtype=dtype, size=size)
        raise AssertionError(f"repeats of {text} left no prediction")

    def predicted(**kw):
        """The all_reduce of `kw`, predicted, so that it carries its check."""
        until_predicted(**kw)
        repeat(n=1, **kw)

    predictor = dist.group.WORLD._get_backend(DEV)._predictor
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MIN, dist.ReduceOp.MAX,
               dist.ReduceOp.PRODUCT):
        predicted(op=op)
    for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.uint8, torch.int32, torch.int64):
        predicted(dtype=dtype)
        predicted(op=dist.ReduceOp.PRODUCT, dtype=dtype)
    predicted(op=dist.ReduceOp.MIN, dtype=torch.int64)
    # A rank's CPU tensor of the predicted collective takes part like a `neuron` one.
    until_predicted(size=6)
    c = _value(rank, 6) if rank == 0 else _value(rank, 6).to(DEV)
    dist.all_reduce(c)
    _close(c, torch.stack([_value(r, 6) for r in range(world)]).sum(0))
    # Alternating sizes (DDP's buckets): each transition is predicted after a round.
    for _ in range(3):
        repeat(n=1, size=5)
        repeat(n=1, size=7)
    # A misprediction every rank agrees on runs as an ordinary all_reduce.
    until_predicted(size=6)
    repeat(n=1, size=9)
    # Mismatches after a prediction: rank 0 repeats it, the others do not; the others'
    # tensor larger or smaller; also all ranks differing from the prediction.
    for sizes in ([6] + [8] * (world - 1), [6] + [3] * (world - 1), [2 + r for r in range(world)]):
        until_predicted(size=6)
        t = torch.ones(sizes[rank], device=DEV)
        _raises_mismatch(lambda: dist.all_reduce(t), f"a mismatched all_reduce after a prediction, sizes {sizes}")
        repeat(n=1, size=6)  # the group still works
    # The rank that repeated the prediction learns of the mismatch when it waits.
    until_predicted(size=6)
    t = torch.ones(6 if rank == 0 else 5, device=DEV)
    _raises_mismatch(lambda: dist.all_reduce(t, async_op=True).wait(),
                     "a mismatched async all_reduce after a prediction")
    assert t.cpu().eq(1).all(), "a failed all_reduce changed its tensor"
    repeat(n=2, size=6)
    # Not waited: the failed work's error stays with its wait(), and the next collective
    # on the same tensor takes part on every rank instead of raising it early.
    until_predicted(size=6)
    t = torch.ones(6 if rank == 0 else 5, device=DEV)
    if rank == 0:
        work = dist.all_reduce(t, async_op=True)
    else:
        _raises_mismatch(lambda: dist.all_reduce(t, async_op=True), "a mismatched async all_reduce")
    u = t if rank == 0 else torch.ones(6, device=DEV)
    dist.all_reduce(u)
    _close(u, torch.full((6,), float(world)))
    if rank == 0:
        _raises_mismatch(work.wait, "a failed async all_reduce waited after a later collective")
    # While an all_reduce is predicted, every collective takes part in its exchange: a
    # different collective on some ranks raises on all of them ...
    others = {
        "broadcast": lambda: dist.broadcast(torch.ones(6, device=DEV), src=0),
        "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(torch.empty(6 * world, device=DEV),
                                                                      torch.ones(6, device=DEV)),
        "all_gather": lambda: dist.all_gather([torch.empty(6, device=DEV) for _ in range(world)],
                                              torch.ones(6, device=DEV)),
        "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(torch.empty(6, device=DEV),
                                                                    torch.ones(6 * world, device=DEV)),
        "reduce": lambda: dist.reduce(torch.ones(6, device=DEV), dst=0),
        "barrier": dist.barrier,
    }
    for name, call in others.items():
        until_predicted(size=6)
        _raises_mismatch(lambda: dist.all_reduce(torch.ones(6, device=DEV)) if rank == 0 else call(),
                         f"{name} on ranks 1.. facing the predicted all_reduce on rank 0")
        _raises_mismatch(lambda: call() if rank == 0 else dist.all_reduce(torch.ones(6, device=DEV)),
                         f"{name} on rank 0 facing the predicted all_reduce on ranks 1..")
        repeat(n=1, size=6)
    # ... and the same collective on every rank runs, with its own results.
    until_predicted(size=6)
    b = torch.full((6,), float(rank), device=DEV)
    dist.broadcast(b, src=world - 1)
    _close(b, torch.full((6,), float(world - 1)))
    g = torch.empty(6 * world, device=DEV)
    dist.all_gather_into_tensor(g, _value(rank, 6).to(DEV))
    _close(g, torch.cat([_value(r, 6) for r in range(world)]))
    dist.barrier()
    # A loop of all_reduces and a broadcast is learned whole: the broadcast is then not
    # mispredicted, and both all_reduces are.
    for _ in range(2 * piggyback.CONTEXT):
        repeat(n=2, size=6)
        dist.broadcast(b, src=0)
    for _ in range(2):
        assert predictor.predict() is not None and "float32[6]" in predictor.predict()[0]
        repeat(n=2, size=6)
        assert predictor.predict() is None, "a broadcast is predicted as an all_reduce"
        dist.broadcast(b, src=0)
    # A rank whose earlier op failed a device-side check raises it from its next
    # collective without taking part; caught and retried, the histories stay together.
    until_predicted(size=6)
    if rank == world - 1:
        torch.ones(3, device=DEV)[torch.tensor([7], device=DEV)]  # out of range: raised later
        try:
            dist.all_gather_into_tensor(torch.empty(6 * world, device=DEV), torch.ones(6, device=DEV))
            raise AssertionError("the pending IndexError was not raised by the collective")
        except IndexError:
            pass
    for _ in range(3 * piggyback.CONTEXT):
        repeat(n=1, size=6)
        dist.broadcast(b, src=0)


@scenario
def dtensor():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    rank, world = _rank_world()
    mesh = init_device_mesh("neuron", (world,))
    assert mesh.device_type == "neuron"
    full = torch.arange(4 * world * 3, dtype=torch.float32).view(4 * world, 3)
    d = distribute_tensor(full.to(DEV), mesh, [Shard(0)])
    _close(d.to_local(), full[rank * 4:(rank + 1) * 4])
    _close(d.full_tensor(), full)
    w = torch.randn(3, 2, generator=torch.Generator().manual_seed(5))
    y = d @ distribute_tensor(w.to(DEV), mesh, [Replicate()])
    _close(y.redistribute(mesh, [Replicate()]).to_local(), full @ w, atol=1e-5, rtol=1e-5)
    _close(d.sum().full_tensor(), full.sum())


@scenario
def ddp_features():
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.checkpoint import checkpoint

    rank, world = _rank_world()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(6, 8)
            self.b = torch.nn.Linear(8, 2)
            self.unused = torch.nn.Linear(3, 3)

        def forward(self, x):
            # Activation checkpointing of the first layer (recomputed in backward).
            return self.b(checkpoint(lambda t: torch.tanh(self.a(t)), x, use_reentrant=False))

    torch.manual_seed(0)
    ref = Net()
    data = torch.randn(3, 2 * world, 6, generator=torch.Generator().manual_seed(1))
    net = Net().to(DEV)
    net.load_state_dict(ref.state_dict())
    # A tiny bucket cap makes every parameter its own bucket.
    ddp = DistributedDataParallel(net, find_unused_parameters=True, bucket_cap_mb=1e-4)
    mine = slice(2 * rank, 2 * rank + 2)
    with ddp.no_sync():  # accumulates locally, no all-reduce
        ddp(data[0, mine].to(DEV)).sum().backward()
    local = net.a.weight.grad.cpu()
    ddp(data[1, mine].to(DEV)).sum().backward()  # all-reduces the accumulated gradients
    for x in data[:2]:
        ref(x).sum().backward()
    for p_ref, p in zip(ref.parameters(), net.parameters()):
        if p_ref.grad is None:
            assert p.grad is None
            continue
        _close(p.grad, p_ref.grad / world, atol=1e-5, rtol=1e-5)
    ref_local = torch.autograd.grad(ref(data[0, mine]).sum(), ref.a.weight)[0]
    _close(local, ref_local, atol=1e-5, rtol=1e-5)


def _gpt_losses(parallel, steps=10):
    from examples.gpt import train_dist

    config = train_dist.DistConfig(parallel=parallel, steps=steps, batch_size=4, seq_len=16,
                                   n_layer=1, d_model=32)
    model = train_dist.build_model(config, DEV)
    losses = train_dist.train(config, model, DEV)
    return config, model, losses


def _check_gpt(parallel):
    from examples.gpt import train_dist

    config, model, losses = _gpt_losses(parallel)
    want = train_dist.train_single(config, torch.device("cpu"))
    assert len(losses) == len(want) == 10
    _close(torch.tensor(losses), torch.tensor(want), atol=2e-4, rtol=2e-4)
    return model


@scenario
def gpt_ddp():
    _check_gpt("ddp")


@scenario
def gpt_fsdp2_and_checkpoint():
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.tensor import DTensor

    from examples.gpt import train_dist

    model = _check_gpt("fsdp")
    # FSDP2 frees the unsharded parameters after forward and backward.
    some = next(model.blocks[0].parameters())
    assert isinstance(some, DTensor), type(some)
    state = get_model_state_dict(model)
    full = {k: v.full_tensor().cpu() for k, v in state.items()}
    path = os.path.join(os.environ["DIST_TEST_DIR"], "dcp")
    dcp.save(state, checkpoint_id=path)
    config = train_dist.DistConfig(parallel="fsdp", batch_size=4, seq_len=16, n_layer=1, d_model=32,
                                   seed=123)
    fresh = train_dist.build_model(config, DEV)
    fresh_state = get_model_state_dict(fresh)
    assert not torch.equal(next(iter(fresh_state.values())).full_tensor().cpu(), next(iter(full.values())))
    dcp.load(fresh_state, checkpoint_id=path)
    set_model_state_dict(fresh, fresh_state)
    for k, v in get_model_state_dict(fresh).items():
        _close(v.full_tensor(), full[k])


@scenario
def gpt_tp():
    _check_gpt("tp")


@scenario
def dead_rank():
    rank, world = _rank_world()
    if rank == world - 1:
        os._exit(0)  # leaves without a word: the others must not hang
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4, device=DEV))
    except Exception as e:  # gloo's DistBackendError (a RuntimeError)
        elapsed = time.monotonic() - start
        assert isinstance(e, RuntimeError), type(e)
        assert elapsed < float(os.environ["DIST_TEST_TIMEOUT"]) + 15, elapsed
        return
    raise AssertionError("all_reduce with a dead rank returned")


def main(out_dir: str, names) -> None:
    timeout = datetime.timedelta(seconds=float(os.environ.get("DIST_TEST_TIMEOUT", "60")))
    dist.init_process_group("neuron", timeout=timeout)
    rank = dist.get_rank()
    results, seconds = {}, {}
    for name in names:
        start = time.perf_counter()
        try:
            SCENARIOS[name]()
            results[name] = "ok"
        except Exception:  # reported per scenario; the test prints it
            results[name] = traceback.format_exc()
        seconds[name] = round(time.perf_counter() - start, 2)
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump({"scenarios": results, "seconds": seconds,
                       "fallback": torchneuron.fallback_ops()}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
