import warnings

import pytest
import torch

from helpers import check, check_like_cpu, no_fallback, to_neuron, make, check_grad

# Indexing moves elements without looking at them: a few dtypes of each kind suffice.
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int8, torch.int64, torch.uint8, torch.bool]
T = torch.tensor




def _put(t, key, value):
    t = t.clone()
    t[key] = value
    return t


# (fn, index arguments): indices are passed as arguments so they move to the device.
SWEEP = {
    "index": (lambda t, i: t[i], T([2, -1, 0, 2])),
    "index_put": (lambda t, i: _put(t, i, t[0]), T([1, -3])),
}
SWEEP_SMALL = {
    "gather": (lambda t, i: t.gather(1, i), T([[0, 3], [2, 2], [1, 0]])),
    "masked_fill": (lambda t, m: t.masked_fill(m, 1), T([True, False, True, False])),
    "index_select": (lambda t, i: t.index_select(1, i), T([3, 0, 3])),
    "scatter": (lambda t, i: t.scatter(0, i, t[:1].flip(1)), T([[2, 0, 1, 1]])),
    "masked_select": (lambda t, m: t.masked_select(m), T([True, False, True, False])),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(SWEEP))
def test_dtype_sweep(name, dtype):
    fn, index = SWEEP[name]
    check(fn, make((3, 4), dtype), index)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int8, torch.bool], ids=str)
@pytest.mark.parametrize("name", list(SWEEP_SMALL))
def test_dtype_sweep_small(name, dtype):
    fn, index = SWEEP_SMALL[name]
    check(fn, make((3, 4), dtype), index)


def test_index_integer_tensors():
    x = make((4, 5, 6), torch.float32)
    check(lambda t, i: t[i], x, T([[0, -1], [3, 2]]))  # negative indices, 2-d index
    check(lambda t, i, j: t[i, j], x, T([0, 3, 1]), T([4]))  # broadcasting
    check(lambda t, i: t[:, i], x, T([1, 1, -5]))
    check(lambda t, i, j: t[i, :, j], x, T([[0], [2]]), T([1, 5, 0]))  # non-adjacent: dims go first
    check(lambda t, i: t[..., i], x, T([5, 0], dtype=torch.int32))
    check(lambda t, i: t[i], x, T([], dtype=torch.long))


def test_index_accepts_cpu_indices_like_cuda():
    x = make((4, 3), torch.float32)
    with no_fallback():
        out = to_neuron(x)[T([3, 0])]
    assert torch.equal(out.cpu(), x[T([3, 0])])


