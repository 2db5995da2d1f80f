"""The ``agents`` lowering: one graph -> one program per agent, with every sync injected.

The schedule names the roles (:class:`~pipeline_core.plan.AgentSpec`) and writes no sync.
From the graph's cross-agent edges and the target's sync model the core derives
(docs/guide/agents.md, "Barrier injection"):

* a **full** ring for each writer agent and buffer (the copies one set of ops reads; or the
  schedule's :class:`~pipeline_core.plan.RingSpec` list) whose copies complete on a
  phase channel (TMA copies): the writer announces the ring's bytes (``EXPECT_TX``) before its
  copies; each reader waits on the phase that holds its tile before its first read of them;
* an **empty** ring when readers' ANTI edges reach back to the writer at the ring distance: the
  writer acquires the stage (waits on the phase its readers' releases complete) before writing;
  each reader releases the stage the ring's ``release_lag`` tiles later, after the counter wait
  that retires its async reads of that tile;
* on counter channels (wgmma groups): a fence before each reader's group, a commit after it,
  and every counter wait's value, derived from the ticks issued between the group and the wait.

Nothing here names a vendor: channels, kinds and tags come from the target's sync model.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs

from pipeline_core.plan import AgentProgram, AgentRole, AgentSpec, Plan, Ring, Step, StepKind
from pipeline_core.agents.cluster import lower_cluster
from pipeline_core.agents.order import join_fences, join_reads, lower_orders
from pipeline_core.agents.bulk_store import lower_store
from pipeline_core.agents.reduction import lower_reduction
from pipeline_core.agents.shared_issue import check_shared_issue
from pipeline_core.agents.turns import lower_turns
from pipeline_core.agents.split import check_split, release_arrivals
from pipeline_core.edges import DepEdge
from pipeline_core.errors import ProgramError
from pipeline_core.ops import DepKind, Op
from pipeline_core.sync.model import ChannelKind, SyncModel

FULL, EMPTY = "full", "empty"

#: Placeholder value of a counter wait before :func:`derive_counter_waits` sets it.
UNDERIVED = -1


def _channel_of(op: Op, sync: SyncModel) -> str | None:
    effect = sync.bind().effect(op.role, op.channel)
    return None if effect is None else effect.counter


def _effect_field(op: Op, sync: SyncModel, field: str, default: str) -> str:
    effect = sync.bind().effect(op.role, op.channel)
    return default if effect is None else getattr(effect, field)


def _agent_of(spec: AgentSpec, body: Sequence[Op], owner: str) -> dict[int, AgentRole]:
    where: dict[int, AgentRole] = {}
    names = [r.name for r in spec.roles]
    if len(set(names)) != len(names):
        raise ProgramError(f"{owner}: agent names repeat: {', '.join(names)}")
    for role in spec.roles:
        for i in role.ops:
            if not 0 <= i < len(body):
                raise ProgramError(f"{owner}: agent {role.name} names op {i}; the body has "
                                   f"{len(body)} ops")
            if i in where:
                raise ProgramError(f"{owner}: op {i} is assigned to agents {where[i].name} and "
                                   f"{role.name}; an op runs on one agent")
            where[i] = role
    missing = [i for i in range(len(body)) if i not in where]
    if missing:
        raise ProgramError(f"{owner}: ops {missing} are assigned to no agent")
    return where


@attrs.frozen(kw_only=True)
class _RingPair:
    """One ring as the lowering builds it: the writer agent, its ops, the full ring their copies
    complete on and, when readers release the stages, the empty ring."""

    writer: str
    ops: tuple[int, ...]
    full: Ring
    empty: Ring | None
    lag: int
    #: the copies complete by the writer's threads' arrivals, not their bytes
    #: (``Effect.completes``): the writer arrives after its last copy, announcing nothing
    by_arrival: bool = False
    #: the memory proxy the copies write through ("": the model tells none apart)
    proxy: str = ""

    @property
    def once(self) -> bool:
        return self.full.once


@attrs.frozen(kw_only=True)
class _Group:
    """The copies of one ring and what the schedule says of it (None: the defaults)."""

    prefix: str  #: "" for a lone derived ring (``full`` / ``empty``), else ``name_``
    ops: tuple[int, ...]
    stages: int | None = None
    release_lag: int | None = None
    once: bool = False


def _ring_groups(spec: AgentSpec, writer_of: dict[int, str], readers_of: dict[int, set[int]],
                 owner: str) -> list[_Group]:
    """Each ring's copies: the schedule's :class:`RingSpec` list, or one ring per writer agent, set of ops reading its copies and whether they are
    issued once per output tile (docs/guide/agents.md, "Several rings"); a derived single ring
    keeps the plain names ``full`` / ``empty``."""
    once = set(spec.once)
    if spec.rings:
        seen: dict[int, str] = {}
        names = [r.name for r in spec.rings]
        if len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
            raise ProgramError(f"{owner}: AgentSpec.rings names {', '.join(names)}: each ring "
                               "needs its own identifier name (e.g. RingSpec(name=\"k\", ...))")
        for r in spec.rings:
            for i in r.ops:
                if i not in writer_of:
                    raise ProgramError(f"{owner}: ring {r.name} names op {i}, which is no "
                                       "phase-tracked copy feeding another agent; list only "
                                       f"ops {sorted(writer_of)}")
                if i in seen:
                    raise ProgramError(f"{owner}: op {i} is in rings {seen[i]} and {r.name}; a "
                                       "copy completes on one ring")
                seen[i] = r.name
            if len({writer_of[i] for i in r.ops}) > 1:
                raise ProgramError(f"{owner}: ring {r.name} holds the copies of agents "
                                   f"{', '.join(sorted({writer_of[i] for i in r.ops}))}; one "
                                   "ring per writer agent")
            if 0 < len(once & set(r.ops)) < len(r.ops):
                raise ProgramError(f"{owner}: ring {r.name} mixes copies issued once "
                                   f"({sorted(once & set(r.ops))}, AgentSpec.once) with per-K-"
                                   "tile copies; give the once copies a ring of their own")
        left = sorted(set(writer_of) - set(seen))
        if left:
            raise ProgramError(f"{owner}: copies {left} are in no ring of AgentSpec.rings; add "
                               "them to a RingSpec's ops")
        return [_Group(prefix=f"{r.name}_", ops=r.ops, stages=r.stages,
                       release_lag=r.release_lag, once=r.ops[0] in once)
                for r in spec.rings if r.ops]
    groups: dict[tuple[str, frozenset[int], bool], list[int]] = {}
    for i in sorted(writer_of):
        key = (writer_of[i], frozenset(readers_of.get(i, ())), i in once)
        groups.setdefault(key, []).append(i)
    if len(groups) == 1:
        return [_Group(prefix="", ops=tuple(next(iter(groups.values()))), once=bool(once))]
    return [_Group(prefix=f"ring{n}_", ops=tuple(ops), once=key[2])
            for n, (key, ops) in enumerate(groups.items())]


def lower_agents(body: Sequence[Op], edges: Sequence[DepEdge], sync: SyncModel, *, stages: int,
                 spec: AgentSpec, owner: str = "schedule", target: str = "") -> Plan:
    """Split ``body`` into one program per agent of ``spec`` and inject the rings and waits
    (and the named barriers of its orderings, :mod:`pipeline_core.agents.order`; ``target``
    names the target in their refusals)."""
    agent_of = _agent_of(spec, body, owner)
    channel = {i: _channel_of(op, sync) for i, op in enumerate(body)}
    kind = {c.name: c.kind for c in sync.channels}

    def phase_bound(i: int) -> bool:
        ch = channel[i]
        return ch is not None and kind.get(ch) == ChannelKind.PHASE

    # an edge between two turns' ops of one ordering is the ordering's to keep (its named
    # barriers, agents/order.py), not a ring's, and so is any edge between two agents of one
    # join; the checker proves them
    turn_of = {i: o.name for o in spec.orders if o.scope != "join" for t in o.turns
               for i in t.ops}
    joined = [{t.agent for t in o.turns} for o in spec.orders if o.scope == "join"]
    cross = [e for e in edges if agent_of[e.producer].name != agent_of[e.consumer].name
             and not (e.producer in turn_of and turn_of[e.producer] == turn_of.get(e.consumer))
             and not any({agent_of[e.producer].name, agent_of[e.consumer].name} <= j
                         for j in joined)]
    for e in cross:
        if e.kind == DepKind.FLOW and not phase_bound(e.producer):
            raise ProgramError(f"{owner}: edge {e.producer}->{e.consumer} crosses agents from an "
                               f"op with no phase channel; only phase-tracked writes may feed "
                               f"another agent, unless both ops are in turns of one ordering "
                               f"or both agents meet in a join (AgentSpec.orders)")
    writers = sorted({agent_of[e.producer].name for e in cross if e.kind == DepKind.FLOW})
    if not writers:
        raise ProgramError(f"{owner}: the agents lowering needs a writer agent whose copies "
                           "complete on a phase channel and feed another agent; found none")
    # every phase-tracked op of a writer agent: the copies its rings carry
    writer_of = {i: agent_of[i].name for i in range(len(body))
                 if agent_of[i].name in writers and phase_bound(i)}
    readers_of: dict[int, set[int]] = {}
    for e in cross:
        if e.kind == DepKind.FLOW:
            readers_of.setdefault(e.producer, set()).add(e.consumer)
    bad = [i for i in spec.once if i not in writer_of]
    if bad:
        raise ProgramError(f"{owner}: AgentSpec.once names ops {bad}, which are no phase-tracked "
                           f"copies feeding another agent; list only ops {sorted(writer_of)}")
    roles = {r.name: r for r in spec.roles}
    reads_of: dict[str, set[int]] = {}  # reader agent -> the copies it reads
    for i, consumers in readers_of.items():
        for c in consumers:
            reads_of.setdefault(agent_of[c].name, set()).add(i)
    split = check_split(spec, roles, writers, {a: frozenset(r) for a, r in reads_of.items()},
                        owner)
    tags = sync_tags(sync)
    pairs = []
    for group in _ring_groups(spec, writer_of, readers_of, owner):
        prefix, ring_ops, own_stages, own_lag, once = (group.prefix, group.ops, group.stages,
                                                       group.release_lag, group.once)
        # a once ring holds one output tile's copy; its release comes after the loop
        depth = (1 if once else stages) if own_stages is None else own_stages
        where = f"ring {prefix[:-1]}: " if prefix else ""
        if depth < 1:
            raise ProgramError(f"{owner}: {where}stages {depth} must be 1 or more")
        lag = (0 if once else spec.release_lag) if own_lag is None else own_lag
        if lag < 0 or lag >= depth:
            raise ProgramError(f"{owner}: {where}release_lag {lag} must be 0 .. stages - 1 "
                               f"({depth - 1})")
        writer = writer_of[ring_ops[0]]
        mine = set(ring_ops)
        for e in cross:  # a once copy's stage is released after the loop, at any distance
            if e.kind == DepKind.ANTI and e.consumer in mine and e.distance != depth and not once:
                raise ProgramError(f"{owner}: ANTI edge {e.producer}->{e.consumer} crosses agents "
                                   f"at distance {e.distance}; a ring of {depth} stages reuses a "
                                   f"stage after {depth} tiles")
        readers = sorted({agent_of[c].name for i in ring_ops for c in readers_of.get(i, ())})
        anti_readers = sorted({agent_of[e.producer].name for e in cross
                               if e.kind == DepKind.ANTI and e.consumer in mine})
        completes = {_effect_field(body[i], sync, "completes", "bytes") for i in ring_ops}
        if len(completes) > 1:
            raise ProgramError(f"{owner}: {where or 'the ring: '}copies {list(ring_ops)} "
                               "complete some by their bytes and some by arrivals "
                               "(Effect.completes); give each kind a ring of its own "
                               "(AgentSpec.rings)")
        by_arrival = completes == {"arrival"}
        tx = sum(spec.op_bytes.get(i, 0) for i in ring_ops)
        if tx <= 0 and not by_arrival:
            raise ProgramError(f"{owner}: agent {writer}'s copies announce no bytes "
                               f"(AgentSpec.op_bytes)")
        # copies completed by arrival: each issuing thread of the writer arrives once, after
        # its copies (cp.async.mbarrier.arrive.noinc), and no bytes are announced
        full = Ring(name=prefix + FULL, kind=FULL, stages=depth,
                    arrivals=roles[writer].issuers if by_arrival else 1,
                    tx_bytes=0 if by_arrival else tx,
                    signallers=(writer,), waiters=tuple(readers), ops=ring_ops, once=once)
        empty = None
        if anti_readers:
            empty = Ring(name=prefix + EMPTY, kind=EMPTY, stages=depth,
                         arrivals=release_arrivals(anti_readers, roles, split),
                         signallers=tuple(anti_readers), waiters=(writer,), ops=ring_ops,
                         release_lag=lag, once=once)
        proxies = {_effect_field(body[i], sync, "proxy", "") for i in ring_ops}
        pairs.append(_RingPair(writer=writer, ops=ring_ops, full=full, empty=empty, lag=lag,
                               by_arrival=by_arrival, proxy=min(proxies)))
    for e in cross:  # an ANTI edge onto a writer op of no ring
        if e.kind == DepKind.ANTI and e.consumer not in writer_of:
            raise ProgramError(f"{owner}: ANTI edge {e.producer}->{e.consumer} crosses agents "
                               f"onto op {e.consumer}, which is no phase-tracked copy; only a "
                               "ring's stage is released across agents")

    lags = _op_lags(spec, agent_of, writers, owner)
    kernels: dict[str, list[Step]] = {}
    for role in spec.roles:
        ops = [i for i in range(len(body)) if agent_of[i].name == role.name]
        reads = [p for p in pairs if role.name in p.full.waiters]
        if role.name in writers:
            described = {i for i in ops
                         if _effect_field(body[i], sync, "descriptor", "") == "device"}
            kernel = _writer_kernel(ops, body, [p for p in pairs if p.writer == role.name], tags,
                                    described)
        elif reads or any(kind.get(channel[i] or "") == ChannelKind.COUNTER for i in ops):
            # a reader of rings, or an agent whose async ops read a buffer other turns of an
            # ordering hand it (the backward's dQ writer): its groups are committed and drained
            if lags:  # a skewed agent issues its ops in the order its role lists them
                ops = list(role.ops)
            chained: dict[int, set[int]] = {}  # op -> this agent's async ops it reads at once
            for e in edges:
                # the producer's instance the consumer needs is issued in the same iteration
                # (FLOW; or ANTI, an async read the consumer overwrites) when the lags say so
                same = lags.get(e.producer, 0) - e.distance == lags.get(e.consumer, 0)
                if (e.kind == DepKind.FLOW or (lags and e.kind == DepKind.ANTI)) and same \
                        and e.producer in ops \
                        and e.consumer in ops and channel[e.producer] is not None \
                        and kind.get(channel[e.producer] or "") == ChannelKind.COUNTER:
                    chained.setdefault(e.consumer, set()).add(e.producer)
            fence = {p.full.name for p in reads if p.proxy and any(
                _effect_field(body[r], sync, "proxy", "") not in ("", p.proxy)
                for w in p.ops for r in readers_of.get(w, ()) if r in ops)}
            kernel = _reader_kernel(ops, body, channel, kind, reads, readers_of, chained, tags,
                                    owner, role.name, lags, fence,
                                    {c.name for c in sync.channels if not c.registers})
        else:
            kernel = [Step(kind=StepKind.OP, op=i, tag=body[i].tag) for i in ops]
        kernels[role.name] = kernel
    names = {i: r.name for i, r in agent_of.items()}
    fenced = join_fences(spec, edges, lambda i: _effect_field(body[i], sync, "proxy", ""), names)
    # a join's async reads retired at the end of the reader's K tile (agents/order.py)
    for agent, async_reads in join_reads(spec, edges, lambda i: kind.get(channel[i] or "")
                                         == ChannelKind.COUNTER, names).items():
        kernels[agent] += [Step(kind=StepKind.COUNTER_WAIT, channel=channel[r] or "", op=r,
                                value=UNDERIVED, tag=tags[f"wait:{channel[r]}"])
                           for r in async_reads]
    orders = lower_orders(spec, sync, roles, writers, kernels, owner=owner, target=target,
                          fenced=fenced, fence_tag=tags.get("proxy_fence", 0))
    hand_overs(spec, body, edges, sync, agent_of, kernels, tags)
    rings = [r for p in pairs for r in (p.full, p.empty) if r is not None]
    # a cluster's multicast rings: every CTA's readers release them (agents/cluster.py)
    rings, kernels, cluster, relays = lower_cluster(spec, sync, rings, kernels, sorted(writer_of),
                                                    owner=owner, target=target)
    # a writer whose copies several of its warps issue (agents/shared_issue.py)
    shared_issue = check_shared_issue(spec, roles, rings, owner)
    programs = [_split(role, kernels[role.name], tags) for role in (*spec.roles, *relays)]
    programs, reduction = lower_reduction(spec, sync, programs, rings, owner=owner, target=target)
    programs, store = lower_store(spec, sync, programs, rings, orders, owner=owner, target=target)
    programs, turns = lower_turns(spec, sync, programs, owner=owner, target=target)
    plan = Plan(stages=stages, programs=programs, rings=rings, reduction=reduction, store=store,
                turns=turns, split=split,
                min_tiles=max(len(p.prologue) for p in programs) or 1,
                op_bytes={i: spec.op_bytes.get(i, 0) for i in sorted(writer_of)},
                orders=orders, sync=sync, trip_rule=spec.trip_rule, cluster=cluster,
                shared_issue=shared_issue,
                description=f"agents lowering, {len(programs)} agents, {stages} ring stages")
    return derive_counter_waits(plan)


def _op_lags(spec: AgentSpec, agent_of: dict[int, AgentRole], writers: Sequence[str],
             owner: str) -> dict[int, int]:
    """``AgentSpec.lags`` checked: a reader's ops only, 0 or more.  An op of an ordering's turn
    may be lagged: a turn brackets the ops one loop iteration issues (FA3's scheduler barrier
    around S_j and PV_{j-1}; agents/order.py), and the proof orders the turns by iteration."""
    for i, lag in spec.lags.items():
        if i not in agent_of or agent_of[i].name in writers:
            raise ProgramError(f"{owner}: AgentSpec.lags names op {i}, which is no reader "
                               "agent's op; only a reader's ops may be issued late")
        if lag < 0:
            raise ProgramError(f"{owner}: AgentSpec.lags gives op {i} lag {lag}; a lag is 0 or "
                               "more K tiles")
    return {i: lag for i, lag in spec.lags.items() if lag}


def sync_tags(sync: SyncModel) -> dict[str, int]:
    """The tag each injected action lowers to: channel waits and commits, and the model's
    ``agent_tags`` for the actions that are no channel's wait ("arrive", "expect_tx", "fence");
    the one statement of it, which the proof's record check holds every step to
    (agents/records.py: an emitter writes a step by its tag)."""
    out: dict[str, int] = {}
    for c in sync.channels:
        key = "phase_wait" if c.kind == ChannelKind.PHASE else f"wait:{c.name}"
        out[key] = c.wait_tag
        if c.commit_tag is not None:
            out[f"commit:{c.name}"] = c.commit_tag
    out.update(sync.agent_tags)
    # a model whose copies complete by arrival needs "async_arrive"; one whose reads cross a
    # proxy, "proxy_fence"
    effects = sync.effects
    wanted = ["phase_wait", "arrive", "expect_tx", "fence"]
    wanted += ["async_arrive"] if any(e.completes == "arrival" for e in effects) else []
    wanted += ["proxy_fence"] if sync.tells_proxies_apart else []
    wanted += ["descriptor_acquire"] if sync.device_written_maps else []
    missing = [k for k in wanted if k not in out]
    if missing:
        raise ProgramError(f"sync model {sync.name}: the agents lowering needs tags for "
                           f"{', '.join(missing)} (SyncModel.agent_tags)")
    return out


def _writer_kernel(ops: list[int], body: Sequence[Op], pairs: Sequence[_RingPair],
                   tags: dict[str, int], described: set[int] | None = None) -> list[Step]:
    """The writer's ops in body order; before a ring's first copy, its acquire (the phase the
    releases of tile t - stages complete) and the arrival announcing the ring's bytes; for a
    ring whose copies complete by arrival, no announcement, and after its last copy the
    threads' arrivals that the copies' landing triggers (``StepKind.ASYNC_ARRIVE``).  Before
    the first of its ``described`` copies (their tensor maps written on the device,
    ``Effect.descriptor``), the writer's acquire of those maps (``StepKind.DESCRIPTOR_ACQUIRE``),
    once per output tile, before its K loop: the maps are the output tile's."""
    steps = []
    started: set[str] = set()
    for i in ops:
        if described and i == min(described):
            steps.append(Step(kind=StepKind.DESCRIPTOR_ACQUIRE, once=True,
                              tag=tags["descriptor_acquire"]))
        pair = next((p for p in pairs if i in p.ops), None)
        if pair is not None and pair.full.name not in started:
            started.add(pair.full.name)
            if pair.empty is not None:
                steps.append(Step(kind=StepKind.PHASE_WAIT, channel=pair.empty.name,
                                  phase_offset=-1, tag=tags["phase_wait"], once=pair.once))
            if not pair.by_arrival:
                steps.append(Step(kind=StepKind.EXPECT_TX, channel=pair.full.name,
                                  value=pair.full.tx_bytes, tag=tags["expect_tx"],
                                  once=pair.once))
        steps.append(Step(kind=StepKind.OP, op=i, tag=body[i].tag,
                          once=pair is not None and pair.once))
        if pair is not None and pair.by_arrival and i == max(x for x in ops if x in pair.ops):
            steps.append(Step(kind=StepKind.ASYNC_ARRIVE, channel=pair.full.name,
                              tag=tags["async_arrive"], once=pair.once))
    return steps


