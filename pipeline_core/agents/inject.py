"""The ``agents`` lowering: one graph -> one program per agent, with every sync injected.

The schedule names the roles (:class:`~pipeline_core.agents.model.AgentSpec`) and writes no sync.
From the graph's cross-agent edges and the target's sync model the core derives
(docs/guide/agents.md, "Barrier injection"):

* a **full** ring for each writer agent whose ops complete on a phase channel (TMA copies):
  the writer announces the bytes (``EXPECT_TX``) before its copies; each reader waits on the
  phase that holds its tile before its first read;
* an **empty** ring when readers' ANTI edges reach back to the writer at the ring distance: the
  writer acquires the stage (waits on the phase its readers' releases complete) before writing;
  each reader releases the stage ``release_lag`` tiles later, after the counter wait that
  retires its async reads of that tile;
* on counter channels (wgmma groups): a fence before each reader's group, a commit after it,
  and every counter wait's value, derived from the ticks issued between the group and the wait.

Nothing here names a vendor: channels, kinds and tags come from the target's sync model.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs

from pipeline_core.agents.model import AgentPlan, AgentProgram, AgentRole, AgentSpec, Ring, Step, StepKind
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


def lower_agents(body: Sequence[Op], edges: Sequence[DepEdge], sync: SyncModel, *, stages: int,
                 spec: AgentSpec, owner: str = "schedule") -> AgentPlan:
    """Split ``body`` into one program per agent of ``spec`` and inject the rings and waits."""
    agent_of = _agent_of(spec, body, owner)
    channel = {i: _channel_of(op, sync) for i, op in enumerate(body)}
    kind = {c.name: c.kind for c in sync.channels}

    def phase_bound(i: int) -> bool:
        ch = channel[i]
        return ch is not None and kind.get(ch) == ChannelKind.PHASE

    cross = [e for e in edges if agent_of[e.producer].name != agent_of[e.consumer].name]
    writers = sorted({agent_of[e.producer].name for e in cross
                      if e.kind == DepKind.FLOW and phase_bound(e.producer)})
    if len(writers) != 1:
        raise ProgramError(f"{owner}: the agents lowering needs exactly one writer agent whose "
                           f"copies complete on a phase channel; found {writers or 'none'}")
    writer = writers[0]
    readers = sorted({agent_of[e.consumer].name for e in cross
                      if e.kind == DepKind.FLOW and agent_of[e.producer].name == writer})
    for e in cross:
        if e.kind == DepKind.FLOW and not phase_bound(e.producer):
            raise ProgramError(f"{owner}: edge {e.producer}->{e.consumer} crosses agents from an "
                               f"op with no phase channel; only phase-tracked writes may feed "
                               f"another agent")
        if e.kind == DepKind.ANTI and e.distance != stages:
            raise ProgramError(f"{owner}: ANTI edge {e.producer}->{e.consumer} crosses agents at "
                               f"distance {e.distance}; a ring of {stages} stages reuses a stage "
                               f"after {stages} tiles")
    anti_readers = sorted({agent_of[e.producer].name for e in cross if e.kind == DepKind.ANTI})
    if spec.release_lag < 0 or spec.release_lag >= stages:
        raise ProgramError(f"{owner}: release_lag {spec.release_lag} must be 0 .. stages - 1 "
                           f"({stages - 1})")
    roles = {r.name: r for r in spec.roles}
    writer_ops = [i for i in range(len(body)) if agent_of[i].name == writer]
    tx = sum(spec.op_bytes.get(i, 0) for i in writer_ops if phase_bound(i))
    if tx <= 0:
        raise ProgramError(f"{owner}: agent {writer}'s copies announce no bytes (AgentSpec.op_bytes)")
    full = Ring(name=FULL, kind=FULL, stages=stages, arrivals=1, tx_bytes=tx,
                signallers=(writer,), waiters=tuple(readers))
    rings = [full]
    empty = None
    if anti_readers:
        empty = Ring(name=EMPTY, kind=EMPTY, stages=stages,
                     arrivals=sum(roles[r].release_arrivals for r in anti_readers),
                     signallers=tuple(anti_readers), waiters=(writer,))
        rings.append(empty)
    tags = _sync_tags(sync)

    programs = []
    for role in spec.roles:
        ops = [i for i in range(len(body)) if agent_of[i].name == role.name]
        if role.name == writer:
            kernel = _writer_kernel(ops, body, full, empty, tags)
        elif role.name in readers:
            kernel = _reader_kernel(ops, body, channel, kind, full,
                                    empty if role.name in anti_readers else None, spec.release_lag,
                                    tags, owner, role.name)
        else:
            kernel = [Step(kind=StepKind.OP, op=i, tag=body[i].tag) for i in ops]
        programs.append(_split(role, kernel, tags))
    plan = AgentPlan(stages=stages, programs=programs, rings=rings,
                     min_tiles=max(len(p.prologue) for p in programs) or 1,
                     op_bytes={i: spec.op_bytes.get(i, 0) for i in writer_ops if phase_bound(i)})
    return derive_counter_waits(plan)


def _sync_tags(sync: SyncModel) -> dict[str, int]:
    """The tag each injected action lowers to: channel waits and commits, and the model's
    ``agent_tags`` for the actions that are no channel's wait ("arrive", "expect_tx", "fence")."""
    out: dict[str, int] = {}
    for c in sync.channels:
        key = "phase_wait" if c.kind == ChannelKind.PHASE else f"wait:{c.name}"
        out[key] = c.wait_tag
        if c.commit_tag is not None:
            out[f"commit:{c.name}"] = c.commit_tag
    out.update(sync.agent_tags)
    missing = [k for k in ("phase_wait", "arrive", "expect_tx", "fence") if k not in out]
    if missing:
        raise ProgramError(f"sync model {sync.name}: the agents lowering needs tags for "
                           f"{', '.join(missing)} (SyncModel.agent_tags)")
    return out