def test_index_boolean_masks():
    x = make((4, 5), torch.float32)
    check(lambda t: t[t > 0], x)
    check(lambda t, m: t[m], x, T([True, False, True, True]))
    check(lambda t, m: t[:, m], x, T([False, True, True, False, True]))
    check(lambda t, m, i: t[m, i], x, T([True, False, True, False]), T([4, 0]))
    check(lambda t, m: t[m], x, T(True))
    check(lambda t, m: t[m], x, T(False))
    check(lambda t: t[t > 100], x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(lambda t, m: t[m], x, T([1, 0, 0, 1], dtype=torch.uint8))


def test_index_put():
    x = make((4, 5), torch.float32)
    check(lambda t, i: _put(t, i, 7.0), x, T([0, -1, 2]))
    check(lambda t, i, j, v: _put(t, (i, j), v), x, T([0, 3]), T([1, 1]), T([5.0, 6.0]))
    check(lambda t, i, v: t.clone().index_put_((i,), v, accumulate=True), x, T([1, 1, 3, 1]), torch.ones(4, 5))
    check(lambda t, i, v: torch.ops.aten.index_put_(t.clone(), [None, i], v, True), x, T([0, 0]), torch.ones(4, 2))
    check(lambda t, i, v: torch.index_put(t, (i,), v), x, T([2]), torch.arange(5.0))
    check(lambda t, i, v: t.clone().index_put_((i,), v, accumulate=True), make((6,), torch.bool), T([0, 0, 5]),
          T([True, False, True]))


def test_index_put_boolean_masks():
    x = make((4, 5), torch.float32)
    check(lambda t: _put(t, t > 0, 0.0), x)
    check(lambda t, v: _put(t, t > 0, v), x, torch.arange(float((x > 0).sum())))
    check(lambda t, m, v: _put(t, m, v), x, T([True, False, True, False]), torch.ones(2, 5))
    check(lambda t, m, v: _put(t, m, v), x, T([True, False, True, False]), torch.arange(5.0))
    check(lambda t, m: _put(t, (slice(None), m), -1.0), x, T([True, False, True, False, False]))
    check(lambda t, m, i: _put(t, (m, i), 5.0), x, T([True, False, True, False]), T([1, 3]))  # via nonzero
    check(lambda t, m: _put(t, m, 3.0), x, T(True))
    check(lambda t: t.clone().index_put_((t > 0,), T(1.0), accumulate=True), x)


def test_index_put_errors_like_cpu():
    x = make((4, 5), torch.float32)
    check_like_cpu(lambda t, i, v: t.clone().index_put_((i,), v), x, T([0, 1]), torch.ones(3))  # shape
    check_like_cpu(lambda t, i, v: t.clone().index_put_((i,), v), x, T([0, 1]), torch.ones(5, dtype=torch.float64))
    check_like_cpu(lambda t, v: _put(t, t > 0, v), x, torch.ones(100))  # too many values for the mask
    check_like_cpu(lambda t, m: t[m], x, T([True, False, True]))  # mask shape mismatch


# Out-of-range indices raise CPU's exception type, at the latest at the next sync point.
OUT_OF_RANGE = {
    "index": (IndexError, lambda t, i: t[i], T([0, 4])),
    "index_negative": (IndexError, lambda t, i: t[i], T([-5])),
    "index_put": (IndexError, lambda t, i: _put(t, i, 1.0), T([9])),
    "index_put_accumulate": (IndexError, lambda t, i: t.index_put_((i,), T(1.0), accumulate=True), T([-9])),
    "index_select": (IndexError, lambda t, i: torch.index_select(t, 0, i), T([4])),
    "index_select_negative": (IndexError, lambda t, i: torch.index_select(t, 0, i), T([-1])),
    "embedding": (IndexError, lambda t, i: torch.nn.functional.embedding(i, t), T([[1, 4]])),
    "gather": (RuntimeError, lambda t, i: t.gather(1, i), T([[5]])),
    "gather_negative": (RuntimeError, lambda t, i: t.gather(1, i), T([[-1]])),
    "scatter": (RuntimeError, lambda t, i: t.scatter(0, i, 1.0), T([[4]])),
    "scatter_add": (RuntimeError, lambda t, i: t.scatter_add(0, i, t), T([[-1]])),
    "scatter_reduce": (RuntimeError, lambda t, i: t.scatter_reduce(0, i, t, "amax"), T([[4]])),
    "index_add": (RuntimeError, lambda t, i: t.index_add(0, i, t[:1]), T([4])),
    "index_copy": (IndexError, lambda t, i: t.index_copy(0, i, t[:1]), T([4])),
    "index_fill": (IndexError, lambda t, i: t.index_fill(1, i, 0.0), T([5])),
    "index_reduce": (IndexError, lambda t, i: t.index_reduce(0, i, t[:1], "prod"), T([4])),
    "take": (IndexError, lambda t, i: t.take(i), T([20])),
    "put": (IndexError, lambda t, i: t.put(i, torch.ones(1, device=t.device)), T([-21])),
    "masked_scatter": (RuntimeError, lambda t, s: t.masked_scatter(t > -100, s), torch.ones(3)),
    "searchsorted_sorter": (RuntimeError, lambda t, o: torch.searchsorted(t[0], t[1], sorter=o), T([0, 9, 1, 2, 3])),
}


@pytest.mark.parametrize("name", list(OUT_OF_RANGE))
def test_out_of_range_raises_like_cpu(name):
    exc, fn, index = OUT_OF_RANGE[name]
    x = make((4, 5), torch.float32)
    with pytest.raises(exc):
        fn(x.clone(), index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # index_reduce is "in beta"
        with no_fallback():
            out = fn(to_neuron(x), to_neuron(index))  # asynchronous: the error comes at the sync
        with pytest.raises(exc):
            out.cpu()
    # The failed check is consumed: the next op and sync work.
    assert torch.equal(to_neuron(x).sum().cpu(), x.sum())


def test_error_surfaces_at_synchronize():
    t = to_neuron(make((4, 5), torch.float32))
    out = torch.index_select(t, 0, T([7]).to("neuron"))
    with pytest.raises(IndexError):
        torch.neuron.synchronize()
    del out


def test_gather_scatter():
    x = make((3, 4), torch.float32)
    i = T([[0, 2, 1, 0], [2, 2, 0, 1]])
    check(lambda t, i: t.gather(0, i), x, i)
    check(lambda t, i: t.gather(1, i[:, :2]), x, i)
    check(lambda t, i: t.scatter(1, i[:, :1], 9.0), x, i)
    check(lambda t, i, s: t.scatter_add(0, i, s), x, i, torch.ones(2, 4))
    check(lambda t, i, s: t.scatter(0, i, s, reduce="multiply"), x, i, torch.full((2, 4), 2.0))
    check(lambda t, i, s: t.scatter(0, i, s, reduce="add"), x, i, torch.full((2, 4), 2.0))
    check(lambda t, i: t.gather(0, i), T(3.0), T(0))
    check(lambda t, i: t.gather(0, i), x, torch.empty(0, 4, dtype=torch.long))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_and_index_reduce(reduce, include_self):
    x = make((4, 3), torch.float32)
    x[0, 0] = float("nan")
    src = make((3, 3), torch.float32, seed=1)
    check(lambda t, i, s: t.scatter_reduce(0, i, s, reduce, include_self=include_self), x,
          T([[0, 2, 0], [0, 3, 1], [2, 2, 2]]), src)
    if reduce == "mean":  # integer means floor
        xi = torch.arange(12).reshape(4, 3)
        check(lambda t, i, s: t.scatter_reduce(0, i, s, reduce, include_self=include_self), xi,
              T([[0, 2, 0], [0, 3, 1]]), torch.arange(6).reshape(2, 3) - 2)
    if reduce != "sum":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check(lambda t, i, s: t.index_reduce(0, i, s, reduce, include_self=include_self), x, T([0, 3, 0]), src)


_INDEX_FUNCS = {
    "index_add": lambda x, d, i, s: torch.index_add(x, d, i, s), "index_add_": lambda x, d, i, s: x.index_add_(d, i, s),
    "index_copy": lambda x, d, i, s: torch.index_copy(x, d, i, s),
    "index_copy_": lambda x, d, i, s: x.index_copy_(d, i, s),
    "index_reduce": lambda x, d, i, s: torch.index_reduce(x, d, i, s, "prod"),
}


@pytest.mark.parametrize("func", sorted(_INDEX_FUNCS))
@pytest.mark.parametrize("shape,dim,index,source", [
    ((2, 4), 0, [0, 1, 0], (3, 1)), ((2, 4), 0, [0, 1], (3, 4)), ((2, 4), 1, [0, 1], (3, 2)), ((4,), 0, [0], ()),
    ((2, 4), 0, [0], (1, 4, 1)), ((2, 3, 4), 1, [0, 1], (2, 2, 5)), ((4,), 0, [0, 1], ()), ((2, 4), 0, [0], (4,)),
    ((2, 4), 1, [0, 1], (2, 2)), ((), 0, [0], ()), ((4,), 0, [1, 2], (2,)),
])
def test_index_source_shapes_like_cpu(func, shape, dim, index, source):
    # CPU's checks of the source against self and the index, in its order and types; a
    # mismatched source used to reach the lowering's reshape (JAX's TypeError).
    fn = _INDEX_FUNCS[func]
    args = (torch.zeros(shape), dim, torch.tensor(index), torch.full(source, 2.0))
    dev_args = to_neuron(args)  # before CPU's in-place variants write into args[0]
    try:
        want = fn(*args)
    except Exception as cpu:  # noqa: BLE001 - CPU's error is the expected outcome
        with pytest.raises(type(cpu)) as dev:
            fn(*dev_args)
        assert str(dev.value) == str(cpu)
        return
    torch.testing.assert_close(fn(*dev_args).cpu(), want)


@pytest.mark.parametrize("func", sorted(_INDEX_FUNCS))
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_index_source_dtype_must_be_selfs(func, compiled):
    # A float64 source into a float32 self: CPU refuses it; the lowerings converted it
    # (compiled graphs too, since index_add/index_copy stay native there).
    fn = _INDEX_FUNCS[func]
    args = (torch.zeros(3, 2), 0, torch.tensor([0]), torch.ones(1, 2, dtype=torch.float64))
    with pytest.raises(RuntimeError) as cpu:
        fn(*args)
    if compiled:
        torch._dynamo.reset()
        fn = torch.compile(fn, backend="neuron")
    with pytest.raises(Exception) as dev:
        fn(*to_neuron(args))
    assert str(cpu.value) in str(dev.value)


def test_index_add_copy_fill():
    x = make((4, 5), torch.float32)
    check(lambda t, i, s: t.index_add(0, i, s, alpha=2), x, T([1, 1, 3]), torch.ones(3, 5))
    check(lambda t, i, s: t.index_add(1, i, s), x.int(), T([4, 4]), torch.ones(4, 2, dtype=torch.int32))
    check(lambda t, i, s: t.index_copy(1, i, s), x, T([4, 0]), torch.ones(4, 2))
    check(lambda t, i: t.index_fill(1, i, -2.0), x, T([-1, 0]))
    check(lambda t, i, v: t.index_fill(0, i, v), x, T([2]), T(5.0))
    check(lambda t, i, s: t.clone().index_add_(0, i, s), x.t(), T([0, 4]), torch.ones(2, 4))


def test_take_put():
    x = make((4, 5), torch.float32)
    check(lambda t, i: t.take(i), x, T([[0, -1], [7, 19]]))
    check(lambda t, i, s: t.put(i, s), x, T([0, -1, 7]), T([1.0, 2.0, 3.0]))
    check(lambda t, i, s: t.put(i, s, accumulate=True), x, T([0, 0, 7]), T([1.0, 2.0, 3.0]))
    check(lambda t, i: t.t().take(i), x, T([1, 2, 3]))


def test_masked_ops():
    x = make((4, 5), torch.float32)
    check(lambda t: t.masked_fill(t > 0, float("-inf")), x)
    check(lambda t, m, v: t.masked_fill(m, v), x, T([True, False, True, False, True]), T(3.0))
    check(lambda t: t.clone().masked_fill_(t < 0, 2), x.t())
    check(lambda t, m: t.masked_fill(m, 2.7), x.long(), T([True, False, True, False, True]))
    check(lambda t, s: t.masked_scatter(t > 0, s), x, torch.arange(20.0))
    check(lambda t, m, s: t.masked_scatter(m, s), x, T([True, False, False, False, True]), torch.arange(9.0))
    check(lambda t: t.masked_select(t > 0), x)
    check(lambda t, m: t.masked_select(m), x, T([True, False, True, False, True]))
    check(lambda t: t.masked_select(t > 100), x)
    check_like_cpu(lambda t, m: t.masked_select(m), x, (x > 0).to(torch.uint8))
    check_like_cpu(lambda t, m: t.masked_fill(m, 1.0), x, (x > 0).to(torch.uint8))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64],
                         ids=str)
