"""Bad input on `neuron` raises what CPU (or, for device questions, CUDA) raises:
shape and dtype errors, tensors of two devices in one op, invalid device indices,
and in-place writes whose memory overlaps."""
import math
import warnings

import pytest
import torch

from helpers import no_fallback


def _both(fn, *cpu_args):
    """The exception types fn raises on CPU and on neuron copies of the arguments
    (None where it does not raise), plus the messages."""
    out = []
    for device in ("cpu", "neuron"):
        args = [a.clone().to(device) for a in cpu_args]
        try:
            fn(*args)
            out.append((None, ""))
        except Exception as exc:  # noqa: BLE001 - comparing whatever is raised
            out.append((type(exc), str(exc)))
    return out


SHAPE_ERRORS = {
    "broadcast": (lambda a, b: a + b, torch.ones(3), torch.ones(4)),
    "inplace_broadcast": (lambda a, b: a.add_(b), torch.ones(3), torch.ones(2, 3)),
    "view_numel": (lambda a: a.view(5), torch.ones(6)),
    "view_stride": (lambda a: a.t().view(-1), torch.ones(2, 3)),
    "reshape": (lambda a: a.reshape(4, -1), torch.ones(6)),
    "copy_shape": (lambda a, b: a.copy_(b), torch.ones(3), torch.ones(4)),
    "expand": (lambda a: a.expand(3, 4), torch.ones(2)),
    "select": (lambda a: a.select(0, 5), torch.ones(2)),
    "as_strided_bounds": (lambda a: a.as_strided((10,), (1,), 0), torch.ones(2)),
    "unfold": (lambda a: a.unfold(0, 5, 1), torch.ones(3)),
    "inplace_promotion": (lambda a, b: a.add_(b), torch.ones(3, dtype=torch.int64), torch.ones(3)),
    "view_dtype": (lambda a: a.view(torch.int64), torch.ones(3)),
    "bool_sub": (lambda a, b: a - b, torch.ones(3, dtype=torch.bool), torch.ones(3, dtype=torch.bool)),
    "mm_shapes": (lambda a, b: a @ b, torch.ones(2, 3), torch.ones(2, 3)),
    "cat_dims": (lambda a, b: torch.cat([a, b]), torch.ones(2, 3), torch.ones(2, 4)),
    "squeeze_dim": (lambda a: a.squeeze(5), torch.ones(2, 3)),
    "permute_dims": (lambda a: a.permute(0, 0), torch.ones(2, 3)),
}


@pytest.mark.parametrize("name", list(SHAPE_ERRORS))
def test_bad_shapes_and_dtypes_raise_like_cpu(name):
    fn, *args = SHAPE_ERRORS[name]
    (cpu_type, cpu_msg), (dev_type, dev_msg) = _both(fn, *args)
    assert cpu_type is not None, "the case must be an error on CPU"
    assert dev_type is cpu_type, (cpu_msg, dev_msg)


@pytest.mark.parametrize("name", ["view_numel", "view_stride", "expand", "select", "as_strided_bounds",
                                  "view_dtype", "bool_sub", "copy_shape"])
def test_error_messages_match_cpu(name):
    fn, *args = SHAPE_ERRORS[name]
    (_, cpu_msg), (_, dev_msg) = _both(fn, *args)
    assert dev_msg == cpu_msg


def test_mixing_cpu_and_neuron_tensors_raises_like_cuda():
    n = torch.ones(3, device="neuron")
    c = torch.ones(3)
    for fn in (lambda: n + c, lambda: c + n, lambda: c.add_(n), lambda: n.add_(c), lambda: torch.where(n > 0, n, c),
               lambda: n + torch.ones(1), lambda: torch.mul(n, 2, out=torch.empty(3)),
               lambda: torch.mul(n[0], 2, out=torch.tensor(0.0)), lambda: torch.tensor(1.0).add_(n[0])):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            fn()


def test_zero_dim_cpu_tensors_are_scalars():
    n = torch.arange(3.0, device="neuron")
    with no_fallback():
        assert torch.equal((n + torch.tensor(2.0)).cpu(), torch.arange(3.0) + 2)
        assert torch.equal((torch.tensor(2.0) * n).cpu(), torch.arange(3.0) * 2)
        assert torch.equal(n.clone().mul_(torch.tensor(3)).cpu(), torch.arange(3.0) * 3)
        assert (n + torch.tensor(2)).dtype == torch.float32  # a 0-dim int does not promote
        assert torch.equal(torch.where(n > 0, n, torch.tensor(-1.0)).cpu(), torch.tensor([-1.0, 1.0, 2.0]))


@pytest.mark.parametrize("device", ["neuron:5", "neuron:1", torch.device("neuron", 7)], ids=str)
def test_invalid_device_index_raises(device):
    for make in (lambda: torch.ones(2, device=device), lambda: torch.ones(2).to(device),
                 lambda: torch.empty(2, device=device), lambda: torch.zeros(2, device=device),
                 lambda: torch.tensor([1.0], device=device), lambda: torch.randn(2, device=device),
                 lambda: torch.arange(2, device=device)):
        with pytest.raises(RuntimeError, match="invalid device"):
            make()
    with pytest.raises(RuntimeError, match="invalid device"):
        torch.neuron.set_device(device)
    with pytest.raises(RuntimeError, match="invalid device"):
        with torch.neuron.device(device):
            pass
    assert torch.neuron.current_device() == 0


def test_malformed_device_string_raises():
    with pytest.raises(RuntimeError, match="Invalid device string"):
        torch.ones(2, device="neuron:-1")
    with pytest.raises(ValueError):
        torch.neuron.memory_allocated("cpu")


OVERLAP = {
    "copy_partial": lambda x: x[1:].copy_(x[:-1]),
    "add_partial": lambda x: x[1:].add_(x[:-1]),
    "out_partial": lambda x: torch.add(x[:-1], 1, out=x[1:]),
    "sigmoid_out_partial": lambda x: torch.sigmoid(x[:-1], out=x[1:]),
    "expanded_add_": lambda x: x[:1].expand(3).add_(1),
    "expanded_copy_": lambda x: x[:1].expand(3).copy_(torch.arange(3.0, device=x.device)),
    "expanded_relu_": lambda x: x[:1].expand(3).relu_(),
}


@pytest.mark.parametrize("name", list(OVERLAP))
def test_overlapping_writes_raise_like_cpu(name):
    (cpu_type, cpu_msg), (dev_type, dev_msg) = _both(OVERLAP[name], torch.arange(6.0))
    assert cpu_type is RuntimeError and dev_type is RuntimeError
    assert dev_msg == cpu_msg


ALLOWED_OVERLAP = {
    "same_tensor": lambda x: x.add_(x),
    "out_is_input": lambda x: torch.mul(x, 2, out=x),
    "out_is_input_view": lambda x: torch.add(x[:3], x[3:], out=x[:3]),
    "disjoint_strided": lambda x: x[::2].add_(x[1::2]),
    "expanded_fill_": lambda x: x[:1].expand(3).fill_(2),
    "disjoint_slices": lambda x: x[:3].copy_(x[3:]),
}


@pytest.mark.parametrize("name", list(ALLOWED_OVERLAP))
def test_allowed_aliasing_matches_cpu(name):
    cpu = torch.arange(6.0)
    dev = cpu.to("neuron")
    ALLOWED_OVERLAP[name](cpu)
    ALLOWED_OVERLAP[name](dev)
    assert torch.equal(dev.cpu(), cpu)


def _outcome(fn, device, dtype):
    """(exception type, message) of fn on a 5-element `dtype` tensor on `device`, at the
    op or at the next synchronization point; (None, result) when it succeeds."""
    x = torch.arange(1, 6).to(dtype).to(device)
    try:
        out = fn(x)
        if device == "neuron":
            torch.neuron.synchronize()
        return None, out.cpu()
    except Exception as exc:  # noqa: BLE001 - comparing whatever is raised
        return type(exc), str(exc)


# Ops whose CPU kernels convert a Scalar argument with c10::checked_convert.
SCALAR_OPS = {
    "fill_": lambda x, v: x.fill_(v),
    "masked_fill": lambda x, v: x.masked_fill(x > 2, v),
    "masked_fill_tensor": lambda x, v: x.masked_fill(x > 2, torch.tensor(v)),
    "full": lambda x, v: torch.full((3,), v, dtype=x.dtype, device=x.device),
    "full_like": lambda x, v: torch.full_like(x, v),
    "index_fill": lambda x, v: x.index_fill(0, torch.tensor([0, 2], device=x.device), v),
    "scatter_value": lambda x, v: x.scatter(0, torch.tensor([0, 2], device=x.device), v),
    "clamp": lambda x, v: x.clamp(max=v),
    "constant_pad": lambda x, v: torch.constant_pad_nd(x, (1, 1), v),
    "threshold": lambda x, v: torch.threshold(x, 2, v),
    "add_alpha": lambda x, v: torch.add(x, x, alpha=v),
    "pow": lambda x, v: x ** v,
}


