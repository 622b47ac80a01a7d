"""torch.distributed on `neuron`: the c10d backend, DDP, FSDP2, tensor parallel, DTensor,
distributed checkpoints and failure behaviour, in real multi-process runs.

Each launch starts torchrun (or one bare process) on tests/dist_worker.py, which runs a
list of scenarios per rank and writes their outcome; one test per scenario reads it.
Launches are shared by the tests of a module-scoped fixture, since starting the
processes costs more than most scenarios.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "dist_worker.py"

COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast_reduce_gather_scatter",
               "all_to_all", "point_to_point", "coalesced", "functional_collectives",
               "compiled_functional_collectives", "mismatch_raises", "predicted_all_reduce", "dtensor",
               "ddp_features"]
# CI runs DDP, FSDP2 (with the checkpoint round trip) and tensor-parallel training on
# two ranks (about 45 s together) and a sample of the collectives on four (within the
# suite's time budget); the other four-rank cases are --runslow.
TRAINING_CI = ["gpt_ddp", "gpt_fsdp2_and_checkpoint", "gpt_tp"]
FOUR_CI = ["all_reduce", "reduce_scatter", "all_to_all", "point_to_point", "predicted_all_reduce"]
FOUR_SLOW = [name for name in COLLECTIVES if name not in FOUR_CI]

pytestmark = pytest.mark.timeout(900)


def _env(tmp: Path, pg_timeout: float) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.update(DIST_TEST_DIR=str(tmp), DIST_TEST_TIMEOUT=str(pg_timeout), OMP_NUM_THREADS="1",
               TORCHNEURON_STRICT="1")
    return env


def launch(tmp: Path, nproc: int, scenarios, pg_timeout: float = 120, timeout: float = 600) -> dict:
    """Runs `scenarios` on `nproc` ranks under torchrun; {rank: the worker's report}."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           str(WORKER), str(tmp), *scenarios]
    proc = subprocess.run(cmd, env=_env(tmp, pg_timeout), capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)
    reports = {}
    for rank in range(nproc):
        path = tmp / f"rank{rank}.json"
        if path.exists():
            reports[rank] = json.loads(path.read_text())
    assert reports, f"no rank reported (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    return reports


def assert_ok(reports: dict, name: str, ranks) -> None:
    for rank in ranks:
        outcome = reports.get(rank, {}).get("scenarios", {}).get(name, "did not run")
        assert outcome == "ok", f"rank {rank}, {name}:\n{outcome}"


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    # dead_rank ends the run: the last rank leaves.
    # local_rank_device must come first: it needs a process with no neuron tensor yet.
    return launch(tmp_path_factory.mktemp("two"), 2, ["local_rank_device"] + COLLECTIVES + TRAINING_CI + ["dead_rank"],
                  pg_timeout=60)


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    return launch(tmp_path_factory.mktemp("four"), 4, FOUR_CI)


@pytest.fixture(scope="module")
def four_ranks_slow(tmp_path_factory):
    return launch(tmp_path_factory.mktemp("four_slow"), 4, FOUR_SLOW)


@pytest.fixture
def world_of_one():
    """A process group of this process alone (backend `neuron`, in-memory store)."""
    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


def test_backend_registered_for_neuron():
    assert "neuron" in dist.Backend.backend_list
    assert dist.get_default_backend_for_device("neuron") == "neuron"
    assert dist.get_default_backend_for_device("cpu") == "gloo"  # unchanged
    assert dist.Backend.backend_capability["neuron"] == ["cpu", "neuron"]


def test_default_backend_on_a_neuron_machine():
    """`init_process_group()` with no backend picks the accelerator's registered
    backend, as it picks nccl for CUDA."""
    dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert dist.group.WORLD._get_backend(torch.device("neuron")).name() == "neuron"
        t = torch.full((2,), 3.0, device="neuron")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        torch.testing.assert_close(t.cpu(), torch.full((2,), 3.0))
    finally:
        dist.destroy_process_group()


def test_mixed_backend_string():
    """``"cpu:gloo,neuron:neuron"``: CPU tensors go to gloo, `neuron` tensors to ours."""
    dist.init_process_group("cpu:gloo,neuron:neuron", store=dist.HashStore(), rank=0, world_size=1)
    try:
        group = dist.group.WORLD
        assert group._get_backend(torch.device("neuron")).name() == "neuron"
        assert group._get_backend(torch.device("cpu")).name() == "gloo"
        t = torch.arange(3.0, device="neuron")
        dist.all_reduce(t)
        torch.testing.assert_close(t.cpu(), torch.arange(3.0))
    finally:
        dist.destroy_process_group()


def test_bound_device_and_subgroup():
    """`device_id=` binds the group to `neuron:0` (PyTorch then asks the backend for its
    capabilities); barriers with device ids and subgroups use the backend too."""
    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1,
                            device_id=torch.device("neuron:0"))
    try:
        assert dist.group.WORLD.bound_device_id == torch.device("neuron:0")
        dist.barrier(device_ids=[0])
        sub = dist.new_group([0])
        assert dist.get_backend(sub) == "neuron"
        t = torch.ones(2, dtype=torch.bfloat16, device="neuron")
        dist.all_reduce(t, group=sub)
        torch.testing.assert_close(t.cpu(), torch.ones(2, dtype=torch.bfloat16))
    finally:
        dist.destroy_process_group()


