"""Mapping between torch dtypes, ATen ScalarType codes and JAX/NumPy dtypes."""
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import torch

from .quiet import python_warnings_hidden

TORCH_TO_JAX = {
    torch.float32: jnp.dtype(jnp.float32),
    torch.float64: jnp.dtype(jnp.float64),
    torch.float16: jnp.dtype(jnp.float16),
    torch.bfloat16: jnp.dtype(jnp.bfloat16),
    torch.int8: jnp.dtype(jnp.int8),
    torch.int16: jnp.dtype(jnp.int16),
    torch.int32: jnp.dtype(jnp.int32),
    torch.int64: jnp.dtype(jnp.int64),
    torch.uint8: jnp.dtype(jnp.uint8),
    torch.uint16: jnp.dtype(jnp.uint16),
    torch.uint32: jnp.dtype(jnp.uint32),
    torch.uint64: jnp.dtype(jnp.uint64),
    torch.bool: jnp.dtype(jnp.bool_),
    torch.complex64: jnp.dtype(jnp.complex64),
    torch.complex128: jnp.dtype(jnp.complex128),
    torch.float8_e4m3fn: jnp.dtype(ml_dtypes.float8_e4m3fn),
    torch.float8_e5m2: jnp.dtype(ml_dtypes.float8_e5m2),
    torch.float8_e4m3fnuz: jnp.dtype(ml_dtypes.float8_e4m3fnuz),
    torch.float8_e5m2fnuz: jnp.dtype(ml_dtypes.float8_e5m2fnuz),
}
#: One-byte float types, which cross DLPack as uint8 views.
_FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
JAX_TO_TORCH = {v: k for k, v in TORCH_TO_JAX.items()}



def to_jax(dtype: torch.dtype):
    """The JAX dtype of a torch dtype; TypeError for dtypes `neuron` cannot hold."""
    try:
        return TORCH_TO_JAX[dtype]
    except KeyError:
        raise TypeError(f"neuron does not support dtype {dtype}") from None


def to_torch(dtype) -> torch.dtype:
    return JAX_TO_TORCH[jnp.dtype(dtype)]


def numpy_view(t: torch.Tensor) -> np.ndarray:
    """The values of a CPU tensor (not requiring grad) as a NumPy array of its shape and
    strides, sharing its memory unless it is 0-dim (bf16 and fp8 included); TypeError
    for dtypes `neuron` cannot compute in (complex32: the copy of such a tensor to the
    device), KeyError for a 0-dim one.

    Not Tensor.numpy(): that marks the tensor's storage non-resizable for good, so a
    user's tensor could no longer be resized after being copied to `neuron`. DLPack
    shares memory without that side effect; a 0-dim tensor is read as a number, which
    is cheaper (they are scalar arguments on the eager hot path).
    """
    if t.dim() == 0:  # a wrapped scalar: ops with no dtype for it take CPU's error
        return np.asarray(t.item(), dtype=TORCH_TO_JAX[t.dtype])
    dtype = to_jax(t.dtype)
    if t.dtype == torch.bfloat16:
        return np.from_dlpack(t.view(torch.int16)).view(ml_dtypes.bfloat16)
    if t.dtype in _FLOAT8:
        return np.from_dlpack(t.view(torch.uint8)).view(dtype)
    return np.from_dlpack(t)


def from_numpy(a: np.ndarray) -> torch.Tensor:
    """A CPU tensor sharing a NumPy array's memory (bf16 and fp8 included). The array
    may be a read-only view of a device buffer: callers only read the tensor, so
    PyTorch's "not writable" warning (which would point users at our code) is muted."""
    dt = JAX_TO_TORCH[jnp.dtype(a.dtype)]
    if dt == torch.bfloat16:
        a, dt = a.view(np.int16), torch.bfloat16
    elif dt in _FLOAT8:
        a = a.view(np.uint8)
    with python_warnings_hidden():
        t = torch.from_numpy(a)
    return t if t.dtype == dt else t.view(dt)
