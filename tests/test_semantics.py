"""Tensor semantics of `neuron` against CPU PyTorch: strides and storage offsets, views
sharing storage, in-place writes through aliases, autograd through views, `.data`,
Parameters and tied weights, storage resizing, `set_`, cross-device `copy_`, scalars,
printing, `data_ptr` identity, default device and factories, `non_blocking`."""
import pytest
import torch

from helpers import check, no_fallback, TiedModel

VIEWS = {
    "slice": lambda x: x[1:3, ::2],
    "select": lambda x: x[2],
    "transpose": lambda x: x.transpose(0, 1),
    "permute": lambda x: x.reshape(2, 2, 6).permute(2, 0, 1),
    "expand": lambda x: x[0:1].expand(3, 6),
    "view": lambda x: x.view(3, 8),
    "reshape": lambda x: x.reshape(8, 3),
    "unfold": lambda x: x.unfold(1, 3, 2),
    "diagonal": lambda x: x.diagonal(1),
    "as_strided": lambda x: x.as_strided((3, 3), (2, 1), 1),
    "unsqueeze": lambda x: x.unsqueeze(1),
    "squeeze": lambda x: x[:1].squeeze(0),
    "narrow": lambda x: x.narrow(1, 2, 3),
    "split": lambda x: x.split(2, 1)[1],
    "chunk": lambda x: x.chunk(3, 0)[1],
    "unbind": lambda x: x.unbind(1)[3],
    "view_dtype": lambda x: x.view(torch.int32),
}


def _base():
    return torch.arange(24.0).reshape(4, 6).clone()  # not itself a view


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_geometry_and_storage_sharing(name):
    f = VIEWS[name]
    cpu = _base()
    dev = cpu.to("neuron")
    expected, actual = f(cpu), f(dev)
    assert actual.shape == expected.shape
    assert actual.stride() == expected.stride()
    assert actual.storage_offset() == expected.storage_offset()
    assert actual.untyped_storage().data_ptr() == dev.untyped_storage().data_ptr()
    assert actual.data_ptr() - dev.data_ptr() == expected.data_ptr() - cpu.data_ptr()
    assert (actual._base is dev) == (expected._base is cpu)
    assert actual.is_contiguous() == expected.is_contiguous()
    with no_fallback():
        assert torch.equal(actual.cpu(), expected)


@pytest.mark.parametrize("name", ["slice", "select", "permute", "diagonal", "narrow", "unbind", "view"])
def test_inplace_on_view_visible_through_base_and_aliases(name):
    f = VIEWS[name]

    def run(x):
        x = x.clone()
        other = x.t()  # a second alias of the same storage
        v = f(x)
        v.mul_(-1)
        v.add_(0.5)
        return x, other, v

    check(run, _base())


def test_inplace_on_base_visible_through_views():
    def run(x):
        x = x.clone()
        views = [f(x) for f in VIEWS.values() if f is not VIEWS["view_dtype"]]
        x.mul_(2)
        x[1].fill_(-1)
        x.t()[2].zero_()
        return views

    check(run, _base())


def test_writes_through_non_overlapping_strided_views():
    def run(x):
        x = x.clone()
        x[::2, 1::2] = 7.0
        x.t()[1:3].copy_(torch.ones(2, 4, device=x.device) * 3)
        x.diagonal().fill_(-5)
        x.as_strided((2, 2), (7, 1), 2).mul_(10)
        x.view(torch.int32)[3, 3] = 12345
        return x

    check(run, _base())


def test_contiguous_and_clone_of_views():
    check(lambda x: [x.t().contiguous(), x[:, 1::2].clone(), x.t().clone(memory_format=torch.preserve_format)],
          _base())
    dev = _base().to("neuron")
    assert dev.t().clone().stride() == _base().t().clone().stride()
    assert dev.t().contiguous().is_contiguous()


def test_to_device_preserves_dense_strides():
    cpu = torch.randn(3, 4, 5).permute(2, 0, 1)
    dev = cpu.to("neuron")
    assert dev.stride() == cpu.clone().stride()
    assert torch.equal(dev.cpu(), cpu)
    sliced = torch.randn(6, 8)[::2, 1::3]
    dev = sliced.to("neuron")
    assert dev.stride() == sliced.clone().stride()
    assert torch.equal(dev.cpu(), sliced)


def _grad(f, x):
    x = x.detach().requires_grad_()
    y = f(x)
    weights = torch.arange(y.numel(), dtype=y.dtype, device=y.device).reshape(y.shape)
    y.backward(weights)
    return x.grad