def _writer_kernel(ops: list[int], body: Sequence[Op], full: Ring, empty: Ring | None,
                   tags: dict[str, int]) -> list[Step]:
    steps = []
    if empty is not None:  # acquire: the phase the releases of tile t - stages complete
        steps.append(Step(kind=StepKind.PHASE_WAIT, channel=empty.name, phase_offset=-1,
                          tag=tags["phase_wait"]))
    steps.append(Step(kind=StepKind.EXPECT_TX, channel=full.name, value=full.tx_bytes,
                      tag=tags["expect_tx"]))
    steps += [Step(kind=StepKind.OP, op=i, tag=body[i].tag) for i in ops]
    return steps


def _reader_kernel(ops: list[int], body: Sequence[Op], channel: dict[int, str | None],
                   kind: dict[str, ChannelKind], full: Ring, empty: Ring | None, lag: int,
                   tags: dict[str, int], owner: str, agent: str) -> list[Step]:
    steps = [Step(kind=StepKind.PHASE_WAIT, channel=full.name, tag=tags["phase_wait"])]
    counters = [c for c in dict.fromkeys(channel[i] for i in ops)
                if c is not None and kind.get(c) == ChannelKind.COUNTER]
    if len(counters) > 1:
        raise ProgramError(f"{owner}: agent {agent} issues async ops on {counters}; one counter "
                           f"channel per reader agent is supported")
    counter = counters[0] if counters else None
    fenced = False
    for i in ops:
        if channel[i] == counter and counter is not None and not fenced:
            steps.append(Step(kind=StepKind.FENCE, channel=counter, tag=tags["fence"]))
            fenced = True
        steps.append(Step(kind=StepKind.OP, op=i, tag=body[i].tag))
    if counter is not None:
        steps.append(Step(kind=StepKind.COMMIT, channel=counter, tag=tags[f"commit:{counter}"]))
    if empty is not None:
        if counter is not None:
            steps.append(Step(kind=StepKind.COUNTER_WAIT, channel=counter, lag=lag,
                              value=UNDERIVED, tag=tags[f"wait:{counter}"]))
        steps.append(Step(kind=StepKind.ARRIVE, channel=empty.name, lag=lag, tag=tags["arrive"]))
    if counter is not None:  # the accumulators are read after the loop: retire every group
        steps.append(Step(kind=StepKind.COUNTER_WAIT, channel=counter, lag=-1, value=0,
                          tag=tags[f"wait:{counter}"]))
    return steps


