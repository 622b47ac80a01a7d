"""Differences from CPU PyTorch that torchneuron keeps
(`torchneuron.coverage.expected.KNOWN_DIFFERENCES`), each pinned by a strict xfail that
asserts CPU's behaviour: a change that removes the difference makes its test fail until
the entry goes."""
import pytest
import torch

from torchneuron.coverage.expected import KNOWN_DIFFERENCES


def _known(name):
    return pytest.mark.xfail(reason=KNOWN_DIFFERENCES[name][0], strict=True)


def _same_outcome(fn):
    """fn(device) on CPU and neuron: equal results, or the same exception type."""
    try:
        want = fn("cpu")
    except Exception as exc:  # noqa: BLE001 - the type is what is compared
        with pytest.raises(type(exc)):
            fn("neuron")
        return
    got = fn("neuron")
    for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
        torch.testing.assert_close(g.cpu(), w, equal_nan=True)


def test_entries_name_their_tests():
    for name, (_, test) in KNOWN_DIFFERENCES.items():
        path, _, function = test.partition("::")
        assert path == "tests/test_known_differences.py" and function in globals(), name


@_known("half-precision prod rounds once")
def test_half_prod_rounds_like_cpu():
    x = 1 + torch.rand(2000) / 100
    _same_outcome(lambda d: x.bfloat16().to(d).prod())


@_known("NaN input to eigh")
def test_eigh_of_nans_gives_nans():
    _same_outcome(lambda d: torch.linalg.eigh(torch.full((2, 2), float("nan"), device=d)).eigenvalues)


@_known("addmm with alpha=0 and NaN in a factor")
def test_addmm_alpha_zero_ignores_nan_factors():
    m1 = torch.randn(2, 3)
    m1[0, 1] = float("nan")
    _same_outcome(lambda d: torch.addmm(torch.ones(2, 2, device=d), m1.to(d), torch.ones(3, 2, device=d), alpha=0))


@_known("cholesky_ex's partial factor")
def test_cholesky_ex_keeps_the_partial_factor():
    a = torch.tensor([[4.0, 2, 1], [2, 1, 0], [1, 0, 3]])  # its leading 2x2 minor is singular
    _same_outcome(lambda d: tuple(torch.linalg.cholesky_ex(a.to(d))))


@_known("Python ints in the uint64 range")
def test_uint64_range_scalars_wrap():
    _same_outcome(lambda d: torch.tensor([1, 5], device=d) + (2**64 - 1))


@_known("integer histc")
def test_integer_histc_refused():
    _same_outcome(lambda d: torch.histc(torch.tensor([1, 2, 3], device=d), bins=3))


@_known("reduction into its own input")
def test_sum_out_into_its_input():
    def fn(d):
        a = torch.arange(12.0, device=d).reshape(3, 4)
        with pytest.warns(UserWarning):  # the resize of a non-empty out tensor
            torch.sum(a, 0, keepdim=True, out=a)
        return a

    _same_outcome(fn)


@_known("more than 64 dims")
def test_reduction_over_65_dims():
    _same_outcome(lambda d: torch.ones([1] * 65, device=d).sum())


def test_alpha_past_float32_range_raises():
    """Python-number Scalars are checked at the call, as CPU checks them, also by a
    cached executable (the C++ eager path)."""
    for _ in range(2):
        _same_outcome(lambda d: torch.add(torch.ones(2, device=d), torch.ones(2, device=d), alpha=1e39))


@_known("0-dim tensor values past float32's range")
def test_float64_tensor_value_past_float32_range_raises():
    _same_outcome(lambda d: torch.ones(2, device=d).masked_fill(
        torch.tensor([True, False], device=d), torch.tensor(1e39, dtype=torch.float64, device=d)))


def test_compiled_alpha_past_float32_range_raises():
    """The compiled graph reads alpha as a number and checks it as CPU does."""
    torch._dynamo.reset()
    f = torch.compile(lambda x: torch.add(x, x, alpha=1e39), backend="neuron")
    with pytest.raises(RuntimeError, match="without overflow"):
        f(torch.ones(2, device="neuron"))


@_known("complex32 results of half tensors with complex numbers")
def test_where_of_a_half_tensor_and_a_complex_number():
    _same_outcome(lambda d: torch.where(torch.tensor([True, False], device=d),
                                        torch.tensor([0.5, 1.5], dtype=torch.float16, device=d), 1 + 2j))


