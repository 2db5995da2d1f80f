"""The PTX ISA's wgmma fence rule as a proof obligation (issue 33): between a register access
of the consumer's threads (the softmax reads S's accumulators and writes P, PV's register A
operand; the rescale multiplies O, PV's accumulator) and a later wgmma that uses those
registers, a ``wgmma.fence`` must come.  The prover used to ask only for a fence before each
consumer's first group, and accepted a kernel with 2 fences instead of 8."""
from __future__ import annotations

import attrs
import pytest

pytest.importorskip("pipeline_core_schedules_attention")

from pipeline_core.agents.prove import prove_plan  # noqa: E402
from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.check.verdict import HazardKind as H  # noqa: E402
from pipeline_core.plan import StepKind  # noqa: E402
from pipeline_core.plugins import default_host  # noqa: E402

VARIANTS = {"default": ({}, {}), "causal": ({"causal": "true"}, {}),
            "q_stages 2": ({"q_stages": "2"}, {"stages": "2"}),
            "1 consumer": ({"consumers": "1", "pingpong": "false", "block_m": "64"}, {})}


def _compile(label):
    params, targs = VARIANTS[label]
    return compile_named("flash-attention-fwd", target="h100", host=default_host(),
                         params=params, target_args=targs)


def _prove(c, plan):
    return prove_plan(plan, c.body, c.edges, c.plan.sync, names=c.tag_names)


def _consumers(plan):
    return [p for p in plan.programs if p.name.startswith("consumer")]


@pytest.mark.parametrize("label", sorted(VARIANTS))
def test_dropping_every_fence_but_the_prologues_is_refused(label):
    c = _compile(label)
    assert c.proof.verdict.safe
    programs = [attrs.evolve(p, kernel=tuple(s for s in p.kernel if s.kind != StepKind.FENCE),
                             epilogue=tuple(tuple(s for s in it if s.kind != StepKind.FENCE)
                                            for it in p.epilogue))
                if p in _consumers(c.plan) else p for p in c.plan.programs]
    v = _prove(c, attrs.evolve(c.plan, programs=programs))
    found = [x for x in v.violations if x.kind == H.ACC_RAW and "wgmma.fence" in x.message]
    assert found, v.violations[:3]
    assert "accesses registers this group op uses" in found[0].message


def _edits(steps, i):
    """The fence at ``i`` dropped, moved after the op that follows it, moved to the end."""
    s = steps[i]
    return {"dropped": steps[:i] + steps[i + 1:],
            "after its op": steps[:i] + steps[i + 1:i + 2] + (s,) + steps[i + 2:],
            "to the end": steps[:i] + steps[i + 1:] + (s,)}


@pytest.mark.parametrize("label", ["default", "1 consumer"])
def test_each_fence_edit_is_refused_unless_an_earlier_fence_still_orders_the_registers(label):
    """A fence that guards S (its group follows the previous iteration's softmax and rescale)
    cannot go; the fence before PV in the same iteration can, by the ISA's own rule: no
    register access lies between the fence before S and the PV group, and a fence orders every
    earlier register access before every later wgmma.  The epilogue's fence before the last PV
    follows the last rescale: it cannot go either."""
    c = _compile(label)
    verdicts = {}
    for p in _consumers(c.plan):
        sections = [("kernel", None, p.kernel)] + [("epilogue", j, it)
                                                   for j, it in enumerate(p.epilogue)]
        for section, j, steps in sections:
            for i, s in enumerate(steps):
                if s.kind != StepKind.FENCE:
                    continue
                nxt = steps[i + 1]
                target = c.body[nxt.op].tag if nxt.kind == StepKind.OP else None
                for how, edited in _edits(steps, i).items():
                    if section == "kernel":
                        prog = attrs.evolve(p, kernel=edited)
                    else:
                        prog = attrs.evolve(p, epilogue=p.epilogue[:j] + (edited,)
                                            + p.epilogue[j + 1:])
                    plan = attrs.evolve(c.plan, programs=[prog if q is p else q
                                                          for q in c.plan.programs])
                    verdicts[(p.name, section, i, how, c.tag_names.get(target))] = \
                        _prove(c, plan).safe
    assert verdicts
    accepted = {k for k, safe in verdicts.items() if safe}
    # only the kernel's fence before PV, whose registers the fence before S already ordered
    assert accepted and all(section == "kernel" and op == "WGMMA_PV"
                            for _, section, _, _, op in accepted), accepted
    refused_before_s = [k for k in verdicts if k[4] == "WGMMA_S"]
    assert refused_before_s and not any(verdicts[k] for k in refused_before_s)
