"""Reduction, scan and sort lowerings: sum/mean/prod, extrema and their indices,
variance, norms, any/all, cumulative ops, sort/topk and order statistics, histograms
with bin counts, and segment reductions.

Shapes, output dtypes and most errors for bad arguments (bad dims, empty reductions
without an identity) come from PyTorch's meta kernels before a lowering runs; the
lowerings raise the errors CPU raises and the meta kernels do not (max() of an empty
tensor, dtypes ATen's CPU kernels do not implement). Every lowering reduces without
keepdim and reshapes to the output shape PyTorch computed.
Half types accumulate in float32 and round once, as ATen's CPU kernels do. Floating
extrema propagate NaN; sorts order NaN after +inf (before it when descending).
"""
import builtins
import math

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax
from torch._prims_common import canonicalize_dim

from ..eager import refusal
from ..runtime import dtypes as dt
from ._common import acc_type, convert, half_rounding, is_float, scalar_type_name, true_divide
from .factory import float_linspace
from .indexing import not_implemented
from .registry import context, lowering, meta_check, meta_impl

aten = torch.ops.aten


def _axes(dim, ndim: int) -> tuple:
    """An ATen reduction `dim` (None, int or list; None and [] mean all dims) as
    sorted non-negative axes; a 0-dim tensor has none."""
    if ndim == 0:
        return ()
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    if len(dim) == 0:
        return tuple(range(ndim))
    return tuple(sorted({d % ndim for d in dim}))


def _axis(dim: int, ndim: int):
    """A single ATen dim as a JAX axis; None for a 0-dim tensor."""
    return None if ndim == 0 else dim % ndim


def _shaped(value, i: int = 0):
    """`value` reshaped to output `i`'s shape (keepdim or not) and cast to its dtype."""
    out = context().out(i)
    return jnp.reshape(value, out.shape).astype(out.dtype)


def _count(shape, axes) -> int:
    return int(np.prod([shape[a] for a in axes])) if axes else 1


# ------------------------------------------------------------------ sums and products
def _as_out(x):
    """`x` converted to the output dtype, as CPU's reductions with `dtype=` convert their
    input before reducing (sum(f32, dtype=float16) rounds each element to half first,
    sum(-1.5, dtype=uint8) adds 255)."""
    return convert(x, context().out_dtype())


@lowering(aten.sum.dim_IntList)
def sum_(self, dim=None, keepdim=False, dtype=None):
    """`aten::sum.dim_IntList` (`torch.sum`, `sum.IntList_out`): bool and integer
    inputs sum in int64, half types in float32."""
    acc = acc_type(context().out_dtype())
    return _shaped(jnp.sum(_as_out(self).astype(acc), axis=_axes(dim, self.ndim)))


@lowering(aten.nansum.default)
def nansum(self, dim=None, keepdim=False, dtype=None):
    """`aten::nansum`: `sum` counting NaN as zero. Complex input, or floating input with
    a complex `dtype`, are not implemented on CPU."""
    out = context().out_dtype()
    if jnp.iscomplexobj(self):
        raise RuntimeError("nansum on CPU does not support complex inputs")
    if is_float(self.dtype) and jnp.issubdtype(out, jnp.complexfloating):  # integers take sum's path
        raise not_implemented("nansum_cpu", out)
    acc = acc_type(out)
    x = _as_out(self).astype(acc)
    if is_float(acc):
        x = jnp.where(jnp.isnan(x), jnp.zeros((), acc), x)
    return _shaped(jnp.sum(x, axis=_axes(dim, self.ndim)))


@lowering(aten.mean.dim)
def mean(self, dim=None, keepdim=False, dtype=None):
    """`aten::mean.dim` (`torch.mean`): sum / count in the accumulation type; an empty
    reduction gives NaN. Integer inputs raise in the meta kernel, as on CPU."""
    acc = acc_type(context().out_dtype())
    axes = _axes(dim, self.ndim)
    total = jnp.sum(self.astype(acc), axis=axes)
    return _shaped(true_divide(total, jnp.asarray(_count(self.shape, axes), acc)))


@lowering(aten.mean.default, eager=False)
def mean_all(self, dtype=None):
    """`aten::mean` (all elements) in compiled graphs; eager goes through `mean.dim`."""
    return mean(self, None)


@lowering(aten.prod.dim_int)
def prod_dim(self, dim, keepdim=False, dtype=None):
    """`aten::prod.dim_int`: product along `dim`; bool and integer inputs multiply in
    int64 (wrapping on overflow like CPU), half types in float32."""
    acc = acc_type(context().out_dtype())
    return _shaped(jnp.prod(_as_out(self).astype(acc), axis=_axes(dim, self.ndim)))


@lowering(aten.prod.default)
def prod(self, dtype=None):
    """`aten::prod`: product of all elements (accumulation as `prod.dim_int`)."""
    return prod_dim(self, None)


@lowering(aten.count_nonzero.dim_IntList)
def count_nonzero(self, dim):
    """`aten::count_nonzero.dim_IntList`: int64 count of nonzero elements."""
    return _shaped(jnp.sum(self != 0, axis=_axes(dim, self.ndim), dtype=jnp.int64))


@lowering(aten.any.default, aten.any.dim, aten.any.dims)
def any_(self, dim=None, keepdim=False):
    """`aten::any` (all dims, one dim, several dims): bool, uint8 for uint8 input."""
    return _shaped(jnp.any(self != 0, axis=_axes(dim, self.ndim)))


@lowering(aten.all.default, aten.all.dim, aten.all.dims)
def all_(self, dim=None, keepdim=False):
    """`aten::all` (all dims, one dim, several dims): bool, uint8 for uint8 input."""
    return _shaped(jnp.all(self != 0, axis=_axes(dim, self.ndim)))


# ------------------------------------------------------------------ extrema
def _extreme(x, axes, largest: bool):
    """max/min over `axes`, NaN-propagating for floats (XLA's max/min already are)."""
    if x.dtype == jnp.bool_:
        return jnp.any(x, axis=axes) if largest else jnp.all(x, axis=axes)
    return jnp.max(x, axis=axes) if largest else jnp.min(x, axis=axes)


@lowering(aten.amax.default)
def amax(self, dim=(), keepdim=False):
    """`aten::amax`: maximum over `dim` (all if empty), NaN-propagating. Empty
    reductions raise IndexError in the meta kernel, as on CPU."""
    return _shaped(_extreme(self, _axes(dim, self.ndim), True))


