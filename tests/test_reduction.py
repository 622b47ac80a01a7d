import pytest
import torch

from helpers import check, check_like_cpu, no_fallback, to_neuron, make

ALL = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int8, torch.int16, torch.int32,
       torch.int64, torch.uint8, torch.bool]
NAN, INF = float("nan"), float("inf")




def _tol(dtype):
    return dict(atol=1e-2, rtol=1e-2) if dtype in (torch.bfloat16, torch.float16) else {}


# Core ops over every dtype: CPU's result, or CPU's exception type (e.g. argmin of
# bool, var of integers).
SWEEP = {
    "sum_dim": lambda t: t.sum(1),
    "amax": lambda t: t.amax(0),
    "max_dim": lambda t: t.max(1),
    "cumsum": lambda t: t.cumsum(0),
    "sort": lambda t: torch.sort(t, dim=1, stable=True),
    "var": lambda t: t.var(0),
}
SWEEP_SMALL = {
    "prod_all": lambda t: t.prod(),
    "argmin": lambda t: t.argmin(1),
    "any_dim": lambda t: t.any(1),
    "topk": lambda t: t.topk(1),
    "median": lambda t: t.median(),
}


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("name", list(SWEEP))
def test_dtype_sweep(name, dtype):
    check_like_cpu(SWEEP[name], make((3, 4), dtype), **_tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.int32, torch.bool], ids=str)
@pytest.mark.parametrize("name", list(SWEEP_SMALL))
def test_dtype_sweep_small(name, dtype):
    check_like_cpu(SWEEP_SMALL[name], make((3, 4), dtype), **_tol(dtype))


FLOAT_OPS = {
    "mean": lambda t: t.mean((0, 1)),
    "std_keepdim": lambda t: t.std(1, keepdim=True),
    "var_correction0": lambda t: t.var(0, correction=0),
    "var_mean": lambda t: torch.var_mean(t, 1),
    "std_mean_all": lambda t: torch.std_mean(t, correction=2),
    "logsumexp": lambda t: t.logsumexp(1),
    "norm_fro": lambda t: t.norm(),
    "vector_norm_1": lambda t: torch.linalg.vector_norm(t, 1, dim=0),
    "vector_norm_inf": lambda t: torch.linalg.vector_norm(t, INF, dim=1),
    "vector_norm_0": lambda t: torch.linalg.vector_norm(t, 0, dim=1),
    "vector_norm_3": lambda t: torch.linalg.vector_norm(t, 3, dim=(0, 1), keepdim=True),
    "norm_p_dim": lambda t: t.norm(p=1.5, dim=1),
    "cumprod": lambda t: t.cumprod(1),
    "cummax": lambda t: t.cummax(1),
    "cummin": lambda t: t.cummin(0),
    "logcumsumexp": lambda t: t.logcumsumexp(1),
    "nansum": lambda t: t.nansum(0),
    "aminmax": lambda t: torch.aminmax(t, dim=0, keepdim=True),
    "argmax_all": lambda t: t.argmax(),
    "count_nonzero": lambda t: torch.count_nonzero(t, 1),
    "topk_smallest": lambda t: t.topk(3, dim=0, largest=False),
    "kthvalue": lambda t: t.kthvalue(2, 1),
    "nanmedian_dim": lambda t: t.nanmedian(0),
    "sort_descending": lambda t: torch.sort(t, dim=0, descending=True, stable=True),
}


@pytest.mark.parametrize("name", list(FLOAT_OPS))
def test_float_ops(name):
    check_like_cpu(FLOAT_OPS[name], make((4, 5), torch.float32), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["mean", "logsumexp", "logcumsumexp", "norm_fro"])
def test_float_ops_bfloat16(name):
    check_like_cpu(FLOAT_OPS[name], make((4, 5), torch.bfloat16), atol=2e-2, rtol=2e-2)


