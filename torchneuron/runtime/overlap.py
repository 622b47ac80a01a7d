"""Memory-overlap checks of written tensors, as ATen's TensorIterator makes them.

On CPU and CUDA an elementwise op (or `copy_`) refuses to write a tensor in which
several elements share one memory location (an expanded tensor), or one that partly
overlaps an input (`x[1:].add_(x[:-1])`), because the result would depend on the
order of the element loop. `neuron` computes such ops functionally and would silently
produce a result; these checks raise the errors CPU raises instead
(at::assert_no_internal_overlap, at::assert_no_partial_overlap).

Tensors are described by the shim's metadata tuples:
(storage handle, sizes, strides, storage offset, torch dtype, device index, storage nbytes).
"""
from __future__ import annotations

from typing import Sequence

_INTERNAL = ("unsupported operation: more than one element of the written-to tensor refers to a single "
             "memory location. Please clone() the tensor before performing the operation.")
_PARTIAL = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
            "single memory location. Please clone() the tensor before performing the operation.")


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def non_overlapping_and_dense(shape, stride) -> bool:
    """c10's is_non_overlapping_and_dense: some permutation of the dims is contiguous
    (an empty tensor is contiguous, whatever its strides)."""
    if 0 in shape:
        return True
    dims = sorted((d for d in range(len(shape)) if shape[d] != 1), key=lambda d: stride[d])
    expected = 1
    for d in dims:
        if stride[d] != expected:
            return False
        expected *= shape[d]
    return True


def _internal(meta) -> bool:
    """MemOverlap::Yes of at::has_internal_overlap (a dim of size > 1 with stride 0)."""
    _, shape, stride = meta[:3]
    if non_overlapping_and_dense(shape, stride):
        return False
    return any(st == 0 and sz > 1 for sz, st in zip(shape, stride))


def _partial(out, inp) -> bool:
    """MemOverlapStatus::Partial of at::get_overlap_status(out, inp)."""
    if out[0] != inp[0] or _numel(out[1]) == 0 or _numel(inp[1]) == 0:
        return False
    if not (non_overlapping_and_dense(out[1], out[2]) and non_overlapping_and_dense(inp[1], inp[2])):
        return False  # too hard to tell: allowed, as on CPU

    def span(m):
        size = m[4].itemsize
        begin = m[3] * size
        return begin, begin + _numel(m[1]) * size

    (ob, oe), (ib, ie) = span(out), span(inp)
    if ob == ib and oe == ie:
        return tuple(out[2]) != tuple(inp[2])
    return ob < ie and ib < oe


def check(written: Sequence[tuple], read: Sequence[tuple]) -> None:
    """Raises RuntimeError (CPU's message) if a written tensor overlaps itself or
    partly overlaps a read tensor. `written`, `read`: shim metadata tuples."""
    for out in written:
        if _internal(out):
            raise RuntimeError(_INTERNAL)
        for inp in read:
            if _partial(out, inp):
                raise RuntimeError(_PARTIAL)