@lowering(aten.amin.default)
def amin(self, dim=(), keepdim=False):
    """`aten::amin`: minimum over `dim` (all if empty), NaN-propagating."""
    return _shaped(_extreme(self, _axes(dim, self.ndim), False))


def _wrapped_dims(dims, ndim: int):
    """`dims` wrapped into [0, ndim) (a 0-dim tensor counts as 1-d), or None if one is
    out of range: the inner meta kernel then raises CPU's IndexError for it."""
    n = builtins.max(ndim, 1)
    if any(not -n <= d < n for d in dims):
        return None
    return [d % n for d in dims]


def _zero_size_checks(name: str, label: str):
    def check(self, dim=(), keepdim=False, **_):
        dims = [dim] if isinstance(dim, int) else list(dim)
        if not dims:
            if self.numel() == 0:
                raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                                   "Specify the reduction dim with the 'dim' argument.")
            return
        wrapped = _wrapped_dims(dims, self.dim())
        if wrapped is None or self.dim() == 0:
            return
        for d, w in zip(dims, wrapped):
            if self.shape[w] == 0:
                raise IndexError(f"{label}: Expected reduction dim {d} to have non-zero size.")
    return check


# CPU's errors for amax/amin over nothing: IndexError naming the first zero-size dim
# (as given) of a reduction over dims, RuntimeError for all dims of an empty tensor.
# PyTorch's reference meta kernel raises RuntimeError for both.
meta_check(aten.amax.default, aten.amax.out)(_zero_size_checks("amax", "amax()"))
meta_check(aten.amin.default, aten.amin.out)(_zero_size_checks("amin", "amin()"))


@meta_check(aten.aminmax.default, aten.aminmax.out)
def _aminmax_meta_check(self, *, dim=None, keepdim=False, **_):
    """aminmax's CPU errors: IndexError for a zero-size `dim` (named wrapped),
    RuntimeError for all dims of an empty tensor."""
    if dim is None:
        if self.numel() == 0:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has "
                               "no identity.")
        return
    wrapped = _wrapped_dims([dim], self.dim())
    if wrapped is not None and self.dim() > 0 and self.shape[wrapped[0]] == 0:
        raise IndexError(f"aminmax: Expected reduction dim {wrapped[0]} to have non-zero size.")


def _nonempty(self, name):
    if self.size == 0:
        raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                           "reduction dim with the 'dim' argument.")


def _nonempty_dim(self, axis, name):
    if self.shape[axis] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {axis} to have non-zero size.")


@lowering(aten.max.default)
def max_(self):
    """`aten::max` (no dim): the maximum element, NaN if any; RuntimeError on an
    empty tensor."""
    _nonempty(self, "max")
    return _shaped(_extreme(self, _axes(None, self.ndim), True))


@lowering(aten.min.default)
def min_(self):
    """`aten::min` (no dim): the minimum element, NaN if any."""
    _nonempty(self, "min")
    return _shaped(_extreme(self, _axes(None, self.ndim), False))


@lowering(aten.aminmax.default)
def aminmax(self, dim=None, keepdim=False):
    """`aten::aminmax`: (amin, amax) over one dim or all. Complex input over the dim of
    a 0-dim tensor raises CPU's RuntimeError (its kernel copies a scalar through; other
    shapes reach the reduction's dtype dispatch, whose NotImplementedError the dtype
    probe raises)."""
    if dim is not None and self.ndim == 0 and jnp.issubdtype(self.dtype, jnp.complexfloating):
        raise RuntimeError(f"aminmax not implemented for {scalar_type_name(self.dtype)}")
    axes = _axes(dim, self.ndim)
    return _shaped(_extreme(self, axes, False), 0), _shaped(_extreme(self, axes, True), 1)


def _no_bool(x, name):
    if x.dtype == jnp.bool_:
        raise RuntimeError(f"{name}(): does not support bool input")


def _arg_extreme(x, axis, largest: bool):
    """Index of the first maximum (minimum) along `axis`; the first NaN wins."""
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    return jnp.argmax(x, axis=axis) if largest else jnp.argmin(x, axis=axis)


@lowering(aten.argmax.default)
def argmax(self, dim=None, keepdim=False):
    """`aten::argmax`: int64 index of the first maximum (first NaN) along `dim`, of
    the flattened tensor if `dim` is None. Bool input raises RuntimeError, as on CPU."""
    _no_bool(self, "argmax")
    x = self.reshape(-1) if dim is None or self.ndim == 0 else self
    return _shaped(_arg_extreme(x, 0 if dim is None or self.ndim == 0 else dim % self.ndim, True))


@lowering(aten.argmin.default)
def argmin(self, dim=None, keepdim=False):
    """`aten::argmin`: int64 index of the first minimum (first NaN) along `dim`."""
    _no_bool(self, "argmin")
    x = self.reshape(-1) if dim is None or self.ndim == 0 else self
    return _shaped(_arg_extreme(x, 0 if dim is None or self.ndim == 0 else dim % self.ndim, False))


def _extreme_dim(self, dim, largest):
    """CPU's max.dim/min.dim: the zero-size check, then complex input raises (0-dim
    tensors too), then the reduction."""
    name = "max" if largest else "min"
    if self.ndim:
        _nonempty_dim(self, dim % self.ndim, name)
    if jnp.issubdtype(self.dtype, jnp.complexfloating):
        raise RuntimeError(f"{name}(): does not support complex input")
    if self.ndim == 0:
        return _shaped(self, 0), _shaped(jnp.zeros((), jnp.int64), 1)
    axis = dim % self.ndim
    idx = _arg_extreme(self, axis, largest)
    values = jnp.take_along_axis(self, jnp.expand_dims(idx, axis), axis=axis)
    return _shaped(values, 0), _shaped(idx, 1)


@lowering(aten.max.dim)
def max_dim(self, dim, keepdim=False):
    """`aten::max.dim` (and `max.dim_max`): (values, int64 indices) of the first
    maximum along `dim`; a NaN is the maximum."""
    return _extreme_dim(self, dim, True)


@lowering(aten.min.dim)
def min_dim(self, dim, keepdim=False):
    """`aten::min.dim` (and `min.dim_min`): like `max.dim` for the minimum."""
    return _extreme_dim(self, dim, False)