@_known("a 1-element CPU learning rate of a fused optimizer")
def test_fused_adam_with_a_1_element_cpu_lr():
    def fn(d):
        p = torch.ones(3, device=d, requires_grad=True)
        p.grad = torch.full((3,), 0.5, device=d)
        torch.optim.Adam([p], lr=torch.tensor([0.1]), fused=True).step()
        return p.detach()

    _same_outcome(fn)


@_known("fused Adam's checks with found_inf set")
def test_fused_adam_with_found_inf_skips_list_checks():
    def fn(d):
        params, grads = [torch.ones(3, device=d)], [torch.ones(3, device=d)]
        steps = [torch.zeros((), device=d), torch.zeros((), device=d)]  # one too many
        torch._fused_adam_(params, grads, [torch.zeros(3, device=d)], [torch.zeros(3, device=d)], [], steps,
                           lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8, amsgrad=False,
                           maximize=False, found_inf=torch.ones((), device=d))
        return params[0]

    _same_outcome(fn)


@_known("binary_cross_entropy's first bad element of a strided input")
def test_bce_names_the_first_bad_element_in_memory_order():
    x = torch.tensor([[0.5, 0.5], [2.0, 0.5]])  # out of range at (1, 0): (0, 1) once transposed
    t = torch.tensor([[0.5, 0.5], [5.0, 0.5]])  # out of range at (1, 0), before (0, 1) in memory order
    messages = []
    for d in ("cpu", "neuron"):
        with pytest.raises(RuntimeError) as info:  # neuron checks on the device: by the next synchronization
            torch.nn.functional.binary_cross_entropy(x.to(d).t(), t.to(d)).item()
        messages.append(str(info.value))
    assert messages[0] == messages[1]


@_known("embedding_bag mean past the last offset on a row-strided weight")
def test_embedding_bag_mean_on_a_row_strided_weight():
    weight = torch.randn(20, 3)
    indices, offsets = torch.tensor([0, 1, 2, 3, 4, 5]), torch.tensor([0, 2, 4])
    _same_outcome(lambda d: torch.nn.functional.embedding_bag(indices.to(d), weight.to(d)[::2], offsets.to(d),
                                                              mode="mean", include_last_offset=True))


@_known("add/sub with alpha on half tensors: CPU's scalar tail")
def test_half_add_with_alpha_rounds_like_cpus_tail():
    a, b = torch.randn(100).half(), torch.randn(100).half()
    want = torch.add(a, b, alpha=0.1)
    got = torch.add(a.to("neuron"), b.to("neuron"), alpha=0.1).cpu()
    assert torch.equal(got, want)


@_known("complex128 pow with huge exponents")
def test_complex128_pow_with_a_huge_exponent_as_cpu():
    base = torch.tensor([2 - 1j], dtype=torch.complex128)
    want = torch.pow(base, 1e30j)  # inf + inf i
    got = torch.pow(base.to("neuron"), 1e30j).cpu()
    assert torch.equal(got, want)


@_known("complex products in CPU's scalar loop")
def test_complex_mul_of_small_tensors_fuses_like_cpu():
    a, b = torch.tensor([1e-30 + 0j] * 2), torch.tensor([1 - 1e-30j] * 2)
    want = a * b  # 1e-30 - 0i: the imaginary part's products fused
    got = (a.to("neuron") * b.to("neuron")).cpu()
    assert torch.equal(torch.signbit(got.imag), torch.signbit(want.imag))


@_known("complex sgn of infinite parts")
def test_complex_sgn_of_infinities_as_cpus_vectorized_loop():
    z = torch.full((64,), complex(0, float("inf")))
    want = torch.sgn(z)  # 0 + NaN i
    got = torch.sgn(z.to("neuron")).cpu()
    assert torch.equal(torch.isnan(got.real), torch.isnan(want.real))


@_known("compiled gradients' layout is AOTAutograd's")
def test_compiled_activation_gradient_takes_the_incoming_layout():
    def fn(x, g):
        x = x.detach().requires_grad_(True)
        return torch.autograd.grad(torch.nn.functional.hardtanh(x), x, g)[0]

    x, g = torch.randn(3, 5, 4), torch.randn(3, 4, 5).transpose(1, 2)
    want = fn(x, g).stride()  # (20, 1, 5): the incoming gradient's layout
    torch._dynamo.reset()
    g_neuron = torch.empty_strided(g.shape, g.stride(), device="neuron").copy_(g)
    got = torch.compile(fn, backend="neuron")(x.to("neuron"), g_neuron).stride()
    assert got == want
