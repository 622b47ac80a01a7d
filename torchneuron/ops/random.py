"""Random-number lowerings: the distributions behind `uniform_`, `normal_`,
`bernoulli_`, `random_`, `exponential_` and friends, dropout, randperm, multinomial.

Streams come from `context().rng_key()`: a JAX key derived from the device's
`NeuronGeneratorImpl` (seed, offset), whose offset advances by one per random op, so
`torch.manual_seed`, `get_rng_state`/`set_rng_state` and explicit generators replay
exactly. The numbers follow PyTorch's distributions, not CPU's Mersenne-Twister
stream. `torch.rand/randn/randint(..., device="neuron")` and the `*_like` variants are
PyTorch's composite kernels (empty + the in-place op) over these lowerings.

Distribution parameters that CPU validates on the host (bounds, p, lambda) are static
so the same errors are raised at the call; probability tensors are checked on the
device (raised at the next sync, like CUDA).
"""
import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._common import check_scalar, not_implemented_for, scalar_type_name
from .registry import context, lowering, meta_kernel

aten = torch.ops.aten

_HALF = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))

# c10's names of scalar types in CPU's bound-check messages.
_C10_NAMES = {"bool": "bool", "uint8": "unsigned char", "int8": "signed char", "int16": "short", "int32": "int",
              "int64": "long", "float16": "c10::Half", "bfloat16": "c10::BFloat16", "float32": "float",
              "float64": "double"}


def _fmt(v) -> str:
    """A number as c10 prints it in messages (2.0 -> "2")."""
    return f"{v:g}" if isinstance(v, float) else str(v)


def _key():
    return context().rng_key()


def _float_sample_dtype(dtype):
    """The dtype a float sample is drawn in: float32 for half types (rounded once)."""
    dtype = jnp.dtype(dtype)
    return jnp.dtype(jnp.float32) if dtype in _HALF else dtype


def _require_floating(dtype, kernel: str):
    if not jnp.issubdtype(dtype, jnp.floating):
        raise not_implemented_for(kernel, dtype)


def _uniform(shape, dtype, low=0.0, high=1.0):
    """U[low, high) in `dtype`; a half-precision draw that rounds up to `high` is moved
    to the largest value below it, keeping the interval half-open."""
    u = jax.random.uniform(_key(), shape, _float_sample_dtype(dtype), low, high).astype(dtype)
    if jnp.dtype(dtype) not in _HALF or low == high:
        return u
    top = jnp.asarray(high, dtype)
    return jnp.where(u >= top, jnp.nextafter(top, jnp.asarray(low, dtype)), u)


def _standard_normal(shape, dtype):
    return jax.random.normal(_key(), shape, _float_sample_dtype(dtype))


# ------------------------------------------------------------------ uniform / normal
@lowering(aten.uniform.default, random=True, static=("from", "to"))
def uniform(self, from_=0.0, to=1.0, generator=None):
    """aten::uniform (uniform_): U[from, to) in self's shape and floating dtype; a
    complex tensor gets independent real and imaginary parts in [from, to), as CPU
    fills its real view."""
    if jnp.iscomplexobj(self):
        part = jnp.finfo(self.dtype).dtype
        pair = uniform(jnp.zeros(self.shape + (2,), part), from_, to)
        return lax.complex(pair[..., 0], pair[..., 1])
    _require_floating(self.dtype, "check_uniform_bounds")
    if from_ > to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={_fmt(from_)} > "
                           f"to={_fmt(to)}")
    return _uniform(self.shape, self.dtype, from_, to)


def _normal_value(shape, dtype, mean, std):
    return (mean + std * _standard_normal(shape, dtype)).astype(dtype)


@lowering(aten.normal_.default, random=True, mutates=True, static=("mean", "std"))
def normal_(self, mean=0.0, std=1.0, generator=None):
    """aten::normal_: fills self with N(mean, std^2) (std >= 0 checked by the meta kernel)."""
    return (), {"self": _normal_value(self.shape, self.dtype, mean, std)}


@lowering(aten.normal_functional.default, random=True, static=("mean", "std"))
def normal_functional(self, mean=0.0, std=1.0, generator=None):
    """aten::normal_functional: N(mean, std^2) in self's shape and dtype."""
    return _normal_value(self.shape, self.dtype, mean, std)