# ------------------------------------------------------------------ moments and norms
def _var(self, dim, correction):
    """(variance, mean) over `dim` in the accumulation type, two-pass. The divisor is
    max(0, N - correction) as in ATen: zero degrees of freedom give inf or NaN."""
    if not is_float(self.dtype):
        raise RuntimeError("std and var only support floating point and complex dtypes")
    acc = acc_type(context().out_dtype())  # real: the variance of complex input is real
    axes = _axes(dim, self.ndim)
    n = _count(self.shape, axes)
    x = self.astype(acc_type(self.dtype))  # complex input keeps its imaginary part
    mean = jnp.sum(x, axis=axes, keepdims=True) / n
    d = x - mean
    m2 = jnp.sum(jnp.real(d * jnp.conj(d)) if jnp.iscomplexobj(d) else d * d, axis=axes)
    c = 1 if correction is None else correction
    divisor = jnp.maximum(jnp.asarray(n, acc) - jnp.asarray(c, acc), jnp.zeros((), acc))
    return m2 / divisor, jnp.squeeze(mean, axis=axes)


@lowering(aten.var.correction)
def var(self, dim=None, correction=None, keepdim=False):
    """`aten::var.correction` (`torch.var`, any `unbiased`/`correction`)."""
    return _shaped(_var(self, dim, correction)[0])


@lowering(aten.std.correction)
def std(self, dim=None, correction=None, keepdim=False):
    """`aten::std.correction`: square root of `var`."""
    return _shaped(jnp.sqrt(_var(self, dim, correction)[0]))


@lowering(aten.var_mean.correction)
def var_mean(self, dim=None, correction=None, keepdim=False):
    """`aten::var_mean.correction`: (var, mean)."""
    v, m = _var(self, dim, correction)
    return _shaped(v, 0), _shaped(m, 1)


@lowering(aten.std_mean.correction)
def std_mean(self, dim=None, correction=None, keepdim=False):
    """`aten::std_mean.correction`: (std, mean)."""
    v, m = _var(self, dim, correction)
    return _shaped(jnp.sqrt(v), 0), _shaped(m, 1)


@lowering(aten.logsumexp.default)
def logsumexp(self, dim, keepdim=False):
    """`aten::logsumexp`: log(sum(exp(x - m))) + m with m the max (of the real part), where an infinite
    max is replaced by 0 (ATen's rule, so all -inf gives -inf and +inf gives +inf)."""
    out = context().out_dtype()
    x = self.astype(acc_type(out))
    axes = _axes(dim, self.ndim)
    if self.size == 0:
        return _shaped(jnp.log(jnp.sum(jnp.exp(x), axis=axes)))
    # Complex inputs shift by the max of the real part (ATen's logsumexp_out_impl), so
    # the result's imaginary part is that of log(sum(exp(x))), within (-pi, pi].
    m = jnp.max(jnp.real(x), axis=axes, keepdims=True)
    m = jnp.where(jnp.isinf(m), jnp.zeros((), m.dtype), m)
    s = jnp.sum(jnp.exp(x - m), axis=axes)
    return _shaped(jnp.log(s) + jnp.squeeze(m, axis=axes))


def _vector_norm(x, ord, axes):
    """The p-norm of `x` over `axes` for a static `ord` (inf, -inf, 0, 1, 2, other p)."""
    a = jnp.abs(x)
    if ord == float("inf"):
        return jnp.max(a, axis=axes)
    if ord == float("-inf"):
        return jnp.min(a, axis=axes)
    if ord == 0:
        return jnp.sum((a != 0).astype(x.dtype), axis=axes)
    if ord == 1:
        return jnp.sum(a, axis=axes)
    if ord == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=axes))
    return jnp.power(jnp.sum(jnp.power(a, ord), axis=axes), 1.0 / ord)


def _norm_input(x):
    """`x` in the (real) dtype a norm computes in: float32 for half types; complex
    input by its modulus (cast to the real output type, the imaginary part would be
    dropped), taken at the output's precision."""
    acc = acc_type(context().out_dtype())
    if jnp.iscomplexobj(x):
        return jnp.abs(x.astype(jnp.promote_types(acc, jnp.complex64)))
    return x.astype(acc)


@lowering(aten.linalg_vector_norm.default, static=("ord",))
def linalg_vector_norm(self, ord=2, dim=None, keepdim=False, dtype=None):
    """`aten::linalg_vector_norm`: the `ord`-norm over `dim` (all if None), computed
    in float32 for half types. `ord` is static: each order is its own formula."""
    x = _norm_input(self)
    return _shaped(_vector_norm(x, ord, _axes(dim, self.ndim)))


@lowering(aten.norm.ScalarOpt_dim, aten.norm.ScalarOpt_dim_dtype, static=("p",))
def norm(self, p=2, dim=(), keepdim=False, dtype=None):
    """`aten::norm.ScalarOpt_dim[_dtype]` (legacy `torch.norm` with a dim): the vector
    p-norm over `dim`; `p` None means 2."""
    x = _norm_input(self)
    return _shaped(_vector_norm(x, 2 if p is None else p, _axes(dim, self.ndim)))


# ------------------------------------------------------------------ scans
def _scan_input(self, kernel: str):
    """cumsum/cumprod's input as CPU scans it: converted to the output dtype (`dtype=`),
    in float32 for half types. Bool output is not implemented on CPU (a 0-dim or empty
    input returns before the kernel's dtype dispatch)."""
    out = context().out_dtype()
    if out == jnp.bool_ and self.ndim and self.size:
        raise not_implemented(kernel, out)
    return _as_out(self).astype(acc_type(out))


@lowering(aten.cumsum.default)
def cumsum(self, dim, dtype=None):
    """`aten::cumsum`: running sum along `dim`; integers and bool in int64, half
    types in float32."""
    x = _scan_input(self, "cumsum_out_cpu")
    axis = _axis(dim, self.ndim)
    return _shaped(x if axis is None else jnp.cumsum(x, axis=axis))


@lowering(aten.cumprod.default)
def cumprod(self, dim, dtype=None):
    """`aten::cumprod`: running product along `dim` (accumulation as `cumsum`)."""
    x = _scan_input(self, "cumprod_out_cpu")
    axis = _axis(dim, self.ndim)
    return _shaped(x if axis is None else jnp.cumprod(x, axis=axis))


def _cum_extreme(self, dim, largest):
    """(running max/min, int64 index of where it was reached) along `dim`: a later
    equal element or any NaN takes over (ATen's `x >= best || isnan(x)`)."""
    axis = _axis(dim, self.ndim)
    if axis is None:
        return self, jnp.zeros((), jnp.int64)
    idx = lax.broadcasted_iota(jnp.int64, self.shape, axis)
    nan_aware = is_float(self.dtype)

    def pick(a, b):  # a: earlier prefix, b: later
        av, ai = a
        bv, bi = b
        take_b = (bv >= av) if largest else (bv <= av)
        if nan_aware:
            take_b = take_b | jnp.isnan(bv)
        return jnp.where(take_b, bv, av), jnp.where(take_b, bi, ai)

    return lax.associative_scan(pick, (self, idx), axis=axis)


