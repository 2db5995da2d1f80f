"""The ring lowering: a ring of S shared-memory stages, one K tile per step.

The body describes ONE K tile: its global loads (global -> shared), fragment
loads (shared -> registers) and compute ops, in the order they should issue:
any ``m x n`` grid of MMAs, each reading the A fragment of its row and the B
fragment of its column (``PipelineConfig.compute_match_key``); a fragment's
subtile is a slice of the stage its channel's load fills.  Stage ``s`` of the
ring holds K tile ``t`` with ``t mod S == s``.

* prologue: the loads of tiles 0..S-2 into stages 0..S-2, each tile's loads
  closing one group on group channels (one commit per channel);
* kernel: S steps (the ring's period, so every entry names a fixed stage);
  step ``s`` waits for tile ``s``, passes a barrier, reads stage ``s``, loads
  the tile S-1 ahead into stage ``(s + S - 1) mod S``, commits, computes
  (fragment loads and computes in body order, the refill before the first
  compute);
* epilogue: the last S-1 tiles, read and computed without further loads.

Asynchronous fragment loads (a channel counts them): the refill of a step waits
on that channel first (the earlier reads of the refilled stage); on a target
without a register interlock a compute reading a fragment loaded since the last
such wait gets one more, in every phase (the epilogue included), and the one
before the refill serves both.  On a group channel a commit closes the fragments
in flight before the wait.  With an interlock the MMAs retire the reads they use,
and the refill's wait vanishes where they all come before it or before the barrier
that lets another agent refill the stage (sync/derive.py, step 4).

The schedule writes no wait: every step gets a placeholder wait on each channel
an asynchronous producer of that step's reads counts on, and the values come
from the one derivation over the target's sync model
(:func:`pipeline_core.sync.derive.derive_waits`).  A placeholder with no need
vanishes; a need no wait covers is an error.  The barrier before the reads
publishes every agent's retired loads and orders the previous step's reads
before this step's loads (write after read on the stage being refilled).
"""
from __future__ import annotations

from collections.abc import Sequence

import attrs

from pipeline_core.config import PipelineConfig
from pipeline_core.errors import ProgramError
from pipeline_core.execution import ExecutionModel
from pipeline_core.lowering import LoweringInput, declared_warps_per_group, require_sync
from pipeline_core.ops import Entry, Op, OpRole, Phase, ResourceKind
from pipeline_core.plan import Plan, lockstep_plan
from pipeline_core.sync.derive import derive_waits
from pipeline_core.sync.model import SyncModel

RING = "ring"


@attrs.frozen(kw_only=True)
class RingLowering:
    """The phases and what the derivation decided."""

    prologue: tuple[Entry, ...]
    kernel: tuple[Entry, ...]
    epilogue: tuple[Entry, ...]
    stages: int


def _sync_op(tag: int, value: int = 0) -> Op:
    return Op(tag=tag, wait_value=value, resource=ResourceKind.SCALAR, role=OpRole.SYNC)


def _entries(ops: Sequence[Op], phase: Phase) -> tuple[Entry, ...]:
    return tuple(Entry(o, i, phase, False) for i, o in enumerate(ops))


