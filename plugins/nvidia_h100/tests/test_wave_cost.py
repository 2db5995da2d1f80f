"""The wave model's ranking (wave_cost.py) and the call's switch to it (Tuning.wave_model).

What users would notice if it broke: a shape that does not fill the SMs runs a tile whose last
wave is mostly idle, or a split whose reduction costs more than it balances; a large shape loses
the tile that is at cuBLAS; the same shape picks differently from one call to the next; the
ablation's "old choice" is not the previous rule; a pick the variant cannot build.
"""
from __future__ import annotations

import itertools
import math

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core_nvidia_h100 import decompose, wave_cost  # noqa: E402
from pipeline_core_nvidia_h100.autotune import Candidate, direct_store, takes  # noqa: E402
from pipeline_core_nvidia_h100.gemm_call import (TensorInfo, Tuning,  # noqa: E402
                                                 split_count)
from pipeline_core_nvidia_h100.warpspecialized import GemmVariant  # noqa: E402

SMS = 132

#: (M, N, K, dtype, off_line) -> (BM, BN, consumers, stages, splits), "pingpong" after them for
#: the ping-pong kernel: the benchmark's shapes (benchmarks/gemm_speed.py), each pinned with the
#: model's reason in the comment.
PICKS = {
    # large, many waves: 128x192 in ping-pong (1.01 the rate of 128x256) quantizes as well
    # (8192^3: 20.85 waves of it, 15.5 of 128x256)
    (8192, 8192, 8192, "bf16", False): (128, 192, 2, 4, 1, "pingpong"),
    (8192, 28672, 4096, "bf16", False): (128, 192, 2, 4, 1, "pingpong"),
    # 3.88 waves of 128x256 against 5.33 of 128x192: the last round's idle SMs decide
    (4096, 4096, 4096, "bf16", False): (128, 256, 2, 4, 1),
    (4000, 4000, 4000, "bf16", False): (128, 256, 2, 4, 1),
    (4097, 4095, 4096, "bf16", False): (128, 256, 2, 4, 1),  # 528 tiles: 4.0 waves
    # 2.42 waves of 128x256 (three rounds) against 1.94 of 256x160 (two, at 0.98 the rate);
    # rows off the line keep the tiles of 128x256's area and more
    (2000, 5000, 3000, "bf16", True): (256, 160, 2, 4, 1),
    (2000, 5000, 3072, "bf16", False): (256, 160, 2, 4, 1),
    # 3.39 waves of 128x256 against 4.55 of 128x192 in ping-pong (6.79 of 128x128)
    (512, 28672, 4096, "bf16", False): (128, 192, 2, 4, 1, "pingpong"),
    # 10.2 waves of 128x256 (last 0.18 full) against 13.6 of 128x192 in ping-pong
    (3000, 14336, 4096, "bf16", False): (128, 192, 2, 4, 1, "pingpong"),
    # small M: the bandwidth-bound tiles at eight stages, priced by the bytes they move (a
    # split's partials counted); at M 128, 64x128 ties 128x64 (128 tiles each) and goes first;
    # at M <= 64, 64x64 fills the SMs with no split (or half 64x128's)
    (128, 8192, 8192, "bf16", False): (64, 128, 1, 8, 1),
    (16, 8192, 8192, "bf16", False): (64, 64, 1, 8, 1),
    (1, 4096, 4096, "bf16", False): (64, 64, 1, 8, 2),
    (16, 14336, 4096, "bf16", False): (64, 128, 1, 8, 1),  # 112 tiles: no split either way
    # rows off the line, but 32 tiles of 128x256 leave L2 to spare: every tile competes, and
    # a split's fixed time (SPLIT_FIXED_S) keeps 64 whole 128x128 tiles
    (1000, 1000, 999, "bf16", True): (128, 128, 2, 4, 1),
    (1000, 2000, 1000, "bf16", True): (128, 128, 2, 4, 1),
    (500, 4000, 2000, "bf16", True): (128, 128, 2, 4, 1),
    (512, 512, 8192, "bf16", False): (128, 128, 2, 4, 8),  # 16 tiles, 128 K tiles: split
    # fp8: 192x128 sustains 128x256's rate there, and 13.6 waves fill better than 10.2
    (3000, 14336, 4096, "e4m3", False): (192, 128, 3, 4, 1),
    (1000, 4096, 4096, "e4m3", False): (128, 256, 2, 4, 1),  # 128 tiles: one wave
    (8192, 8192, 8192, "e4m3", False): (128, 256, 2, 4, 1),
}