@lowering(aten.cummax.default, eager=False)
def cummax(self, dim):
    """`aten::cummax` in compiled graphs (eager: ATen's wrapper + `_cummax_helper`)."""
    return _cum_extreme(self, dim, True)


@lowering(aten.cummin.default, eager=False)
def cummin(self, dim):
    """`aten::cummin` in compiled graphs."""
    return _cum_extreme(self, dim, False)


@lowering(aten._cummax_helper.default, mutates=True)
def cummax_helper(self, values, indices, dim):
    """`aten::_cummax_helper` (behind `torch.cummax`): writes the running maximum
    and its int64 index along `dim` into `values` and `indices`."""
    v, i = _cum_extreme(self, dim, True)
    return (), {"values": v, "indices": i}


@lowering(aten._cummin_helper.default, mutates=True)
def cummin_helper(self, values, indices, dim):
    """`aten::_cummin_helper` (behind `torch.cummin`): the running minimum."""
    v, i = _cum_extreme(self, dim, False)
    return (), {"values": v, "indices": i}


def _log_add_exp(a, b):
    """ATen's logcumsumexp step: log(exp(a) + exp(b)), exact for equal infinities."""
    lo, hi = jnp.minimum(a, b), jnp.maximum(a, b)
    both_inf = (lo == hi) & jnp.isinf(lo)
    return jnp.where(both_inf, a, jnp.log1p(jnp.exp(lo - hi)) + hi)


@lowering(aten._logcumsumexp.default)
@lowering(aten.logcumsumexp.default, eager=False)
def logcumsumexp(self, dim):
    """`aten::_logcumsumexp` (behind `torch.logcumsumexp`): running log-sum-exp along
    `dim`, in float32 for half types; other non-float types are not implemented."""
    if not is_float(self.dtype):
        raise not_implemented("logcumsumexp_out_cpu", self.dtype)
    x = self.astype(acc_type(context().out_dtype()))
    axis = _axis(dim, self.ndim)
    return _shaped(x if axis is None else lax.associative_scan(_log_add_exp, x, axis=axis))


# ------------------------------------------------------------------ sorting
def _sort_keys(x, descending: bool):
    """Sort keys giving ATen's order under an ascending stable sort: NaN after +inf
    ascending, first descending; -0.0 equal to 0.0."""
    if x.dtype == jnp.bool_:
        return [~x if descending else x]
    if not is_float(x.dtype):
        return [~x if descending else x]  # bitwise not reverses integer order exactly
    if not descending:
        return [x]  # XLA's float order: -0.0 == 0.0, NaN last
    return [~jnp.isnan(x), -x]


def sort_along(x, axis: int, descending: bool):
    """(values, int64 indices) of a stable sort of `x` along `axis`."""
    idx = lax.broadcasted_iota(jnp.int64, x.shape, axis)
    keys = _sort_keys(x, descending)
    out = lax.sort(tuple(keys) + (x, idx), dimension=axis, is_stable=True, num_keys=len(keys))
    return out[-2], out[-1]


@lowering(aten.sort.stable)
def sort(self, stable=None, dim=-1, descending=False):
    """`aten::sort.stable` (`torch.sort`, `sort.values_stable`): always a stable sort,
    which is one valid result of an unstable one. NaN sorts as larger than +inf."""
    if jnp.issubdtype(self.dtype, jnp.complexfloating):
        raise RuntimeError(" Sort does not support complex dtypes on CPU")  # CPU's words
    axis = _axis(dim, self.ndim)
    if axis is None:
        return _shaped(self, 0), _shaped(jnp.zeros((), jnp.int64), 1)
    v, i = sort_along(self, axis, descending)
    return _shaped(v, 0), _shaped(i, 1)


@lowering(aten.sort.default, eager=False)
def sort_default(self, dim=-1, descending=False):
    """`aten::sort.default` in compiled graphs (eager: ATen's wrapper + `sort.stable`)."""
    return sort(self, None, dim, descending)


@lowering(aten.topk.default)
def topk(self, k, dim=-1, largest=True, sorted=True):
    """`aten::topk`: the `k` largest (smallest) along `dim`, always in sorted order
    (valid for sorted=False too); ties keep index order; NaN counts as largest."""
    if self.dtype == jnp.bool_:
        raise RuntimeError("topk does not support bool dtypes on CPU")
    if jnp.issubdtype(self.dtype, jnp.complexfloating):
        raise RuntimeError(" topk does not support complex dtypes on CPU")
    axis = _axis(dim, self.ndim)
    if axis is None:
        return _shaped(self, 0), _shaped(jnp.zeros((), jnp.int64), 1)
    v, i = sort_along(self, axis, largest)
    return _shaped(lax.slice_in_dim(v, 0, k, axis=axis), 0), _shaped(lax.slice_in_dim(i, 0, k, axis=axis), 1)


@lowering(aten.kthvalue.default)
def kthvalue(self, k, dim=-1, keepdim=False):
    """`aten::kthvalue`: the k-th smallest along `dim` and its index (among equal
    values, which index is returned is unspecified in PyTorch; here the first)."""
    if self.dtype == jnp.bool_:
        raise not_implemented("kthvalue_cpu", self.dtype)
    axis = _axis(dim, self.ndim)
    if axis is None:
        return _shaped(self, 0), _shaped(jnp.zeros((), jnp.int64), 1)
    v, i = sort_along(self, axis, False)
    return (_shaped(lax.index_in_dim(v, k - 1, axis, keepdims=False), 0),
            _shaped(lax.index_in_dim(i, k - 1, axis, keepdims=False), 1))