def test_masked_fill_and_index_fill_take_complex_values_as_cpu(dtype):
    """CPU's masked_fill reads a complex value (number or 0-dim tensor) with
    `Scalar::to`: a zero imaginary part passes as the real part, any value fills a bool
    tensor; index_fill refuses every complex value for a non-complex tensor, and fills
    with a 0-dim tensor of another dtype. neuron raised PyTorch's reference's errors
    ("could not convert", index_copy's dtype check) for these."""
    x = torch.tensor([0.0, 1.0, 2.0]).to(dtype)
    mask = torch.tensor([True, False, True])
    index = torch.tensor([0, 2])
    for value in (1 + 1j, 1 + 0j, 0j, 1j, 1.5 + 0j, 300 + 0j, -1 + 0j, complex(float("nan"), 0), 2.5, 1):
        for v in (value, torch.tensor(value)):
            for _ in range(2):  # the second call runs the cached executable
                check_like_cpu(lambda t, m: t.masked_fill(m, v), x, mask)
                check_like_cpu(lambda t, i: t.index_fill(0, i, v), x, index)


def test_nonzero():
    x = make((3, 4), torch.int64) % 3
    check(torch.nonzero, x)
    check(lambda t: torch.nonzero(t, as_tuple=True), x)
    check(torch.argwhere, x > 0)
    check(torch.nonzero, torch.zeros(2, 3))
    check(torch.nonzero, T(3.0))
    check(torch.nonzero, torch.zeros(0, 3))
    check(lambda t: torch.nonzero_static(t, size=6, fill_value=-7), x)
    check(lambda t: torch.nonzero_static(t, size=2), x)