def _key(c: Candidate, splits: int) -> tuple[int | str, ...]:
    return (c.bm, c.bn, c.consumers, c.stages, splits) + (("pingpong",) if c.pingpong else ())


@pytest.mark.parametrize("shape", sorted(PICKS))
def test_pick_per_shape(shape: tuple[int, int, int, str, bool]) -> None:
    m, n, k, dtype, off_line = shape
    best = wave_cost.rank(m, n, k, dtype, SMS, off_line=off_line)[0]
    assert _key(best.candidate, best.splits) == PICKS[shape]
    assert best.candidate.split_k == (best.splits > 1)
    assert wave_cost.pick(m, n, k, dtype, SMS, off_line=off_line) == best.candidate


def test_rank_is_sorted_and_reports_waves() -> None:
    ranked = wave_cost.rank(2000, 5000, 3000, "bf16", SMS)
    assert [r.seconds for r in ranked] == sorted(r.seconds for r in ranked)
    big = next(r for r in ranked if (r.candidate.bm, r.candidate.bn) == (128, 256))
    assert big.waves == pytest.approx(320 / SMS)  # 16 x 20 tiles: 2.42 waves
    assert big.fill == pytest.approx(56 / SMS)  # the last round: 56 of 132 SMs busy
    assert len({(r.candidate, r.splits) for r in ranked}) == len(ranked)


