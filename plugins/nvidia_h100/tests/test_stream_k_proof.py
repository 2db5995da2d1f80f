"""Stream-K in the proof (docs/guide/agents.md, "Cross-CTA reductions"; docs/guide/matmul.md,
"Stream-K"): ``warpspecialized-gemm -p stream_k=true`` declares its cross-CTA reduction and
its trip rule (``StreamKTrips``) says which CTAs cover which K ranges of each tile and in which
order the tile's last CTA adds their slices; the core proves the hand-off's steps over the
rule's CTA counts and the ranges and order over the rule's sample problems.  Each mutation
below is refused: the fixup's acquire or release fence dropped, its order broken, a CTA's range
overlapping or leaving a gap, the counter's count off."""
from __future__ import annotations

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.check.verdict import HazardKind as H  # noqa: E402
from pipeline_core.plan import StepKind  # noqa: E402
from pipeline_core.plugins import default_host  # noqa: E402
from pipeline_core.proof import require_safe  # noqa: E402
from pipeline_core.testing import run_cli  # noqa: E402

from pipeline_core_nvidia_h100.gemm_tiles import (STREAM_K_SAMPLES, StreamKTrips,  # noqa: E402
                                                  stream_k_tiles)


def _stream_k(**params: str):
    return compile_named("warpspecialized-gemm", target="h100", host=default_host(),
                         params={"stream_k": "true", **params})


@pytest.fixture(scope="module")
def sk():
    return _stream_k()


def proven(c, plan):
    return require_safe(attrs.evolve(c, plan=plan, proof=None), None, allow_unsafe=True)


def hazards(c) -> set:
    return {v.kind for v in c.proof.verdict.violations}


def messages(c) -> str:
    return "\n".join(v.message for v in c.proof.verdict.violations)


def _without(c, kind: StepKind):
    return attrs.evolve(c.plan, programs=[
        attrs.evolve(p, finish=tuple(s for s in p.finish if s.kind != kind))
        for p in c.plan.programs])


def _rule(c, cls):
    r = c.plan.trip_rule
    return attrs.evolve(c.plan, trip_rule=cls(block_m=r.block_m, block_n=r.block_n,
                                              block_k=r.block_k))


def test_stream_k_is_proven_with_its_rules_fixups(sk):
    res = run_cli(["check", "warpspecialized-gemm", "-p", "stream_k=true"])
    assert res.exit_code == 0, res.stderr
    assert "SAFE" in res.stdout and "cross-CTA reduction stream_k" in res.stdout
    assert "2 and 3 and 4 splits" in res.stdout and "the trip rule's fixups" in res.stdout
    assert isinstance(sk.plan.trip_rule, StreamKTrips)
    assert [s.kind for s in sk.plan.programs[1].finish] == [
        StepKind.SLICE_STORE, StepKind.RELEASE_FENCE, StepKind.COUNT_ARRIVE,
        StepKind.COUNT_ACQUIRE, StepKind.SLICE_READ, StepKind.COUNT_RESET]


def test_the_fixups_acquire_dropped_is_refused(sk):
    c = proven(sk, _without(sk, StepKind.COUNT_ACQUIRE))
    assert H.DUPLICATE_PRODUCT in hazards(c)


def test_the_release_fence_dropped_is_refused(sk):
    c = proven(sk, _without(sk, StepKind.RELEASE_FENCE))
    assert H.SMEM_RAW in hazards(c) and "not followed by a RELEASE_FENCE" in messages(c)


class _Swapped(StreamKTrips):
    """The fixup adds a tile's first two slices the other way round."""

    def fixup_order(self, p, tile, last):
        order = super().fixup_order(p, tile, last)
        return [order[1], order[0], *order[2:]] if len(order) > 1 else order


class _Skipped(StreamKTrips):
    """The fixup leaves out the tile's last slice."""

    def fixup_order(self, p, tile, last):
        order = super().fixup_order(p, tile, last)
        return order[:-1] if len(order) > 1 else order


class _OwnFirst(StreamKTrips):
    """The last arriver adds its own slice first (kept in registers), then the others."""

    def fixup_order(self, p, tile, last):
        order = super().fixup_order(p, tile, last)
        return [last, *(c for c in order if c != last)] if last in order else order


@pytest.mark.parametrize("cls, kind, words", [
    (_Swapped, H.ADD_ORDER, "not in K order"),
    (_OwnFirst, H.ADD_ORDER, "not in K order"),
    (_Skipped, H.MISSING_PRODUCT, "the fixup skips slice")])
def test_a_fixup_order_broken_is_refused(sk, cls, kind, words):
    c = proven(sk, _rule(sk, cls))
    assert kind in hazards(c) and words in messages(c)


def _ranges_moved(begin_by: int, end_by: int) -> type:
    """The rule with each CTA's range moved: its begin by ``begin_by`` K tiles (-1: it
    overlaps the previous CTA's), its end by ``end_by`` (-1: a K tile between two CTAs is
    nobody's)."""
    class Moved(StreamKTrips):
        @staticmethod
        def cta_range(p, cta):
            begin, end = StreamKTrips.cta_range(p, cta)
            return max(0, begin + begin_by), max(begin, end + end_by)
    return Moved


@pytest.mark.parametrize("cls, kind, words", [
    (_ranges_moved(-1, 0), H.DUPLICATE_PRODUCT, "in two CTAs' ranges"),
    (_ranges_moved(0, -1), H.MISSING_PRODUCT, "in no CTA's range")])
def test_a_range_overlapping_or_leaving_a_gap_is_refused(sk, cls, kind, words):
    c = proven(sk, _rule(sk, cls))
    assert kind in hazards(c) and words in messages(c)


