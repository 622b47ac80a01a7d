"""out= and in-place variants on `neuron` against CPU PyTorch: the dtype they compute
in, the tensors they write and return, resizing of out= tensors, non-contiguous
targets, out= tensors of other dtypes than the result. The OpInfo sweep's
``out``/``inplace`` checks cover every op on matching dtypes; these cases pin the shared
mechanism (`eager/executor.py`, `eager/out_dtypes.py`)."""
import warnings

import pytest
import torch

from helpers import check, check_like_cpu, no_fallback, to_neuron
from torchneuron.coverage import expected, out_dtype_sweep
from torchneuron.eager import out_dtypes


def _exact(fn, *args):
    """`check` with no tolerance: computing in another dtype shows up as rounding."""
    return check(fn, *args, atol=0, rtol=0)


def test_out_computes_in_the_inputs_common_dtype():
    # TensorIterator adds int8 + int8 in int8 (wrapping) and casts into the int32 out.
    a = torch.tensor([100, 100, -100], dtype=torch.int8)
    _exact(lambda a: torch.add(a, a, out=torch.empty(3, dtype=torch.int32, device=a.device)), a)
    _exact(lambda a: torch.mul(a, 3, out=torch.empty(3, dtype=torch.float32, device=a.device)), a)
    # sin of integers computes in the default float dtype, then casts into float64.
    x = torch.arange(-20, 20)
    _exact(lambda x: torch.sin(x, out=torch.empty(40, dtype=torch.float64, device=x.device)), x)


def test_inplace_computes_in_the_common_dtype():
    # x.floor_divide_(y): 100 // 1000 in int32 is 0; in x's int8, 1000 would wrap to -24.
    x, y = torch.tensor([100, -7], dtype=torch.int8), torch.tensor([1000, 2], dtype=torch.int32)
    _exact(lambda x, y: x.clone().floor_divide_(y), x, y)
    # float32 * float64 multiplies in float64 and rounds once into float32.
    a = torch.linspace(1, 2, 101)
    b = torch.full((101,), 1 / 3, dtype=torch.float64)
    _exact(lambda a, b: a.clone().mul_(b), a, b)
    _exact(lambda a, b: a.clone().addcmul_(b, b), a, b)
    check_like_cpu(lambda a: a.clone().long().add_(1.5), a)


def test_out_via_a_decomposition_keeps_the_out_contract():
    # mvlgamma.out runs its functional decomposition: the float result cannot be cast
    # into an integer out tensor (CPU raises), and resizing a non-empty out warns.
    x = torch.arange(1, 4)
    check_like_cpu(lambda x: torch.mvlgamma(x, 1, out=torch.empty(3, dtype=torch.long, device=x.device)), x)
    check_like_cpu(lambda x: x.clone().mvlgamma_(1), x)
    y = torch.linspace(1, 3, 6)
    with pytest.warns(UserWarning, match="resized"):
        out = check(lambda y: torch.mvlgamma(y, 2, out=torch.empty(4, device=y.device)), y)
    assert out.shape == (6,)


def test_inplace_with_arguments_in_another_order():
    # polygamma_(self, n) is computed by the lowering of polygamma(n, self).
    x = torch.linspace(0.5, 4, 8)
    for n in range(3):
        check(lambda x: x.clone().polygamma_(n), x)
        check(lambda x: torch.polygamma(n, x, out=torch.empty_like(x)), x)


def test_results_that_cannot_be_cast_into_the_written_tensor_raise():
    # Some meta kernels (mul_.Scalar's, logit_'s, angle.out's) skip TensorIterator's
    # can_cast check; CPU raises instead of truncating the float result.
    x = torch.arange(4)
    check_like_cpu(lambda x: x.clone().mul_(1.5), x)
    check_like_cpu(lambda x: x.clone().logit_(0.1), x)
    check_like_cpu(lambda x: torch.angle(x, out=torch.empty(4, dtype=torch.long, device=x.device)), x)


def test_a_resized_out_tensor_takes_the_strides_cpu_gives_it():
    # Structured kernels restride a resized out tensor as their meta function asks:
    # linalg results are column-major; elementwise results are contiguous.
    a = torch.randn(5, 5) + 5 * torch.eye(5)
    for fn in (lambda a, o: torch.linalg.inv(a, out=o), lambda a, o: torch.add(a, 1, out=o)):
        want = torch.empty(0)
        fn(a, want)
        got = torch.empty(0, device="neuron")
        fn(a.to("neuron"), got)
        assert got.stride() == want.stride()
        torch.testing.assert_close(got.cpu(), want)


