"""Orderings between consumer groups, lowered onto the target's named barriers.

A schedule declares an :class:`~pipeline_core.plan.OrderSpec` (the ping-pong: consumer A
issues its ops of K tile t, then consumer B its ops of tile t, then A its ops of tile t + 1);
this module checks it, hands out barrier ids and thread counts, and puts the steps into each
turn's program (docs/guide/agents.md, "Named barriers"):

* turn i waits on its own barrier ``ids[i]`` (NAMED_SYNC) before its first op, and arrives
  (NAMED_ARRIVE, no wait) on the next turn's barrier after its last op (after the commit that
  closes the group the op is in), so the next turn's wait completes only once it was issued;
* barrier ``ids[i]`` is joined by turn i's threads and the previous turn's: its count is
  ``(warps[i] + warps[i - 1]) * warp_size``;
* the first turn's wait for tile t waits on the last turn's arrival of tile t - 1, so it is
  injected with lag 1: the split leaves it out of tile 0 (the first turn goes first) and puts
  the last one, matching the last turn's arrival of tile KT - 1, into the epilogue.  Every
  generation of every barrier is then filled once per K tile: the barriers end each output tile
  as they began it (the persistent kernel runs on without a priming arrival).

A step's tile (``t - lag``) is its generation: the checker counts each barrier's generations
by it (pipeline_core/agents/prove.py).

A join (scope ``join``) has no turn order: every turn's agent syncs (NAMED_SYNC) on one barrier,
joined by all their threads, right after its turn's ops (after the commit closing their group;
a turn of no op meets first in its K tile), once per K tile; where a write before it is read by
another agent through another memory proxy (dS stored by ``st.shared``, read by a wgmma), the
writer's PROXY_FENCE goes right before its sync, and where an agent's async read of what the
others wrote (a bulk reduce of their staged dQ) is overwritten later, its COUNTER_WAIT retiring
the read ends its K tile, so its next meeting comes after the read (docs/guide/agents.md,
"Joins").  An agent may take part in joins beside one ordering of turns: each has its own
barrier.

An ordering of scope ``output_tile`` alternates the agents of a tile split over output tiles
(docs/guide/agents.md, "Tile splits"): each turn waits (a once step, ``output_lag`` 1: the
previous output tile's generation) before its loop and arrives on the next turn's barrier as its
loop exits, after the tile's last commit; its generations count the CTA's output tiles.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from pipeline_core.edges import DepEdge
from pipeline_core.ops import DepKind
from pipeline_core.plan import AgentRole, AgentSpec, Ordering, Step, StepKind
from pipeline_core.errors import ProgramError
from pipeline_core.sync.model import SyncModel


def lower_orders(spec: AgentSpec, sync: SyncModel, roles: Mapping[str, AgentRole],
                 writers: Sequence[str], kernels: dict[str, list[Step]], *, owner: str,
                 target: str = "", fenced: Mapping[str, set[str]] | None = None,
                 fence_tag: int = 0) -> tuple[Ordering, ...]:
    """Check ``spec.orders``, give each turn a barrier id and count, and insert the named
    barrier steps into ``kernels`` (agent name -> its iteration-invariant steps) in place.
    ``fenced``: join name -> the agents whose writes before it another agent reads through
    another memory proxy (:func:`join_fences`), which fence before they sync (a PROXY_FENCE
    step of tag ``fence_tag``)."""
    if not spec.orders:
        return ()
    nb = sync.named_barriers
    first = spec.orders[0].name
    if nb is None:
        where = f"target {target}" if target else f"sync model {sync.name}"
        raise ProgramError(f"{owner}: AgentSpec.orders {first!r} needs named barriers, and "
                           f"{where} declares none (SyncModel.named_barriers); drop the ordering "
                           "or compile for a target that has them (pipeline-core targets)")
    names = [o.name for o in spec.orders]
    if len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
        raise ProgramError(f"{owner}: AgentSpec.orders names {', '.join(names)}: each ordering "
                           "needs its own identifier name (e.g. OrderSpec(name=\"pingpong\", ...))")
    free = list(nb.free)
    wanted = sum(1 if o.scope == "join" else len(o.turns) for o in spec.orders)
    if wanted > len(free):
        raise ProgramError(f"{owner}: AgentSpec.orders need {wanted} named barrier ids and "
                           f"target {target or sync.name} has {len(free)} free (ids 0..{nb.ids - 1}, "
                           f"reserved {list(nb.reserved)}); declare fewer turns")
    out = []
    ordered: dict[str, str] = {}
    for order in spec.orders:
        agents = [t.agent for t in order.turns]
        if len(agents) < 2:
            raise ProgramError(f"{owner}: ordering {order.name} has {len(agents)} turn; an "
                               "ordering needs two consumer groups or more (Turn(agent=..., "
                               "ops=...))")
        for n, turn in enumerate(order.turns):
            if turn.agent not in roles:
                raise ProgramError(f"{owner}: ordering {order.name} names agent {turn.agent!r}; "
                                   f"agents: {', '.join(roles)}")
            if turn.agent in writers:
                raise ProgramError(f"{owner}: ordering {order.name} names the writer agent "
                                   f"{turn.agent}; named barriers order consumer groups only")
            # an agent takes one turn in one ordering of turns, and one part in each join
            seen = ordered if order.scope != "join" else {
                t.agent: order.name for t in order.turns[:n]}
            if turn.agent in seen:
                raise ProgramError(f"{owner}: agent {turn.agent} has a turn in ordering "
                                   f"{seen[turn.agent]} and again in {order.name}; an agent "
                                   "takes one turn in one ordering of turns, and one part in "
                                   "each join")
            if order.scope != "join":
                ordered[turn.agent] = order.name
            mine = set(roles[turn.agent].ops)
            # a join's part may list no op: it meets first in its K tile (a reader of what the
            # others publish, such as a writer agent's bulk reduce of their staged buffers)
            if (not turn.ops and order.scope != "join") or not set(turn.ops) <= mine:
                raise ProgramError(f"{owner}: ordering {order.name}: turn of {turn.agent} names "
                                   f"ops {list(turn.ops)}; list one or more of its own ops "
                                   f"{sorted(mine)}")
        warps = [roles[a].warps for a in agents]
        if order.scope == "join":
            bid, count = free.pop(0), sum(warps) * nb.warp_size
            for turn in order.turns:
                meet = Step(kind=StepKind.NAMED_SYNC, channel=order.name, barrier=bid,
                            value=count, tag=nb.sync_tag)
                fence = ([Step(kind=StepKind.PROXY_FENCE, channel=order.name, tag=fence_tag)]
                         if turn.agent in (fenced or {}).get(order.name, set()) else [])
                kernels[turn.agent] = (_after(kernels[turn.agent], set(turn.ops), [*fence, meet])
                                       if turn.ops else [meet, *kernels[turn.agent]])
            out.append(Ordering(name=order.name, turns=order.turns, barriers=(bid,),
                                counts=(count,), scope=order.scope))
            continue
        ids = tuple(free[:len(agents)])
        free = free[len(agents):]
        counts = tuple((warps[i] + warps[i - 1]) * nb.warp_size for i in range(len(agents)))
        split = sorted(set(spec.split.agents) & set(agents)) if spec.split is not None else []
        if order.scope == "k_tile" and split:
            raise ProgramError(f"{owner}: ordering {order.name} takes turns every K tile among "
                               f"agents of AgentSpec.split ({', '.join(split)}), which never run "
                               "the same output tile; give it scope=\"output_tile\"")
        if order.scope == "output_tile":
            _check_output_scope(spec, order.name, agents, owner)
            for i, turn in enumerate(order.turns):
                j = (i + 1) % len(agents)
                # the wait fills the previous output tile's generation (output_lag 1), before
                # the loop; the arrive hands the next output tile over as the loop exits
                sync_step = Step(kind=StepKind.NAMED_SYNC, channel=order.name, barrier=ids[i],
                                 value=counts[i], once=True, output_lag=1, tag=nb.sync_tag)
                arrive = Step(kind=StepKind.NAMED_ARRIVE, channel=order.name, barrier=ids[j],
                              value=counts[j], once=True, exit=True, tag=nb.arrive_tag)
                kernels[turn.agent] = [sync_step, *kernels[turn.agent], arrive]
            out.append(Ordering(name=order.name, turns=order.turns, barriers=ids, counts=counts,
                                scope=order.scope))
            continue
        for i, turn in enumerate(order.turns):
            j = (i + 1) % len(agents)
            sync_step = Step(kind=StepKind.NAMED_SYNC, channel=order.name, barrier=ids[i],
                             value=counts[i], lag=1 if i == 0 else 0, tag=nb.sync_tag)
            arrive = Step(kind=StepKind.NAMED_ARRIVE, channel=order.name, barrier=ids[j],
                          value=counts[j], tag=nb.arrive_tag)
            kernels[turn.agent] = _bracket(kernels[turn.agent], set(turn.ops), sync_step, arrive)
        out.append(Ordering(name=order.name, turns=order.turns, barriers=ids, counts=counts))
    return tuple(out)


def _check_output_scope(spec: AgentSpec, name: str, agents: Sequence[str], owner: str) -> None:
    """An ordering over output tiles alternates the agents of the tile split, in its order: turn
    i is the agent that owns the CTA's output tiles i, i + n, ... (docs/guide/agents.md, "Tile
    splits")."""
    split = spec.split
    if split is None or tuple(agents) != split.agents:
        have = f"AgentSpec.split is {list(split.agents)}" if split else "AgentSpec.split is None"
        raise ProgramError(f"{owner}: ordering {name} has scope output_tile, whose turns are the "
                           f"agents of the tile split in its order; its turns name {list(agents)} "
                           f"and {have} (set AgentSpec.split=TileSplit(agents={tuple(agents)!r}))")


