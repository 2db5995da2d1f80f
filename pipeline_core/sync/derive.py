"""One target-neutral wait derivation: tokens -> counts, per channel, over the unrolled agents.

A wait ``wait(ch, n)`` returns when at most ``n`` ticks of ``ch`` issued by the
same agent are still pending; on an in-order channel everything older than the
``n`` youngest ticks is then complete.  So a wait ``W`` that must cover an
asynchronous producer ``P`` may leave at most *the number of ticks issued after
P and before W* pending (docs/guide/architecture.md, "Architecture": the derivation).  On a group
channel an op's tick is the commit that closes its group; on an out-of-order
channel only ``n = 0`` covers a given tick.

Walk:

1. Every agent's stream comes from the execution model (warp groups, stagger,
   warps per group): prologue, the kernel ``iterations`` times, epilogue.  The
   n-th barrier of every agent is one rendezvous.
2. A *need* is a pair (producer, consumer) in shared memory, keyed by region
   ``(operand channel, stage, subtile)``: a fragment read needs the write of the
   version it reads (its ordinal among the region's writes) complete in every
   agent (RAW), and, unless the target vouches for in-order shared memory, a
   global load needs the asynchronous reads of the previous version complete
   (WAR).  A synchronous producer needs nothing from a counter.
3. The wait covering a need is the producer agent's last wait on the producer's
   channel before the consumer (same agent) or before the barrier that publishes
   to the consumer (other agents).  Its safe value is the minimum over every
   need it covers, over every unrolled instance; a need no wait covers is
   *unmet* (a lowering inserts the wait; a checker reports it).

4. Register needs: on a target without a register interlock
   (``SyncModel.register_interlock`` False) a compute op reads its operand
   registers (operand channel, the MMA field ``PipelineConfig.compute_match_key``
   names) only after the agent's last fragment load into each is complete, so the
   agent's last wait on the fragment's channel before the compute covers it.
   With an interlock the hardware stalls the use and no count is involved; the
   use then also retires the fragment load, so a need whose producer is a
   fragment load that a compute of the same agent reads before the deadline
   (step 3) is met without a wait.

``whole_stage``: a global load fills its channel's whole stage and a fragment's
subtile is a slice of it (the ring lowering, whose documents the checker reads
with ordinal tiles), so a region is ``(operand channel, stage, 0)`` for every
subtile; otherwise a fragment reads the subtile its loads wrote.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from pipeline_core.config import PipelineConfig
from pipeline_core.execution import ExecutionModel
from pipeline_core.ops import MAX_KERNEL_TAG, Entry, Op, OpRole, Phase
from pipeline_core.sync.model import BoundSync

Region = tuple[int, int, int]  #: (operand channel, stage, subtile)
Site = tuple[Phase, int]  #: (phase, entry index)


@attrs.frozen(kw_only=True)
class WaitSite:
    """One emitted wait and the loosest value the derivation proves safe for it."""

    phase: Phase
    index: int
    channel: str
    emitted: int
    safe: int | None  #: None: no need found, any value is safe
    needs: int = 0  #: (producer, consumer) instances it covers

    @property
    def looser_than_safe(self) -> bool:
        return self.safe is not None and self.emitted > self.safe

    @property
    def slack(self) -> int | None:
        """How much stricter the emitted value is than needed (None: no need)."""
        return None if self.safe is None else self.safe - self.emitted


@attrs.frozen(kw_only=True)
class UnmetNeed:
    """A producer no wait covers before its consumer (or before the publishing barrier)."""

    channel: str
    producer: Site
    consumer: Site
    cross_agent: bool
    reason: str


@attrs.frozen(kw_only=True)
class Derivation:
    sites: tuple[WaitSite, ...]
    unmet: tuple[UnmetNeed, ...]

    def site(self, phase: Phase, index: int) -> WaitSite | None:
        for s in self.sites:
            if s.phase == phase and s.index == index:
                return s
        return None

    def looser(self) -> tuple[WaitSite, ...]:
        return tuple(s for s in self.sites if s.looser_than_safe)


@attrs.frozen
class _Event:
    site: Site | None  #: None for a synthetic barrier of the execution model
    op: Op | None


class _Agent:
    """One agent's unrolled stream with its tick and barrier bookkeeping."""

    def __init__(self, events: list[_Event], sync: BoundSync, waits: dict[int, str],
                 commits: dict[int, str], barrier_tags: set[int]) -> None:
        self.events = events
        names = [c.name for c in sync.model.channels]
        grouped = {c.name for c in sync.model.channels if c.commit_tag is not None}
        self.cum: dict[str, list[int]] = {n: [0] * (len(events) + 1) for n in names}
        #: async op position -> (channel, tick count after its tick; None until committed)
        self.tick: dict[int, tuple[str, int | None]] = {}
        self.waits: dict[str, list[int]] = {n: [] for n in names}
        self.barriers: list[int] = []
        self.bphase = [0] * len(events)
        open_group: dict[str, list[int]] = {n: [] for n in grouped}
        for p, ev in enumerate(events):
            self.bphase[p] = len(self.barriers)
            for n in names:
                self.cum[n][p + 1] = self.cum[n][p]
            op = ev.op
            if op is None or op.tag in barrier_tags:
                self.barriers.append(p)
                continue
            if op.tag in waits:
                self.waits[waits[op.tag]].append(p)
                continue
            if op.tag in commits:
                ch = commits[op.tag]
                self.cum[ch][p + 1] += 1
                for m in open_group[ch]:
                    self.tick[m] = (ch, self.cum[ch][p + 1])
                open_group[ch] = []
                continue
            effect = sync.effect(op.role, op.channel)
            if effect is None or effect.counter is None or op.tag > MAX_KERNEL_TAG:
                continue
            ch = effect.counter
            if ch in grouped:
                open_group[ch].append(p)
                self.tick[p] = (ch, None)
            else:
                field = sync.model.channel(ch).op_cost_field
                ticks = (getattr(op, field, 0) if field else 0) or effect.ticks
                self.cum[ch][p + 1] += ticks
                self.tick[p] = (ch, self.cum[ch][p + 1])

    def deadline(self, consumer_agent: "_Agent", c: int) -> int | None:
        """Position in this agent before which a wait must lie to cover consumer ``c``."""
        if consumer_agent is self:
            return c
        k = consumer_agent.bphase[c]
        return self.barriers[k - 1] if k >= 1 and k - 1 < len(self.barriers) else None