def test_compiled_collectives_run_in_strict_mode(world_of_one, monkeypatch):
    """A compiled graph with `_c10d_functional` ops is split around them and runs them
    through the process group; strict mode allows it (communication, not a fallback)."""
    import torch.distributed._functional_collectives as funcol

    from torchneuron import config

    monkeypatch.setattr(config, "STRICT", True)

    def fn(x):
        return funcol.all_reduce(torch.sin(x) * 2, "sum", world_of_one) + 1

    x = torch.randn(5)
    torch._dynamo.reset()
    out = torch.compile(fn, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), torch.sin(x) * 2 + 1)


def test_staged_results_become_device_buffers(world_of_one):
    """On XLA:CPU a result that fills a whole storage is not copied back: its host
    buffer becomes the device buffer. The pool then hands that buffer out again only
    once the device tensor is gone, and the tensor's version counter moves as with
    copy_; a view still takes the copy_ path."""
    from torchneuron.distributed import backend, staging
    from torchneuron.runtime import pjrt, storage

    if pjrt.platform() != "cpu":
        pytest.skip("host buffers are device buffers only on XLA:CPU")
    t = torch.arange(6.0, device="neuron")
    version = t._version
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert t._version > version
    adopted = storage.buffers[t.untyped_storage().data_ptr()].unsafe_buffer_pointer()
    pool = backend._POOL
    taken = [pool.acquire((6,), torch.float32) for _ in range(3)]
    assert adopted not in {h.data_ptr() for h in taken}
    for h in taken:
        h.fill_(-1.0)  # as a later collective would write its buffers
        pool.release(h)
    torch.testing.assert_close(t.cpu(), torch.arange(6.0))
    del t  # PJRT releases the aliased memory (the DLPack import) on its own thread
    deadline = time.monotonic() + 10
    while adopted not in {pool.acquire((6,), torch.float32).data_ptr() for _ in range(4)}:
        assert time.monotonic() < deadline, "the pool never got the adopted buffer back"
        time.sleep(0.01)
    base = torch.zeros(2, 3, device="neuron")
    row = base[1]
    row.copy_(torch.ones(3))
    dist.all_reduce(row)
    torch.testing.assert_close(base.cpu(), torch.tensor([[0.0] * 3, [1.0] * 3]))
    assert not staging.adopt(row, torch.ones(3))
    scalar = torch.tensor(2.5, device="neuron")  # 0-dim: read and adopted too
    dist.all_reduce(scalar)
    assert scalar.item() == 2.5


def test_host_pool_reuses_only_unshared_buffers():
    from torchneuron.distributed import staging

    pool = staging.HostPool(max_free_bytes=1 << 20)
    a = pool.acquire((4, 4), torch.float32)
    ptr = a.data_ptr()
    keep = a.view(-1)  # someone still holds the memory
    pool.release(a)
    del a
    assert pool.acquire((16,), torch.float32).data_ptr() != ptr
    del keep
    assert pool.acquire((2, 8), torch.float32).data_ptr() == ptr
    # Over budget, the pool forgets buffers still in use elsewhere before refusing more.
    small = staging.HostPool(max_free_bytes=64)
    held = small.acquire((16,), torch.float32)
    small.release(held)
    ptrs = set()
    for _ in range(2):
        free = small.acquire((16,), torch.float32)
        ptrs.add(free.data_ptr())
        small.release(free)
        del free
    assert held.data_ptr() not in ptrs and len(ptrs) == 1
    assert small._free_bytes == 64


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint8,
                                   torch.int32, torch.int64])