@pytest.mark.parametrize("op", SCALAR_OPS, ids=str)
def test_scalar_overflow_raises_like_cpu(op):
    """uint8.fill_(300) and the like raise CPU's "value cannot be converted to type
    uint8_t without overflow" (RuntimeError), also from a cached executable (the Scalar
    is a dynamic argument); values that fit, and wrapping ints (uint8 -1), still work."""
    fn = SCALAR_OPS[op]
    cases = [(torch.uint8, 3), (torch.uint8, 300), (torch.int8, -129), (torch.float16, 1e5)]
    if op not in ("pow", "add_alpha", "clamp"):
        cases += [(torch.uint8, -1), (torch.int16, float("nan"))]
    for dtype, value in cases:
        with no_fallback():
            got = _outcome(lambda x: fn(x, value), "neuron", dtype)
        want = _outcome(lambda x: fn(x, value), "cpu", dtype)
        assert got[0] is want[0], (dtype, value, got, want)
        if want[0] is None:
            assert torch.equal(got[1], want[1]), (dtype, value)
        else:
            assert got[1] == want[1], (dtype, value)


@pytest.mark.parametrize("op", [name for name in SCALAR_OPS if name != "pow"], ids=str)
def test_complex_scalars_convert_like_cpu(op):
    """A complex Scalar where CPU's kernel reads a real one (`Scalar::to`): a zero
    imaginary part passes as the real part (threshold, masked_fill, fill_, clamp of a
    floating tensor), any value fills a bool tensor (masked_fill), index_fill and
    clamp_min refuse it. neuron raised TypeError (threshold), PyTorch's reference's
    errors (masked_fill, index_fill of a 0-dim tensor), or promoted clamp's result to
    complex."""
    fn = SCALAR_OPS[op]
    for dtype in (torch.float32, torch.float64, torch.float16, torch.int64, torch.uint8, torch.bool, torch.complex64):
        for value in (1 + 0j, 1 + 1j, 0j, 2.5 + 0j, -1 + 0j, 300 + 0j):
            for _ in range(2):  # and from the cached executable
                with no_fallback():
                    got = _outcome(lambda x: fn(x, value), "neuron", dtype)
                want = _outcome(lambda x: fn(x, value), "cpu", dtype)
                assert got[0] is want[0], (dtype, value, got, want)
                if want[0] is None:
                    assert got[1].dtype == want[1].dtype and torch.equal(got[1], want[1]), (dtype, value)


def _ones(device, dtype, *shape):
    return torch.ones(*shape, dtype=dtype, device=device)


# alpha/beta/weight read with Scalar::to<T>(): in the opmath type (addmm, baddbmm,
# addbmm, lerp) or in the output type (addmv, addr).
PRODUCT_SCALARS = {
    "addmm_alpha": lambda d, t, v: torch.addmm(_ones(d, t, 2, 2), _ones(d, t, 2, 3), _ones(d, t, 3, 2), alpha=v),
    "addmm_beta": lambda d, t, v: torch.addmm(_ones(d, t, 2, 2), _ones(d, t, 2, 3), _ones(d, t, 3, 2), beta=v),
    "baddbmm_alpha": lambda d, t, v: torch.baddbmm(_ones(d, t, 1, 2, 2), _ones(d, t, 1, 2, 3), _ones(d, t, 1, 3, 2),
                                                   alpha=v),
    "addbmm_beta": lambda d, t, v: torch.addbmm(_ones(d, t, 2, 2), _ones(d, t, 2, 2, 3), _ones(d, t, 2, 3, 2), beta=v),
    "addmv_alpha": lambda d, t, v: torch.addmv(_ones(d, t, 2), _ones(d, t, 2, 3), _ones(d, t, 3), alpha=v),
    "addmv_beta": lambda d, t, v: torch.addmv(_ones(d, t, 2), _ones(d, t, 2, 3), _ones(d, t, 3), beta=v),
    "addr_alpha": lambda d, t, v: torch.addr(_ones(d, t, 2, 2), _ones(d, t, 2), _ones(d, t, 2), alpha=v),
    "lerp": lambda d, t, v: torch.lerp(_ones(d, t, 2), _ones(d, t, 2) * 3, v),
}


@pytest.mark.parametrize("op", PRODUCT_SCALARS, ids=str)
def test_matrix_product_scalars_convert_like_cpu(op):
    """A complex alpha/beta with a non-zero imaginary part on real tensors raises CPU's
    overflow error (it was dropped); values past the type's range raise too."""
    fn = PRODUCT_SCALARS[op]
    cases = [(torch.float32, 1j), (torch.float64, 2 - 1j), (torch.float16, 1e5), (torch.float32, 2.5)]
    if op != "lerp":
        cases += [(torch.uint8, 300), (torch.int8, -129), (torch.int64, 3), (torch.complex64, 1j)]
    for dtype, value in cases:
        with no_fallback():
            got = _outcome(lambda _: fn("neuron", dtype, value), "neuron", dtype)
        want = _outcome(lambda _: fn("cpu", dtype, value), "cpu", dtype)
        assert got[0] is want[0], (dtype, value, got, want)
        if want[0] is None:
            assert torch.equal(got[1], want[1]), (dtype, value)
        else:
            assert got[1] == want[1], (dtype, value)


EMPTY_PRODUCTS = {  # CPU returns beta * self before its gemm reads alpha and beta (checked only by addmv)
    "addmm_k0": lambda d, t, v: torch.addmm(_ones(d, t, 2, 2), _ones(d, t, 2, 0), _ones(d, t, 0, 2), alpha=v, beta=v),
    "addmm_empty_result": lambda d, t, v: torch.addmm(_ones(d, t, 0, 2), _ones(d, t, 0, 3), _ones(d, t, 3, 2), alpha=v),
    "baddbmm_k0": lambda d, t, v: torch.baddbmm(_ones(d, t, 1, 2, 2), _ones(d, t, 1, 2, 0), _ones(d, t, 1, 0, 2),
                                                alpha=v),
    "addbmm_no_batches": lambda d, t, v: torch.addbmm(_ones(d, t, 2, 2), _ones(d, t, 0, 2, 3), _ones(d, t, 0, 3, 2),
                                                      beta=v),
    "addbmm_k0": lambda d, t, v: torch.addbmm(_ones(d, t, 2, 2), _ones(d, t, 2, 2, 0), _ones(d, t, 2, 0, 2), alpha=v),
    "addmv_empty_alpha": lambda d, t, v: torch.addmv(_ones(d, t, 2), _ones(d, t, 2, 0), _ones(d, t, 0), alpha=v),
    "addmv_empty_beta": lambda d, t, v: torch.addmv(_ones(d, t, 2), _ones(d, t, 2, 0), _ones(d, t, 0), beta=v),
    "addmv_beta_wraps": lambda d, t, v: torch.addmv(_ones(d, t, 2), _ones(d, t, 2, 3), _ones(d, t, 3), beta=-1),
}


@pytest.mark.parametrize("op", EMPTY_PRODUCTS, ids=str)
def test_empty_products_read_alpha_and_beta_as_cpu_does(op):
    fn = EMPTY_PRODUCTS[op]
    for dtype, value in [(torch.int8, 300), (torch.uint8, 300), (torch.uint8, -1), (torch.float16, 1e39), (torch.float32, 1j),
                         (torch.float32, float("nan"))]:
        with no_fallback():
            got = _outcome(lambda _: fn("neuron", dtype, value), "neuron", dtype)
        want = _outcome(lambda _: fn("cpu", dtype, value), "cpu", dtype)
        assert got[0] is want[0], (dtype, value, got, want)
        if want[0] is None:
            torch.testing.assert_close(got[1], want[1], equal_nan=True, rtol=0, atol=0)


def _seq(device, dtype, *shape):
    return (torch.arange(1, math.prod(shape) + 1) % 3).reshape(shape).to(dtype).to(device)


# Shapes CPU's matrix-product kernels answer before their dtype dispatch: an empty
# result, or beta * self (`result.mul_(beta)`, TensorIterator's cast check) for an empty
# contraction; addbmm runs one addmm_ per batch with beta, then 1.
SHORTCUT_PRODUCTS = {
    "addmm_k0": lambda d, t, b: torch.addmm(_seq(d, t, 2, 2), _seq(d, t, 2, 0), _seq(d, t, 0, 2), beta=b),
    "addmm_empty_result": lambda d, t, b: torch.addmm(_seq(d, t, 0, 2), _seq(d, t, 0, 3), _seq(d, t, 3, 2), beta=b),
    "baddbmm_k0": lambda d, t, b: torch.baddbmm(_seq(d, t, 2, 2, 2), _seq(d, t, 2, 2, 0), _seq(d, t, 2, 0, 2),
                                                beta=b),
    "addbmm_two_batches_k0": lambda d, t, b: torch.addbmm(_seq(d, t, 2, 2), _seq(d, t, 2, 2, 0),
                                                          _seq(d, t, 2, 0, 2), beta=b),
    "addbmm_no_batches_empty_result": lambda d, t, b: torch.addbmm(_seq(d, t, 0, 2), _seq(d, t, 0, 0, 3),
                                                                   _seq(d, t, 0, 3, 2), beta=b),
    "addmv_k0": lambda d, t, b: torch.addmv(_seq(d, t, 2), _seq(d, t, 2, 0), _seq(d, t, 0), beta=b),
}


