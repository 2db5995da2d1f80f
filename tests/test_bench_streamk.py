"""benchmarks/gemm_streamk.py's operands without a GPU: each case's tensors are laid out as the
plan the kernel was built for reads them (``_infos``: rows padded to 16 bytes).  The first H200
run cast a view of the padded store, which made a compact copy: the kernel then read A's (and
B's) rows at the padded stride, past their end, and 11 of 30 cases failed (every one whose K,
or N for a row-major B, is off the 16-byte line), which looked like a stream-K fault.  The
stand-in ``torch`` is numpy, whose ``astype`` of a strided view is compact as torch's ``to`` is."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load():
    if str(BENCH) not in sys.path:  # the script imports its neighbours (bench_timing)
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("_bench_gemm_streamk", BENCH / "gemm_streamk.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Tensor(np.ndarray):
    """A numpy array with the torch calls the benchmark makes (``to`` copies, as torch's)."""

    def to(self, dtype: type) -> "_Tensor":
        return self.astype(dtype)

    def stride(self) -> tuple[int, ...]:
        return tuple(s // self.itemsize for s in self.strides)


def _fake_torch() -> SimpleNamespace:
    rng = np.random.default_rng(0)

    def randn(*shape: int, device: str = "") -> _Tensor:
        return rng.standard_normal(shape).astype(np.float32).view(_Tensor)

    def rand(shape: tuple[int, ...], device: str = "") -> _Tensor:
        return rng.random(shape).astype(np.float32).view(_Tensor)

    return SimpleNamespace(randn=randn, rand=rand, float16=np.float16, bfloat16=np.float32,
                           float32=np.float32, float8_e4m3fn=np.uint8)


def test_every_cases_operands_have_the_strides_its_plan_reads():
    gs = _load()
    torch = _fake_torch()
    off_line = 0
    for c in gs.CASES + gs.SANITIZE:
        if max(c.m, c.n) * c.k > 1 << 23:  # (the large ones, on the line, cost time only)
            continue
        a_i, b_i, _, _ = gs._infos(c)
        a, b, _, _ = gs._tensors(torch, c)
        assert (a.shape, a.stride()) == (a_i.shape, a_i.strides), c
        assert (b.shape, b.stride()) == (b_i.shape, b_i.strides), c
        off_line += a_i.strides[0] != c.k
    assert off_line >= 10  # the cases with K off the 16-byte line, which the fault hit

