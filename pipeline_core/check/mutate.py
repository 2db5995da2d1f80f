"""Schedule mutations for testing the checker: loosen a wait, drop a barrier, swap entries.

Pure functions on schedule documents (the input is never modified), so the
checker and any independent oracle judge exactly the same mutated schedule.
"""
from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from pipeline_core.ops import MAX_KERNEL_TAG, OpRole
from pipeline_core.tiles import varies

if TYPE_CHECKING:
    from pipeline_core.compiled import CompiledSchedule
    from pipeline_core.plan import AgentProgram, Plan
    from pipeline_core.plugins import PluginHost

PHASES = ("prologue", "kernel", "epilogue")
DATA_ROLES = (int(OpRole.GLOBAL_LOAD), int(OpRole.FRAGMENT_LOAD))


@attrs.frozen
class Mutation:
    """One edit of one phase list; ``category`` groups mutations in reports."""

    category: str  #: "loosen_wait" | "remove_barrier" | "swap_data" | "swap_mixed"
    phase: str
    index: int
    description: str

    def apply(self, document: Mapping[str, Any]) -> dict[str, Any]:
        doc = dict(document)
        entries = copy.deepcopy(list(document[self.phase]))
        if self.category == "loosen_wait":
            entries[self.index]["op"]["wait_value"] += 1
        elif self.category == "remove_barrier":
            del entries[self.index]
        else:
            entries[self.index], entries[self.index + 1] = entries[self.index + 1], entries[self.index]
        for n, e in enumerate(entries):
            e["index"] = n
        doc[self.phase] = entries
        return doc


def _name(entry: Mapping[str, Any]) -> str:
    op = entry["op"]
    return f"{op.get('tag_name', op['tag'])}(s{op['stage']} sub{op['subtile']} w{op['wait_value']})"


def mutations(document: Mapping[str, Any], phases: tuple[str, ...] = PHASES, *,
              sync: Any = None) -> Iterator[Mutation]:
    """Every single-edit mutation of ``phases`` (wait and barrier tags from ``sync``, the
    :class:`~pipeline_core.sync.SyncModel` of the document's target when not given):

    * each wait loosened by one (``wait(n)`` -> ``wait(n+1)``: one more op may stay outstanding);
    * each barrier removed;
    * each adjacent pair swapped where at least one entry is a global or fragment load
      ("swap_data" when both are, "swap_mixed" otherwise); identical neighbours are skipped.
    """
    if sync is None:
        from pipeline_core.sync.resolve import sync_for_document
        sync = sync_for_document(document)
    wait_tags, barrier_tag = set(sync.wait_tags), sync.barrier.tag
    for phase in phases:
        entries = document[phase]
        for i, e in enumerate(entries):
            tag = e["op"]["tag"]
            if tag in wait_tags:
                yield Mutation("loosen_wait", phase, i, f"{phase}[{i}] {_name(e)} -> wait+1")
            elif tag == barrier_tag:
                yield Mutation("remove_barrier", phase, i, f"remove {phase}[{i}] BARRIER")
        for i in range(len(entries) - 1):
            a, b = entries[i]["op"], entries[i + 1]["op"]
            da, db = a["role"] in DATA_ROLES and a["tag"] <= MAX_KERNEL_TAG, b["role"] in DATA_ROLES and b["tag"] <= MAX_KERNEL_TAG
            if not (da or db) or a == b:
                continue
            cat = "swap_data" if da and db else "swap_mixed"
            yield Mutation(cat, phase, i, f"swap {phase}[{i}] {_name(entries[i])} <-> "
                                          f"[{i + 1}] {_name(entries[i + 1])}")


# --- agents plans (pipeline_core.agents) ---------------------------------------------

