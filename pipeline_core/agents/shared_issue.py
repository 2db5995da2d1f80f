"""Shared issue: a writer's copies issued by several of its warps, checked, and instantiated for
the proof as one agent a warp.

docs/guide/agents.md, "Shared issue".  A :class:`~pipeline_core.plan.SharedIssue` names a
writer agent and how many of its warps issue its copies: the elected thread of each runs the
agent's program and issues an equal share of every *shared* copy's bytes into the ring stage
the copy fills, after its own wait for that stage to be free.  Warp 0 (the lead) alone runs the
steps :func:`lead_only` picks: every announcement of a stage's bytes (``EXPECT_TX``), the
``lead`` copies and every step on their rings.  The emitter guards exactly those steps with
the lead's test, and the proof reads the same rule, so what runs is what was proven:

* :func:`check_shared_issue` checks the spec at lowering, each problem in one line naming
  ``AgentSpec.shared_issue``;
* :func:`expand` turns the plan into one of ``warps`` agents (the lead under the writer's own
  name, the others ``<agent>.warp<w>``), each warp's shared copies body ops of their own that
  carry the warp's share of the bytes, with their FLOW and ANTI edges to every reader.  The
  agents checker (pipeline_core/agents/prove.py) proves that plan as it proves any other: a
  warp that skipped its wait overwrites a stage still being read (``SMEM_WAR``), bytes
  announced by every warp never complete the phase (``DEADLOCK``), and a warp waiting on a
  ring it copies nothing into may lag it by two phases (``PHASE_LAG``).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from pipeline_core.edges import DepEdge
from pipeline_core.errors import ProgramError
from pipeline_core.ops import Op
from pipeline_core.plan import AgentProgram, AgentRole, AgentSpec, Plan, Ring, SharedIssue, Step, StepKind

#: the key a refusal names
KEY = "AgentSpec.shared_issue"


def warp_name(agent: str, warp: int) -> str:
    """The agent that stands for warp ``warp`` of a shared-issue writer in the expanded plan
    (the lead, warp 0, keeps the writer's name)."""
    return agent if warp == 0 else f"{agent}.warp{warp}"


def lead_only(shared: SharedIssue, rings: Sequence[Ring], step: Step) -> bool:
    """Whether the lead warp alone runs ``step`` of the writer's program: an announcement of a
    stage's bytes, a ``lead`` copy, or any step on a ring that carries one (the one rule the
    emitter's guard and :func:`expand` follow)."""
    if step.kind == StepKind.EXPECT_TX:
        return True
    if step.kind == StepKind.OP:
        return step.op in shared.lead
    lead = set(shared.lead)
    return any(r.name == step.channel and lead & set(r.ops) for r in rings)


def _own_rings(shared: SharedIssue, rings: Sequence[Ring]) -> list[Ring]:
    """The full rings the shared-issue writer fills."""
    return [r for r in rings if r.kind == "full" and shared.agent in r.signallers]


def shared_copies(shared: SharedIssue, rings: Sequence[Ring]) -> list[int]:
    """The writer's copies every issuing warp takes a share of: its rings' copies but the
    lead's (the one home :func:`check_shared_issue` and :func:`expand` read)."""
    return sorted({op for r in _own_rings(shared, rings) for op in r.ops} - set(shared.lead))


def check_shared_issue(spec: AgentSpec, roles: Mapping[str, AgentRole], rings: Sequence[Ring],
                       owner: str) -> SharedIssue | None:
    """``spec.shared_issue`` checked against the lowered ``rings``: a writer whose one thread a
    warp issues (``AgentRole.issuers`` 1), 2 warps or more and no more than it has, ``lead``
    among its copies, at least one copy shared, each ring wholly the lead's or wholly shared,
    the shared copies completed by bytes that divide evenly, and no cluster beside it."""
    shared = spec.shared_issue
    if shared is None:
        return None
    role = roles.get(shared.agent)
    if role is None:
        raise ProgramError(f"{owner}: {KEY} names agent {shared.agent!r}; agents: "
                           f"{', '.join(roles)}")
    own = _own_rings(shared, rings)
    copies = sorted({op for r in own for op in r.ops})
    if not own or role.issuers != 1:
        raise ProgramError(f"{owner}: {KEY} names agent {shared.agent}, which is no writer whose "
                           "one thread issues its copies (AgentRole.issuers=1, a ring's "
                           "copies); name the producer")
    if not 2 <= shared.warps <= role.warps:
        raise ProgramError(f"{owner}: {KEY}: warps={shared.warps}; agent {shared.agent} has "
                           f"{role.warps} warps, and sharing takes 2 to {role.warps} of them")
    stray = [op for op in shared.lead if op not in copies]
    if stray:
        raise ProgramError(f"{owner}: {KEY}: lead={list(shared.lead)} names ops {stray}, which "
                           f"are not agent {shared.agent}'s copies {copies}")
    lead = set(shared.lead)
    for r in own:
        if lead & set(r.ops) and set(r.ops) - lead:
            raise ProgramError(f"{owner}: {KEY}: ring {r.name} carries lead copies "
                               f"{sorted(lead & set(r.ops))} and shared ones "
                               f"{sorted(set(r.ops) - lead)}; the lead alone runs a lead copy's "
                               "ring, so give those copies rings of their own (AgentSpec.rings)")
    mine = shared_copies(shared, rings)
    if not mine:
        raise ProgramError(f"{owner}: {KEY}: every copy of agent {shared.agent} is the lead's; "
                           "share one, or drop AgentSpec.shared_issue")
    for r in own:
        if r.tx_bytes == 0 and not lead & set(r.ops):
            raise ProgramError(f"{owner}: {KEY}: ring {r.name}'s copies complete by arrivals "
                               "(Effect.completes), which are not shared; drop "
                               "AgentSpec.shared_issue")
    uneven = [op for op in mine if spec.op_bytes.get(op, 0) % shared.warps]
    if uneven:
        raise ProgramError(f"{owner}: {KEY}: the bytes of copies {uneven} "
                           f"({[spec.op_bytes.get(op, 0) for op in uneven]}) do not divide "
                           f"into {shared.warps} equal shares; pass warps that divide them")
    if spec.cluster is not None:
        raise ProgramError(f"{owner}: {KEY} is not modelled with a cluster; drop "
                           "AgentSpec.cluster or AgentSpec.shared_issue")
    return shared


def expand(plan: Plan, body: Sequence[Op], edges: Sequence[DepEdge]
           ) -> tuple[Plan, tuple[Op, ...], tuple[DepEdge, ...]]:
    """``plan``'s shared-issue writer as one agent a warp (the module says how); the plan
    returned has no ``shared_issue`` and is proven as it stands."""
    shared = plan.shared_issue
    assert shared is not None
    lead = plan.program(shared.agent)
    mine = shared_copies(shared, plan.rings)
    n = len(body)
    # warp w's own copy of shared op mine[j]
    copy_of = {(w, op): n + (w - 1) * len(mine) + j
               for w in range(1, shared.warps) for j, op in enumerate(mine)}
    out_body = (*body, *(body[op] for w in range(1, shared.warps) for op in mine))
    op_bytes = {**plan.op_bytes, **{op: plan.op_bytes[op] // shared.warps for op in mine},
                **{c: plan.op_bytes[op] // shared.warps for (_, op), c in copy_of.items()}}

    def warp_program(w: int) -> AgentProgram:
        def steps(xs: Sequence[Step]) -> tuple[Step, ...]:
            return tuple(attrs.evolve(s, op=copy_of[(w, s.op)])
                         if s.kind == StepKind.OP and s.op in mine else s
                         for s in xs if not lead_only(shared, plan.rings, s))
        role = attrs.evolve(lead.role, name=warp_name(shared.agent, w), warps=1,
                            ops=tuple(copy_of[(w, op)] for op in mine))
        return attrs.evolve(lead, role=role, prologue=[steps(it) for it in lead.prologue],
                            kernel=steps(lead.kernel),
                            epilogue=[steps(it) for it in lead.epilogue],
                            finish=steps(lead.finish), store=steps(lead.store),
                            drain=steps(lead.drain))

    others = [warp_program(w) for w in range(1, shared.warps)]
    at = next(i for i, p in enumerate(plan.programs) if p.name == shared.agent)
    programs = [*plan.programs[:at + 1], *others, *plan.programs[at + 1:]]
    names = tuple(p.name for p in others)
    rings = []
    for r in plan.rings:
        ops = [op for op in r.ops if op in mine]
        if ops:
            r = attrs.evolve(r, ops=(*r.ops, *(copy_of[(w, op)] for w in range(1, shared.warps)
                                               for op in ops)),
                             waiters=(*r.waiters, *names) if r.kind == "empty" else r.waiters)
        rings.append(r)
    out_edges = list(edges)
    for w in range(1, shared.warps):
        def of(op: int, w: int = w) -> int:
            return copy_of.get((w, op), op)
        out_edges += [attrs.evolve(e, producer=of(e.producer), consumer=of(e.consumer))
                      for e in edges if e.producer in mine or e.consumer in mine]
    expanded = attrs.evolve(plan, programs=programs, rings=rings, op_bytes=op_bytes,
                            shared_issue=None)
    return expanded, out_body, tuple(out_edges)


def shared_issue_assumptions(plan: Plan) -> list[str]:
    """What the proof of a shared-issue plan takes as given (its model's assumptions)."""
    shared = plan.shared_issue
    if shared is None:
        return []
    lead = f", and the lead alone issues copies {list(shared.lead)}" if shared.lead else ""
    return [f"agent {shared.agent}'s copies issued by {shared.warps} of its warps (agents "
            f"{', '.join(warp_name(shared.agent, w) for w in range(shared.warps))}), each an "
            "equal share of every shared copy after its own wait; warp 0 alone announces a "
            f"stage's bytes{lead}"]