def _streams(prologue: Sequence[Entry], kernel: Sequence[Entry], epilogue: Sequence[Entry],
             execution: ExecutionModel, iterations: int) -> list[list[_Event]]:
    lists = {Phase.PROLOGUE: prologue, Phase.KERNEL: kernel, Phase.EPILOGUE: epilogue}
    out = []
    for g in range(execution.groups):
        events = []
        for slot in execution.stream(g, len(prologue), len(kernel), len(epilogue), iterations):
            if slot.synthetic:
                events.append(_Event(None, None))
            else:
                events.append(_Event((slot.phase, slot.index), lists[slot.phase][slot.index].op))
        out.extend([events] * execution.warps_per_group)
    return out


def _regions(agent: _Agent, role: OpRole, whole_stage: bool) -> dict[Region, list[int]]:
    out: dict[Region, list[int]] = {}
    for p, ev in enumerate(agent.events):
        op = ev.op
        if op is not None and op.role == role and op.tag <= MAX_KERNEL_TAG:
            out.setdefault((op.channel, op.stage, 0 if whole_stage else op.subtile), []).append(p)
    return out


def _register_reads(agent: _Agent, config: PipelineConfig) -> list[tuple[int, int]]:
    """(fragment load, compute op) position pairs: each compute op's operand registers and the
    agent's last fragment load into each before it (module doc, step 4)."""
    last: dict[tuple[int, int], int] = {}
    out = []
    for p, ev in enumerate(agent.events):
        op = ev.op
        if op is None or op.tag > MAX_KERNEL_TAG:
            continue
        if op.role == OpRole.FRAGMENT_LOAD:
            last[(op.channel, op.subtile)] = p
        elif op.role == OpRole.COMPUTE:
            for ch in op.operand_channels:
                writer = last.get((ch, config.compute_match_key(op, ch)))
                if writer is not None:
                    out.append((writer, p))
    return out