@pytest.mark.parametrize("op", SHORTCUT_PRODUCTS, ids=str)
def test_matrix_product_shortcuts_cast_beta_as_cpu_does(op):
    """bool computes where the product is empty (it raised NotImplementedError); a beta
    whose type the result cannot hold raises CPU's cast error (a float beta on int64 was
    truncated), except for addmv, which reads it as a 0-dim tensor of the result's dtype
    (beta=1j on bool is true). A complex beta on bfloat16 names CPU's BComplex32 (a
    KeyError before)."""
    fn = SHORTCUT_PRODUCTS[op]
    for dtype, beta in [(torch.bool, 0), (torch.bool, True), (torch.bool, 1), (torch.bool, 1j), (torch.int64, 0.5),
                        (torch.int64, 2), (torch.float32, 1j), (torch.float32, 0j), (torch.bfloat16, 0j),
                        (torch.bfloat16, 1j), (torch.float16, 1j)]:
        with no_fallback():
            got = _outcome(lambda _: fn("neuron", dtype, beta), "neuron", dtype)
        want = _outcome(lambda _: fn("cpu", dtype, beta), "cpu", dtype)
        assert got[0] is want[0], (dtype, beta, got, want)
        if want[0] is None:
            assert got[1].dtype == want[1].dtype and torch.equal(got[1], want[1]), (dtype, beta)
        else:
            assert got[1] == want[1], (dtype, beta)


# PyTorch's Meta kernels read a complex Scalar with a zero imaginary part more strictly
# than CPU: addmm's decomposition takes int(beta), `_refs.addr` refuses it.
REAL_COMPLEX_SCALARS = {
    "addmm_int": lambda d, v: torch.addmm(_seq(d, torch.int64, 2, 2), _seq(d, torch.int64, 2, 3),
                                          _seq(d, torch.int64, 3, 2), alpha=v, beta=v),
    "addmm_int_out": lambda d, v: torch.addmm(_seq(d, torch.int64, 2, 2), _seq(d, torch.int64, 2, 3),
                                              _seq(d, torch.int64, 3, 2), alpha=v, beta=v,
                                              out=torch.empty(0, dtype=torch.int64, device=d)),
    "addmm_int_inplace": lambda d, v: _seq(d, torch.int64, 2, 2).addmm_(_seq(d, torch.int64, 2, 3),
                                                                        _seq(d, torch.int64, 3, 2), alpha=v, beta=v),
    "addr_float": lambda d, v: torch.addr(_seq(d, torch.float32, 2, 3), _seq(d, torch.float32, 2),
                                          _seq(d, torch.float32, 3), alpha=v, beta=v),
    "addr_bool": lambda d, v: torch.addr(_seq(d, torch.bool, 2, 3), _seq(d, torch.bool, 2),
                                         _seq(d, torch.bool, 3), alpha=v, beta=v),
}


@pytest.mark.parametrize("op", REAL_COMPLEX_SCALARS, ids=str)
def test_complex_scalars_with_no_imaginary_part_compute_as_on_cpu(op):
    fn = REAL_COMPLEX_SCALARS[op]
    for value in (0j, 1 + 0j, 2.5 + 0j, 1j):
        with no_fallback():
            got = _outcome(lambda _: fn("neuron", value), "neuron", torch.float32)
        want = _outcome(lambda _: fn("cpu", value), "cpu", torch.float32)
        assert got[0] is want[0], (value, got, want)
        if want[0] is None:
            assert torch.equal(got[1], want[1]), value
        else:
            assert got[1] == want[1], value


def test_complex_scalars_with_no_imaginary_part_compile():
    """Fake tensors run the same Meta kernels, so torch.compile sizes the result too."""
    fn = REAL_COMPLEX_SCALARS["addmm_int"]
    compiled = torch.compile(lambda d: fn(d, 2 + 0j), backend="neuron", fullgraph=True)
    assert torch.equal(compiled("neuron").cpu(), fn("cpu", 2 + 0j))


def test_add_alpha_kind_errors_like_cpu():
    """CPU's alpha_check: bool alpha needs a bool result, a floating one a floating
    result; RuntimeError (PyTorch's meta kernel raised ValueError)."""
    for alpha in (True, 2.5):
        for fn in (lambda x: torch.add(x, x, alpha=alpha), lambda x: torch.sub(x, x, alpha=alpha),
                   lambda x: x.add_(x, alpha=alpha), lambda x: torch.add(x, x, alpha=alpha, out=torch.empty_like(x))):
            got, want = _outcome(fn, "neuron", torch.int64), _outcome(fn, "cpu", torch.int64)
            assert got == want


def _raised(fn, device):
    """(exception type, message) fn(device) raises, synchronizing on neuron so that
    device-side checks report; (None, "") if it does not raise."""
    try:
        fn(device)
        if device != "cpu":
            torch.neuron.synchronize()
    except Exception as exc:  # noqa: BLE001 - comparing whatever is raised
        return type(exc), str(exc)
    return None, ""


def _t(v, d, dtype=None):
    return torch.tensor(v, device=d, dtype=dtype)


_F = torch.nn.functional
_X = lambda d, *s: torch.arange(float(torch.Size(s or (2, 3)).numel()), device=d).reshape(s or (2, 3))  # noqa: E731

# Argument errors CPU's kernels raise and PyTorch's meta kernels miss or raise as
# another type; the message is CPU's too.
ARG_ERRORS = {
    # composite ops whose CPU-only route decides the error: argument and shape checks
    # come before the dtype refusal (eager/cpu_routes.py)
    "dropout_p_out_of_range": lambda d: torch.dropout(_O(d, 3), 1.5, True),
    "dropout_p_out_of_range_eval": lambda d: torch.dropout(_O(d, 3), 1.5, False),
    "dropout_complex_p_out_of_range": lambda d: torch.dropout(_O(d, 3, dtype=_C), 1.5, True),
    "max_pool1d_int_kernel_too_large": lambda d: F.max_pool1d(_O(d, 2, 4, 9, dtype=_L), 20),
    "max_pool1d_int_padding_too_large": lambda d: F.max_pool1d(_O(d, 2, 4, 9, dtype=_L), 3, padding=2),
    "max_pool1d_int_zero_kernel": lambda d: F.max_pool1d(_O(d, 2, 4, 9, dtype=_L), 0),
    "index_select_float_index": lambda d: torch.index_select(_X(d), 0, _t([1.], d)),
    "index_select_int16_index": lambda d: torch.index_select(_X(d), 0, _t([1], d, torch.int16)),
    "index_select_2d_index": lambda d: torch.index_select(_X(d), 0, _t([[1]], d)),
    "index_select_out_2d_index": lambda d: torch.index_select(_X(d), 0, _t([[1]], d), out=torch.empty(1, 3, device=d)),
    "index_select_oob_dim1": lambda d: torch.index_select(_X(d), 1, _t([3], d)),
    "index_select_oob_dim1_negative": lambda d: torch.index_select(_X(d, 2, 3, 4), -2, _t([0, -1], d)),
    "index_select_oob_empty_self": lambda d: torch.index_select(_X(d, 2, 0, 3), 2, _t([5], d)),
    "index_select_oob_dim2": lambda d: torch.index_select(_X(d, 2, 3, 4), 2, _t([4], d)),
    "index_add_float_index": lambda d: _X(d).index_add(0, _t([1.], d), _X(d, 1, 3)),
    "index_add_bool_index": lambda d: _X(d).index_add_(0, _t([True], d), _X(d, 1, 3)),
    "index_add_2d_index": lambda d: _X(d).index_add(0, _t([[1]], d), _X(d, 1, 3)),
    "index_copy_int32_index": lambda d: _X(d).index_copy(0, _t([1], d, torch.int32), _X(d, 1, 3)),
    "index_copy_2d_index": lambda d: _X(d).index_copy_(0, _t([[1]], d), _X(d, 1, 3)),
    "index_fill_float_index": lambda d: _X(d).index_fill(0, _t([1.], d), 1.),
    "index_fill_int32_index": lambda d: _X(d).index_fill_(0, _t([1], d, torch.int32), _t(1., d)),
    "index_fill_2d_index": lambda d: _X(d).index_fill(0, _t([[1]], d), 1.),
    "masked_scatter_uint8_mask": lambda d: _X(d).masked_scatter(_t([1, 0, 1], d, torch.uint8), _X(d)),
    "masked_scatter__float_mask": lambda d: _X(d).masked_scatter_(_t([1., 0., 1.], d), _X(d)),
    "amax_zero_size_dim": lambda d: torch.amax(_X(d, 2, 0), 1),
    "amin_zero_size_dims": lambda d: torch.amin(_X(d, 0, 2, 0), (-1, 0), keepdim=True),
    "amax_empty_all": lambda d: torch.amax(_X(d, 2, 0)),
    "aminmax_zero_size_dim": lambda d: torch.aminmax(_X(d, 2, 0), dim=-1),
    "aminmax_empty_all": lambda d: torch.aminmax(_X(d, 2, 0)),
    "conv1d_negative_dilation": lambda d: _F.conv1d(_X(d, 1, 1, 5), _X(d, 1, 1, 2), dilation=-1),
    "conv2d_zero_dilation": lambda d: _F.conv2d(_X(d, 1, 1, 5, 5), _X(d, 1, 1, 2, 2), dilation=(1, 0)),
    "conv3d_negative_padding": lambda d: _F.conv3d(_X(d, 1, 1, 4, 4, 4), _X(d, 1, 1, 2, 2, 2), padding=-1),
    "conv1d_zero_stride": lambda d: _F.conv1d(_X(d, 1, 1, 5), _X(d, 1, 1, 2), stride=0),
    "conv2d_zero_groups": lambda d: _F.conv2d(_X(d, 1, 1, 5, 5), _X(d, 1, 1, 2, 2), groups=0),
    "conv_transpose2d_negative_output_padding":
        lambda d: _F.conv_transpose2d(_X(d, 1, 1, 5, 5), _X(d, 1, 1, 2, 2), output_padding=-1),
    "embedding_3d_weight": lambda d: _F.embedding(_t([0], d), _X(d, 2, 2, 2)),
    "narrow_copy_dim_past_last": lambda d: _X(d, 2, 2, 2).narrow_copy(3, 0, 1),
    "narrow_copy_0d": lambda d: _t(1., d).narrow_copy(0, 0, 1),
    "cat_0d": lambda d: torch.cat([_t(1., d), _t(2., d)]),
    "cat_out_0d": lambda d: torch.cat([_X(d), _t(2., d)], out=torch.empty(3, device=d)),
    "bucketize_2d_boundaries": lambda d: torch.bucketize(_X(d, 3), _X(d, 2, 2)),
    "bucketize_scalar_0d_boundaries": lambda d: torch.bucketize(1.0, _t(1., d)),
}