def lower_ring(body: Sequence[Op], sync: SyncModel, *, stages: int,
                  execution: ExecutionModel | None = None, schedule: str = "",
                  config: PipelineConfig | None = None) -> RingLowering:
    """Lower the one-tile ``body`` to an S-stage ring with derived waits (see the module)."""
    who = f"schedule {schedule}: " if schedule else ""
    if stages < 2:
        raise ProgramError(f"{who}the ring lowering needs at least 2 stages (config.depth), "
                           f"got {stages}")
    loads = [o for o in body if o.role == OpRole.GLOBAL_LOAD]
    frags = [o for o in body if o.role == OpRole.FRAGMENT_LOAD]
    computes = [o for o in body if o.role == OpRole.COMPUTE]
    other = [o for o in body if o.role not in (OpRole.GLOBAL_LOAD, OpRole.FRAGMENT_LOAD,
                                               OpRole.COMPUTE)]
    if not loads or not computes or other:
        raise ProgramError(f"{who}the ring lowering takes a one-tile body of global loads, "
                           "fragment loads and compute ops (at least one load and one compute)"
                           + (f"; it has {len(other)} op(s) of other roles" if other else ""))
    bound = sync.bind()
    barrier = _sync_op(sync.barrier.tag)

    def channel_of(o: Op) -> str | None:
        effect = bound.effect(o.role, o.channel)
        if effect is None:
            raise ProgramError(f"{who}the sync model {sync.name} declares no effect for "
                               f"{o.role.name} ops on operand channel {o.channel}")
        return effect.counter

    load_channels = sorted({c for c in map(channel_of, loads) if c is not None})
    frag_channels = sorted({c for c in map(channel_of, frags) if c is not None})
    commits = [_sync_op(sync.channel(c).commit_tag or 0) for c in load_channels
               if sync.channel(c).commit_tag is not None]
    waits = {c: _sync_op(sync.channel(c).wait_tag) for c in load_channels + frag_channels}

    def tile_loads(stage: int) -> list[Op]:
        return [o.evolve(stage=stage) for o in loads] + commits

    reads_and_computes = [o for o in body if o.role in (OpRole.FRAGMENT_LOAD, OpRole.COMPUTE)]

    frag_waits = [waits[c] for c in frag_channels]
    # a fragment channel counted in groups closes the group of the fragments in flight first
    frag_commits = [_sync_op(sync.channel(c).commit_tag or 0) for c in frag_channels
                    if sync.channel(c).commit_tag is not None]
    # without a register interlock a compute reads its operands only once an explicit wait
    # retired their fragment loads (sync/derive.py, step 4)
    register_waits = bool(frag_channels) and not sync.register_interlock

    def step(stage: int, refill: int | None) -> list[Op]:
        ops = [waits[c] for c in load_channels] + [barrier]
        refill_ops = tile_loads(refill) if refill is not None else []
        in_flight = False  # fragment loads issued since the last fragment wait
        # Fragment loads and computes keep their body order (a body that interleaves them per
        # k-step keeps one k-step's fragments live at a time); the refill goes before the first
        # compute, after the fragment loads that precede it and the fragment waits that retire
        # the earlier asynchronous reads of the refilled stage; a compute reading fragments
        # loaded since the last such wait gets its own.
        for o in reads_and_computes:
            if o.role == OpRole.COMPUTE and (refill_ops or (register_waits and in_flight)):
                ops += (frag_commits if in_flight else []) + frag_waits + refill_ops
                refill_ops, in_flight = [], False
            in_flight = in_flight or o.role == OpRole.FRAGMENT_LOAD
            ops.append(o.evolve(stage=stage) if o.role == OpRole.FRAGMENT_LOAD else o)
        return ops + (frag_waits + refill_ops if refill_ops else [])

    prologue = [op for s in range(stages - 1) for op in tile_loads(s)]
    kernel = [op for s in range(stages) for op in step(s, (s + stages - 1) % stages)]
    epilogue = [op for s in range(stages - 1) for op in step(s, None)]
    phases = (_entries(prologue, Phase.PROLOGUE), _entries(kernel, Phase.KERNEL),
              _entries(epilogue, Phase.EPILOGUE))
    derivation = derive_waits(*phases, bound, execution or ExecutionModel(),
                              iterations=3, body=body, whole_stage=True, config=config)
    if derivation.unmet:
        u = derivation.unmet[0]
        raise ProgramError(f"{who}the ring lowering left a need uncovered on channel "
                           f"{u.channel}: {u.producer[0].name.lower()}[{u.producer[1]}] before "
                           f"{u.consumer[0].name.lower()}[{u.consumer[1]}] ({u.reason})")
    values = {(s.phase, s.index): s.safe for s in derivation.sites}

    def settle(entries: tuple[Entry, ...]) -> tuple[Entry, ...]:
        out: list[Entry] = []
        for e in entries:
            if e.op.tag in sync.wait_tags:
                value = values.get((e.phase, e.time_slot))
                if value is None:
                    continue  # no producer needs this wait: it vanishes
                e = attrs.evolve(e, op=e.op.evolve(wait_value=value))
            out.append(Entry(e.op, len(out), e.phase, False))
        return tuple(out)

    return RingLowering(prologue=settle(phases[0]), kernel=settle(phases[1]),
                           epilogue=settle(phases[2]), stages=stages)


def lower(ctx: LoweringInput) -> Plan:
    """The registered ``ring`` lowering: the target's sync model sets every wait; one warp group
    of the schedule's declared warps runs the phase lists (no stagger)."""
    target, sync = require_sync(ctx, "its waits")
    execution = ExecutionModel(warps_per_group=declared_warps_per_group(ctx.schedule, target))
    lowered = lower_ring(ctx.body, sync, stages=ctx.config.depth, execution=execution,
                         schedule=ctx.schedule.name, config=ctx.config)
    return lockstep_plan(
        lowering=RING, stages=lowered.stages, prologue=lowered.prologue, kernel=lowered.kernel,
        epilogue=lowered.epilogue, stagger_index=len(lowered.prologue) + 1, execution=execution,
        launch=ctx.schedule.kernel_launch(), sync=sync,
        description=f"ring lowering, ring of {ctx.config.depth} stages")
