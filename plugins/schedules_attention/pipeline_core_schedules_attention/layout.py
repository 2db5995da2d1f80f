"""How the attention kernels read and write [B, H, S, D] tensors of any strides (one home for
the forward and the backward; docs/guide/attention.md, "Strides").

Models hold q, k and v as ``x.view(B, S, H, D).transpose(1, 2)``: [B, H, S, D] views of a
[B, S, H, D] buffer, the layout FlashAttention takes natively.  The kernels read every operand
through a rank-4 TMA tensor map of its own strides (:func:`bhsd_map`: dims (D, S, H, B) to the
driver, boxes (64, rows, 1, 1), coordinates (d, s, h, b)), so such a view is read in place;
so is a head slice (``q[:, ::2]``) or any view whose strides TMA can take.  The one rule for
every operand (q, k, v, the output and its gradient, :func:`readable`): a tensor the kit's
``tma_readable`` passes (unit last stride, the others multiples of 16 bytes, no two indices at
one address, a 16-byte aligned base) is read where it lies; any other is copied once into a
dense layout (``tma_copy``) and that copy read: torch accepts it, so it is handled, not
refused.  Outputs take their input's layout, as SDPA's do (:func:`order_of`,
:func:`empty_in_order`): a permuted dense input gives an output of the same strides, a
non-dense one an output dense in the input's dimension order; the kernels write them through
their strides.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline_core_nvidia_h100.kit_api import (dense_strides, strided_tensor_map, tma_copy,
                                               tma_readable)

__all__ = ["BOX_COLS", "bhsd_map", "dense_strides", "empty_in_order", "empty_like_layout",
           "in_place", "order_of", "readable", "sizes", "strides"]

#: the elements of the head dim one TMA box holds (64 x 2 bytes: one 128-byte swizzled row)
BOX_COLS = 64


def sizes(t: Any) -> tuple[int, ...]:
    """``t``'s shape as ints."""
    return tuple(int(n) for n in t.shape)


def strides(t: Any) -> tuple[int, ...]:
    """``t``'s strides in elements, outermost first."""
    return tuple(int(t.stride(i)) for i in range(len(t.shape)))


def in_place(t: Any) -> bool:
    """Whether the kernels read ``t`` where it lies (else :func:`readable` copies it once).
    A tensor with no storage (torch.compile's FakeTensor, whose address raises: the op's fake
    runs the checks and the plan, and launches nothing) counts as copied."""
    try:
        return bool(tma_readable(t))
    except RuntimeError:
        return False


def readable(t: Any) -> Any:
    """``t`` as the kernels read it: itself where TMA can (:func:`in_place`), else a dense
    copy made once (the copy path: a stride not a multiple of 16 bytes, a non-unit last
    stride, a broadcast, a base off 16 bytes)."""
    return t if in_place(t) else tma_copy(t)


def bhsd_map(t: Any, rows: int, dtype: str) -> Any:
    """The TMA tensor map of [B, H, S, D] tensor ``t`` through its own strides (``t`` one
    :func:`in_place` passes), read in boxes of ``rows`` positions by :data:`BOX_COLS` of the
    head dim at coordinates (d, s, h, b): a box past S reads zeros (TMA's out-of-bounds fill),
    never another head's rows."""
    return strided_tensor_map(t.data_ptr(), sizes(t), strides(t), (1, 1, rows, BOX_COLS), dtype)


def order_of(t: Any) -> tuple[int, ...]:
    """``t``'s dimensions from the outermost stride to the innermost, the last dimension last
    (ties, as a dimension of one index gives, in the dimensions' order): (0, 1, 2, 3) for a
    contiguous [B, H, S, D], (0, 2, 1, 3) for a [B, S, H, D] buffer's transposed view."""
    st = strides(t)
    last = len(st) - 1
    return (*sorted(range(last), key=lambda i: (-st[i], i)), last)


def empty_in_order(torch: Any, shape: Sequence[int], order: Sequence[int], like: Any,
                   dtype: Any = None) -> Any:
    """A new tensor of ``shape`` on ``like``'s device (``dtype``: ``like``'s unless given),
    dense in dimension order ``order``: the layout :func:`dense_strides` gives."""
    dtype = like.dtype if dtype is None else dtype
    if tuple(order) == tuple(range(len(shape))):
        return torch.empty(tuple(shape), dtype=dtype, device=like.device)
    inverse = sorted(range(len(order)), key=lambda i: order[i])
    return torch.empty(tuple(shape[i] for i in order), dtype=dtype,
                       device=like.device).permute(*inverse)


def empty_like_layout(torch: Any, t: Any) -> Any:
    """A new tensor shaped and typed as ``t``, in ``t``'s layout (:func:`order_of`): what the
    kernels write an output or a gradient into, as SDPA's outputs follow their inputs."""
    return empty_in_order(torch, sizes(t), order_of(t), t)
