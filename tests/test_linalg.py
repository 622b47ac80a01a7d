"""Matrix products and torch.linalg on `neuron` against CPU PyTorch."""
import itertools
import warnings

import pytest
import torch

import torchneuron
from helpers import check, check_like_cpu, no_fallback, to_neuron

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


def _cpu_message(fn, *args):
    try:
        fn(*args)
    except RuntimeError as exc:
        return str(exc)
    raise AssertionError("CPU did not raise")


def test_det_lu_outputs_match_cpu_layout():
    # CPU factors A^T (LAPACK's column-major view) for a contiguous real A, A itself
    # otherwise; the det/slogdet backward formulas depend on it.
    B = torch.tensor([[1., 2., 3.], [4., 5., 6.], [7., 8., 10.]])
    g = torch.Generator().manual_seed(3)
    mats = [B, B.t().contiguous().t(), torch.randn(2, 4, 4, generator=g, dtype=torch.float64),
            torch.randn(3, 3, generator=g, dtype=torch.complex64)]
    ops = [torch.ops.aten._linalg_det.default, torch.ops.aten._linalg_slogdet.default,
           torch.ops.aten.linalg_lu_factor_ex.default]
    for A in mats:
        nA = A.to("neuron")
        assert nA.is_contiguous() == A.is_contiguous()
        for op in ops:
            with no_fallback():
                actual = op(nA)
            for a, e in zip(actual, op(A)):
                torch.testing.assert_close(a.cpu(), e, atol=1e-5, rtol=1e-5)
        rhs = torch.ones(A.shape[:-1] + (1,), dtype=A.dtype)
        for a, e in zip(torch.ops.aten._linalg_solve_ex.default(nA, rhs.to("neuron")),
                        torch.ops.aten._linalg_solve_ex.default(A, rhs)):
            torch.testing.assert_close(a.cpu(), e, atol=1e-5, rtol=1e-5)


def _grad_like_cpu(fn, *args, atol=1e-4, rtol=1e-4):
    grads = []
    for dev in ("cpu", "neuron"):
        leaves = [a.clone().to(dev).requires_grad_() for a in args]
        out = fn(*leaves)
        out = out if isinstance(out, torch.Tensor) else sum(o.sum() for o in out if o.is_floating_point())
        out.sum().backward()
        grads.append([leaf.grad.cpu() for leaf in leaves])
    for a, e in zip(*reversed(grads)):
        torch.testing.assert_close(a, e, atol=atol, rtol=rtol)


def test_det_gradient_not_transposed():
    A = torch.tensor([[2., 1.], [0., 3.]])
    a = A.clone().to("neuron").requires_grad_()
    torch.linalg.det(a).backward()
    assert a.grad.cpu().tolist() == [[3., 0.], [-1., 2.]]


# The batched shape compiles every gradient again (about 17 s): CI runs the single matrix.
@pytest.mark.parametrize("shape", [(3, 3), pytest.param((2, 4, 4), marks=pytest.mark.slow)])
def test_lu_based_gradients_match_cpu(shape):
    g = torch.Generator().manual_seed(7)
    A = torch.randn(shape, generator=g)
    B = torch.randn(shape[:-1] + (2,), generator=g)
    spd = A @ A.mT + torch.eye(shape[-1])
    _grad_like_cpu(torch.linalg.det, A)
    _grad_like_cpu(torch.det, A)
    _grad_like_cpu(lambda a: torch.linalg.det(a.mT), A)  # non-contiguous: CPU factors A itself
    _grad_like_cpu(lambda a: torch.linalg.slogdet(a)[1], A)
    _grad_like_cpu(lambda a: torch.linalg.slogdet(a.mT)[1], A)
    _grad_like_cpu(torch.logdet, spd)
    _grad_like_cpu(lambda a: torch.linalg.det(a.double()), A)
    _grad_like_cpu(torch.linalg.solve, A, B)
    _grad_like_cpu(lambda a, b: torch.linalg.solve(a.mT, b), A, B)
    _grad_like_cpu(lambda a, b: torch.linalg.solve(a, b.mT, left=False), A, B)
    _grad_like_cpu(lambda a, b: torch.linalg.solve(a, b[..., 0]), A, B)
    _grad_like_cpu(torch.linalg.inv, A)
    _grad_like_cpu(lambda a: torch.linalg.inv(a.mT), A)
    _grad_like_cpu(lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b), A, B)
    _grad_like_cpu(lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, adjoint=True), A, B)


