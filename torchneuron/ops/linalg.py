"""Linear algebra lowerings: matrix products (mm, addmm, bmm, baddbmm, addbmm, mv,
addmv, dot, addr) and the `torch.linalg` decompositions (solve, cholesky, inv, det,
qr, svd, eigh, eig, lu_factor, triangular solve, householder_product, lstsq, polar,
matrix_sqrth) through `jax.lax.linalg`, and LDL (Bunch-Kaufman) factor and solve,
which XLA lacks, as LAPACK's unblocked algorithms replayed step by step.

Products run at `Precision.HIGHEST` so float32 matches CPU's BLAS (no reduced-precision
passes); float16/bfloat16 accumulate in float32 and round once, integers accumulate in
their own type (wrapping as on CPU). Decompositions report failures the way CPU's
LAPACK wrappers do: LAPACK's `info` (0 = success, else the failing index) computed
from the JAX result, since JAX returns NaNs instead of failing; `torch.linalg.*` then
raises CPU's LinAlgError with the same message.
"""
import math

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ..runtime import dtypes as dt
from ._common import _category, acc_type, scalar_to, scalar_type_name
from .indexing import host_kernel, lowered
from .registry import context, lowering, meta_check, meta_impl, meta_kernel

aten = torch.ops.aten

_HIGHEST = lax.Precision.HIGHEST


def _reject_bool(dtype, name: str) -> None:
    if jnp.dtype(dtype) == jnp.bool_:
        raise NotImplementedError(f'"{name}" not implemented for \'Bool\'')


def _reject_bool_product(dtype, name: str, contraction: int, size: int) -> None:
    """`_reject_bool` for a matrix product `beta * self + alpha * product`: CPU's kernel
    returns an empty result (`size` elements), or beta * self for an empty contraction
    (`contraction` elements summed), before it dispatches on the dtype."""
    if contraction and size:
        _reject_bool(dtype, name)


# CPU's names of dtypes in its matmul dtype errors: C++ type names (caffe2::TypeMeta)
# in "expected m1 and m2 ...", ScalarType names elsewhere.
_CPP_NAMES = {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
              "int64": "long int", "int32": "int", "int16": "short int", "int8": "signed char",
              "uint8": "unsigned char", "bool": "bool", "complex64": "c10::complex<float>",
              "complex128": "c10::complex<double>"}


def _cpp(dtype) -> str:
    name = jnp.dtype(dtype).name
    return _CPP_NAMES.get(name, name)


def _check_mm_dtypes(m1, m2) -> None:
    """CPU's addmm_impl_cpu_ check (mm and the matmul/linear paths through it)."""
    if jnp.dtype(m1.dtype) != jnp.dtype(m2.dtype):
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {_cpp(m1.dtype)} != "
                           f"{_cpp(m2.dtype)}")


def _check_addmm_dtypes(self_dtype, mat1_dtype, mat2_dtype) -> None:
    """addmm's (and addbmm's) checks, in CPU's order: self vs mat2, then mat1 vs mat2."""
    if jnp.dtype(self_dtype) != jnp.dtype(mat2_dtype):
        raise RuntimeError(f"self and mat2 must have the same dtype, but got {scalar_type_name(self_dtype)} and "
                           f"{scalar_type_name(mat2_dtype)}")
    if jnp.dtype(mat1_dtype) != jnp.dtype(mat2_dtype):
        raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got {scalar_type_name(mat1_dtype)} and "
                           f"{scalar_type_name(mat2_dtype)}")


# CPU's argument checks of the matrix products, in its order and words, run before
# PyTorch's Meta kernels (which word them as CUDA does, and let addmm's self broadcast
# where CPU expands it): eager and fake tensors (torch.compile) both consult them.

def _cannot_multiply(mat1, mat2) -> RuntimeError:
    return RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({mat1.shape[0]}x{mat1.shape[1]} and "
                        f"{mat2.shape[0]}x{mat2.shape[1]})")


@meta_check(aten.mm.default, aten.mm.out)
def _mm_meta_check(self, mat2, **_):
    """CPU's TORCH_META_FUNC(mm): two matrices, then their inner sizes."""
    if self.dim() != 2:
        raise RuntimeError("self must be a matrix")
    if mat2.dim() != 2:
        raise RuntimeError("mat2 must be a matrix")
    if self.shape[1] != mat2.shape[0]:
        raise _cannot_multiply(self, mat2)


def _real_scalars(self, **scalars) -> dict:
    """The complex `scalars` of a call on a real `self` as their real parts, for a
    PyTorch Meta kernel that reads them more strictly than CPU (addmm's decomposition
    takes `int(beta)`, `_refs.addr` refuses any complex): it only sizes the result, and
    the lowering reads and checks the given values as CPU's `Scalar::to` does."""
    if self.is_complex():
        return {}
    return {name: value.real for name, value in scalars.items() if isinstance(value, complex)}


@meta_check(aten.addmm.default, aten.addmm.out)
def _addmm_meta_check(self, mat1, mat2, *, beta=1, alpha=1, **_):
    """CPU's addmm: dtypes, two matrices, inner sizes (its Meta function), then `self`
    expanded to the (n, p) result (addmm_impl_cpu_), with expand's own error."""
    _check_addmm_dtypes(dt.to_jax(self.dtype), dt.to_jax(mat1.dtype), dt.to_jax(mat2.dtype))
    if mat1.dim() != 2:
        raise RuntimeError(f"mat1 must be a matrix, got {mat1.dim()}-D tensor")
    if mat2.dim() != 2:
        raise RuntimeError(f"mat2 must be a matrix, got {mat2.dim()}-D tensor")
    if mat1.shape[1] != mat2.shape[0]:
        raise _cannot_multiply(mat1, mat2)
    _expand_check(self, (mat1.shape[0], mat2.shape[1]))
    return _real_scalars(self, beta=beta, alpha=alpha)


@meta_check(aten.addr.default, aten.addr.out)
def _addr_meta_check(self, vec1, vec2, *, beta=1, alpha=1, **_):
    """addr's Meta kernel (`_refs.addr`) sized with real `_real_scalars`."""
    return _real_scalars(self, beta=beta, alpha=alpha)


def _expand_check(tensor, size) -> None:
    """ATen's `expand` argument errors (expand, inferExpandGeometry) for `tensor`
    expanded to `size`, worded as for a CPU tensor. Written out rather than run, because
    under Dynamo's Python dispatcher expand raises with other words."""
    shape, size = list(tensor.shape), list(size)
    if len(size) < len(shape):
        cpu_type = _CPU_TYPE_NAMES.get(tensor.dtype, str(tensor.dtype))
        raise RuntimeError(f"expand({cpu_type}{{{shape}}}, size={size}): the number of sizes provided ({len(size)}) "
                           f"must be greater or equal to the number of dimensions in the tensor ({len(shape)})")
    for i in range(len(size) - 1, -1, -1):
        dim = len(shape) - len(size) + i
        existing = shape[dim] if dim >= 0 else 1
        if existing not in (size[i], 1):
            raise RuntimeError(f"The expanded size of the tensor ({size[i]}) must match the existing size ({existing}) "
                               f"at non-singleton dimension {i}.  Target sizes: {size}.  Tensor sizes: {shape}")


#: CPU tensors' legacy type names (Tensor.type()), which ATen's messages print.
_CPU_TYPE_NAMES = {d: torch.empty(0, dtype=d).type() for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.complex128, torch.int64,
    torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)}


def _addmv_checks(self, mat, vec) -> None:
    """CPU's TORCH_META_FUNC(addmv): vector + matrix @ vector, then the sizes (`self`
    has n elements or one)."""
    if not (mat.dim() == 2 and vec.dim() == 1 and self.dim() <= 1):
        raise RuntimeError(f"vector + matrix @ vector expected, got {self.dim()}, {mat.dim()}, {vec.dim()}")
    if mat.shape[1] != vec.shape[0] or self.numel() not in (mat.shape[0], 1):
        if self.dim() == 0:  # CPU's message reads self.size(0)
            raise IndexError("Dimension specified as 0 but tensor has no dimensions")
        raise RuntimeError(f"size mismatch, got input ({self.shape[0]}), mat ({mat.shape[0]}x{mat.shape[1]}), "
                           f"vec ({vec.shape[0]})")


def _addmv_meta_check(self, mat, vec, **_):
    """CPU's addmv: its Meta function's checks, then its kernel's dtype check (which
    PyTorch's Meta kernel words with torch dtypes)."""
    _addmv_checks(self, mat, vec)
    if not self.dtype == mat.dtype == vec.dtype:
        names = [scalar_type_name(dt.to_jax(t.dtype)) for t in (self, mat, vec)]
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {names[0]}, {names[1]}, and "
                           f"{names[2]}")


@meta_kernel(aten.addmv.default)
def _addmv_meta(self, mat, vec, *, beta=1, alpha=1):
    """CPU's addmv: `_addmv_meta_check`, then a vector of mat.size(0) elements, except
    that an empty matrix with beta != 0 gives beta * self in self's shape (ATen's
    shortcut multiplies into the result, which takes self's shape: a 0-d self gives a
    0-d result)."""
    _addmv_meta_check(self, mat, vec)
    shape = tuple(self.shape) if mat.numel() == 0 and beta != 0 else (mat.shape[0],)
    return self.new_empty(shape)


@meta_kernel(aten.addmv_.default)
def _addmv_inplace_meta(self, mat, vec, *, beta=1, alpha=1):
    """CPU's addmv_: `_addmv_meta_check`, then the structured kernel's in-place check
    that self has mat.size(0) elements, whose shortcut for an empty matrix does not
    apply here."""
    _addmv_meta_check(self, mat, vec)
    if tuple(self.shape) != (mat.shape[0],):
        raise RuntimeError(f"Bad in-place call: input tensor size {list(self.shape)} and output tensor size "
                           f"{[mat.shape[0]]} should match")
    return self


@meta_kernel(aten.addmv.out)
def _addmv_out_meta(self, mat, vec, *, beta=1, alpha=1, out):
    """CPU's addmv.out: `_addmv_meta`'s result shape, into `out` by PyTorch's out=
    contract (resized, with its warning when it had elements; safe casts only). Its
    empty-matrix shortcut resizes `out` to self's shape too, where PyTorch's meta kernel
    gives mat.size(0) elements."""
    from torch._prims_common.wrappers import _maybe_resize_out, _safe_copy_out

    result = _addmv_meta(self, mat, vec, beta=beta, alpha=alpha)
    _maybe_resize_out(out, result.shape)
    _safe_copy_out(copy_from=result, copy_to=out, exact_dtype=False)
    return out


@meta_check(aten.mv.default, aten.mv.out)
def _mv_meta_check(self, vec, **_):
    """CPU's mv is addmv into a new vector of self.size(0) elements."""
    if self.dim() == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    _addmv_checks(self.new_empty((self.shape[0],)), self, vec)


@meta_check(aten.dot.default, aten.dot.out, aten.vdot.default, aten.vdot.out)
def _dot_meta_check(self, other, **_):
    """CPU's dot_check (vdot's too): 1-D tensors, one dtype, as many elements."""
    if self.dim() != 1 or other.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {self.dim()}D and {other.dim()}D tensors")
    if self.dtype != other.dtype:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found "
                           f"{scalar_type_name(dt.to_jax(self.dtype))} and {scalar_type_name(dt.to_jax(other.dtype))}")
    if self.numel() != other.numel():
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{self.numel()}] and src [{other.numel()}] "
                           f"to have the same number of elements, but got {self.numel()} and {other.numel()} "
                           "elements respectively")