class _Short(StreamKTrips):
    """The counter's count one short of the tile's CTAs."""

    def arrivals(self, p, tile):
        n = super().arrivals(p, tile)
        return n - 1 if n > 1 else n


def test_a_count_short_of_the_tiles_ctas_is_refused(sk):
    c = proven(sk, _rule(sk, _Short))
    assert H.SMEM_RAW in hazards(c) and "not yet published" in messages(c)


def test_the_rules_units_cover_every_tile_once_on_every_sample():
    rule = StreamKTrips(block_m=128, block_n=256, block_k=64)
    for p in STREAM_K_SAMPLES:
        tiles, kt, ctas, sk = p
        covered: dict[int, list[tuple[int, int]]] = {}
        for c in range(ctas):
            for t, k0, n in rule.units(p, c):
                covered.setdefault(t, []).append((k0, k0 + n))
        assert sorted(covered) == list(range(tiles))
        for t, ranges in covered.items():
            ranges.sort()
            assert ranges[0][0] == 0 and ranges[-1][1] == kt
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        # every CTA's share within one K tile of the others
        shares = [sum(n for t, _, n in rule.units(p, c) if t >= tiles - sk) for c in range(ctas)]
        assert max(shares) - min(shares) <= 1


@pytest.mark.parametrize("tiles, k_tiles, ctas, want", [
    (320, 47, 132, 56), (448, 64, 132, 52), (264, 64, 132, 0), (3, 2, 132, 0), (3, 60, 132, 3)])
def test_the_hybrid_shares_the_last_partial_wave(tiles, k_tiles, ctas, want):
    assert stream_k_tiles(tiles, k_tiles, ctas) == want


def test_stream_k_with_split_k_is_refused_in_one_line():
    res = run_cli(["check", "warpspecialized-gemm", "-p", "stream_k=true", "-p", "split_k=true"])
    assert res.exit_code != 0
    assert "-p stream_k: true and -p split_k=true don't combine" in res.stderr


def _info(rows: int, cols: int, dtype: str = "bf16"):
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo
    return TensorInfo(shape=(rows, cols), strides=(cols, 1), dtype=dtype, ptr=0)


def test_the_call_plans_stream_k_where_the_decomposition_asks_for_it():
    """2000x5000x3000 (rows off the 128-byte line: 128x256 tiles, 320 of them on 132 SMs),
    stream-K allowed (``Tuning.stream_k``): the decomposition asks for it, the plan shares the
    last 56 tiles, stores directly, and the kernel takes the workspace, the counters and the
    shared tiles' count."""
    from pipeline_core_nvidia_h100 import decompose
    from pipeline_core_nvidia_h100.gemm_call import Tuning, plan_call
    from pipeline_core_nvidia_h100.gemm_signature import gemm_signature
    from pipeline_core_nvidia_h100.matmul_call import plan_infos

    a, b = _info(2000, 3000), _info(3000, 5000)
    c = decompose.for_plan(plan_call(a, b, sms=132), 132)
    assert c.stream_k and (c.bm, c.bn) == (128, 256)
    plan = plan_infos(a, b, None, "gelu", None, None, 132, Tuning(stream_k=True), c=c)
    assert (plan.sk_tiles, plan.grid, plan.splits) == (56, 132, 1)
    assert plan.variant.stream_k and plan.variant.store == "direct"
    assert gemm_signature(plan.variant).names[-3:] == ("ws", "counters", "sk_tiles")
    # not asked, or off (the default): the data-parallel plan with the TMA store
    for p in (plan_call(a, b, sms=132), plan_infos(a, b, None, "gelu", None, None, 132, c=c),
              plan_call(a, b, sms=132, stream_k=True)):
        assert p.sk_tiles == 0 and not p.variant.stream_k and p.variant.store == "tma"
    # waves that divide evenly share nothing, even when asked
    even = plan_call(_info(4224, 4096), _info(4096, 1024), sms=132, stream_k=True,
                     tuning=Tuning(stream_k=True))  # 33 x 4
    assert even.sk_tiles == 0 and not even.variant.stream_k


@pytest.mark.parametrize("shape", [(2000, 5000, 3000), (512, 28672, 4096), (4000, 4000, 4000),
                                   (3000, 14336, 4096)])
def test_the_call_never_picks_stream_k_by_default(shape):
    """Stream-K ran 0.76-0.87x the data-parallel pick on the H200 on these four shapes
    (benchmarks/gemm_streamk.py): the untuned call's candidate and plan are data-parallel,
    though the wave model alone (stream-K allowed) takes it on three of them."""
    from pipeline_core_nvidia_h100 import decompose
    from pipeline_core_nvidia_h100 import matmul_call as mm
    from pipeline_core_nvidia_h100.gemm_call import Tuning

    m, n, k = shape
    a, b = _info(m, k), _info(k, n)
    base = mm.plan_infos(a, b, None, None, None, None, 132, mm.TUNING)
    c = decompose.for_plan(base, 132, mm.TUNING.stream_k)
    plan = mm.plan_infos(a, b, None, None, None, None, 132, mm.TUNING, c)
    assert not mm.TUNING.stream_k and mm.TUNING == Tuning()
    assert not c.stream_k and plan.sk_tiles == 0 and not plan.variant.stream_k


@pytest.mark.parametrize("extra, words", [
    (["-p", "release_lag=2"], "-p release_lag: 2 with -p stream_k=true: a stream-K unit may "
                              "visit a single K tile"),
    (["-p", "store=tma"], "-p stream_k: true and -p store=tma don't combine"),
    (["-p", "cluster=2"], "-p stream_k: true and -p cluster=2 don't combine")])
def test_what_stream_k_cannot_take_is_refused_in_one_line(extra, words):
    res = run_cli(["check", "warpspecialized-gemm", "-p", "stream_k=true", *extra])
    assert res.exit_code != 0 and words in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