def test_mismatched_dtypes_raise_like_cpu():
    import torch.nn.functional as F

    f, d = torch.float32, torch.float64
    o = lambda *s, dtype=f: torch.ones(*s, dtype=dtype)  # noqa: E731
    cases = [
        (torch.mm, o(2, 2, dtype=d), o(2, 2)),
        (torch.mm, o(2, 2), o(2, 2, dtype=d)),
        (torch.mm, o(2, 2, dtype=torch.int64), o(2, 2)),
        (torch.mm, o(2, 2, dtype=torch.float16), o(2, 2, dtype=torch.bfloat16)),
        (F.linear, o(2, 2), o(2, 2, dtype=d)),
        (F.linear, o(3, 2, 2), o(2, 2, dtype=d)),
        (F.linear, o(2, 2), o(2, 2, dtype=d), o(2)),
        (F.linear, o(2, 2), o(2, 2), o(2, dtype=d)),
        (torch.addmm, o(2, 2), o(2, 2), o(2, 2, dtype=d)),
        (torch.addmm, o(2, 2), o(2, 2, dtype=d), o(2, 2)),
        (torch.addmm, o(2, 2, dtype=d), o(2, 2), o(2, 2)),
        (torch.addbmm, o(2, 2), o(1, 2, 2), o(1, 2, 2, dtype=d)),
        (torch.addbmm, o(2, 2, dtype=d), o(1, 2, 2), o(1, 2, 2)),
        (torch.mv, o(2, 2), o(2, dtype=d)),
        (torch.matmul, o(2, 2), o(2, dtype=d)),
    ]
    for fn, *args in cases:
        message = _cpu_message(fn, *args)
        with pytest.raises(RuntimeError) as info:
            fn(*to_neuron(args))
        assert str(info.value) == message
    # These raise from PyTorch's meta kernels (same type, message formats dtypes differently).
    for fn, *args in [(torch.bmm, o(1, 2, 2), o(1, 2, 2, dtype=d)), (torch.dot, o(2), o(2, dtype=d)),
                      (torch.baddbmm, o(1, 2, 2), o(1, 2, 2), o(1, 2, 2, dtype=d)),
                      (torch.baddbmm, o(1, 2, 2, dtype=d), o(1, 2, 2), o(1, 2, 2))]:
        _cpu_message(fn, *args)
        with pytest.raises(RuntimeError):
            fn(*to_neuron(args))