def test_searchsorted_and_bucketize():
    seq = T([1.0, 2.0, 2.0, 3.0])
    check(lambda s, v: torch.searchsorted(s, v), seq, T([[0.5, 2.0], [2.5, 9.0]]))
    check(lambda s, v: torch.searchsorted(s, v, right=True), seq, T([2.0, 0.0, 5.0, float("nan")]))
    check(lambda s, v: torch.searchsorted(s, v, side="right", out_int32=True), seq, T([2.0, 3.0]))
    check(lambda s, v: torch.searchsorted(torch.sort(s, 1)[0], v), make((3, 6), torch.float32),
          make((3, 2), torch.float32, seed=2))
    check(lambda s, v, o: torch.searchsorted(s, v, sorter=o), T([2.0, 0.0, 1.0]), T([0.5, 2.5]), T([1, 2, 0]))
    check(lambda s: torch.searchsorted(s, 1.5), seq)
    check(lambda s, v: torch.searchsorted(s, v), torch.arange(7), T([3, -1, 10]))
    check(lambda v, b: torch.bucketize(v, b), make((3, 4), torch.float32), T([-1.0, 0.0, 1.0]))
    check(lambda v, b: torch.bucketize(v, b, right=True, out_int32=True), T([-1.0, 0.0, 0.5]), T([-1.0, 0.0, 1.0]))