# Backward of every view kind (slices, strided selections, broadcasts, overlapping
# windows, multi-output splits); the others reduce to these.
@pytest.mark.parametrize("name", ["slice", "select", "permute", "expand", "unfold", "diagonal", "as_strided",
                                  "split", "unbind", "reshape"])
def test_autograd_through_views(name):
    f = VIEWS[name]
    check(lambda x: _grad(lambda t: f(t) * 2, x), torch.randn(4, 6))


def test_autograd_through_inplace_ops_on_views():
    def f(t):
        y = t * 1
        y[1].mul_(3)
        y.t()[0].add_(1)
        y.diagonal().mul_(2)
        return y * y

    check(lambda x: _grad(f, x), torch.randn(4, 6))


def test_version_counter_error_on_saved_tensor():
    x = torch.randn(3, device="neuron", requires_grad=True)
    y = x.sigmoid()  # saves its output
    version = y._version
    y.mul_(2)
    assert y._version == version + 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward(torch.ones(3, device="neuron"))


def test_version_counter_shared_by_views():
    x = torch.zeros(4, 4, device="neuron")
    v = x[1:]
    before = x._version
    v.add_(1)
    assert x._version == v._version == before + 1


def test_inplace_on_leaf_requiring_grad_raises():
    x = torch.randn(3, device="neuron", requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.add_(1)


def test_data_assignment():
    p = torch.nn.Parameter(torch.randn(3, device="neuron"))
    p.data = torch.arange(5.0, device="neuron")
    assert isinstance(p, torch.nn.Parameter) and p.requires_grad and p.shape == (5,)
    assert torch.equal(p.detach().cpu(), torch.arange(5.0))
    # across devices, as on CUDA
    q = torch.nn.Parameter(torch.randn(2))
    q.data = torch.ones(2, device="neuron")
    assert q.device.type == "neuron" and isinstance(q, torch.nn.Parameter)
    q.data = torch.zeros(3)
    assert q.device.type == "cpu" and q.shape == (3,)
    # .data shares storage and bypasses autograd
    r = torch.randn(3, device="neuron", requires_grad=True)
    r.data.mul_(0)
    assert torch.equal(r.detach().cpu(), torch.zeros(3))



def test_parameters_and_tied_weights_survive_module_to():
    m = TiedModel()
    param = m.emb.weight
    m.to("neuron")
    assert m.emb.weight is param  # converted in place through .data, as on CUDA
    assert m.out.weight is m.emb.weight
    assert isinstance(param, torch.nn.Parameter) and param.is_leaf and param.requires_grad
    assert param.device == torch.device("neuron", 0)
    m.neuron()
    m.to("cpu")
    assert m.out.weight is m.emb.weight and m.emb.weight.device.type == "cpu"


def test_parameter_grad_accumulates_on_device():
    lin = torch.nn.Linear(4, 2).to("neuron")
    x = torch.randn(3, 4)
    ref = torch.nn.Linear(4, 2)
    ref.load_state_dict({k: v.cpu() for k, v in lin.state_dict().items()})
    for _ in range(2):
        lin(x.to("neuron")).sum().backward()
        ref(x).sum().backward()
    assert lin.weight.grad.device.type == "neuron"
    torch.testing.assert_close(lin.weight.grad.cpu(), ref.weight.grad)
    torch.testing.assert_close(lin.bias.grad.cpu(), ref.bias.grad)


def test_data_ptr_identifies_storage():
    a = torch.ones(4, device="neuron")
    b = torch.ones(4, device="neuron")
    assert a.data_ptr() != b.data_ptr()
    assert a[1:].untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
    assert a[1:].data_ptr() == a.data_ptr() + a.element_size()
    empties = [torch.empty(0, device="neuron") for _ in range(3)]
    assert len({e.untyped_storage().data_ptr() for e in empties}) == 3
    m = TiedModel().to("neuron")
    ptrs = {}
    for name, p in m.state_dict().items():
        ptrs.setdefault(p.untyped_storage().data_ptr(), []).append(name)
    assert sorted(ptrs.values()) == [["emb.weight", "out.weight"]]


def test_untyped_storage_resize_to_zero_and_back():
    """FSDP2 frees a parameter's memory with storage.resize_(0) and restores it later."""
    p = torch.arange(1024.0, device="neuron")
    view = p.view(32, 32)
    storage = p.untyped_storage()
    allocated = torch.neuron.memory_allocated()
    storage.resize_(0)
    assert storage.nbytes() == 0
    assert torch.neuron.memory_allocated() == allocated - 4096
    storage.resize_(4096)
    assert torch.neuron.memory_allocated() == allocated
    p.copy_(torch.arange(1024.0) * 3)
    assert torch.equal(view.cpu(), (torch.arange(1024.0) * 3).view(32, 32))
    assert view.untyped_storage().data_ptr() == p.untyped_storage().data_ptr()


def test_untyped_storage_resize_keeps_prefix():
    for dtype in (torch.float32, torch.bool, torch.float16, torch.int64):
        values = torch.arange(1, 6).to(dtype)
        dev = values.to("neuron")
        for nbytes in (3 * values.element_size() + 1, 16 * values.element_size()):
            dev.untyped_storage().resize_(nbytes)
            assert dev.untyped_storage().nbytes() == nbytes
            n = min(3, nbytes // values.element_size())
            assert torch.equal(dev[:n].cpu(), values[:n])


def test_copy_to_device_leaves_the_host_tensor_resizable():
    """Tensor.numpy() would pin the source's storage size; transfers must not."""
    cpu = torch.arange(5.0)
    cpu.to("neuron")
    torch.zeros(5, device="neuron").copy_(cpu)
    cpu.resize_(10)
    cpu.untyped_storage().resize_(80)
    scalar = torch.tensor(2.0)
    torch.ones(3, device="neuron") * scalar
    scalar.resize_(2)


def test_tensor_resize_():
    def run(x):
        x = x.clone()
        x.resize_(2, 3)
        head = x.clone()
        x.resize_(2)
        x.resize_(4, 4)
        return head, x[0, :2]

    check(run, torch.arange(8.0))


def test_set_storage_offset_size_stride():
    def run(x):
        x = x.clone()
        y = torch.empty(0, device=x.device)
        y.set_(x.untyped_storage(), 2, (2, 2), (1, 2))
        x.add_(10)
        return y, y.stride(), y.storage_offset()

    check(run, torch.arange(6.0))
    x = torch.arange(6.0, device="neuron")
    y = torch.empty(0, device="neuron").set_(x)
    assert y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    z = torch.arange(3.0, device="neuron").set_()
    assert z.shape == (0,)


def test_set_rejects_storage_of_another_device():
    with pytest.raises(RuntimeError, match="different device"):
        torch.empty(0, device="neuron").set_(torch.ones(3).untyped_storage())
    with pytest.raises(RuntimeError, match="different device"):
        torch.empty(0).set_(torch.ones(3, device="neuron").untyped_storage())


def test_copy_host_to_device_noncontiguous_and_dtype_change():
    src = torch.arange(24.0).reshape(4, 6)
    for make_dst, source in [
        (lambda d: torch.zeros(6, 4, device=d), src.t()),
        (lambda d: torch.zeros(3, 6, device=d)[:2, ::2], src[::2, 1::2]),
        (lambda d: torch.zeros(4, 6, dtype=torch.int32, device=d), src + 0.7),
        (lambda d: torch.zeros(6, 4, dtype=torch.float64, device=d).t(), src),
        (lambda d: torch.zeros(3, 6, device=d), torch.arange(6.0)),  # broadcast
        (lambda d: torch.zeros(3, 6, device=d), torch.tensor(2.5)),
    ]:
        expected = make_dst("cpu").copy_(source)
        actual = make_dst("neuron").copy_(source)
        assert actual.stride() == expected.stride()
        assert torch.equal(actual.cpu(), expected)


def test_copy_device_to_host_noncontiguous_and_dtype_change():
    cpu = torch.arange(24.0).reshape(4, 6)
    dev = cpu.to("neuron")
    for make_dst, pick in [
        (lambda: torch.zeros(6, 4, dtype=torch.float64), lambda x: x.t()),
        (lambda: torch.zeros(6, 4).t(), lambda x: x),
        (lambda: torch.zeros(4, 12)[:, ::2], lambda x: x),
        (lambda: torch.zeros(2, 3, dtype=torch.int16), lambda x: x[1::2, ::2]),
        (lambda: torch.zeros(3, 6), lambda x: x[2]),
    ]:
        assert torch.equal(make_dst().copy_(pick(dev)), make_dst().copy_(pick(cpu)))


def test_copy_between_neuron_tensors_with_dtype_change():
    check(lambda x: torch.zeros(6, 4, dtype=torch.float16, device=x.device).copy_(x.t()), torch.randn(4, 6))
    check(lambda x: torch.zeros(4, 3, dtype=torch.int64, device=x.device).copy_(x[:, ::2] * 10), torch.randn(4, 6))


def test_item_tolist_repr():
    with no_fallback():
        assert torch.tensor(3.5, device="neuron").item() == 3.5
        assert torch.tensor([7], device="neuron").item() == 7
        assert torch.tensor(True, device="neuron").item() is True
        assert torch.tensor(2**62 + 1, device="neuron").item() == 2**62 + 1
        cpu = torch.arange(6).reshape(2, 3)
        assert cpu.to("neuron").t().tolist() == cpu.t().tolist()
        assert torch.tensor(1.5, device="neuron").tolist() == 1.5
    # Printing runs torch's formatter on the device (as on CUDA): a few representative
    # cases, since every new dtype and shape compiles its executables.
    for cpu in [torch.tensor(7), torch.arange(1001.0)]:
        if "dtype=" in repr(cpu):
            expected = repr(cpu).replace(", dtype=", ", device='neuron:0', dtype=")
        else:
            expected = repr(cpu)[:-1] + ", device='neuron:0')"
        assert repr(cpu.to("neuron")) == expected
    assert repr(torch.empty(0, 3, device="neuron")) == "tensor([], device='neuron:0', size=(0, 3))"
    assert "grad_fn=<MulBackward0>" in repr(torch.ones(2, device="neuron", requires_grad=True) * 2)
    assert str(torch.ones(2, device="neuron")) == repr(torch.ones(2, device="neuron"))


def test_set_default_device_and_factories():
    torch.set_default_device("neuron")
    try:
        made = [torch.ones(3), torch.zeros(2, 2), torch.empty(3), torch.full((2,), 3.0), torch.arange(4),
                torch.tensor([1, 2]), torch.randn(2), torch.linspace(0, 1, 5), torch.eye(2),
                torch.nn.Linear(2, 2).weight]
        assert all(t.device == torch.device("neuron", 0) for t in made)
    finally:
        torch.set_default_device(None)
    assert torch.ones(1).device.type == "cpu"
    for dev in ("neuron", "neuron:0", torch.device("neuron"), torch.device("neuron", 0)):
        t = torch.zeros(2, 3, device=dev, dtype=torch.float64)
        assert t.device == torch.device("neuron", 0) and t.dtype == torch.float64
        assert torch.equal(t.cpu(), torch.zeros(2, 3, dtype=torch.float64))
    like = torch.empty_like(torch.zeros(3, 4, device="neuron").t())
    assert like.stride() == torch.empty_like(torch.zeros(3, 4).t()).stride()


def test_non_blocking_copies():
    cpu = torch.randn(5, 3)
    dev = cpu.to("neuron", non_blocking=True)
    back = dev.t().to("cpu", non_blocking=True)
    torch.neuron.synchronize()
    assert torch.equal(back, cpu.t())
    pinned = cpu.pin_memory()
    assert torch.equal(pinned.to("neuron", non_blocking=True).cpu(), cpu)
    out = torch.empty(5, 3).pin_memory()
    out.copy_(dev, non_blocking=True)
    torch.neuron.synchronize()
    assert torch.equal(out, cpu)


def test_pin_memory_semantics():
    cpu = torch.randn(4)
    assert not cpu.is_pinned()
    pinned = cpu.pin_memory()
    assert pinned.is_pinned() and torch.equal(pinned, cpu)
    assert pinned.data_ptr() != cpu.data_ptr()
    assert pinned.pin_memory().data_ptr() == pinned.data_ptr()  # already pinned: no copy
    assert torch.empty(3, pin_memory=True).is_pinned()
    assert not pinned.to("neuron").is_pinned()
    dev = cpu.to("neuron")
    assert dev.to("cpu", non_blocking=True).is_pinned()  # as from CUDA: a pinned staging copy
    assert not dev.to("cpu").is_pinned()
    with pytest.raises(RuntimeError, match="Only dense CPU tensors can be pinned"):
        torch.empty(3, device="neuron", pin_memory=True)
    with pytest.raises(RuntimeError, match="only dense CPU tensors can be pinned"):
        dev.pin_memory()


def test_neuron_tensor_identity_helpers():
    t = torch.ones(2).neuron()
    assert t.is_neuron and not torch.ones(2).is_neuron
    assert t.get_device() == 0 and t.device == torch.device("neuron:0")
    assert t.untyped_storage().is_neuron
    assert torch.ones(2).neuron(0).device == torch.device("neuron", 0)
