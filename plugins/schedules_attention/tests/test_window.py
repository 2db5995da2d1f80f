"""Sliding-window attention and the logit softcap in the forward (docs/guide/attention.md,
"Sliding windows and softcap"): the window's trip rule (``LoopBounds`` with ``window_left`` /
``window_right``) against every (row, key) pair, its own coverage proof and a mutation it
refuses, the kernel's C of the rule, the emitted variants proven and built without spills, and
the call's one-line refusals (no GPU, no torch needed)."""
from __future__ import annotations

import itertools
import math

import attrs
import numpy as np
import pytest

from pipeline_core.api import compile_named
from pipeline_core.check.verdict import HazardKind as H
from pipeline_core.proof import require_safe

from pipeline_core_nvidia_h100.toolchain import compile_cubin, nvcc

from pipeline_core_schedules_attention.call import (LOG2E, AttentionArgumentError,
                                                    _kernel_key, call_params, call_stages,
                                                    plan_attention)
from pipeline_core_schedules_attention.emit_attention import emit_attention
from pipeline_core_schedules_attention.emit_window import window_bounds_exprs
from pipeline_core_schedules_attention.tile_order import busiest, choose
from pipeline_core_schedules_attention.tiles import LoopBounds

NAME = "flash-attention-fwd"
#: (left, right) reaches: empty-making, under a block, left-only, right-only, both, wide
WINDOWS = [(0, 0), (16, 0), (5, 7), (0, -1), (-1, 0), (-1, 3), (128, 128), (200, -1),
           (300, 40), (1000, -1)]
SIZES = [(1, 1), (17, 17), (128, 128), (300, 1024), (1024, 300), (129, 1), (700, 700)]


def keeps(b: LoopBounds, r: int, k: int, sq: int, sk: int) -> bool:
    """Whether row r sees key k: FlashAttention's window, written from its definition."""
    off = sk - sq if b.align == "bottom_right" else 0
    right = 0 if b.causal else b.window_right
    return (k < sk and (b.window_left < 0 or k >= r + off - b.window_left)
            and (right < 0 or k <= r + off + right))


def rule(causal: bool, align: str, bm: int, bn: int, window: tuple[int, int]) -> LoopBounds:
    left, right = window
    return LoopBounds(causal=causal, block_m=bm, block_n=bn, align=align, window_left=left,
                      window_right=-1 if causal else right)


CASES = [(causal, align, bm, bn, w) for causal in (False, True)
         for align in ("top_left", "bottom_right") for bm, bn in ((128, 128), (64, 48))
         for w in WINDOWS if not (causal and w[0] < 0)]