def test_det_lu_layout_under_compile():
    # torch.compile(backend="neuron") runs the same lowerings; contiguity comes from the
    # graph's fake tensors there.
    g = torch.Generator().manual_seed(5)
    A = torch.randn(2, 3, 3, generator=g)
    for f in (lambda a: torch.ops.aten._linalg_det.default(a), lambda a: torch.ops.aten._linalg_det.default(a.mT)):
        for x, y in zip(torch.compile(f, backend="neuron")(A.to("neuron")), f(A)):
            torch.testing.assert_close(x.cpu(), y, atol=1e-5, rtol=1e-5)

    def loss(a):
        return torch.linalg.det(a).sum() + torch.linalg.slogdet(a.mT)[1].sum()

    a = A.clone().requires_grad_()
    loss(a).backward()
    n = A.clone().to("neuron").requires_grad_()
    torch.compile(loss, backend="neuron")(n).backward()
    torch.testing.assert_close(n.grad.cpu(), a.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("fn", [torch.linalg.det, torch.linalg.slogdet, torch.linalg.cholesky, torch.linalg.inv,
                                torch.linalg.lu_factor])
def test_empty_matrices(fn):
    # 0 x 0 matrices (OpInfo's first linalg.det sample): det 1, empty factors, info 0.
    for shape in [(0, 0), (3, 0, 0)]:
        check(fn, torch.randn(shape))


@pytest.mark.parametrize("upper, transpose, unitriangular", [(True, False, False), (False, True, False),
                                                             (True, True, True)])
def test_triangular_solve(upper, transpose, unitriangular):
    A = torch.randn(2, 1, 4, 4, dtype=torch.complex128) + 4 * torch.eye(4)
    B = torch.randn(3, 4, 2, dtype=torch.complex128)  # batch dims broadcast: (2, 3)
    check(lambda B, A: torch.triangular_solve(B, A, upper, transpose, unitriangular), B, A)


# ------------------------------------------------------------------ LDL, lstsq, eig, polar
def _sym(n, dtype, *batch):
    a = torch.randn(*batch, n, n, dtype=dtype)
    return a + a.mT


@pytest.mark.parametrize("dtype, hermitian", [(torch.float64, False), (torch.complex64, True)])
def test_ldl_factor_and_solve_match_cpu(dtype, hermitian):
    # Pivots and the packed LD are LAPACK sytrf's, 1 x 1 and 2 x 2 blocks alike.
    A = torch.randn(3, 6, 6, dtype=dtype)
    check(lambda a: torch.linalg.ldl_factor_ex(a, hermitian=hermitian), A, atol=1e-5, rtol=1e-5)
    LD, piv = torch.linalg.ldl_factor(A, hermitian=hermitian)
    B = torch.randn(3, 6, 2, dtype=dtype)
    check(lambda l, p, b: torch.linalg.ldl_solve(l, p, b, hermitian=hermitian), LD, piv, B, atol=1e-5, rtol=1e-5)


def test_ldl_edge_cases_out_and_noncontiguous():
    # Zero pivots (info), a 2 x 2 block on a zero diagonal, an empty batch, out= and a transposed input.
    check(torch.linalg.ldl_factor_ex, torch.zeros(3, 3))
    check(torch.linalg.ldl_factor_ex, torch.tensor([[0., 1, 0], [1, 0, 0], [0, 0, 0]]))
    check(torch.linalg.ldl_factor_ex, torch.randn(0, 3, 3))
    A = _sym(3, torch.float32)
    out = (torch.empty(0), torch.empty(0, dtype=torch.int32))
    check(lambda a, o: torch.linalg.ldl_factor(a.mT, out=o), A, out, atol=1e-5, rtol=1e-5)
    LD, piv = torch.linalg.ldl_factor(A)
    B = torch.randn(2, 3)
    check(lambda l, p, b, o: torch.linalg.ldl_solve(l, p, b.mT, out=o), LD, piv, B, torch.empty(0),
          atol=1e-5, rtol=1e-5)
    check_like_cpu(torch.linalg.ldl_factor, torch.zeros(3, 3))  # info > 0: CPU's internal assert
    check_like_cpu(torch.linalg.ldl_factor, torch.randn(2, 3))
    check_like_cpu(torch.linalg.ldl_solve, LD, piv.long(), torch.randn(3, 1))


@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd", "gelss"])
def test_lstsq_drivers_match_cpu(driver):
    fn = lambda a, b: torch.linalg.lstsq(a, b, driver=driver)  # noqa: E731
    check(fn, torch.randn(2, 5, 3, dtype=torch.float64), torch.randn(2, 5, 4, dtype=torch.float64))
    check(fn, torch.randn(3, 5, dtype=torch.complex64), torch.randn(3, 2, dtype=torch.complex64),
          atol=1e-4, rtol=1e-4)
    check(fn, torch.randn(2, 5, 3), torch.randn(2, 5), atol=1e-4, rtol=1e-4)  # vector rhs
    check(fn, torch.randn(3, 1, 5, 3), torch.randn(1, 2, 5, 4), atol=1e-4, rtol=1e-4)  # broadcast batch
    check(fn, torch.randn(5, 0), torch.randn(5, 2))


def test_lstsq_rank_deficient_out_noncontiguous_and_errors():
    A = torch.randn(5, 3, dtype=torch.float64)
    A[:, 2] = A[:, 1]
    B = torch.randn(5, 2, dtype=torch.float64)
    for driver in ("gelsy", "gelsd"):  # minimum-norm solutions; gelsd drops its residuals
        check(lambda a, b: torch.linalg.lstsq(a, b, driver=driver), A, B)
    outs = tuple(torch.empty(0, dtype=d) for d in (torch.float64, torch.float64, torch.int64, torch.float64))
    check(lambda a, b, o: torch.linalg.lstsq(a.mT, b, driver="gelsd", out=o), torch.randn(3, 5, dtype=torch.float64),
          B, outs)
    check_like_cpu(torch.linalg.lstsq, torch.randn(3), torch.randn(3))
    check_like_cpu(torch.linalg.lstsq, torch.randn(4, 3), torch.randn(3, 1))
    check_like_cpu(torch.linalg.lstsq, torch.randn(3, 3, dtype=torch.float64), torch.randn(3, 1))
    check_like_cpu(lambda a, b: torch.linalg.lstsq(a, b, driver="lu"), torch.randn(3, 3), torch.randn(3, 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex128])
def test_eig_householder_sqrth_polar_match_cpu(dtype):
    tol = dict(atol=1e-4, rtol=1e-4)
    A = torch.randn(2, 4, 4, dtype=dtype)
    check(torch.linalg.eig, A, **tol)  # geev's order and eigenvector normalization
    check(torch.linalg.eigvals, A, **tol)
    check(lambda a, o: torch.linalg.eigvals(a.mT, out=o), A[0], torch.empty(0, dtype=torch.complex128), **tol)
    check(torch.linalg.eig, torch.randn(0, 3, 3, dtype=dtype))
    V = torch.randn(2, 5, 3, dtype=dtype)
    check(torch.linalg.householder_product, V, torch.randn(2, 2, dtype=dtype), **tol)
    check(lambda v, t: torch.linalg.householder_product(v.mT, t), torch.randn(3, 5, dtype=dtype),
          torch.randn(3, dtype=dtype), **tol)
    S = A @ A.mH
    check(torch.linalg.matrix_sqrth, S, **tol)
    check(torch.linalg.matrix_sqrth, _sym(3, torch.float64))  # indefinite: negative eigenvalues clamp to 0
    check(torch.linalg.polar, V, **tol)
    check(lambda a, u, h: torch.linalg.polar(a.mT, out=(u, h)), torch.randn(3, 4, dtype=dtype),
          torch.empty(0, dtype=dtype), torch.empty(0, dtype=dtype), **tol)


def test_eig_polar_householder_errors_like_cpu():
    check_like_cpu(torch.linalg.eig, torch.tensor([[1., float("nan")], [0., 1.]]))
    check_like_cpu(torch.linalg.polar, torch.randn(3, 5))
    check_like_cpu(torch.linalg.householder_product, torch.randn(5, 3), torch.randn(4))
    check_like_cpu(torch.linalg.matrix_sqrth, torch.randn(3, 4))
    check_like_cpu(torch.linalg.eigvals, torch.randn(3, 3).int())
    check_like_cpu(torch.linalg.eig, torch.randn(3, 3).half())


@pytest.mark.parametrize("driver", ["gels", "gelsd", "gelss"])
def test_lstsq_rcond_truncates_except_for_gels(driver):
    # gels assumes full rank and ignores rcond on the CPU; gelsd/gelss drop the small
    # singular values.
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 3, generator=gen), torch.randn(5, 2, generator=gen)
    want = torch.linalg.lstsq(a, b, rcond=0.5, driver=driver).solution
    got = torch.linalg.lstsq(a.to("neuron"), b.to("neuron"), rcond=0.5, driver=driver).solution
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ lstsq, gelsy (LAPACK xGELSY replayed)
def _low_rank(gen, batch, m, n, r, dtype):
    """A batch of m x n matrices of rank r (products of thin random factors)."""
    return (torch.randn(*batch, m, r, generator=gen, dtype=dtype)
            @ torch.randn(*batch, r, n, generator=gen, dtype=dtype))