#: what each agent-plan mutation does (docs/guide/agents.md, "Mutations")
AGENT_MUTATIONS = {
    "drop_arrive": "drop a reader's release (ARRIVE on an empty ring)",
    "loosen_counter_wait": "loosen a counter wait by one (one more group left pending)",
    "flip_phase_offset": "move a phase wait to the next or previous phase (flips its parity)",
    "drop_acquire": "drop a writer's acquire (PHASE_WAIT on an empty ring)",
    "drop_mma": "drop a reader's MMA step (an op of an agent that waits on a full ring)",
    "drop_named_arrive": "drop a named-barrier arrive (NAMED_ARRIVE of an ordering)",
    "drop_named_sync": "drop a named-barrier wait (NAMED_SYNC of an ordering)",
    "swap_named_id": "move a named-barrier step to its ordering's next barrier id",
    # a cross-CTA reduction's finish steps (docs/guide/agents.md, "Cross-CTA reductions")
    "drop_release_fence": "drop a reduction's release fence (RELEASE_FENCE before the arrive)",
    "drop_count_arrive": "drop a reduction's arrival on its counter (COUNT_ARRIVE)",
    "drop_count_reset": "drop a reduction's counter reset (COUNT_RESET)",
    "read_before_count": "move a reduction's slice read before its COUNT_ACQUIRE (before the "
                         "count reached the splits)",
    "reset_before_read": "move a reduction's counter reset before its slice read",
    # a staged bulk store's steps (docs/guide/agents.md, "Bulk stores")
    "drop_store_wait": "drop a bulk store's wait before its staging buffer is written again "
                       "(STORE_WAIT)",
    "loosen_store_wait": "loosen a bulk store's wait by one (one more store may still read "
                         "the buffer being written)",
    "drop_proxy_fence": "drop the proxy fence between the staging writes and the bulk store "
                        "(PROXY_FENCE)",
    "store_before_sync": "move a bulk store's STORE_ISSUE before the sync that gathers the "
                         "staging writes",
    "drop_store_drain": "drop the bulk store's drain before the kernel ends (STORE_DRAIN)",
    "clamp_trips": "run one agent's loop at least once on an output tile with no K tile (a "
                   "plan with loop bounds: the others skip it)",
    "skew_trips": "run one agent's loop one K tile more or fewer than the others on every "
                  "output tile (a plan with loop bounds: its bound computed off by one)",
    # a tile split (docs/guide/agents.md, "Tile splits")
    "split_own_base": "count one split agent's ring positions over its own output tiles only "
                      "(rb advanced by its own K tiles)",
    "split_all_arrivals": "make an empty ring's phase wait for every split agent's release "
                          "(the arrivals of a ring without the split)",
    # a cluster's (docs/guide/agents.md, "Clusters"); drop_arrive drops a peer arrival too
    "cta_scope_remote_arrive": "arrive on a peer CTA's barrier at CTA scope, not cluster scope "
                               "(NVIDIA/cutlass#3324)",
    "cta_scope_peer_wait": "wait at CTA scope on a phase a peer CTA's arrival completes "
                           "(NVIDIA/cutlass#3324)",
    "cluster_arrival_count": "initialise a multicast empty ring for one CTA's readers only "
                             "(its arrival count not multiplied by the CTAs)",
    "drop_cluster_start": "drop the cluster barrier after the mbarriers' initialisation",
    "drop_cluster_end": "drop the cluster barrier before the CTAs exit",
}

#: the cluster mutations that edit the plan's :class:`~pipeline_core.plan.Cluster` or a ring,
#: not a step
_CLUSTER_EDITS = ("cluster_arrival_count", "drop_cluster_start", "drop_cluster_end")

#: the reduction mutations that drop a finish step, by the step kind they drop; the others
#: move a step (:attr:`AgentMutation.delta` is where it goes)
_FINISH_DROPS = {"drop_release_fence": "release_fence", "drop_count_arrive": "count_arrive",
                 "drop_count_reset": "count_reset"}
_FINISH_MOVES = {"read_before_count": ("slice_read", "count_acquire"),
                 "reset_before_read": ("count_reset", "slice_read")}
#: the bulk-store mutations: (section, the step kind dropped, moved or loosened, and for a move
#: the kind it goes before: the last such step ahead of it)
_STORE_EDITS = {"drop_store_wait": ("store", "store_wait", ""),
                "loosen_store_wait": ("store", "store_wait", ""),
                "drop_proxy_fence": ("store", "proxy_fence", ""),
                "store_before_sync": ("store", "store_issue", "named_sync"),
                "drop_store_drain": ("drain", "store_drain", "")}