def test_out_variants_without_a_kernel_of_their_own_stay_on_the_device():
    # masked_select.out: its functional overload's host kernel, copied into out (no CPU
    # fallback). geqrf.a has no meta kernel: geqrf's gives the out tensors' geometry.
    x = torch.randn(4, 5)
    check(lambda x: torch.masked_select(x, x > 0, out=torch.empty(0, device=x.device)), x)
    check(lambda x: torch.geqrf(x, out=(torch.empty(0, device=x.device), torch.empty(0, device=x.device))), x)
    check_like_cpu(lambda x: torch.geqrf(x, out=(torch.empty(0, dtype=torch.long, device=x.device),
                                                 torch.empty(0, device=x.device))), x)


def test_an_out_tensor_that_is_an_input_is_not_broadcast():
    # TensorIterator checks its outputs before it resizes any, and resizes no output
    # that is also an input: these raise CPU's RuntimeError, with no resize warning and
    # `a` left alone (neuron broadcast `a`; outer resized it before the overlap error).
    # ldexp_ is ATen's mul_out(self, self, 2 ** other).
    for fn in (lambda a, b: torch.mul(a, b, out=a), lambda a, b: torch.add(b, a, out=a),
               lambda a, b: torch.where(a > 0, a, b, out=a), lambda a, b: a.ldexp_(b),
               lambda a, b: torch.mul(b, a, out=b), lambda a, b: torch.outer(b, b, out=b)):
        a, b = torch.ones(5, 1, device="neuron"), torch.ones(5, device="neuron")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _like_cpu(fn, a.cpu(), b.cpu())
            with pytest.raises(RuntimeError):
                fn(a, b)
        assert a.shape == (5, 1) and b.shape == (5,)
    c = torch.randn(5, 5)
    want = c * 2
    d = c.to("neuron")
    assert torch.mul(d, 2, out=d) is d and torch.equal(d.cpu(), want)  # no resize: computes


def test_other_kernels_resize_an_out_tensor_that_is_an_input():
    # As CPU's kernels do, from the shapes before the resize; beta=0 never reads self.
    def addmm(s, a, b):
        return torch.addmm(s, a, b, beta=0, out=s)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the resize warning, as on CPU
        check(addmm, torch.randn(1, 1), torch.randn(2, 3), torch.randn(3, 4))
        # A reduction into its own input changes the result's shape again once resized:
        # CPU's kernel then reads what it wrote (zeros); neuron refuses (it crashed
        # with AttributeError).
        x = torch.ones(2, 3, device="neuron")
        with pytest.raises(RuntimeError, match="also an input"):
            torch.sum(x, 0, out=x)


def test_resize_to_the_same_size_keeps_the_strides():
    def f(base):
        o = base.as_strided((10,), (2,), 3)
        torch.softmax(torch.arange(10., device=base.device), 0, out=o)
        t = base[:20].view(4, 5).t()
        t.resize_(5, 4)
        return base, o.stride(), t.stride()

    check(f, torch.zeros(23))


# ---- out= tensors whose dtype is not the result's: CPU's kernel decides (eager/out_dtypes.py)


def _like_cpu(fn, *args, atol=0, rtol=0):
    """fn(*args) on CPU and on `neuron` copies: the same exception, message included, or
    the same results (exactly, unless told)."""
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - any CPU error is the expectation
        with pytest.raises(type(exc)) as got:
            with no_fallback():
                fn(*to_neuron(args))
                torch.neuron.synchronize()
        assert str(got.value) == str(exc)
        return None
    return check(fn, *args, atol=atol, rtol=rtol)


def _out(like, dtype, shape=None):
    return torch.empty(like.shape if shape is None else shape, dtype=dtype, device=like.device)


def test_out_dtypes_cpu_casts_into():
    # TensorIterator computes in the inputs' common dtype and casts into the out tensor:
    # int8 + int8 wraps before it is widened; addr of bools is a logical and/or, then
    # 0 or 1; floor_divide floors in float32, then becomes complex.
    a = torch.tensor([100, 100, -100], dtype=torch.int8)
    _like_cpu(lambda a: torch.add(a, a, out=_out(a, torch.int32)), a)
    m, v = torch.tensor([[True, False, True]] * 3), torch.tensor([True, False, True])
    _like_cpu(lambda m, v: torch.addr(m, v, v, out=_out(m, torch.float64)), m, v)
    x = torch.linspace(-3, 3, 7)
    _like_cpu(lambda x: torch.floor_divide(x, 0.7, out=_out(x, torch.complex128)), x)
    _like_cpu(lambda x: torch.cat([x, x], out=_out(x, torch.float64, (14,))), x)


