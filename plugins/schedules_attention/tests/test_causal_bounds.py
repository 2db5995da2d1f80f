"""flash-attention-fwd's loop bounds: the causal trip counts and the masked KV blocks recorded in
the plan for the emitter and the timing model, the proof over consecutive query tiles of
different KV-block counts, and the refusal of an agent that runs an empty query tile the others
skip (docs/guide/attention.md, "Causal bounds and tails")."""
from __future__ import annotations

import pytest

from pipeline_core.agents.timing import each_tile
from pipeline_core.api import compile_named
from pipeline_core.check.mutate import agent_mutations, mutate_compiled
from pipeline_core.check.verdict import HazardKind as H
from pipeline_core.proof import UnsafeScheduleError

from pipeline_core_nvidia_h100.machine import H100_AGENT_MACHINE
from pipeline_core_schedules_attention import AttentionTag as T

NAME = "flash-attention-fwd"


def build(stages: int = 3, **params):
    return compile_named(NAME, params={k: str(v).lower() for k, v in params.items()},
                         target_args={"stages": str(stages)})


@pytest.mark.parametrize("causal", [True, False])
def test_the_plan_records_the_bounds_and_the_softmax_applies_the_mask(causal):
    c = build(causal=causal, block_n=64)
    b = c.plan.trip_rule
    assert b is not None and b.causal is causal
    assert (b.block_m, b.block_n) == (128, 64)
    assert [c.body[i].tag for i in b.masked_ops] == [T.SOFTMAX, T.SOFTMAX]
    # query block 2 of a 1000-token square: keys up to row 383, the 64-key blocks 0 .. 5
    assert b.trips(2, 1000, 1000) == (6 if causal else 16)
    assert b.first_masked(2, 1000, 1000) == (4 if causal else 15)  # diagonal / the key tail


@pytest.mark.parametrize("params", [dict(causal=True), dict(causal=True, intra_overlap=False),
                                    dict(causal=True, pingpong=False, head_dim=64),
                                    dict(causal=True, align="bottom_right"),
                                    dict(causal=True, align="bottom_right", intra_overlap=False,
                                         pingpong=False, head_dim=64)],
                         ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
@pytest.mark.parametrize("stages", [2, 3])
def test_query_tiles_of_different_counts_back_to_back_are_proven(params, stages):
    c = build(stages, **params)
    assert c.proof.safe and c.plan.trip_rule.align == params.get("align", "top_left")
    seqs = c.proof.verdict.model["trip_sequences"]
    assert [3, 0, 2] in seqs and [0, 0, 1] in seqs and [stages - 1, 0, stages + 1] in seqs


@pytest.mark.parametrize("agent", ["producer", "consumer0", "consumer1"])
def test_an_agent_running_an_empty_query_tile_is_refused(agent):
    """The cudnn-frontend PR #1069 hang: one side runs a KV block on a query tile with no
    valid key, the other skips it."""
    c = build(causal=True)
    picked = [m for m in agent_mutations(c.plan, ("clamp_trips", "skew_trips"))
              if m.agent == agent]
    assert len(picked) == 3  # at least once on an empty tile; one more / fewer everywhere
    for m in picked:
        with pytest.raises(UnsafeScheduleError) as exc:
            mutate_compiled(c, m)
        assert exc.value.verdict.first.kind == H.DEADLOCK


def test_causal_costs_about_half_the_kv_blocks_in_the_timing_model():
    full, causal = build(), build(causal=True)
    square = (4096, 4096)
    t_full = each_tile(full.plan, full.body, H100_AGENT_MACHINE,
                       full.plan.trip_rule.trip_counts(square))
    t_causal = each_tile(causal.plan, causal.body, H100_AGENT_MACHINE,
                         causal.plan.trip_rule.trip_counts(square))
    assert (t_full.tiles, t_causal.tiles) == (1024, 528)
    assert 0.45 < t_causal.cycles / t_full.cycles < 0.6


def test_the_json_document_carries_the_bounds_and_the_gemms_does_not():
    from pipeline_core.agents.views import agents_doc

    c = build(causal=True)
    doc = agents_doc(c.plan, c.body, c.tag_names, c.plan.sync)
    assert doc["bounds"] == {"causal": True, "block_m": 128, "block_n": 128,
                             "align": "top_left", "masked_ops": [4, 8]}
    jsonschema = pytest.importorskip("jsonschema")
    from pipeline_core.json_output import load_schema

    schema = load_schema("schedule")
    jsonschema.validate(doc, {**schema["$defs"]["agents"], "$defs": schema["$defs"]})
    with pytest.raises(jsonschema.ValidationError):  # the schema checks the key is the rule's
        jsonschema.validate({**doc, "bounds": [doc["bounds"]]},
                            {**schema["$defs"]["agents"], "$defs": schema["$defs"]})
    gemm = compile_named("warpspecialized-gemm")
    assert gemm.plan.trip_rule is not None and gemm.plan.trip_rule.uniform  # RasterTrips
    assert "bounds" not in agents_doc(gemm.plan, gemm.body, gemm.tag_names, gemm.plan.sync)


def test_analyze_reports_the_causal_head_against_the_full_square():
    import json

    jsonschema = pytest.importorskip("jsonschema")
    import referencing

    from pipeline_core.json_output import SCHEMAS, load_schema
    from pipeline_core.testing import run_cli

    args = ["analyze", NAME, "--target", "h100", "--iterations", "32"]
    text = run_cli([*args, "-p", "causal=true"])
    assert text.exit_code == 0, text.stderr
    assert "causal bounds (one head, 4096 queries and keys" in text.stdout
    assert "528 of 1024 KV blocks" in text.stdout
    doc = json.loads(run_cli([*args, "-p", "causal=true", "--format", "json"]).stdout)
    registry = referencing.Registry().with_resources(
        [(s["$id"], referencing.Resource.from_contents(s)) for s in map(load_schema, SCHEMAS)])
    validator = jsonschema.Draft202012Validator(load_schema("analyze"), registry=registry)
    assert list(validator.iter_errors(doc)) == []
    c = doc["causal"]
    assert (c["seq"], c["kv_blocks"], c["full_blocks"]) == (4096, 528, 1024)
    assert 0.45 < c["cycles"] / c["full_cycles"] < 0.6
    plain = json.loads(run_cli([*args, "--format", "json"]).stdout)
    assert "causal" not in plain and "causal bounds" not in run_cli(args).stdout


@pytest.mark.parametrize("intra", [True, False])
@pytest.mark.parametrize("pingpong", [True, False])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_every_variant_aligned_bottom_right_is_proven(intra, pingpong, head_dim):
    """Bottom-right causal is the same body with other bounds: each overlap variant proves
    SAFE, at the trip counts of an empty query tile and of tiles of different counts."""
    c = build(2, causal=True, align="bottom_right", intra_overlap=intra, pingpong=pingpong,
              head_dim=head_dim)
    assert c.proof.safe and c.plan.trip_rule.align == "bottom_right"
    assert [0, 0, 1] in c.proof.verdict.model["trip_sequences"]