@pytest.mark.parametrize("op", ["SUM", "PRODUCT", "MIN", "MAX"])
def test_piggyback_header_holds_every_rank_digest(dtype, op):
    """Each rank's header row survives the reduction exactly (the others hold its
    identity), for every dtype and op a predicted all_reduce carries its check in."""
    from torchneuron.distributed import metadata, piggyback

    world = 3
    options = dist.AllreduceOptions()
    options.reduceOp = getattr(dist.ReduceOp, op)  # a ReduceOp, as the backend receives it
    reduce_op = options.reduceOp
    digests = [metadata.digest(f"allreduce(x{r})") for r in range(world)] + [-1, 2**63 - 1]
    headers = []
    for r in range(world):
        h = torch.empty(piggyback.header_len(world), dtype=dtype)
        piggyback.write_header(h, r, digests[r], reduce_op)
        headers.append(h)
    stacked = torch.stack(headers).to(torch.float64 if dtype.is_floating_point else torch.int64)
    reduced = {"SUM": lambda: stacked.sum(0), "PRODUCT": lambda: stacked.prod(0),
               "MIN": lambda: stacked.min(0).values, "MAX": lambda: stacked.max(0).values}[op]().to(dtype)
    assert piggyback.read_header(reduced) == [piggyback.pieces(d) for d in digests[:world]]
    assert piggyback.pieces(-1) == (255,) * 8 and piggyback.spec([torch.ones(2, dtype=dtype)], reduce_op)


def _guesses(predictor, texts, specs):
    """(guess, actual) for each step of `texts` fed to `predictor`."""
    out = []
    for text in texts:
        guess = predictor.predict()
        out.append((guess[0] if guess else None, text))
        predictor.record(text, specs[text])
    return out


def test_piggyback_predicts_confirmed_repeats_only():
    from torchneuron.distributed import piggyback

    spec = piggyback.Spec(4, torch.float32, dist.ReduceOp.SUM)
    specs = {"a": spec, "b": spec, "c": None}
    # Context of one: a->a must be seen twice in a row before it is predicted.
    p = piggyback.Predictor(context=1)
    assert [g for g, _ in _guesses(p, "aaaa", specs)] == [None, None, None, "a"]
    p.record("b", spec)  # a->b replaces a->a, unconfirmed
    assert p.predict() is None
    # c cannot carry its check: never predicted, though c always follows b.
    p = piggyback.Predictor(context=1)
    assert all(g != "c" for g, _ in _guesses(p, "bc" * 6, specs))


def test_piggyback_context_learns_unequal_buckets():
    """DDP's equal-sized buckets make A A A B; with the default context every step is
    predicted correctly once the period has been seen twice, where one collective of
    context mispredicts each B."""
    from torchneuron.distributed import piggyback

    spec = piggyback.Spec(4, torch.float32, dist.ReduceOp.SUM)
    specs = {"a": spec, "b": spec}
    steps = _guesses(piggyback.Predictor(), "aaab" * 10, specs)
    assert sum(g is not None and g != t for g, t in steps) <= 1  # while the period is new
    assert all(g == t for g, t in steps[2 * piggyback.CONTEXT:])
    short = _guesses(piggyback.Predictor(context=1), "aaab" * 10, specs)
    assert sum(g is not None and g != t for g, t in short) >= 8
    # A new steady repetition is predicted again soon after it starts.
    steps = _guesses(piggyback.Predictor(), "aaab" * 4 + "b" * 5, specs)
    assert [g for g, _ in steps[-3:]] == ["b"] * 3


@pytest.mark.parametrize("name", ["local_rank_device"] + COLLECTIVES + TRAINING_CI)
def test_two_ranks(two_ranks, name):
    assert_ok(two_ranks, name, range(2))


def test_two_ranks_no_cpu_fallback(two_ranks):
    # The workers run with TORCHNEURON_STRICT=1, so a fallback would also have failed a
    # scenario; the counts say which op it was.
    for rank, report in two_ranks.items():
        assert not report["fallback"], (rank, report["fallback"])


@pytest.mark.parametrize("name", FOUR_CI)
def test_four_ranks(four_ranks, name):
    assert_ok(four_ranks, name, range(4))


@pytest.mark.slow
@pytest.mark.parametrize("name", FOUR_SLOW)
def test_four_ranks_all(four_ranks_slow, name):
    assert_ok(four_ranks_slow, name, range(4))


def test_dead_rank_fails_within_timeout(two_ranks):
    """The last rank exits before a collective; the others' all_reduce raises a
    RuntimeError (gloo: the peer closed the connection, or the 60 s process-group
    timeout) instead of hanging: the worker checks the type and the time taken."""
    assert_ok(two_ranks, "dead_rank", [0])
    assert two_ranks[0]["seconds"]["dead_rank"] < 60 + 15


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rank_that_never_joins_fails_init_within_timeout():
    """Rank 0 of a world of two, alone: init_process_group raises torch.distributed's
    DistStoreError after the 5 s process-group timeout (its TCPStore rendezvous)."""
    start = time.monotonic()
    with pytest.raises(dist.DistStoreError):
        dist.init_process_group("neuron", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0,
                                world_size=2, timeout=datetime.timedelta(seconds=5))
    assert time.monotonic() - start < 30
    assert not dist.is_initialized()
