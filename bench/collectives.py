"""all_reduce bus bandwidth with 2 processes: backend `neuron` on `neuron` tensors vs
gloo on CPU tensors, in the same run.

One process group "cpu:gloo,neuron:neuron" serves both: CPU tensors go to
`ProcessGroupGloo`, `neuron` tensors to the host-staged `neuron` backend (device ->
host copy, the same gloo all_reduce, the result back on the device (on XLA:CPU its host
buffer becomes the device buffer), plus its cross-rank metadata check).

Timing: interleaved configurations, minimum over repetitions (bench/common.py). As in
nccl-tests, a timed block is a run of back-to-back calls (about 64 MB in all, at least
one call) started together by both processes (a barrier before the block, untimed), and
the time per call is the block's time over the number of calls: a single call after
an idle pause would mostly time how far apart the two processes woke up. Each call
ends when the result is in place (`torch.neuron.synchronize()`). Bus bandwidth follows
nccl-tests: bytes * 2 (n - 1) / n / seconds.

Usage: python bench/collectives.py [--sizes-mb 1 4 16 64 256] [--repeats 5]
(starts its 2 processes itself with torch.multiprocessing's spawn)
"""
import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(__file__))
from common import interleaved_min  # noqa: E402

WORLD = 2
#: Bytes all_reduced per timed block (so small sizes run many calls per block).
BLOCK_BYTES = 64 * 2**20


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 4, 16, 64, 256])
    p.add_argument("--repeats", type=int, default=5)
    return p.parse_args(argv)


def _worker(rank: int, port: int, sizes_mb, repeats: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # As torchrun does for each process: several processes share the cores, and
    # PyTorch's intra-op threads would wait on each other (a 1 MB CPU copy_ then takes
    # tens of ms on a loaded 2-core machine).
    torch.set_num_threads(1)
    dist.init_process_group("cpu:gloo,neuron:neuron", rank=rank, world_size=WORLD)
    if rank == 0:
        print(f"{'size':>8} {'gloo cpu GB/s':>14} {'neuron GB/s':>12} {'ratio':>6}")
    for mb in sizes_mb:
        numel = int(mb * 2**20) // 4
        cpu = torch.ones(numel)
        dev = torch.ones(numel, device="neuron")

        def on_cpu():
            dist.all_reduce(cpu)

        def on_neuron():
            dist.all_reduce(dev)
            torch.neuron.synchronize()

        def barrier():
            dist.all_reduce(torch.zeros(1))  # on gloo: a CPU tensor

        for fn in (on_cpu, on_neuron):  # warm up: connections, executables
            fn()
        calls = max(1, BLOCK_BYTES // (numel * 4))
        best = interleaved_min({"gloo": on_cpu, "neuron": on_neuron}, repeats=repeats, number=calls,
                               prepare=barrier)
        bus = {k: numel * 4 * 2 * (WORLD - 1) / WORLD / v / 1e9 for k, v in best.items()}
        # Both ranks time the same calls; rank 0's view is printed.
        if rank == 0:
            print(f"{mb:>6g}MB {bus['gloo']:>14.2f} {bus['neuron']:>12.2f} "
                  f"{bus['neuron'] / bus['gloo']:>5.2f}x", flush=True)
        del cpu, dev
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> None:
    a = _args(argv)
    mp.start_processes(_worker, args=(_free_port(), a.sizes_mb, a.repeats), nprocs=WORLD,
                       start_method="spawn")


if __name__ == "__main__":
    main()
