"""Output tiles of different K-tile counts: the plan's loop bounds (LoopBounds: attention's causal
bounds and sequence tails), the proof of a persistent CTA whose consecutive output tiles visit
different counts, 0 included, and the refusal of an agent that runs a tile the others skip
(docs/guide/agents.md, "Output tiles of different lengths")."""
from __future__ import annotations

import attrs
import pytest

import agents_fixtures as fx
from pipeline_core.agents.prove import prove_plan, tile_counts, trip_sequences
from pipeline_core.agents.timing import AgentMachine, bounded, simulate
from pipeline_core.check.mutate import agent_mutations
from pipeline_core.check.verdict import HazardKind as H
from pipeline_core.plan import LoopBounds


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
    exactly the blocks where some row misses some key (the diagonal's, the key tail's)."""
    b = LoopBounds(causal=causal, block_m=bm, block_n=bn, align=align)
    for i in range(-(-sq // bm)):
        visible, masked = oracle(b, i, sq, sk)
        trips = b.trips(i, sq, sk)
        assert set(range(trips)) == visible
        assert {j for j in range(trips) if b.masked(i, j, sq, sk)} == masked
        assert set(range(b.first_masked(i, sq, sk), trips)) == masked


def test_causal_visits_about_half_the_blocks_and_bottom_right_has_empty_query_tiles():
    b = LoopBounds(causal=True, block_m=128, block_n=128)
    assert [b.trips(i, 1024, 1024) for i in range(8)] == [1, 2, 3, 4, 5, 6, 7, 8]
    late = attrs.evolve(b, align="bottom_right")
    # 1024 queries on 300 keys, aligned bottom-right: the first query blocks see no key
    assert [late.trips(i, 1024, 300) for i in range(8)] == [0, 0, 0, 0, 0, 1, 2, 3]


def bounded_plan(stages: int = 4):
    spec = attrs.evolve(fx.attention_spec(), bounds=LoopBounds(causal=True, block_m=128,
                                                               block_n=128, masked_ops=(4, 7)))
    from pipeline_core.agents.inject import lower_agents
    return lower_agents(fx.attention_body(), fx.attention_edges(2, stages), fx.SYNC,
                        stages=stages, spec=spec)


def verdict(plan):
    return prove_plan(plan, fx.attention_body(), fx.attention_edges(2, plan.stages), fx.SYNC,
                      name="attention", names=fx.NAMES)


def test_a_plan_with_bounds_is_proven_over_tiles_of_different_counts():
    """Empty query tiles between and before others, a tile shorter than the ring before an empty
    one and a longer one: SAFE.  A plan without bounds keeps its runs (the GEMM's proofs)."""
    plan = bounded_plan(stages=4)
    assert plan.bounds is not None and plan.bounds.masked_ops == (4, 7)
    assert trip_sequences(plan) == [(3, 0, 2), (0, 0, 1), (1, 5), (3, 0, 5)]
    v = verdict(plan)
    assert v.safe and v.model["trip_sequences"] == [[3, 0, 2], [0, 0, 1], [1, 5], [3, 0, 5]]
    assert trip_sequences(fx.attention_plan()) == []
    assert "trip_sequences" not in verdict(fx.attention_plan()).model
    assert trip_sequences(fx.two_ring_plan()) == []


@pytest.mark.parametrize("agent", ["producer", "consumer0", "consumer1"])
def test_an_agent_that_runs_an_empty_tile_the_others_skip_is_refused(agent, monkeypatch):
    """One side runs its loop once on a query tile with no K tile (min_trips 1), the other
    skips it: the rings' positions diverge, and the next output tile hangs (cudnn-frontend
    PR #1069).  The runs of one count alone (without 0) do not see it; the tiles of different
    counts do."""
    import pipeline_core.agents.prove as prove

    plan = bounded_plan()
    clamp = next(m for m in agent_mutations(plan, ("clamp_trips",)) if m.agent == agent)
    bad = clamp.apply(plan)
    assert bad.program(agent).min_trips == 1
    v = verdict(bad)
    assert v.first.kind == H.DEADLOCK
    monkeypatch.setattr(prove, "tile_counts", lambda p: [c for c in tile_counts(p) if c])
    v = verdict(bad)
    assert v.first.kind == H.DEADLOCK and "output tile" in v.first.site.op + v.first.message
    monkeypatch.setattr(prove, "trip_sequences", lambda p: [])
    assert verdict(bad).safe  # what the sequences add: nothing else sees the empty tile


@pytest.mark.parametrize("agent", ["producer", "consumer0", "consumer1"])
@pytest.mark.parametrize("delta", [1, -1])
def test_an_agent_whose_bound_is_off_by_one_is_refused(agent, delta):
    plan = bounded_plan()
    skew = next(m for m in agent_mutations(plan, ("skew_trips",))
                if m.agent == agent and m.delta == delta)
    bad = skew.apply(plan)
    assert bad.program(agent).trip_delta == delta
    v = verdict(bad)
    assert v.first.kind == H.DEADLOCK
    assert any(x.kind == H.DEADLOCK and "diverge" in x.message for x in v.violations)


def test_trip_mutations_are_offered_only_on_plans_with_bounds():
    cats = ("clamp_trips", "skew_trips")
    assert not list(agent_mutations(fx.attention_plan(), cats))
    assert not list(agent_mutations(fx.two_ring_plan(), cats))
    assert [(m.category, m.agent, m.delta) for m in agent_mutations(bounded_plan(), cats)] == [
        (c, a, d) for a in ("producer", "consumer0", "consumer1")
        for c, d in (("clamp_trips", 1), ("skew_trips", 1), ("skew_trips", -1))]


def test_the_timing_model_runs_each_output_tile_for_its_own_count():
    """Causal: the output tiles of one head visit 1 .. n blocks, about half the square."""
    plan = bounded_plan()
    body = fx.attention_body()
    machine = AgentMachine(copy_latency=100, copy_bytes_per_cycle=64)
    t = bounded(plan, body, machine, 1024, 1024)
    assert t.tiles == 36
    assert t.cycles == sum(simulate(plan, body, machine, n).cycles for n in range(1, 9))
    full = bounded(attrs.evolve(plan, bounds=attrs.evolve(plan.bounds, causal=False)), body,
                   machine, 1024, 1024)
    assert full.tiles == 64 and 0.45 < t.cycles / full.cycles < 0.65
    with pytest.raises(ValueError, match="no loop bounds"):
        bounded(fx.attention_plan(), body, machine, 1024, 1024)