def derive_waits(prologue: Sequence[Entry], kernel: Sequence[Entry], epilogue: Sequence[Entry],
                 sync: BoundSync, execution: ExecutionModel | None = None, *,
                 iterations: int = 3, body: Sequence[Op] = (), whole_stage: bool = False,
                 config: PipelineConfig | None = None) -> Derivation:
    """The loosest safe value of every emitted wait, and every need no wait covers.

    ``body`` supplies operand channels of entries that dropped theirs (the
    reference's prologue loads carry channel -1); ``whole_stage`` reads regions as
    whole stages (module doc); ``config`` names the registers a compute op reads
    (its match fields; default: the A fragment matches the row, the B the column).
    """
    execution = execution or ExecutionModel()
    model = sync.model
    waits = {c.wait_tag: c.name for c in model.channels}
    commits = {c.commit_tag: c.name for c in model.channels if c.commit_tag is not None}
    barrier_tags = {b.tag for b in model.barriers}
    in_order = {c.name: c.in_order for c in model.channels}
    by_tag = {o.tag: o.channel for o in body if o.channel >= 0}

    def fix(entries: Sequence[Entry]) -> list[Entry]:
        return [e if e.op.channel >= 0 or e.op.tag not in by_tag
                else attrs.evolve(e, op=e.op.evolve(channel=by_tag[e.op.tag])) for e in entries]

    streams = _streams(fix(prologue), fix(kernel), fix(epilogue), execution, iterations)
    agents = [_Agent(ev, sync, waits, commits, barrier_tags) for ev in streams]
    writes = [_regions(a, OpRole.GLOBAL_LOAD, whole_stage) for a in agents]
    reads = [_regions(a, OpRole.FRAGMENT_LOAD, whole_stage) for a in agents]

    safe: dict[Site, int] = {}
    count: dict[Site, int] = {}
    unmet: dict[tuple, UnmetNeed] = {}

    # step 4: under an interlock, the first compute reading a fragment load's register
    first_use: dict[int, dict[int, int]] = {}
    if model.register_interlock:
        for a in agents:
            uses = first_use.setdefault(id(a), {})
            for p, c in _register_reads(a, config or PipelineConfig()):
                uses.setdefault(p, c)

    def need(pa: _Agent, p: int, ca: _Agent, c: int, kind: str) -> None:
        if p not in pa.tick:
            return  # synchronous producer: a barrier publishes it, no count involved
        ch, after = pa.tick[p]
        psite, csite = pa.events[p].site, ca.events[c].site
        deadline = pa.deadline(ca, c)
        used = first_use.get(id(pa), {}).get(p)
        if used is not None and deadline is not None and used < deadline:
            return  # a compute's interlocked use of its register retired it first
        candidates = [w for w in pa.waits[ch] if p < w < deadline] if deadline is not None else []
        key = (ch, psite, csite, pa is not ca)
        if not candidates:
            if psite is not None and csite is not None and key not in unmet:
                why = ("no barrier separates them" if deadline is None else
                       f"no wait on {ch} between them" if pa is ca else
                       f"no wait on {ch} before the barrier that publishes it")
                unmet[key] = UnmetNeed(channel=ch, producer=psite, consumer=csite,
                                       cross_agent=pa is not ca, reason=f"{kind}: {why}")
            return
        w = candidates[-1]
        allowed = (pa.cum[ch][w] - after if after is not None and after <= pa.cum[ch][w]
                   else -1)
        if not in_order[ch]:
            allowed = min(allowed, 0)
        site = pa.events[w].site
        if site is None:
            return
        if allowed < 0:
            if key not in unmet and psite is not None and csite is not None:
                unmet[key] = UnmetNeed(channel=ch, producer=psite, consumer=csite,
                                       cross_agent=pa is not ca,
                                       reason=f"{kind}: its group is not committed before the wait")
            return
        safe[site] = min(safe.get(site, allowed), allowed)
        count[site] = count.get(site, 0) + 1

    for ci, ca in enumerate(agents):
        for region, positions in reads[ci].items():
            for c in positions:
                version = sum(1 for w in writes[ci].get(region, ()) if w < c) - 1
                if version < 0:
                    continue
                for pi, pa in enumerate(agents):
                    own = writes[pi].get(region, [])
                    if version < len(own):
                        need(pa, own[version], ca, c, "read after write")
    if not model.shared_in_order:
        for ci, ca in enumerate(agents):  # the writer is the consumer of earlier reads
            for region, positions in writes[ci].items():
                for v, q in enumerate(positions):
                    for pi, pa in enumerate(agents):
                        own_w = writes[pi].get(region, [])
                        for r in reads[pi].get(region, ()):
                            seen = sum(1 for w in own_w if w < r) - 1
                            if seen == v - 1:
                                need(pa, r, ca, q, "write after read")

    if not model.register_interlock:
        for a in agents:
            for p, c in _register_reads(a, config or PipelineConfig()):
                need(a, p, a, c, "register read after write")

    sites = []
    lists = {Phase.PROLOGUE: prologue, Phase.KERNEL: kernel, Phase.EPILOGUE: epilogue}
    for phase, entries in lists.items():
        for i, e in enumerate(entries):
            if e.op.tag in waits:
                site = (phase, i)
                sites.append(WaitSite(phase=phase, index=i, channel=waits[e.op.tag],
                                      emitted=e.op.wait_value, safe=safe.get(site),
                                      needs=count.get(site, 0)))
    return Derivation(sites=tuple(sites), unmet=tuple(unmet.values()))


def derive_for_compiled(compiled: Any, sync_model: Any, *, iterations: int = 3,
                        warps_per_group: int | None = None) -> Derivation:
    """:func:`derive_waits` over a compiled schedule, with its execution model and config."""
    bound = sync_model.bind(compiled.config, compiled.schedule_config)
    execution = compiled.execution or ExecutionModel()
    if warps_per_group is not None:
        execution = attrs.evolve(execution, warps_per_group=warps_per_group)
    return derive_waits(compiled.prologue, compiled.kernel, compiled.epilogue, bound, execution,
                        iterations=iterations, body=compiled.body, config=compiled.config)