_O = lambda d, *s, dtype=None: torch.ones(s, device=d, dtype=dtype)  # noqa: E731
_F64 = torch.float64

# The matrix products' argument errors: PyTorch's Meta kernels word them as CUDA does
# ("a and b must have same reduction dim"), let addmm's `self` and addmv's 2-d `self`
# through where CPU refuses them, and check dtypes after shapes where CPU's addmm checks
# them first.
MATRIX_PRODUCT_ERRORS = {
    "mm_inner": lambda d: torch.mm(_O(d, 2, 3), _O(d, 4, 5)),
    "mm_inner_and_dtype": lambda d: torch.mm(_O(d, 2, 3), _O(d, 4, 5, dtype=_F64)),
    "mm_empty_inner": lambda d: torch.mm(_O(d, 0, 3), _O(d, 4, 5)),
    "mm_int": lambda d: torch.mm(_O(d, 2, 3, dtype=torch.int64), _O(d, 4, 5, dtype=torch.int64)),
    "mm_vector_self": lambda d: torch.mm(_O(d, 3), _O(d, 4, 5)),
    "mm_vector_mat2": lambda d: torch.mm(_O(d, 2, 3), _O(d, 4)),
    "mm_out": lambda d: torch.mm(_O(d, 2, 3), _O(d, 4, 5), out=_O(d, 2, 5)),
    "matmul_2d": lambda d: _O(d, 2, 3) @ _O(d, 4, 5),
    "matmul_vector_matrix": lambda d: _O(d, 3) @ _O(d, 4, 5),
    "linear": lambda d: _F.linear(_O(d, 2, 3), _O(d, 5, 4), _O(d, 5)),
    "addmm_inner": lambda d: torch.addmm(_O(d, 2, 5), _O(d, 2, 3), _O(d, 4, 5)),
    "addmm_dtype_before_inner": lambda d: torch.addmm(_O(d, 2, 5), _O(d, 2, 3), _O(d, 4, 5, dtype=_F64)),
    "addmm_self_dtype": lambda d: torch.addmm(_O(d, 2, 5, dtype=_F64), _O(d, 2, 3), _O(d, 4, 5)),
    "addmm_self_expand": lambda d: torch.addmm(_O(d, 3, 5), _O(d, 2, 3), _O(d, 3, 5)),
    "addmm_self_vector": lambda d: torch.addmm(_O(d, 3), _O(d, 2, 3), _O(d, 3, 5)),
    "addmm_self_3d": lambda d: torch.addmm(_O(d, 2, 2, 5), _O(d, 2, 3), _O(d, 3, 5)),
    "addmm_mat1_3d": lambda d: torch.addmm(_O(d, 2, 5), _O(d, 2, 3, 4), _O(d, 3, 5)),
    "addmm_out": lambda d: torch.addmm(_O(d, 2, 5), _O(d, 2, 3), _O(d, 4, 5), out=_O(d, 2, 5)),
    "mv_inner": lambda d: torch.mv(_O(d, 2, 3), _O(d, 4)),
    "mv_matrix_vec": lambda d: torch.mv(_O(d, 2, 3), _O(d, 3, 1)),
    "mv_0d": lambda d: torch.mv(_O(d), _O(d, 3)),
    "matmul_matrix_vector": lambda d: _O(d, 2, 3) @ _O(d, 4),
    "addmv_self_size": lambda d: torch.addmv(_O(d, 3), _O(d, 2, 3), _O(d, 3)),
    "addmv_self_2d": lambda d: torch.addmv(_O(d, 2, 1), _O(d, 2, 3), _O(d, 3)),
    "addmv_0d_self_inner": lambda d: torch.addmv(_O(d), _O(d, 2, 3), _O(d, 4)),
    "addmv_inner_before_dtype": lambda d: torch.addmv(_O(d, 2, dtype=_F64), _O(d, 2, 3), _O(d, 4)),
    "addmv_dtype": lambda d: torch.addmv(_O(d, 2, dtype=_F64), _O(d, 2, 3), _O(d, 3)),
    "addmv_inplace_dtype": lambda d: _O(d, 2, dtype=_F64).addmv_(_O(d, 2, 3), _O(d, 3)),
    "vdot_bool": lambda d: torch.vdot(_O(d, 3, dtype=torch.bool), _O(d, 3, dtype=torch.bool)),
    "dot_sizes": lambda d: torch.dot(_O(d, 3), _O(d, 4)),
    "dot_dtype": lambda d: torch.dot(_O(d, 3), _O(d, 4, dtype=_F64)),
    "dot_2d": lambda d: torch.dot(_O(d, 3, 1), _O(d, 4)),
    "vdot_sizes": lambda d: torch.vdot(_O(d, 3, dtype=torch.cfloat), _O(d, 4, dtype=torch.cfloat)),
    "matmul_vector_vector": lambda d: _O(d, 3) @ _O(d, 4),
}


@pytest.mark.parametrize("name", list(MATRIX_PRODUCT_ERRORS))
def test_matrix_product_errors_match_cpu(name):
    cpu = _raised(MATRIX_PRODUCT_ERRORS[name], "cpu")
    assert cpu[0] is not None, "the case must be an error on CPU"
    assert _raised(MATRIX_PRODUCT_ERRORS[name], "neuron") == cpu


@pytest.mark.parametrize("name", ["mm_inner", "addmm_self_3d", "addmv_self_2d", "dot_sizes"])
def test_matrix_product_errors_match_cpu_when_compiled(name):
    """Fake tensors consult the same checks, so torch.compile raises CPU's error too."""
    _assert_compiled_raises_cpus_message(MATRIX_PRODUCT_ERRORS[name])


def _assert_compiled_raises_cpus_message(fn):
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="neuron", fullgraph=True)
    cpu = _raised(fn, "cpu")
    with pytest.raises(Exception) as info:
        compiled("neuron")
    assert cpu[1] in str(info.value)


# Inputs a lowering cannot trace (JAX raised its TypeError/ValueError) or refuses with
# an error of its own: the call's CPU run decides the error, type and message.
TRACE_REFUSALS = {
    "bitwise_not_float": lambda d: torch.bitwise_not(_O(d, 3)),
    "left_shift_float": lambda d: torch.bitwise_left_shift(_O(d, 3), _O(d, 3)),
    "left_shift_bool": lambda d: torch.bitwise_left_shift(_O(d, 3, dtype=torch.bool), _O(d, 3, dtype=torch.bool)),
    "gcd_float": lambda d: torch.gcd(_O(d, 3), _O(d, 3)),
    "floor_divide_bool": lambda d: torch.floor_divide(_O(d, 3, dtype=torch.bool), _O(d, 3, dtype=torch.bool)),
    "group_norm_int": lambda d: torch.native_group_norm(_O(d, 2, 4, 3, dtype=torch.int64), None, None, 2, 4, 3, 2,
                                                        1e-5),
}


@pytest.mark.parametrize("name", list(TRACE_REFUSALS))
def test_refused_inputs_raise_cpus_error(name):
    cpu = _raised(TRACE_REFUSALS[name], "cpu")
    assert cpu[0] is not None, "the case must be an error on CPU"
    assert _raised(TRACE_REFUSALS[name], "neuron") == cpu