def test_half_types_accumulate_in_float32():
    # 1024 ones: a bfloat16 accumulator would stall at 256.
    for dtype in (torch.bfloat16, torch.float16):
        check(lambda t: t.sum(), torch.ones(1024, dtype=dtype))
        check(lambda t: t.mean(0), torch.ones(1024, 2, dtype=dtype))
        check(lambda t: t.cumsum(0)[-1], torch.ones(1024, dtype=dtype))


def test_integer_and_bool_sums_are_int64():
    for dtype in (torch.bool, torch.int8, torch.uint8, torch.int32):
        out = check(lambda t: t.sum(0), make((5, 3), dtype))
        assert out.dtype == torch.int64
    check(lambda t: t.sum(dtype=torch.int8), torch.full((100,), 3, dtype=torch.int8))  # wraps like CPU
    check(lambda t: t.prod(), torch.full((70,), 2))  # int64 overflow wraps


NAN_INPUT = torch.tensor([[1.0, NAN, 3.0, NAN], [2.0, 2.0, 1.0, 1.0], [INF, -INF, 0.0, -0.0]])
NAN_OPS = {
    "max": lambda t: t.max(), "amax": lambda t: t.amax(1), "min_dim": lambda t: t.min(1),
    "argmax": lambda t: t.argmax(1), "argmin": lambda t: t.argmin(),
    "sort": lambda t: torch.sort(t, dim=1, stable=True),
    "sort_desc": lambda t: torch.sort(t, dim=1, descending=True, stable=True),
    "topk": lambda t: t[[0, 2]].topk(2),
    "cummax": lambda t: t.cummax(1), "cummin": lambda t: t.cummin(1), "median": lambda t: t.median(),
    "median_dim": lambda t: t.median(1), "nanmedian": lambda t: t.nanmedian(),
    "nanmedian_dim": lambda t: t.nanmedian(1),
    "logsumexp": lambda t: t.logsumexp(1), "logcumsumexp": lambda t: t.logcumsumexp(1), "nansum": lambda t: t.nansum(1),
}


@pytest.mark.parametrize("name", list(NAN_OPS))
def test_nan_and_inf(name):
    check(NAN_OPS[name], NAN_INPUT)


def test_logsumexp_infinities():
    check(lambda t: t.logsumexp(1), torch.tensor([[-INF, -INF], [INF, INF], [INF, 1.0], [-INF, 1.0]]))


def test_stable_sort_keeps_index_order_of_equal_elements():
    x = torch.tensor([3, 1, 2, 1, 3, 2, 1, 0, 3])
    check(lambda t: torch.sort(t, stable=True), x)
    check(lambda t: torch.sort(t, descending=True, stable=True), x)
    check(lambda t: torch.sort(t, stable=True), torch.tensor([0.0, -0.0, 1.0, -0.0, 0.0]))
    check(lambda t: torch.argsort(t, stable=True), x.to(torch.uint8))


def test_unstable_sort_values_and_valid_indices():
    x = torch.randint(0, 3, (40,)).float()
    v, i = torch.sort(to_neuron(x))
    assert torch.equal(v.cpu(), torch.sort(x)[0])
    assert torch.equal(x[i.cpu()], v.cpu())


def test_topk_unsorted_selects_the_same_elements():
    x = torch.randn(3, 10)
    v, i = to_neuron(x).topk(4, sorted=False)
    assert torch.equal(v.cpu().sort(1)[0], x.topk(4)[0].sort(1)[0])
    assert torch.equal(x.gather(1, i.cpu()), v.cpu())


@pytest.mark.parametrize("name", ["sum", "amax", "max_dim", "sort", "cumsum", "var", "argmax", "norm"])
def test_noncontiguous(name):
    ops = {"sum": lambda t: t.sum(0), "amax": lambda t: t.amax(1), "max_dim": lambda t: t.max(0),
           "sort": lambda t: torch.sort(t, dim=0, stable=True), "cumsum": lambda t: t.cumsum(1),
           "var": lambda t: t.var(1),
           "argmax": lambda t: t.argmax(0), "norm": lambda t: torch.linalg.vector_norm(t, 2, dim=1)}
    base = make((6, 8), torch.float32)
    check(lambda b: ops[name](b[::2, 1::2].t()), base, atol=1e-5, rtol=1e-5)


