"""Schedule warpspecialized-gemm: every ring depth, release lag and consumer count compiles
proven; each mutation of its plan is refused by compile and still emitted with --allow-unsafe;
its document, text view and check output."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.check.mutate import agent_mutations, mutate_compiled  # noqa: E402
from pipeline_core.check.verdict import HazardKind as H  # noqa: E402
from pipeline_core.document import to_document  # noqa: E402
from pipeline_core.plugins import default_host  # noqa: E402
from pipeline_core.proof import UnsafeScheduleError  # noqa: E402
from pipeline_core.testing import run_cli  # noqa: E402

from pipeline_core_nvidia_h100.wgmma_sync import WGMMA_WAIT  # noqa: E402


def _compile(stages: int = 4, consumers: int = 2, release_lag: int = 1, **kw):
    params = {"consumers": str(consumers), "release_lag": str(release_lag),
              "BM": str(64 * consumers), "BN": "128"}
    if consumers == 3:
        params["consumer_registers"] = "152"
    return compile_named("warpspecialized-gemm", target="h100", params=params,
                         target_args={"stages": str(stages)}, host=default_host(), **kw)


@pytest.mark.parametrize("stages", [2, 3, 4, 5])
@pytest.mark.parametrize("consumers", [1, 2, 3])
def test_every_depth_lag_and_consumer_count_is_proven_safe(stages, consumers):
    for lag in range(stages):
        c = _compile(stages, consumers, lag)
        assert c.proof.safe and c.proof.verdict.groups == consumers + 1


def _mutation(compiled, category, agent, delta=1):
    return next(m for m in agent_mutations(compiled.plan)
                if m.category == category and m.agent == agent and m.section == "kernel"
                and m.delta == delta)


@pytest.mark.parametrize("category, agent, delta, kind", [
    ("drop_arrive", "consumer1", 1, H.DEADLOCK),
    ("loosen_counter_wait", "consumer0", 1, H.SMEM_WAR),
    ("flip_phase_offset", "consumer0", -1, H.PHASE_PARITY),
    ("flip_phase_offset", "consumer1", 1, H.DEADLOCK),
    ("flip_phase_offset", "producer", 1, H.DEADLOCK),
    ("drop_acquire", "producer", 1, H.SMEM_WAR),
])
def test_each_mutation_is_refused_and_still_emitted_when_allowed(category, agent, delta, kind):
    c = _compile()
    m = _mutation(c, category, agent, delta)
    with pytest.raises(UnsafeScheduleError) as exc:
        mutate_compiled(c, m)
    text = str(exc.value)
    assert f": {kind.value} in agent " in text and "\n" not in text
    emitted = mutate_compiled(c, m, allow_unsafe=True)
    assert emitted.proof.verdict.first.kind == kind
    hazards = to_document(emitted)["hazards"]
    assert hazards[0]["kind"] == kind.value and hazards[0]["agent"]


@pytest.mark.parametrize("stages", [2, 4])
def test_a_sole_consumer_dropping_its_release_after_the_loop_is_refused(stages):
    """-p BM=64 -p BN=128 (one consumer): its after-the-loop release is the stage's only
    arrival for that K tile, and a persistent CTA's next output tile waits on it (issue 23)."""
    c = _compile(stages, 1, 1)
    drop = [m for m in agent_mutations(c.plan, ("drop_arrive",)) if m.section == "epilogue"]
    assert drop
    for m in drop:
        with pytest.raises(UnsafeScheduleError) as exc:
            mutate_compiled(c, m)
        assert ": DEADLOCK in agent consumer0" in str(exc.value)
        assert "consumer0 never arrives" in str(exc.value)


@pytest.mark.parametrize("stages, consumers", [(2, 1), (4, 1), (3, 2), (4, 3)])
def test_every_dropped_wgmma_step_is_a_missing_product(stages, consumers):
    c = _compile(stages, consumers, 1)
    drops = list(agent_mutations(c.plan, ("drop_mma",)))
    assert {m.section for m in drops} == {"prologue", "kernel"}
    assert len(drops) == 2 * consumers  # one prologue iteration (lag 1) and the kernel each
    for m in drops:
        with pytest.raises(UnsafeScheduleError) as exc:
            mutate_compiled(c, m)
        assert f": MISSING_PRODUCT in agent {m.agent}" in str(exc.value)
        assert f"{m.agent}'s WGMMA never runs for K tile" in str(exc.value)