@lowering(aten.mode.default)
def mode(self, dim=-1, keepdim=False):
    """`aten::mode`: the most frequent value along `dim` (ties: the smallest) and an
    index of it. CPU sorts (value, index) pairs and takes the last pair of the winning
    run; its std::sort is stable on the short rows OpInfo and most callers use, giving
    the last index of the value, which a stable sort gives here for every length."""
    axis = _axis(dim, self.ndim)
    if axis is None:
        return _shaped(self, 0), _shaped(jnp.zeros((), jnp.int64), 1)
    if self.shape[axis] == 0:  # the meta kernel does not check this
        raise IndexError(f"mode(): Expected reduction dim {axis} to have non-zero size.")
    if self.size == 0:
        return jnp.zeros(context().out(0).shape, self.dtype), jnp.zeros(context().out(1).shape, jnp.int64)
    n = self.shape[axis]
    v, i = sort_along(self, axis, False)
    v, i = jnp.moveaxis(v, axis, -1), jnp.moveaxis(i, axis, -1)
    pos = jnp.arange(n)
    differs = v[..., 1:] != v[..., :-1]
    starts = jnp.concatenate([jnp.ones(v.shape[:-1] + (1,), bool), differs], axis=-1)
    ends = jnp.concatenate([differs, jnp.ones(v.shape[:-1] + (1,), bool)], axis=-1)
    run_start = lax.cummax(jnp.where(starts, pos, 0), axis=v.ndim - 1)
    freq = jnp.where(ends, pos - run_start + 1, 0)
    best = jnp.argmax(freq, axis=-1)[..., None]  # the first (smallest-valued) longest run
    value = jnp.take_along_axis(v, best, axis=-1)[..., 0]
    index = jnp.take_along_axis(i, best, axis=-1)[..., 0]
    return _shaped(value, 0), _shaped(index, 1)


def _median_dtype(x, kernel):
    if x.dtype == jnp.bool_:
        raise not_implemented(kernel, x.dtype)


def _median(x, axis: int, ignore_nan: bool):
    """Lower median along `axis` and its index. With NaNs: `median` gives the first
    NaN, `nanmedian` the median of the other values (NaN if there are none)."""
    v, i = sort_along(x, axis, False)
    n = x.shape[axis]
    if is_float(x.dtype) and ignore_nan:
        valid = jnp.sum(~jnp.isnan(x), axis=axis, keepdims=True)
        k = jnp.maximum(valid - 1, 0) // 2
    else:
        k = jnp.full([1 if a == axis else s for a, s in enumerate(x.shape)], (n - 1) // 2)
    value = jnp.take_along_axis(v, k, axis=axis)
    index = jnp.take_along_axis(i, k, axis=axis)
    if is_float(x.dtype) and not ignore_nan:
        nan = jnp.isnan(x)
        has_nan = jnp.any(nan, axis=axis, keepdims=True)
        first = jnp.expand_dims(jnp.argmax(nan, axis=axis), axis)
        value = jnp.where(has_nan, jnp.asarray(jnp.nan, x.dtype), value)
        index = jnp.where(has_nan, first, index)
    return jnp.squeeze(value, axis), jnp.squeeze(index, axis)


@lowering(aten.median.default)
def median(self):
    """`aten::median` (no dim): lower median of all elements; NaN if any is NaN or
    the tensor is empty."""
    if self.size == 0:  # ATen returns before dispatching on the dtype
        return _shaped(jnp.asarray(jnp.nan))
    _median_dtype(self, "median_cpu")
    return _shaped(_median(self.reshape(-1), 0, False)[0])


@lowering(aten.nanmedian.default)
def nanmedian(self):
    """`aten::nanmedian` (no dim): lower median ignoring NaN."""
    if self.size == 0:  # ATen returns before dispatching on the dtype
        return _shaped(jnp.asarray(jnp.nan))
    _median_dtype(self, "median_cpu")
    return _shaped(_median(self.reshape(-1), 0, True)[0])


def _median_dim(self, dim, ignore_nan):
    axis = _axis(dim, self.ndim)
    if axis is not None:
        _nonempty_dim(self, axis, "median")
    _median_dtype(self, "median_out")
    if axis is None:
        return _shaped(self, 0), _shaped(jnp.zeros((), jnp.int64), 1)
    if self.size == 0:
        return _shaped(jnp.zeros(context().out(0).shape), 0), _shaped(jnp.zeros(context().out(1).shape), 1)
    v, i = _median(self, axis, ignore_nan)
    return _shaped(v, 0), _shaped(i, 1)


@lowering(aten.median.dim)
def median_dim(self, dim, keepdim=False):
    """`aten::median.dim` (and `median.dim_values`): lower median along `dim` and an
    index of it (which one among equal values is unspecified in PyTorch)."""
    return _median_dim(self, dim, False)


@lowering(aten.nanmedian.dim)
def nanmedian_dim(self, dim, keepdim=False):
    """`aten::nanmedian.dim`: `median.dim` ignoring NaN."""
    return _median_dim(self, dim, True)


def _logcumsumexp_meta(self, dim):
    canonicalize_dim(self.dim(), dim)  # IndexError for a bad dim, as on CPU
    return torch.empty_like(self)


# Meta kernels PyTorch lacks for two CPU-only helpers, so the executor (and fake tensors)
# get their shapes: `_logcumsumexp` keeps its input's, `_cummax_helper` and
# `_cummin_helper` write into preallocated outputs.
meta_impl("_logcumsumexp", _logcumsumexp_meta)
meta_impl("_cummax_helper", lambda self, values, indices, dim: None)
meta_impl("_cummin_helper", lambda self, values, indices, dim: None)


def _histc_range_check(min, max) -> None:
    """CPU's checks of an explicit histc range (the data's range is checked on the
    device)."""
    if min == max:
        return
    if not (math.isfinite(min) and math.isfinite(max)):
        raise RuntimeError(f"torch.histc: range of [{min}, {max}] is not finite")
    if min > max:
        raise RuntimeError("torch.histc: max must be larger than min")


refusal.beyond_cpu(aten.histc.default, "integer inputs are binned as on CUDA: transformers' MoE routing counts "
                   "expert ids with them off the CPU")


@lowering(aten.histc.default, static=("min", "max"))
def _histc(self, bins=100, min=0, max=0):
    """`bins` equal-width bins over [min, max] (the data's range when min == max,
    widened by 1 each side when that is empty too); values outside, and NaN, are not
    counted; a value equal to max goes to the last bin. Integer inputs are binned as
    on CUDA (transformers' MoE routing counts expert ids with them off the CPU); complex
    and bool ones are refused, as there (empty ones too)."""
    if jnp.issubdtype(self.dtype, jnp.complexfloating) or self.dtype == jnp.bool_:
        raise NotImplementedError(f"histc of a {self.dtype} tensor")  # the CPU run words it
    x = self.reshape(-1)
    float_input = is_float(self.dtype)
    _histc_range_check(min, max)
    lo = jnp.asarray(min, self.dtype)
    hi = jnp.asarray(max, self.dtype)
    if min == max and x.size:
        lo, hi = jnp.min(x), jnp.max(x)
        # CPU's histc_select_outer_bin_edges: a data range with NaN or inf raises.
        context().check(jnp.isfinite(lo) & jnp.isfinite(hi), RuntimeError,
                        "torch.histc: range of the input's minimum and maximum is not finite")
    lo, hi = jnp.where(lo == hi, lo - 1, lo), jnp.where(lo == hi, hi + 1, hi)
    inside = (x >= lo) & (x <= hi)
    if float_input:
        # CPU's arithmetic (histogramdd's linear interpolation): each operation in the
        # input's dtype (a half type: computed in float32, rounded to it), an IEEE
        # division, truncated toward zero.
        r = half_rounding(self.dtype)
        wide = jnp.promote_types(self.dtype, jnp.float32)
        xw, low, high = x.astype(wide), lo.astype(wide), hi.astype(wide)
        scaled = r(r(xw - low) * r(jnp.asarray(bins, wide)))
        pos = r(true_divide(scaled, r(high - low))).astype(jnp.int64)
    else:
        pos = (x.astype(jnp.int64) - lo) * bins // (hi - lo).astype(jnp.int64)
    pos = jnp.where(inside, jnp.minimum(pos, bins - 1), bins)
    counts = jnp.zeros(bins + 1, self.dtype).at[pos].add(jnp.ones_like(x, self.dtype))
    return counts[:bins]


@lowering(aten.hash_tensor.default)
def hash_tensor(self, dim=(), keepdim=False, mode=0):
    """aten::hash_tensor -> uint64: each element widened to float64 (floating types) or
    int64 (integers, bool), its bits read as uint64, XOR-reduced over `dim` (all
    dimensions if empty). Mode 0 is the only one ATen defines: others raise RuntimeError,
    as on the CPU (the dims and an empty input without `dim` are its meta kernel's checks)."""
    if mode != 0:
        raise RuntimeError(f"Unknown hash_tensor mode: {mode}")
    wide = self.astype(jnp.float64) if is_float(self.dtype) else self.astype(jnp.int64)
    bits = lax.bitcast_convert_type(wide, jnp.uint64)
    dims = _axes(dim, self.ndim)
    out = lax.reduce(bits, np.uint64(0), lax.bitwise_xor, dims)
    return jnp.expand_dims(out, dims) if keepdim else out
# ------------------------------------------------------------------ histogram, histogramdd
def _histogramdd_check(self, bins, range, weight, name="torch.histogramdd"):
    """CPU's argument checks of histogram/histogramdd with bin counts (ATen's
    histogramdd_check_inputs and select_outer_bin_edges), for the meta kernels: the
    input as (N, D) samples, D = its last dimension."""
    if self.dtype not in (torch.float32, torch.float64):
        raise not_implemented("histogramdd", dt.to_jax(self.dtype))
    if self.dim() < 2:
        raise RuntimeError("torch.histogramdd: input tensor should have at least 2 dimensions")
    d = self.shape[-1]
    if len(bins) != d:
        raise RuntimeError("histogramdd: The size of bins must be equal to the innermost dimension of the input.")
    for i, b in enumerate(bins):
        if b <= 0:
            raise RuntimeError(f"{name}(): bins must be > 0, but got {b} for dimension {i}")
    if weight is not None:
        if tuple(weight.shape) != tuple(self.shape[:-1]):
            raise RuntimeError("torch.histogramdd: if weight tensor is provided it should have the same shape as the "
                               "input tensor excluding its innermost dimension, but got input with shape "
                               f"{tuple(self.shape)} and weight with shape {tuple(weight.shape)}")
        if weight.dtype != self.dtype:
            raise RuntimeError("torch.histogramdd: if weight tensor is provided, input tensor and weight tensor should "
                               f"have the same dtype, but got input({self.dtype}), and weight({weight.dtype})")
    if range is not None:
        if len(range) != 2 * d:
            raise RuntimeError(f"torch.histogramdd: for a {d}-dimensional histogram range should have {2 * d} "
                               f"elements, but got {len(range)}")
        for i in builtins.range(d):
            lo, hi = range[2 * i], range[2 * i + 1]
            if not (np.isfinite(lo) and np.isfinite(hi)):
                raise RuntimeError(f"torch.histogramdd: dimension {i}'s range [{lo}, {hi}] is not finite")
            if lo > hi:
                raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {lo} max {hi} for "
                                   f"dimension {i}")