_LOW_TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.complex64: dict(atol=1e-4, rtol=1e-4),
            torch.float64: dict(atol=1e-10, rtol=1e-10), torch.complex128: dict(atol=1e-10, rtol=1e-10)}


# Each shape and dtype compiles gelsy's loops anew (17 s a dtype on CI's two cores): CI runs
# complex64, whose Householder steps cover the real ones'; float64 has the rank-threshold test.
@pytest.mark.parametrize("dtype", [pytest.param(torch.float32, marks=pytest.mark.slow),
                                   pytest.param(torch.float64, marks=pytest.mark.slow), torch.complex64,
                                   pytest.param(torch.complex128, marks=pytest.mark.slow)])
def test_lstsq_gelsy_rank_deficient_matches_cpu(dtype):
    # Rank (exactly) and minimum-norm solution of the pivoted-QR complete orthogonal
    # factorization, tall, wide and square, batched, with a broadcast batch and a vector rhs.
    gen = torch.Generator().manual_seed(0)
    fn = lambda a, b: torch.linalg.lstsq(a, b)  # noqa: E731
    tol = _LOW_TOL[dtype]
    for m, n, r in [(7, 4, 2), (4, 7, 3), (5, 5, 3), (6, 6, 1), (6, 3, 3)]:
        A = _low_rank(gen, (3,), m, n, r, dtype)
        check(fn, A, torch.randn(3, m, 2, generator=gen, dtype=dtype), **tol)
    # Columns of very different sizes and an exactly repeated column: the pivot order matters.
    A = _low_rank(gen, (2,), 6, 5, 3, dtype) * torch.logspace(-3, 3, 5, dtype=torch.float64).to(dtype)
    A[1, :, 4] = A[1, :, 0]
    check(fn, A, torch.randn(2, 6, 3, generator=gen, dtype=dtype), **tol)
    A = _low_rank(gen, (1, 2), 5, 4, 2, dtype)
    check(fn, A, torch.randn(3, 1, 5, 2, generator=gen, dtype=dtype), **tol)  # broadcast batch
    check(fn, A[0, 0], torch.randn(5, generator=gen, dtype=dtype), **tol)  # vector rhs