@attrs.frozen(kw_only=True)
class AgentMutation:
    """One edit of one step of one agent's program: ``section`` is prologue / kernel /
    epilogue, ``iteration`` the prologue or epilogue iteration (0 for the kernel), ``index``
    the step's position there (``finish``: the steps after the epilogue, a cross-CTA
    reduction's; iteration 0).  A kernel step is iteration-invariant, so editing it edits
    every loop iteration.  ``ring`` names the ring the edited step waits on or arrives on ("" for
    a counter wait or an op), so a plan of several rings can be mutated ring by ring."""

    category: str
    agent: str
    section: str
    iteration: int
    index: int
    description: str
    delta: int = 1  #: flip_phase_offset / loosen_counter_wait: how far the value moves
    ring: str = ""
    barrier: int = -1  #: swap_named_id: the id the step moves to

    def apply(self, plan: Any) -> Any:
        """``plan`` (an :class:`~pipeline_core.agents.Plan`) with the edit made."""
        if self.category in _CLUSTER_EDITS:
            return _cluster_edit(plan, self.category, self.ring)
        prog = plan.program(self.agent)
        if self.category == "split_own_base":
            return attrs.evolve(plan, programs=[attrs.evolve(p, split_base="own")
                                                if p.name == self.agent else p
                                                for p in plan.programs])
        if self.category == "split_all_arrivals":
            return attrs.evolve(plan, rings=[attrs.evolve(r, arrivals=r.arrivals * self.delta)
                                             if r.name == self.ring else r for r in plan.rings])
        if self.category in ("clamp_trips", "skew_trips"):  # its trip count, not a step
            field = "min_trips" if self.category == "clamp_trips" else "trip_delta"
            return attrs.evolve(plan, programs=[attrs.evolve(p, **{field: self.delta})
                                                if p.name == self.agent else p
                                                for p in plan.programs])
        if self.section in ("kernel", "finish", "store", "drain"):
            steps = list(getattr(prog, self.section))
        else:
            steps = list(getattr(prog, self.section)[self.iteration])
        step = steps[self.index]
        if self.category in ("drop_arrive", "drop_acquire", "drop_mma", "drop_named_arrive",
                             "drop_named_sync", *_FINISH_DROPS, "drop_store_wait",
                             "drop_proxy_fence", "drop_store_drain"):
            del steps[self.index]
        elif self.category in (*_FINISH_MOVES, "store_before_sync"):
            steps.insert(self.delta, steps.pop(self.index))
        elif self.category == "swap_named_id":
            steps[self.index] = attrs.evolve(step, barrier=self.barrier)
        elif self.category in ("cta_scope_remote_arrive", "cta_scope_peer_wait"):
            steps[self.index] = attrs.evolve(step, scope="cta")
        elif self.category in ("loosen_counter_wait", "loosen_store_wait"):
            steps[self.index] = attrs.evolve(step, value=step.value + self.delta)
        elif self.category == "flip_phase_offset":
            steps[self.index] = attrs.evolve(step, phase_offset=step.phase_offset + self.delta)
        else:
            raise ValueError(f"unknown agent mutation {self.category!r}; known: "
                             f"{', '.join(AGENT_MUTATIONS)}")
        if self.section in ("kernel", "finish", "store", "drain"):
            edited = attrs.evolve(prog, **{self.section: steps})
        else:
            section = list(getattr(prog, self.section))
            section[self.iteration] = tuple(steps)
            edited = attrs.evolve(prog, **{self.section: section})
        return attrs.evolve(plan, programs=[edited if p.name == self.agent else p
                                            for p in plan.programs])