def _dot(a, b, contract, batch=((), ())):
    """`lax.dot_general` at HIGHEST precision, accumulating in `_acc` of the output."""
    acc = acc_type(context().out_dtype())
    return lax.dot_general(a.astype(acc), b.astype(acc), (contract, batch), precision=_HIGHEST,
                           preferred_element_type=acc)


def _scaled_sum(self, product, beta, alpha, contraction):
    """beta * self + alpha * product in the accumulation dtype, rounded once to the output
    dtype. ATen ignores `self` entirely (NaN and Inf included) when beta == 0. CPU's
    kernel returns an empty result before reading anything, and for an empty contracted
    dim (`contraction` long) returns beta * self before its gemm reads (and checks)
    alpha and beta, so alpha is ignored there."""
    out = context().out_dtype()
    acc = product.dtype
    if product.size == 0:
        return jnp.zeros(context().out().shape, out)
    if contraction == 0:
        _check_beta_multiplies(beta, out)
        return jnp.broadcast_to(_beta_self(self, beta, acc), context().out().shape).astype(out)
    alpha, beta = scalar_to(alpha, acc), scalar_to(beta, acc)  # read in the opmath type
    if not (isinstance(alpha, (int, float)) and alpha == 1):
        product = product * _scalar(alpha, acc)
    if isinstance(beta, (int, float)) and beta == 0:
        return jnp.broadcast_to(product, context().out().shape).astype(out)
    return (_beta_self(self, beta, acc) + product).astype(out)


#: A Python number of each `_category` (bool, int, float, complex), for type promotion.
_CATEGORY_SAMPLES = (True, 1, 1.0, 1j)


# Complex types JAX lacks, by c10's names (a complex beta promotes the half types to them).
_HALF_COMPLEX_NAMES = {torch.complex32: "ComplexHalf", torch.bcomplex32: "BComplex32"}


def _check_beta_multiplies(beta, out) -> None:
    """CPU's empty-contraction shortcut `result.mul_(beta)` for a nonzero `beta`: a
    Python Scalar, so TensorIterator refuses a result type (a float beta on an integer
    result, any number but a bool on a bool one, a complex one on a real one) that cannot
    be cast to `out`; beta == 0 zeroes the result instead."""
    kind = _category(type(beta) if isinstance(beta, (bool, int, float, complex)) else jnp.asarray(beta).dtype)
    out_type = dt.to_torch(out)
    promoted = torch.result_type(torch.empty((), dtype=out_type), _CATEGORY_SAMPLES[kind])
    if torch.can_cast(promoted, out_type):
        return
    name = _HALF_COMPLEX_NAMES.get(promoted) or scalar_type_name(promoted)
    message = f"result type {name} can't be cast to the desired output type {scalar_type_name(out)}"
    if isinstance(beta, (bool, int, float, complex)):
        if beta != 0:
            raise RuntimeError(message)
    else:
        context().check(beta == 0, RuntimeError, message)


def _beta_self(self, beta, dtype):
    """beta * self in `dtype`, zero where beta == 0 (ATen then ignores self, NaN and inf
    included), also for a beta eager passes to the executable as a traced value."""
    base = self.astype(dtype)
    if isinstance(beta, (int, float)) and beta == 1:
        return base
    return jnp.where(beta == 0, jnp.zeros((), dtype), base * _scalar(beta, dtype))


def _scalar(value, dtype):
    """A Scalar as a 0-dim array of `dtype`, as C++'s conversion makes it: integers wrap
    (beta=-1 on uint8 is 255), floats truncate toward zero into integer types."""
    return jnp.asarray(value).astype(dtype)


@lowering(aten.mm.default)
def mm(self, mat2):
    """aten::mm: (n, m) @ (m, p) -> (n, p); NotImplementedError for bool like CPU."""
    _check_mm_dtypes(self, mat2)
    _reject_bool(self.dtype, "addmm_impl_cpu_")
    return _dot(self, mat2, ((1,), (0,))).astype(context().out_dtype())


@lowering(aten.addmm.default)
def addmm(self, mat1, mat2, beta=1, alpha=1):
    """aten::addmm: beta * self + alpha * (mat1 @ mat2); self broadcasts to (n, p)."""
    _reject_bool_product(mat1.dtype, "addmm_impl_cpu_", mat1.shape[1], mat1.shape[0] * mat2.shape[1])
    return _scaled_sum(self, _dot(mat1, mat2, ((1,), (0,))), beta, alpha, mat1.shape[1])


@lowering(aten.bmm.default)
def bmm(self, mat2):
    """aten::bmm: (b, n, m) @ (b, m, p) -> (b, n, p)."""
    if jnp.dtype(self.dtype) != jnp.dtype(mat2.dtype):
        raise RuntimeError(f"expected scalar type {scalar_type_name(self.dtype)} but found {scalar_type_name(mat2.dtype)}")
    _reject_bool(self.dtype, "bmm")
    return _dot(self, mat2, ((2,), (1,)), ((0,), (0,))).astype(context().out_dtype())


@lowering(aten.baddbmm.default)
def baddbmm(self, batch1, batch2, beta=1, alpha=1):
    """aten::baddbmm: beta * self + alpha * bmm(batch1, batch2)."""
    if not jnp.dtype(self.dtype) == jnp.dtype(batch1.dtype) == jnp.dtype(batch2.dtype):
        raise RuntimeError(f"Input dtypes must be the same, got: input {_cpp(self.dtype)}, batch1: "
                           f"{_cpp(batch1.dtype)}, batch2: {_cpp(batch2.dtype)}")
    _reject_bool_product(batch1.dtype, "baddbmm", batch1.shape[2], math.prod(context().out().shape))
    return _scaled_sum(self, _dot(batch1, batch2, ((2,), (1,)), ((0,), (0,))), beta, alpha, batch1.shape[2])


@lowering(aten.addbmm.default)
def addbmm(self, batch1, batch2, beta=1, alpha=1):
    """aten::addbmm: beta * self + alpha * sum_b(batch1[b] @ batch2[b]) -> (n, p),
    accumulated batch by batch like CPU."""
    _check_addmm_dtypes(self.dtype, batch1.dtype, batch2.dtype)
    _reject_bool_product(batch1.dtype, "addmm_impl_cpu_", batch1.shape[0] * batch1.shape[2],
                         batch1.shape[1] * batch2.shape[2])
    out = context().out_dtype()
    products = _dot(batch1, batch2, ((2,), (1,)), ((0,), (0,)))
    if products.shape[0] == 0:  # CPU's `result.mul_(beta)` (or zero_), whatever the result's size
        _check_beta_multiplies(beta, out)
        return jnp.broadcast_to(_beta_self(self, beta, products.dtype), context().out().shape).astype(out)
    # CPU runs one addmm_ per batch, rounding the running result each time, with beta
    # for the first and 1 for the others.
    first = _scaled_sum(self, products[0], beta, alpha, batch1.shape[2])
    if first.size == 0:
        return first
    if batch1.shape[2] == 0:  # each later addmm_ is `result.mul_(1)`
        if products.shape[0] > 1:
            _check_beta_multiplies(1, out)
        return first
    alpha = scalar_to(alpha, products.dtype)

    def step(acc, p):
        return (acc.astype(p.dtype) + p * _scalar(alpha, p.dtype)).astype(out), None

    return lax.scan(step, first, products[1:])[0]


@lowering(aten.mv.default)
def mv(self, vec):
    """aten::mv: (n, m) @ (m,) -> (n,)."""
    out_dtype = context().out_dtype()
    if not jnp.dtype(out_dtype) == jnp.dtype(self.dtype) == jnp.dtype(vec.dtype):
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {scalar_type_name(out_dtype)}, "
                           f"{scalar_type_name(self.dtype)}, and {scalar_type_name(vec.dtype)}")
    _reject_bool(self.dtype, "addmv_impl_cpu")
    return _dot(self, vec, ((1,), (0,))).astype(context().out_dtype())


@lowering(aten.addmv.default, static=("beta",))
def addmv(self, mat, vec, beta=1, alpha=1):
    """aten::addmv: beta * self + alpha * (mat @ vec). For half types CPU's gemv rounds
    beta * self and alpha to the dtype before the float32 sum; so does this. `beta` is
    static: whether it is 0 decides the result's shape for an empty matrix."""
    _reject_bool_product(mat.dtype, "addmv_impl_cpu", mat.shape[1], mat.shape[0])
    out = context().out_dtype()
    if mat.size == 0:  # ATen's shortcut for an empty matrix: beta * self alone, alpha unread
        if not jnp.issubdtype(out, jnp.floating) or isinstance(beta, complex):
            beta = scalar_to(beta, out)  # its 0-dim tensor of beta checks all but float overflow
        return jnp.broadcast_to(_beta_self(self, beta, out), context().out().shape)
    alpha, beta = scalar_to(alpha, out), scalar_to(beta, out)  # CPU's gemv reads them in the output type
    product = _dot(mat, vec, ((1,), (0,)))
    if out not in (jnp.bfloat16, jnp.float16):
        return _scaled_sum(self, product, beta, alpha, mat.shape[1])
    product = product * _scalar(alpha, out).astype(product.dtype)
    if isinstance(beta, (int, float)) and beta == 0:
        return product.astype(out)
    return (_beta_self(self, beta, out).astype(product.dtype) + product).astype(out)


@lowering(aten.dot.default)
def dot(self, tensor):
    """aten::dot: inner product of two 1-D tensors of the same dtype (checked by
    `_dot_meta_check`) -> 0-dim."""
    _reject_bool(self.dtype, "dot")
    return _dot(self, tensor, ((0,), (0,))).astype(context().out_dtype())


@lowering(aten.vdot.default)
def vdot(self, other):
    """aten::vdot: dot(conj(self), other); real inputs go to CPU's dot, whose name its
    errors carry."""
    _reject_bool(self.dtype, "dot")
    return _dot(jnp.conj(self), other, ((0,), (0,))).astype(context().out_dtype())


@lowering(aten.addr.default)
def addr(self, vec1, vec2, beta=1, alpha=1):
    """aten::addr: beta * self + alpha * outer(vec1, vec2), elementwise in the output
    dtype in CPU's operation order (so half types round after each op, as on CPU);
    bool tensors use and/or. beta == 0 ignores self."""
    out = context().out_dtype()
    alpha, beta = scalar_to(alpha, out), scalar_to(beta, out)
    v1, v2 = vec1.astype(out)[:, None], vec2.astype(out)[None, :]
    if out == jnp.bool_:
        outer = v1 & v2 & jnp.asarray(alpha, jnp.bool_)
        return outer | (self & jnp.asarray(beta, jnp.bool_))
    outer = _scalar(alpha, out) * v1 * v2
    if isinstance(beta, (int, float)) and beta == 0:
        return jnp.broadcast_to(outer, context().out().shape)
    return _beta_self(self, beta, out) + outer



# ------------------------------------------------------------------ non-finite input
# CPU's LAPACK refuses some non-finite inputs; these report it as CPU's wrappers do
# (at::_linalg_check_errors: "<api>: (Batch element k): <message>" for batched input).
_SVD_NAN = "The algorithm failed to converge because the input matrix contained non-finite values."
_EIGH_NAN = ("The algorithm failed to converge because the input matrix is ill-conditioned or has too many "
             "repeated eigenvalues (error code: 1).")