def _histogramdd(x, bins, range, weight, density, name):
    """(hist, [edges per dimension]) of samples x (N, D) in equal-width bins, as CPU's
    histogramdd with bin counts: edges span `range` or the data's [min, max] (widened
    by 0.5 each side when empty; [0, 1] without samples), linspace'd in x's dtype; a
    sample outside the edges, or NaN, is not counted; the last bin includes its right
    edge; a sample's bin is the last edge <= it (CPU's interpolation with local search)."""
    n, d = x.shape
    edges = []
    for i in builtins.range(d):
        if range is not None:
            lo, hi = jnp.float64(range[2 * i]), jnp.float64(range[2 * i + 1])
        elif n:
            lo, hi = jnp.min(x[:, i]).astype(jnp.float64), jnp.max(x[:, i]).astype(jnp.float64)
            context().check(jnp.isfinite(lo) & jnp.isfinite(hi), RuntimeError,
                            f"{name}: dimension {i}'s range is not finite")
        else:
            lo, hi = jnp.float64(0), jnp.float64(1)
        same = lo == hi
        lo, hi = jnp.where(same, lo - 0.5, lo), jnp.where(same, hi + 0.5, hi)
        edges.append(float_linspace(lo, hi, bins[i] + 1, x.dtype))
    return _histogram_counts(x, edges, weight, density), edges


def _histogram_counts(x, edges, weight, density):
    """The D-dimensional histogram of samples x (N, D) over increasing bin `edges`
    (one array per dimension), as CPU's histogramdd: a sample outside the edges, or
    NaN, is not counted; the last bin includes its right edge; a sample's bin is the
    last edge <= it."""
    n, d = x.shape
    bins = [e.shape[0] - 1 for e in edges]
    flat = jnp.zeros((n,), jnp.int64)
    inside = jnp.ones((n,), bool)
    for i, e in enumerate(edges):
        v = x[:, i]
        inside = inside & (v >= e[0]) & (v <= e[-1])
        pos = jnp.minimum(jnp.searchsorted(e, v, side="right") - 1, bins[i] - 1)
        flat = flat * bins[i] + jnp.clip(pos, 0, bins[i] - 1)
    total = int(np.prod(bins))
    w = jnp.ones((n,), x.dtype) if weight is None else weight.reshape(-1).astype(x.dtype)
    hist = jnp.zeros((total + 1,), x.dtype).at[jnp.where(inside, flat, total)].add(w)[:total]
    hist = hist.reshape(tuple(bins))
    if density:
        hist = hist / jnp.sum(hist)
        for i, e in enumerate(edges):
            shape = [1] * d
            shape[i] = bins[i]
            hist = hist / jnp.diff(e).reshape(shape)
    return hist


