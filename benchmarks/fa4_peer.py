"""FlashAttention-4 (``flash_attn.cute``) as a same-process peer, where its wheels travelled with
the tree (``../shared/tools/carry_wheels.sh``): the one home of how the attention benchmarks
import it and call it on their ``[B, H, S, D]`` tensors (FA4 takes ``[B, S, H, D]``)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

_FOUND: dict[str, tuple[Callable[..., Any] | None, str]] = {}


def _load(name: str) -> tuple[Callable[..., Any] | None, str]:
    """``flash_attn.cute``'s function ``name`` and "", or None and why it does not import (one
    line)."""
    if name not in _FOUND:
        try:
            import flash_attn.cute as cute  # type: ignore[import-not-found]
            _FOUND[name] = (getattr(cute, name), "")
        except Exception as exc:  # noqa: BLE001 - not importable here: one line
            _FOUND[name] = (None, str(exc).splitlines()[0][:200] if str(exc) else repr(exc))
    return _FOUND[name]


def flash_attn_func() -> tuple[Callable[..., Any] | None, str]:
    """FA4's ``flash_attn_func`` and "" , or None and why it does not import (one line)."""
    return _load("flash_attn_func")


def flash_attn_varlen_func() -> tuple[Callable[..., Any] | None, str]:
    """FA4's ``flash_attn_varlen_func`` (decoding: ``seqused_k`` and a ``page_table``) and "",
    or None and why."""
    return _load("flash_attn_varlen_func")


def bshd(t: Any) -> Any:
    """A ``[B, H, S, D]`` tensor as the contiguous ``[B, S, H, D]`` FA4 reads (copied once, outside
    any timed call)."""
    return t.transpose(1, 2).contiguous()


def forward(f: Callable[..., Any], q: Any, k: Any, v: Any, causal: bool) -> Any:
    """FA4's output of ``[B, S, H, D]`` q, k, v (its call returns the output, or it and the
    LSE)."""
    out = f(q, k, v, causal=causal)
    return out[0] if isinstance(out, tuple) else out