EMPTY_OK = {
    "sum": lambda t: t.sum(), "sum_dim": lambda t: t.sum(0), "prod": lambda t: t.prod(0), "mean": lambda t: t.mean(),
    "var": lambda t: t.var(0), "amax_nonempty_dim": lambda t: t.amax(0), "max_nonempty_dim": lambda t: t.max(0),
    "all_dim": lambda t: t.all(1), "sort": lambda t: torch.sort(t, 1, stable=True),
    "logsumexp": lambda t: t.logsumexp(1),
    "median": lambda t: t.median(), "cummax": lambda t: t.cummax(1),
    "max_all": lambda t: t.max(), "max_empty_dim": lambda t: t.max(1), "median_empty_dim": lambda t: t.median(1),
    "nanmedian_empty_dim": lambda t: t.nanmedian(1), "topk0": lambda t: t.topk(0, dim=1),
    "vector_norm_inf": lambda t: torch.linalg.vector_norm(t, INF), "aminmax": lambda t: torch.aminmax(t),
}


@pytest.mark.parametrize("name", list(EMPTY_OK))
def test_empty(name):
    check_like_cpu(EMPTY_OK[name], torch.randn(3, 0))


# PyTorch's own meta kernels raise RuntimeError here where CPU raises IndexError; a call
# the executor cannot trace raises CPU's error (eager/refusal.py).
META_MISMATCH = {
    "argmin_empty": lambda t: t.argmin(),
    "kthvalue_empty_dim": lambda t: t.kthvalue(1, 1),
}


@pytest.mark.parametrize("name", list(META_MISMATCH))
def test_empty_meta_mismatch_raises_cpus_error(name):
    check_like_cpu(META_MISMATCH[name], torch.randn(3, 0))


@pytest.mark.parametrize("fn", [lambda t: t.amax(1), lambda t: t.amin((0, -1)), lambda t: torch.aminmax(t, dim=1)])
def test_extremes_over_an_empty_dim_raise_like_cpu(fn):
    check_like_cpu(fn, torch.randn(3, 0))


@pytest.mark.parametrize("name", ["sum", "max_dim", "argmax", "cumsum", "sort", "topk", "median", "var", "cummax"])
def test_zero_dim(name):
    ops = {"sum": lambda t: t.sum(), "amax": lambda t: t.amax(0), "max_dim": lambda t: t.max(0),
           "argmax": lambda t: t.argmax(-1), "cumsum": lambda t: t.cumsum(0), "sort": lambda t: torch.sort(t, 0),
           "topk": lambda t: t.topk(1), "median": lambda t: t.median(0), "var": lambda t: t.var(),
           "logsumexp": lambda t: t.logsumexp(0), "cummax": lambda t: t.cummax(0), "kthvalue": lambda t: t.kthvalue(1)}
    check_like_cpu(ops[name], torch.tensor(1.5))


def test_out_and_inplace_variants():
    x = make((3, 4), torch.float32)

    def run(t):
        s = torch.empty(0, device=t.device)
        torch.sum(t, 1, out=s)
        v, i = torch.empty(0, device=t.device), torch.empty(0, dtype=torch.long, device=t.device)
        torch.max(t, 0, out=(v, i))
        sv, si = torch.empty(0, device=t.device), torch.empty(0, dtype=torch.long, device=t.device)
        torch.sort(t, 1, out=(sv, si))
        c = t.clone().cumsum_(0)
        return s, v, i, sv, si, c

    check(run, x)


def _grads(fn, x):
    xc = x.clone().requires_grad_(True)
    fn(xc).backward()
    xn = to_neuron(x).requires_grad_(True)
    with no_fallback():
        fn(xn).backward()
    torch.testing.assert_close(xn.grad.cpu(), xc.grad, atol=1e-5, rtol=1e-5)


