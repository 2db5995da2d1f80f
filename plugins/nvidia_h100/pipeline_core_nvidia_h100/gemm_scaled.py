"""The ``scaled_mm()`` call's planning, with no GPU package: fp8 e4m3 operands and their scales.

``scaled_mm(a, b, scale_a, scale_b, *, out_dtype=torch.bfloat16, bias=None)`` has
``torch._scaled_mm``'s semantics: ``a [M, K]`` row-major and ``b [K, N]`` column-major, both
``torch.float8_e4m3fn``; fp32 scales per tensor (one element each) or row-wise (``scale_a
[M, 1]``, ``scale_b [1, N]``); ``out = (a @ b) * scale_a * scale_b (+ bias)`` cast to
``out_dtype``.  fp8 wgmma reads both operands K-major (PTX ISA, "wgmma.mma_async").  What
torch._scaled_mm takes is taken and what it refuses is refused: K a multiple of 16, ``a`` not
column-major, ``b`` K-contiguous.  A layout TMA cannot read (rows not 16 bytes apart, an ``a``
with neither dimension contiguous, which torch copies too, an unaligned address) is staged into
a K-major copy (gemm_staging).  N is free (torch takes multiples of 16 only).
:func:`plan_scaled` checks what is fp8's own and hands the rest to ``gemm_call.plan_call`` with
``scale`` set (one home for shapes, bias, output, staging and tiles).  docs/guide/matmul.md,
"scaled_mm".
"""
from __future__ import annotations

import math

from pipeline_core_nvidia_h100.gemm_call import (TORCH_NAME, CallPlan,
                                                 MatmulTypeError, TensorInfo, TileShape, Tuning,
                                                 _fail, plan_call)
from pipeline_core_nvidia_h100.warpspecialized import OUT_DTYPES

#: scaled_mm's default output type; its output types are the schedule's OUT_DTYPES
#: (torch._scaled_mm's fp8 outputs are not taken).
DEFAULT_OUT = "bf16"
#: torch._scaled_mm takes K a multiple of 16 only (its own check on a's shape), so this does too
K_MULTIPLE = 16


def _k_major(name: str, t: TensorInfo, rows_dim: int) -> None:
    """Operand ``name`` (``a``: rows_dim 0, ``b``: rows_dim 1) in a layout torch._scaled_mm
    takes: ``a`` anything but column-major (torch copies one with neither dimension contiguous
    into rows, as the staging does), ``b`` with K contiguous (a size-1 dimension's stride
    never matters)."""
    k_dim = 1 - rows_dim
    rows, k = t.shape[rows_dim], t.shape[k_dim]
    s_rows, s_k = t.strides[rows_dim], t.strides[k_dim]
    column_major = s_rows == 1 and s_k >= max(1, rows)
    if k > 1 and s_k != 1 and (name == "b" or column_major):
        layout = "row-major [M, K]" if name == "a" else "column-major [K, N] (b.t() contiguous)"
        fix = f"{name}.contiguous()" if name == "a" else "b.t().contiguous().t()"
        raise _fail(name, f"strides {tuple(t.strides)}: fp8 wgmma reads both operands K-major, "
                          f"so {name} must be {layout}, as torch._scaled_mm takes it; pass {fix}")


def scale_kind(a: TensorInfo, b: TensorInfo, scale_a: TensorInfo, scale_b: TensorInfo) -> str:
    """``tensor`` (one fp32 each) or ``row`` (scale_a [M, 1], scale_b [1, N], fp32), as
    torch._scaled_mm takes them; anything else is refused in one line naming the scale."""
    m, n = a.shape[0], b.shape[1]
    for name, t in (("scale_a", scale_a), ("scale_b", scale_b)):
        if t.dtype != "fp32":
            raise MatmulTypeError(f"{name}: element type {TORCH_NAME.get(t.dtype, t.dtype)} "
                                  f"is not torch.float32; pass {name}.float()")
        if t.device != a.device:
            raise _fail(name, f"on {t.device}, a on {a.device}; pass {name}.to('{a.device}')")
    if math.prod(scale_a.shape) == 1 and math.prod(scale_b.shape) == 1:  # (a row-wise [1, 1] scale means the same)
        return "tensor"
    for name, t, want, long_dim in (("scale_a", scale_a, (m, 1), 0),
                                    ("scale_b", scale_b, (1, n), 1)):
        if tuple(t.shape) != want:
            raise _fail(name, f"shape {list(t.shape)}: scales are one per tensor (numel 1 each) "
                              f"or row-wise, scale_a [M, 1] = [{m}, 1] and scale_b [1, N] = "
                              f"[1, {n}] (both of one kind)")
        if want[long_dim] > 1 and t.strides[long_dim] != 1:
            raise _fail(name, f"strides {tuple(t.strides)}: a row-wise scale must be "
                              f"contiguous; pass {name}.contiguous()")
    return "row"


def plan_scaled(a: TensorInfo, b: TensorInfo, scale_a: TensorInfo, scale_b: TensorInfo, *,
                bias: TensorInfo | None = None, out_dtype: str | None = None,
                tile: TileShape = TileShape(), sms: int = 0,
                tuning: Tuning = Tuning(), stream_k: bool = False) -> CallPlan:
    """Check ``scaled_mm(a, b, scale_a, scale_b, out_dtype=, bias=)``'s arguments and plan the
    launch (the e4m3 kernel with ``-p scale`` the scales' kind; ``stream_k`` as
    gemm_call.plan_call's)."""
    for name, t in (("a", a), ("b", b)):
        if t.dtype != "e4m3":
            raise MatmulTypeError(f"{name}: element type {TORCH_NAME.get(t.dtype, t.dtype)} "
                                  "is not torch.float8_e4m3fn; scaled_mm takes fp8 e4m3 (pass "
                                  f"{name}.to(torch.float8_e4m3fn) with its scale), matmul "
                                  "takes bf16 / fp16")
        if len(t.shape) != 2:
            raise _fail(name, f"{len(t.shape)}-D tensor; scaled_mm takes a 2-D "
                              f"{'[M, K]' if name == 'a' else '[K, N]'} tensor")
    if b.shape[0] != a.shape[1]:
        raise _fail("b", f"shape {list(b.shape)} does not match a {list(a.shape)}: b must be "
                         f"[K={a.shape[1]}, N]")
    if out_dtype is not None and out_dtype not in OUT_DTYPES:
        raise MatmulTypeError(f"out_dtype: {out_dtype} is not one of torch.bfloat16, "
                              "torch.float16, torch.float32")
    k = a.shape[1]
    if k % K_MULTIPLE:  # torch._scaled_mm's own rule, whatever the layout
        raise _fail("a", f"K={k} is not a multiple of {K_MULTIPLE}, which torch._scaled_mm "
                         f"refuses too; pad K with zeros to {-(-k // K_MULTIPLE) * K_MULTIPLE} "
                         f"on both operands (torch.nn.functional.pad)")
    if 0 not in (*a.shape, b.shape[1]):
        _k_major("a", a, 0)
        _k_major("b", b, 1)
    kind = scale_kind(a, b, scale_a, scale_b)
    return plan_call(a, b, bias=bias, out_dtype=out_dtype or DEFAULT_OUT, tile=tile, sms=sms,
                     tuning=tuning, scale=kind, stream_k=stream_k)