def test_lstsq_gelsy_rank_threshold_and_scaling():
    gen = torch.Generator().manual_seed(1)
    # Singular values 1, 1e-2, 1e-4, 1e-6: each rcond between two of them keeps those above it.
    U = torch.linalg.qr(torch.randn(6, 4, generator=gen, dtype=torch.float64))[0]
    V = torch.linalg.qr(torch.randn(4, 4, generator=gen, dtype=torch.float64))[0]
    A = U @ torch.diag(torch.tensor([1, 1e-2, 1e-4, 1e-6], dtype=torch.float64)) @ V.mT
    B = torch.randn(6, 2, generator=gen, dtype=torch.float64)
    for rcond, rank in ((0.5, 1), (1e-1, 1), (1e-3, 2), (1e-5, 3), (1e-7, 4), (0.0, 4)):
        got = check(lambda a, b: torch.linalg.lstsq(a, b, rcond=rcond), A, B, atol=1e-8, rtol=1e-8)
        assert got.rank.item() == rank
    # Equal singular values: smax * rcond <= smin holds with rcond = 1, so every column stays.
    check(lambda a, b: torch.linalg.lstsq(a, b, rcond=1.0), torch.eye(3), torch.randn(3, 2, generator=gen))
    # A negative rcond keeps every column (gelsy passes it to LAPACK unchanged).
    check(lambda a, b: torch.linalg.lstsq(a, b, rcond=-1.0), torch.randn(5, 3, generator=gen, dtype=torch.float64),
          torch.randn(5, 2, generator=gen, dtype=torch.float64))
    # Huge and tiny entries are scaled into range first, as xGELSY does.
    A = _low_rank(gen, (), 5, 4, 2, torch.float32)
    for scale in (1e-33, 1e33):
        check(lambda a, b: torch.linalg.lstsq(a, b), A * scale, torch.randn(5, 1, generator=gen), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.complex128, marks=pytest.mark.slow)])
def test_lstsq_gelsy_edge_shapes(dtype):
    gen = torch.Generator().manual_seed(1)
    fn = lambda a, b: torch.linalg.lstsq(a, b)  # noqa: E731
    check(fn, torch.zeros(2, 3, 4, dtype=dtype), torch.randn(2, 3, 2, generator=gen).to(dtype))  # rank 0, X = 0
    check(fn, torch.zeros(1, 1, dtype=dtype), torch.ones(1, 1, dtype=dtype))
    check(fn, torch.full((1, 1), -2.5, dtype=dtype), torch.ones(1, 3, dtype=dtype))
    check(fn, torch.randn(1, 4, generator=gen).to(dtype), torch.randn(1, 2, generator=gen).to(dtype), atol=1e-5,
          rtol=1e-5)  # m = 1
    check(fn, torch.randn(4, 1, generator=gen).to(dtype), torch.randn(4, 2, generator=gen).to(dtype), atol=1e-5,
          rtol=1e-5)  # n = 1
    check(fn, torch.randn(0, 3, 2, dtype=dtype), torch.randn(0, 3, 1, dtype=dtype))  # empty batch
    check(fn, torch.randn(3, 2, generator=gen).to(dtype), torch.randn(3, 0, dtype=dtype))  # no rhs: rank 0