_LAPACK_ARG = ('false INTERNAL ASSERT FAILED at "/__w/pytorch/pytorch/aten/src/ATen/native/BatchLinearAlgebra.cpp"'
               ":1652, please report a bug to PyTorch. torch.linalg.lstsq: {batch}Argument {arg} has illegal value. "
               "Most certainly there is a bug in the implementation calling the backend library.")


def _check_matrices(bad, exc_type, api, message, matrix: bool):
    """Deferred check that no matrix is `bad` (a bool per matrix, batch-shaped): CPU's
    error for the first bad one, with its batch index when the input is batched."""
    if matrix:
        context().check(~jnp.any(bad), exc_type, f"{api}: {message}")
        return
    flat = bad.reshape(-1)
    if flat.size == 0:
        return
    context().check(~jnp.any(flat), exc_type, f"{api}: (Batch element {{}}): {message}", value=jnp.argmax(flat))


def _has_nan(A):
    """Per matrix of (*, m, n): whether it holds a NaN."""
    return jnp.any(jnp.isnan(A), axis=(-2, -1))


def check_svd_input(A):
    """gesdd fails to converge on a NaN (not on inf: that gives NaNs): LinAlgError, as
    CPU's svd, svdvals, pinv, matrix_rank, matrix_norm(2, 'nuc') and cond raise it."""
    _check_matrices(_has_nan(A), torch.linalg.LinAlgError, "linalg.svd", _SVD_NAN, A.ndim == 2)


def check_eigh_input(A, UPLO):
    """syevd fails on a NaN in the triangle it reads (`UPLO`): LinAlgError, info 1."""
    n = A.shape[-1]
    tri = jnp.tril(jnp.ones((n, n), bool)) if UPLO.upper() == "L" else jnp.triu(jnp.ones((n, n), bool))
    bad = jnp.any(jnp.isnan(A) & tri, axis=(-2, -1))
    _check_matrices(bad, torch.linalg.LinAlgError, "linalg.eigh", _EIGH_NAN, A.ndim == 2)


def check_lstsq_input(A, B, driver, matrix: bool):
    """LAPACK's xGELS*/MKL rejects a NaN in A (argument 4, gels 5) or else in B (6, gels
    7) as an illegal argument, which CPU reports as an internal assert (RuntimeError)."""
    args = (5, 7) if driver == "gels" else (4, 6)
    nan_a = jnp.broadcast_to(_has_nan(A), B.shape[:-2])
    code = jnp.where(nan_a, 1, jnp.where(_has_nan(B), 2, 0)).reshape(-1)
    if code.size == 0:
        return
    first = jnp.argmax(code != 0)
    for kind, arg in ((1, args[0]), (2, args[1])):
        ok = ~(code[first] == kind)
        if matrix:
            context().check(ok, RuntimeError, _LAPACK_ARG.format(batch="", arg=arg))
        else:
            context().check(ok, RuntimeError, _LAPACK_ARG.format(batch="(Batch element {}): ", arg=arg), value=first)


# ------------------------------------------------------------------ decompositions
def _first_failure(bad):
    """LAPACK's int32 `info` from per-position failures along the last axis: the
    1-based index of the first one, 0 when there is none (always for 0 x 0 matrices)."""
    if bad.shape[-1] == 0:
        return jnp.zeros(bad.shape[:-1], jnp.int32)
    return jnp.where(jnp.any(bad, axis=-1), jnp.argmax(bad, axis=-1) + 1, 0).astype(jnp.int32)


def _potrf_info(A):
    """LAPACK potrf's info for (*, n, n): the order of the first leading minor that is
    not positive-definite. XLA only reports failure (a NaN factor), so this replays the
    unblocked Cholesky recurrence; callers run it only for failed matrices."""
    n = A.shape[-1]
    if n == 0 or A.size == 0:  # nothing to factor (the reshape below cannot infer -1)
        return jnp.zeros(A.shape[:-2], jnp.int32)
    a = A.reshape((-1, n, n))

    def one(m):
        def column(j, state):
            L, info = state
            mask = jnp.arange(n) < j
            lj = jnp.where(mask, L[j], 0)
            d = jnp.real(m[j, j] - jnp.sum(lj * jnp.conj(lj)))
            ok = d > 0
            info = jnp.where(~ok & (info == 0), j + 1, info)
            ljj = jnp.sqrt(jnp.where(ok, d, 1)).astype(m.dtype)
            col = (m[:, j] - jnp.where(mask[None, :], L, 0) @ jnp.conj(lj)) / ljj
            col = jnp.where(jnp.arange(n) > j, col, jnp.where(jnp.arange(n) == j, ljj, 0))
            return L.at[:, j].set(col), info

        return lax.fori_loop(0, n, column, (jnp.zeros_like(m), jnp.int32(0)))[1]

    return jax.vmap(one)(a).reshape(A.shape[:-2])


@lowering(aten.linalg_cholesky_ex.default)
def linalg_cholesky_ex(self, upper=False, check_errors=False):
    """aten::linalg_cholesky_ex: (L, info) of a batch of Hermitian positive-definite
    matrices (..., n, n). info != 0 marks a matrix that is not positive-definite (L is
    then NaN-filled by XLA where CPU leaves a partial factor)."""
    L = jnp.tril(lax.linalg.cholesky(self, symmetrize_input=False))
    failed = ~jnp.all(jnp.isfinite(L), axis=(-2, -1))
    info = lax.cond(jnp.any(failed), lambda: jnp.where(failed, _potrf_info(self), 0),
                    lambda: jnp.zeros(failed.shape, jnp.int32))
    if check_errors:
        context().check(jnp.all(info == 0), torch.linalg.LinAlgError,
                        "linalg.cholesky: The factorization could not be completed because the input is not "
                        "positive-definite (the leading minor of order {} is not positive-definite).",
                        value=jnp.max(info))
    if upper:
        L = jnp.conj(jnp.swapaxes(L, -1, -2))
    return L, info


def _nan_pivot(lu, piv):
    """LAPACK's getrf after a NaN pivot, from XLA's factorization (which skips the
    elimination step of a pivot that is not > 0 in magnitude, as of a zero one): getrf
    divides by it, so from the first NaN on the diagonal, at j, the entries below and
    right of it are NaN (L's column j and the trailing matrix), and the remaining
    columns' pivot searches find only NaN and swap nothing. XLA's later row swaps are
    undone in L's first j columns. A solve with such a factor is all NaN, as on CPU."""
    m, n = lu.shape[-2:]
    k = min(m, n)
    if k == 0:
        return lu, piv

    def one(lu, piv):
        bad = jnp.isnan(jnp.diagonal(lu))
        j = jnp.argmax(bad)

        def undo(i, x):
            t = k - 1 - i
            p = piv[t]
            swap = t > j
            rt, rp = x[t], x[p]
            x = x.at[t].set(jnp.where(swap, rp, rt))
            return x.at[p].set(jnp.where(swap, rt, x[p]))

        fixed = lax.fori_loop(0, k, undo, lu)
        rows, cols = jnp.arange(m)[:, None], jnp.arange(n)[None, :]
        nan = complex(math.nan, math.nan) if jnp.iscomplexobj(lu) else math.nan
        fixed = jnp.where((rows > j) & (cols >= j), jnp.asarray(nan, lu.dtype), fixed)
        fixed_piv = jnp.where(jnp.arange(k) > j, jnp.arange(k, dtype=piv.dtype), piv)
        has = jnp.any(bad)
        return jnp.where(has, fixed, lu), jnp.where(has, fixed_piv, piv)

    out, p = jax.vmap(one)(lu.reshape((-1, m, n)), piv.reshape((-1, k)))
    return out.reshape(lu.shape), p.reshape(piv.shape)


def _lu(A):
    """(LU, pivots (1-based int32, LAPACK order), info) of a batch of square matrices."""
    lu, piv, _ = lax.linalg.lu(A)
    lu, piv = _nan_pivot(lu, piv)
    info = _first_failure(jnp.diagonal(lu, axis1=-2, axis2=-1) == 0)
    return lu, (piv + 1).astype(jnp.int32), info


@lowering(aten.linalg_lu_factor_ex.default)
def linalg_lu_factor_ex(A, pivot=True, check_errors=False):
    """aten::linalg_lu_factor_ex: (LU, pivots, info) with partial pivoting, LAPACK's
    getrf layout (unit-lower L and U packed; 1-based pivots). info != 0: singular U."""
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    return _lu(A)


def _lu_solve(lu, piv0, B, left=True, adjoint=False):
    """Solves A X = B (or X A = B) from a packed LU factor and 0-based pivots."""
    if not left:
        # X A = B  <=>  A^H X^H = B^H
        X = _lu_solve(lu, piv0, jnp.conj(jnp.swapaxes(B, -1, -2)), True, not adjoint)
        return jnp.conj(jnp.swapaxes(X, -1, -2))
    n = lu.shape[-1]
    perm = lax.linalg.lu_pivots_to_permutation(piv0, n)
    if not adjoint:
        pb = jnp.take_along_axis(B, jnp.broadcast_to(perm[..., :, None], B.shape[:-2] + (n, B.shape[-1])), axis=-2)
        y = lax.linalg.triangular_solve(lu, pb, left_side=True, lower=True, unit_diagonal=True)
        return lax.linalg.triangular_solve(lu, y, left_side=True, lower=False)
    y = lax.linalg.triangular_solve(lu, B, left_side=True, lower=False, transpose_a=True, conjugate_a=True)
    x = lax.linalg.triangular_solve(lu, y, left_side=True, lower=True, unit_diagonal=True, transpose_a=True,
                                    conjugate_a=True)
    inv = jnp.argsort(perm, axis=-1)
    return jnp.take_along_axis(x, jnp.broadcast_to(inv[..., :, None], x.shape), axis=-2)


def _as_matrix(B, A, left):
    """ATen's vector-rhs rule: B is a (batch of) vector(s) when B.ndim == 1 or when
    B.shape == A.shape[:-1]."""
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and B.shape == A.shape[:-1])
    if not vector:
        return B, False
    return (B[..., :, None] if left else B[..., None, :]), True


@lowering(aten._linalg_solve_ex.default)
def linalg_solve_ex(A, B, left=True, check_errors=False):
    """aten::_linalg_solve_ex: (X, LU, pivots, info) with A X = B (left) or X A = B.
    A: (*, n, n); B: (*, n, k) or (*, n). info != 0 marks a singular A."""
    ctx = context()
    lu, piv, info = _lu(A)
    Bm, vector = _as_matrix(B, A, left)
    batch = jnp.broadcast_shapes(lu.shape[:-2], Bm.shape[:-2])
    lu_b = jnp.broadcast_to(lu, batch + lu.shape[-2:])
    piv_b = jnp.broadcast_to(piv - 1, batch + piv.shape[-1:])
    X = _lu_solve(lu_b, piv_b, jnp.broadcast_to(Bm, batch + Bm.shape[-2:]), left)
    if vector:
        X = X[..., 0] if left else X[..., 0, :]
    if check_errors:
        ctx.check(jnp.all(info == 0), torch.linalg.LinAlgError,
                  "linalg.solve: The solver failed because the input matrix is singular.")
    return X.reshape(ctx.out(0).shape), lu, piv, info


@lowering(aten.linalg_lu_solve.default)
def linalg_lu_solve(LU, pivots, B, left=True, adjoint=False):
    """aten::linalg_lu_solve: solves with a factor from lu_factor. LU: (*, n, n);
    pivots: (*, n) 1-based; B: (*, n, k)."""
    shape = context().out().shape
    batch = shape[:-2]
    lu = jnp.broadcast_to(LU, batch + LU.shape[-2:])
    piv = jnp.broadcast_to(pivots.astype(jnp.int32) - 1, batch + pivots.shape[-1:])
    return _lu_solve(lu, piv, jnp.broadcast_to(B, shape), left, adjoint)


