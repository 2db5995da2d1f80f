"""The proof of a staged bulk store: every sub-tile, every buffer reuse, the kernel's end.

A storing agent (:mod:`pipeline_core.agents.bulk_store`) runs its ``store`` steps once per
sub-tile, the sub-tiles running on across output tiles, then its ``drain``.  Its threads are the
*issuer* (the one elected thread: ``store_wait``, ``store_issue``, ``store_commit``,
``store_drain``, docs/guide/agents.md, "Bulk stores") and the *others* (every other thread);
both write the buffer, fence and meet on the agent's named barrier.  The proof unrolls
:data:`UNROLL` buffers' worth of sub-tiles plus the drain and orders two step instances when one
thread runs both in that order, or a sync of the agent's barrier lies between them (a
``bar.sync`` of all the agent's threads orders everything before it in each thread before
everything after it).  Buffer ``j % buffers`` holds sub-tile j; a ``store_wait`` N after C
commits has every group below C - N done reading.

* sub-tile j's store may read the buffer only after every thread's ``stage_write`` of j and its
  ``proxy_fence`` after it are ordered before the ``store_issue`` (the async proxy does not see
  generic writes without the fence): else **SMEM_RAW**, naming the missing sync or fence;
* sub-tile j's ``stage_write`` (every thread) must come after a ``store_wait`` that has the
  store of sub-tile j - buffers (same buffer) done reading: else **SMEM_WAR**;
* a ``store_wait`` beyond the target's ``max_wait``: **WAIT_RANGE**;
* every store must be complete before the kernel ends (its global writes visible, its buffer no
  longer read when the CTA's shared memory is released): a ``store_drain`` after the last
  commit, else **SMEM_WAR**; a store never committed is never waited for: the same.

An *optional* store (``BulkStore.optional``: per output tile an agent may store the tile another
way, a clipped direct store, and skip its ``subtiles`` staged sub-tiles, chosen at run time) is
proven over every pattern of staged and skipped output tiles across :func:`skip_tiles` tiles: a
sub-tile's buffer is its place counting the skipped ones (what the emitter's buffer index, the
sub-tile's place in its tile, is when the tiles' sub-tiles are a multiple of the buffers), and
the store that last used its buffer may lie further back than ``buffers`` sub-tiles.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import product

from pipeline_core.check.verdict import Fix, HazardKind, Site, Violation
from pipeline_core.ops import tag_name
from pipeline_core.plan import AgentProgram, BulkStore, Plan, Step, StepKind
from pipeline_core.sync.model import SyncModel

#: sub-tiles unrolled per buffer: every buffer used twice, and once more, so a reuse two
#: buffers back and the one after the drain's are both seen
UNROLL = 3
#: the steps only the elected issuer runs (every other step: every thread of the agent)
ISSUER_ONLY = (StepKind.STORE_WAIT, StepKind.STORE_ISSUE, StepKind.STORE_COMMIT,
               StepKind.STORE_DRAIN)
ISSUER, OTHER = "issuer", "other threads"


def store_assumptions(plan: Plan, sync: SyncModel) -> list[str]:
    """The lines a verdict adds for a plan with a bulk store (its model's assumptions)."""
    st, model = plan.store, sync.bulk_store
    if st is None or model is None:
        return []
    lines = [f"bulk store {st.name!r} of agents {', '.join(st.agents)}: {st.buffers} staging "
             f"buffers each, {UNROLL * st.buffers} sub-tiles across output tiles, then the drain",
             f"the store's groups are the issuer's: {model.issuer}"]
    if st.optional:
        lines.append(f"an output tile may skip its {st.subtiles} staged sub-tiles (stored "
                     f"another way): every pattern of staged and skipped tiles over "
                     f"{skip_tiles(st)} tiles, a sub-tile's buffer counting the skipped ones")
    return lines


def _runs(prog: AgentProgram, staged: Sequence[int], sub_tiles: int
          ) -> list[tuple[int, int, Step]]:
    """(sub-tile, position, step) of the unrolled program: the ``staged`` of ``sub_tiles``
    sub-tiles, then the drain as sub-tile ``sub_tiles``."""
    out = [(j, pos, s) for j in staged for pos, s in enumerate(prog.store)]
    return out + [(sub_tiles, pos, s) for pos, s in enumerate(prog.drain)]


def skip_tiles(st: BulkStore) -> int:
    """Output tiles an optional store's patterns span: enough for :data:`UNROLL` buffers' worth
    of sub-tiles and one tile more (a skipped tile between two staged ones), at most 8."""
    return min(-(-UNROLL * st.buffers // st.subtiles) + 1, 8)


def _patterns(st: BulkStore) -> list[tuple[int, list[int]]]:
    """(sub-tiles, the staged ones) of each unrolled run the proof checks: every sub-tile staged
    (the only run of a store that is not optional), then every pattern of staged and skipped
    output tiles."""
    n = UNROLL * st.buffers
    if not st.optional:
        return [(n, list(range(n)))]
    tiles = skip_tiles(st)
    n = tiles * st.subtiles
    return [(n, [j for j in range(n) if bits >> (j // st.subtiles) & 1])
            for bits in range(2 ** tiles - 1, 0, -1)]


def prove_store(plan: Plan, sync: SyncModel, names: Mapping[int, str],
                priority: Mapping[HazardKind, int]) -> list[Violation]:
    """The findings on ``plan``'s bulk store (none when it has none); ``priority`` orders them
    as the agents checker orders its own."""
    st, model = plan.store, sync.bulk_store
    if st is None or model is None:
        return []
    found: dict[tuple, Violation] = {}
    index = {p.name: a for a, p in enumerate(plan.programs)}
    warp = sync.named_barriers.warp_size if sync.named_barriers is not None else 32

    for (agent, barrier), (n, staged) in product(zip(st.agents, st.barriers), _patterns(st)):
        prog = plan.program(agent)
        run = _runs(prog, staged, n)

        def text(g: int) -> str:
            j, _, s = run[g]
            name = tag_name(s.tag, names) if s.tag >= 0 else s.kind.value.upper()
            return f"{agent} {name} {st.name} " + (f"sub-tile {j}" if j < n else "drain")

        def report(kind: HazardKind, g: int, message: str, fix: str,
                   other: int | None = None) -> None:
            j, pos, _ = run[g]
            key = (kind, agent, pos, j >= n)
            if key in found:
                return
            section = "drain" if j >= n else "store"
            site = Site(section, pos, j, index[agent], op=text(g), agent=agent)
            o = None
            if other is not None:
                oj, opos, _ = run[other]
                o = Site("drain" if oj >= n else "store", opos, oj, index[agent],
                         op=text(other), agent=agent)
            found[key] = Violation(kind, site, message, o,
                                   Fix(action="review", phase=section, index=pos, text=fix),
                                   order=(priority[kind], 0, j, 0, index[agent], pos))

        syncs = [g for g, (_, _, s) in enumerate(run)
                 if s.kind == StepKind.NAMED_SYNC and s.barrier == barrier]
        # a sync orders the agent's threads only when it waits for all of them: fewer lets it
        # pass while a warp still writes the buffer, more never completes (bar.sync id, count)
        threads = prog.role.warps * warp
        for g, (_, _, s) in enumerate(run):
            if s.kind not in (StepKind.NAMED_SYNC, StepKind.NAMED_ARRIVE):
                continue
            if s.barrier != barrier or s.kind == StepKind.NAMED_ARRIVE:
                report(HazardKind.DEADLOCK, g, f"{text(g)} {s.kind.value} names barrier "
                       f"{s.barrier}, where the store meets its {threads} threads on barrier "
                       f"{barrier} (BulkStore.barriers) with a sync", f"sync barrier {barrier} "
                       f"with count {threads}")
            elif s.value < threads:
                report(HazardKind.SMEM_RAW, g, f"the sync of barrier {barrier} counts {s.value} "
                       f"threads of {agent}'s {threads}: it passes while a warp still writes "
                       "the staging buffer", f"set the sync's count to {threads}")
            elif s.value > threads:
                report(HazardKind.DEADLOCK, g, f"the sync of barrier {barrier} waits for "
                       f"{s.value} threads and {agent} has {threads}: it never completes",
                       f"set the sync's count to {threads}")

        def runs_on(g: int, thread: str) -> bool:
            return thread == ISSUER or run[g][2].kind not in ISSUER_ONLY

        def before(a: int, ta: str, b: int, tb: str) -> bool:
            """Whether step instance a of thread ta happens before b of thread tb."""
            return a < b and (ta == tb or any(a < p < b for p in syncs))

        def at(kind: StepKind, j: int) -> list[int]:
            return [g for g, (jj, _, s) in enumerate(run) if jj == j and s.kind == kind]

        # the issuer's groups: the group each issue falls in, and groups closed before a step
        group_of: dict[int, int] = {}
        closed_before: dict[int, int] = {}
        commits, open_issues = 0, []
        for g, (_, _, s) in enumerate(run):
            closed_before[g] = commits
            if s.kind == StepKind.STORE_ISSUE:
                open_issues.append(g)
            elif s.kind == StepKind.STORE_COMMIT:
                for i in open_issues:
                    group_of[i] = commits
                commits, open_issues = commits + 1, []

        def done_reading(group: int, by: int) -> list[int]:
            """The issuer's waits that leave ``group`` done reading (a drain: done entirely)."""
            return [g for g in range(len(run)) if g < by or by < 0
                    if run[g][2].kind in (StepKind.STORE_WAIT, StepKind.STORE_DRAIN)
                    and group < closed_before[g] - (run[g][2].value
                                                   if run[g][2].kind == StepKind.STORE_WAIT
                                                   else 0)]

        for g, (_, _, s) in enumerate(run):
            if s.kind == StepKind.STORE_WAIT and not 0 <= s.value <= model.max_wait:
                report(HazardKind.WAIT_RANGE, g, f"store wait {s.value} is outside 0.."
                       f"{model.max_wait}, what the target encodes",
                       f"wait for {min(max(s.value, 0), model.max_wait)} groups or fewer")
        for j in staged:
            issues, writes = at(StepKind.STORE_ISSUE, j), at(StepKind.STAGE_WRITE, j)
            if not issues or not writes:
                report(HazardKind.MISSING_PRODUCT, (issues or writes or [0])[0],
                       f"sub-tile {j} is never " + ("stored" if not issues else "written to "
                                                     "its staging buffer"),
                       "keep the STAGE_WRITE and STORE_ISSUE steps")
                continue
            issue = issues[0]
            for thread in (OTHER, ISSUER):
                w = writes[0]
                if not before(w, thread, issue, ISSUER):
                    report(HazardKind.SMEM_RAW, issue,
                           f"the store of sub-tile {j} may read staging buffer {j % st.buffers} "
                           f"before the {thread}' writes of it are in: no sync of named barrier "
                           f"{barrier} lies between the {thread}' STAGE_WRITE and the "
                           "STORE_ISSUE", "sync the agent's threads (NAMED_SYNC) after the "
                           "PROXY_FENCE and before the STORE_ISSUE", other=w)
                    continue
                fences = [f for f in at(StepKind.PROXY_FENCE, j)
                          if runs_on(f, thread) and w < f and before(f, thread, issue, ISSUER)]
                if not fences:
                    report(HazardKind.SMEM_RAW, issue,
                           f"the store of sub-tile {j} (async proxy) may read staging buffer "
                           f"{j % st.buffers} without the {thread}' generic-proxy writes: no "
                           "PROXY_FENCE after their STAGE_WRITE is ordered before the "
                           "STORE_ISSUE", "put a PROXY_FENCE after the STAGE_WRITE, before "
                           "the sync that precedes the STORE_ISSUE", other=w)
            # the store that last used this buffer: buffers back, or further past skipped tiles
            prev = max((x for x in staged if x < j and x % st.buffers == j % st.buffers),
                       default=-1)
            if prev < 0:
                continue
            prev_issue = at(StepKind.STORE_ISSUE, prev)
            group = group_of.get(prev_issue[0]) if prev_issue else None
            for thread in (OTHER, ISSUER):
                w = writes[0]
                ok = group is not None and any(before(g, ISSUER, w, thread)
                                               for g in done_reading(group, w))
                if not ok:
                    report(HazardKind.SMEM_WAR, w,
                           f"the {thread} may write staging buffer {j % st.buffers} (sub-tile "
                           f"{j}) while the store of sub-tile {prev} still reads it: no store "
                           f"wait that retires that store's group is ordered before the write",
                           f"wait with STORE_WAIT {st.buffers - 1} or less, then sync the "
                           "agent's threads, before the STAGE_WRITE",
                           other=prev_issue[0] if prev_issue else None)
        # the kernel's end: every store complete (global writes, buffer reads)
        last = max((g for g, (_, _, s) in enumerate(run) if s.kind == StepKind.STORE_ISSUE),
                   default=None)
        if last is not None:
            group = group_of.get(last)
            drains = [g for g, (_, _, s) in enumerate(run) if s.kind == StepKind.STORE_DRAIN
                      and g > last and group is not None and group < closed_before[g]]
            if not drains:
                report(HazardKind.SMEM_WAR, len(run) - 1 if prog.drain else last,
                       "the kernel may end with bulk stores in flight: their global writes "
                       "are not known complete and the CTA's shared memory they read may be "
                       "given to the next CTA", "add the STORE_DRAIN (wait for every group, "
                       "writes included) after the agent's last output tile", other=last)
    return list(found.values())