def test_cpus_error_probe_has_no_side_effects():
    # The probe runs the call on CPU copies: a CPU tensor the call writes keeps its value
    # and CPU's random state is untouched, while the device error is still raised.
    n, c = torch.full((), 3., device="neuron"), torch.tensor(1.)
    state = torch.get_rng_state()
    for call in (lambda: torch.add(n, n, out=c), lambda: c.add_(n),
                 lambda: torch.normal(torch.zeros((), device="neuron"), 1., out=c)):
        with pytest.raises(RuntimeError, match="same device"):
            call()
        assert c.item() == 1.
    assert torch.equal(torch.get_rng_state(), state)


def test_cpus_error_probe_covers_generators_and_resized_outs():
    fn = torch.ones(3, device="neuron")
    generator = torch.Generator(device="neuron")
    with pytest.raises(NotImplementedError, match="normal_kernel_cpu"):
        torch.ones(3, device="neuron", dtype=torch.int64).normal_(generator=generator)
    with pytest.raises(NotImplementedError, match="gcd_cpu"):  # out= resized, then traced
        torch.gcd(fn, fn, out=torch.zeros(0, device="neuron"))


_L, _B, _C = torch.int64, torch.bool, torch.complex64
F = torch.nn.functional

# Dtypes CPU's kernel does not implement (its AT_DISPATCH list, or a check of its own),
# which a lowering, a decomposition or a host kernel would compute: CPU's error, type and
# message, through each path a call can take.
DTYPE_REFUSALS = {
    # lowered ops, asked on one-element stand-ins
    "lerp_int": lambda d: torch.lerp(_O(d, 3, dtype=_L), _O(d, 3, dtype=_L), 0.5),
    "gelu_int": lambda d: F.gelu(_O(d, 3, dtype=_L)),
    "relu_bool": lambda d: torch.relu(_O(d, 3, dtype=_B)),
    "softplus_complex": lambda d: F.softplus(_O(d, 3, dtype=_C)),
    "clamp_complex": lambda d: torch.clamp(_O(d, 3, dtype=_C), _O(d, 3, dtype=_C)),
    "sign_complex": lambda d: torch.sign(_O(d, 3, dtype=_C)),
    "huber_loss_int": lambda d: F.huber_loss(_O(d, 3, dtype=_L), _O(d, 3, dtype=_L)),
    "lerp_int_out": lambda d: torch.lerp(_O(d, 3, dtype=_L), _O(d, 3, dtype=_L), 0.5, out=_O(d, 3, dtype=_L)),
    # stand-ins of the real shapes where one element per dim does not fit (k, channels, kernel)
    "kthvalue_complex": lambda d: torch.kthvalue(_O(d, 3, dtype=_C), 2),
    "pdist_half": lambda d: F.pdist(_O(d, 4, 3, dtype=torch.half)),  # one row returns before dispatching
    "histc_complex": lambda d: torch.histc(_O(d, 3, dtype=_C)),  # integers are taken, as on CUDA
    "histc_bool_empty": lambda d: torch.histc(_O(d, 5, 0, dtype=_B), min=0, max=10),
    "avg_pool1d_int8": lambda d: F.avg_pool1d(_O(d, 1, 2, 4, dtype=torch.int8), 2),
    "group_norm_complex": lambda d: F.group_norm(_O(d, 2, 4, 3, dtype=_C), 2),
    # where the meta kernel refuses the dtype itself, a stand-in dtype bounds the output
    "replication_pad_bool_crop": lambda d: F.pad(_O(d, 2, 2, 4, 4, dtype=_B), (0, 0, 2, -4), mode="replicate"),
    # real-shape stand-ins of an output above 65,536 elements
    "conv_transpose3d_int": lambda d: F.conv_transpose3d(
        _O(d, 2, 2, 4, 4, 4, dtype=torch.int32), _O(d, 2, 2, 4, 5, 6, dtype=torch.int32),
        _O(d, 4, dtype=torch.int32), stride=(3, 2, 1), padding=(1, 2, 3), output_padding=(2, 3, 1), groups=2,
        dilation=4),
    # decomposed ops and host kernels
    "glu_bool": lambda d: F.glu(_O(d, 4, dtype=_B)),
    "logaddexp_uint8": lambda d: torch.logaddexp(_O(d, 3, dtype=torch.uint8), _O(d, 3, dtype=torch.uint8)),
    "replication_pad_bool": lambda d: F.pad(_O(d, 1, 2, 3, dtype=_B), (1, 1), mode="replicate"),
    "unique_complex": lambda d: torch.unique(_O(d, 3, dtype=_C)),
    # checks a kernel makes itself, in the lowering
    "maximum_complex": lambda d: torch.maximum(_O(d, 3, dtype=_C), _O(d, 3, dtype=_C)),
    "fmin_complex": lambda d: torch.fmin(_O(d, 3, dtype=_C), _O(d, 3, dtype=_C)),
    "sort_complex": lambda d: torch.sort(_O(d, 3, dtype=_C)),
    "normal_complex_std": lambda d: torch.normal(_O(d, 3, dtype=_C), _O(d, 3, dtype=_C)),
    "topk_complex": lambda d: torch.topk(_O(d, 3, dtype=_C), 1),
    "addcdiv_int": lambda d: torch.addcdiv(_O(d, 3, dtype=_L), _O(d, 3, dtype=_L), _O(d, 3, dtype=_L)),
    "arange_complex": lambda d: torch.arange(0, 3, 1, dtype=_C, device=d),
    "randperm_bool": lambda d: torch.randperm(3, dtype=_B, device=d),
    "sdpa_int": lambda d: F.scaled_dot_product_attention(*[_O(d, 1, 2, 3, 4, dtype=torch.int32)] * 3),
    "sdpa_complex": lambda d: F.scaled_dot_product_attention(*[_O(d, 1, 2, 3, 4, dtype=_C)] * 3),
    "flash_for_cpu_complex": lambda d: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        *[_O(d, 1, 2, 3, 4, dtype=_C)] * 3),
    # composite ops that take a CPU-only kernel on CPU and another kernel elsewhere
    "dropout_complex": lambda d: F.dropout(_O(d, 3, dtype=_C), 0.5),
    "dropout_complex_inference": lambda d: _in_inference_mode(lambda: F.dropout(_O(d, 3, dtype=_C), 0.5)),
    "max_pool1d_int": lambda d: F.max_pool1d(_O(d, 1, 4, dtype=_L), 2),
    "max_pool1d_bool": lambda d: F.max_pool1d(_O(d, 1, 4, dtype=_B), 2),
    "max_pool1d_complex": lambda d: F.max_pool1d(_O(d, 1, 4, dtype=_C), 2),
    "max_pool1d_complex_grad": lambda d: F.max_pool1d(_O(d, 1, 4, dtype=_C).requires_grad_(), 2),
    # CPU checks outside the kernels' AT_DISPATCH
    "native_dropout_int": lambda d: torch.native_dropout(_O(d, 3, dtype=_L), 0.5, True),
    "max_dim_complex_0d": lambda d: torch.max(_O(d, dtype=_C), 0),
    "min_dim_complex_0d": lambda d: torch.min(_O(d, dtype=_C), 0),
    "aminmax_dim_complex_0d": lambda d: torch.aminmax(_O(d, dtype=_C), dim=0),
    "embedding_max_norm_int": lambda d: F.embedding(torch.tensor([0, 1], device=d), _O(d, 3, 2, dtype=_L),
                                                    max_norm=1.0),
}


def _in_inference_mode(fn):
    with torch.inference_mode():
        return fn()


@pytest.mark.parametrize("name", list(DTYPE_REFUSALS))
def test_dtypes_cpu_does_not_implement_raise_cpus_error(name):
    cpu = _raised(DTYPE_REFUSALS[name], "cpu")
    assert cpu[0] is not None, "the case must be an error on CPU"
    assert _raised(DTYPE_REFUSALS[name], "neuron") == cpu


@pytest.mark.parametrize("name", ["lerp_int", "relu_bool", "softplus_complex", "glu_bool", "maximum_complex",
                                  "pdist_half", "dropout_complex", "max_pool1d_int"])
def test_dtypes_cpu_does_not_implement_raise_cpus_error_when_compiled(name):
    """Compiled graphs ask CPU's kernel of each node, and of each op before PyTorch's
    decomposition of it replaces it (glu); the graph raises CPU's error, type and
    message, when it runs (Dynamo would wrap an error raised while compiling)."""
    torch._dynamo.reset()
    compiled = torch.compile(DTYPE_REFUSALS[name], backend="neuron", fullgraph=True)
    assert _raised(compiled, "neuron") == _raised(DTYPE_REFUSALS[name], "cpu")


