"""The trip-rule protocol (pipeline_core/tiles.py): a family's rule whose output tiles differ in
K-tile count has the proof run tiles of different counts back to back (0 among them) and catch
an agent that runs a tile the others skip; a uniform rule costs the proof nothing; the timing
model, the analyze report and the document read the rule; and the core names no family's rule
(docs/guide/agents.md, "Output tiles of different lengths")."""
from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest

import agents_fixtures as fx
import pipeline_core.tiles as tiles
from pipeline_core.agents.inject import lower_agents
from pipeline_core.agents.prove import prove_plan, tile_counts, trip_sequences
from pipeline_core.agents.timing import AgentMachine, each_tile, simulate
from pipeline_core.agents.views import agents_doc
from pipeline_core.check.mutate import agent_mutations
from pipeline_core.check.plan_edits import plan_edits
from pipeline_core.check.verdict import HazardKind as H
from pipeline_core.metrics import TripRun
from pipeline_core.tiles import TripSample, varies

ROOT = Path(__file__).resolve().parents[1]


@attrs.frozen(kw_only=True)
class Staircase:
    """Problem n: output tile i of n visits i K tiles (tile 0 none), a longest tile of n - 1."""

    uniform: bool = False

    def trip_counts(self, problem: int) -> tuple[int, ...]:
        return tuple(range(problem))

    def masked_trips(self, problem: int) -> tuple[int, ...]:
        return tuple(max(0, i - 1) for i in range(problem))  # each tile's last K tile

    def sample(self, k_tiles: int) -> TripSample | None:
        return TripSample(trips=self.trip_counts(k_tiles + 1), full=k_tiles)

    def document(self) -> dict[str, object]:
        return {"rule": "staircase"}


def ruled_plan(rule=Staircase(), stages: int = 4):
    spec = attrs.evolve(fx.attention_spec(), trip_rule=rule)
    return lower_agents(fx.attention_body(), fx.attention_edges(2, stages), fx.SYNC,
                        stages=stages, spec=spec)


def verdict(plan):
    return prove_plan(plan, fx.attention_body(), fx.attention_edges(2, plan.stages), fx.SYNC,
                      name="ruled", names=fx.NAMES)


def test_a_rule_whose_tiles_differ_is_proven_over_tiles_of_different_counts():
    """Empty tiles between and before others, a tile shorter than the ring before an empty one
    and a longer one: SAFE, and listed in the verdict's model."""
    plan = ruled_plan()
    assert plan.trip_rule == Staircase() and varies(plan.trip_rule)
    assert trip_sequences(plan) == [(3, 0, 2), (0, 0, 1), (1, 5), (3, 0, 5)]
    v = verdict(plan)
    assert v.safe and v.model["trip_sequences"] == [[3, 0, 2], [0, 0, 1], [1, 5], [3, 0, 5]]


def test_a_uniform_rule_costs_the_proof_nothing():
    """Uniform (the GEMM's raster): the same runs, mutations and edits as no rule at all."""
    none, uniform = fx.attention_plan(), ruled_plan(Staircase(uniform=True))
    assert uniform.trip_rule is not None and not varies(uniform.trip_rule)
    assert trip_sequences(uniform) == trip_sequences(none) == []
    assert verdict(uniform).model == verdict(none).model
    assert "trip_sequences" not in verdict(uniform).model
    cats = ("clamp_trips", "skew_trips")
    assert not list(agent_mutations(uniform, cats)) and not list(agent_mutations(none, cats))
    assert ([e.description for e in plan_edits(uniform)]
            == [e.description for e in plan_edits(none)])
    assert "bounds" not in agents_doc(uniform, fx.attention_body(), fx.NAMES, fx.SYNC)


@pytest.mark.parametrize("agent", ["producer", "consumer0", "consumer1"])
def test_an_agent_that_runs_an_empty_tile_the_others_skip_is_refused(agent, monkeypatch):
    """One side runs its loop once on an output tile with no K tile (min_trips 1), the other
    skips it: the rings' positions diverge, and the next output tile hangs (cudnn-frontend
    PR #1069).  The runs of one count alone (without 0) do not see it; the tiles of different
    counts do."""
    import pipeline_core.agents.prove as prove

    plan = ruled_plan()
    clamp = next(m for m in agent_mutations(plan, ("clamp_trips",)) if m.agent == agent)
    bad = clamp.apply(plan)
    assert bad.program(agent).min_trips == 1
    assert verdict(bad).first.kind == H.DEADLOCK
    monkeypatch.setattr(prove, "tile_counts", lambda p: [c for c in tile_counts(p) if c])
    v = verdict(bad)
    assert v.first.kind == H.DEADLOCK and "output tile" in v.first.site.op + v.first.message
    assert any(x.fix is not None and "Plan.trip_rule" in x.fix.text for x in v.violations)
    monkeypatch.setattr(prove, "trip_sequences", lambda p: [])
    assert verdict(bad).safe  # what the sequences add: nothing else sees the empty tile