def test_embedding_and_its_backward():
    w = make((6, 3), torch.float32)
    check(lambda w, i: torch.nn.functional.embedding(i, w), w, T([[0, 2], [5, 5]]))
    for kwargs in ({}, {"padding_idx": 2}, {"scale_grad_by_freq": True}):
        wc = w.clone().requires_grad_(True)
        wn = to_neuron(w).requires_grad_(True)
        idx = T([[0, 2, 2], [5, 2, 0]])
        g = make((2, 3, 3), torch.float32, seed=4)
        torch.nn.functional.embedding(idx, wc, **kwargs).backward(g)
        with no_fallback():
            torch.nn.functional.embedding(to_neuron(idx), wn, **kwargs).backward(to_neuron(g))
        torch.testing.assert_close(wn.grad.cpu(), wc.grad)


GRAD_OPS = {
    "index": lambda t: (t[T([0, 2, 2]).to(t.device)] ** 2).sum(),
    "index_mask": lambda t: t[t > 0].sum(),
    "index_select": lambda t: t.index_select(1, T([1, 1, 3]).to(t.device)).sum(),
    "gather": lambda t: (t.gather(1, T([[0, 0], [2, 1], [3, 3]]).to(t.device)) ** 2).sum(),
    "scatter": lambda t: (t.scatter(1, T([[0], [2], [3]]).to(t.device), 0.0) * t).sum(),
    "masked_fill": lambda t: (t.masked_fill(t > 0, 1.0) * t).sum(),
    "take": lambda t: t.take(T([1, 1, 5]).to(t.device)).sum(),
    "index_put": lambda t: torch.index_put(t * 2, (T([1]).to(t.device),), T(0.0).to(t.device)).sum(),
}


@pytest.mark.parametrize("name", list(GRAD_OPS))
def test_gradients(name):
    check_grad(GRAD_OPS[name], make((3, 4), torch.float32, seed=5))


def test_noncontiguous_and_empty():
    x = make((6, 8), torch.float32)
    check(lambda t, i: t[::2, 1::2].t()[i], x, T([3, 0]))
    check(lambda t, i: t.t().gather(0, i), x, T([[0, 5], [1, 1]]))
    check(lambda t, i, v: _put(t.t(), i, v), x, T([7, 0]), torch.ones(6))
    check(lambda t, i: t[i], torch.empty(0, 3), T([], dtype=torch.long))
    check(lambda t, i: t.index_select(0, i), x, T([], dtype=torch.long))
    check(lambda t: t.masked_fill(t > 0, 1.0), torch.empty(0, 3))
    check_like_cpu(lambda t, i: t[i], torch.empty(0, 3), T([0]))


def test_put_accumulate_into_bool():
    x = torch.tensor([True, False, False, True])
    check(lambda x: x.clone().put_(torch.tensor([1, 2, 1], device=x.device),
                                   torch.tensor([False, True, True], device=x.device), accumulate=True), x)