def _split(role: AgentRole, kernel: list[Step], tags: dict[str, int]) -> AgentProgram:
    """Prologue, kernel and epilogue of one agent from its iteration-invariant steps.

    A step with lag L first runs at iteration L; the prologue holds iterations before the
    largest lag, the epilogue iterations KT .. KT + lag - 1.  A step with lag -1 is an
    after-the-loop step: it runs once, at the end of the epilogue.
    """
    after = [s for s in kernel if s.lag < 0]
    loop = [s for s in kernel if s.lag >= 0]
    depth = max((s.lag for s in loop), default=0)
    prologue = [[s for s in loop if i - s.lag >= 0] for i in range(depth)]
    # epilogue iteration j is t = KT + j: keep steps whose tile KT + j - lag is still < KT
    epilogue = [[s for s in loop if j - s.lag < 0] for j in range(depth)]
    if after:
        final = [attrs.evolve(s, lag=0) for s in after]
        if epilogue:
            epilogue[-1] = epilogue[-1] + final
        else:
            epilogue = [final]
    return AgentProgram(role=role, prologue=prologue, kernel=loop, epilogue=epilogue)


def derive_counter_waits(plan: AgentPlan) -> AgentPlan:
    """Set every underived counter wait to the largest count that still retires its group.

    A wait serving tile u must retire the group holding u's async ops: the count is the number of
    commits after that group and before the wait (in-order channels retire oldest first).  The
    kernel's wait is iteration-invariant, so its value is the minimum over every instance of an
    unrolled run long enough to reach the steady state; prologue and epilogue positions get their
    own (docs/guide/agents.md, "Counter waits").
    """
    tiles = plan.min_tiles + plan.stages + 4
    programs = []
    for prog in plan.programs:
        values: dict[tuple[str, int, int], int] = {}  # (section, iteration, position) -> min
        commits: dict[str, list[int]] = {}            # channel -> tiles of committed groups
        for section, it, pos, t, step in _walk(prog, tiles):
            if step.kind == StepKind.COMMIT:
                commits.setdefault(step.channel, []).append(step.tile(t))
            elif step.kind == StepKind.COUNTER_WAIT and step.value == UNDERIVED:
                groups = commits.get(step.channel, [])
                u = step.tile(t)
                after = [k for k, g in enumerate(groups) if g == u]
                if not after:
                    raise ProgramError(f"agent {prog.name}: the counter wait for tile {u} on "
                                       f"{step.channel} comes before that tile's group is committed")
                n = len(groups) - 1 - after[-1]
                key = (section, 0 if section == "kernel" else it, pos)
                values[key] = min(values.get(key, n), n)

        def fill(section: str, it: int, steps: Sequence[Step]) -> list[Step]:
            return [attrs.evolve(s, value=values[(section, it, pos)])
                    if s.kind == StepKind.COUNTER_WAIT and s.value == UNDERIVED else s
                    for pos, s in enumerate(steps)]

        programs.append(_drop_repeated_drain(attrs.evolve(
            prog, prologue=[fill("prologue", i, s) for i, s in enumerate(prog.prologue)],
            kernel=fill("kernel", 0, prog.kernel),
            epilogue=[fill("epilogue", j, s) for j, s in enumerate(prog.epilogue)])))
    return attrs.evolve(plan, programs=programs)


def _drop_repeated_drain(prog: AgentProgram) -> AgentProgram:
    """Leave out the after-the-loop counter wait 0 when the epilogue already drained that channel
    to 0 with no commit since (the last release's own wait did it)."""
    if not prog.epilogue or not prog.epilogue[-1]:
        return prog
    last = prog.epilogue[-1][-1]
    if last.kind != StepKind.COUNTER_WAIT or last.value != 0:
        return prog
    flat = [s for steps in prog.epilogue for s in steps][:-1]
    for s in reversed(flat):
        if s.kind == StepKind.COMMIT and s.channel == last.channel:
            return prog
        if s.kind == StepKind.COUNTER_WAIT and s.channel == last.channel and s.value == 0:
            epilogue = [*prog.epilogue[:-1], prog.epilogue[-1][:-1]]
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