def _cut_after(i: int, rest: Sequence[int], channel: dict[int, str | None],
               counter: str | None, chained: dict[int, set[int]], skew: dict[int, int]) -> bool:
    """Whether async op ``i``'s group is committed right after it: the next op is async on the
    same counter at the same lag, and a later op of the tile reads ``i``'s result but not the
    next op's (docs/guide/agents.md, "Chained groups")."""
    if not rest or channel[rest[0]] != counter or skew.get(rest[0], 0) != skew.get(i, 0):
        return False
    return any(i in chained.get(j, ()) and rest[0] not in chained.get(j, ()) for j in rest[1:])


def _reader_kernel(ops: list[int], body: Sequence[Op], channel: dict[int, str | None],
                   kind: dict[str, ChannelKind], pairs: Sequence[_RingPair],
                   readers_of: dict[int, set[int]], chained: dict[int, set[int]],
                   tags: dict[str, int], owner: str, agent: str,
                   lags: dict[int, int] | None = None,
                   fence: set[str] | frozenset[str] = frozenset(),
                   unfenced: set[str] | frozenset[str] = frozenset()) -> list[Step]:
    """Each ring waited on before the first op that reads its copies; one group per tile on the
    agent's counter channel, cut where an op reads the result of an async op of the same tile
    (``chained``: attention's softmax reading S): the group is committed and a counter wait
    retires it first; each released ring's counter wait and release its lag late
    (docs/guide/agents.md, "Chained groups").  A ring of ``fence`` (its copies written by
    another memory proxy than this agent reads them with) gets the agent's proxy fence right
    after its wait."""
    counters = [c for c in dict.fromkeys(channel[i] for i in ops)
                if c is not None and kind.get(c) == ChannelKind.COUNTER]
    if len(counters) > 1:
        raise ProgramError(f"{owner}: agent {agent} issues async ops on {counters}; one counter "
                           f"channel per reader agent is supported")
    counter = counters[0] if counters else None
    steps: list[Step] = []
    waited: set[str] = set()
    group: list[int] = []      # the open group's ops
    pending: list[int] = []    # ops of this tile's committed groups not yet waited for
    released = [p for p in pairs if p.empty is not None and agent in p.empty.signallers
                and not p.once]
    early: set[str] = set()    # lag-0 rings released at once after a chained wait
    skew = lags or {}

    def late(p: _RingPair) -> int:
        """The ring's release lag behind the latest of this agent's skewed reads of it."""
        return p.lag + max((skew.get(r, 0) for w in p.ops for r in readers_of.get(w, ())
                            if r in ops), default=0)

    for n, i in enumerate(ops):
        lag = skew.get(i, 0)
        needs = chained.get(i, set()) & {*group, *pending}
        if group and (needs or (channel[i] == counter and counter is not None
                                and skew.get(group[0], 0) != lag)):
            # a wait never leaves a group open; a group holds one K tile's ops (a skewed op of
            # another tile opens its own)
            steps.append(Step(kind=StepKind.COMMIT, channel=counter or "",
                              lag=skew.get(group[0], 0), tag=tags[f"commit:{counter}"]))
            pending, group = pending + group, []
        if needs:  # the counter wait's op names the group it must retire
            last = max(needs, key=pending.index)
            # skewed ops: one wait per tile the needs come from, the youngest group's first; a
            # wait its predecessor always covers is left out (derive_counter_waits), one whose
            # tile does not exist yet (the prologue) is not placed
            for op in sorted(needs, key=pending.index, reverse=True):
                if op == last or skew.get(op, 0) != skew.get(last, 0):
                    steps.append(Step(kind=StepKind.COUNTER_WAIT, channel=counter or "", op=op,
                                      lag=skew.get(op, 0), value=UNDERIVED,
                                      tag=tags[f"wait:{counter}"]))
            pending = pending[pending.index(last) + 1:]
            # a lag-0 ring whose reads here all retired is released now, not after the last group
            for p in released:
                reads = {r for w in p.ops for r in readers_of.get(w, ()) if r in ops}
                if p.lag == 0 and p.empty is not None and p.empty.name not in early \
                        and reads <= set(ops[:n]) and not reads & {*group, *pending} \
                        and {skew.get(r, 0) for r in reads} == {skew.get(last, 0)}:
                    early.add(p.empty.name)
                    steps.append(Step(kind=StepKind.ARRIVE, channel=p.empty.name,
                                      lag=skew.get(last, 0), tag=tags["arrive"]))
        for p in pairs:
            if p.full.name not in waited and any(i in readers_of.get(w, ()) for w in p.ops):
                waited.add(p.full.name)
                steps.append(Step(kind=StepKind.PHASE_WAIT, channel=p.full.name, lag=lag,
                                  tag=tags["phase_wait"], once=p.once))
                if p.full.name in fence:
                    steps.append(Step(kind=StepKind.PROXY_FENCE, channel=p.full.name, lag=lag,
                                      tag=tags["proxy_fence"]))
        if channel[i] == counter and counter is not None:
            if not group and counter not in unfenced:
                # each group's first op: order the registers it reads or writes
                steps.append(Step(kind=StepKind.FENCE, channel=counter, lag=lag,
                                  tag=tags["fence"]))
            group.append(i)
        steps.append(Step(kind=StepKind.OP, op=i, lag=lag, tag=body[i].tag))
        if group and group[-1] == i and _cut_after(i, ops[n + 1:], channel, counter, chained,
                                                    skew):
            # a later op reads i's result and not the next async op's: i's group closes here,
            # so that op waits for i alone while the next runs (FlashAttention-3's backward:
            # P from S while dP is still in flight)
            steps.append(Step(kind=StepKind.COMMIT, channel=counter or "", lag=lag,
                              tag=tags[f"commit:{counter}"]))
            pending, group = pending + group, []
    if group:
        steps.append(Step(kind=StepKind.COMMIT, channel=counter or "", lag=skew.get(group[0], 0),
                          tag=tags[f"commit:{counter}"]))
    released = [p for p in released if p.empty is not None and p.empty.name not in early]
    for p in released:
        if late(p) >= p.full.stages:
            name = p.empty.name if p.empty is not None else p.full.name
            raise ProgramError(f"{owner}: agent {agent} releases ring {name} {late(p)} K tiles "
                               f"late (its release lag {p.lag} behind reads issued up to "
                               f"{late(p) - p.lag} tiles late, AgentSpec.lags); a ring of "
                               f"{p.full.stages} stages needs it below {p.full.stages}")
    released = [attrs.evolve(p, lag=late(p)) for p in released]
    for lag in sorted({p.lag for p in released}):
        # skewed: the wait names the read of these rings committed last for the tile (the
        # tile's last group may be a later op's that reads none of them)
        ring_reads = [r for p in released if p.lag == lag for w in p.ops
                      for r in readers_of.get(w, ()) if r in ops]
        last = (max(ring_reads, key=lambda r: (skew.get(r, 0), ops.index(r)))
                if skew and ring_reads else -1)
        if counter is not None:
            steps.append(Step(kind=StepKind.COUNTER_WAIT, channel=counter, lag=lag, op=last,
                              value=UNDERIVED, tag=tags[f"wait:{counter}"]))
        steps += [Step(kind=StepKind.ARRIVE, channel=p.empty.name, lag=lag, tag=tags["arrive"])
                  for p in released if p.lag == lag and p.empty is not None]
    if counter is not None:  # the accumulators are read after the loop: retire every group
        steps.append(Step(kind=StepKind.COUNTER_WAIT, channel=counter, lag=-1, value=0,
                          tag=tags[f"wait:{counter}"]))
    # a copy issued once is read by every K tile: released after that final wait
    steps += [Step(kind=StepKind.ARRIVE, channel=p.empty.name, lag=-1, tag=tags["arrive"],
                   once=True)
              for p in pairs if p.once and p.empty is not None and agent in p.empty.signallers]
    return steps