def test_out_dtypes_cpu_refuses():
    x = torch.linspace(-3, 3, 6).reshape(2, 3)
    # TensorIterator's can_cast check; a structured kernel's resize_out; hand-written checks
    _like_cpu(lambda x: torch.mul(x, 2, out=_out(x, torch.int64)), x)
    _like_cpu(lambda x: torch.mm(x, x.t(), out=_out(x, torch.float64, (2, 2))), x)
    _like_cpu(lambda x: torch.index_select(x, 1, torch.tensor([0, 2], device=x.device),
                                           out=_out(x, torch.float64, (2, 2))), x)
    _like_cpu(lambda x: torch.tril(x, out=_out(x, torch.float64)), x)
    _like_cpu(lambda x: torch.sort(x, out=(_out(x, torch.float64), _out(x, torch.int64))), x)
    _like_cpu(lambda x: torch.nonzero(x, out=_out(x, torch.int32, (0,))), x)
    # cat refuses with a TypeError; addbmm only once it computes (after resizing)
    _like_cpu(lambda x: torch.cat([x.bfloat16()], out=_out(x, torch.int32)), x)
    b = torch.ones(2, 3, 3)
    _like_cpu(lambda x, b: torch.addbmm(x, x.unsqueeze(0).expand(2, 2, 3), b, out=_out(x, torch.float64)), x, b)


def test_generated_out_wrappers_want_the_exact_dtype():
    # torchgen's out= wrappers of functional-only kernels (Tag.generated) copy the
    # functional result with copy_arg, which casts nothing; the out tensor was resized
    # first, so it keeps the new shape.
    x = torch.arange(6, dtype=torch.int32)
    assert torch.Tag.generated in torch.ops.aten.add.Scalar_out.tags
    _like_cpu(lambda x: torch.ops.aten.add.Scalar_out(x, 2, out=_out(x, torch.int64)), x)
    _like_cpu(lambda x: torch.ops.aten.add.Scalar_out(x, 2, out=_out(x, torch.int32)), x)
    _like_cpu(lambda x: torch.ops.aten.isnan.out(x.float(), out=_out(x, torch.float32)), x)

    def shape_after_refusal(x):
        out = _out(x, torch.int64, (0,))
        with pytest.raises(RuntimeError, match="Expected out tensor to have dtype"):
            torch.ops.aten.add.Scalar_out(x, 2, out=out)
        return out.shape

    assert shape_after_refusal(x.to("neuron")) == shape_after_refusal(x) == (6,)


def test_reductions_compute_in_the_out_dtype():
    # sum(dtype=)-style kernels take the dtype from the out tensor: float32 inputs are
    # summed in float64 (float32 sums would differ by ~1e-7), int8 ones do not wrap.
    x = torch.linspace(0, 1, 1001).reshape(7, 143) / 3
    _like_cpu(lambda x: torch.sum(x, 1, out=_out(x, torch.float64, (7,))), x, rtol=1e-12)
    _like_cpu(lambda x: torch.mean(x, 0, out=_out(x, torch.float64, (143,))), x, rtol=1e-12)
    i = torch.arange(-60, 60, dtype=torch.int8)
    _like_cpu(lambda i: torch.cumsum(i, 0, out=_out(i, torch.float64)), i)
    _like_cpu(lambda i: torch.sum(i, 0, out=_out(i, torch.int8, ())), i)
    # amax keeps its input's dtype and says so
    _like_cpu(lambda x: torch.amax(x, 1, out=_out(x, torch.float64, (7,))), x)


def test_linalg_out_dtypes():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4, 4, generator=g) + 4 * torch.eye(4)
    _like_cpu(lambda a: torch.linalg.inv(a, out=_out(a, torch.float64)), a)
    _like_cpu(lambda a: torch.linalg.eigh(a @ a.mT, out=(_out(a, torch.float64, (4,)), _out(a, torch.float32))), a)
    _like_cpu(lambda a: torch.linalg.solve(a, a[:, :2], out=_out(a, torch.complex64, (4, 2))), a)
    _like_cpu(lambda a: torch.linalg.det(a, out=_out(a, torch.float64, ())), a)
    _like_cpu(lambda a: torch.linalg.vector_norm(a, out=_out(a, torch.float64, ())), a)
    _like_cpu(lambda a: torch.linalg.vector_norm(a, dtype=torch.float64, out=_out(a, torch.float64, ())), a,
              rtol=1e-12)


def test_out_dtype_probes_are_invisible():
    # A probe runs CPU kernels the caller never called: they draw nothing from CPU's
    # generator and their warnings (var's "degrees of freedom is <= 0", which neuron
    # does not give) do not reach the caller, so the first call, which probes, shows
    # what the second, which does not, shows.
    out_dtypes._decisions.clear()
    x = torch.randn(2, 3, device="neuron")
    state = torch.get_rng_state()
    seen = []
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.var(x, 1, correction=3, out=torch.empty(2, dtype=torch.float64, device="neuron"))
            torch.bernoulli(x.sigmoid(), out=torch.empty(2, 3, dtype=torch.float64, device="neuron"))
        seen.append([str(w.message) for w in caught])
    assert seen[0] == seen[1]
    assert torch.equal(torch.get_rng_state(), state)


