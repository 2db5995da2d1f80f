"""The untuned call's decomposition (decompose.py): which tile, consumers and split a shape runs.

What users would notice if it broke: a shape whose 128x256 tiles leave the last wave mostly idle
keeps them; a one-row GEMM computes a 128-row tile of zeros; a chosen tile the variant's layout
cannot take fails to build; large shapes lose the tile that is at cuBLAS on them.
"""
from __future__ import annotations

import itertools
import math

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core_nvidia_h100 import decompose  # noqa: E402
from pipeline_core_nvidia_h100.autotune import Candidate, direct_store, takes  # noqa: E402
from pipeline_core_nvidia_h100.gemm_call import (TensorInfo, TileShape, Tuning,  # noqa: E402
                                                 plan_call, split_count)
from pipeline_core_nvidia_h100.warpspecialized import GemmVariant  # noqa: E402

SMS = 132
V = GemmVariant(tails=True, store="tma")


def _busy(c: Candidate, m: int, n: int) -> float:
    """The share of the last round's CTAs that have a tile (1.0: the waves divide evenly)."""
    tiles = math.ceil(m / c.bm) * math.ceil(n / c.bn)
    return tiles / (math.ceil(tiles / SMS) * SMS)


@pytest.mark.parametrize("shape", [(8192, 8192, 8192), (4096, 4096, 4096), (8192, 14336, 4096),
                                   (6144, 6144, 6144), (16384, 1024, 4096)])
def test_large_shapes_that_fill_the_machine_keep_the_128x256_tile(shape):
    assert decompose.choose(*shape, V, SMS) == Candidate()


@pytest.mark.parametrize("shape", [(512, 28672, 4096), (3000, 14336, 4096)])
def test_a_badly_quantizing_shape_gets_a_tile_that_fills_the_last_wave(shape):
    m, n, k = shape
    c = decompose.choose(m, n, k, V, SMS)
    assert c != Candidate()
    # the chosen tiles waste fewer SM-rounds than 128x256's, or share the last wave (stream-K)
    assert c.stream_k or _busy(c, m, n) > _busy(Candidate(), m, n) + 0.05
    # without stream-K, the wave model's smaller tile
    dp = decompose.wave_pick(m, n, 1, SMS)
    assert not dp.stream_k and _busy(dp, m, n) > _busy(Candidate(), m, n) + 0.05


@pytest.mark.parametrize("shape, want", [
    ((2000, 5000, 3000), True),    # 320 tiles of 128x256: 2.42 waves (off the line: 128x256)
    ((512, 28672, 4096), True),    # 448: 3.39 waves
    ((4000, 4000, 4000), False),   # 512: 3.88 waves, the last over half full
    ((8192, 8192, 8192), False),   # 2048: 15.5 waves, the last over half full
    ((16384, 16384, 1024), False),  # 8192 tiles: 62.06 waves, too many for the fixup to pay
    ((1024, 4096, 4096), False)])   # 128 tiles: under one wave (split-K's domain)
def test_stream_k_is_taken_where_the_last_wave_is_under_half_full_and_the_waves_few(shape,
                                                                                    want):
    c = decompose.choose(*shape, V, SMS, off_line=shape[2] == 3000)
    assert c.stream_k == want
    if want:
        tiles = math.ceil(shape[0] / c.bm) * math.ceil(shape[1] / c.bn)
        assert 0 < 2 * (tiles % SMS) < SMS
    batched = GemmVariant(tails=True, batch="ab")
    assert not decompose.choose(*shape, batched, SMS, batch=4).stream_k


@pytest.mark.parametrize("m", [1, 7, 16, 64])
def test_m_of_at_most_64_rows_runs_64_row_tiles_on_one_consumer(m):
    c = decompose.choose(m, 8192, 8192, V, SMS)
    assert (c.bm, c.consumers) == (64, 1)


def test_small_m_streams_b_through_the_deepest_ring_the_variant_fits(monkeypatch):
    """Eight stages where they fit (the bytes in flight bound a GEMM that reads B once); a
    variant whose shared memory takes only five gets five of the same tile, not the large
    default tile."""
    assert [(c.bm, c.bn, c.stages) for c in (decompose.choose(m, 8192, 8192, V, SMS)
                                              for m in (1, 16, 100, 128))] == [(64, 128, 8)] * 4
    monkeypatch.setattr(decompose, "takes", lambda c, v: c.stages <= 5)
    c = decompose.choose(128, 8192, 8192, V, SMS)
    assert (c.bm, c.bn, c.stages) == (64, 128, 5)


def test_a_short_m_splits_k_when_its_tiles_leave_the_sms_idle():
    c = decompose.choose(1, 4096, 4096, V, SMS)
    assert c.split_k
    plan = plan_call(TensorInfo(shape=(1, 4096), strides=(4096, 1), dtype="bf16", ptr=0),
                     TensorInfo(shape=(4096, 4096), strides=(1, 4096), dtype="bf16", ptr=0),
                     tile=TileShape(bm=c.bm, bn=c.bn), sms=SMS, tuning=Tuning())
    assert plan.splits > 1 and plan.grid * plan.splits > SMS // 2