def agent_mutations(plan: Any, categories: tuple[str, ...] = tuple(AGENT_MUTATIONS)
                    ) -> Iterator[AgentMutation]:
    """Every single-step mutation of ``plan`` in ``categories`` (see :data:`AGENT_MUTATIONS`):
    each reader release dropped, each counter wait loosened by one, each phase wait moved one
    phase either way, each writer acquire dropped, each reader's MMA step dropped; on every
    ring of the plan (:attr:`AgentMutation.ring`); each named-barrier sync or arrive of an
    ordering dropped, or moved to the ordering's next barrier id; each reduction's release
    fence, arrive or reset dropped, its read moved before the acquire, its reset before the
    read; on a plan with loop bounds (output tiles of different K-tile counts), each agent's loop
    run at least once on an output tile the others skip (the hang of cudnn-frontend PR #1069),
    or one K tile more or fewer than the others on every output tile."""
    from pipeline_core.plan import StepKind

    kinds = {r.name: r.kind for r in plan.rings}
    readers = {a for r in plan.rings if r.kind == "full" for a in r.waiters}
    ids = {o.name: o.barriers for o in plan.orders}
    split = plan.split.agents if plan.split is not None else ()
    for ring in plan.rings:
        if split and ring.kind == "empty" and "split_all_arrivals" in categories \
                and set(split) <= set(ring.signallers):
            yield AgentMutation(category="split_all_arrivals", agent=split[0], section="kernel",
                                iteration=0, index=0, delta=len(split), ring=ring.name,
                                description=f"{ring.name} waits for {len(split)} x "
                                            f"{ring.arrivals} arrivals (every split agent's)")
    for prog in plan.programs:
        if prog.name in split and "split_own_base" in categories:
            yield AgentMutation(category="split_own_base", agent=prog.name, section="kernel",
                                iteration=0, index=0,
                                description=f"{prog.name} counts its ring positions over its "
                                            "own output tiles only")
        if varies(plan.trip_rule) and "clamp_trips" in categories:
            yield AgentMutation(category="clamp_trips", agent=prog.name, section="kernel",
                                iteration=0, index=0, delta=1,
                                description=f"{prog.name} runs its loop at least once on an "
                                            "output tile with no K tile (min_trips 1)")
        for d in (1, -1):
            if varies(plan.trip_rule) and "skew_trips" in categories:
                yield AgentMutation(category="skew_trips", agent=prog.name, section="kernel",
                                    iteration=0, index=0, delta=d,
                                    description=f"{prog.name} runs {d:+d} K tile on every "
                                                "output tile (trip_delta)")
        sections = ([("prologue", i, s) for i, s in enumerate(prog.prologue)]
                    + [("kernel", 0, prog.kernel)]
                    + [("epilogue", j, s) for j, s in enumerate(prog.epilogue)])
        for section, it, steps in sections:
            where = f"{prog.name} {section}" + (f"[{it}]" if section != "kernel" else "")
            for i, s in enumerate(steps):
                edits: list[tuple[str, int, str]] = []
                if s.kind == StepKind.ARRIVE and kinds.get(s.channel) == "empty":
                    edits.append(("drop_arrive", 1, f"drop {where} step {i} ARRIVE {s.channel}"
                                                    + (f" (peer {s.peer})" if s.peer else "")))
                    if s.peer:
                        edits.append(("cta_scope_remote_arrive", 1,
                                      f"{where} step {i} ARRIVE {s.channel} (peer {s.peer}) "
                                      "at CTA scope"))
                elif s.kind == StepKind.COUNTER_WAIT:
                    edits.append(("loosen_counter_wait", 1,
                                  f"{where} step {i} wait {s.channel} {s.value} -> {s.value + 1}"))
                elif s.kind == StepKind.PHASE_WAIT:
                    for d in (1, -1):
                        edits.append(("flip_phase_offset", d,
                                      f"{where} step {i} wait {s.channel} phase_offset "
                                      f"{s.phase_offset} -> {s.phase_offset + d}"))
                    if kinds.get(s.channel) == "empty":
                        edits.append(("drop_acquire", 1, f"drop {where} step {i} acquire "
                                                         f"{s.channel}"))
                    if s.scope == "cluster":
                        edits.append(("cta_scope_peer_wait", 1, f"{where} step {i} wait "
                                                                f"{s.channel} at CTA scope"))
                elif s.kind == StepKind.OP and prog.name in readers:
                    edits.append(("drop_mma", 1, f"drop {where} step {i} op {s.op}"))
                elif s.kind in (StepKind.NAMED_SYNC, StepKind.NAMED_ARRIVE):
                    verb = "arrive" if s.kind == StepKind.NAMED_ARRIVE else "sync"
                    edits.append((f"drop_named_{verb}", 1, f"drop {where} step {i} named {verb} "
                                                           f"{s.barrier} ({s.channel})"))
                    mine = ids.get(s.channel, ())
                    if s.barrier in mine and len(mine) > 1:
                        other = mine[(mine.index(s.barrier) + 1) % len(mine)]
                        edits.append(("swap_named_id", other, f"{where} step {i} named {verb} "
                                                              f"id {s.barrier} -> {other}"))
                ring = s.channel if s.channel in kinds else ""
                for category, delta, text in edits:
                    if category in categories:
                        swap = category == "swap_named_id"
                        yield AgentMutation(category=category, agent=prog.name, section=section,
                                            iteration=it, index=i, description=text,
                                            delta=1 if swap else delta, ring=ring,
                                            barrier=delta if swap else -1)
        yield from _finish_mutations(prog, categories)
        yield from _store_mutations(prog, categories)
    yield from _cluster_mutations(plan, categories)


