"""quack's CuTe-DSL GEMM (``quack.gemm_interface.gemm``) as a same-process peer, where its
wheels travelled with the tree (``../shared/tools/carry_wheels.sh``, the same parts as
FlashAttention-4's): the one home of how the GEMM benchmarks import and call it.

Called with ``tuned=False``: quack's own default, its nvMMH heuristic's config for a plain
GEMM, compiled once per shape by the CuTe DSL's JIT (its autotuner, ``tuned=True``, compiles
and times every candidate config on the first call of a shape: minutes a shape, more than a
device call holds).  A first call compiles; the timing's warm-up calls absorb it."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

_FOUND: list[tuple[Callable[..., Any] | None, str]] = []


def gemm() -> tuple[Callable[..., Any] | None, str]:
    """quack's ``gemm`` and "", or None and why it does not import (one line)."""
    if not _FOUND:
        try:
            from quack.gemm_interface import gemm as found  # type: ignore[import-not-found]
            _FOUND.append((found, ""))
        except Exception as exc:  # noqa: BLE001 - not importable here: one line
            _FOUND.append((None, str(exc).splitlines()[0][:200] if str(exc) else repr(exc)))
    return _FOUND[0]


def matmul(f: Callable[..., Any], a: Any, b: Any, out: Any) -> Any:
    """``out = a @ b`` through quack (``a`` [M, K], ``b`` [K, N], either major)."""
    return f(a, b, out=out, tuned=False)