def test_lstsq_gelsy_under_compile():
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(2)

    def f(a, b):
        res = torch.linalg.lstsq(a * 2, b)
        return res.solution + 1, res.rank

    compiled = torch.compile(f, backend="neuron")
    for dtype in (torch.float64, torch.complex64):
        A = _low_rank(gen, (3,), 6, 4, 2, dtype)
        B = torch.randn(3, 6, 2, generator=gen, dtype=dtype)
        want = f(A, B)
        with no_fallback():
            got = compiled(A.to("neuron"), B.to("neuron"))
        torch.testing.assert_close(got[0].cpu(), want[0], **_LOW_TOL[dtype])
        torch.testing.assert_close(got[1].cpu(), want[1])


def _nonfinite(value, pos=(1, 1), batch=None):
    A = torch.tensor([[2., 1., 0.], [1., 3., 1.], [0., 1., 4.]], dtype=torch.float64)
    if batch is not None:
        A = A.repeat(batch, 1, 1)
        A[(1,) + pos] = value
    else:
        A[pos] = value
    return A


_NONFINITE_OPS = {
    "svd": lambda a: torch.linalg.svd(a),
    "svdvals": torch.linalg.svdvals,
    "torch.svd": torch.svd,
    "pinv": torch.linalg.pinv,
    "matrix_rank": torch.linalg.matrix_rank,
    "matrix_norm_2": lambda a: torch.linalg.matrix_norm(a, 2),
    "matrix_norm_nuc": lambda a: torch.linalg.matrix_norm(a, "nuc"),
    "cond": torch.linalg.cond,
    "eigh": torch.linalg.eigh,
    "eigvalsh": torch.linalg.eigvalsh,
    "eigvalsh_upper": lambda a: torch.linalg.eigvalsh(a, UPLO="U"),
    "eig": torch.linalg.eig,
    "eigvals": torch.linalg.eigvals,
    "slogdet": torch.linalg.slogdet,
    "lstsq_A": lambda a: torch.linalg.lstsq(a, torch.ones(a.shape[:-1] + (1,), dtype=a.dtype)
                                            .to(a.device)),
    "lstsq_B": lambda a: torch.linalg.lstsq(torch.eye(3, dtype=a.dtype, device=a.device), a),
}
_NONFINITE_OPS.update({f"lstsq_{d}": (lambda d: lambda a: torch.linalg.lstsq(
    a, torch.ones(a.shape[:-1] + (1,), dtype=a.dtype).to(a.device), driver=d))(d)
    for d in ("gels", "gelsd", "gelss")})


def _outcome(fn, a):
    try:
        r = fn(a)
        r = [r] if isinstance(r, torch.Tensor) else [t for t in r if isinstance(t, torch.Tensor)]
        if a.device.type == "neuron":
            torch.neuron.synchronize()
        return None, [t.cpu() for t in r]
    except Exception as exc:  # noqa: BLE001 - CPU's error is the expectation
        return type(exc), str(exc)


@pytest.mark.parametrize("name", list(_NONFINITE_OPS))
@pytest.mark.parametrize("value,pos,batch", [(float("nan"), (1, 1), None), (float("nan"), (2, 1), None),
                                             (float("nan"), (0, 2), None), (float("nan"), (1, 1), 3),
                                             (float("inf"), (0, 0), None)],
                         ids=["nan", "nan_lower", "nan_upper", "nan_batched", "inf_diag"])
