"""Storages release their device buffers when they die: long loops of eager ops and a
small training loop leave the storage registry, the allocator statistics and the live
PJRT buffers flat."""
import gc

import jax
import torch

from torchneuron.runtime import storage

N = torch.neuron


def _footprint():
    gc.collect()
    N.synchronize()
    return len(storage.buffers), N.memory_allocated(), len(jax.live_arrays())


def test_dead_storage_releases_its_buffer():
    before = _footprint()
    x = torch.ones(1000, device="neuron")
    view = x[10:20]
    assert x.data_ptr() in storage.buffers
    handle = x.data_ptr()
    del x
    gc.collect()
    assert handle in storage.buffers  # the view keeps the storage alive
    del view
    assert handle not in storage.buffers
    assert _footprint() == before


def test_executable_cache_does_not_keep_arguments_alive():
    """The first call of an op compiles an executable; it must not hold the call's tensors."""
    before = _footprint()
    big = torch.empty(3, 1024, 87, device="neuron")  # a shape no other test uses
    big.fill_(2.0)
    out = (big * 3).add_(1)
    (big.t() if big.dim() == 2 else big.transpose(0, 2)).mul_(2)
    del big, out
    assert _footprint() == before


def test_ten_thousand_small_steps_stay_flat():
    def step(i):
        x = torch.full((8, 8), float(i)).to("neuron")  # a fresh host tensor each time
        return (x * 2 + 1).sum()

    for i in range(20):  # compile everything first
        step(i)
    before = _footprint()
    total = 0.0
    for i in range(10_000):
        y = step(i)
        if i % 2500 == 0:
            total += y.item()
    del y
    assert _footprint() == before
    assert total == sum((2 * i + 1) * 64.0 for i in range(0, 10_000, 2500))


def test_training_loop_stays_flat():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = torch.randn(300, 4, 8)
    target = data.sum(-1, keepdim=True)

    def step(i):
        loss = torch.nn.functional.mse_loss(model(data[i].to("neuron")), target[i].to("neuron"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    first = step(0).item()
    step(1)
    before = _footprint()
    for i in range(2, 300):
        loss = step(i)
    last = loss.item()
    del loss
    assert _footprint() == before
    assert last < first  # it trained


def test_peak_statistics_follow_a_loop():
    gc.collect()
    N.reset_peak_memory_stats()
    base = N.memory_allocated()
    for _ in range(50):
        a = torch.ones(1024, device="neuron")  # 4 KiB
        b = a * 2
        del a, b
    assert N.memory_allocated() == base
    assert N.max_memory_allocated() - base == 2 * 4096  # never more than a and b at once


def test_memory_summary_reports_live_bytes():
    torch.neuron.synchronize()
    before = torch.neuron.memory_allocated()
    x = torch.ones(256 * 1024, device="neuron")  # 1 MiB
    text = torch.neuron.memory_summary()
    assert torch.neuron.memory_allocated() == before + 1024 * 1024
    line = next(l for l in text.splitlines() if l.startswith("Allocated memory"))
    current_mib, unit = float(line.split()[2]), line.split()[3]
    assert unit == "MiB"
    assert abs(current_mib - (before + 1024 * 1024) / 2**20) < 0.01
    del x