def test_composite_routes_keep_what_cpu_computes():
    # The checks in front of dropout and max_pool1d refuse only CPU's refusals: the
    # composite kernels they run still train, pool and differentiate as on CPU.
    x = torch.randn(2, 3, 8)
    for dtype in (torch.float32, torch.bfloat16):
        xd = x.to("neuron", dtype).requires_grad_()
        F.max_pool1d(xd, 2).sum().backward()
        xc = x.to(dtype).clone().requires_grad_()
        F.max_pool1d(xc, 2).sum().backward()
        torch.testing.assert_close(xd.grad.cpu(), xc.grad)
    xd = x.to("neuron").requires_grad_()
    out = F.dropout(xd, 0.5)
    out.sum().backward()
    kept = out.detach().cpu() != 0
    torch.testing.assert_close(out.detach().cpu()[kept], 2 * x[kept])
    torch.testing.assert_close(xd.grad.cpu(), 2.0 * kept)
    c = torch.randn(3, 4, dtype=torch.cfloat)
    assert torch.equal(F.dropout(c.to("neuron"), 0.5, training=False).cpu(), c)
    assert torch.equal(F.dropout(c.to("neuron"), 0.0).cpu(), F.dropout(c, 0.0))
    # ATen's composite, not PyTorch's Python decomposition: p == 1 zeroes integers and
    # an empty input comes back as itself
    ints = torch.arange(3)
    assert torch.equal(F.dropout(ints.to("neuron"), 1.0).cpu(), F.dropout(ints, 1.0))
    empty = torch.ones(0, device="neuron")
    assert F.dropout(empty, 0.5) is empty
    # a tensor subclass takes the route CPU gives subclasses (max_pool2d_with_indices)
    from torch.testing._internal.two_tensor import TwoTensor
    a = torch.arange(8).reshape(1, 8)
    got = F.max_pool1d(TwoTensor(a.to("neuron"), a.to("neuron")), 2)
    assert torch.equal(got.a.cpu(), F.max_pool1d(TwoTensor(a, a.clone()), 2).a)


def test_native_dropout_follows_cpu_for_complex_and_empty_inputs():
    # CPU's native_dropout trains complex inputs (PyTorch's decomposition refuses them)
    # and gives an empty input a mask of its own dtype.
    c = torch.randn(64, dtype=torch.cfloat)
    out, mask = torch.native_dropout(c.to("neuron"), 0.5, True)
    assert mask.dtype == torch.bool and 0 < int(mask.sum()) < 64
    torch.testing.assert_close(out.cpu(), torch.where(mask.cpu(), 2 * c, 0))
    for train in (True, False):
        got = torch.native_dropout(torch.ones(0, 2, dtype=torch.long, device="neuron"), 0.5, train)
        want = torch.native_dropout(torch.ones(0, 2, dtype=torch.long), 0.5, train)
        assert [(t.dtype, t.shape) for t in got] == [(t.dtype, t.shape) for t in want]


def test_dtype_probe_takes_what_cpu_takes():
    """The probe refuses no dtype CPU's kernel implements: stub kernels that refuse every
    input (the attention kernel PyTorch leaves to PrivateUse1 backends) and ops that
    fail on the stand-ins' values (integer division by zero) are told apart."""
    q = torch.randn(1, 2, 3, 4)
    for dtype in (torch.float32, torch.bfloat16):
        got = F.scaled_dot_product_attention(*[q.to("neuron", dtype)] * 3)
        torch.testing.assert_close(got.cpu(), F.scaled_dot_product_attention(*[q.to(dtype)] * 3))
    a = torch.tensor([7, -7, 9])
    assert torch.equal(torch.remainder(a.to("neuron"), 2).cpu(), torch.remainder(a, 2))
    assert torch.equal(torch.lcm(a.to("neuron"), a.to("neuron") + 1).cpu(), torch.lcm(a, a + 1))


def test_dtype_probe_keeps_the_record_of_warnings_shown():
    # A warning shown once at a place (the "default" action) is not shown there again
    # after a probe or a copy to the host: neither may reset Python's record of
    # warnings shown.
    from torchneuron.eager import refusal

    def warn():
        warnings.warn("torchneuron test: shown once", UserWarning)

    # (first use of lerp imports modules, sympy among them, that add filters of their own)
    torch.lerp(torch.ones(2, device="neuron"), torch.zeros(2, device="neuron"), 0.5).cpu()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        warn()
        refusal._refusals.clear()
        torch.lerp(torch.ones(3, 5, 7, device="neuron"), torch.zeros(3, 5, 7, device="neuron"), 0.25).cpu()
        warn()
    assert [str(w.message) for w in seen] == ["torchneuron test: shown once"]


def test_dtype_probe_decisions_do_not_grow_with_number_values():
    # Kernels dispatch on a number's kind, not its value: one decision per kind, also
    # for NaN (which is not equal to itself).
    from torchneuron.eager import refusal

    x = torch.ones(3, device="neuron")
    clamp, dropout = torch.ops.aten.clamp.default, torch.ops.aten.native_dropout.default
    before = len(refusal._refusals)
    for value in [k / 7 for k in range(20)] + [float("nan")]:
        assert refusal.refusal_of_dtypes(clamp, [x, value, None]) is None
        assert refusal.refusal_of_dtypes(dropout, [x, value / 4, True]) is None
    assert len(refusal._refusals) - before <= 2  # (none if an earlier test asked the same)


def test_dtype_probe_has_no_side_effects():
    # The probe runs random kernels on stand-ins: CPU's random state and the user's
    # warnings filters see nothing of it.
    state = torch.get_rng_state()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.bernoulli(torch.full((5,), 0.5, device="neuron", dtype=torch.float64))
        with pytest.raises(NotImplementedError):
            torch.ones(3, device="neuron", dtype=torch.int16).normal_()
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("name", list(ARG_ERRORS))
def test_argument_errors_match_cpu(name):
    cpu = _raised(ARG_ERRORS[name], "cpu")
    assert cpu[0] is not None, "the case must be an error on CPU"
    assert _raised(ARG_ERRORS[name], "neuron") == cpu


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_index_ops_take_cpus_index_dtypes(dtype):
    x, idx = torch.arange(6.).reshape(2, 3), torch.tensor([1, 0], dtype=dtype)
    for d in ("neuron",):
        xd, idd = x.to(d), idx.to(d)
        assert torch.equal(torch.index_select(xd, 1, idd).cpu(), torch.index_select(x, 1, idx))
        assert torch.equal(xd.index_add(0, idd, xd).cpu(), x.index_add(0, idx, x))
    assert torch.equal(x.to("neuron").narrow_copy(1, 1, 2).cpu(), x.narrow_copy(1, 1, 2))
    assert torch.equal(x.t().to("neuron").narrow_copy(-1, 0, 1).cpu(), x.t().narrow_copy(-1, 0, 1))


# Errors whose type is CPU's (the message may differ): histc's range of NaN or inf data
# is found on the device.
ARG_ERROR_TYPES = {
    "histc_nan_data_range": lambda d: torch.histc(_t([float("nan"), 1.], d), 4),
    "histc_inf_data_range": lambda d: torch.histc(_t([1., float("inf")], d), 4),
    "histc_negative_inf_data_range": lambda d: torch.histc(_t([1., -float("inf")], d, torch.float16), 4),
    "histc_inf_max": lambda d: torch.histc(_t([1.], d), 4, 0, float("inf")),
}


@pytest.mark.parametrize("name", list(ARG_ERROR_TYPES))
def test_argument_error_types_match_cpu(name):
    cpu = _raised(ARG_ERROR_TYPES[name], "cpu")
    assert cpu[0] is not None, "the case must be an error on CPU"
    assert _raised(ARG_ERROR_TYPES[name], "neuron")[0] is cpu[0]


def test_histc_nan_data_with_a_range_counts_like_cpu():
    x = torch.tensor([float("nan"), 1., float("inf"), 0.5])
    assert torch.equal(torch.histc(x.to("neuron"), 4, 0, 2).cpu(), torch.histc(x, 4, 0, 2))


