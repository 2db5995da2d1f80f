"""Which operand layouts TMA reads, and the staged copy of one it cannot, with no GPU package
(docs/guide/matmul.md, "Layouts TMA cannot read").

TMA reads a 2-D array with one dimension contiguous and the other's stride a positive multiple
of 16 bytes that does not overlap rows, from a 16-byte aligned address; a batched operand's
batch stride likewise.  torch.matmul takes any strides, so an operand the tensor maps cannot
describe is not refused: the plan records a :class:`Staging`, the layout of an aligned copy (the
contiguous dimension kept, or the last where neither is, as ``.contiguous()``; the other's
stride rounded up to 16 bytes), and the call copies the operand into it on torch's stream
before the launch.  The padding columns are never read, so never zeroed: the tensor map's inner
extent stays the true K (N, M) and TMA zero-fills a box past it.  An ``out`` the direct store
cannot write (a column stride other than 1, rows closer than N) is written into a contiguous
temporary and copied in.  Everything here reads shapes, strides, element sizes and whether an
address is aligned: what ``launch_cache.describe`` keys a recipe by.
"""
from __future__ import annotations

from typing import Protocol

import attrs

#: TMA reads global memory in 16-byte units: every stride but the innermost and the base address
#: must be multiples of 16 bytes.
TMA_ALIGN = 16


