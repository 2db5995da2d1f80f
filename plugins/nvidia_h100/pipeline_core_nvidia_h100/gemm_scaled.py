"""The ``scaled_mm()`` call's planning, with no GPU package: fp8 e4m3 operands and their scales.

``scaled_mm(a, b, scale_a, scale_b, *, out_dtype=torch.bfloat16, bias=None)`` has
``torch._scaled_mm``'s semantics: ``a [M, K]`` row-major and ``b [K, N]`` column-major, both
``torch.float8_e4m3fn``; fp32 scales per tensor (one element each) or row-wise (``scale_a
[M, 1]``, ``scale_b [1, N]``); ``out = (a @ b) * scale_a * scale_b (+ bias)`` cast to
``out_dtype``.  fp8 wgmma reads both operands K-major (PTX ISA, "wgmma.mma_async"), so these
are the only layouts, and TMA steps a row of K bytes only in 16-byte units: K a multiple of 16.
:func:`plan_scaled` checks what is fp8's own and hands the rest to ``gemm_call.plan_call`` with
``scale`` set (one home for shapes, bias, output and tiles).  docs/guide/matmul.md, "scaled_mm".
"""
from __future__ import annotations

import math

from pipeline_core_nvidia_h100.gemm_call import (TMA_ALIGN, TORCH_NAME, CallPlan,
                                                 MatmulTypeError, TensorInfo, TileShape, Tuning,
                                                 _fail, plan_call)
from pipeline_core_nvidia_h100.warpspecialized import OUT_DTYPES

#: scaled_mm's default output type; its output types are the schedule's OUT_DTYPES
#: (torch._scaled_mm's fp8 outputs are not taken).
DEFAULT_OUT = "bf16"


def _k_major(name: str, t: TensorInfo, rows_dim: int) -> None:
    """Operand ``name`` (``a``: rows_dim 0, ``b``: rows_dim 1) must have K contiguous and its
    rows 16 bytes apart (a size-1 dimension's stride never matters)."""
    k_dim = 1 - rows_dim
    rows, k = t.shape[rows_dim], t.shape[k_dim]
    s_rows, s_k = t.strides[rows_dim], t.strides[k_dim]
    layout = "row-major [M, K]" if name == "a" else "column-major [K, N] (b.t() contiguous)"
    fix = f"{name}.contiguous()" if name == "a" else "b.t().contiguous().t()"
    if k > 1 and s_k != 1:
        raise _fail(name, f"strides {tuple(t.strides)}: fp8 wgmma reads both operands K-major, "
                          f"so {name} must be {layout}, as torch._scaled_mm takes it; pass {fix}")
    if rows > 1 and (s_rows <= 0 or s_rows % TMA_ALIGN):
        pad = -(-k // TMA_ALIGN) * TMA_ALIGN
        if s_rows == k:
            raise _fail(name, f"K={k} is not a multiple of {TMA_ALIGN}: TMA steps fp8 rows in "
                              f"{TMA_ALIGN}-byte units; pad K with zeros to {pad} on both "
                              f"operands (torch.nn.functional.pad)")
        raise _fail(name, f"strides {tuple(t.strides)}: the stride between K rows must be a "
                          f"positive multiple of {TMA_ALIGN} bytes for TMA; pass {fix}")


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
                tuning: Tuning = Tuning()) -> CallPlan:
    """Check ``scaled_mm(a, b, scale_a, scale_b, out_dtype=, bias=)``'s arguments and plan the
    launch (the e4m3 kernel with ``-p scale`` the scales' kind)."""
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
    if 0 not in (*a.shape, b.shape[1]):
        _k_major("a", a, 0)
        _k_major("b", b, 1)
    kind = scale_kind(a, b, scale_a, scale_b)
    return plan_call(a, b, bias=bias, out_dtype=out_dtype or DEFAULT_OUT, tile=tile, sms=sms,
                     tuning=tuning, scale=kind)