def hand_overs(spec: AgentSpec, body: Sequence[Op], edges: Sequence[DepEdge], sync: SyncModel,
               agent_of: dict[int, AgentRole], kernels: dict[str, list[Step]],
               tags: dict[str, int]) -> None:
    """The steps a buffer two turns of one ordering hand each other needs beyond the named
    barriers, put before the handing turn's NAMED_ARRIVE in ``kernels`` (in place;
    docs/guide/agents.md, "Hand-overs between turns"):

    * a FLOW edge whose write is by another memory proxy than the read (``Effect.proxy``: a
      consumer's ``st.shared`` of its dQ block, read by the dQ writer's bulk reduce) gets the
      writer's PROXY_FENCE: its generic writes ordered before the async proxy's reads;
    * an ANTI edge whose read is an async op on a counter channel (the bulk reduce reads the
      buffer until its group retires) gets that agent's COUNTER_WAIT retiring the op's group,
      so the turn hands the buffer back only once its reads ended."""
    turn_of = {(o.name, i): t.agent for o in spec.orders if o.scope == "k_tile"
               for t in o.turns for i in t.ops}
    orders = {name for name, _ in turn_of}
    fences: dict[str, set[str]] = {}
    waits: dict[str, list[tuple[str, int]]] = {}
    for e in edges:
        for name in sorted(orders):
            a, b = turn_of.get((name, e.producer)), turn_of.get((name, e.consumer))
            if a is None or b is None or a == b:
                continue
            if e.kind == DepKind.FLOW:
                w = _effect_field(body[e.producer], sync, "proxy", "")
                r = _effect_field(body[e.consumer], sync, "proxy", "")
                if w and r and w != r:
                    fences.setdefault(a, set()).add(name)
            else:
                ch = _channel_of(body[e.producer], sync)
                kinds = {c.name: c.kind for c in sync.channels}
                if ch is not None and kinds.get(ch) == ChannelKind.COUNTER \
                        and (name, e.producer) not in waits.get(a, []):
                    waits.setdefault(a, []).append((name, e.producer))
    for agent in sorted(set(fences) | set(waits)):
        steps = kernels[agent]
        out: list[Step] = []
        for s in steps:
            if s.kind == StepKind.NAMED_ARRIVE and not s.once:
                for name, op in waits.get(agent, []):
                    if name == s.channel:
                        ch = _channel_of(body[op], sync) or ""
                        out.append(Step(kind=StepKind.COUNTER_WAIT, channel=ch, op=op,
                                        lag=s.lag, value=UNDERIVED, tag=tags[f"wait:{ch}"]))
                if s.channel in fences.get(agent, set()):
                    out.append(Step(kind=StepKind.PROXY_FENCE, channel=s.channel, lag=s.lag,
                                    tag=tags["proxy_fence"]))
            out.append(s)
        kernels[agent] = out


