"""Attention's trip rule (pipeline_core_schedules_attention/tiles.py, ``LoopBounds``): the KV
blocks each query block visits and the ones its softmax masks, checked against every (row, key)
pair; the rule as the core's TripRule (never uniform, so the proof of the non-causal kernel keeps
its runs of different counts; the analyze sample; the document); docs/guide/attention.md,
"Causal bounds and tails"."""
from __future__ import annotations

import attrs
import pytest

from pipeline_core.api import compile_named

from pipeline_core_schedules_attention.tiles import LoopBounds, plan_bounds


def oracle(bounds: LoopBounds, i: int, seq_q: int, seq_k: int) -> tuple[set[int], set[int]]:
    """(KV blocks with a key some row of query block i sees, those of them where some row does
    not see some key of the block), by enumerating every (row, key) pair."""
    off = seq_k - seq_q if bounds.align == "bottom_right" else 0
    rows = range(i * bounds.block_m, min((i + 1) * bounds.block_m, seq_q))
    visible, masked = set(), set()
    for j in range(-(-seq_k // bounds.block_n)):
        keys = range(j * bounds.block_n, (j + 1) * bounds.block_n)
        sees = {(r, k) for r in rows for k in keys
                if k < seq_k and (not bounds.causal or k <= r + off)}
        if sees:
            visible.add(j)
            if len(sees) < len(rows) * len(keys):
                masked.add(j)
    return visible, masked


CASES = [(causal, align, bm, bn, sq, sk)
         for causal in (False, True) for align in ("top_left", "bottom_right")
         for bm, bn in ((128, 128), (128, 64), (64, 128), (192, 80))
         for sq, sk in ((1, 1), (17, 17), (128, 128), (1000, 1000), (300, 1024), (1024, 300),
                        (129, 1))]


@pytest.mark.parametrize("causal,align,bm,bn,sq,sk", CASES)
def test_trips_and_masked_blocks_match_every_row_and_key(causal, align, bm, bn, sq, sk):
    """The visited blocks are 0 .. trips - 1 (none above the diagonal), the masked ones are
    exactly the blocks where some row misses some key (the diagonal's, the key tail's); the
    TripRule's per-problem answers are the per-tile ones."""
    b = LoopBounds(causal=causal, block_m=bm, block_n=bn, align=align)
    counts, firsts = b.trip_counts((sq, sk)), b.masked_trips((sq, sk))
    assert len(counts) == len(firsts) == -(-sq // bm)
    for i in range(-(-sq // bm)):
        visible, masked = oracle(b, i, sq, sk)
        trips = b.trips(i, sq, sk)
        assert trips == counts[i] and set(range(trips)) == visible
        assert {j for j in range(trips) if b.masked(i, j, sq, sk)} == masked
        assert set(range(b.first_masked(i, sq, sk), trips)) == masked
        assert firsts[i] == b.first_masked(i, sq, sk)


def test_causal_visits_about_half_the_blocks_and_bottom_right_has_empty_query_tiles():
    b = LoopBounds(causal=True, block_m=128, block_n=128)
    assert b.trip_counts((1024, 1024)) == (1, 2, 3, 4, 5, 6, 7, 8)
    late = attrs.evolve(b, align="bottom_right")
    # 1024 queries on 300 keys, aligned bottom-right: the first query blocks see no key
    assert late.trip_counts((1024, 300)) == (0, 0, 0, 0, 0, 1, 2, 3)


def test_the_sample_is_the_causal_square_and_none_without_the_mask():
    b = LoopBounds(causal=True, block_m=128, block_n=64, masked_ops=(4, 8))
    s = b.sample(8)
    assert s is not None and (s.key, s.numbers, s.names) == ("causal", {"seq": 512},
                                                             ("kv_blocks", "full_blocks"))
    assert s.trips == b.trip_counts((512, 512)) == (2, 4, 6, 8) and s.full == 8
    assert attrs.evolve(b, causal=False).sample(8) is None
    assert b.document() == {"causal": True, "block_m": 128, "block_n": 64, "align": "top_left",
                            "masked_ops": [4, 8]}


@pytest.mark.parametrize("causal", [False, True])
def test_the_rule_is_never_uniform_so_both_kernels_keep_their_proofs(causal):
    """The kernel sets each query tile's KT and FM from the rule, causal or not: both plans are
    proven over tiles of different counts, as before the rule left the core."""
    c = compile_named("flash-attention-fwd", params={"causal": str(causal).lower()},
                      target_args={"stages": "2"})
    b = plan_bounds(c)
    assert b is not None and not b.uniform and b.causal is causal
    assert c.proof.safe and [0, 0, 1] in c.proof.verdict.model["trip_sequences"]
    gemm = compile_named("warpspecialized-gemm")
    assert plan_bounds(gemm) is None  # the GEMM's rule is its raster, not attention's