def _store_mutations(prog: AgentProgram, categories: tuple[str, ...]) -> Iterator[AgentMutation]:
    """The mutations of ``prog``'s bulk-store steps (its ``store`` and ``drain``)."""
    for category, (section, kind, before) in _STORE_EDITS.items():
        kinds = [s.kind.value for s in getattr(prog, section)]
        if category not in categories or kind not in kinds:
            continue
        i = kinds.index(kind)
        where = f"{prog.name} {section} step {i} {kind.upper()}"
        if before:
            ahead = [k for k in range(i) if kinds[k] == before]
            if not ahead:
                continue
            yield AgentMutation(category=category, agent=prog.name, section=section,
                                iteration=0, index=i, delta=ahead[-1],
                                description=f"{where}: move before step {ahead[-1]} "
                                            f"{before.upper()}")
        elif category.startswith("loosen"):
            value = getattr(prog, section)[i].value
            yield AgentMutation(category=category, agent=prog.name, section=section,
                                iteration=0, index=i, delta=1,
                                description=f"{where} {value} -> {value + 1}")
        else:
            yield AgentMutation(category=category, agent=prog.name, section=section,
                                iteration=0, index=i, description=f"drop {where}")


def _cluster_mutations(plan: Plan, categories: tuple[str, ...]) -> Iterator[AgentMutation]:
    """A cluster plan's edits of its rings' arrival counts and of its cluster barriers."""
    if plan.cluster is None:
        return
    if "cluster_arrival_count" in categories:
        for r in plan.rings:
            if r.kind == "empty" and r.ctas > 1:
                yield AgentMutation(category="cluster_arrival_count", agent="", section="rings",
                                    iteration=0, index=0, ring=r.name,
                                    description=f"{r.name} initialised for "
                                                f"{r.arrivals // r.ctas} arrivals, not "
                                                f"{r.arrivals}")
    for category, what in (("drop_cluster_start", "start"), ("drop_cluster_end", "end")):
        if category in categories:
            yield AgentMutation(category=category, agent="", section="cluster", iteration=0,
                                index=0, description=f"drop the cluster's {what} barrier")


def _cluster_edit(plan: Plan, category: str, ring: str) -> Plan:
    if category == "cluster_arrival_count":
        return attrs.evolve(plan, rings=[attrs.evolve(r, arrivals=r.arrivals // r.ctas)
                                         if r.name == ring else r for r in plan.rings])
    assert plan.cluster is not None  # _cluster_mutations offers these for a cluster plan only
    cluster = (attrs.evolve(plan.cluster, start_barrier=False) if category == "drop_cluster_start"
               else attrs.evolve(plan.cluster, end_barrier=False))
    return attrs.evolve(plan, cluster=cluster)


def _finish_mutations(prog: Any, categories: tuple[str, ...]) -> Iterator[AgentMutation]:
    """The mutations of ``prog``'s cross-CTA reduction steps (its ``finish``)."""
    kinds = [s.kind.value for s in prog.finish]
    where = f"{prog.name} finish"
    for category, kind in _FINISH_DROPS.items():
        if category in categories and kind in kinds:
            i = kinds.index(kind)
            yield AgentMutation(category=category, agent=prog.name, section="finish",
                                iteration=0, index=i,
                                description=f"drop {where} step {i} {kind.upper()}")
    for category, (kind, before) in _FINISH_MOVES.items():
        if category in categories and kind in kinds and before in kinds \
                and kinds.index(before) < kinds.index(kind):
            i, dest = kinds.index(kind), kinds.index(before)
            yield AgentMutation(category=category, agent=prog.name, section="finish",
                                iteration=0, index=i, delta=dest,
                                description=f"{where}: move step {i} {kind.upper()} before "
                                            f"step {dest} {before.upper()}")


def mutate_compiled(compiled: CompiledSchedule, mutation: AgentMutation, *,
                    allow_unsafe: bool = False, host: PluginHost | None = None
                    ) -> CompiledSchedule:
    """``compiled`` (an agents compile) with ``mutation`` applied and proven again, as compile
    would: raises :class:`~pipeline_core.proof.UnsafeScheduleError` naming the first hazard
    unless ``allow_unsafe``, which returns it with its hazards attached."""
    from pipeline_core.errors import ProgramError
    from pipeline_core.proof import require_safe

    if compiled.plan.lockstep:
        raise ProgramError(f"schedule {compiled.schedule_name}: agent mutations need a plan of "
                           f"one program per role (this one is lockstep, lowering "
                           f"{compiled.plan.lowering!r})")
    mutated = attrs.evolve(compiled, plan=mutation.apply(compiled.plan), proof=None)
    return require_safe(mutated, host, allow_unsafe=allow_unsafe)