def _split(role: AgentRole, kernel: list[Step], tags: dict[str, int]) -> AgentProgram:
    """Prologue, kernel and epilogue of one agent from its iteration-invariant steps.

    A step with lag L first runs at iteration L; the prologue holds iterations before the
    largest lag, the epilogue iterations KT .. KT + lag - 1.  A step with lag -1 is an
    after-the-loop step: it runs once, at the end of the epilogue.  A once step of lag 0 is a
    before-the-loop step: it runs once, at the start of the prologue.  An exit step
    (:attr:`Step.exit`) runs once as the loop exits, first in the epilogue.
    """
    before = [s for s in kernel if s.once and s.lag == 0 and not s.exit]
    leave = [s for s in kernel if s.exit]  # as the loop exits, before the epilogue
    after = [s for s in kernel if s.lag < 0 and not s.exit]
    loop = [s for s in kernel if s.lag >= 0 and not s.once]
    depth = max((s.lag for s in loop), default=0)
    prologue = [[s for s in loop if i - s.lag >= 0] for i in range(max(depth, bool(before)))]
    if before:
        prologue[0] = before + prologue[0]
    # epilogue iteration j is t = KT + j: keep steps whose tile KT + j - lag is still < KT
    epilogue = [[s for s in loop if j - s.lag < 0] for j in range(depth)]
    if after:
        final = [attrs.evolve(s, lag=0) for s in after]
        if epilogue:
            epilogue[-1] = epilogue[-1] + final
        else:
            epilogue = [final]
    if leave:
        epilogue = [leave + epilogue[0], *epilogue[1:]] if epilogue else [leave]
    return AgentProgram(role=role, prologue=prologue, kernel=loop, epilogue=epilogue)