@pytest.mark.parametrize("x, kw", [
    (torch.tensor([1, 3, 3, 0]), {}),
    (torch.tensor([1, 3, 3, 0], dtype=torch.uint8), {"minlength": 7}),
    (torch.tensor([1, 3, 3, 0]), {"weights": torch.tensor([.5, 1., 2., 3.])}),
    (torch.tensor([1, 3, 3, 0]), {"weights": torch.tensor([1, 2, 3, 4])}),  # summed in float64
    (torch.tensor([], dtype=torch.long), {"minlength": 3, "weights": torch.tensor([])}),
    (torch.tensor([1, -3]), {}), (torch.tensor([[1, 3]]), {}), (torch.tensor([1., 3.]), {}),
    (torch.tensor([1, 3]), {"weights": torch.tensor([1.])}), (torch.tensor([1, 3]), {"minlength": -1}),
])
def test_bincount(x, kw):
    w = kw.pop("weights", None)
    if w is None:
        check_like_cpu(lambda x: torch.bincount(x, **kw), x)
    else:
        check_like_cpu(lambda x, w: torch.bincount(x, w, **kw), x, w)


@pytest.mark.parametrize("reduce", ["sum", "prod"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_into_bool(reduce, include_self):
    # CPU's bool += and *= are OR and AND.
    x = torch.tensor([True, False, False, True])
    src = torch.tensor([False, True, True, False, True])
    idx = torch.tensor([0, 1, 1, 3, 2])
    check(lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self), x, idx, src)


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_reads_max_and_min_as_amax_and_amin(reduce, include_self):
    """CPU accepts "max"/"min" as aliases (PyTorch's meta kernel refused them), in place
    and with out= too; the lowering used to read "max" as a minimum."""
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    index = torch.tensor([[0, 0], [1, 1]])
    src = torch.tensor([[-2.0, 5.0], [4.0, -1.0]])
    check(lambda x, i, s: x.scatter_reduce(1, i, s, reduce, include_self=include_self), x, index, src)
    check(lambda x, i, s: x.clone().scatter_reduce_(1, i, s, reduce, include_self=include_self), x, index, src)
    check(lambda x, i, s: torch.scatter_reduce(x, 1, i, s, reduce, include_self=include_self,
                                               out=torch.empty_like(x)), x, index, src)


@pytest.mark.parametrize("reduce", ["foo", "max", "sum"])
def test_index_reduce_refuses_reductions_cpu_refuses(reduce):
    """Any name but prod/mean/amax/amin raises CPU's RuntimeError before the index is
    read; "max" used to compute a minimum."""
    x, source = torch.ones(2, 4), torch.arange(8.0).reshape(2, 4)
    for index in (torch.tensor([1, 1]), torch.tensor([1.0, 1.0])):
        check_like_cpu(lambda x, i, s: x.index_reduce(0, i, s, reduce), x, index, source)


@pytest.mark.parametrize("index", [[1.0, 1.0], [[1, 1]], [1, 1, 1]], ids=["float", "2d", "too_many"])
def test_index_reduce_checks_its_index_as_cpu(index):
    """A float index computed (the same checks as index_add's now run first)."""
    x, source = torch.ones(2, 4), torch.arange(8.0).reshape(2, 4)
    with pytest.raises(Exception) as cpu:
        x.index_reduce(0, torch.tensor(index), source, "prod")
    with pytest.raises(type(cpu.value), match=str(cpu.value)[:40].replace("(", r"\(").replace(")", r"\)")):
        x.to("neuron").index_reduce(0, torch.tensor(index).to("neuron"), source.to("neuron"), "prod")


@pytest.mark.parametrize("op", ["index_reduce", "index_reduce_", "index_add"])
@pytest.mark.parametrize("dim", [2, -3])
def test_index_functions_check_their_dim(op, dim):
    """A dim outside [-ndim, ndim) raises CPU's IndexError (neuron wrapped it)."""
    x, index, source = torch.ones(4, 4), torch.tensor([0, 1]), torch.ones(4, 2)
    args = (dim, index, source) + (("prod",) if op.startswith("index_reduce") else ())
    with pytest.raises(IndexError) as cpu:
        getattr(x.clone(), op)(*args)
    with pytest.raises(IndexError) as neuron:
        getattr(x.to("neuron"), op)(*(a.to("neuron") if isinstance(a, torch.Tensor) else a for a in args))
    assert str(neuron.value) == str(cpu.value)