def test_linalg_non_finite_input_like_cpu(name, value, pos, batch):
    """CPU's LAPACK refuses NaN input to svd, eigh and lstsq (each with its own error and
    message), linalg.eig any non-finite input; eigvals and slogdet give values."""
    fn = _NONFINITE_OPS[name]
    if name.startswith("lstsq") and value == float("inf") and name != "lstsq_B":
        pytest.skip("inf: LAPACK's error or result depends on the values (see test notes)")
    A = _nonfinite(value, pos, batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = _outcome(fn, A)
        got = _outcome(fn, A.to("neuron"))
    if expected[0] is not None:
        if name.startswith("eig") and "error code" in expected[1]:
            # syevd's info for a NaN depends on where it sits: the code is not compared
            expected, got = (expected[0], expected[1].split("(error code")[0]), (got[0], got[1].split("(error code")[0])
        assert got == expected
        return
    assert got[0] is None, got
    if name in ("svd", "torch.svd") and value == float("inf"):  # vectors of a non-finite matrix: LAPACK's garbage
        expected, got = (None, expected[1][1:2]), (None, got[1][1:2])
    for e, g in zip(expected[1], got[1]):
        if name == "svd" or name == "eigh" or name == "torch.svd" or not (e.is_floating_point() or e.is_complex()):
            if e.is_floating_point() or e.is_complex():  # vectors: only where the non-finite values are
                assert torch.equal(e.isnan(), g.isnan()), (e, g)
            else:
                assert torch.equal(e, g), (e, g)
        else:
            torch.testing.assert_close(g, e, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_beta_zero_ignores_a_nan_self(dtype):
    # ATen ignores self when beta == 0. Eager passes beta to the executable as a value,
    # where the Python `beta == 0` test of addr and half-type addmv did not see it.
    nan = float("nan")
    cases = {
        "addr": lambda s, d: torch.addr(s(2, 3), torch.ones(2, dtype=dtype, device=d),
                                        torch.ones(3, dtype=dtype, device=d), beta=0),
        "addmv": lambda s, d: torch.addmv(s(2), torch.ones(2, 3, dtype=dtype, device=d),
                                          torch.ones(3, dtype=dtype, device=d), beta=0),
        "addmm": lambda s, d: torch.addmm(s(2, 2), torch.ones(2, 3, dtype=dtype, device=d),
                                          torch.ones(3, 2, dtype=dtype, device=d), beta=0),
        "addbmm": lambda s, d: torch.addbmm(s(2, 2), torch.ones(4, 2, 3, dtype=dtype, device=d),
                                            torch.ones(4, 3, 2, dtype=dtype, device=d), beta=0),
    }
    for name, fn in cases.items():
        want = fn(lambda *shape: torch.full(shape, nan, dtype=dtype), "cpu")
        got = fn(lambda *shape: torch.full(shape, nan, dtype=dtype, device="neuron"), "neuron")
        assert torch.equal(got.cpu(), want), name


def _raised(fn, device="cpu"):
    try:
        fn(device)
    except Exception as exc:  # noqa: BLE001 - comparing whatever is raised
        return type(exc), str(exc)
    return None, ""


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_addmv_of_an_empty_matrix_is_beta_self(dtype):
    # ATen's shortcut for an empty matrix multiplies beta * self into the result, which
    # takes self's shape (beta == 0: zeros of mat.size(0) elements); the lowering's
    # product of the empty matrix raised JAX's broadcast error, and PyTorch's meta
    # kernel gave another shape.
    for self_shape, (m, k) in itertools.product(((), (1,)), ((0, 3), (2, 0))):
        for beta in (2, 0):
            args = (torch.full(self_shape, 3., dtype=dtype), torch.ones(m, k, dtype=dtype), torch.ones(k, dtype=dtype))
            want = torch.addmv(*args, beta=beta)
            got = torch.addmv(*[a.to("neuron") for a in args], beta=beta)
            assert got.shape == want.shape and torch.equal(got.cpu(), want), (self_shape, beta)
            # out= takes the same shape (PyTorch's meta kernel of addmv.out gave mat.size(0)).
            for out_shape in ((5,), (0,), ()):
                want_out = torch.addmv(*args, beta=beta, out=torch.empty(out_shape, dtype=dtype))
                out = torch.empty(out_shape, dtype=dtype, device="neuron")
                got_out = torch.addmv(*[a.to("neuron") for a in args], beta=beta, out=out)
                assert got_out is out and torch.equal(out.cpu(), want_out), (self_shape, beta, out_shape)
            # In place, self must have mat.size(0) elements, empty matrix or not.
            want = _raised(lambda d: torch.full(self_shape, 3., dtype=dtype, device=d).addmv_(
                torch.ones(m, k, dtype=dtype, device=d), torch.ones(k, dtype=dtype, device=d), beta=beta))
            assert want[0] is not None and _raised(lambda d: torch.full(self_shape, 3., dtype=dtype, device=d).addmv_(
                torch.ones(m, k, dtype=dtype, device=d), torch.ones(k, dtype=dtype, device=d), beta=beta),
                "neuron") == want
