"""out= and in-place variants on `neuron` against CPU PyTorch: the dtype they compute
in, the tensors they write and return, resizing of out= tensors, non-contiguous
targets. The OpInfo sweep's ``out``/``inplace`` checks cover every op on matching
dtypes; these cases pin the shared mechanism (`eager/executor.py`)."""
import pytest
import torch

from helpers import check, check_like_cpu


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


def test_resize_to_the_same_size_keeps_the_strides():
    def f(base):
        o = base.as_strided((10,), (2,), 3)
        torch.softmax(torch.arange(10., device=base.device), 0, out=o)
        t = base[:20].view(4, 5).t()
        t.resize_(5, 4)
        return base, o.stride(), t.stride()

    check(f, torch.zeros(23))
