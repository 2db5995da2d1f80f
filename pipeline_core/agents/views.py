"""An agents plan as the schedule document's ``agents`` section and as compile's text view.

Each step is shown with its ISA form: the sync model's ``isa_forms`` entry for its tag, with the
ring stage and parity written over the loop index ``t`` (docs/guide/agents.md, "Steps"), e.g.
``mbarrier.try_wait.parity... full[t%4] parity (t/4)&1``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline_core.agents.model import AgentPlan, AgentProgram, Step, StepKind
from pipeline_core.ops import Op, tag_name
from pipeline_core.sync.model import SyncModel


def _tile(step: Step, after_loop: bool) -> str:
    if after_loop:
        return ""
    return "t" if step.lag == 0 else f"t-{step.lag}"


def isa_form(step: Step, plan: AgentPlan, body: Sequence[Op], names: Mapping[int, str],
             sync: SyncModel | None, *, after_loop: bool = False) -> str:
    """``step`` as the instruction it lowers to, its stage and parity over ``t``."""
    base = sync.isa_text(step.tag, wait_value=step.value) if sync is not None and step.tag >= 0 \
        else None
    name = tag_name(step.tag, names) if step.tag >= 0 else step.kind.value
    u = _tile(step, after_loop)
    s = plan.stages
    wrap = f"({u})" if "-" in u else u
    if step.kind == StepKind.OP:
        return f"{tag_name(body[step.op].tag, names)} tile {u}" if u else \
            tag_name(body[step.op].tag, names)
    head = base or name
    if step.kind == StepKind.PHASE_WAIT:
        off = step.phase_offset
        phase = f"{wrap}/{s}" + (f"{off:+d}" if off else "")
        return f"{head} {step.channel}[{wrap}%{s}] parity ({phase})&1"
    if step.kind == StepKind.ARRIVE:
        return f"{head} {step.channel}[{wrap}%{s}]"
    if step.kind == StepKind.EXPECT_TX:
        return f"{head} {step.channel}[{wrap}%{s}]" + ("" if base else f" {step.value} bytes")
    if step.kind == StepKind.COUNTER_WAIT and base is None:
        return f"{head}({step.value})"
    return head


def _step_doc(step: Step, plan: AgentPlan, body: Sequence[Op], names: Mapping[int, str],
              sync: SyncModel | None, after_loop: bool) -> dict[str, Any]:
    return {"kind": step.kind.value, "lag": step.lag, "channel": step.channel,
            "value": step.value, "phase_offset": step.phase_offset, "op": step.op,
            "tag": step.tag, "tag_name": (tag_name(step.tag, names) if step.tag >= 0 else ""),
            "after_loop": after_loop,
            "isa": isa_form(step, plan, body, names, sync, after_loop=after_loop)}


def _sections(prog: AgentProgram) -> list[tuple[str, int, Sequence[Step]]]:
    """(section, iteration, steps) in program order."""
    out: list[tuple[str, int, Sequence[Step]]] = [
        ("prologue", i, steps) for i, steps in enumerate(prog.prologue)]
    out.append(("kernel", 0, prog.kernel))
    out += [("epilogue", j, steps) for j, steps in enumerate(prog.epilogue)]
    return out


def _after_loop(prog: AgentProgram, section: str, iteration: int, pos: int) -> bool:
    """The epilogue's trailing steps whose tile is past the loop (lowered from lag -1)."""
    if section != "epilogue":
        return False
    step = prog.epilogue[iteration][pos]
    return iteration - step.lag >= 0


