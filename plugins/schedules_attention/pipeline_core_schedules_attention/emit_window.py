"""What a sliding-window forward kernel (``-p window_left`` / ``-p window_right``) writes
differently from the causal one, for ``emit_attention`` (docs/guide/attention.md, "Sliding
windows and softcap"): the plan's :class:`~.tiles.LoopBounds` as C expressions, and the mask.

A windowed output tile visits KV blocks ``KF .. KF + KT - 1`` (``LoopBounds.kv_first`` and
``trips``); the ones from ``FM`` on straddle the window's right edge (or the diagonal) or hold
the key tail, and those before ``LM`` its left edge (``first_masked`` and ``left_masked``, here
as absolute block indices, so the softmax is asked ``KF + t < LM ? 0 : FM`` as its first masked
block, with KV block ``KF + t``: attention.cuh's softmax unchanged).  The producer loads K and V
at row ``(KF + t) * BN``.  The window is compiled into the kernel (its reaches are constants of
these expressions), so the proof's rule is the kernel's: one kernel per distinct window, as per
alignment.  Every windowed kernel guards rows with no key yet (a block at the left edge may
hold none of a row's keys): their exponentials are taken against 0, so they stay 0.
"""
from __future__ import annotations

from pipeline_core_schedules_attention.tiles import LoopBounds

#: LoopBounds.offset per alignment (the causal diagonal's and the window's), in the kernel's
#: arguments
OFFSET = {"top_left": "0", "bottom_right": "(Sk - Sq)"}


def window_bounds_exprs(b: LoopBounds) -> tuple[str, str, str, str]:
    """``KF``, ``KT``, ``FM`` and ``LM`` of output tile ``tile_m`` as C expressions of the
    kernel's ``tile_m, Sq, Sk, KV_BLOCKS`` and ``KF`` (the tile's first block), from the plan's
    windowed bounds (``LoopBounds.kv_first``, ``trips``; ``first_masked`` and ``left_masked``
    as absolute blocks).  Every ``/`` divides non-negative numbers, so C's truncation is
    Python's floor (the tests evaluate them as Python with ``//``)."""
    off, bm, bn = OFFSET[b.align], b.block_m, b.block_n
    first_row, last_row = f"tile_m * {bm}", f"min((tile_m + 1) * {bm}, Sq) - 1"
    left, right = b.window_left, b.right
    lo = "0" if left < 0 else f"max(0, {first_row} + {off} - {left})"
    hi = "(Sk - 1)" if right is None else f"min(Sk - 1, {last_row} + {off} + {right})"
    kf = f"{lo} / {bn}"
    kt = f"({lo} <= {hi}) * ({hi} / {bn} - KF + 1)"  # 0 where no row sees a key
    fm = f"KV_BLOCKS - (Sk % {bn} != 0)"  # the key tail's block
    if right is not None:
        fm = f"min({fm}, max(0, {first_row} + {off} + {right} + 1) / {bn})"
    lm = "0" if left < 0 else f"(max(0, {last_row} + {off} - {left}) + {bn} - 1) / {bn}"
    return kf, kt, fm, lm


def window_mask(b: LoopBounds) -> str:
    """The masked blocks' ``pcat::Window`` (attention_window.cuh) of the plan's window: row
    ``r`` keeps keys ``r + offset - left .. r + offset + right`` below ``Sk``."""
    off, left, right = OFFSET[b.align], b.window_left, b.right
    if right is None:  # past every key on the right
        return f"pcat::Window{{Sk, Sk, Sk - {off} + {left}}}"
    if left < 0:  # no left edge: attention.cuh's causal mask at the right reach
        return f"pcat::Causal{{Sk, {off} + {right}}}"
    return f"pcat::Window{{Sk, {off} + {right}, {left + right}}}"


def window_tile_lines(b: LoopBounds) -> tuple[str, ...]:
    """The per-output-tile lines setting KF and KT (the producer's two) and FM and LM (the
    consumers' too) from the plan's rule."""
    if b.start_shift:
        raise ValueError("the plan's window rule carries a mutation's start_shift; "
                         "recompile the schedule")
    kf, kt, fm, lm = window_bounds_exprs(b)
    return (f"KF = {kf};  // the plan's LoopBounds.kv_first",
            f"KT = {kt};  // the plan's LoopBounds.trips",
            f"FM = {fm};  // the plan's LoopBounds.first_masked, from block 0",
            f"LM = {lm};  // the plan's LoopBounds.left_masked, from block 0")


#: the windowed kernel's per-tile counts, set by :func:`window_tile_lines`
WINDOW_BLOCKS = "KV_BLOCKS = (Sk + BN - 1) / BN;\n    int KT = 0, FM = 0, KF = 0, LM = 0"