def test_many_tiles_never_split_and_a_batched_kernel_never_splits():
    assert not decompose.choose(128, 8192, 8192, V, SMS).split_k  # 128 tiles of 64x128
    batched = GemmVariant(tails=True, batch="ab")
    assert not decompose.choose(1, 4096, 4096, batched, SMS, batch=4).split_k


def test_an_unknown_sm_count_runs_the_default_tile():
    assert decompose.choose(512, 28672, 4096, V, 0) == Candidate()


def test_the_cheaper_of_two_tiles_by_the_wave_model_is_picked():
    # 2 x 224 = 448 tiles of 128x256 are 4 rounds on 132 SMs; 128x128's 896 tiles are 7
    # rounds of half the work: 3.5 < 4 full rounds, so the smaller tile wins at its rate
    big, small = decompose.WAVE_TILES[0], decompose.WAVE_TILES[3]
    cost_big = decompose.wave_cost(*big, 512, 28672, 1, SMS)
    cost_small = decompose.wave_cost(*small, 512, 28672, 1, SMS)
    assert cost_small < cost_big
    assert decompose.wave_pick(512, 28672, 1, SMS) != big[0]


SIZES = (1, 17, 100, 128, 129, 1000, 2000, 3000, 5000, 8192)


@pytest.mark.parametrize("dtype,a_major,b_major,batch",
                         [("bf16", "k", "k", "none"), ("fp16", "mn", "k", "none"),
                          ("bf16", "k", "mn", "b"), ("e4m3", "k", "k", "none")])
def test_every_choice_builds_for_the_variant_and_is_deterministic(dtype, a_major, b_major, batch):
    """The chosen candidate's geometry validates for the variant (or its direct store), so the
    call never picks a kernel it cannot build; the same shape always gets the same choice."""
    v = GemmVariant(dtype=dtype, a_major=a_major, b_major=b_major, tails=True, batch=batch,
                    out_dtype="bf16", scale="tensor" if dtype == "e4m3" else "none")
    for m, n, k in itertools.product(SIZES, SIZES, (64, 4096)):
        c = decompose.choose(m, n, k, v, SMS, batch=1 if batch == "none" else 4)
        assert takes(c, v) or takes(c, direct_store(v)), (m, n, k, c)
        assert c == decompose.choose(m, n, k, v, SMS, batch=1 if batch == "none" else 4)
        if c.split_k:
            tiles = math.ceil(m / c.bm) * math.ceil(n / c.bn)
            assert split_count(tiles, math.ceil(k / (128 if dtype == "e4m3" else 64)), SMS) > 1


def test_rows_off_the_128_byte_line_keep_the_largest_tiles():
    """The wave model would take 128x128 for 2000x5000 (and 300x5000); on rows that straddle
    lines the smaller tiles lose most, so only the largest compete there."""
    assert decompose.choose(2000, 5000, 3000, V, SMS) == decompose.WAVE_TILES[3][0]  # 128x128
    off = decompose.choose(2000, 5000, 3000, V, SMS, off_line=True)
    assert off.bm * off.bn == 128 * 256


def test_a_plan_whose_rows_straddle_lines_where_they_lie_keeps_the_largest_tiles():
    """300x5000x3000 read where it lies (6000-byte rows: a copy into aligned rows would cost
    more than this GEMM, so none is made); the same shape in rows padded to 3072 is free."""
    def plan(stride):
        return plan_call(TensorInfo(shape=(300, 3000), strides=(stride, 1), dtype="bf16",
                                    ptr=0),
                         TensorInfo(shape=(3000, 5000), strides=(1, stride), dtype="bf16",
                                    ptr=0), sms=SMS)
    assert not plan(3000).staged
    off, on = decompose.for_plan(plan(3000), SMS), decompose.for_plan(plan(3072), SMS)
    assert off.bm * off.bn == 128 * 256
    assert off != on


def test_a_grouped_gemm_of_short_groups_runs_64_row_tiles():
    """DeepSeek-like: 256 experts over 32k tokens (128 rows a group) take 64x256; Mixtral-like
    (8 experts over 16k tokens) and groups along N keep 128x256; fp8 is not switched."""
    assert (decompose.grouped(32768, 256, "bf16", False).bm,
            decompose.grouped(32768, 256, "bf16", False).consumers) == (64, 1)
    assert decompose.grouped(16384, 8, "bf16", False) == Candidate()
    assert decompose.grouped(32768, 256, "bf16", True) == Candidate()
    assert decompose.grouped(32768, 256, "e4m3", False) == Candidate()
    assert decompose.grouped(0, 0, "bf16", False) == Candidate()