GRAD_OPS = {
    "sum": lambda t: t.sum(1).pow(2).sum(), "mean": lambda t: (t.mean(0) * torch.arange(5.0, device=t.device)).sum(),
    "amax": lambda t: t.amax(1).sum(), "max_dim": lambda t: t.max(1)[0].sum(),
    "var": lambda t: t.var(1).sum(), "std_mean": lambda t: sum(x.sum() for x in torch.std_mean(t, 0)),
    "logsumexp": lambda t: t.logsumexp(1).sum(), "norm": lambda t: t.norm(), "prod": lambda t: t.prod(1).sum(),
    "cumsum": lambda t: (t.cumsum(1) * t).sum(),
    "sort": lambda t: (torch.sort(t, 1)[0] * torch.arange(5.0, device=t.device)).sum(),
    "topk": lambda t: (t.topk(2)[0] ** 2).sum(), "median": lambda t: t.median(1)[0].sum(),
    "cummax": lambda t: t.cummax(1)[0].sum(),
}


@pytest.mark.parametrize("name", list(GRAD_OPS))
def test_gradients(name):
    _grads(GRAD_OPS[name], make((4, 5), torch.float32, seed=3))


def test_compile_only_lowerings(monkeypatch):
    # torch.compile graphs hold these CompositeExplicit ops, which eager decomposes.
    import torchneuron

    monkeypatch.setattr(torchneuron.config, "STRICT", True)  # no op may run outside the graph

    def f(t):
        return torch.sort(t, 1, descending=True)[0], t.cummax(1), t.cummin(0), t.logcumsumexp(1), t.mean()

    x = make((4, 5), torch.float32, seed=6)
    expected = f(x)
    actual = torch.compile(f, backend="neuron")(to_neuron(x))
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu() if isinstance(a, torch.Tensor) else tuple(v.cpu() for v in a), e)