@lowering(aten.linalg_inv_ex.default)
def linalg_inv_ex(A, check_errors=False):
    """aten::linalg_inv_ex: (inverse, info) of (*, n, n); info != 0 for singular."""
    lu, piv, info = _lu(A)
    n = A.shape[-1]
    eye = jnp.broadcast_to(jnp.eye(n, dtype=A.dtype), A.shape)
    inv = _lu_solve(lu, piv - 1, eye)
    if check_errors:
        context().check(jnp.all(info == 0), torch.linalg.LinAlgError,
                        "linalg.inv: The diagonal element {} is zero, the inversion could not be completed "
                        "because the input matrix is singular.", value=jnp.max(info))
    return inv, info


def _input_is_contiguous() -> bool:
    """Whether the first tensor argument of the op being traced is contiguous (as
    `Tensor.is_contiguous()` says)."""
    contiguous = context().contiguous
    return contiguous[0] if contiguous else True


def _det_lu(A):
    """The (LU, pivots) that CPU's _linalg_det/_linalg_slogdet return, and that their
    backward formulas consume: for a contiguous real A, ATen factors A^T (LAPACK's
    column-major view of A, saving a copy) and the backward then solves with
    adjoint=False; otherwise it factors A and the backward uses adjoint=True."""
    use_A_T = _input_is_contiguous() and not jnp.iscomplexobj(A)
    lu, piv, _ = _lu(jnp.swapaxes(A, -1, -2) if use_A_T else A)
    return lu, piv


def _det_sign(lu, piv, dtype):
    n = lu.shape[-1]
    swaps = jnp.sum(piv != jnp.arange(1, n + 1, dtype=jnp.int32), axis=-1)
    return jnp.where(swaps % 2 == 0, 1, -1).astype(dtype)


@lowering(aten._linalg_det.default)
def linalg_det(A):
    """aten::_linalg_det: (det, LU, pivots) of (*, n, n); singular matrices give 0.
    LU and pivots are CPU's (see `_det_lu`); det(A^T) == det(A)."""
    lu, piv = _det_lu(A)
    diag = jnp.diagonal(lu, axis1=-2, axis2=-1)
    return _det_sign(lu, piv, A.dtype) * jnp.prod(diag, axis=-1), lu, piv


@lowering(aten._linalg_slogdet.default)
def linalg_slogdet(A):
    """aten::_linalg_slogdet: (sign, logabsdet, LU, pivots) of (*, n, n); LU and
    pivots as in `linalg_det`."""
    lu, piv = _det_lu(A)
    diag = jnp.diagonal(lu, axis1=-2, axis2=-1)
    if jnp.iscomplexobj(A):
        absd = jnp.abs(diag)
        sign = _det_sign(lu, piv, A.dtype) * jnp.prod(diag / jnp.where(absd == 0, 1, absd).astype(A.dtype),
                                                      axis=-1)
    else:
        # CPU's sign of a NaN is 0 (so is a NaN matrix's sign).
        sign = _det_sign(lu, piv, A.dtype) * jnp.prod(jnp.where(jnp.isnan(diag), 0, jnp.sign(diag)), axis=-1)
    return sign, jnp.sum(jnp.log(jnp.abs(diag)), axis=-1), lu, piv


@lowering(aten.linalg_qr.default, static=("mode",))
def linalg_qr(A, mode="reduced"):
    """aten::linalg_qr: (Q, R) of (*, m, n); mode 'reduced', 'complete' or 'r' (Q empty)."""
    if mode == "r":
        r = jnp.linalg.qr(A, mode="r")
        return jnp.zeros(context().out(0).shape, A.dtype), r
    return jnp.linalg.qr(A, mode=mode)


@lowering(aten._linalg_svd.default)
def linalg_svd(A, full_matrices=False, compute_uv=True, driver=None):
    """aten::_linalg_svd: (U, S, Vh) of (*, m, n); U and Vh empty without compute_uv.
    Singular vectors are unique only up to sign: compare reconstructions, not U.
    A NaN raises CPU's LinAlgError (`check_svd_input`)."""
    check_svd_input(A)
    # XLA's SVD does not return on an inf (CPU gives NaN singular values): a non-finite
    # matrix is factored as zeros (finite vectors, as LAPACK's) with NaN singular values.
    finite = jnp.all(jnp.isfinite(A), axis=(-2, -1), keepdims=True)
    safe = jnp.where(finite, A, 0)
    if not compute_uv:
        s = jnp.where(finite[..., 0], jnp.linalg.svd(safe, compute_uv=False), jnp.nan)
        ctx = context()
        return jnp.zeros(ctx.out(0).shape, A.dtype), s, jnp.zeros(ctx.out(2).shape, A.dtype)
    u, s, vh = jnp.linalg.svd(safe, full_matrices=full_matrices)
    return u, jnp.where(finite[..., 0], s, jnp.nan), vh


@lowering(aten._linalg_eigh.default, static=("UPLO",))
def linalg_eigh(A, UPLO="L", compute_v=True):
    """aten::_linalg_eigh: (eigenvalues ascending, eigenvectors) of Hermitian (*, n, n),
    reading only the `UPLO` triangle; a NaN there raises CPU's LinAlgError."""
    check_eigh_input(A, UPLO)
    w, v = jnp.linalg.eigh(A, UPLO=UPLO, symmetrize_input=False)
    if not compute_v:
        return w, jnp.zeros(context().out(1).shape, A.dtype)
    return w, v


@lowering(aten.linalg_pinv.atol_rtol_tensor, eager=False)
def linalg_pinv(A, atol=None, rtol=None, hermitian=False):
    """aten::linalg_pinv.atol_rtol_tensor in compiled graphs (eager runs ATen's composite
    kernel, which this follows): the pseudo-inverse (*, n, m) of (*, m, n) from its SVD
    (`hermitian`: its eigendecomposition), singular values at or below
    max(atol, rtol * largest) dropped; the tolerances default as in ATen's
    get_atol_rtol (float64: atol 0, rtol eps * max(m, n), or 0 when atol > 0)."""
    m, n = A.shape[-2:]
    if A.size == 0:
        return jnp.zeros(context().out().shape, A.dtype)
    f64 = jnp.float64
    default_rtol = jnp.asarray(jnp.finfo(A.dtype).eps * max(m, n), f64)
    if rtol is None:
        rtol = default_rtol if atol is None else jnp.where(atol > 0, jnp.zeros((), f64), default_rtol)
    if atol is None:
        atol = jnp.zeros((), f64)
    if hermitian:
        s, u = linalg_eigh(A)
        magnitude = jnp.abs(s)
        largest = jnp.max(magnitude, axis=-1, keepdims=True)
        v, uh = u, jnp.conj(jnp.swapaxes(u, -1, -2))
    else:
        u, s, vh = linalg_svd(A)
        magnitude = s
        largest = s[..., :1]  # descending
        v, uh = jnp.conj(jnp.swapaxes(vh, -1, -2)), jnp.conj(jnp.swapaxes(u, -1, -2))
    tol = jnp.maximum(atol[..., None], rtol[..., None] * largest)
    s_inv = jnp.where(magnitude > tol, 1 / s, jnp.zeros((), s.dtype)).astype(A.dtype)
    return jnp.matmul(v * s_inv[..., None, :], uh, precision=_HIGHEST)


@lowering(aten.linalg_solve_triangular.default)
def linalg_solve_triangular(self, B, upper, left=True, unitriangular=False):
    """aten::linalg_solve_triangular: X with A X = B (left) or X A = B; A: (*, n, n)."""
    shape = context().out().shape
    a_shape = shape[:-2] + self.shape[-2:]
    return lax.linalg.triangular_solve(jnp.broadcast_to(self, a_shape), jnp.broadcast_to(B, shape),
                                       left_side=left, lower=not upper, unit_diagonal=unitriangular)


def _cholesky_solve(L, B, upper):
    """X with (L L^H) X = B, or (U^H U) X = B when `upper`, for a batch of factors."""
    shape = jnp.broadcast_shapes(L.shape[:-2], B.shape[:-2])
    L = jnp.broadcast_to(L, shape + L.shape[-2:])
    B = jnp.broadcast_to(B, shape + B.shape[-2:])
    if upper:  # U^H y = B, then U X = y
        y = lax.linalg.triangular_solve(L, B, left_side=True, lower=False, transpose_a=True, conjugate_a=True)
        return lax.linalg.triangular_solve(L, y, left_side=True, lower=False)
    y = lax.linalg.triangular_solve(L, B, left_side=True, lower=True)
    return lax.linalg.triangular_solve(L, y, left_side=True, lower=True, transpose_a=True, conjugate_a=True)


@lowering(aten._cholesky_solve_helper.default)
@lowering(aten.cholesky_solve.default, eager=False)
def cholesky_solve_helper(self, A, upper=False):
    """aten::_cholesky_solve_helper (behind torch.cholesky_solve): X with A A^H X = self
    for the Cholesky factor A (lower; upper: A^H A); self (*, n, k), A (*, n, n).
    Also `aten::cholesky_solve` in compiled graphs, whose batch dims broadcast here
    (eager: ATen's composite kernel broadcasts them and calls the helper)."""
    return _cholesky_solve(A, self, upper)


@lowering(aten.cholesky_inverse.default)
def cholesky_inverse(self, upper=False):
    """aten::cholesky_inverse: (L L^H)^-1 (upper: (U^H U)^-1) of a batch of Cholesky
    factors (*, n, n)."""
    eye = jnp.broadcast_to(jnp.eye(self.shape[-1], dtype=self.dtype), self.shape)
    return _cholesky_solve(self, eye, upper)


def _permutation_matrix(perm, m, dtype):
    """P with P[perm[j], j] = 1, so that A = P L U when rows perm of A are L U."""
    return jnp.swapaxes(jax.nn.one_hot(perm, m, dtype=dtype), -1, -2)


def _unpack_lu(lu, k):
    """(L, U) of a packed factor: L unit lower (*, m, k), U upper (*, k, n)."""
    m = lu.shape[-2]
    return jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=lu.dtype), jnp.triu(lu[..., :k, :])


@lowering(aten.linalg_lu.default)
def linalg_lu(A, pivot=True):
    """aten::linalg_lu: (P, L, U) with A = P L U, partial pivoting, any (*, m, n)."""
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    m, n = A.shape[-2:]
    if A.size == 0:
        return tuple(jnp.zeros(context().out(i).shape, A.dtype) for i in range(3))
    lu, _, perm = lax.linalg.lu(A)
    return (_permutation_matrix(perm, m, A.dtype),) + _unpack_lu(lu, min(m, n))


@lowering(aten.lu_unpack.default)
def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """aten::lu_unpack: (P, L, U) with A = P L U from getrf's packed factor (*, m, n) and
    1-based pivots (*, k): L (*, m, k) unit lower, U (*, k, n) upper, P (*, m, m) with
    P[perm[j], j] = 1 for the permutation the row swaps make. Outputs not asked for
    are empty, with the meta kernel's shapes."""
    ctx = context()
    m, n = LU_data.shape[-2:]
    k = min(m, n)
    outs = [jnp.zeros(ctx.out(i).shape, LU_data.dtype) for i in range(3)]
    if unpack_pivots:
        if k:
            perm = lax.linalg.lu_pivots_to_permutation(LU_pivots.astype(jnp.int32) - 1, m)
        else:
            perm = jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32), LU_pivots.shape[:-1] + (m,))
        outs[0] = _permutation_matrix(perm, m, LU_data.dtype)
    if unpack_data:
        outs[1], outs[2] = _unpack_lu(LU_data, k)
    return tuple(outs)