# Ops whose CPU kernel has no float16/bfloat16 case: NotImplementedError, as on CPU,
# where XLA would compute one.
NO_HALF_KERNEL = {
    "zeta": lambda x: torch.special.zeta(x + 1, x),
    "zeta_self_scalar": lambda x: torch.special.zeta(2.0, x),
    "ndtri": torch.special.ndtri,
    "airy_ai": torch.special.airy_ai,
    "bessel_j0": torch.special.bessel_j0,
    "log_ndtr": torch.special.log_ndtr,
    "chebyshev_polynomial_t": lambda x: torch.special.chebyshev_polynomial_t(x, 3),
    "cdist": lambda x: torch.cdist(x.reshape(1, 3), x.reshape(3, 1).expand(3, 3)),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", list(NO_HALF_KERNEL))
def test_ops_without_a_cpu_half_kernel_raise_like_cpu(name, dtype):
    fn = NO_HALF_KERNEL[name]
    cpu = _raised(lambda d: fn(torch.full((3,), 0.25, dtype=dtype, device=d)), "cpu")
    assert cpu[0] is NotImplementedError
    assert _raised(lambda d: fn(torch.full((3,), 0.25, dtype=dtype, device=d)), "neuron") == cpu
    x = torch.full((3,), 0.25)
    assert torch.allclose(fn(x.to("neuron")).cpu(), fn(x), equal_nan=True)


def test_tensors_of_more_than_64_dims_cross_to_and_from_the_host():
    # NumPy holds at most 64 dims and torch more: the transfers failed with ValueError,
    # and so did asking CPU for its error ("only tensors with up to 64 dims are
    # supported", aminmax's error input).
    x = torch.arange(6.).reshape([1] * 30 + [2] + [1] * 34 + [3])
    dev = x.to("neuron")
    assert torch.equal(dev.cpu(), x)
    assert torch.equal(dev.transpose(30, 65).cpu(), x.transpose(30, 65))
    for empty in (torch.zeros([0] * 70), torch.zeros([0] + [2] * 62)):  # too big for NumPy's shapes
        assert torch.equal(empty.to("neuron").cpu(), empty)
    for fn in (lambda t: torch.aminmax(t, dim=-1), lambda t: torch.amax(t, dim=64)):
        assert _raised(lambda d: fn(x.to(d)), "neuron") == _raised(lambda d: fn(x.to(d)), "cpu")


def test_tensors_of_dtypes_neuron_cannot_compute_in_move_but_are_not_copied_from_values():
    # complex32, bits8: their bytes move (torch.load onto neuron, deepcopy: empty + set_
    # of the storage), while copying a CPU tensor's values to the device raises a clear
    # TypeError (it raised DLPack's RuntimeError).
    import copy
    import io

    for dtype, base in ((torch.complex32, torch.arange(8.0).half()), (torch.bits8, torch.arange(8, dtype=torch.uint8))):
        cpu = base.view(dtype)
        buf = io.BytesIO()
        torch.save(cpu, buf)
        buf.seek(0)
        loaded = torch.load(buf, map_location="neuron")
        assert loaded.device.type == "neuron" and loaded.dtype == dtype
        assert torch.equal(loaded.view(base.dtype).cpu(), base)
        assert torch.equal(copy.deepcopy(loaded).view(base.dtype).cpu(), base)
        with pytest.raises(TypeError, match="neuron does not support dtype"):
            cpu.to("neuron")


SUB_WITH_BOOLS = {
    "tensor_minus_true": lambda d: torch.randn(3, device=d) - True,
    "true_minus_tensor": lambda d: True - torch.randn(3, device=d),
    "rsub_true": lambda d: torch.rsub(torch.randn(3, device=d), True),
    "sub_true_out": lambda d: torch.sub(torch.randn(3, device=d), True, out=torch.empty(3, device=d)),
    "sub_true_inplace": lambda d: torch.randn(3, device=d).sub_(True),
    "half_minus_false": lambda d: torch.randn(3, device=d).half() - False,
    "bool_minus_one": lambda d: torch.ones(3, dtype=torch.bool, device=d) - 1,
    "bools": lambda d: torch.ones(3, dtype=torch.bool, device=d) - torch.ones(3, dtype=torch.bool, device=d),
}


@pytest.mark.parametrize("case", SUB_WITH_BOOLS)
def test_subtraction_with_a_bool_raises_as_on_cpu(case):
    """CPU's sub_check refuses a bool operand, a Python bool included (NotImplementedError,
    its message); neuron computed `x - True`."""
    with pytest.raises(NotImplementedError) as cpu:
        SUB_WITH_BOOLS[case]("cpu")
    with pytest.raises(NotImplementedError) as neuron:
        SUB_WITH_BOOLS[case]("neuron")
    assert str(neuron.value) == str(cpu.value)


THRESHOLD_OPS = {
    "threshold": lambda x, v: torch.threshold(x, v, 0),
    "threshold_backward": lambda x, v: torch.ops.aten.threshold_backward(x, x, v),
}
# (dtype, threshold): float16/bfloat16 read the threshold as float, other types as themselves.
THRESHOLDS = [(torch.float16, 70000.0), (torch.float16, 1e39), (torch.bfloat16, 1e39), (torch.float32, 1e39),
              (torch.float32, -1e39), (torch.float32, 3.0), (torch.float64, 1e39), (torch.int8, 300),
              (torch.int8, -129), (torch.uint8, -1), (torch.uint8, 256), (torch.int32, 2 ** 40),
              (torch.int16, 2.5), (torch.int16, float("nan"))]


@pytest.mark.parametrize("op", THRESHOLD_OPS, ids=str)
def test_threshold_reads_its_threshold_as_cpus_kernel(op):
    """CPU's threshold kernel, which threshold_backward shares, reads the threshold with
    Scalar::to<float> for float16/bfloat16 tensors (70000 fits, 1e39 does not) and to the
    tensor's type otherwise, raising "value cannot be converted to type ... without
    overflow" at the call. neuron refused a float16 threshold of 70000 (at the next
    synchronization), let 1e39 through on float32, and never checked threshold_backward's.
    Every call is checked, the executable cached or not (a fitting value runs first)."""
    fn = THRESHOLD_OPS[op]
    for dtype, value in THRESHOLDS:
        outcomes = []
        for device in ("cpu", "neuron"):
            x = torch.arange(1, 6).to(dtype).to(device)
            fn(x, 2)
            try:
                outcomes.append((None, fn(x, value).cpu()))  # raises at the call, no synchronization
            except Exception as exc:  # noqa: BLE001 - comparing whatever is raised
                outcomes.append((type(exc), str(exc)))
        want, got = outcomes
        assert got[0] is want[0], (dtype, value, got, want)
        if want[0] is None:
            assert torch.equal(got[1], want[1]), (dtype, value)
        else:
            assert got[1] == want[1], (dtype, value)


SCALAR_TENSOR_VALUES = [300, -1, -300, 70000.0, 1e39, 1 + 0j, 1 + 1j, 1e5 + 0j, 2.5, -3.7, float("inf"), float("nan"),
                        2 ** 40, True]
SCALAR_TENSOR_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                        torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.bool]


@pytest.mark.parametrize("dtype", SCALAR_TENSOR_DTYPES, ids=str)
def test_scalar_tensor_checks_its_value_as_cpu(dtype):
    """CPU's scalar_tensor refuses a value its dtype cannot hold (uint8 300, an imaginary
    part into a real type), but fills float16/bfloat16 unchecked (70000 gives inf);
    neuron filled every value unchecked, so `torch.where(x_uint8 > 1, x, 300)` wrapped."""
    for value in SCALAR_TENSOR_VALUES:
        outcomes = []
        for device in ("cpu", "neuron"):
            try:
                outcomes.append(torch.scalar_tensor(value, dtype=dtype, device=device).cpu())
            except RuntimeError as exc:
                outcomes.append(str(exc))
        want, got = outcomes
        if isinstance(want, str):
            assert got == want, (value, got)
        else:
            torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0, msg=str(value))


def test_where_with_a_number_the_tensor_cannot_hold_raises():
    for device in ("cpu", "neuron"):
        x = torch.tensor([1, 2, 3], dtype=torch.uint8, device=device)
        # at the call, on neuron too (a Python-number Scalar is checked on the host)
        with pytest.raises(RuntimeError, match="value cannot be converted to type uint8_t without overflow"):
            torch.where(x > 1, x, 300).cpu()
        assert torch.where(x > 1, x, -1).tolist() == [255, 2, 3]  # c10 lets -1 wrap into unsigned types


# Ops whose CPU kernels convert a Python-number Scalar with c10::checked_convert, each
# given a fresh tensor of n elements of `dtype` and the Scalar `v`.
def _ar(n, dtype, device):
    return (torch.arange(n, device=device) % 5).to(dtype)