class Described(Protocol):
    """What staging reads of a tensor (``gemm_call.TensorInfo``): ``ptr`` None when unknown (a
    fake tensor; a staged copy, aligned by the allocator)."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def strides(self) -> tuple[int, ...]: ...

    @property
    def ptr(self) -> int | None: ...


@attrs.frozen(kw_only=True)
class Staging:
    """One argument the call copies around the launch: ``operand`` (``a``, ``b``, ``bias`` or
    ``out``), the copy's shape and strides in elements (``torch.empty_strided``'s).  ``a`` /
    ``b`` / ``bias`` are copied in before the kernel reads the copy; a 2-D copy of a 3-D
    operand is of its one matrix (a batch of 1, or a broadcast batch of stride 0).  ``out``:
    the kernel writes the copy, which is then copied into the given ``out``."""

    operand: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]


def aligned(stride: int, elem: int) -> bool:
    """Whether ``stride`` elements of ``elem`` bytes is a stride TMA steps (positive, 16 bytes)."""
    return stride > 0 and stride * elem % TMA_ALIGN == 0


def padded(extent: int, elem: int, align: int = TMA_ALIGN) -> int:
    """``extent`` elements rounded up to ``align`` bytes (at least that): a legal row stride
    for an array with one row (TMA never steps it, but encodes it), or a staged copy's."""
    step = align // elem
    return max(step, -(-extent // step) * step)


#: A K-major row that starts on a 128-byte line is read by TMA at full speed; one that starts
#: 16 bytes off it straddles two lines in every box row (2000x5000x3000 bf16, stride 6000 bytes:
#: 0.59 of cuBLAS by TMA, 0.94 with the rows padded to 3072).  A staged copy's rows start on
#: such lines, not merely 16 bytes apart (a copy costs the same either way); the decomposition
#: reads it too (gemm_call.rows_off_line).
LINE_BYTES = 128
#: Rows whose stride is a multiple of 64 bytes straddle lines on every other row at most, which
#: measured near full speed (4000^3 bf16, 8000-byte rows: 0.97x cuBLAS); rows off this grid
#: straddle on most rows.
ROW_GRID = 64
#: The cost rule for rows off the grid (:func:`copy_pays`), measured on an H200
#: (benchmarks/results/gemm_speed_h200.jsonl, gemm_cpasync_h200.jsonl): the best tile on such
#: rows ran 1.42x the time of the best on the same shape in aligned rows (2000x5000x3000: 433
#: against 617 TFLOPS); the call's copies (torch's ``copy_`` into padded rows, one launch
#: each) moved 1.6e12 bytes a second, read and written counted (2000x5000x3000 copied both
#: operands in about 52 us, and ran 0.57x cuBLAS against 0.61x read in place), well under a
#: plain device-to-device copy's 4.3e12; the GEMM runs 650e12 FLOP a second.
STRADDLE_SLOWDOWN = 1.42
COPY_BYTES_PER_S = 1.6e12
GEMM_FLOPS_PER_S = 650e12
LAUNCH_S = 5e-6


def off_grid(t: Described, rows_dim: int, elem: int) -> bool:
    """Whether operand ``t``'s (a [.., M, K]: rows_dim 0; b [.., K, N]: rows_dim 1) stepped
    stride, the one between TMA's box rows, is off the :data:`ROW_GRID`."""
    shape, strides = t.shape[-2:], t.strides[-2:]
    found = major(shape, strides, rows_dim, elem)
    if found is None:
        return False  # staged anyway
    k_dim = 1 - rows_dim
    outer, stride = ((shape[rows_dim], strides[rows_dim]) if found == "k"
                     else (shape[k_dim], strides[k_dim]))
    return outer > 1 and stride * elem % ROW_GRID != 0


def copy_pays(m: int, n: int, k: int, batch: int, elem: int, copied: int) -> bool:
    """Whether copying ``copied`` elements (of ``elem`` bytes) into aligned rows costs less than
    the GEMM of ``batch`` [m, k] @ [k, n] loses reading them where they lie."""
    copy_s = 2 * copied * elem / COPY_BYTES_PER_S + LAUNCH_S
    gemm_s = 2 * m * n * k * batch / GEMM_FLOPS_PER_S
    return copy_s < (STRADDLE_SLOWDOWN - 1) * gemm_s


def major(shape: tuple[int, ...], strides: tuple[int, ...], rows_dim: int,
          elem: int) -> str | None:
    """The major mode TMA reads 2-D operand ``shape`` / ``strides`` in (``a`` [M, K]: rows_dim
    0; ``b`` [K, N]: rows_dim 1): ``k`` (K contiguous, rows of K elements), else ``mn`` (M or N
    contiguous, one row per k, read through wgmma's transpose mode), else None.  A size-1
    dimension's stride never matters; a stepped stride must be aligned and not overlap rows."""
    k_dim = 1 - rows_dim
    rows, k = shape[rows_dim], shape[k_dim]
    s_rows, s_k = strides[rows_dim], strides[k_dim]
    if (s_k == 1 or k == 1) and (rows == 1 or (aligned(s_rows, elem) and s_rows >= k)):
        return "k"
    if (s_rows == 1 or rows == 1) and (k == 1 or (aligned(s_k, elem) and s_k >= rows)):
        return "mn"
    return None


def stage_operand(name: str, t: Described, rows_dim: int, elem: int, batched: bool,
                  k_major: bool = False, realign: bool = False) -> Staging | None:
    """Operand ``name``'s staged copy, or None where TMA reads it where it lies: its matrix
    (the last two dimensions) in a :func:`major` mode, its address aligned and, ``batched``
    (the kernel reads its batch through a 3-D map), its batch stride aligned; ``realign``:
    copied even so (its rows off the grid, and :func:`copy_pays`).  The copy keeps the
    dimension TMA would read contiguous (the K dimension where ``k_major``: fp8), else the
    one longer than 1 of a vector, else a unit-stride one, else the last; its rows start on
    :data:`LINE_BYTES` lines."""
    shape, strides = t.shape[-2:], t.strides[-2:]
    found = major(shape, strides, rows_dim, elem)
    if found is not None and not realign and (t.ptr is None or t.ptr % TMA_ALIGN == 0) \
            and (not batched or aligned(t.strides[0], elem)):
        return None
    k_dim = 1 - rows_dim
    if k_major:
        inner = k_dim
    elif 1 in shape:
        inner = 0 if shape[1] == 1 else 1
    elif found is not None:
        inner = k_dim if found == "k" else rows_dim
    elif strides[0] == 1 or strides[1] == 1:
        inner = 0 if strides[1] != 1 else 1
    else:
        inner = 1
    step = padded(shape[inner], elem, LINE_BYTES)
    two = (step, 1) if inner == 1 else (1, step)
    if batched:
        return Staging(operand=name, shape=tuple(t.shape),
                       strides=(shape[1 - inner] * step, *two))
    return Staging(operand=name, shape=tuple(shape), strides=two)


def stage_out(t: Described) -> Staging | None:
    """``out``'s contiguous temporary, or None where the direct store writes it where it lies:
    its columns unit-strided (N > 1) and its rows at least N apart (M > 1); any address (the
    TMA store, which needs 16 bytes, gives way to the direct store) and any batch stride."""
    (m, n), (s_m, s_n) = t.shape[-2:], t.strides[-2:]
    if (n <= 1 or s_n == 1) and (m <= 1 or s_m >= n):
        return None
    strides: list[int] = []
    step = 1
    for d in reversed(t.shape):
        strides.insert(0, step)
        step *= max(d, 1)
    return Staging(operand="out", shape=tuple(t.shape), strides=tuple(strides))


def stage_bias(t: Described) -> Staging | None:
    """``bias`` [N] copied contiguous where its stride is not 1 (the epilogue reads it by
    column index)."""
    if t.shape[0] <= 1 or t.strides[0] == 1:
        return None
    return Staging(operand="bias", shape=tuple(t.shape), strides=(1,))
