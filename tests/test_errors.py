"""Bad input on `neuron` raises what CPU (or, for device questions, CUDA) raises:
shape and dtype errors, tensors of two devices in one op, invalid device indices,
and in-place writes whose memory overlaps."""
import pytest
import torch

from helpers import no_fallback


def _both(fn, *cpu_args):
    """The exception types fn raises on CPU and on neuron copies of the arguments
    (None where it does not raise), plus the messages."""
    out = []
    for device in ("cpu", "neuron"):
        args = [a.clone().to(device) for a in cpu_args]
        try:
            fn(*args)
            out.append((None, ""))
        except Exception as exc:  # noqa: BLE001 - comparing whatever is raised
            out.append((type(exc), str(exc)))
    return out


SHAPE_ERRORS = {
    "broadcast": (lambda a, b: a + b, torch.ones(3), torch.ones(4)),
    "inplace_broadcast": (lambda a, b: a.add_(b), torch.ones(3), torch.ones(2, 3)),
    "view_numel": (lambda a: a.view(5), torch.ones(6)),
    "view_stride": (lambda a: a.t().view(-1), torch.ones(2, 3)),
    "reshape": (lambda a: a.reshape(4, -1), torch.ones(6)),
    "copy_shape": (lambda a, b: a.copy_(b), torch.ones(3), torch.ones(4)),
    "expand": (lambda a: a.expand(3, 4), torch.ones(2)),
    "select": (lambda a: a.select(0, 5), torch.ones(2)),
    "as_strided_bounds": (lambda a: a.as_strided((10,), (1,), 0), torch.ones(2)),
    "unfold": (lambda a: a.unfold(0, 5, 1), torch.ones(3)),
    "inplace_promotion": (lambda a, b: a.add_(b), torch.ones(3, dtype=torch.int64), torch.ones(3)),
    "view_dtype": (lambda a: a.view(torch.int64), torch.ones(3)),
    "bool_sub": (lambda a, b: a - b, torch.ones(3, dtype=torch.bool), torch.ones(3, dtype=torch.bool)),
    "mm_shapes": (lambda a, b: a @ b, torch.ones(2, 3), torch.ones(2, 3)),
    "cat_dims": (lambda a, b: torch.cat([a, b]), torch.ones(2, 3), torch.ones(2, 4)),
    "squeeze_dim": (lambda a: a.squeeze(5), torch.ones(2, 3)),
    "permute_dims": (lambda a: a.permute(0, 0), torch.ones(2, 3)),
}


@pytest.mark.parametrize("name", list(SHAPE_ERRORS))
def test_bad_shapes_and_dtypes_raise_like_cpu(name):
    fn, *args = SHAPE_ERRORS[name]
    (cpu_type, cpu_msg), (dev_type, dev_msg) = _both(fn, *args)
    assert cpu_type is not None, "the case must be an error on CPU"
    assert dev_type is cpu_type, (cpu_msg, dev_msg)


@pytest.mark.parametrize("name", ["view_numel", "view_stride", "expand", "select", "as_strided_bounds",
                                  "view_dtype", "bool_sub", "copy_shape"])
def test_error_messages_match_cpu(name):
    fn, *args = SHAPE_ERRORS[name]
    (_, cpu_msg), (_, dev_msg) = _both(fn, *args)
    assert dev_msg == cpu_msg


def test_mixing_cpu_and_neuron_tensors_raises_like_cuda():
    n = torch.ones(3, device="neuron")
    c = torch.ones(3)
    for fn in (lambda: n + c, lambda: c + n, lambda: c.add_(n), lambda: n.add_(c), lambda: torch.where(n > 0, n, c),
               lambda: n + torch.ones(1), lambda: torch.mul(n, 2, out=torch.empty(3)),
               lambda: torch.mul(n[0], 2, out=torch.tensor(0.0)), lambda: torch.tensor(1.0).add_(n[0])):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            fn()


def test_zero_dim_cpu_tensors_are_scalars():
    n = torch.arange(3.0, device="neuron")
    with no_fallback():
        assert torch.equal((n + torch.tensor(2.0)).cpu(), torch.arange(3.0) + 2)
        assert torch.equal((torch.tensor(2.0) * n).cpu(), torch.arange(3.0) * 2)
        assert torch.equal(n.clone().mul_(torch.tensor(3)).cpu(), torch.arange(3.0) * 3)
        assert (n + torch.tensor(2)).dtype == torch.float32  # a 0-dim int does not promote
        assert torch.equal(torch.where(n > 0, n, torch.tensor(-1.0)).cpu(), torch.tensor([-1.0, 1.0, 2.0]))


@pytest.mark.parametrize("device", ["neuron:5", "neuron:1", torch.device("neuron", 7)], ids=str)
def test_invalid_device_index_raises(device):
    for make in (lambda: torch.ones(2, device=device), lambda: torch.ones(2).to(device),
                 lambda: torch.empty(2, device=device), lambda: torch.zeros(2, device=device),
                 lambda: torch.tensor([1.0], device=device), lambda: torch.randn(2, device=device),
                 lambda: torch.arange(2, device=device)):
        with pytest.raises(RuntimeError, match="invalid device"):
            make()
    with pytest.raises(RuntimeError, match="invalid device"):
        torch.neuron.set_device(device)
    with pytest.raises(RuntimeError, match="invalid device"):
        with torch.neuron.device(device):
            pass
    assert torch.neuron.current_device() == 0


def test_malformed_device_string_raises():
    with pytest.raises(RuntimeError, match="Invalid device string"):
        torch.ones(2, device="neuron:-1")
    with pytest.raises(ValueError):
        torch.neuron.memory_allocated("cpu")


OVERLAP = {
    "copy_partial": lambda x: x[1:].copy_(x[:-1]),
    "add_partial": lambda x: x[1:].add_(x[:-1]),
    "out_partial": lambda x: torch.add(x[:-1], 1, out=x[1:]),
    "sigmoid_out_partial": lambda x: torch.sigmoid(x[:-1], out=x[1:]),
    "expanded_add_": lambda x: x[:1].expand(3).add_(1),
    "expanded_copy_": lambda x: x[:1].expand(3).copy_(torch.arange(3.0, device=x.device)),
    "expanded_relu_": lambda x: x[:1].expand(3).relu_(),
}


@pytest.mark.parametrize("name", list(OVERLAP))
def test_overlapping_writes_raise_like_cpu(name):
    (cpu_type, cpu_msg), (dev_type, dev_msg) = _both(OVERLAP[name], torch.arange(6.0))
    assert cpu_type is RuntimeError and dev_type is RuntimeError
    assert dev_msg == cpu_msg


ALLOWED_OVERLAP = {
    "same_tensor": lambda x: x.add_(x),
    "out_is_input": lambda x: torch.mul(x, 2, out=x),
    "out_is_input_view": lambda x: torch.add(x[:3], x[3:], out=x[:3]),
    "disjoint_strided": lambda x: x[::2].add_(x[1::2]),
    "expanded_fill_": lambda x: x[:1].expand(3).fill_(2),
    "disjoint_slices": lambda x: x[:3].copy_(x[3:]),
}


@pytest.mark.parametrize("name", list(ALLOWED_OVERLAP))
def test_allowed_aliasing_matches_cpu(name):
    cpu = torch.arange(6.0)
    dev = cpu.to("neuron")
    ALLOWED_OVERLAP[name](cpu)
    ALLOWED_OVERLAP[name](dev)
    assert torch.equal(dev.cpu(), cpu)