def _sweep_case(name, dtype, out_dtype):
    ops = out_dtype_sweep.out_ops([name])
    op = next(o for o in ops if expected.opinfo_name(o) == name)
    return out_dtype_sweep.run_case(op, getattr(torch, dtype), getattr(torch, out_dtype))


#: A fixed sample of the sweep's cases (`python -m torchneuron.coverage.out_dtype_sweep`):
#: (OpInfo name, dtype, out dtype). One case of each op whose out= call differed from
#: CPU before out= dtypes were probed (CPU raising, with its type and message, or
#: casting), then cases that did not, of each behaviour.
OUT_DTYPE_SAMPLE = (
    ("_chunk_cat", "float32", "bool"), ("abs", "complex64", "float64"), ("addr", "bool", "float64"),
    ("all", "float32", "float64"), ("amax", "float32", "float64"), ("bernoulli", "float32", "bool"),
    ("bitwise_not", "bool", "float64"), ("bucketize", "float32", "float64"), ("cat", "float32", "bool"),
    ("complex", "float32", "complex128"), ("cross", "float32", "float64"), ("fft.ifft", "float32", "complex128"),
    ("floor_divide", "float32", "complex128"), ("frexp", "float32", "float64"),
    ("heaviside", "float32", "float64"), ("histc", "float32", "float64"), ("index_add", "float32", "float64"),
    ("index_select", "float32", "float64"), ("isin", "float32", "float64"), ("kthvalue", "float32", "float64"),
    ("linalg.eigh", "float32", "float64"), ("linalg.lu_factor", "float32", "float64"),
    ("linalg.solve", "float32", "float64"), ("linalg.qr", "float32", "float64"),
    ("masked_select", "float32", "float64"), ("mode", "float32", "float64"),
    ("multinomial", "float32", "float64"), ("nan_to_num", "float32", "float64"), ("nansum", "float32", "bool"),
    ("narrow_copy", "float32", "float64"), ("native_batch_norm", "float32", "float64"),
    ("nn.functional.gelu", "float32", "float64"), ("nn.functional.avg_pool3d", "float32", "float64"),
    ("nonzero", "float32", "float64"), ("normal", "float32", "bool"), ("polar", "float32", "complex128"),
    ("round.decimals_3", "float32", "float64"), ("scatter_reduce.sum", "float32", "float64"),
    ("searchsorted", "float32", "float64"), ("softmax.with_dtype", "float32", "complex128"),
    ("sort", "float32", "float64"), ("take", "float32", "float64"), ("torch._scaled_mm", "float8_e4m3fn", "bool"),
    ("tril", "float32", "float64"), ("var", "bfloat16", "float64"),
    ("add", "int8", "int32"), ("cumsum", "int16", "float64"), ("mean", "float32", "float64"),
    ("mul", "float32", "int32"), ("mm", "float32", "float64"), ("where", "float32", "float64"),
    ("clamp", "int32", "float64"), ("sin", "int64", "float64"), ("linalg.vector_norm", "float32", "float64"),
    ("lerp", "float32", "complex128"),
)


@pytest.mark.parametrize("name,dtype,out_dtype", OUT_DTYPE_SAMPLE)
def test_out_dtype_sample(name, dtype, out_dtype):
    verdict, detail = _sweep_case(name, dtype, out_dtype)
    assert verdict == out_dtype_sweep.AGREE, detail


@pytest.mark.parametrize("name,dtype,out_dtype", [
    pytest.param(*case, marks=pytest.mark.xfail(reason=why, strict=True))
    for case, why in expected.OUT_DTYPE_FAILURES.items()])
def test_out_dtype_expected_failures(name, dtype, out_dtype):
    verdict, detail = _sweep_case(name, dtype, out_dtype)
    assert verdict == out_dtype_sweep.AGREE, detail


@pytest.mark.parametrize("driver", ["gels", "gelsd", "gelss"])
def test_lstsq_residuals_out_of_another_dtype_like_cpu(driver):
    """CPU computes the residuals of a full-rank tall A straight into an empty out
    tensor, refusing one of another dtype; the dtype probe must take that path."""
    A, B = torch.randn(3, 2), torch.randn(3, 1)
    got = []
    for d in ("cpu", "neuron"):
        outs = [torch.empty(0, device=d), torch.empty(0, dtype=torch.float64, device=d),
                torch.empty(0, dtype=torch.int64, device=d), torch.empty(0, device=d)]
        with pytest.raises(RuntimeError) as exc:
            torch.linalg.lstsq(A.to(d), B.to(d), driver=driver, out=tuple(outs))
        got.append(str(exc.value))
    assert got[0] == got[1] == "Expected out tensor to have dtype float, but got double instead"