@pytest.mark.parametrize("args", [dict(bins=4, min=0, max=3), dict(bins=7), dict(bins=3, min=2, max=2),
                                  dict(bins=5, min=-1, max=1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histc(args, dtype):
    x = torch.tensor([0, 1, 1, 3, 5, -1, NAN, 2.9999, 2.0, -0.5], dtype=dtype)
    if args.get("min", 0) == args.get("max", 0):
        x = x[~x.isnan()]  # the data's range must be finite (CPU raises; a lowering cannot)
    with no_fallback():
        check(torch.histc, x, **args)


def test_histc_integer_like_cuda():
    # CPU refuses integer histc; CUDA (and transformers' MoE routing off the CPU) uses it.
    ids = torch.tensor([0, 7, 3, 3, 9, -1, 7, 7], dtype=torch.int32)
    with no_fallback():
        out = torch.histc(ids.to("neuron"), bins=8, min=0, max=7)
    assert out.dtype == torch.int32
    assert out.cpu().tolist() == torch.histc(ids.float(), bins=8, min=0, max=7).int().tolist()


def test_reductions_convert_input_to_dtype_like_cpu():
    """CPU's sum/nansum/prod/cumsum/cumprod with dtype= convert the input to `dtype`
    before reducing (float16 rounds each element; negative floats wrap into uint8), and
    refuse what their kernels lack: bool scans, complex nansum, complex softmax."""
    x = make((4, 3)) * 3
    for d in (torch.float16, torch.bfloat16, torch.uint8, torch.int8, torch.int32):
        check(lambda t: torch.sum(t, 0, dtype=d), x)
        check(lambda t: torch.nansum(t, 0, dtype=d), x)
        check(lambda t: torch.cumsum(t, 0, dtype=d), x, **_tol(d))
        check(lambda t: torch.cumprod(t, 0, dtype=d), x, **_tol(d))
    check(lambda t: torch.prod(t, 0, dtype=torch.uint8), x)
    for fn in (lambda t: torch.cumsum(t, 0, dtype=torch.bool), lambda t: torch.cumprod(t, 0, dtype=torch.bool),
               lambda t: torch.nansum(t, 0, dtype=torch.complex64), lambda t: torch.nansum(t.to(torch.complex64)),
               lambda t: torch.softmax(t, 0, dtype=torch.complex64),
               lambda t: torch.log_softmax(t, 1, dtype=torch.complex64)):
        check_like_cpu(fn, x)
        with pytest.raises(Exception):
            fn(x)
    check(lambda t: torch.cumsum(t[0, 0], 0, dtype=torch.bool), x)  # 0-dim: no kernel, no error
    check(lambda t: torch.nansum(t, 0, dtype=torch.complex64), x.to(torch.int32))  # integers: sum


def test_logsumexp_of_complex_keeps_the_principal_imaginary_part():
    # ATen shifts by the max of the real part: the imaginary part stays in (-pi, pi].
    x = torch.tensor([[1 + 3j, 0.5 - 2.5j, -1 + 3.1j], [2 - 3j, 0j, 1 + 1j]], dtype=torch.complex128)
    check(lambda x: torch.logsumexp(x, 1), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8,
                                   torch.uint8, torch.int64, torch.bool])
def test_hash_tensor_matches_cpu_bit_for_bit(dtype):
    x = (torch.randn(4, 5, generator=torch.Generator().manual_seed(0)) * 50).to(dtype)
    for kwargs in ({}, dict(dim=(1,)), dict(dim=(0,), keepdim=True), dict(dim=(-1, 0))):
        want = torch.hash_tensor(x, **kwargs)
        with no_fallback():
            got = torch.hash_tensor(x.to("neuron"), **kwargs).cpu()
        assert got.dtype == torch.uint64 and torch.equal(got, want), kwargs
    assert torch.equal(torch.hash_tensor(x.to("neuron").t()).cpu(), torch.hash_tensor(x.t()))
    # a 0-dim tensor takes dim 0 and -1 as its one element (found by the all-samples sweep)
    for kwargs in (dict(dim=0, keepdim=True), dict(dim=(-1,)), {}):
        got = torch.hash_tensor(x[1, 2].to("neuron"), **kwargs).cpu()
        assert got.shape == () and torch.equal(got, torch.hash_tensor(x[1, 2], **kwargs)), kwargs


@pytest.mark.parametrize("call", [lambda t: torch.hash_tensor(t, mode=1), lambda t: torch.hash_tensor(t, dim=(5,)),
                                  lambda t: torch.hash_tensor(t[:0])])
def test_hash_tensor_bad_input_raises_like_cpu(call):
    x = torch.ones(2, 3)
    with pytest.raises(Exception) as on_cpu:
        call(x)
    with pytest.raises(type(on_cpu.value)):
        call(x.to("neuron"))
# ------------------------------------------------------------------ histogram, segment_reduce
def test_histogram_matches_cpu():
    dtype = torch.float32
    check(lambda a: torch.histogram(a, 7), make((40,), torch.float64))
    x = make((40,), dtype)
    check(lambda a, w: torch.histogram(a, 5, range=(-1., 1.), weight=w, density=True), x, torch.rand(40, dtype=dtype))
    check(lambda a: torch.histogram(a, 4), torch.ones(4, dtype=dtype))  # empty range widened by 0.5
    check(lambda a: torch.histogram(a, 4), torch.empty(0, dtype=dtype))
    check(lambda a: torch.histogram(a[::2], 6), make((10, 3), dtype))  # non-contiguous
    check(lambda a, h, e: torch.histogram(a, 6, out=(h, e)), x, torch.empty(0, dtype=dtype),
          torch.empty(0, dtype=dtype))
    check(lambda a, w: torch.histogramdd(a, [3, 4, 2], weight=w, density=True, range=[-1., 1., -2., 2., 0., 1.]),
          make((5, 6, 3), dtype), torch.rand(5, 6, dtype=dtype))
    check(lambda a: torch.histogramdd(a.mT, [3, 2]), make((2, 20), dtype))


def test_histogram_errors_like_cpu():
    x = make((10,), torch.float32)
    for fn in (lambda a: torch.histogram(a.long(), 3), lambda a: torch.histogram(a, 0),
               lambda a: torch.histogram(a, 3, range=(1., 0.)), lambda a: torch.histogram(a, 3, range=(0., INF)),
               lambda a: torch.histogram(a / 0 * 0, 3),  # NaN data: its range is not finite (device-side)
               lambda a: torch.histogramdd(a, [3]),
               lambda a: torch.histogramdd(a.reshape(5, 2), [3, 3], range=[0., 1.])):
        check_like_cpu(fn, x)


def test_segment_reduce_matches_cpu():
    d = make((7, 2), torch.float64)
    d[4, 1] = NAN
    lengths, offsets = torch.tensor([2, 0, 3, 2]), torch.tensor([0, 2, 2, 5, 7])

    def fwd_bwd(reduce, initial=None, **kw):
        def fn(a, bounds):
            a = a.detach().requires_grad_()
            out = torch.segment_reduce(a, reduce, initial=initial, **{kw["by"]: bounds})
            out.backward(torch.arange(out.numel(), dtype=out.dtype, device=out.device).reshape(out.shape) - 3)
            return out, a.grad
        return fn

    for reduce, initial in (("sum", None), ("mean", 2.0), ("max", None), ("min", 2.0), ("prod", None)):
        check(fwd_bwd(reduce, initial, by="lengths"), d, lengths)
    check(fwd_bwd("mean", by="offsets"), d, offsets)
    check(lambda a, l: torch.segment_reduce(a.mT, "sum", lengths=l, axis=1), make((2, 3, 5), torch.float32),
          torch.tensor([[2, 3], [0, 5]]))
    check(lambda a, l, o: torch.ops.aten.segment_reduce.out(a, "max", lengths=l, out=o), d, lengths,
          torch.empty(0, dtype=torch.float64))
    for reduce, bounds, kw in (("sum", torch.tensor([2, 2]), {}), ("sum", torch.tensor([2, -1, 6]), {}),
                               ("foo", torch.tensor([7]), {}), ("sum", torch.tensor([7.]), {}),
                               ("sum", torch.tensor([7]), dict(axis=1))):
        check_like_cpu(lambda a, b: torch.segment_reduce(a, reduce, lengths=b, **kw), d, bounds)
    check_like_cpu(lambda a: torch.segment_reduce(a, "sum"), d)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_segment_reduce_of_non_floating_data_raises_like_cpu(dtype):
    data, lengths = torch.arange(6).to(dtype), torch.tensor([3, 3])
    with pytest.raises(NotImplementedError, match="_segment_reduce_cpu"):
        torch.segment_reduce(data, "sum", lengths=lengths)
    with pytest.raises(NotImplementedError, match="_segment_reduce_cpu"):
        torch.segment_reduce(data.to("neuron"), "sum", lengths=lengths.to("neuron"))


def test_histogram_with_bin_edge_tensors_matches_cpu():
    x = torch.tensor([-1.0, 0.0, 0.25, 0.5, 1.0, 2.0, float("nan"), 0.5])
    edges = torch.tensor([-1.0, 0.0, 0.5, 1.0])
    w = torch.rand(8, generator=torch.Generator().manual_seed(0))
    for kwargs in ({}, dict(weight=w), dict(weight=w, density=True)):
        want = torch.histogram(x, edges, **kwargs)
        dev = {k: v.to("neuron") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        with no_fallback():
            got = torch.histogram(x.to("neuron"), edges.to("neuron"), **dev)
        torch.testing.assert_close(got.hist.cpu(), want.hist)
        torch.testing.assert_close(got.bin_edges.cpu(), want.bin_edges)
    samples = torch.randn(20, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    bins = [torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64), torch.tensor([-2.0, 0.0, 0.5, 3.0], dtype=torch.float64)]
    with no_fallback():
        got = torch.histogramdd(samples.to("neuron"), bins=[b.to("neuron") for b in bins])
    torch.testing.assert_close(got.hist.cpu(), torch.histogramdd(samples, bins=bins).hist)
    for bad in (torch.tensor([1.0]), torch.tensor([[0.0, 1.0]]), torch.tensor([0, 1, 2])):
        with pytest.raises(RuntimeError):
            torch.histogram(torch.rand(5), bad)
        with pytest.raises(RuntimeError):
            torch.histogram(torch.rand(5).to("neuron"), bad.to("neuron"))