def _histogram_meta(self, bins=100, *, range=None, weight=None, density=False):
    _histogramdd_check(self.reshape(-1, 1), [bins], range, weight.reshape(-1) if weight is not None else None,
                       "torch.histogram")
    return self.new_empty((bins,)), self.new_empty((bins + 1,))


def _histogramdd_bin_edges_meta(self, bins, *, range=None, weight=None, density=False):
    _histogramdd_check(self, bins, range, weight)
    return [self.new_empty((b + 1,)) for b in bins]


def _histogramdd_from_bin_cts_meta(self, bins, *, range=None, weight=None, density=False):
    _histogramdd_check(self, bins, range, weight)
    return self.new_empty(tuple(bins))


def _check_bin_tensors(self, bins, weight, name):
    """CPU's checks of histogram(dd) with bin-edge tensors (histogramdd_check_inputs)."""
    for i, b in enumerate(bins):
        torch._check(b.dim() == 1, lambda: f"torch.histogramdd: bins tensor should have one dimension, but got "
                     f"{b.dim()} dimensions in the bins tensor for dimension {i}")
        torch._check(b.numel() > 1, lambda: f"{name}(): bins must be > 0, but got {b.numel() - 1} for dimension {i}")
        torch._check(b.dtype == self.dtype, lambda: f"torch.histogramdd: input tensor and bins tensors should have "
                     f"the same dtype, but got input with dtype {self.dtype} and bins for dimension {i} with dtype "
                     f"{b.dtype}")
    torch._check(weight is None or weight.shape == self.shape[:-1], lambda: "torch.histogramdd: if weight tensor is "
                 "provided it should have the same shape as the input tensor excluding its innermost dimension")


def _histogram_bins_tensor_meta(self, bins, *, weight=None, density=False):
    _check_bin_tensors(self.reshape(-1, 1), [bins], weight.reshape(-1) if weight is not None else None,
                       "torch.histogram")
    return self.new_empty((bins.numel() - 1,)), torch.empty_like(bins)


def _histogramdd_from_bin_tensors_meta(self, bins, *, weight=None, density=False):
    _check_bin_tensors(self, bins, weight, "torch.histogramdd")
    return self.new_empty(tuple(b.numel() - 1 for b in bins))


meta_impl("histogram.bins_tensor", _histogram_bins_tensor_meta)
meta_impl("_histogramdd_from_bin_tensors", _histogramdd_from_bin_tensors_meta)
meta_impl("histogram.bin_ct", _histogram_meta)
meta_impl("_histogramdd_bin_edges", _histogramdd_bin_edges_meta)
meta_impl("_histogramdd_from_bin_cts", _histogramdd_from_bin_cts_meta)


@lowering(aten.histogram.bin_ct, static=("range",))
def histogram(self, bins=100, range=None, weight=None, density=False):
    """aten::histogram.bin_ct: (hist (bins,), bin_edges (bins + 1,)) of all of self's
    elements (see `_histogramdd`); the bin count is static, so no synchronization."""
    hist, edges = _histogramdd(self.reshape(-1, 1), [bins], range, weight, density, "torch.histogram")
    return hist, edges[0]


@lowering(aten._histogramdd_bin_edges.default, static=("range",))
def histogramdd_bin_edges(self, bins, range=None, weight=None, density=False):
    """aten::_histogramdd_bin_edges (torch.histogramdd's edges): one edge tensor per
    dimension of the samples (*, D) (see `_histogramdd`)."""
    x = self.reshape(-1, self.shape[-1])
    return _histogramdd(x, list(bins), range, None, False, "torch.histogramdd")[1]


@lowering(aten._histogramdd_from_bin_cts.default, static=("range",))
def histogramdd_from_bin_cts(self, bins, range=None, weight=None, density=False):
    """aten::_histogramdd_from_bin_cts (torch.histogramdd's counts): the D-dimensional
    histogram of samples (*, D) (see `_histogramdd`)."""
    x = self.reshape(-1, self.shape[-1])
    return _histogramdd(x, list(bins), range, weight, density, "torch.histogramdd")[0]


@lowering(aten.histogram.bins_tensor)
def histogram_bins_tensor(self, bins, weight=None, density=False):
    """aten::histogram.bins_tensor: (hist, bins) of all of self's elements over the given
    increasing bin edges (see `_histogram_counts`)."""
    return _histogram_counts(self.reshape(-1, 1), [bins], weight, density), bins


@lowering(aten._histogramdd_from_bin_tensors.default)
def histogramdd_from_bin_tensors(self, bins, weight=None, density=False):
    """aten::_histogramdd_from_bin_tensors (torch.histogramdd with edge tensors): the
    D-dimensional histogram of samples (*, D) (see `_histogram_counts`)."""
    return _histogram_counts(self.reshape(-1, self.shape[-1]), list(bins), weight, density)


# ------------------------------------------------------------------ segment_reduce
_SEGMENT_OPS = {"sum": jax.ops.segment_sum, "mean": jax.ops.segment_sum, "prod": jax.ops.segment_prod,
                "max": jax.ops.segment_max, "amax": jax.ops.segment_max, "min": jax.ops.segment_min,
                "amin": jax.ops.segment_min}


