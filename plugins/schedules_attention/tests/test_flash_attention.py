"""flash-attention-fwd: the derived pipeline for every overlap, its proof, its refusals, its views
(docs/guide/attention.md)."""
from __future__ import annotations

import json

import pytest

from pipeline_core.api import compile_named
from pipeline_core.check.mutate import agent_mutations, mutate_compiled
from pipeline_core.check.verdict import HazardKind as H
from pipeline_core.errors import ConfigError, ProgramError
from pipeline_core.plan import StepKind
from pipeline_core.proof import UnsafeScheduleError
from pipeline_core.testing import run_cli

from pipeline_core_schedules_attention import AttentionTag as T

NAME = "flash-attention-fwd"


def build(stages: int = 3, **params):
    return compile_named(NAME, params={k: str(v).lower() for k, v in params.items()},
                         target_args={"stages": str(stages)})


def kernel(compiled, agent="consumer0"):
    """(kind, op tag or channel, lag, value) of an agent's kernel steps."""
    body = compiled.body
    return [(s.kind.value, body[s.op].tag if s.kind == StepKind.OP else s.channel, s.lag, s.value)
            for s in compiled.plan.program(agent).kernel]


COMBOS = [dict(intra_overlap=io, pingpong=pp, head_dim=hd)
          for io in (True, False) for pp in (True, False) for hd in (64, 128)]