@pytest.mark.parametrize("consumers", [1, 2])
def test_every_plan_mutation_is_refused_but_the_redundant_drain(consumers):
    """The whole agents mutation set on the real plans (tests/test_agents_prove.py sweeps the
    grid and judges each accepted edit): at release lag 0 the after-the-loop wgmma.wait_group 0
    follows the last release's own wait 0, so loosening it is the one edit that stays safe."""
    accepted = []
    for lag in range(2):
        c = _compile(2, consumers, lag)
        for m in agent_mutations(c.plan):
            if mutate_compiled(c, m, allow_unsafe=True).proof.safe:
                accepted.append((lag, m.category, m.agent, m.section))
    assert accepted == [(0, "loosen_counter_wait", f"consumer{r}", "epilogue")
                        for r in range(consumers)]


def test_a_loosened_wait_names_the_wait_and_the_fix():
    c = _compile()
    with pytest.raises(UnsafeScheduleError) as exc:
        mutate_compiled(c, _mutation(c, "loosen_counter_wait", "consumer0"))
    assert "consumer0 WAIT_WGMMA(2) for tile" in str(exc.value)
    assert "fix: lower WAIT_WGMMA to 1" in str(exc.value)


def test_the_derived_waits_follow_the_release_lag():
    for lag, kernel in ((0, [0]), (1, [1]), (2, [2])):
        prog = _compile(4, 2, lag).plan.program("consumer0")
        assert [s.value for s in prog.kernel if s.tag == WGMMA_WAIT] == kernel
        assert [s.value for s in prog.epilogue[-1] if s.tag == WGMMA_WAIT][-1] == 0


def test_the_text_view_has_one_section_per_agent_with_isa_forms():
    result = run_cli(["compile", "warpspecialized-gemm", "--target", "h100", "-T", "stages=4"])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    for agent in ("producer", "consumer0", "consumer1"):
        assert f"AGENT {agent} (" in out
    assert "empty[t%4] parity (t/4-1)&1" in out
    assert "full[t%4] parity (t/4)&1" in out
    assert "wgmma.wait_group.sync.aligned 1" in out and "empty[(t-1)%4]" in out
    assert "proof: SAFE over every timing" in out


def test_the_document_carries_the_agents_and_validates():
    jsonschema = pytest.importorskip("jsonschema")
    from pipeline_core.json_output import load_schema

    result = run_cli(["compile", "warpspecialized-gemm", "--target", "h100", "-T", "stages=3",
                      "--format", "json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["lowering"] == "agents" and doc["agents"]["stages"] == 3
    names = [p["name"] for p in doc["agents"]["programs"]]
    assert names == ["producer", "consumer0", "consumer1"]
    producer = doc["agents"]["programs"][0]
    assert [s["kind"] for s in producer["kernel"]] == ["phase_wait", "expect_tx", "op", "op"]
    assert producer["kernel"][0]["isa"].endswith("empty[t%3] parity (t/3-1)&1")
    schema = load_schema("schedule")
    import referencing
    from pipeline_core.json_output import SCHEMAS
    registry = referencing.Registry().with_resources(
        [(s["$id"], referencing.Resource.from_contents(s)) for s in map(load_schema, SCHEMAS)])
    errors = list(jsonschema.Draft202012Validator(schema, registry=registry).iter_errors(doc))
    assert errors == []


def test_check_reports_the_compile_proof_and_refuses_an_agents_document(tmp_path):
    result = run_cli(["check", "warpspecialized-gemm", "--target", "h100", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["safe"] and verdict["counter_model"]["agents"][0] == "producer"
    path = tmp_path / "ws.json"
    run_cli(["compile", "warpspecialized-gemm", "--target", "h100", "-o", str(path),
             "--format", "json"])
    refused = run_cli(["check", "--input", str(path)])
    assert refused.exit_code == 2
    assert "an agents document is proven by compile" in refused.stderr
    assert refused.stderr.count("\n") == 1