def _segments(data, lengths, offsets, axis, unsafe):
    """(data as (P, L, Q), segment id per (lane, position) (P, L) with S for
    positions in no segment, lengths (P, S)) for segment_reduce's layout: segments
    along `axis`, one row of lengths (or offsets) per index of the dims before it."""
    ctx = context()
    pre, L, post = data.shape[:axis], data.shape[axis], data.shape[axis + 1:]
    p, q = int(np.prod(pre)), int(np.prod(post))
    if offsets is not None:
        offs = offsets.reshape(p, -1).astype(jnp.int64)
        starts, lens = offs[:, :-1], jnp.diff(offs, axis=-1)
        first = offs[:, :1]
    else:
        lens = lengths.reshape(p, -1).astype(jnp.int64)
        starts = jnp.cumsum(lens, axis=-1) - lens
        first = jnp.zeros((p, 1), jnp.int64)
        if not unsafe:
            ctx.check(jnp.all(jnp.sum(lens, axis=-1) == L), RuntimeError,
                      "segment_reduce(): Expected all rows of lengths along axis to sum to data.size(lengths.dim()-1) "
                      "when !unsafe.")
    ctx.check(jnp.all(lens >= 0), RuntimeError, "lengths contains negative value!")
    s = lens.shape[-1]
    pos = jnp.arange(L)
    ends = starts + lens
    ids = jax.vmap(lambda e: jnp.searchsorted(e, pos, side="right"))(ends)
    ids = jnp.where(pos[None, :] >= first, ids, s)
    return data.reshape(p, L, q), ids, lens, s


@meta_check(aten.segment_reduce.default)
def _check_segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False,
                          initial=None):
    """CPU's argument errors, which PyTorch's meta kernel lacks or raises as other
    types (IndexError for an axis lengths lacks, NotImplementedError for indices)."""
    if reduce not in _SEGMENT_OPS:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    if indices is not None:
        raise RuntimeError("segment_reduce(): indices based reduction is not supported yet.")
    bounds = lengths if lengths is not None else offsets
    if bounds is None:
        raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined.")
    axis = canonicalize_dim(data.dim(), axis)
    name = "lengths" if lengths is not None else "offsets"
    if axis != bounds.dim() - 1:
        raise RuntimeError(f"segment_reduce(): Expected axis to be the last dimension of {name} but got {axis}.")
    if bounds.dtype.is_floating_point or bounds.dtype.is_complex or bounds.dtype == torch.bool:
        raise not_implemented(f"_segment_reduce_{name}_cpu_kernel1", dt.to_jax(bounds.dtype))
    if not data.dtype.is_floating_point:  # CPU's kernel covers floating types only
        raise not_implemented("_segment_reduce_cpu", dt.to_jax(data.dtype))


@lowering(aten.segment_reduce.default, static=("initial",))
def segment_reduce(data, reduce, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None):
    """aten::segment_reduce: `reduce` (sum, mean, prod, max, min) over consecutive
    segments along `axis` given by `lengths` or `offsets` (one row per index of the
    leading dims). Empty segments give `initial` or the reduction's identity (mean:
    NaN); `initial` also joins every non-empty segment, as in CPU's kernel (mean:
    (initial + sum) / length). Negative lengths, and lengths not summing to the axis
    size unless `unsafe`, raise RuntimeError on the device."""
    axis = canonicalize_dim(data.ndim, axis)
    x, ids, lens, s = _segments(data, lengths, offsets, axis, unsafe)
    out = jax.vmap(lambda v, i: _SEGMENT_OPS[reduce](v, i, num_segments=s))(x, ids)  # (P, S, Q)
    if initial is not None:
        init = jnp.asarray(initial, data.dtype)
        out = {"sum": lambda: out + init, "mean": lambda: out + init, "prod": lambda: out * init,
               "max": lambda: jnp.maximum(out, init), "amax": lambda: jnp.maximum(out, init),
               "min": lambda: jnp.minimum(out, init), "amin": lambda: jnp.minimum(out, init)}[reduce]()
    if reduce == "mean":
        n = lens[..., None].astype(data.dtype)
        empty = jnp.asarray(jnp.nan if initial is None else initial, data.dtype)
        out = jnp.where(lens[..., None] > 0, out / jnp.where(n > 0, n, 1), empty)
    return out.reshape(data.shape[:axis] + (s,) + data.shape[axis + 1:])


@lowering(aten._segment_reduce_backward.default, static=("initial",))
def segment_reduce_backward(grad, output, data, reduce, lengths=None, offsets=None, axis=0, initial=None):
    """aten::_segment_reduce_backward: the gradient of segment_reduce for `data`, by
    CPU's rules: sum passes the segment's gradient, mean divides it by the length,
    max/min give it to every element equal to the result (or NaN), divided among them
    where positive (CPU's kernel's quirk); prod gives grad * output / x, or for a zero
    or NaN x the product of the segment's other elements (and `initial`) times grad."""
    axis = canonicalize_dim(data.ndim, axis)
    x, ids, lens, s = _segments(data, lengths, offsets, axis, True)
    p, L, q = x.shape
    inside = (ids < s)[..., None]
    idx = jnp.minimum(ids, max(s - 1, 0))

    def per_position(seg):  # (P, S, Q) -> (P, L, Q), the value of each position's segment
        seg = seg.reshape(p, s, q)
        return jnp.take_along_axis(seg, idx[..., None], axis=1) if s else jnp.zeros((p, L, q), seg.dtype)

    def segment_sum(v):
        return jax.vmap(lambda a, i: jax.ops.segment_sum(a, i, num_segments=s))(v, ids)

    g = per_position(grad)
    if reduce in ("sum", "mean"):
        gi = g
        if reduce == "mean":
            gi = g / per_position(jnp.broadcast_to(lens[..., None], (p, s, q))).astype(g.dtype)
    elif reduce in ("max", "min", "amax", "amin"):
        hit = (jnp.isnan(x) | (x == per_position(output))) & inside
        gi = jnp.where(hit, g, 0)
        counter = per_position(segment_sum(hit.astype(jnp.int64)))
        gi = jnp.where((counter >= 2) & (gi > 0), gi / counter.astype(g.dtype), gi)
    else:  # prod
        bad = (jnp.isnan(x) | (x == 0)) & inside
        good_prod = per_position(jax.vmap(lambda a, i: jax.ops.segment_prod(a, i, num_segments=s))(
            jnp.where(bad, 1, x), ids))
        others_bad = per_position(segment_sum(bad.astype(jnp.int64))) - bad
        others_nan = per_position(segment_sum((jnp.isnan(x) & inside).astype(jnp.int64))) - jnp.isnan(x)
        rest = jnp.where(others_bad == 0, 1, jnp.where(others_nan > 0, jnp.nan, 0)).astype(x.dtype)
        exclusive = good_prod * rest * (1 if initial is None else jnp.asarray(initial, x.dtype))
        gi = jnp.where(bad, g * exclusive, g * per_position(output) / jnp.where(bad, 1, x))
    gi = jnp.where(inside, gi, 0).astype(data.dtype)
    return gi.reshape(data.shape)