@pytest.mark.parametrize("params", COMBOS, ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
@pytest.mark.parametrize("stages", [2, 3])
def test_every_supported_combination_compiles_safe(params, stages):
    c = build(stages, **params)
    assert c.proof.safe
    # trip counts 1 and 2 (fewer than the stages) are among the proven ones
    assert c.plan.min_tiles == 1


def test_intra_overlap_issues_pv_of_the_previous_block_right_after_s():
    """FA3's Algorithm 2: S_j, PV_{j-1}, wait(1) for S_j, softmax, wait(0) for PV_{j-1},
    rescale O; K released once S_j retired, V once PV_{j-1} did."""
    c = build(intra_overlap=True, pingpong=False)
    assert kernel(c) == [
        ("phase_wait", "k_full", 0, 0), ("fence", "wgmma", 0, 0), ("op", T.WGMMA_S, 0, 0),
        ("commit", "wgmma", 0, 0),
        ("phase_wait", "v_full", 1, 0), ("fence", "wgmma", 1, 0), ("op", T.WGMMA_PV, 1, 0),
        ("commit", "wgmma", 1, 0),
        ("counter_wait", "wgmma", 0, 1), ("arrive", "k_empty", 0, 0), ("op", T.SOFTMAX, 0, 0),
        ("counter_wait", "wgmma", 1, 0), ("arrive", "v_empty", 1, 0), ("op", T.RESCALE, 0, 0)]
    # tile 0 has no PV_{-1}: the prologue runs S_0, its softmax and rescale only
    prologue = [c.body[s.op].tag for s in c.plan.program("consumer0").prologue[0]
                if s.kind == StepKind.OP]
    assert prologue == [T.WGMMA_S, T.SOFTMAX, T.RESCALE]
    epilogue = [c.body[s.op].tag for it in c.plan.program("consumer0").epilogue for s in it
                if s.kind == StepKind.OP]
    assert epilogue == [T.WGMMA_PV]


def test_without_intra_overlap_the_softmax_waits_for_everything():
    c = build(intra_overlap=False, pingpong=False)
    steps = kernel(c)
    ops = [x[1] for x in steps if x[0] == "op"]
    assert ops == [T.WGMMA_S, T.SOFTMAX, T.RESCALE, T.WGMMA_PV]
    assert all(x[2] == 0 for x in steps if x[0] == "op")
    # S retired before the softmax; PV retired before V's release at the end of the block
    waits = [n for n, x in enumerate(steps) if x[0] == "counter_wait"]
    assert [steps[n][3] for n in waits] == [0, 0]
    assert steps[waits[0] + 2][1] == T.SOFTMAX and steps[waits[1] + 1][1] == "v_empty"


def test_k_and_v_have_rings_of_their_own_and_q_is_loaded_once():
    c = build()
    assert {r.name for r in c.plan.rings} == {"q_full", "q_empty", "k_full", "k_empty",
                                              "v_full", "v_empty"}
    assert c.plan.ring("q_full").once and c.plan.ring("q_full").stages == 1
    producer = kernel(c, "producer")
    assert [x[1] for x in producer if x[0] == "op"] == [T.TMA_K, T.TMA_V]


def test_pingpong_orders_the_s_gemms_on_named_barriers():
    c = build(pingpong=True)
    (order,) = c.plan.orders
    assert order.barriers == (1, 2) and order.counts == (256, 256)
    steps = kernel(c, "consumer1")
    at = {x[0]: n for n, x in reversed(list(enumerate(steps)))}
    s = next(n for n, x in enumerate(steps) if x[1] == T.WGMMA_S)
    assert at["named_sync"] < s < at["named_arrive"]
    assert not build(pingpong=False).plan.orders


def _mutants(c, category, agent="consumer0"):
    return [m for m in agent_mutations(c.plan, (category,)) if m.agent == agent]


def _refused(c, m):
    with pytest.raises(UnsafeScheduleError) as exc:
        mutate_compiled(c, m)
    return {v.kind for v in exc.value.verdict.violations}


@pytest.mark.parametrize("intra_overlap", [True, False])
@pytest.mark.parametrize("ring", ["k_empty", "v_empty"])
def test_a_dropped_release_on_either_ring_is_refused(intra_overlap, ring):
    c = build(intra_overlap=intra_overlap, pingpong=False)
    picked = [m for m in _mutants(c, "drop_arrive") if m.ring == ring]
    assert picked
    for m in picked:
        assert H.DEADLOCK in _refused(c, m)


@pytest.mark.parametrize("intra_overlap", [True, False])
def test_loosened_waits_before_softmax_and_rescale_are_refused(intra_overlap):
    """The wait that retires S before the softmax reads it, and (intra_overlap) the one that
    retires PV before the rescale touches O."""
    c = build(intra_overlap=intra_overlap, pingpong=False)
    prog = c.plan.program("consumer0")
    loosened = [m for m in _mutants(c, "loosen_counter_wait") if m.section == "kernel"]
    before = {next((c.body[s.op].tag for s in prog.kernel[m.index:] if s.kind == StepKind.OP),
                   None) for m in loosened}
    assert T.SOFTMAX in before
    if intra_overlap:
        assert T.RESCALE in before
    for m in loosened:
        assert _refused(c, m) & {H.SMEM_RAW, H.SMEM_WAR}


def test_a_flipped_parity_is_refused_on_every_ring():
    c = build(pingpong=False)
    flips = _mutants(c, "flip_phase_offset") + _mutants(c, "flip_phase_offset", "producer")
    assert {m.ring for m in flips} >= {"k_full", "v_full", "k_empty", "v_empty"}
    for m in flips:
        assert _refused(c, m) & {H.DEADLOCK, H.PHASE_PARITY}


@pytest.mark.parametrize("category", ["drop_named_arrive", "drop_named_sync"])
def test_a_dropped_named_barrier_step_is_refused_under_pingpong(category):
    c = build(pingpong=True)
    picked = [m for m in agent_mutations(c.plan, (category,))]
    assert picked
    for m in picked:
        assert _refused(c, m) & {H.DEADLOCK, H.ORDER}


@pytest.mark.parametrize("params, field, text", [
    ({"head_dim": 256}, "head_dim", "needs about 248 registers per consumer thread"),
    ({"consumers": 1}, "pingpong", "needs two consumer warp groups"),
    ({"block_m": 192}, "block_m", "not a multiple of 64 rows per consumer"),
    ({"block_n": 72}, "block_n", "multiple of 16"),
    ({"align": "bottom_right"}, "align", "the schedule is not causal; add -p causal=true"),
    ({"consumer_registers": 248, "consumers": 3, "block_m": 192}, "consumer_registers",
     "exceed the 65536 a 512-thread launch allocates"),
    # within the SM's 65,536 but over what a 384-thread launch allocates: the consumers'
    # setmaxnreg.inc would wait forever (it hung the backward on the H200)
    ({"producer_registers": 32}, "consumer_registers",
     "65536 registers exceed the 64512 a 384-thread launch allocates (168 each)"),
])
def test_bad_parameters_are_one_line_naming_the_p(params, field, text):
    with pytest.raises(ProgramError) as exc:
        build(**params)
    msg = str(exc.value)
    assert "\n" not in msg and f"-p {field}" in msg and text in msg


def test_head_dim_256_compiles_where_it_fits_and_shared_memory_names_stages():
    assert build(2, head_dim=256, block_n=64).proof.safe
    with pytest.raises(ProgramError, match="-T stages"):
        build(4, head_dim=256, block_n=128, intra_overlap=False)
    with pytest.raises(ConfigError):
        build(head_dim=80)


def test_the_cli_text_json_and_analyze():
    jsonschema = pytest.importorskip("jsonschema")
    import referencing

    from pipeline_core.json_output import SCHEMAS, load_schema

    text = run_cli(["compile", NAME, "--target", "h100"])
    assert text.exit_code == 0, text.stderr
    assert "proof: SAFE over every timing" in text.stdout
    assert "WGMMA_PV tile t-1" in text.stdout and "bar.sync 1, 256 (pingpong)" in text.stdout
    result = run_cli(["compile", NAME, "--target", "h100", "--format", "json"])
    doc = json.loads(result.stdout)
    registry = referencing.Registry().with_resources(
        [(s["$id"], referencing.Resource.from_contents(s)) for s in map(load_schema, SCHEMAS)])
    validator = jsonschema.Draft202012Validator(load_schema("schedule"), registry=registry)
    assert list(validator.iter_errors(doc)) == []
    assert [p["name"] for p in doc["agents"]["programs"]] == ["producer", "consumer0",
                                                              "consumer1"]
    analyzed = run_cli(["analyze", NAME, "--target", "h100", "--iterations", "32"])
    assert analyzed.exit_code == 0, analyzed.stderr
    assert "cycles/iteration" in analyzed.stdout


@pytest.mark.parametrize("params", [
    dict(consumers=1, block_m=64, pingpong=False, intra_overlap=True),
    dict(consumers=1, block_m=64, pingpong=False, intra_overlap=False),
    dict(consumers=3, block_m=192, consumer_registers=160, head_dim=64, block_n=64),
])
def test_one_and_three_consumers_compile_safe(params):
    c = build(2, **params)
    assert c.proof.safe
    consumers = [p for p in c.plan.programs if p.name.startswith("consumer")]
    assert len(consumers) == params["consumers"]
    if params.get("pingpong", True):
        assert len(c.plan.orders[0].turns) == 3


def test_analyze_shows_what_the_intra_overlap_buys_on_one_consumer():
    """One consumer has no other warp group to fill the tensor cores during its softmax: the
    overlap hides it under PV_{j-1} (docs/guide/attention.md, "The timing model")."""
    from pipeline_core.agents.timing import simulate
    from pipeline_core_nvidia_h100.machine import H100_AGENT_MACHINE

    def per_block(overlap: bool) -> float:
        c = build(consumers=1, block_m=64, pingpong=False, intra_overlap=overlap)
        return simulate(c.plan, c.body, H100_AGENT_MACHINE, 64).cycles_per_tile

    assert per_block(True) < 0.8 * per_block(False)


@pytest.mark.parametrize("causal", [False, True])
def test_a_double_buffered_q_ring_proves_safe_and_is_emitted_with_two_q_buffers(causal):
    """-p q_stages=2: Q's once ring has 2 stages, output tile o's Q lands in stage o % 2, so the
    copy of o + 1 overlaps o's loop; the stage is rewritten at o + 2, after o's release (the
    prover once reported a false SMEM_WAR on q_empty at the second output tile, docs/guide/
    agents.md, "Loads issued once").  The emitter writes a Q buffer per stage."""
    from pipeline_core_schedules_attention.emit_attention import emit_attention

    c = build(causal=causal, head_dim=64, q_stages=2)
    assert c.plan.ring("q_full").stages == c.plan.ring("q_empty").stages == 2
    assert c.plan.ring("q_full").once and c.plan.ring("q_empty").once
    assert c.proof.safe and c.launch.geometry.q_stages == 2
    src = emit_attention(c)
    assert "Q_STAGES = 2;" in src and "stage_q(o % 2)" in src
    assert "for (int s = 0; s < Q_STAGES; ++s) {\n            mbar_init(q_full_bar(s), 1);" in src
    # the second Q buffer and its two mbarriers are in the shared memory the kernel asks for
    one = build(causal=causal, head_dim=64)
    assert "Q_STAGES = 1;" in emit_attention(one)
    assert (c.launch.geometry.smem_bytes - one.launch.geometry.smem_bytes
            == 128 * 64 * 2 + 2 * 8)


def test_a_plan_whose_q_ring_differs_from_the_geometry_is_refused(monkeypatch):
    """The emitter lays out a Q buffer per stage of the geometry's q_stages and indexes the plan's
    ring: a plan whose Q ring was given another depth (here 2 over a geometry of 1) would load
    into a buffer the kernel never reserved, so it is refused in one line."""
    import attrs

    from pipeline_core_schedules_attention.emit_attention import emit_attention
    from pipeline_core_schedules_attention.schedule import FlashAttentionForward

    plain = FlashAttentionForward.agents

    def double_q(self):
        spec = plain(self)
        return attrs.evolve(spec, rings=tuple(attrs.evolve(r, stages=2) if r.name == "q" else r
                                              for r in spec.rings))

    monkeypatch.setattr(FlashAttentionForward, "agents", double_q)
    c = build()
    assert c.plan.ring("q_full").stages == 2 and c.launch.geometry.q_stages == 1
    assert c.proof.safe
    with pytest.raises(ProgramError) as exc:
        emit_attention(c)
    msg = str(exc.value)
    assert "\n" not in msg
    assert ("the plan's ring q_full was proven 2 stages deep and the kernel's geometry has 1; "
            "recompile the schedule") in msg


@pytest.mark.parametrize("intra_overlap", [True, False])
@pytest.mark.parametrize("pingpong", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_every_overlap_compiles_safe_with_a_double_buffered_q(intra_overlap, pingpong, causal):
    c = build(head_dim=64, q_stages=2, intra_overlap=intra_overlap, pingpong=pingpong,
              causal=causal)
    assert c.proof.safe and c.plan.ring("q_empty").stages == 2


@pytest.mark.parametrize("q_stages", [0, 3])
def test_q_stages_outside_one_and_two_is_one_line_naming_it(q_stages):
    with pytest.raises(ConfigError) as exc:
        build(head_dim=64, q_stages=q_stages)
    msg = str(exc.value)
    assert "\n" not in msg and f"-p q_stages={q_stages}" in msg and "[1, 2]" in msg


def test_a_second_q_that_does_not_fit_shared_memory_names_q_stages_among_the_fixes():
    """KV blocks of 176 keys at D=128 on 2 stages fit beside one Q and not beside two: the
    refusal names -p q_stages with the other fixes; a tile of one Q that does not fit is not
    told to lower it."""
    assert build(2, head_dim=128, block_n=176).proof.safe
    with pytest.raises(ProgramError) as exc:
        build(2, head_dim=128, block_n=176, q_stages=2)
    msg = str(exc.value)
    assert "\n" not in msg and "Q (2 x 32768 bytes)" in msg
    assert "lower -T stages or -p block_n or -p q_stages" in msg
    with pytest.raises(ProgramError) as exc:
        build(3, head_dim=128, block_n=176)
    assert "-T stages" in str(exc.value) and "q_stages" not in str(exc.value)


@pytest.mark.parametrize("causal", [False, True])
def test_a_dropped_q_release_is_refused_with_a_double_buffered_q(causal):
    """With two Q stages the producer first waits on a release at the third output tile: a
    consumer that never releases Q still deadlocks it, on the stage it would reuse."""
    c = build(head_dim=64, q_stages=2, pingpong=False, causal=causal)
    picked = [m for m in agent_mutations(c.plan, ("drop_arrive",)) if m.ring == "q_empty"]
    assert {m.agent for m in picked} == {"consumer0", "consumer1"}
    for m in picked:
        assert H.DEADLOCK in _refused(c, m)