def agents_doc(plan: AgentPlan, body: Sequence[Op], names: Mapping[int, str],
               sync: SyncModel | None) -> dict[str, Any]:
    """The document's ``agents`` section (docs/document-format.md, "Keys": `lowering`, `agents`)."""
    programs = []
    for prog in plan.programs:
        role = prog.role
        entry: dict[str, Any] = {"name": prog.name, "role": {
            "name": role.name, "ops": list(role.ops), "warps": role.warps,
            "issuers": role.issuers, "registers": role.registers,
            "release_arrivals": role.release_arrivals}}

        def steps(section: str, it: int, items: Sequence[Step]) -> list[dict[str, Any]]:
            return [_step_doc(s, plan, body, names, sync, _after_loop(prog, section, it, pos))
                    for pos, s in enumerate(items)]
        entry["prologue"] = [steps("prologue", i, it) for i, it in enumerate(prog.prologue)]
        entry["kernel"] = steps("kernel", 0, prog.kernel)
        entry["epilogue"] = [steps("epilogue", j, it) for j, it in enumerate(prog.epilogue)]
        programs.append(entry)
    return {
        "stages": plan.stages, "min_tiles": plan.min_tiles,
        "sync_model": sync.name if sync is not None else None,
        "op_bytes": {str(k): v for k, v in sorted(plan.op_bytes.items())},
        "rings": [{"name": r.name, "kind": r.kind, "stages": r.stages, "arrivals": r.arrivals,
                   "tx_bytes": r.tx_bytes, "signallers": list(r.signallers),
                   "waiters": list(r.waiters)} for r in plan.rings],
        "programs": programs,
    }


def render_agents(compiled: Any) -> str:
    """Compile's text view of an agents schedule: the rings, then one section per agent."""
    plan: AgentPlan = compiled.agents
    sync = compiled.target_profile.sync if compiled.target_profile is not None else None
    names = {**(sync.tag_names() if sync is not None else {}), **compiled.tag_names}
    body = compiled.body
    out = [f"schedule {compiled.schedule_name} on {compiled.target_name or '(own target)'}"
           + (f" (sync model {sync.name})" if sync is not None else "")
           + f": agents lowering, {len(plan.programs)} agents, {plan.stages} ring stages, "
             f"at least {plan.min_tiles} K tile{'s' if plan.min_tiles > 1 else ''}",
           "t is the loop index over K tiles; a step with lag L serves tile t-L", ""]
    out.append("RINGS")
    for r in plan.rings:
        tx = f", {r.tx_bytes} bytes per phase" if r.tx_bytes else ""
        out.append(f"  {r.name}[{r.stages}] ({r.kind}): {r.arrivals} arrival"
                   f"{'s' if r.arrivals > 1 else ''}{tx}; signalled by "
                   f"{', '.join(r.signallers)}; waited on by {', '.join(r.waiters)}")
    proof = compiled.proof
    if proof is not None:
        v = proof.verdict
        out.append("")
        if v is None:
            out.append(f"proof: UNPROVEN: {proof.unprovable}")
        elif v.safe:
            out.append(f"proof: SAFE over every timing ({v.assumptions_text()})")
        else:
            first = v.first
            assert first is not None
            out.append(f"proof: UNSAFE ({len(v.distinct())} distinct hazards, emitted with "
                       f"--allow-unsafe): {first.kind.value} at {first.site.text()}: "
                       f"{first.message}")
    for prog in plan.programs:
        role = prog.role
        regs = f", setmaxnreg {role.registers}" if role.registers else ""
        out += ["", f"AGENT {prog.name} ({role.warps} warps, {role.issuers} issuing "
                    f"thread{'s' if role.issuers > 1 else ''}{regs}; body ops "
                    f"{', '.join(map(str, role.ops))})"]
        for section, it, steps in _sections(prog):
            label = section.upper() if section == "kernel" else f"{section.upper()} t={it}" \
                if section == "prologue" else f"{section.upper()} t=KT+{it}"
            if section == "kernel":
                label = f"KERNEL t={len(prog.prologue)}..KT-1"
            out.append(f"  {label}")
            for pos, s in enumerate(steps):
                after = _after_loop(prog, section, it, pos)
                out.append(f"    [{pos}] {isa_form(s, plan, body, names, sync, after_loop=after)}")
    return "\n".join(out) + "\n"