@lowering(aten.linalg_matrix_exp.default)
def linalg_matrix_exp(self):
    """aten::linalg_matrix_exp: exp of a (batch of) square matrices (XLA's Pade
    approximant with scaling and squaring; PyTorch's CPU uses a Taylor one: equal within
    rounding). Half types compute in float32. Its backward is a matrix_exp of a block
    matrix, so this lowering serves both."""
    n = self.shape[-1]
    if n == 0 or self.size == 0:
        return jnp.zeros(self.shape, self.dtype)
    x = self.astype(acc_type(self.dtype))
    flat = x.reshape((-1, n, n))
    out = jax.vmap(jax.scipy.linalg.expm)(flat)
    return out.reshape(self.shape).astype(self.dtype)


def _geqrf_meta(self):
    """geqrf's shapes and CPU's layout (LAPACK's: a column-major in each matrix)."""
    *batch, m, n = self.shape
    a = torch.empty(*batch, n, m, dtype=self.dtype, device="meta").mT
    return a, torch.empty(*batch, min(m, n), dtype=self.dtype, device="meta")


meta_impl("geqrf", _geqrf_meta)  # PyTorch has no meta kernel for it


@lowering(aten.geqrf.default)
def geqrf(self):
    """aten::geqrf: LAPACK's compact QR of (*, m, n): R on and above the diagonal,
    the Householder vectors below it, and their scalars tau (*, min(m, n)). JAX's geqrf
    primitive (LAPACK's on CPU) is not re-exported by jax.lax.linalg."""
    from jax._src.lax import linalg as lax_linalg

    return lax_linalg.geqrf(self)


@lowering(aten.ormqr.default)
def ormqr(self, input2, input3, left=True, transpose=False):
    """aten::ormqr: input3 multiplied by Q (its conjugate transpose when `transpose`),
    on the left or the right, where Q (mn x mn) is the product of the Householder
    reflectors in the first k columns of `self` (*, mn, >= k) and `input2` (*, k). Q is
    built whole: reflectors padded with tau = 0 are identities."""
    mn, k = self.shape[-2], input2.shape[-1]
    a = jnp.concatenate([self[..., :k], jnp.zeros(self.shape[:-1] + (mn - k,), self.dtype)], axis=-1)
    tau = jnp.concatenate([input2, jnp.zeros(input2.shape[:-1] + (mn - k,), input2.dtype)], axis=-1)
    q = lax.linalg.householder_product(a, tau)
    if transpose:
        q = jnp.conj(jnp.swapaxes(q, -1, -2))
    return jnp.matmul(q, input3, precision=lax.Precision.HIGHEST) if left else \
        jnp.matmul(input3, q, precision=lax.Precision.HIGHEST)


@lowering(aten.triangular_solve.default)
def triangular_solve(self, A, upper=True, transpose=False, unitriangular=False):
    """aten::triangular_solve: (X, A) with op(A) X = self, op(A) = A^T when `transpose`
    (no conjugation), batch dimensions broadcast; A is returned broadcast to the batch,
    as ATen's cloned coefficient."""
    batch = jnp.broadcast_shapes(self.shape[:-2], A.shape[:-2])
    b = jnp.broadcast_to(self, batch + self.shape[-2:])
    a = jnp.broadcast_to(A, batch + A.shape[-2:])
    x = lax.linalg.triangular_solve(a, b, left_side=True, lower=not upper, transpose_a=transpose,
                                    conjugate_a=False, unit_diagonal=unitriangular)
    return x, a


# ------------------------------------------------------------------ LDL (Bunch-Kaufman)
_BK_ALPHA = (1 + 17 ** 0.5) / 8  # LAPACK sytf2's pivot threshold


def _symmetrized(A, herm):
    """The full matrix whose lower triangle is A's (LAPACK reads only that one): the
    strict lower part mirrored, conjugated when `herm`, with a real diagonal."""
    low = jnp.tril(A, -1)
    diag = jnp.diagonal(A, axis1=-2, axis2=-1)
    if herm:
        diag = jnp.real(diag).astype(A.dtype)
    upper = jnp.swapaxes(jnp.conj(low) if herm else low, -1, -2)
    return low + upper + diag[..., :, None] * jnp.eye(A.shape[-1], dtype=A.dtype)


def _ldl_factor_one(W, herm):
    """LAPACK's unblocked sytf2/hetf2 (uplo 'L', Bunch-Kaufman partial pivoting) on
    one full symmetric (Hermitian) n x n matrix: (LD, 1-based pivots, info). The
    matrix is kept whole and re-mirrored after every step, so LAPACK's lower-triangle
    row/column interchanges of the trailing block are plain symmetric permutations."""
    n = W.shape[-1]
    idx = jnp.arange(n)
    cplx = jnp.iscomplexobj(W)
    real = jnp.finfo(W.dtype).dtype

    def cabs1(z):  # LAPACK's i?amax / CABS1 measure
        return (jnp.abs(jnp.real(z)) + jnp.abs(jnp.imag(z))) if cplx else jnp.abs(z)

    def dabs(z):  # the measure of a diagonal entry: hetf2 reads only its real part
        return jnp.abs(jnp.real(z)) if herm else cabs1(z)

    def conj(z):
        return jnp.conj(z) if herm else z

    def step(k, state):
        W0, piv0, info0, skip = state
        W = W0
        col = W[:, k]
        absakk = dabs(W[k, k])
        offd = jnp.where(idx > k, cabs1(col), -1)
        imax = jnp.argmax(offd)
        colmax = jnp.where(k < n - 1, offd[imax], 0).astype(real)
        zero = (jnp.maximum(absakk, colmax) == 0) | jnp.isnan(absakk)
        rowmax = jnp.max(jnp.where((idx >= k) & (idx != imax), cabs1(W[imax]), -1)).astype(real)
        keep = absakk >= _BK_ALPHA * colmax
        keep = keep | (absakk >= _BK_ALPHA * colmax * (colmax / rowmax))
        one_at_imax = dabs(W[imax, imax]) >= _BK_ALPHA * rowmax
        kp = jnp.where(zero | keep, k, imax)
        two = ~(zero | keep | one_at_imax)
        kk = jnp.where(two, k + 1, k)
        # Interchange kk and kp in the trailing block (identity when kp == kk).
        perm = jnp.where(idx == kk, kp, jnp.where(idx == kp, kk, idx))
        trail = (idx >= k)[:, None] & (idx >= k)[None, :]
        W = jnp.where(trail, W[perm][:, perm], W)
        # 1 x 1 pivot: rank-1 update with the column scaled by 1 / d (syr, then scal).
        x = jnp.where(idx > k, W[:, k], 0)
        r1 = (1 / jnp.real(W[k, k])).astype(W.dtype) if herm else 1 / W[k, k]
        W1 = W + x[:, None] * (-r1 * conj(x)[None, :])
        W1 = W1.at[:, k].set(jnp.where(idx > k, x * r1, W[:, k]))
        # 2 x 2 pivot: rank-2 update by the inverse of D's block (sytf2's w_k, w_k+1).
        a = jnp.where(idx > k + 1, W[:, k], 0)
        b = jnp.where(idx > k + 1, W[:, jnp.minimum(k + 1, n - 1)], 0)
        k1 = jnp.minimum(k + 1, n - 1)
        if herm:
            d = jnp.abs(W[k1, k])
            d11, d22 = jnp.real(W[k1, k1]) / d, jnp.real(W[k, k]) / d
            tt = 1 / (d11 * d22 - 1)
            d21 = W[k1, k] / d
            dd = (tt / d).astype(W.dtype)
            wk = dd * (d11 * a - d21 * b)
            wkp1 = dd * (d22 * b - jnp.conj(d21) * a)
        else:
            d21 = W[k1, k]
            d11, d22 = W[k1, k1] / d21, W[k, k] / d21
            t = 1 / (d11 * d22 - 1)
            d21 = t / d21
            wk = d21 * (d11 * a - b)
            wkp1 = d21 * (d22 * b - a)
        W2 = W - (a[:, None] * conj(wk)[None, :] + b[:, None] * conj(wkp1)[None, :])
        W2 = W2.at[:, k].set(jnp.where(idx > k + 1, wk, W[:, k]))
        W2 = W2.at[:, k1].set(jnp.where(idx > k + 1, wkp1, W2[:, k1]))
        W = jnp.where(zero, W, jnp.where(two, W2, W1))
        W = _symmetrized(W, herm)
        p = jnp.where(two, -(kp + 1), kp + 1).astype(jnp.int32)
        piv = piv0.at[k].set(p)
        piv = jnp.where(two, piv.at[k1].set(p), piv)
        info = jnp.where(zero & (info0 == 0), k + 1, info0).astype(jnp.int32)
        return (jnp.where(skip, W0, W), jnp.where(skip, piv0, piv), jnp.where(skip, info0, info),
                ~skip & two)

    init = (W, jnp.zeros((n,), jnp.int32), jnp.int32(0), jnp.bool_(False))
    W, piv, info, _ = lax.fori_loop(0, n, step, init)
    return jnp.tril(W), piv, info


@lowering(aten.linalg_ldl_factor_ex.default)
def linalg_ldl_factor_ex(self, hermitian=False, check_errors=False):
    """aten::linalg_ldl_factor_ex: (LD, pivots, info) of symmetric (Hermitian when
    `hermitian`) (*, n, n), as CPU's LAPACK sytrf/hetrf with uplo 'L': Bunch-Kaufman
    diagonal pivoting with 1 x 1 and 2 x 2 blocks, L (unit, below the diagonal) and D
    packed in the lower triangle, the upper one zeroed, pivots 1-based (a 2 x 2 block
    gives both its rows -kp). info = k marks an exactly zero D[k, k]. Follows the
    reference dsytf2/zhetf2 step by step (MKL's sytrf takes the same pivots)."""
    herm = hermitian and jnp.iscomplexobj(self)
    n = self.shape[-1]
    batch = self.shape[:-2]
    if self.size == 0:
        return (jnp.zeros(self.shape, self.dtype), jnp.zeros(batch + (n,), jnp.int32),
                jnp.zeros(batch, jnp.int32))
    W = _symmetrized(self, herm).reshape((-1, n, n))
    LD, piv, info = jax.vmap(lambda w: _ldl_factor_one(w, herm))(W)
    info = info.reshape(batch)
    if check_errors:
        context().check(jnp.all(info == 0), RuntimeError,
                        "torch.linalg.ldl_factor_ex: Unknown error code: {}.", value=jnp.max(info))
    return LD.reshape(self.shape), piv.reshape(batch + (n,)), info