def join_reads(spec: AgentSpec, edges: Sequence[DepEdge], is_async: Callable[[int], bool],
               agent_of: Mapping[int, str]) -> dict[str, list[int]]:
    """Agent -> its async ops that read what another agent of a join of theirs writes later
    (an ANTI edge across the join): each gets a COUNTER_WAIT at the end of the agent's K tile,
    which orders the read's end before the agent's next meeting (the derivation drops it where
    an earlier wait already retired the read)."""
    out: dict[str, list[int]] = {}
    for order in spec.orders:
        if order.scope != "join":
            continue
        parts = {t.agent for t in order.turns}
        for e in edges:
            a, b = agent_of[e.producer], agent_of[e.consumer]
            if e.kind == DepKind.ANTI and a != b and {a, b} <= parts and is_async(e.producer) \
                    and e.producer not in out.get(a, []):
                out.setdefault(a, []).append(e.producer)
    return out


def join_fences(spec: AgentSpec, edges: Sequence[DepEdge], proxy_of: Callable[[int], str],
                agent_of: Mapping[int, str]) -> dict[str, set[str]]:
    """Join name -> the agents that must fence before they sync: a turn op of theirs (a write
    the join publishes) that another agent of the join reads by another memory proxy (FLOW
    edge; PTX ISA, "Proxies": the writing threads' ``fence.proxy.async``, then the barrier, as
    CUTLASS orders a generic write before a wgmma's read)."""
    out: dict[str, set[str]] = {}
    for order in spec.orders:
        if order.scope != "join":
            continue
        parts = {t.agent for t in order.turns}
        published = {i for t in order.turns for i in t.ops}
        for e in edges:
            a, b = agent_of[e.producer], agent_of[e.consumer]
            w, r = proxy_of(e.producer), proxy_of(e.consumer)
            if e.kind == DepKind.FLOW and e.producer in published and a != b \
                    and {a, b} <= parts and w and r and w != r:
                out.setdefault(order.name, set()).add(a)
    return out


def _after(steps: list[Step], ops: set[int], add: Sequence[Step]) -> list[Step]:
    """``steps`` with ``add`` right behind the last op in ``ops`` (and behind the commit that
    closes its group)."""
    tail = max(n for n, s in enumerate(steps) if s.kind == StepKind.OP and s.op in ops)
    if tail + 1 < len(steps) and steps[tail + 1].kind == StepKind.COMMIT:
        tail += 1
    return [*steps[:tail + 1], *add, *steps[tail + 1:]]


def _bracket(steps: list[Step], ops: set[int], before: Step, after: Step) -> list[Step]:
    """``steps`` with ``before`` ahead of the first op in ``ops`` (and ahead of the fence that
    opens its group) and ``after`` behind the last (and behind the commit that closes it)."""
    at = [n for n, s in enumerate(steps) if s.kind == StepKind.OP and s.op in ops]
    head, tail = at[0], at[-1]
    if head and steps[head - 1].kind == StepKind.FENCE:
        head -= 1
    if tail + 1 < len(steps) and steps[tail + 1].kind == StepKind.COMMIT:
        tail += 1
    return [*steps[:head], before, *steps[head:tail + 1], after, *steps[tail + 1:]]
