"""An agents plan as the schedule document's ``agents`` section (compile's text view of it is
:func:`pipeline_core.export.text.render`).

Each step is shown with its ISA form: the sync model's ``isa_forms`` entry for its tag, with the
ring stage and parity written over the loop index ``t`` (docs/guide/agents.md, "Steps"), e.g.
``mbarrier.try_wait.parity... full[t%4] parity (t/4)&1``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline_core.plan import AgentProgram, Plan, Step
from pipeline_core.export.notation import isa_form
from pipeline_core.ops import Op, tag_name
from pipeline_core.sync.model import SyncModel
from pipeline_core.tiles import varies


def _step_doc(step: Step, plan: Plan, body: Sequence[Op], names: Mapping[int, str],
              sync: SyncModel | None, after_loop: bool) -> dict[str, Any]:
    doc = {"kind": step.kind.value, "lag": step.lag, "channel": step.channel,
           "value": step.value, "phase_offset": step.phase_offset, "op": step.op,
           "tag": step.tag, "tag_name": (tag_name(step.tag, names) if step.tag >= 0 else ""),
           "after_loop": after_loop, "once": step.once,
           "isa": isa_form(step, plan, body, names, sync, after_loop=after_loop)}
    if step.barrier >= 0:  # a named barrier step (docs/guide/agents.md, "Named barriers")
        doc["barrier"] = step.barrier
    if step.output_lag:  # an output-tile ordering's wait (docs/guide/agents.md, "Tile splits")
        doc["output_lag"] = step.output_lag
    if step.exit:
        doc["exit"] = True
    return doc


def program_sections(prog: AgentProgram) -> list[tuple[str, int, Sequence[Step]]]:
    """(section, iteration, steps) in program order."""
    out: list[tuple[str, int, Sequence[Step]]] = [
        ("prologue", i, steps) for i, steps in enumerate(prog.prologue)]
    out.append(("kernel", 0, prog.kernel))
    out += [("epilogue", j, steps) for j, steps in enumerate(prog.epilogue)]
    return out


def is_after_loop(prog: AgentProgram, section: str, iteration: int, pos: int) -> bool:
    """The epilogue's trailing steps whose tile is past the loop (lowered from lag -1)."""
    if section != "epilogue":
        return False
    step = prog.epilogue[iteration][pos]
    return iteration - step.lag >= 0


def agents_doc(plan: Plan, body: Sequence[Op], names: Mapping[int, str],
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
            return [_step_doc(s, plan, body, names, sync, is_after_loop(prog, section, it, pos))
                    for pos, s in enumerate(items)]
        entry["prologue"] = [steps("prologue", i, it) for i, it in enumerate(prog.prologue)]
        entry["kernel"] = steps("kernel", 0, prog.kernel)
        entry["epilogue"] = [steps("epilogue", j, it) for j, it in enumerate(prog.epilogue)]
        if prog.finish:  # a cross-CTA reduction's steps (docs/guide/agents.md)
            entry["finish"] = [_step_doc(s, plan, body, names, sync, True) for s in prog.finish]
        for key in ("store", "drain"):  # a staged bulk store's steps (docs/guide/agents.md)
            if getattr(prog, key):
                entry[key] = [_step_doc(s, plan, body, names, sync, True)
                              for s in getattr(prog, key)]
        programs.append(entry)
    doc: dict[str, Any] = {
        "stages": plan.stages, "min_tiles": plan.min_tiles,
        "sync_model": sync.name if sync is not None else None,
        "op_bytes": {str(k): v for k, v in sorted(plan.op_bytes.items())},
        "rings": [{"name": r.name, "kind": r.kind, "stages": r.stages, "arrivals": r.arrivals,
                   "tx_bytes": r.tx_bytes, "signallers": list(r.signallers),
                   "waiters": list(r.waiters), "ops": list(r.ops), "release_lag": r.release_lag,
                   "once": r.once} for r in plan.rings],
        "programs": programs,
    }
    if plan.orders:  # only a plan with orderings carries the key (older documents stay as they were)
        doc["orders"] = [{"name": o.name, "turns": [{"agent": t.agent, "ops": list(t.ops)}
                                                    for t in o.turns],
                          "barriers": list(o.barriers), "counts": list(o.counts),
                          **({"scope": o.scope} if o.scope != "k_tile" else {})}
                         for o in plan.orders]
    if plan.split is not None:  # agents that take output tiles in turn (a tile split)
        doc["split"] = {"agents": list(plan.split.agents)}
    if plan.reduction is not None:  # likewise only a plan with a cross-CTA reduction
        doc["reduction"] = {"name": plan.reduction.name, "agents": list(plan.reduction.agents)}
    if plan.store is not None:  # likewise only a plan with a bulk store
        doc["store"] = {"name": plan.store.name, "agents": list(plan.store.agents),
                        "buffers": plan.store.buffers, "barriers": list(plan.store.barriers)}
        if plan.store.optional:  # a tile may skip its staged store (StoreSpec.optional)
            doc["store"]["optional"] = True
    if varies(plan.trip_rule):  # output tiles of different K-tile counts: the family's rule
        doc["bounds"] = dict(plan.trip_rule.document())
    return doc