CHECKED_SCALAR_OPS = {
    "index_fill": lambda n, dt, v, d: _ar(n, dt, d).index_fill(0, torch.tensor([0], device=d), v),
    "clamp_min": lambda n, dt, v, d: torch.clamp_min(_ar(n, dt, d), v),
    "clamp_max": lambda n, dt, v, d: torch.clamp_max(_ar(n, dt, d), v),
    "clamp_min_kw": lambda n, dt, v, d: torch.clamp(_ar(n, dt, d), min=v),
    "clamp_max_kw": lambda n, dt, v, d: torch.clamp(_ar(n, dt, d), max=v),
    "threshold": lambda n, dt, v, d: torch.threshold(_ar(n, dt, d), 1, v),
    "fill_": lambda n, dt, v, d: _ar(n, dt, d).fill_(v),
    "full": lambda n, dt, v, d: torch.full((n,), v, dtype=dt, device=d),
    "scalar_tensor": lambda n, dt, v, d: torch.scalar_tensor(v, dtype=dt, device=d) + _ar(n, dt, d),
    "where_scalar_other": lambda n, dt, v, d: torch.where(_ar(n, torch.int64, d) > 2, _ar(n, dt, d), v),
    "masked_fill": lambda n, dt, v, d: _ar(n, dt, d).masked_fill(_ar(n, torch.int64, d) > 2, v),
    "add_alpha": lambda n, dt, v, d: torch.add(_ar(n, dt, d), _ar(n, dt, d), alpha=v),
    "sub_alpha": lambda n, dt, v, d: torch.sub(_ar(n, dt, d), _ar(n, dt, d), alpha=v),
    "index_add_alpha": lambda n, dt, v, d: _ar(n, dt, d).index_add(0, torch.tensor([0, 2], device=d),
                                                                    _ar(2, dt, d), alpha=v),
    # float-only kernels (_FLOAT_ONLY); the activations read their Scalars as the compute
    # type (float32 for the half types: float16 7e4 converts), the shrinks as the dtype
    "leaky_relu": lambda n, dt, v, d: torch.nn.functional.leaky_relu(_ar(n, dt, d) - 2, v),
    "elu_alpha": lambda n, dt, v, d: torch.ops.aten.elu(_ar(n, dt, d) - 2, v, 1, 1),
    "elu_scale": lambda n, dt, v, d: torch.ops.aten.elu(_ar(n, dt, d) - 2, 1, v, 1),
    "elu_input_scale": lambda n, dt, v, d: torch.ops.aten.elu(_ar(n, dt, d) - 2, 1, 1, v),
    "celu": lambda n, dt, v, d: torch.nn.functional.celu(_ar(n, dt, d) - 2, v),
    "softplus_beta": lambda n, dt, v, d: torch.nn.functional.softplus(_ar(n, dt, d), v),
    "softplus_threshold": lambda n, dt, v, d: torch.nn.functional.softplus(_ar(n, dt, d), 1, v),
    "rrelu_eval": lambda n, dt, v, d: torch.nn.functional.rrelu(_ar(n, dt, d) - 2, 0.1, v),
    "hardshrink": lambda n, dt, v, d: torch.nn.functional.hardshrink(_ar(n, dt, d), v),
    "leaky_relu_backward": lambda n, dt, v, d: torch.ops.aten.leaky_relu_backward(
        _ar(n, dt, d), _ar(n, dt, d) - 2, v, False),
    "hardtanh_backward": lambda n, dt, v, d: torch.ops.aten.hardtanh_backward(_ar(n, dt, d), _ar(n, dt, d), -1, v),
    "hardshrink_backward": lambda n, dt, v, d: torch.ops.aten.hardshrink_backward(_ar(n, dt, d), _ar(n, dt, d), v),
}
_FLOAT_ONLY = {"leaky_relu", "elu_alpha", "elu_scale", "elu_input_scale", "celu", "softplus_beta",
               "softplus_threshold", "rrelu_eval", "hardshrink", "leaky_relu_backward", "hardtanh_backward",
               "hardshrink_backward"}
# Values (not checks) that still differ from CPU's at these extreme Scalars.
_VALUES_DIFFER = {("celu", torch.bfloat16, 3.3961e38), ("softplus_beta", torch.bfloat16, 3.3961e38),
                  ("leaky_relu_backward", torch.float16, 7e4), ("leaky_relu_backward", torch.float16, 65520.0),
                  ("hardtanh_backward", torch.float32, "nan"), ("hardshrink_backward", torch.float32, "nan")}
CHECKED_SCALAR_VALUES = [
    (torch.float32, 1e39), (torch.float32, -1e39), (torch.float32, 3.5e38), (torch.float32, float("inf")),
    (torch.float32, float("nan")), (torch.bfloat16, 1e39), (torch.bfloat16, 3.3961e38),
    (torch.bfloat16, -float("inf")), (torch.float16, 7e4), (torch.float16, 65520.0), (torch.float16, 65504.0),
    (torch.int8, 300), (torch.uint8, 256), (torch.uint8, -1), (torch.int32, 2 ** 40),
]
_CHECKED_SIZES = iter(range(1000, 100000, 7))


def _at_the_call(fn):
    """(None, result on CPU) or (exception type, message) of what `fn` raises at the call."""
    try:
        out = fn()
    except RuntimeError as exc:
        return type(exc), str(exc)
    return None, out.cpu()


# Each case compiles its own executables (about 0.7 s): CI runs a fixed fifth of the
# grid, every op with three of the values and every value with five or six ops.
_CHECKED_SCALAR_CASES = [
    pytest.param(op, dtype, value, id=f"{op}-{dtype}-{value}",
                 marks=() if i % 5 == j % 5 else pytest.mark.slow)
    for i, op in enumerate(CHECKED_SCALAR_OPS) for j, (dtype, value) in enumerate(CHECKED_SCALAR_VALUES)]


@pytest.mark.parametrize("op,dtype,value", _CHECKED_SCALAR_CASES)
def test_scalar_past_the_dtypes_range_raises_at_the_call_like_cpu(op, dtype, value):
    """A Python-number Scalar CPU converts with checked_convert (float32 1e39, bfloat16
    3.3961e38, float16 7e4, int8 300) raises "value cannot be converted to type float
    without overflow" at the call, as on CPU: on a shape's first call, on the next
    call of the cached executable (the C++ eager path), and once the executable was
    compiled for a value that fits; infinities and NaN convert. Before, float32 and
    bfloat16 Scalars went unchecked and the others raised only at the next sync (and
    leaky_relu, elu, softplus, hardshrink, index_add's alpha, ... went unchecked)."""
    if op in _FLOAT_ONLY and not dtype.is_floating_point:
        pytest.skip("CPU's kernel takes floating types only")
    if (op, dtype, "nan" if value != value else value) in _VALUES_DIFFER:
        pytest.skip("the values differ from CPU's (no overflow involved)")
    fn = CHECKED_SCALAR_OPS[op]
    n = next(_CHECKED_SIZES)
    want = _at_the_call(lambda: fn(n, dtype, value, "cpu"))
    fits = 0.5 if isinstance(value, float) else 2
    calls = [(n, value), (n, value), (n + 3, fits), (n + 3, value)]  # first, cached, warm with a fit, then
    for i, (size, v) in enumerate(calls):
        with no_fallback():
            got = _at_the_call(lambda: fn(size, dtype, v, "neuron"))
        if v is not value:
            assert got[0] is None, got
            continue
        if want[0] is not None:
            assert got == want, (i, got)
        else:
            assert got[0] is None, (i, got)
            want_n = want[1] if size == n else fn(size, dtype, v, "cpu")
            torch.testing.assert_close(got[1], want_n, equal_nan=True, rtol=0, atol=0)
        torch.neuron.synchronize()


@pytest.mark.parametrize("dtype,value", [(torch.float32, 1e39), (torch.bfloat16, -1e39), (torch.float16, 7e4),
                                         (torch.int8, 300)], ids=str)
@pytest.mark.parametrize("op", ["clamp_min", "fill_", "masked_fill", "add_alpha", "where_scalar_other"])
def test_compiled_scalar_past_the_dtypes_range_raises_like_cpu(op, dtype, value):
    """The same in compiled graphs: a constant Scalar, and one passed as an argument
    (checked on the device, by the next synchronization). CPU's where fills a bfloat16
    tensor's Scalar unchecked."""
    fn = CHECKED_SCALAR_OPS[op]
    want = _at_the_call(lambda: fn(5, dtype, value, "cpu"))
    torch._dynamo.reset()
    constant = torch.compile(lambda d: fn(5, dtype, value, d), backend="neuron")
    argument = torch.compile(lambda d, v: fn(5, dtype, v, d), backend="neuron")
    fits = 0.5 if isinstance(value, float) else 2
    argument("neuron", fits).cpu()
    for run in (lambda: constant("neuron"), lambda: argument("neuron", value)):
        try:
            got = None, run().cpu()
        except RuntimeError as exc:  # Dynamo's TorchRuntimeError where fake tensors raise
            got = RuntimeError, str(exc)
        if want[0] is None:
            assert got[0] is None, got
            torch.testing.assert_close(got[1], want[1], equal_nan=True, rtol=0, atol=0)
        else:
            assert got[0] is RuntimeError and want[1] in got[1], got


@pytest.mark.parametrize("dtype,alpha", [(torch.int32, 2 ** 31), (torch.int32, -2 ** 31), (torch.int8, 128),
                                         (torch.int8, -128), (torch.uint8, 255), (torch.uint8, -256),
                                         (torch.int16, -2 ** 15)], ids=str)
def test_sub_checks_the_negated_alpha_like_cpu(dtype, alpha):
    """CPU's sub adds with -alpha and converts -alpha: int32 sub(a, b, alpha=2**31)
    computes, alpha=-2**31 raises "value cannot be converted to type int without
    overflow" (for rsub, sub_, sub(out=) and sub.Scalar too). Neuron checked alpha
    itself, refusing 2**31 and passing -2**31."""
    def calls(d):
        a = (torch.arange(6, device=d) % 3).to(dtype)
        yield lambda: torch.sub(a, a.flip(0), alpha=alpha)
        yield lambda: torch.rsub(a, a.flip(0), alpha=alpha)
        yield lambda: torch.rsub(a, 2, alpha=alpha)
        yield lambda: a.clone().sub_(a.flip(0), alpha=alpha)
        yield lambda: torch.sub(a, a.flip(0), alpha=alpha, out=torch.empty(6, dtype=dtype, device=d))
        yield lambda: torch.sub(a, 1, alpha=alpha)
    for _ in range(2):  # first call, then the cached executable (C++ eager path)
        for want_fn, got_fn in zip(calls("cpu"), calls("neuron")):
            want = _at_the_call(want_fn)
            with no_fallback():
                got = _at_the_call(got_fn)
            if want[0] is not None:
                assert got == want
            else:
                assert got[0] is None, got
                torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