def _ldl_solve_one(LD, piv, B, herm):
    """LAPACK's sytrs/hetrs (uplo 'L') for one factor: X with A X = B, applying the
    factor's interchanges and blocks one by one as LAPACK does (L X = B forwards, then
    D, then L^T (L^H) backwards)."""
    n = LD.shape[-1]
    idx = jnp.arange(n)

    def conj(z):
        return jnp.conj(z) if herm else z

    # Which rows start a block: a 2 x 2 block (negative pivot) covers its row and the next.
    def starts(second, p):
        start = ~second
        return start & (p < 0), start

    _, first = lax.scan(starts, jnp.bool_(False), piv)
    two = first & (piv < 0)

    def swap(B, i, j):
        perm = jnp.where(idx == i, j, jnp.where(idx == j, i, idx))
        return B[perm]

    def forward(k, B):
        k1 = jnp.minimum(k + 1, n - 1)
        # 1 x 1: interchange, eliminate below, divide by D[k, k].
        B1 = swap(B, k, piv[k] - 1)
        B1 = B1 - jnp.where(idx > k, LD[:, k], 0)[:, None] * B1[k][None, :]
        dk = jnp.real(LD[k, k]).astype(LD.dtype) if herm else LD[k, k]
        B1 = B1.at[k].set(B1[k] / dk)
        # 2 x 2: interchange row k + 1, eliminate below with both columns, solve the block.
        B2 = swap(B, k1, -piv[k] - 1)
        below = idx > k + 1
        B2 = B2 - jnp.where(below, LD[:, k], 0)[:, None] * B2[k][None, :]
        B2 = B2 - jnp.where(below, LD[:, k1], 0)[:, None] * B2[k1][None, :]
        akm1k = LD[k1, k]
        akm1 = LD[k, k] / conj(akm1k)
        ak = LD[k1, k1] / akm1k
        denom = akm1 * ak - 1
        bkm1, bk = B2[k] / conj(akm1k), B2[k1] / akm1k
        B2 = B2.at[k].set((ak * bkm1 - bk) / denom).at[k1].set((akm1 * bk - bkm1) / denom)
        return jnp.where(first[k], jnp.where(two[k], B2, B1), B)

    def backward(j, B):
        k = n - 1 - j  # the last row of a block
        # A block's last row: a 1 x 1 block, or the second row of a 2 x 2 one.
        last2 = (k > 0) & two[jnp.maximum(k - 1, 0)]
        km1 = jnp.maximum(k - 1, 0)
        below = (idx > k)[:, None]
        B1 = B.at[k].add(-jnp.sum(jnp.where(below, conj(LD[:, k])[:, None] * B, 0), axis=0))
        B2 = B1.at[km1].add(-jnp.sum(jnp.where(below, conj(LD[:, km1])[:, None] * B, 0), axis=0))
        p = jnp.where(last2, -piv[k], piv[k]) - 1
        # The first row of a 2 x 2 block was handled with its second one.
        active = (first[k] & ~two[k]) | last2
        return jnp.where(active, swap(jnp.where(last2, B2, B1), k, p), B)

    B = lax.fori_loop(0, n, forward, B)
    return lax.fori_loop(0, n, backward, B)


@lowering(aten.linalg_ldl_solve.default)
def linalg_ldl_solve(LD, pivots, B, hermitian=False):
    """aten::linalg_ldl_solve: X with A X = B for A's LDL factor from ldl_factor (LD
    (*, n, n), pivots (*, n)), B (*, n, k), batch dimensions broadcast; CPU's LAPACK
    sytrs/hetrs replayed (see `_ldl_solve_one`)."""
    herm = hermitian and jnp.iscomplexobj(LD)
    shape = context().out().shape
    if 0 in shape:
        return jnp.zeros(shape, B.dtype)
    n = LD.shape[-1]
    batch = shape[:-2]
    ld = jnp.broadcast_to(LD, batch + (n, n)).reshape((-1, n, n))
    piv = jnp.broadcast_to(pivots.astype(jnp.int32), batch + (n,)).reshape((-1, n))
    b = jnp.broadcast_to(B, shape).reshape((-1,) + shape[-2:])
    return jax.vmap(lambda l, p, x: _ldl_solve_one(l, p, x, herm))(ld, piv, b).reshape(shape)


# ------------------------------------------------------------------ lstsq
_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _lstsq_shapes(self, b, driver):
    """CPU's checks of linalg_lstsq (ATen's order, its messages) and its output shapes:
    (solution, residuals, rank, singular_values, vector_case). Residuals exist for
    m > n and drivers other than gelsy (gelsd/gelss drop them again when a matrix is
    rank-deficient: the host kernel decides that); rank is per matrix of the
    unbroadcast input for every driver but gels, singular values for gelsd/gelss."""
    if self.dim() < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    if b.dim() < 1:
        raise RuntimeError("torch.linalg.lstsq: other must have at least 1 dimension.")
    if self.dtype != b.dtype:
        raise RuntimeError("torch.linalg.lstsq: Expected input and other to have the same dtype, but got input's "
                           f"dtype {scalar_type_name(dt.to_jax(self.dtype))} and other's dtype {scalar_type_name(dt.to_jax(b.dtype))}")
    diff = self.dim() - b.dim()
    if not 0 <= diff <= 1:
        raise RuntimeError("torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and "
                           "(input.dim() - other.dim()) <= 1")
    b_rows = b.shape[-1] if diff else b.shape[-2]
    if self.shape[-2] != b_rows:
        raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(-1)" if diff else
                           "torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    driver = driver or "gelsy"
    if driver not in _LSTSQ_DRIVERS:
        raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    if not (self.dtype.is_floating_point or self.dtype.is_complex) or self.dtype in (torch.float16, torch.bfloat16):
        raise RuntimeError("This function doesn't handle types other than float and double")
    m, n = self.shape[-2:]
    k = 1 if diff else b.shape[-1]
    batch = tuple(torch.broadcast_shapes(self.shape[:-2], b.shape[:-1 - (not diff)]))
    solution = batch + ((n,) if diff else (n, k))
    residuals = batch + (k,) if m > n and driver != "gelsy" else (0,)
    rank = tuple(self.shape[:-2]) if driver != "gels" else (0,)
    sv = tuple(self.shape[:-2]) + (min(m, n),) if driver in ("gelsd", "gelss") else (0,)
    return solution, residuals, rank, sv, bool(diff)


def _lstsq_meta(self, b, rcond=None, *, driver=None):
    """The outputs' shapes, dtypes and CPU's strides. CPU's solution is the top n rows
    of the (max(m, n), k) column-major buffers LAPACK solves in place
    (BatchLinearAlgebra.cpp `linalg_lstsq_out_info`: `solution.narrow(-2, 0, n)`): its
    columns are max(m, n) apart, so for m > n it is a view of a larger storage (the
    executor makes such outputs, `executor._fresh_stride`); a vector solution is the
    top n of each max(m, n) column."""
    shapes = _lstsq_shapes(self, b, driver)
    real = self.real.dtype if self.dtype.is_complex else self.dtype
    out_dtypes = (self.dtype, real, torch.int64, real)
    outs = [torch.empty(s, dtype=d, device="meta") for s, d in zip(shapes[:4], out_dtypes)]
    solution = shapes[0]
    rows = max(self.shape[-2], self.shape[-1])
    if shapes[4]:  # vector case: (*batch, n) of (*batch, rows)
        full = torch.empty(solution[:-1] + (rows,), device="meta")[..., :solution[-1]]
    else:  # (*batch, n, k) of column-major (*batch, rows, k)
        full = torch.empty(solution[:-2] + (solution[-1], rows), device="meta").mT[..., :solution[-2], :]
    outs[0] = torch.empty_strided(solution, full.stride(), dtype=self.dtype, device="meta")
    return tuple(outs)


meta_impl("linalg_lstsq", _lstsq_meta)  # PyTorch has none (CPU computes residuals' shape late)


def _nrm2(x, axis=0):
    """||x||_2 along `axis`, scaled by the largest |x_i| first as xNRM2 is, so that
    squares of very large or very small entries neither overflow nor flush to zero."""
    a = jnp.abs(x)
    top = jnp.max(a, axis=axis, keepdims=True)
    safe = jnp.where(top > 0, top, 1)
    return jnp.squeeze(top * jnp.sqrt(jnp.sum(jnp.square(a / safe), axis=axis, keepdims=True)), axis)


def _abs2(z):
    """|z|^2 without a square root, as LAPACK forms it (z * conj(z))."""
    return jnp.square(jnp.real(z)) + jnp.square(jnp.imag(z)) if jnp.iscomplexobj(z) else jnp.square(z)


def _lapack_eps(dtype):
    """DLAMCH('Epsilon'): half of finfo's eps (LAPACK's relative machine precision under
    round-to-nearest), which xLAIC1 and xLAQP2's norm-recompute threshold use."""
    return float(jnp.finfo(dtype).eps) / 2


def _geqp3(A):
    """QR with column pivoting of one m x n matrix, LAPACK xGEQP3's unblocked xLAQP2:
    at step i the remaining column of largest partial norm comes first (ties: the
    lowest index, as i?amax), a Householder reflector (xLARFG; complex ones make the
    diagonal real) zeroes it below the diagonal, and partial norms are downdated by
    LAWN 176's rule, recomputed when downdating would lose too much. Returns (R (m, n),
    zero below the diagonal; V (m, min(m, n)), the reflectors' vectors with a unit
    entry on the diagonal; tau (min(m, n)); jpvt (n), 0-based: column i of A P is
    column jpvt[i] of A). Reference LAPACK runs xLAQP2 up to min(m, n) = 128 and its
    blocked xLAQPS (the same pivots up to rounding) beyond; xLARFG's rescaling of
    reflectors below the safe minimum is left out (xGELSY's scaling of A comes first)."""
    m, n = A.shape
    mn = min(m, n)
    real = jnp.finfo(A.dtype).dtype
    rows, cols = jnp.arange(m), jnp.arange(n)
    tol3z = jnp.sqrt(jnp.asarray(_lapack_eps(real), real))
    vn1 = _nrm2(A).astype(real)

    def step(i, state):
        A, V, tau, jpvt, vn1, vn2 = state
        p = jnp.argmax(jnp.where(cols >= i, vn1, -1))
        swap = jnp.where(cols == i, p, jnp.where(cols == p, i, cols))
        A, jpvt, vn1, vn2 = A[:, swap], jpvt[swap], vn1[swap], vn2[swap]
        x = A[:, i]
        alpha = x[i]
        tail = jnp.where(rows > i, x, 0)
        xnorm = _nrm2(tail)
        # A zero tail leaves a real alpha as it is (tau = 0); a complex alpha is still
        # rotated onto the real axis, so R's diagonal is real.
        trivial = (xnorm == 0) & (jnp.imag(alpha) == 0)
        beta = -jnp.copysign(jnp.hypot(jnp.abs(alpha), xnorm), jnp.real(alpha)).astype(real)
        t = jnp.where(trivial, 0, (beta - alpha) / jnp.where(trivial, 1, beta)).astype(A.dtype)
        v = jnp.where(rows == i, 1, tail / jnp.where(trivial, 1, alpha - beta)).astype(A.dtype)
        w = jnp.matmul(jnp.conj(v), A, precision=_HIGHEST)
        A = jnp.where(cols > i, A - jnp.conj(t) * v[:, None] * w[None, :], A)
        A = jnp.where(cols == i, jnp.where(rows < i, x, 0)[:, None], A)
        A = A.at[i, i].set(jnp.where(trivial, alpha, beta))
        # Partial norms of the rows below i (LAWN 176): downdate by |A[i, j]|, unless
        # the downdated norm has lost about half its digits since its last recompute.
        ratio = jnp.abs(A[i]) / jnp.where(vn1 != 0, vn1, 1)
        temp = jnp.maximum(1 - jnp.square(ratio), 0)
        recompute = temp * jnp.square(vn1 / jnp.where(vn2 != 0, vn2, 1)) <= tol3z
        fresh = _nrm2(jnp.where((rows > i)[:, None], A, 0)).astype(real)
        live = (cols > i) & (vn1 != 0)
        vn1, vn2 = (jnp.where(live, jnp.where(recompute, fresh, vn1 * jnp.sqrt(temp)), vn1),
                    jnp.where(live & recompute, fresh, vn2))
        return A, V.at[:, i].set(v), tau.at[i].set(t), jpvt, vn1, vn2

    init = (A, jnp.zeros((m, mn), A.dtype), jnp.zeros((mn,), A.dtype), cols, vn1, vn1)
    R, V, tau, jpvt, _, _ = lax.fori_loop(0, mn, step, init)
    return R, V, tau, jpvt


