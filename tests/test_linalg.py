"""Matrix products and torch.linalg on `neuron` against CPU PyTorch."""
import pytest
import torch

import torchneuron
from helpers import check, to_neuron

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int64, torch.int32, torch.int8, torch.uint8]


def _make(shape, dtype):
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype)
    return torch.randint(0, 9 if dtype == torch.uint8 else 5, shape).to(dtype)


def _tol(dtype):
    if dtype in (torch.bfloat16, torch.float16):
        return dict(atol=1e-2, rtol=1e-2)
    if dtype == torch.float32:
        return dict(atol=1e-5, rtol=1e-5)
    return {}


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_products(dtype):
    m = lambda *s: _make(s, dtype)  # noqa: E731
    tol = _tol(dtype)
    check(torch.mm, m(3, 4), m(4, 5), **tol)
    check(torch.bmm, m(2, 3, 4), m(2, 4, 5), **tol)
    check(torch.mv, m(3, 4), m(4), **tol)
    check(torch.dot, m(6), m(6), **tol)
    check(lambda c, a, b: torch.addmm(c, a, b, beta=2, alpha=3), m(5), m(3, 4), m(4, 5), **tol)
    check(lambda c, a, b: torch.baddbmm(c, a, b, beta=2, alpha=3), m(2, 3, 5), m(2, 3, 4), m(2, 4, 5), **tol)
    check(lambda c, a, b: torch.addbmm(c, a, b, alpha=2), m(3, 5), m(2, 3, 4), m(2, 4, 5), **tol)
    # CPU's half-precision gemv rounding depends on strides and scalars: tolerance only.
    check(lambda c, a, b: torch.addmv(c, a, b, beta=3), m(3), m(3, 4), m(4), **tol)
    check(lambda c, a, b: torch.addr(c, a, b, alpha=2), m(3, 4), m(3), m(4), **tol)


def test_integer_products_wrap_like_cpu():
    a = torch.full((2, 40), 7, dtype=torch.int8)
    check(torch.mm, a, a.t().contiguous())


def test_half_products_round_once():
    # float32 accumulation and one rounding reproduce CPU's half-precision GEMM exactly.
    for dtype in (torch.bfloat16, torch.float16):
        a, b, c = torch.randn(8, 64, dtype=dtype), torch.randn(64, 8, dtype=dtype), torch.randn(8, 8, dtype=dtype)
        check(lambda x, y, z: torch.addmm(z, x, y, beta=0.5, alpha=2), a, b, c, atol=0, rtol=0)


def test_noncontiguous_empty_and_beta_zero():
    a = torch.randn(5, 4)
    check(lambda x: x.t() @ x[:, ::2], a, atol=1e-5, rtol=1e-5)
    check(lambda x: torch.bmm(x.transpose(1, 2), x), torch.randn(3, 4, 2), atol=1e-5, rtol=1e-5)
    check(torch.mm, torch.randn(0, 3), torch.randn(3, 4))
    check(torch.mm, torch.randn(2, 0), torch.randn(0, 4))
    check(torch.dot, torch.randn(0), torch.randn(0))
    nan = torch.full((2, 2), float("nan"))
    check(lambda c, x: torch.addmm(c, x, x, beta=0), nan, torch.randn(2, 2), atol=1e-6, rtol=1e-5)


def test_bool_raises_like_cpu():
    a = torch.ones(2, 2, dtype=torch.bool)
    for fn in (torch.mm, lambda x, y: torch.bmm(x[None], y[None]), lambda x, y: torch.mv(x, y[0])):
        with pytest.raises(NotImplementedError):
            fn(a, a)
        with pytest.raises(NotImplementedError):
            fn(*to_neuron((a, a)))
    check(lambda c, x: torch.addr(c, x, x), a, torch.tensor([True, False]))


def test_matmul_gradients():
    def f(x, w, b):
        x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
        y = torch.nn.functional.linear(x, w, b) @ w
        (y * y).sum().backward()
        return y, x.grad, w.grad, b.grad

    check(f, torch.randn(2, 3, 4), torch.randn(4, 4), torch.randn(4), atol=1e-4, rtol=1e-5)


def _spd(n, batch=(), dtype=torch.float64):
    a = torch.randn(*batch, n, n, dtype=dtype)
    return a @ a.mT + n * torch.eye(n, dtype=dtype)


def test_linalg_float32():
    A, B = _spd(4, (2,), torch.float32), torch.randn(2, 4, 3)
    tol = dict(atol=1e-4, rtol=1e-4)
    check(torch.linalg.solve, A, B, **tol)
    check(torch.linalg.cholesky, A, **tol)
    check(torch.linalg.inv, A, **tol)


def test_linalg_decompositions():
    tol = {}
    A, B = _spd(4, (2,)), torch.randn(2, 4, 3, dtype=torch.float64)
    check(torch.linalg.solve, A, B, **tol)
    check(torch.linalg.solve, A, B[..., 0], **tol)
    check(lambda a, b: torch.linalg.solve(a, b.mT, left=False), A, B, **tol)
    check(torch.linalg.cholesky, A, **tol)
    check(lambda a: torch.linalg.cholesky(a, upper=True), A, **tol)
    check(torch.linalg.inv, A, **tol)
    check(torch.linalg.det, A, **tol)
    check(torch.linalg.slogdet, A, **tol)
    check(torch.linalg.lu_factor, A, **tol)
    check(lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b), A, B, **tol)
    check(lambda a, b: torch.linalg.solve_triangular(a.tril(), b, upper=False), A, B, **tol)
    check(torch.linalg.eigvalsh, A, **tol)
    check(torch.linalg.svdvals, A, **tol)
    # Factors unique only up to signs: compare what they reconstruct.
    check(lambda a: (lambda q, r: (q @ r, q.mT @ q))(*torch.linalg.qr(a)), A, **tol)
    check(lambda a: (lambda u, s, vh: u @ torch.diag_embed(s) @ vh)(*torch.linalg.svd(a, full_matrices=False)),
          A, **tol)
    check(lambda a: (lambda w, v: v @ torch.diag_embed(w) @ v.mT)(*torch.linalg.eigh(a)), A, **tol)


def test_linalg_gradients():
    def f(a, b):
        a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
        x = torch.linalg.solve(a, b) + torch.linalg.cholesky(a).sum() + torch.linalg.det(a)
        x.sum().backward()
        return x, a.grad, b.grad

    check(f, _spd(3), torch.randn(3, 2, dtype=torch.float64))


@pytest.mark.parametrize("name", ["solve", "inv", "cholesky"])
def test_singular_input_raises_cpu_error(name):
    fn = {"solve": lambda a: torch.linalg.solve(a, a), "inv": torch.linalg.inv,
          "cholesky": torch.linalg.cholesky}[name]
    a = torch.ones(3, 3, dtype=torch.float64)
    with pytest.raises(torch.linalg.LinAlgError) as cpu:
        fn(a)
    with pytest.raises(torch.linalg.LinAlgError) as neuron:
        fn(a.to("neuron")).cpu()
    assert str(neuron.value) == str(cpu.value)
    check(torch.linalg.det, a)


def test_ex_variants_report_info():
    a = torch.ones(3, 3, dtype=torch.float64)
    check(lambda x: torch.linalg.inv_ex(x).info, a)
    check(lambda x: torch.linalg.cholesky_ex(x).info, a)
    check(lambda x: torch.linalg.lu_factor_ex(x).info, a)
    with pytest.raises(torch.linalg.LinAlgError, match="diagonal element 2 is zero"):
        torch.linalg.inv_ex(a.to("neuron"), check_errors=True)
        torchneuron.device.synchronize()