@pytest.mark.parametrize("agent", ["producer", "consumer0", "consumer1"])
@pytest.mark.parametrize("delta", [1, -1])
def test_an_agent_whose_trip_count_is_off_by_one_is_refused(agent, delta):
    plan = ruled_plan()
    skew = next(m for m in agent_mutations(plan, ("skew_trips",))
                if m.agent == agent and m.delta == delta)
    bad = skew.apply(plan)
    assert bad.program(agent).trip_delta == delta
    v = verdict(bad)
    assert v.first.kind == H.DEADLOCK
    assert any(x.kind == H.DEADLOCK and "diverge" in x.message for x in v.violations)


def test_trip_mutations_and_the_rules_edit_are_offered_only_for_a_rule_whose_tiles_differ():
    cats = ("clamp_trips", "skew_trips")
    assert not list(agent_mutations(fx.two_ring_plan(), cats))
    assert [(m.category, m.agent, m.delta) for m in agent_mutations(ruled_plan(), cats)] == [
        (c, a, d) for a in ("producer", "consumer0", "consumer1")
        for c, d in (("clamp_trips", 1), ("skew_trips", 1), ("skew_trips", -1))]
    edit = next(e for e in plan_edits(ruled_plan()) if e.field == "Plan.trip_rule")
    assert edit.description == "Plan.trip_rule None" and edit.apply(ruled_plan()).trip_rule is None


def test_the_plan_stays_frozen_and_comparable_with_its_rule():
    a, b = ruled_plan(), ruled_plan()
    assert a == b and a != ruled_plan(Staircase(uniform=True))
    assert hash(a.trip_rule) == hash(b.trip_rule)  # a frozen record, as the module asks
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        a.trip_rule = None  # type: ignore[misc]


def test_the_document_records_a_rule_whose_tiles_differ_as_its_family_writes_it():
    doc = agents_doc(ruled_plan(), fx.attention_body(), fx.NAMES, fx.SYNC)
    assert doc["bounds"] == {"rule": "staircase"}


def test_the_timing_model_runs_each_output_tile_for_its_own_count():
    plan, body = ruled_plan(), fx.attention_body()
    machine = AgentMachine(copy_latency=100, copy_bytes_per_cycle=64)
    t = each_tile(plan, body, machine, Staircase().trip_counts(9))
    assert t.tiles == 36  # 0 + 1 + ... + 8: the empty tile is charged nothing
    assert t.cycles == sum(simulate(plan, body, machine, n).cycles for n in range(1, 9))
    full = each_tile(plan, body, machine, [8] * 9)
    assert full.tiles == 72 and 0.4 < t.cycles / full.cycles < 0.6


def test_the_analyze_report_words_the_sample_as_its_family_names_it():
    plain = TripRun(sample=Staircase().sample(8), cycles=500.0, full_cycles=1000.0)
    assert plain.to_dict() == {"trips": 36, "full_trips": 72, "cycles": 500, "full_cycles": 1000}
    assert plain.line() == ("  trip rule (): 36 of 72 K tiles, 500 cycles = 0.50 of the 1000 "
                            "with every output tile visiting every K tile")
    named = TripSample(trips=(1, 2), full=2, key="rows", title="ragged rows", problem="two rows",
                       numbers={"rows": 2}, unit="blocks", names=("seen", "all"),
                       reference="unragged")
    run = TripRun(sample=named, cycles=3.0, full_cycles=4.0)
    assert run.to_dict() == {"rows": 2, "seen": 3, "all": 4, "cycles": 3, "full_cycles": 4}
    assert run.line() == "  ragged rows (two rows): 3 of 4 blocks, 3 cycles = 0.75 of the 4 unragged"


def test_the_protocols_worked_example_is_a_rule_the_core_takes():
    """The module docstring's twenty-line rule runs as written and lowers into a plan."""
    example = tiles.__doc__.split("::\n", 1)[1]
    space = {"attrs": attrs, "TripSample": TripSample, "__name__": "example"}
    exec(compile("from __future__ import annotations\n" + re.sub(r"(?m)^    ", "", example),
                 "tiles-example", "exec"), space)
    rule = space["RowTrips"](block_rows=64, block_cols=128)
    assert rule.trip_counts((130, 300)) == (3, 3, 3)  # 3 row blocks of 3 column blocks
    assert rule.masked_trips((130, 300)) == (2, 2, 2) and rule.masked_trips((64, 256)) == (2,)
    plan = ruled_plan(rule)
    assert plan.trip_rule is rule and trip_sequences(plan) == []


#: the words of attention's iteration rule, which lives in its family (schedules_attention)
ATTENTION_RULE = re.compile(r"LoopBounds|CausalRun|causal|seq_q|seq_k|query_block", re.I)


def test_the_core_names_no_attention_iteration_rule():
    """Issue 34: the iteration space is the family's; the core's sources, docstrings and
    schemas name only the protocol."""
    sources = sorted((ROOT / "pipeline_core").rglob("*.py"))
    sources += sorted((ROOT / "pipeline_core" / "schemas").glob("*.json"))
    assert len(sources) > 100  # the tree is read (no vacuous pass)
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in sources
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if ATTENTION_RULE.search(line)]
    assert found == []