def derive_counter_waits(plan: Plan) -> Plan:
    """Set every underived counter wait to the largest count that still retires its group.

    A wait serving tile u must retire the group holding u's async ops (its last group, or for a
    chained wait, whose ``op`` names one, the group holding that op): the count is the number of
    commits after that group and before the wait (in-order channels retire oldest first).  The
    kernel's wait is iteration-invariant, so its value is the minimum over every instance of an
    unrolled run long enough to reach the steady state; prologue and epilogue positions get their
    own (docs/guide/agents.md, "Counter waits").  A wait whose group an earlier wait has already
    retired in every instance (a release after a chained wait of 0) is left out.
    """
    tiles = plan.min_tiles + plan.stages + 4
    programs = []
    for prog in plan.programs:
        values: dict[tuple[str, int, int], int] = {}  # (section, iteration, position) -> min
        # channel -> committed groups: (tile, the ops issued in it)
        commits: dict[str, list[tuple[int, frozenset[int]]]] = {}
        issued: list[int] = []
        retired: dict[str, int] = {}  # channel -> groups (oldest first) an earlier wait retired
        needed: dict[tuple[str, int, int], bool] = {}
        for section, it, pos, t, step in _walk(prog, tiles):
            if step.kind == StepKind.OP:
                issued.append(step.op)
            elif step.kind == StepKind.COMMIT:
                commits.setdefault(step.channel, []).append((step.tile(t), frozenset(issued)))
                issued = []
            elif step.kind == StepKind.COUNTER_WAIT and step.value == UNDERIVED:
                groups = commits.get(step.channel, [])
                u = step.tile(t)
                # op -1: the tile's last group; else the group holding that op (a chained wait)
                after = [k for k, (g, ops) in enumerate(groups)
                         if g == u and (step.op < 0 or step.op in ops)]
                if not after:
                    raise ProgramError(f"agent {prog.name}: the counter wait for tile {u} on "
                                       f"{step.channel} comes before that tile's group is committed")
                n = len(groups) - 1 - after[-1]
                key = (section, 0 if section == "kernel" else it, pos)
                values[key] = min(values.get(key, n), n)
                needed[key] = needed.get(key, False) or after[-1] >= retired.get(step.channel, 0)
                retired[step.channel] = max(retired.get(step.channel, 0), after[-1] + 1)
            elif step.kind == StepKind.COUNTER_WAIT:
                done = len(commits.get(step.channel, [])) - max(step.value, 0)
                retired[step.channel] = max(retired.get(step.channel, 0), done)

        def fill(section: str, it: int, steps: Sequence[Step]) -> list[Step]:
            return [attrs.evolve(s, value=values[(section, it, pos)])
                    if s.kind == StepKind.COUNTER_WAIT and s.value == UNDERIVED else s
                    for pos, s in enumerate(steps)
                    if not (s.kind == StepKind.COUNTER_WAIT and s.value == UNDERIVED
                            and not needed[(section, it, pos)])]

        programs.append(_drop_repeated_drain(attrs.evolve(
            prog, prologue=[fill("prologue", i, s) for i, s in enumerate(prog.prologue)],
            kernel=fill("kernel", 0, prog.kernel),
            epilogue=[fill("epilogue", j, s) for j, s in enumerate(prog.epilogue)])))
    return attrs.evolve(plan, programs=programs)


