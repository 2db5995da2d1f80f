"""Clusters: CTAs that share multicast copies, lowered and instantiated for the proof.

docs/guide/agents.md, "Clusters".  A :class:`~pipeline_core.plan.ClusterSpec` names the copies
each CTA's writer *multicasts*: it issues its ``1 / ctas`` share of the tile into the same ring
stage of every CTA of the cluster.  So a stage of a ring that carries a multicast copy

* fills with bytes from every CTA's writer (each CTA's full barrier still gets its own writer's
  one ``EXPECT_TX`` of the whole stage), and
* may be overwritten only once the readers of *every* CTA released it: each reader's release is
  an arrival on its own CTA's empty barrier and one on every peer's (``Step.peer``), at cluster
  scope (``Step.scope``), and the empty ring's arrival count is multiplied by the CTAs.

:func:`lower_cluster` makes those edits on the lowering's rings and programs.  :func:`expand`
turns a cluster plan into the plan of *one* CTA holding every CTA's agents (``name@cta<r>``),
rings and body ops, with each multicast copy landing its share on every CTA's full ring and each
peer arrival on the peer's empty ring: the agents checker (pipeline_core/agents/prove.py) proves
that plan as it proves any other, and adds what only a cluster has (:class:`Expansion`): a
CTA-scope arrival on a peer's barrier counts towards its phase but releases nothing to the
peer's waiters (NVIDIA/cutlass#3324), the barriers must be initialised cluster-wide before a
peer's first signal (the start barrier), and no CTA may exit while a peer may still signal it
(the end barrier).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from pipeline_core.edges import DepEdge
from pipeline_core.errors import ProgramError
from pipeline_core.ops import DepKind, Op
from pipeline_core.plan import (AgentProgram, AgentRole, AgentSpec, Cluster, Plan, Ring, Step,
                                StepKind)
from pipeline_core.sync.model import SyncModel
from pipeline_core.tiles import varies

#: the release scope a peer arrival is lowered with (a ClusterSync.release_scopes entry)
CLUSTER_SCOPE = "cluster"
#: the agent that forwards the readers' releases to the peers (``ClusterSync.relay``)
RELAY = "relay"


#: the steps that signal a ring
SIGNALS = (StepKind.ARRIVE, StepKind.EXPECT_TX)


def cta_name(name: str, cta: int) -> str:
    """An agent's or ring's name in CTA ``cta`` of the instantiated cluster."""
    return f"{name}@cta{cta}"


def lower_cluster(spec: AgentSpec, sync: SyncModel, rings: Sequence[Ring],
                  kernels: Mapping[str, list[Step]], copies: Sequence[int], *, owner: str,
                  target: str
                  ) -> tuple[list[Ring], dict[str, list[Step]], Cluster | None, list[AgentRole]]:
    """The rings and reader kernels of a cluster (the module says what changes), and the
    plan's ``Cluster``; unchanged and None without ``spec.cluster``.  ``copies``: the
    phase-tracked copies a multicast may name."""
    c = spec.cluster
    if c is None:
        return list(rings), dict(kernels), None, []
    model = sync.cluster
    who = f"{owner}: AgentSpec.cluster"
    if model is None:
        raise ProgramError(f"{who} asks for a cluster of {c.ctas} CTAs, but target {target}'s "
                           f"sync model {sync.name} declares no cluster forms "
                           "(SyncModel.cluster); drop AgentSpec.cluster")
    if not 2 <= c.ctas <= model.max_ctas:
        raise ProgramError(f"{who}: ctas={c.ctas}; sync model {sync.name} takes clusters of 2 "
                           f"to {model.max_ctas} CTAs (ctas=2)")
    bad = [i for i in c.multicast if i not in copies]
    if bad or not c.multicast:
        raise ProgramError(f"{who}: multicast={list(c.multicast)} must name phase-tracked "
                           f"copies among ops {sorted(copies)}")
    if spec.orders or spec.reduction is not None or varies(spec.trip_rule) or spec.once \
            or spec.store is not None or spec.split is not None:
        raise ProgramError(f"{who}: a cluster is modelled for rings of K-tile copies only; "
                           "drop AgentSpec.orders, reduction, once, store and split (and a "
                           "trip_rule whose tiles differ), or the cluster")
    if CLUSTER_SCOPE not in model.release_scopes:
        raise ProgramError(f"{who}: sync model {sync.name} releases to a peer CTA only at "
                           f"scopes {list(model.release_scopes)}, not {CLUSTER_SCOPE!r}")
    shared = {r.name for r in rings if set(r.ops) & set(c.multicast)}
    empties = {r.name for r in rings if r.kind == "empty" and r.name in shared}
    peers = c.ctas - 1
    if model.relay:  # each peer's relay arrives once per stage and tile
        relays = {e: relay_ring_name(e) for e in empties}
        out_rings = [attrs.evolve(r, ctas=c.ctas, arrivals=r.arrivals + peers,
                                  signallers=(*r.signallers, RELAY))
                     if r.name in empties else attrs.evolve(r, ctas=c.ctas) if r.name in shared
                     else r for r in rings]
        out_rings += [Ring(name=relays[r.name], kind="full", stages=r.stages,
                           arrivals=r.arrivals, signallers=r.signallers, waiters=(RELAY,))
                      for r in rings if r.name in empties]
    else:  # each reader warp arrives on every peer's barrier itself
        out_rings = [attrs.evolve(r, ctas=c.ctas, arrivals=r.arrivals * (c.ctas if r.kind ==
                                                                          "empty" else 1))
                     if r.name in shared else r for r in rings]
    out_kernels: dict[str, list[Step]] = {}
    relay_steps: list[Step] = []
    for name, steps in kernels.items():
        new: list[Step] = []
        for s in steps:
            # a wait on a phase a peer's arrival completes acquires at cluster scope (the fix
            # of NVIDIA/cutlass#3324 upgrades both sides)
            if s.kind == StepKind.PHASE_WAIT and s.channel in empties:
                s = attrs.evolve(s, scope=CLUSTER_SCOPE)
            new.append(s)
            if s.kind != StepKind.ARRIVE or s.channel not in empties:
                continue
            if not model.relay:
                new += [attrs.evolve(s, peer=p, scope=CLUSTER_SCOPE) for p in range(1, c.ctas)]
                continue
            # the reader's local arrival on the relay ring, the relay's wait and peer arrivals
            # (the relay serves tile t at its iteration t: lag 0)
            new.append(attrs.evolve(s, channel=relays[s.channel]))
            if not any(x.channel == s.channel for x in relay_steps if x.peer):
                wait = next(x for x in steps if x.kind == StepKind.PHASE_WAIT)
                relay_steps += [attrs.evolve(wait, channel=relays[s.channel], lag=0,
                                             phase_offset=0),
                                *(attrs.evolve(s, lag=0, peer=p, scope=CLUSTER_SCOPE)
                                  for p in range(1, c.ctas))]
        out_kernels[name] = new
    roles: list[AgentRole] = []
    if relay_steps:
        out_kernels[RELAY] = relay_steps
        roles.append(AgentRole(name=RELAY, ops=(), warps=1, issuers=1))
    return out_rings, out_kernels, Cluster(ctas=c.ctas, multicast=c.multicast), roles


def relay_ring_name(empty: str) -> str:
    """The relay ring of a multicast empty ring (``empty`` -> ``relay``, ``k_empty`` ->
    ``k_relay``)."""
    return empty[:-len("empty")] + "relay" if empty.endswith("empty") else f"{empty}_relay"


@attrs.frozen(kw_only=True)
class Expansion:
    """A cluster plan instantiated as one CTA of every CTA's agents (:func:`expand`), and what
    the checker needs beyond that plan."""

    plan: Plan
    body: tuple[Op, ...]
    edges: tuple[DepEdge, ...]
    ctas: int
    #: expanded agent index -> its CTA
    agent_cta: tuple[int, ...]
    #: expanded ring name -> its CTA
    ring_cta: Mapping[str, int]
    #: expanded op -> the (full ring, bytes) its copy lands on: a multicast copy's share on every
    #: CTA's ring, any other copy all its bytes on its own CTA's
    landings: Mapping[int, tuple[tuple[str, int], ...]]
    #: arrive scopes that release to a peer CTA's waiters (``ClusterSync.release_scopes``)
    release_scopes: tuple[str, ...]
    start_barrier: bool
    end_barrier: bool


def _step_in(s: Step, cta: int, ctas: int, n_ops: int, ring_names: set[str]) -> Step:
    """Step ``s`` of CTA ``cta``: its op and its ring moved to the CTA it acts on."""
    op = s.op + cta * n_ops if s.op >= 0 else s.op
    channel = (cta_name(s.channel, (cta + s.peer) % ctas) if s.channel in ring_names
               else s.channel)
    return attrs.evolve(s, op=op, channel=channel)


def expand(plan: Plan, body: Sequence[Op], edges: Sequence[DepEdge],
           sync: SyncModel) -> Expansion:
    """``plan``'s cluster as one CTA holding every CTA's agents (the module says how)."""
    cluster = plan.cluster
    assert cluster is not None
    ctas, n = cluster.ctas, len(body)
    names = {r.name for r in plan.rings}
    programs: list[AgentProgram] = []
    agent_cta: list[int] = []
    for cta in range(ctas):
        def move(steps: Sequence[Step], cta: int = cta) -> list[Step]:
            return [_step_in(s, cta, ctas, n, names) for s in steps]
        for p in plan.programs:
            role = attrs.evolve(p.role, name=cta_name(p.role.name, cta),
                                ops=tuple(i + cta * n for i in p.role.ops))
            programs.append(attrs.evolve(
                p, role=role, prologue=[move(it) for it in p.prologue], kernel=move(p.kernel),
                epilogue=[move(it) for it in p.epilogue], finish=move(p.finish)))
            agent_cta.append(cta)
    shared = set(cluster.multicast)
    rings: list[Ring] = []
    ring_cta: dict[str, int] = {}
    for cta in range(ctas):
        for r in plan.rings:
            senders = range(ctas) if r.ctas > 1 and r.kind == "empty" else (cta,)
            name = cta_name(r.name, cta)
            # who signals this CTA's ring: the agents (of any CTA) with a step on it
            signallers = tuple(p.name for p in programs
                               if any(x.channel == name and x.kind in SIGNALS
                                      for x in (*p.kernel, *(y for it in p.prologue for y in it),
                                                *(y for it in p.epilogue for y in it))))
            rings.append(attrs.evolve(
                r, name=name, ops=tuple(i + cta * n for i in r.ops),
                signallers=signallers or tuple(cta_name(a, q) for q in senders
                                               for a in r.signallers),
                waiters=tuple(cta_name(a, cta) for a in r.waiters)))
            ring_cta[cta_name(r.name, cta)] = cta
    landings: dict[int, tuple[tuple[str, int], ...]] = {}
    for cta in range(ctas):
        for op, nbytes in plan.op_bytes.items():
            ring = plan.ring_of(op, "full")
            if ring is None:
                continue
            if op in shared:
                landings[op + cta * n] = tuple((cta_name(ring.name, d), nbytes // ctas)
                                               for d in range(ctas))
            else:
                landings[op + cta * n] = ((cta_name(ring.name, cta), nbytes),)
    out_edges: list[DepEdge] = []
    for e in edges:
        for cta in range(ctas):
            out_edges.append(attrs.evolve(e, producer=e.producer + cta * n,
                                          consumer=e.consumer + cta * n))
            # a multicast copy writes every CTA's stage: every CTA's readers read it (FLOW),
            # and it overwrites what every CTA's readers read (ANTI)
            written = e.producer if e.kind == DepKind.FLOW else e.consumer
            if written in shared:
                for q in range(ctas):
                    if q == cta:
                        continue
                    out_edges.append(attrs.evolve(
                        e, producer=e.producer + (q if e.kind == DepKind.FLOW else cta) * n,
                        consumer=e.consumer + (cta if e.kind == DepKind.FLOW else q) * n))
    model = sync.cluster
    expanded = attrs.evolve(plan, programs=programs, rings=rings,
                            op_bytes={i + cta * n: b for cta in range(ctas)
                                      for i, b in plan.op_bytes.items()},
                            cluster=None)
    return Expansion(plan=expanded, body=tuple(body) * ctas, edges=tuple(out_edges), ctas=ctas,
                     agent_cta=tuple(agent_cta), ring_cta=ring_cta, landings=landings,
                     release_scopes=model.release_scopes if model is not None else (),
                     start_barrier=cluster.start_barrier, end_barrier=cluster.end_barrier)