def _laic1(largest, x, sest, w, gamma, eps):
    """One step of LAPACK xLAIC1 (JOB = 1 when `largest`, else 2): given x (|x| = 1)
    with ||R x|| = sest, an estimate of R's largest (smallest) singular value, and R's
    next column [w; gamma], returns (sestpr, s, c): the estimate for [[R, w], [0,
    gamma]] and the vector [s x; c] achieving it. The special cases (sest = 0, and
    alpha = x^H w, gamma or sest negligible next to the others) come first, in
    LAPACK's order; the normal case solves the secular equation of the 2 x 2 problem."""
    cplx = jnp.iscomplexobj(gamma)
    alpha = jnp.sum(jnp.conj(x) * w)
    absalp, absgam, absest = jnp.abs(alpha), jnp.abs(gamma), jnp.abs(sest)
    zero, one = jnp.zeros((), gamma.dtype), jnp.ones((), gamma.dtype)

    def unit(s, c):  # (s, c) / ||(s, c)||
        tmp = jnp.sqrt(_abs2(s) + _abs2(c))
        return s / tmp, c / tmp

    big = jnp.maximum(absgam, absalp)
    bigs = jnp.where(big > 0, big, 1)
    # Both jobs' fourth case (sest negligible) divides by the larger of |alpha|, |gamma|.
    ratio = jnp.minimum(absgam, absalp) / bigs
    scl = jnp.sqrt(1 + ratio * ratio)
    a4, g4 = alpha / bigs / scl, gamma / bigs / scl
    # Normal case: real LAPACK keeps zeta1, zeta2 signed (the rounding of `test`).
    est = jnp.where(absest > 0, absest, 1)
    z1, z2 = ((absalp, absgam) if cplx else (alpha, gamma))
    z1, z2 = z1 / est, z2 / est
    if largest:
        s1, c1 = unit(alpha / bigs, gamma / bigs)
        tmp = jnp.maximum(absest, absalp)
        tmps = jnp.where(tmp > 0, tmp, 1)
        b = (1 - z1 * z1 - z2 * z2) * 0.5
        c = z1 * z1
        root = jnp.sqrt(b * b + c)
        t = jnp.where(b > 0, c / (b + root), root - b)
        sn, cn = unit(-(alpha / est) / t, -(gamma / est) / (1 + t))
        cases = [
            (sest == 0, (big * jnp.sqrt(_abs2(alpha / bigs) + _abs2(gamma / bigs)),
                         jnp.where(big == 0, zero, s1), jnp.where(big == 0, one, c1))),
            (absgam <= eps * absest, (tmp * jnp.sqrt(jnp.square(absest / tmps) + jnp.square(absalp / tmps)),
                                      one, zero)),
            (absalp <= eps * absest, (jnp.maximum(absgam, absest), jnp.where(absgam <= absest, one, zero),
                                      jnp.where(absgam <= absest, zero, one))),
            ((absest <= eps * absalp) | (absest <= eps * absgam), (big * scl, a4, g4)),
        ]
        normal = (jnp.sqrt(t + 1) * absest, sn, cn)
    else:
        sn0, cn0 = jnp.where(big == 0, one, -jnp.conj(gamma)), jnp.where(big == 0, zero, jnp.conj(alpha))
        top0 = jnp.maximum(jnp.abs(sn0), jnp.abs(cn0))
        z12 = jnp.abs(z1 * z2)
        norma = jnp.maximum(1 + z1 * z1 + z12, z12 + z2 * z2)
        near_zero = 1 + 2 * (z1 - z2) * (z1 + z2) >= 0
        b0 = (z1 * z1 + z2 * z2 + 1) * 0.5
        t0 = z2 * z2 / (b0 + jnp.sqrt(jnp.abs(b0 * b0 - z2 * z2)))
        b1 = (z2 * z2 + z1 * z1 - 1) * 0.5
        root1 = jnp.sqrt(b1 * b1 + z1 * z1)
        t1 = jnp.where(b1 >= 0, -(z1 * z1) / (b1 + root1), b1 - root1)
        sn, cn = unit(jnp.where(near_zero, (alpha / est) / (1 - t0), -(alpha / est) / t1),
                      jnp.where(near_zero, -(gamma / est) / t0, -(gamma / est) / (1 + t1)))
        shift = 4 * eps * eps * norma
        cases = [
            (sest == 0, (jnp.zeros_like(absest), *unit(sn0 / top0, cn0 / top0))),
            (absgam <= eps * absest, (absgam, zero, one)),
            (absalp <= eps * absest, (jnp.minimum(absgam, absest), jnp.where(absgam <= absest, zero, one),
                                      jnp.where(absgam <= absest, one, zero))),
            ((absest <= eps * absalp) | (absest <= eps * absgam),
             (jnp.where(absgam <= absalp, absest * (ratio / scl), absest / scl),
              -jnp.conj(gamma) / bigs / scl, jnp.conj(alpha) / bigs / scl)),
        ]
        normal = (jnp.where(near_zero, jnp.sqrt(t0 + shift), jnp.sqrt(1 + t1 + shift)) * absest, sn, cn)
    out = normal
    for cond, vals in reversed(cases):
        out = tuple(jnp.where(cond, v, o) for v, o in zip(vals, out))
    return out


def _gelsy_rank(R, rcond):
    """xGELSY's rank of the pivoted QR factor R (min(m, n), n): the largest r such that
    the xLAIC1 estimates of R[:r, :r]'s extreme singular values, grown one column at a
    time, keep smax * rcond <= smin; 0 when R[0, 0] = 0."""
    mn = R.shape[0]
    real = jnp.finfo(R.dtype).dtype
    eps = _lapack_eps(real)
    idx = jnp.arange(mn)
    smax = jnp.abs(R[0, 0]).astype(real)
    e0 = (idx == 0).astype(R.dtype)

    def step(i, state):
        xmin, xmax, smin, smax, rank = state
        w = jnp.where(idx < i, R[:, i], 0)
        gamma = R[i, i]
        sminpr, s1, c1 = _laic1(False, xmin, smin, w, gamma, eps)
        smaxpr, s2, c2 = _laic1(True, xmax, smax, w, gamma, eps)
        grow = (rank == i) & (smaxpr * rcond <= sminpr)
        new = idx == i
        return (jnp.where(grow, jnp.where(new, c1, s1 * xmin), xmin),
                jnp.where(grow, jnp.where(new, c2, s2 * xmax), xmax),
                jnp.where(grow, sminpr, smin), jnp.where(grow, smaxpr, smax), rank + grow)

    rank = jnp.where(smax == 0, 0, 1).astype(jnp.int32)
    return lax.fori_loop(1, mn, step, (e0, e0, smax, smax, rank))[-1]


def _gelsy_solve(R, V, tau, jpvt, rank, B):
    """xGELSY's solution for one matrix factored by `_geqp3` with rank `rank` and B
    (m, k): Q^H B (xUNMQR); for rank n, R's triangular solve (xTRSM); below it the
    minimum-norm solution of [R11 R12] y = (Q^H B)[:rank] (what xTZRZF/xUNMRZ give),
    here through a QR of [R11 R12]^H, with rows past `rank` masked to zero so the
    shapes stay static; then the column permutation undone."""
    m, n = R.shape
    mn = tau.shape[0]

    def reflect(i, B):
        v = V[:, i]
        return B - jnp.conj(tau[i]) * v[:, None] * jnp.matmul(jnp.conj(v), B, precision=_HIGHEST)[None, :]

    B = lax.fori_loop(0, mn, reflect, B)
    live = jnp.arange(mn) < rank
    c = jnp.where(live[:, None], B[:mn], 0)
    R1 = jnp.where(live[:, None], R[:mn], 0)
    q, t = jnp.linalg.qr(jnp.conj(R1.T))
    # Identity in the dead part of t: its zero-padded rows of c then solve to zero.
    t = jnp.where(jnp.diag(~live), 1, t)
    z = lax.linalg.triangular_solve(t, c, left_side=True, lower=False, transpose_a=True, conjugate_a=True)
    y = jnp.matmul(q, z, precision=_HIGHEST)
    if m >= n:
        full = lax.linalg.triangular_solve(R[:n], c, left_side=True, lower=False)
        y = jnp.where(rank == n, full, y)
    return jnp.zeros_like(y).at[jpvt].set(y)


def _gelsy(A, B, rcond):
    """LAPACK xGELSY for A (*a, m, n) and B (*batch, m, k), *a broadcasting to *batch,
    m, n, k > 0: (X (*batch, n, k), rank (*a) int64). A and B are scaled into
    [smlnum, 1 / smlnum] first when their largest entry lies outside, and the solution
    scaled back, as xGELSY does; A is factored once per matrix of *a."""
    m, n = A.shape[-2:]
    abatch, batch = A.shape[:-2], B.shape[:-2]
    real = jnp.finfo(A.dtype).dtype
    smlnum = float(jnp.finfo(real).tiny) / float(jnp.finfo(real).eps)

    def scale(M):
        top = jnp.max(jnp.abs(M), axis=(-2, -1))
        return jnp.where((top > 0) & (top < smlnum), smlnum / jnp.where(top > 0, top, 1),
                         jnp.where(top > 1 / smlnum, (1 / smlnum) / top, 1)).astype(real)

    fa, fb = scale(A), scale(B)
    As = (A * fa[..., None, None]).reshape((-1, m, n))
    R, V, tau, jpvt = jax.vmap(_geqp3)(As)
    rank = jax.vmap(lambda r: _gelsy_rank(r[:min(m, n)], jnp.asarray(rcond, real)))(R)

    def spread(x):  # per matrix of *a -> per matrix of *batch
        x = x.reshape(abatch + x.shape[1:])
        return jnp.broadcast_to(x, batch + x.shape[len(abatch):]).reshape((-1,) + x.shape[len(abatch):])

    Bs = (B * fb[..., None, None]).reshape((-1, m, B.shape[-1]))
    X = jax.vmap(_gelsy_solve)(spread(R), spread(V), spread(tau), spread(jpvt), spread(rank), Bs)
    X = X.reshape(batch + X.shape[1:]) * (jnp.broadcast_to(fa, batch) / fb)[..., None, None]
    return X, rank.reshape(abatch).astype(jnp.int64)