def _drop_repeated_drain(prog: AgentProgram) -> AgentProgram:
    """Leave out the after-the-loop counter wait 0 (the last counter wait of the last epilogue
    iteration; only once-ring releases follow it) when the epilogue already drained that channel
    to 0 with no commit since (the last release's own wait did it)."""
    if not prog.epilogue or not prog.epilogue[-1]:
        return prog
    tail = prog.epilogue[-1]
    at = next((i for i in reversed(range(len(tail))) if tail[i].kind == StepKind.COUNTER_WAIT),
              None)
    if at is None or tail[at].value != 0 or any(
            s.kind != StepKind.ARRIVE or not s.once for s in tail[at + 1:]):
        return prog
    last = tail[at]
    flat = [s for steps in prog.epilogue[:-1] for s in steps] + list(tail[:at])
    for s in reversed(flat):
        if s.kind == StepKind.COMMIT and s.channel == last.channel:
            return prog
        if s.kind == StepKind.COUNTER_WAIT and s.channel == last.channel and s.value == 0:
            epilogue = [*prog.epilogue[:-1], (*tail[:at], *tail[at + 1:])]
            return attrs.evolve(prog, epilogue=[steps for steps in epilogue if steps])
    return prog


def _walk(prog: AgentProgram, tiles: int) -> Iterator[tuple[str, int, int, int, Step]]:
    for i, steps in enumerate(prog.prologue):
        for pos, s in enumerate(steps):
            yield "prologue", i, pos, i, s
    for t in range(len(prog.prologue), tiles):
        for pos, s in enumerate(prog.kernel):
            yield "kernel", t, pos, t, s
    for j, steps in enumerate(prog.epilogue):
        for pos, s in enumerate(steps):
            yield "epilogue", j, pos, tiles + j, s