@pytest.mark.parametrize("causal,align,bm,bn,window", CASES)
def test_the_window_visits_every_kept_pair_and_masks_every_dropped_one(causal, align, bm, bn,
                                                                        window):
    """Per query block, the visited KV blocks (``kv_first`` .. + ``trips``) are exactly those
    holding a key some stored row sees, and the masked ones (both edges, the tail) exactly those
    where some row misses some key of the block: every (row, key) pair enumerated."""
    b = rule(causal, align, bm, bn, window)
    assert b.windowed == (window[0] >= 0 or (window[1] >= 0 and not causal))
    for sq, sk in SIZES:
        for i in range(-(-sq // bm)):
            rows = range(i * bm, min((i + 1) * bm, sq))
            seen, masked = set(), set()
            for j in range(-(-sk // bn)):
                pairs = [keeps(b, r, k, sq, sk) for r in rows for k in range(j * bn, (j + 1) * bn)]
                if any(pairs):
                    seen.add(j)
                    if not all(pairs):
                        masked.add(j)
            kf, trips = b.kv_first(i, sq, sk), b.trips(i, sq, sk)
            assert set(range(kf, kf + trips)) == seen, (sq, sk, i)
            assert {kf + t for t in range(trips) if b.masked(i, t, sq, sk)} == masked, (sq, sk, i)
        assert b.trip_counts((sq, sk)) == tuple(b.trips(i, sq, sk)
                                                for i in range(-(-sq // bm)))


@pytest.mark.parametrize("causal,align,bm,bn,window", CASES)
def test_the_rules_own_proof_holds_and_refuses_a_window_start_one_block_late(causal, align, bm,
                                                                              bn, window):
    b = rule(causal, align, bm, bn, window)
    assert b.coverage_faults() == ()
    if b.windowed and window[0] >= 0:  # a left edge: starting a block late loses keys
        faults = attrs.evolve(b, start_shift=1).coverage_faults()
        assert faults and "skips keys" in faults[0]


def test_a_window_that_leaves_rows_empty_visits_nothing_for_them():
    """(0, 0) aligned bottom-right on 300 queries and 100 keys: rows before 200 see no key,
    so their query blocks visit 0 KV blocks; the rule's problems hold rows that see none."""
    b = LoopBounds(block_m=128, block_n=128, align="bottom_right", window_left=0,
                   window_right=0)
    assert b.trip_counts((300, 100)) == (0, 1, 1)
    assert b.row_keys(0, 300, 100)[0] > b.row_keys(0, 300, 100)[1]
    assert any(sq > sk for sq, sk in b.proof_problems())


def test_the_window_bounds_the_blocks_on_both_sides_and_the_sample_says_so():
    """A window of 256 keys left on 4096: each query block visits 3 KV blocks (2 + the
    diagonal's), not 1 .. 32 as causal; the analyze sample reports the window."""
    causal = LoopBounds(causal=True, block_m=128, block_n=128)
    b = attrs.evolve(causal, window_left=256)
    assert b.trip_counts((4096, 4096))[5:] == (3,) * 27 and sum(b.trip_counts((4096, 4096))) \
        < sum(causal.trip_counts((4096, 4096))) / 5
    s = b.sample(8)
    assert s is not None and s.key == "window" and s.numbers == {"seq": 1280}
    assert b.document()["window"] == [256, -1] and "window" not in causal.document()


@pytest.mark.parametrize("causal,align,bm,bn,window", CASES[::3])
def test_the_kernels_c_is_the_rule(causal, align, bm, bn, window):
    """``KF``, ``KT``, ``FM`` and ``LM`` as the kernel computes them (emit_window's C, read as
    Python) are the rule's kv_first, trips and (from block 0) first_masked and left_masked."""
    b = rule(causal, align, bm, bn, window)
    if not b.windowed:
        return
    kf_c, kt_c, fm_c, lm_c = (e.replace("/", "//") for e in window_bounds_exprs(b))
    for sq, sk in SIZES:
        env = {"Sq": sq, "Sk": sk, "KV_BLOCKS": b.blocks(sk), "min": min, "max": max}
        for i in range(-(-sq // bm)):
            at = {**env, "tile_m": i}
            kf = eval(kf_c, at)  # noqa: S307 - our own expression
            kt = eval(kt_c, {**at, "KF": kf})  # noqa: S307
            assert (kf, kt) == (b.kv_first(i, sq, sk), b.trips(i, sq, sk)) or kt == 0 == \
                b.trips(i, sq, sk)
            fm, lm = eval(fm_c, at), eval(lm_c, at)  # noqa: S307
            for t in range(kt):
                assert (kf + t < lm or kf + t >= fm) == b.masked(i, t, sq, sk), (sq, sk, i, t)


def window_params(d: int, causal: bool, window: tuple[int, int], softcap: bool = False,
                  align: str = "top_left") -> dict[str, str]:
    reach = (window[0], -1) if causal else window
    return call_params(d, causal, align if causal else "bottom_right", window=reach,
                       softcap=softcap)


VARIANTS = [(64, False, (16, 0), False), (128, True, (256, -1), True), (128, False, (-1, 0), True),
            (64, True, (1000, -1), False), (128, False, (128, 128), False),
            (64, False, (-1, -1), True)]


@pytest.mark.parametrize("d,causal,window,softcap", VARIANTS)
def test_window_and_softcap_variants_are_proven_safe(d, causal, window, softcap):
    c = compile_named(NAME, params=window_params(d, causal, window, softcap),
                      target_args={"stages": str(call_stages(d, True))})
    assert c.proof.safe and c.plan.trip_rule.windowed == (window != (-1, -1))
    src = emit_attention(c)
    assert ("pcat::cap<BN>(sacc, softcap_scale);" in src) == softcap
    assert ("float softcap_scale" in src) == softcap
    assert ("KF * BN + t * BN" in src) == (window != (-1, -1))


def test_a_window_start_one_block_late_is_refused_by_the_proof_and_not_emitted():
    c = compile_named(NAME, params=window_params(128, True, (256, -1)),
                      target_args={"stages": "2"})
    late = attrs.evolve(c.plan.trip_rule, start_shift=1)
    bad = require_safe(attrs.evolve(c, plan=attrs.evolve(c.plan, trip_rule=late), proof=None),
                       allow_unsafe=True)
    assert {v.kind for v in bad.proof.verdict.violations} == {H.MISSING_PRODUCT}
    assert "skips keys" in bad.proof.verdict.violations[0].message
    with pytest.raises(Exception, match="start_shift"):
        emit_attention(bad)


@pytest.mark.skipif(nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("d,causal,window,softcap", VARIANTS[:4])
def test_the_window_and_softcap_kernels_build_without_spills(d, causal, window, softcap,
                                                              tmp_path):
    c = compile_named(NAME, params=window_params(d, causal, window, softcap),
                      target_args={"stages": str(call_stages(d, True))})
    proc, _ = compile_cubin(emit_attention(c), tmp_path, "window")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr


class Fake:
    """Just what plan_attention reads of a torch tensor."""

    def __init__(self, shape):
        self.shape, self.dtype, self.is_cuda, self.device = tuple(shape), "torch.bfloat16", \
            True, "cuda:0"

    def stride(self, i):
        return math.prod(self.shape[i + 1:])

    def element_size(self):
        return 2

    def data_ptr(self):
        return 1 << 20


def qkv(sq=300, sk=200, d=128):
    return Fake((2, 4, sq, d)), Fake((2, 2, sk, d)), Fake((2, 2, sk, d))


def test_the_call_compiles_one_kernel_per_window_with_the_causal_tiles_and_folds_the_cap():
    c = plan_attention(*qkv(), window=(256, 7), causal=True)
    assert (c.window, c.align, c.causal) == ((256, -1), "top_left", True)  # causal: right 0
    free = plan_attention(*qkv(), window=(64, 0))
    assert (free.window, free.align, free.causal) == ((64, 0), "bottom_right", False)
    assert plan_attention(*qkv(), window=(-1, -1)).window == (-1, -1)
    assert plan_attention(*qkv(), window=(-1, 5), causal=True).window == (-1, -1)  # causal
    assert _kernel_key(free, 0)[6:] == ((64, 0), False)
    assert len(_kernel_key(plan_attention(*qkv()), 0)) == 6  # every other kernel's key
    p = call_params(128, False, "bottom_right", window=(64, 0))
    assert (p["block_n"], p["window_left"], p["window_right"], p["align"]) == ("128", "64", "0",
                                                                               "bottom_right")
    capped = plan_attention(*qkv(), softcap=30.0, scale=0.125)
    assert math.isclose(capped.scale_log2, 30.0 * LOG2E)
    assert math.isclose(capped.softcap_scale, 0.125 / 30.0)


@pytest.mark.parametrize("kw,needle", [
    ({"window": (-2, 0)}, "attention: window: (-2, 0): a reach below -1"),
    ({"window": (4,)}, "attention: window: (4,); pass (left, right)"),
    ({"window": (1 << 29, 0)}, "attention: window: (536870912, 0): a reach over 268435456"),
    ({"window": (1.5, 0)}, "attention: window: (1.5, 0); pass (left, right)"),
    ({"window": "left"}, "attention: window: 'left'; pass (left, right)"),
    ({"window": (True, 0)}, "attention: window: (True, 0); pass (left, right)"),
    ({"softcap": 0.0}, "attention: softcap: 0.0; pass a positive finite float"),
    ({"softcap": -30.0}, "attention: softcap: -30.0; pass a positive finite float"),
    ({"softcap": float("inf")}, "attention: softcap: inf; pass a positive finite float"),
    ({"softcap": True}, "attention: softcap: True; pass a positive finite float"),
])
def test_bad_window_and_softcap_get_one_line_naming_them(kw, needle):
    with pytest.raises(AttentionArgumentError) as info:
        plan_attention(*qkv(), **kw)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_the_causal_order_is_chosen_from_the_windows_trips():
    """A window's tiles cost about alike: the order the call chooses from the window's trips
    leaves the busiest CTA near the mean, where causal trips would misjudge the costs."""
    b = LoopBounds(causal=True, block_m=128, block_n=128, window_left=1024)
    trips = b.trip_counts((16384, 16384))
    order = choose(trips, bh=32, grid=132, np=np)
    load = busiest(trips, bh=32, grid=132, order=order, np=np)
    mean = (sum(trips) + len(trips)) * 32 / 132
    assert load / mean < 1.1


def test_the_schedule_refuses_a_right_reach_with_the_causal_mask():
    from pipeline_core.errors import ProgramError
    with pytest.raises(ProgramError, match="window_right"):
        compile_named(NAME, params={"causal": "true", "window_right": "0"},
                      target_args={"stages": "2"})


def test_every_windowed_kernel_guards_rows_with_no_key_yet():
    """A row whose keys begin past the first visited block sees none there: the guard keeps
    its exponentials 0 (not NaN), top-left and bottom-right alike."""
    for causal, window in itertools.product((False, True), ((16, 0), (300, -1))):
        c = compile_named(NAME, params=window_params(128, causal, window),
                          target_args={"stages": "2"})
        assert "PackP::later, true>(sacc" in emit_attention(c)