@lowering(aten.linalg_lstsq.default, static=("rcond",))
def linalg_lstsq(self, b, rcond=None, driver=None):
    """aten::linalg_lstsq: (solution, residuals, rank, singular_values) of
    min ||A X - B|| for A (*, m, n), B (*, m, k) or (*, m), batch dimensions broadcast;
    float32/float64/complex64/complex128 (other dtypes raise in `_lstsq_shapes`, with
    CPU's messages). rcond defaults to eps * max(m, n), as on CPU.

    gelsy (the default) is LAPACK xGELSY replayed (`_gelsy`): QR with column pivoting
    (xGEQP3), the rank from incremental condition estimation (xLAIC1: the largest r
    with smax(R11) * rcond <= smin(R11); a negative rcond keeps every column), and the
    minimum-norm solution of the complete orthogonal factorization, so rank and
    solution are CPU's, rank-deficient A included. Like xGELSY, a B with no columns
    gives rank 0. gels/gelsd/gelss are computed from A's SVD as the minimum-norm
    solution with singular values below rcond * s_max dropped (gels, QR/LQ assuming
    full rank, ignores rcond): gelsd/gelss are that algorithm, gels gives the same
    solution for full-rank A. Residuals are the squared norms of the last m - n rows
    of Q^H B (what gels leaves there), outputs a driver does not produce are empty
    (see `_lstsq_shapes`)."""
    ctx = context()
    driver = driver or "gelsy"
    m, n = self.shape[-2:]
    vector = b.ndim == self.ndim - 1
    B = b[..., None] if vector else b
    batch = jnp.broadcast_shapes(self.shape[:-2], B.shape[:-2])
    B = jnp.broadcast_to(B, batch + B.shape[-2:])
    if min(m, n) and self.size and B.size:
        check_lstsq_input(self, B, driver, not batch)
    k = B.shape[-1]
    real = jnp.finfo(self.dtype).dtype
    if rcond is None:
        rcond = float(jnp.finfo(real).eps) * max(m, n)
    elif rcond < 0 and driver != "gelsy":  # gelsd/gelss: a negative rcond means machine precision
        rcond = float(jnp.finfo(real).eps)
    if min(m, n) == 0 or self.size == 0 or (driver == "gelsy" and (k == 0 or 0 in batch)):
        s = jnp.zeros(self.shape[:-2] + (min(m, n),), real)
        X = jnp.zeros(batch + (n, k), self.dtype)
        rank = jnp.zeros(self.shape[:-2], jnp.int64)
    elif driver == "gelsy":
        X, rank = _gelsy(self, B, rcond)
    else:
        u, s, vh = jnp.linalg.svd(self, full_matrices=False)
        # gels (QR/LQ, which assumes full rank) ignores rcond, as LAPACK's does.
        keep = s > rcond * s[..., :1] if driver != "gels" else jnp.ones(s.shape, bool)
        rank = jnp.sum(keep, axis=-1).astype(jnp.int64)
        inv = jnp.where(keep, 1 / jnp.where(keep, s, 1), 0).astype(self.dtype)
        uhb = jnp.matmul(jnp.conj(jnp.swapaxes(u, -1, -2)), B, precision=_HIGHEST)
        X = jnp.matmul(jnp.conj(jnp.swapaxes(vh, -1, -2)), inv[..., :, None] * uhb, precision=_HIGHEST)
    outs = [X[..., 0] if vector else X]
    if m > n and driver != "gelsy":
        q = jnp.linalg.qr(jnp.broadcast_to(self, batch + (m, n)), mode="complete")[0] if n else \
            jnp.broadcast_to(jnp.eye(m, dtype=self.dtype), batch + (m, m))
        tail = jnp.matmul(jnp.conj(jnp.swapaxes(q[..., :, n:], -1, -2)), B, precision=_HIGHEST)
        res = jnp.sum(jnp.real(tail * jnp.conj(tail)), axis=-2).astype(real)
        if driver == "gels":  # gels zeroes B for an empty or all-zero A (LAPACK's quick returns)
            zero_a = jnp.all(self == 0, axis=(-2, -1)) if n else jnp.ones(self.shape[:-2], bool)
            res = jnp.where(jnp.broadcast_to(zero_a, batch)[..., None], 0, res)
        outs.append(res)
    else:
        outs.append(jnp.zeros(ctx.out(1).shape, real))
    outs.append(rank if driver != "gels" else jnp.zeros((0,), jnp.int64))
    outs.append(s if driver in ("gelsd", "gelss") else jnp.zeros((0,), real))
    return tuple(outs)


def _lstsq_host(self, b, rcond=None, *, driver=None):
    """Eager aten::linalg_lstsq: the lowering, then for gelsd/gelss with m > n one
    synchronization, because CPU returns residuals only when every matrix has full
    rank n (a data-dependent shape)."""
    solution, residuals, rank, sv = lowered(aten.linalg_lstsq.default)(self, b, rcond, driver=driver)
    n = self.shape[-1]
    if driver in ("gelsd", "gelss") and residuals.numel() and not bool((rank == n).all()):
        residuals = residuals.new_empty((0,))
    return solution, residuals, rank, sv


def copy_out(results, outs, call, exact_dtype=False):
    """`outs` (out= tensors) resized to and filled with `results`, by PyTorch's out=
    rules (its reference wrappers'): resize when the shape differs; for an out tensor of
    another dtype, what CPU's kernel does (`call`: the out= overload and its arguments in
    schema order, see eager/out_dtypes.py), else, where that cannot be told, only safe
    casts (or none, with `exact_dtype`), RuntimeError otherwise. For out= overloads that a
    host kernel computes through the functional overload. Returns `outs`."""
    from torch._prims_common.wrappers import _maybe_resize_out, _safe_copy_out

    from ..eager import out_dtypes

    accepted = out_dtypes.check(*call, results) == out_dtypes.ACCEPT
    for out, res in zip(outs, results):
        _maybe_resize_out(out, res.shape)
        if accepted:
            out.copy_(res)
        else:
            _safe_copy_out(copy_from=res, copy_to=out, exact_dtype=exact_dtype)
    return outs


def _lstsq_out_host(self, b, rcond=None, *, driver=None, solution, residuals, rank, singular_values):
    """Eager aten::linalg_lstsq.out: the functional host kernel's results copied out."""
    outs = (solution, residuals, rank, singular_values)
    return copy_out(_lstsq_host(self, b, rcond, driver=driver), outs,
                    (aten.linalg_lstsq.out, (self, b, rcond, driver) + outs))


host_kernel(aten.linalg_lstsq.default)(_lstsq_host)
host_kernel(aten.linalg_lstsq.out)(_lstsq_out_host)


# ------------------------------------------------------------------ eig, polar, sqrth
def _complex_of(dtype):
    return jnp.complex128 if jnp.dtype(dtype) in (jnp.float64, jnp.complex128) else jnp.complex64


def _eig(A, vectors: bool):
    """LAPACK geev through XLA:CPU (JAX's eig): eigenvalues in geev's order and
    eigenvectors of unit norm with the largest component real, as CPU's geev gives
    them. linalg.eig refuses non-finite input (RuntimeError, as CPU checks before
    calling geev); linalg.eigvals does not check, and CPU's geev then returns the
    diagonal for a matrix with a NaN (its balancing rejects the matrix) and NaNs for
    one with only infs: so do these."""
    ctype = _complex_of(A.dtype)
    finite = jnp.all(jnp.isfinite(A), axis=(-2, -1), keepdims=True)
    if vectors:
        context().check(jnp.all(finite), RuntimeError, "torch.linalg.eig: input tensor should not contain infs or NaNs.")
    if A.size == 0:
        return jnp.zeros(A.shape[:-1], ctype), jnp.zeros(A.shape, ctype)
    # Non-finite matrices would make geev fail: factor zeros instead.
    safe = jnp.where(finite, A, 0)
    if not vectors:
        w = jnp.linalg.eigvals(safe).astype(ctype)
        nan = jnp.any(jnp.isnan(A), axis=(-2, -1))[..., None]
        diag = jnp.diagonal(A, axis1=-2, axis2=-1).astype(ctype)
        return jnp.where(finite[..., 0], w, jnp.where(nan, diag, jnp.array(complex("nan+nanj"), ctype))), None
    A = safe
    w, v = jnp.linalg.eig(A)
    return w.astype(ctype), v.astype(ctype)


@meta_check(aten.linalg_eig.default, aten._linalg_eigvals.default)
def _check_eig_dtype(self, *args, **kwargs):
    """CPU's errors for dtypes geev lacks, where PyTorch's meta kernel raises KeyError
    (no complex counterpart) or accepts half types."""
    if self.dtype in (torch.float16, torch.bfloat16):
        raise NotImplementedError(f'"linalg_eig_out_cpu" not implemented for \'{scalar_type_name(dt.to_jax(self.dtype))}\'')
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError(f"Unknown Complex ScalarType for {scalar_type_name(dt.to_jax(self.dtype))}")


@lowering(aten.linalg_eig.default)
def linalg_eig(self):
    """aten::linalg_eig: (eigenvalues, eigenvectors) of a general (*, n, n), complex
    for every input dtype (see `_eig`)."""
    return _eig(self, True)


@lowering(aten._linalg_eigvals.default, aten.linalg_eigvals.default)
def linalg_eigvals(self):
    """aten::_linalg_eigvals (and linalg_eigvals, whose out= overload ATen implements
    directly): eigenvalues of a general (*, n, n) via geev (see `_eig`)."""
    return _eig(self, False)[0]


@lowering(aten.linalg_householder_product.default)
def linalg_householder_product(self, tau):
    """aten::linalg_householder_product: the first n columns of H_1 ... H_k for the
    Householder reflectors H_i = I - tau_i v_i v_i^H stored below the diagonal of
    (*, m, n) (LAPACK orgqr/ungqr; XLA's householder_product, which is that on CPU)."""
    if self.size == 0:
        return jnp.zeros(self.shape, self.dtype)
    k = tau.shape[-1]
    if k < self.shape[-1]:  # XLA wants a scalar per column: the missing ones are identities
        tau = jnp.concatenate([tau, jnp.zeros(tau.shape[:-1] + (self.shape[-1] - k,), tau.dtype)], axis=-1)
        self = jnp.concatenate([self[..., :k], jnp.zeros(self.shape[:-1] + (self.shape[-1] - k,), self.dtype)],
                               axis=-1)
    return lax.linalg.householder_product(self, tau)


@lowering(aten.linalg_matrix_sqrth.default)
def linalg_matrix_sqrth(self):
    """aten::linalg_matrix_sqrth: the principal square root of a symmetric (Hermitian)
    positive-definite (*, n, n), from the eigendecomposition of its lower triangle as
    on CPU: V diag(sqrt(max(w, 0))) V^H (negative eigenvalues of indefinite input
    clamp to 0, as CPU's do)."""
    if self.size == 0:
        return jnp.zeros(self.shape, self.dtype)
    w, v = jnp.linalg.eigh(self, UPLO="L", symmetrize_input=False)
    root = jnp.sqrt(jnp.maximum(w, 0)).astype(self.dtype)
    return jnp.matmul(v * root[..., None, :], jnp.conj(jnp.swapaxes(v, -1, -2)), precision=_HIGHEST)


@lowering(aten.linalg_polar.default)
def linalg_polar(A):
    """aten::linalg_polar: (U, H) with A = U H for (*, m, n), m >= n: U = W V^H with
    orthonormal columns and H = V S V^H positive semi-definite, from A's thin SVD
    A = W S V^H, CPU's algorithm."""
    if A.size == 0:
        ctx = context()
        return jnp.zeros(ctx.out(0).shape, A.dtype), jnp.zeros(ctx.out(1).shape, A.dtype)
    w, s, vh = jnp.linalg.svd(A, full_matrices=False)
    u = jnp.matmul(w, vh, precision=_HIGHEST)
    v = jnp.conj(jnp.swapaxes(vh, -1, -2))
    h = jnp.matmul(v * s.astype(A.dtype)[..., None, :], vh, precision=_HIGHEST)
    return u, h