def _check_std_tensor(std):
    if jnp.issubdtype(std.dtype, jnp.complexfloating):
        raise RuntimeError("normal expects standard deviation to be non-complex")  # CPU's words
    context().check(jnp.all(std >= 0), RuntimeError, "normal expects all elements of std >= 0.0")


@lowering(aten.normal.Tensor_float, random=True, static=("std",))
def normal_tensor_float(mean, std=1.0, generator=None):
    """aten::normal.Tensor_float: mean (tensor) + std * N(0, 1), mean's shape."""
    out = context().out()
    return mean + std * _standard_normal(out.shape, out.dtype)


@lowering(aten.normal.float_Tensor, random=True, static=("mean",))
def normal_float_tensor(mean, std, generator=None):
    """aten::normal.float_Tensor: mean + std (tensor, >= 0) * N(0, 1)."""
    _check_std_tensor(std)
    out = context().out()
    return mean + std * _standard_normal(out.shape, out.dtype)


@lowering(aten.normal.Tensor_Tensor, random=True)
def normal_tensor_tensor(mean, std, generator=None):
    """aten::normal.Tensor_Tensor: elementwise N(mean, std^2) over the broadcast shape."""
    _check_std_tensor(std)
    out = context().out()
    return mean + std * _standard_normal(out.shape, out.dtype)