def test_split_is_priced_not_forced() -> None:
    """A split is the plan's own count (gemm_call.split_count) and competes with its unsplit
    self: taken at 1x4096x4096 (64 tiles of 64x64, 64 K tiles), not where the tiles fill the
    SMs."""
    ranked = wave_cost.rank(1, 4096, 4096, "bf16", SMS)
    assert ranked[0].splits == split_count(4096 // ranked[0].candidate.bn, 4096 // 64, SMS) == 2
    assert any(r.splits == 1 for r in ranked)
    assert all(r.splits == 1 for r in wave_cost.rank(8192, 8192, 8192, "bf16", SMS))
    assert all(r.splits == 1 for r in wave_cost.rank(1, 4096, 4096, "bf16", SMS,
                                                     may_split=False))
    assert all(r.splits == 1 for r in wave_cost.rank(1, 4096, 4096, "bf16", SMS, batch=4))


def test_more_k_pays_the_fixed_costs_less() -> None:
    """K enters the model: the same tiles cost more per K tile where K is short (the ring's
    fill and the epilogue are paid per tile), and a split's reduction makes a split on a short
    K lose to the unsplit tile that a long K splits."""
    c, rate = wave_cost.RATES["16bit"][0]
    short = wave_cost.cost(c, rate, 1, 4096, 4096, 512, "bf16", SMS)
    long = wave_cost.cost(c, rate, 1, 4096, 4096, 8192, "bf16", SMS)
    assert short.seconds * 16 > long.seconds
    assert wave_cost.cost(c, rate, 2, 1000, 1000, 256, "bf16", SMS).seconds > \
        wave_cost.cost(c, rate, 1, 1000, 1000, 256, "bf16", SMS).seconds


def test_off_line_keeps_the_largest_tiles() -> None:
    off = {(r.candidate.bm, r.candidate.bn)
           for r in wave_cost.rank(2000, 5000, 3000, "bf16", SMS, off_line=True)}
    assert off == {(128, 256), (256, 128), (256, 160)}
    on = {(r.candidate.bm, r.candidate.bn) for r in wave_cost.rank(2000, 5000, 3000, "bf16", SMS)}
    assert {(128, 128), (128, 192), (64, 256)} <= on - off


def test_pure_and_deterministic() -> None:
    first = wave_cost.rank(3000, 14336, 4096, "e4m3", SMS)
    assert first == wave_cost.rank(3000, 14336, 4096, "e4m3", SMS)
    h100 = wave_cost.rank(3000, 14336, 4096, "e4m3", 114)  # the SM count is an argument
    assert h100[0].waves != first[0].waves


def test_unknown_sm_count_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^sms: 0; .*SM count"):
        wave_cost.rank(128, 128, 128, "bf16", 0)
    assert decompose.ranked(128, 128, 128, GemmVariant(), 0) == Candidate()


@pytest.mark.parametrize("shape", sorted(PICKS))
def test_every_pick_builds_for_its_variant(shape: tuple[int, int, int, str, bool]) -> None:
    """The pick fits its variant's shared memory (with the TMA store or, failing that, the
    direct store the plan then takes): decompose.ranked never falls back on these shapes."""
    m, n, k, dtype, off_line = shape
    v = GemmVariant(dtype=dtype, tails=True, store="tma",
                    scale="tensor" if dtype == "e4m3" else "none")
    c = decompose.ranked(m, n, k, v, SMS, off_line=off_line)
    assert takes(c, v) or takes(c, direct_store(v))
    assert c == wave_cost.pick(m, n, k, dtype, SMS, off_line=off_line)


def test_switch_off_is_the_previous_rule() -> None:
    """Tuning.wave_model (on by default) picks the model's ranking; off, decompose.choose
    exactly as before (the ablation's old choice): they differ on fp8 3000x14336x4096."""
    assert Tuning().wave_model
    v = GemmVariant(dtype="e4m3", scale="tensor", tails=True, store="tma")
    assert decompose.ranked(3000, 14336, 4096, v, SMS).bm == 192
    assert decompose.choose(3000, 14336, 4096, v, SMS, stream_k=False).bm == 64


def test_the_call_uses_the_switch() -> None:
    """The untuned call's plan (matmul_call.plan_infos, then decompose.for_plan) follows
    Tuning.wave_model: on, the model's fp8 tile; off, the previous rule's."""
    from pipeline_core_nvidia_h100 import matmul_call as mm

    def info(shape: tuple[int, ...], strides: tuple[int, ...], dtype: str) -> TensorInfo:
        return TensorInfo(shape=shape, strides=strides, dtype=dtype, ptr=0)

    a, b = info((3000, 4096), (4096, 1), "e4m3"), info((4096, 14336), (1, 4096), "e4m3")
    scales = (info((), (), "fp32"), info((), (), "fp32"))
    base = mm.plan_infos(a, b, None, None, "bf16", None, SMS, Tuning(), scales=scales)
    on = decompose.for_plan(base, SMS, stream_k=False, model=Tuning().wave_model)
    off = decompose.for_plan(base, SMS, stream_k=False, model=False)
    assert (on.bm, on.bn, off.bm, off.bn) == (192, 128, 64, 256)


SIZES = (1, 17, 100, 128, 129, 1000, 2000, 3000, 5000, 8192)


@pytest.mark.parametrize("dtype,a_major,b_major,batch",
                         [("bf16", "k", "k", "none"), ("fp16", "mn", "k", "none"),
                          ("bf16", "k", "mn", "b"), ("e4m3", "k", "k", "none")])
def test_every_ranked_pick_builds_and_splits_as_the_plan(dtype: str, a_major: str,
                                                         b_major: str, batch: str) -> None:
    """Over a grid of shapes and variants the ranked pick validates for the variant (or its
    direct store), is the same on a second call, and splits only where the plan's own count
    (split_count) does and the kernel may split (not batched)."""
    v = GemmVariant(dtype=dtype, a_major=a_major, b_major=b_major, tails=True, batch=batch,
                    out_dtype="bf16", scale="tensor" if dtype == "e4m3" else "none")
    count = 1 if batch == "none" else 4
    for m, n, k in itertools.product(SIZES, SIZES, (64, 4096)):
        c = decompose.ranked(m, n, k, v, SMS, batch=count)
        assert takes(c, v) or takes(c, direct_store(v)), (m, n, k, c)
        assert c == decompose.ranked(m, n, k, v, SMS, batch=count)
        if c.split_k:
            assert batch == "none"
            tiles = math.ceil(m / c.bm) * math.ceil(n / c.bn)
            assert split_count(tiles, math.ceil(k / (128 if dtype == "e4m3" else 64)), SMS) > 1


def test_a_pick_the_variant_cannot_take_falls_to_the_next(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Where the cheapest candidate does not build for the variant, the next one in the
    ranking runs (not the default tile)."""
    v = GemmVariant(dtype="e4m3", scale="tensor", tails=True, store="tma")
    ranked = wave_cost.rank(3000, 14336, 4096, "e4m3", SMS)
    top = ranked[0].candidate
    monkeypatch.setattr(decompose, "takes", lambda c, variant: c != top)
    assert decompose.ranked(3000, 14336, 4096, v, SMS) == ranked[1].candidate != Candidate()


#: (M, N, K) -> the tile under no epilogue, a light one (bias, relu) and a heavy one (gelu,
#: silu): a cooperative tile's fused epilogue runs after its mainloop, a ping-pong consumer's
#: under the other's (wave_cost.EPILOGUE_K_TILES)
EPILOGUE_PICKS = {
    # 7.76 waves of 128x256 against 10.4 of 128x192: plain, the quantization keeps 128x256
    # (ping-pong measured 1.00 of it); with a bias or an activation ping-pong's hidden
    # epilogue wins (measured 1.11-1.18)
    (4096, 8192, 2048): ("128x256", "128x192pp", "128x192pp"),
    (4096, 4096, 1024): ("128x256", "128x192pp", "128x192pp"),
    # 3.88 waves against 5.33: the idle last round outweighs even gelu's epilogue (ping-pong
    # measured 0.95 of 128x256 with it)
    (4096, 4096, 4096): ("128x256", "128x256", "128x256"),
    (16384, 1024, 4096): ("128x256", "128x256", "128x256"),
    # ping-pong already, whatever the epilogue
    (8192, 8192, 8192): ("128x192pp", "128x192pp", "128x192pp"),
}


@pytest.mark.parametrize("shape", sorted(EPILOGUE_PICKS))
def test_a_fused_epilogue_is_priced_on_the_cooperative_tiles_only(shape) -> None:
    m, n, k = shape
    got = []
    for weight in ("none", "light", "heavy"):
        c = wave_cost.pick(m, n, k, "bf16", SMS, epilogue=weight)
        got.append(f"{c.bm}x{c.bn}{'pp' if c.pingpong else ''}")
    assert tuple(got) == EPILOGUE_PICKS[shape]
    # the ping-pong tile's own price does not move with the epilogue
    pp = [x for w in ("none", "heavy") for x in wave_cost.rank(m, n, k, "bf16", SMS, epilogue=w)
          if x.candidate.pingpong]
    assert pp[0].seconds == pp[1].seconds


def test_the_epilogue_weight_follows_the_variant_and_reaches_the_call() -> None:
    assert [wave_cost.epilogue_weight(b, a) for b, a in (
        ("none", "none"), ("bf16", "none"), ("none", "relu"), ("bf16", "relu"),
        ("none", "gelu"), ("fp32", "silu"))] == ["none", "light", "light", "light", "heavy",
                                                 "heavy"]
    plain = GemmVariant(a_major="k", b_major="k")
    fused = GemmVariant(a_major="k", b_major="k", bias="bf16", activation="gelu")
    assert decompose.ranked(4096, 8192, 2048, plain, SMS).pingpong is False
    assert decompose.ranked(4096, 8192, 2048, fused, SMS).pingpong is True
