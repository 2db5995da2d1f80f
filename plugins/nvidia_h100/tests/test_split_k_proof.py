"""Split-K in the proof (docs/guide/agents.md, "Cross-CTA reductions"; docs/guide/matmul.md,
"Speed"): ``warpspecialized-gemm -p split_k=true`` declares its cross-CTA reduction, the agents
lowering puts the hand-off's steps in the consumers' finish, the checker proves them over the
splits and the counter's next generation, each edit of the hand-off is refused, and the
cuda-wgmma emitter writes exactly those steps, in their order."""
from __future__ import annotations

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.check.mutate import agent_mutations, mutate_compiled  # noqa: E402
from pipeline_core.check.verdict import HazardKind  # noqa: E402
from pipeline_core.errors import ProgramError  # noqa: E402
from pipeline_core.plan import StepKind  # noqa: E402
from pipeline_core.plugins import default_host  # noqa: E402
from pipeline_core.proof import UnsafeScheduleError  # noqa: E402
from pipeline_core.testing import run_cli  # noqa: E402

from pipeline_core_nvidia_h100.emit_wgmma import _SPLIT_STEPS, _constants, emit_wgmma, fill  # noqa: E402
from pipeline_core_nvidia_h100.skeleton import declared_geometry  # noqa: E402
from pipeline_core_nvidia_h100.warpspecialized import KERNEL_FAMILY, WsGeometry  # noqa: E402

CATEGORIES = ("drop_release_fence", "drop_count_arrive", "drop_count_reset",
              "read_before_count", "reset_before_read")


def _split(**params: str):
    return compile_named("warpspecialized-gemm", target="h100", host=default_host(),
                         params={"split_k": "true", **params})


def test_split_k_is_proven_with_its_reduction_modelled():
    res = run_cli(["check", "warpspecialized-gemm", "-p", "split_k=true"])
    assert res.exit_code == 0, res.stderr
    assert "SAFE" in res.stdout and "cross-CTA reduction split_k" in res.stdout
    c = _split()
    assert c.plan.reduction is not None and c.plan.reduction.agents == ("consumer0", "consumer1")
    assert [s.kind for s in c.plan.programs[1].finish] == [
        StepKind.SLICE_STORE, StepKind.RELEASE_FENCE, StepKind.COUNT_ARRIVE,
        StepKind.COUNT_ACQUIRE, StepKind.SLICE_READ, StepKind.COUNT_RESET]
    # without split-K there is no reduction
    plain = compile_named("warpspecialized-gemm", target="h100", host=default_host(),
                          params={"tails": "true"})
    assert plain.plan.reduction is None and all(p.finish == () for p in plain.plan.programs)


@pytest.mark.parametrize("consumers, bm", [(1, "64"), (2, "128")])
def test_every_edit_of_the_hand_off_is_refused(consumers, bm):
    c = _split(consumers=str(consumers), BM=bm)
    picked = {}
    for m in agent_mutations(c.plan, CATEGORIES):
        picked.setdefault(m.category, m)
    assert set(picked) == set(CATEGORIES)
    for m in picked.values():
        with pytest.raises(UnsafeScheduleError):
            mutate_compiled(c, m)
    hazards = {}
    for cat, m in picked.items():
        verdict = mutate_compiled(c, m, allow_unsafe=True).proof.verdict
        hazards[cat] = {v.kind for v in verdict.violations}
    assert HazardKind.SMEM_RAW in hazards["drop_release_fence"]
    assert HazardKind.SMEM_RAW in hazards["read_before_count"]
    assert HazardKind.SMEM_WAR in hazards["reset_before_read"]
    if consumers == 1:  # the only reducing agent: no arrival, no reset at all
        assert HazardKind.DEADLOCK in hazards["drop_count_arrive"]
        assert HazardKind.DEADLOCK in hazards["drop_count_reset"]


def _blocks(c) -> list[str]:
    g = declared_geometry(c, KERNEL_FAMILY, WsGeometry, "test")
    return [fill(_SPLIT_STEPS[s.kind], _constants(g)) for s in c.plan.programs[1].finish]


def test_the_emitter_writes_the_plans_steps_in_their_order():
    c = _split()
    src = emit_wgmma(c)
    at = [src.index(b) for b in _blocks(c)]
    assert at == sorted(at) and src.count("__threadfence();") == 2
    # the reset waits for every consumer's reads (the CTA join the proof assumes)
    reset = _blocks(c)[-1]
    assert reset.startswith('            asm volatile("bar.sync 15, 256;')
    # an edited plan (reset before the read, emitted with --allow-unsafe) is emitted as edited
    m = next(m for m in agent_mutations(c.plan, ("reset_before_read",)))
    steps = list(c.plan.programs[1].finish)
    steps.insert(4, steps.pop(5))
    edited = attrs.evolve(c, plan=attrs.evolve(c.plan, programs=[
        attrs.evolve(p, finish=steps) if p.finish else p for p in c.plan.programs]))
    assert m.description.endswith("before step 4 SLICE_READ")
    out = emit_wgmma(edited)
    assert out.index("counters[tile] = 0u;") < out.index("pcgc::slice_read<")


def test_a_split_k_plan_without_the_reduction_steps_is_refused_by_the_emitter():
    c = _split()
    bare = attrs.evolve(c, plan=attrs.evolve(c.plan, programs=[
        attrs.evolve(p, finish=()) for p in c.plan.programs]))
    with pytest.raises(ProgramError, match="needs the consumers' cross-CTA reduction steps"):
        emit_wgmma(bare)


def test_the_text_view_lists_the_finish_steps_as_their_instructions():
    res = run_cli(["compile", "warpspecialized-gemm", "-p", "split_k=true"])
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert "REDUCTION\n  split_k:" in out
    finish = out[out.index("FINISH"):]
    assert finish.index("st.global.cg.f32") < finish.index("atom.global.add.u32") \
        < finish.index("ld.global.cg.f32") < finish.index("st.global.u32 0")
    assert "FINISH" not in run_cli(["compile", "warpspecialized-gemm"]).stdout


def test_an_unsafe_split_k_verdict_validates_with_its_finish_sites():
    jsonschema = pytest.importorskip("jsonschema")
    from pipeline_core.json_output import load_schema

    schema = load_schema("verdict")
    sub = {**schema["$defs"]["violation"], "$defs": schema["$defs"]}
    c = _split()
    m = next(iter(agent_mutations(c.plan, ("reset_before_read",))))
    verdict = mutate_compiled(c, m, allow_unsafe=True).proof.verdict
    assert verdict.violations and all(v.site.phase == "finish" for v in verdict.violations)
    for v in verdict.violations:
        jsonschema.validate(v.to_dict(), sub)