@lowering(aten.normal.float_float, random=True, static=("mean", "std"))
def normal_float_float(mean, std, size, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    """aten::normal.float_float: a new tensor of `size` drawn from N(mean, std^2)."""
    out = context().out()
    return _normal_value(out.shape, out.dtype, mean, std)


@lowering(aten.log_normal.default, random=True, static=("mean", "std"))
def log_normal(self, mean=1.0, std=2.0, generator=None):
    """aten::log_normal (log_normal_): exp(N(mean, std^2))."""
    if std <= 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={_fmt(std)}")
    return jnp.exp(mean + std * _standard_normal(self.shape, self.dtype))


# ------------------------------------------------------------------ bernoulli
def _check_p(p, name="bernoulli_"):
    if not 0 <= p <= 1:
        raise RuntimeError(f"{name} expects p to be in [0, 1], but got p={_fmt(p)}")


def _check_p_tensor(p):
    context().check(jnp.all((p >= 0) & (p <= 1)), RuntimeError,
                    "Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error message be "
                    "improved?  If so, please report an enhancement request to PyTorch.)")


def _bernoulli(shape, p, dtype):
    u = jax.random.uniform(_key(), shape, jnp.float64 if jnp.dtype(dtype) == jnp.float64 else jnp.float32)
    return (u < p).astype(dtype)


@lowering(aten.bernoulli.default, random=True)
def bernoulli(self, generator=None):
    """aten::bernoulli: 1 with probability self (a float tensor in [0, 1]), else 0."""
    _check_p_tensor(self)
    return _bernoulli(self.shape, self, self.dtype)


@lowering(aten.bernoulli.p, random=True, static=("p",))
def bernoulli_p(self, p, generator=None):
    """aten::bernoulli.p (bernoulli_.float's functional form): Bernoulli(p) in self's
    shape and dtype."""
    _check_p(p)
    return _bernoulli(self.shape, p, self.dtype)


@lowering(aten.bernoulli_.float, random=True, mutates=True, static=("p",))
def bernoulli_float_(self, p=0.5, generator=None):
    """aten::bernoulli_.float: fills self with Bernoulli(p) draws."""
    return (), {"self": bernoulli_p(self, p)}


@lowering(aten.bernoulli.Tensor, random=True)
def bernoulli_tensor(self, p, generator=None):
    """aten::bernoulli.Tensor (bernoulli_.Tensor): Bernoulli(p) with p broadcast to
    self's shape."""
    _check_p_tensor(p)
    return _bernoulli(self.shape, jnp.broadcast_to(p, self.shape), self.dtype)


# ------------------------------------------------------------------ random_
def _dtype_max(dtype) -> int:
    """The largest value random_ draws by default: 2^mantissa digits for floats."""
    dtype = jnp.dtype(dtype)
    if dtype == jnp.bool_:
        return 1
    if jnp.issubdtype(dtype, jnp.floating):
        return 2 ** (jnp.finfo(dtype).nmant + 1)
    return int(jnp.iinfo(dtype).max)


def _check_bounds(value: int, what: str, dtype) -> None:
    dtype = jnp.dtype(dtype)
    if dtype == jnp.bool_:
        lo, hi = 0, 1
    elif jnp.issubdtype(dtype, jnp.floating):
        info = jnp.finfo(dtype)
        lo, hi = float(info.min), float(info.max)
    else:
        info = jnp.iinfo(dtype)
        lo, hi = int(info.min), int(info.max)
    if not lo <= value <= hi:
        raise RuntimeError(f"{what} is out of bounds for {_C10_NAMES[dtype.name]}")


def _random_range(shape, dtype, low: int, span: int):
    """Integers low + U{0, ..., span - 1} (span up to 2^64) as `dtype`, by 64-bit
    modular arithmetic so the full int64 range needs no wider type."""
    bits = jax.random.bits(_key(), shape, jnp.uint64)
    offset = bits if span >= 2 ** 64 else bits % np.uint64(span)
    value = lax.bitcast_convert_type(offset + np.uint64(low % 2 ** 64), jnp.int64)
    return value.astype(dtype)


@lowering(aten.random.default, random=True)
def random(self, generator=None):
    """aten::random (random_()): integers uniform on [0, 2^digits] for floats, on
    [0, max] for integer dtypes, {0, 1} for bool."""
    return _random_range(self.shape, self.dtype, 0, _dtype_max(self.dtype) + 1)


@lowering(getattr(aten.random, "from"), random=True)
def random_from(self, from_, to=None, generator=None):
    """aten::random.from (random_(from, to)): integers uniform on [from, to), or on
    [from, max] when `to` is None; CPU's bound errors."""
    if to is None:
        _check_bounds(from_, "from", self.dtype)
        return _random_range(self.shape, self.dtype, from_, _dtype_max(self.dtype) - from_ + 1)
    if from_ >= to:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={from_} >= to={to}")
    _check_bounds(from_, "from", self.dtype)
    _check_bounds(to - 1, "to - 1", self.dtype)
    return _random_range(self.shape, self.dtype, from_, to - from_)


@lowering(aten.random.to, random=True)
def random_to(self, to, generator=None):
    """aten::random.to (random_(to)): integers uniform on [0, to)."""
    return random_from(self, 0, to)


# ------------------------------------------------------------------ other distributions
@lowering(aten.exponential.default, random=True, static=("lambd",))
def exponential(self, lambd=1.0, generator=None):
    """aten::exponential (exponential_): Exp(lambd) samples (lambd > 0 checked by meta)."""
    d = _float_sample_dtype(self.dtype)
    return (jax.random.exponential(_key(), self.shape, d) / lambd).astype(self.dtype)


@lowering(aten.geometric.default, random=True, static=("p",))
def geometric(self, p, generator=None):
    """aten::geometric (geometric_): trials to the first success, ceil(log U / log(1 - p))."""
    u = jax.random.uniform(_key(), self.shape, jnp.float64, minval=np.finfo(np.float64).tiny)
    return jnp.ceil(jnp.log(u) / np.log1p(-p)).astype(self.dtype)


@lowering(aten.cauchy.default, random=True, static=("median", "sigma"))
def cauchy(self, median=0.0, sigma=1.0, generator=None):
    """aten::cauchy (cauchy_): median + sigma * tan(pi (U - 1/2))."""
    if sigma <= 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={_fmt(sigma)}")
    d = _float_sample_dtype(self.dtype)
    return (median + sigma * jax.random.cauchy(_key(), self.shape, d)).astype(self.dtype)


# ------------------------------------------------------------------ dropout
@meta_kernel(aten.native_dropout.default)
def _native_dropout_meta(input, p, train):
    """CPU's native_dropout (PyTorch's decomposition, its Meta kernel otherwise, refuses
    complex input): an empty input returns a mask of its own dtype; training multiplies
    by a float scale, which integer and bool outputs cannot hold."""
    if input.numel() == 0:
        return torch.empty_like(input), torch.empty_like(input)
    if (train is None or train) and not (input.dtype.is_floating_point or input.dtype.is_complex):
        raise RuntimeError(f"result type Float can't be cast to the desired output type "
                           f"{scalar_type_name(input.dtype)}")
    return torch.empty_like(input), torch.empty_like(input, dtype=torch.bool)


@lowering(aten.native_dropout.default, random=True, static=("p",))
def native_dropout(input, p, train):
    """aten::native_dropout: (input * mask * 1/(1-p), bool mask) with mask ~
    Bernoulli(1 - p); eval (train=False) returns (input, all-true mask). As on CPU the
    output is input*mask*scale, so p == 1 gives 0 (NaN stays NaN); float and complex
    inputs train, and an empty input's mask has its dtype."""
    if input.size == 0:
        return input, jnp.zeros(input.shape, input.dtype)
    if train is not None and not train:
        return input, jnp.ones(input.shape, jnp.bool_)
    keep_p = 1.0 - p
    _check_p(keep_p)
    scale = 0.0 if keep_p == 0 else 1.0 / keep_p
    mask = jax.random.bernoulli(_key(), keep_p, input.shape)
    compute = _float_sample_dtype(input.dtype) if jnp.issubdtype(input.dtype, jnp.floating) else input.dtype
    return (_times_mask(input, mask).astype(compute) * scale).astype(input.dtype), mask


def _times_mask(x, mask):
    """x * mask with IEEE semantics (NaN * 0 = NaN): XLA would rewrite a product with a
    converted predicate into a select, dropping NaNs that CPU keeps."""
    return jnp.where(mask, x, x * 0)


@lowering(aten.native_dropout_backward.default)
def native_dropout_backward(grad_output, mask, scale):
    """aten::native_dropout_backward: grad_output * mask * scale."""
    g = grad_output.astype(_float_sample_dtype(grad_output.dtype))
    return _times_mask(g, mask) * scale


# ------------------------------------------------------------------ permutations, sampling
@lowering(aten.randperm.default, aten.randperm.generator, random=True)
def randperm(n, *args):
    """aten::randperm: a uniformly random permutation of 0..n-1 in the requested dtype."""
    out = context().out()
    if out.dtype == jnp.bool_ or jnp.issubdtype(out.dtype, jnp.complexfloating):
        raise not_implemented_for("randperm", out.dtype)
    return jax.random.permutation(_key(), n).astype(out.dtype)


@lowering(aten.multinomial.default, random=True)
def multinomial(self, num_samples, replacement=False, generator=None):
    """aten::multinomial: int64 (num_samples,) or (B, num_samples) category indices
    drawn from the rows of self (C,) or (B, C) of non-negative weights. Without
    replacement: Gumbel top-k. Invalid rows (negative, inf or NaN weights, zero sum)
    raise CPU's RuntimeError at the next sync."""
    if not jnp.issubdtype(self.dtype, jnp.floating):
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{scalar_type_name(self.dtype)}")
    if not replacement and num_samples > self.shape[-1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    ctx = context()
    p = self.astype(_float_sample_dtype(self.dtype))
    ctx.check(jnp.all(jnp.isfinite(p) & (p >= 0)), RuntimeError,
              "probability tensor contains either `inf`, `nan` or element < 0")
    ctx.check(jnp.all(jnp.sum(p, axis=-1) > 0), RuntimeError,
              "invalid multinomial distribution (sum of probabilities <= 0)")
    rows = p.reshape(-1, p.shape[-1])
    logits = jnp.log(rows)
    if replacement:
        draws = jax.random.categorical(_key(), logits, axis=-1, shape=(num_samples, rows.shape[0])).T
    else:
        gumbel = jax.random.gumbel(_key(), rows.shape, rows.dtype)
        draws = lax.top_k(logits + gumbel, num_samples)[1]
    return draws.reshape(ctx.out().shape).astype(jnp.int64)


# ------------------------------------------------------------------ factories (compiled graphs)
# Eager runs PyTorch's composite factories (empty + the in-place op above); AOTAutograd
# keeps the factory ops in compiled graphs, and decomposes uniform_, normal_,
# bernoulli, exponential_ and the *_like factories into them.
@lowering(aten.rand.default, aten.rand.generator, random=True, eager=False)
def rand(size, *args, **kwargs):
    """aten::rand: U[0, 1) of `size` in the requested floating dtype."""
    out = context().out()
    return _uniform(out.shape, out.dtype)


@lowering(aten.randn.default, aten.randn.generator, random=True, eager=False)
def randn(size, *args, **kwargs):
    """aten::randn: N(0, 1) of `size` in the requested floating dtype."""
    out = context().out()
    return _normal_value(out.shape, out.dtype, 0.0, 1.0)


@lowering(aten.randint.low, aten.randint.low_generator, random=True, eager=False)
def randint_low(low, high, size, *args, **kwargs):
    """aten::randint.low: integers uniform on [low, high) of `size`."""
    out = context().out()
    return _random_range(out.shape, out.dtype, low, high - low)


@lowering(aten.randint.default, aten.randint.generator, random=True, eager=False)
def randint(high, size, *args, **kwargs):
    """aten::randint: integers uniform on [0, high) of `size`."""
    return randint_low(0, high, size)


@lowering(aten.rand_like.default, random=True, eager=False)
def rand_like(self, *args, **kwargs):
    """aten::rand_like: U[0, 1) in self's shape, in the requested floating dtype."""
    return rand(self.shape)


@lowering(aten.randn_like.default, random=True, eager=False)
def randn_like(self, *args, **kwargs):
    """aten::randn_like: N(0, 1) in self's shape, in the requested floating dtype."""
    return randn(self.shape)


@lowering(aten.randint_like.low_dtype, random=True, eager=False)
def randint_like_low(self, low, high, *args, **kwargs):
    """aten::randint_like.low_dtype: integers uniform on [low, high) in self's shape."""
    return randint_low(low, high, self.shape)


@lowering(aten.randint_like.default, random=True, eager=False)
def randint_like(self, high, *args, **kwargs):
    """aten::randint_like: integers uniform on [0, high) in self's shape."""
    return randint_low(0, high, self.shape)


def _rrelu(self, noise, lower, upper, training):
    """(output, new noise) of CPU's rrelu_with_noise: in training each x <= 0 is scaled
    by a slope drawn from U[lower, upper], recorded in noise (1 elsewhere); otherwise
    leaky_relu with the mean slope and noise unchanged."""
    opmath = jnp.float32 if self.dtype in (jnp.float16, jnp.bfloat16) else self.dtype
    if not training:  # the unrounded mean slope, half types in float32 (CPU's leaky_relu)
        check_scalar((lower + upper) / 2, opmath)  # CPU's leaky_relu reads it as opmath
        x = self.astype(jnp.float32) if self.dtype in (jnp.float16, jnp.bfloat16) else self
        return jnp.where(x > 0, x, x * ((lower + upper) / 2)).astype(self.dtype), noise
    check_scalar(lower, opmath)  # CPU reads the bounds as opmath
    check_scalar(upper, opmath)
    r = _uniform(self.shape, self.dtype, lower, upper)
    negative = self <= 0
    return jnp.where(negative, self * r, self), jnp.where(negative, r, jnp.ones((), noise.dtype)).astype(noise.dtype)


@lowering(aten.rrelu_with_noise.default, random=True, mutates=True, static=("lower", "upper"))
def rrelu_with_noise(self, noise, lower=0.125, upper=1.0 / 3, training=False, generator=None):
    """aten::rrelu_with_noise (nn.RReLU, F.rrelu): writes the drawn slopes into `noise`,
    which the backward reads."""
    out, new_noise = _rrelu(self, noise, lower, upper, training)
    return out, {"noise": new_noise}


@lowering(aten.rrelu_with_noise_functional.default, random=True, static=("lower", "upper"))
def rrelu_with_noise_functional(self, noise, lower=0.125, upper=1.0 / 3, training=False, generator=None):
    """aten::rrelu_with_noise_functional (compiled graphs): (output, the new noise)."""
    return _rrelu(self, noise, lower, upper, training)


@lowering(aten.rrelu_with_noise_.default, random=True, mutates=True, static=("lower", "upper"))
def rrelu_with_noise_(self, noise, lower=0.125, upper=1.0 / 3, training=False, generator=None):
    """aten::rrelu_with_noise_ (F.rrelu(inplace=True)). Registered on its own: the
    functional overload mutates `noise` too, so no in-place variant is derived from it."""
    out, new_noise = _rrelu(self, noise, lower, upper, training)
    return (), {"self": out, "noise": new_noise}
