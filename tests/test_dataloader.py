"""A DataLoader with forked workers and pinned memory feeding a `neuron` training loop,
with CUDA's rules: workers prepare host tensors and never touch the device (a forked
child of a process that used the device refuses to), batches come back pinned."""
import os

import pytest
import torch
from torch.utils.data import DataLoader, Dataset


class _Squares(Dataset):
    """Deterministic samples; each also reports the process that made it and whether
    that process saw itself as a bad fork of a device-using parent."""

    def __len__(self):
        return 48

    def __getitem__(self, i):
        x = torch.full((4,), float(i % 7) / 7)
        return x, (x * x).sum(), os.getpid(), torch.neuron._is_in_bad_fork()


class _TouchesDevice(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.ones(2, device="neuron")


def _train(model, loader, device):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y, _, _ in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_forked_workers_and_pinned_batches_feed_a_training_loop():
    torch.ones(1, device="neuron").cpu()  # the parent uses the device before forking
    loader = DataLoader(_Squares(), batch_size=8, num_workers=2, pin_memory=True,
                        multiprocessing_context="fork")
    batches = list(loader)
    assert len(batches) == 6
    pids = {int(p) for _, _, pid, _ in batches for p in pid}
    assert len(pids) == 2 and os.getpid() not in pids  # made by the two workers
    assert all(bool(flag) for _, _, _, bad in batches for flag in bad)
    for x, y, _, _ in batches:
        assert x.is_pinned() and y.is_pinned()

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    reference = torch.nn.Linear(4, 1)
    reference.load_state_dict(model.state_dict())
    losses = _train(model.to("neuron"), loader, "neuron")
    expected = _train(reference, DataLoader(_Squares(), batch_size=8), "cpu")
    torch.testing.assert_close(losses, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model.weight.detach().cpu(), reference.weight.detach(), atol=1e-5, rtol=1e-5)
    assert not torch.neuron._is_in_bad_fork()


def test_forked_worker_that_touches_the_device_raises():
    torch.ones(1, device="neuron").cpu()
    loader = DataLoader(_TouchesDevice(), batch_size=2, num_workers=1, multiprocessing_context="fork")
    with pytest.raises(RuntimeError, match="Cannot re-initialize neuron in forked subprocess"):
        next(iter(loader))


def test_pin_memory_in_main_process():
    loader = DataLoader(_Squares(), batch_size=16, num_workers=0, pin_memory=True)
    x, y, _, bad = next(iter(loader))
    assert x.is_pinned() and y.is_pinned()
    assert not bad.any()
    assert torch.equal(x.to("neuron", non_blocking=True).cpu(), x)
