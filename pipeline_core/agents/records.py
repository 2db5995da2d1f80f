"""The plan's records checked against the steps they govern, before any proof runs.

The store, reduction and split proofs each run over the agents their record lists
(``Plan.store``, ``Plan.reduction``, ``Plan.split``), and the main proof unrolls only the
K-loop sections: a step of a store or reduction kind in an agent no record lists, or in a
section no proof reads, is a step the emitter writes and nothing proves.  A plan edited that way
(the record set to None, an agent left off its list) would otherwise pass with its store waits,
fences or counter acquires unchecked.  Every such step is refused here as **UNPROVEN**, naming
the record to restore; a record naming an agent the plan lacks is refused the same way, so no
proof later looks up a missing agent.

The same holds for what a step names and carries: an op past the body, a ring the plan lacks, a
channel or named barrier the target lacks (each would crash the proof or be skipped by it), a
channel other than its owner's (the ordering, store or reduction it belongs to), a tag other
than the one its kind and op lower to (an emitter writes a step by its tag, the proof reads its
kind and op), and a field its kind does not read (a ``peer`` outside a cluster, a ``lag`` on a
store's sync): the proof would be of one kernel and the emitter would write another.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import attrs

from pipeline_core.agents.inject import sync_tags
from pipeline_core.check.verdict import Fix, HazardKind, Site, Violation
from pipeline_core.ops import Op
from pipeline_core.plan import AgentProgram, Plan, Ring, Step, StepKind
from pipeline_core.sync.model import BULK_STORE_STEPS, REDUCTION_STEPS, SyncModel

STORE_KINDS = frozenset(StepKind(k) for k in BULK_STORE_STEPS)
REDUCTION_KINDS = frozenset(StepKind(k) for k in REDUCTION_STEPS)
#: a turn-ordered add's steps (agents/turns.py): in the K loop of the agent making the add
TURN_KINDS = frozenset({StepKind.TURN_WAIT, StepKind.TURN_DRAIN, StepKind.TURN_FENCE,
                        StepKind.TURN_RELEASE})
#: what each once-per-tile section may hold: the steps its own proof reads
SECTION_KINDS = {"store": STORE_KINDS | {StepKind.NAMED_SYNC},
                 "drain": STORE_KINDS, "finish": REDUCTION_KINDS}
#: the fields each kind of step is read by (besides ``kind`` and ``tag``): a value in any other
#: field is read by no proof, but an emitter might write it (a ``peer`` on a CTA's own arrive)
_LOOP = {"lag"}
FIELDS = {
    StepKind.OP: _LOOP | {"op", "once"},
    StepKind.PHASE_WAIT: _LOOP | {"channel", "once", "phase_offset", "scope"},
    StepKind.ARRIVE: _LOOP | {"channel", "once", "peer", "scope"},
    StepKind.EXPECT_TX: _LOOP | {"channel", "once", "value"},
    StepKind.ASYNC_ARRIVE: _LOOP | {"channel", "once"},
    StepKind.DESCRIPTOR_ACQUIRE: _LOOP | {"once"},
    StepKind.FENCE: _LOOP | {"channel"},
    StepKind.COMMIT: _LOOP | {"channel"},
    StepKind.COUNTER_WAIT: _LOOP | {"channel", "value", "op", "once"},
    StepKind.NAMED_SYNC: _LOOP | {"channel", "barrier", "value", "once", "output_lag", "exit"},
    StepKind.NAMED_ARRIVE: _LOOP | {"channel", "barrier", "value", "once", "output_lag", "exit"},
    StepKind.STORE_WAIT: {"channel", "value"},
    StepKind.TURN_WAIT: _LOOP | {"channel", "value"},
    StepKind.TURN_DRAIN: _LOOP | {"channel", "value"},
    StepKind.TURN_FENCE: _LOOP | {"channel"},
    StepKind.TURN_RELEASE: _LOOP | {"channel"},
    **{k: {"channel"} for k in (StepKind.STAGE_WRITE, StepKind.PROXY_FENCE,
                                StepKind.STORE_ISSUE, StepKind.STORE_COMMIT,
                                StepKind.STORE_DRAIN, StepKind.SLICE_STORE,
                                StepKind.RELEASE_FENCE, StepKind.COUNT_ARRIVE,
                                StepKind.COUNT_ACQUIRE, StepKind.SLICE_READ,
                                StepKind.COUNT_RESET)},
}
#: the K-loop sections, where a proxy fence orders a ring's copies before the reads its wait
#: made visible (``channel``: that full ring), not a bulk store's staging writes
LOOP_SECTIONS = ("prologue", "kernel", "epilogue")
LOOP_FENCE_FIELDS = _LOOP | {"channel"}
#: every field's default (a field no kind lists, a lockstep plan's ``instr``, ``prefetch`` and
#: ``synthetic``, must keep it), and the fields only a cluster's steps may set
_DEFAULTS = {f.name: f.default for f in attrs.fields(Step)}
CLUSTER_FIELDS = frozenset({"peer", "scope"})

#: steps that name a ring, a counter channel, a named barrier (what each must exist as)
RING_KINDS = frozenset({StepKind.PHASE_WAIT, StepKind.ARRIVE, StepKind.EXPECT_TX,
                        StepKind.ASYNC_ARRIVE})
COUNTER_KINDS = frozenset({StepKind.COMMIT, StepKind.COUNTER_WAIT, StepKind.FENCE})
NAMED_KINDS = frozenset({StepKind.NAMED_SYNC, StepKind.NAMED_ARRIVE})


def _steps(prog: AgentProgram) -> Iterator[tuple[str, int, Step]]:
    """(section, position, step) of every step of ``prog``."""
    for it in prog.prologue:
        yield from (("prologue", p, s) for p, s in enumerate(it))
    yield from (("kernel", p, s) for p, s in enumerate(prog.kernel))
    for it in prog.epilogue:
        yield from (("epilogue", p, s) for p, s in enumerate(it))
    for section in ("finish", "store", "drain"):
        yield from ((section, p, s) for p, s in enumerate(getattr(prog, section)))


def _stray_field(step: Step, cluster: bool, section: str) -> str:
    """The first field of ``step`` its kind does not read, in ``section``, that is off its
    default ("" none): a step of a once-per-tile section (``finish``, ``store``, ``drain``) has
    no loop position, so a named sync there reads its barrier and count only."""
    fields = FIELDS.get(step.kind, set())
    if step.kind == StepKind.PROXY_FENCE and section in LOOP_SECTIONS:
        fields = LOOP_FENCE_FIELDS
    if section in SECTION_KINDS:
        fields = fields & {"channel", "barrier", "value"}
    for name, default in _DEFAULTS.items():
        if name in ("kind", "tag") or getattr(step, name) == default:
            continue
        if name not in fields or (name in CLUSTER_FIELDS and not cluster):
            return name
    return ""


def _fault(plan: Plan, agent: str, section: str, step: Step, body: Sequence[Op],
           sync: SyncModel, records: Mapping[str, tuple[str, ...]]) -> str:
    """Why no proof reads ``step`` of ``agent`` in ``section``, as its fix ("": one does).  In
    order: what it names exists, it sits in a section of its kind, its record lists the agent,
    it sets only the fields its kind reads, its channel is its owner's, its tag its kind's."""
    kind = step.kind
    rings = {r.name for r in plan.rings}
    counters = {c.name for c in sync.channels}
    ids = sync.named_barriers.ids if sync.named_barriers is not None else 0
    allowed = SECTION_KINDS.get(section)
    if kind == StepKind.OP and not 0 <= step.op < len(body):
        return f"op {step.op} is no op of the body (0..{len(body) - 1})"
    if kind in RING_KINDS and step.channel not in rings:
        return f"ring {step.channel!r} is none of the plan's ({', '.join(sorted(rings))})"
    if kind in COUNTER_KINDS and step.channel not in counters:
        return (f"channel {step.channel!r} is none of sync model {sync.name}'s "
                f"({', '.join(sorted(counters))})")
    if kind in NAMED_KINDS and not 0 <= step.barrier < ids:
        return f"named barrier {step.barrier} is outside the target's 0..{ids - 1}"
    if allowed is not None and kind not in allowed:
        return (f"a {section} section holds only {', '.join(sorted(k.value for k in allowed))} "
                "steps; move it to its section or drop it")
    loop_fence = kind == StepKind.PROXY_FENCE and section in LOOP_SECTIONS
    if loop_fence and step.channel not in {r.name for r in plan.rings if r.kind == "full"} \
            | {o.name for o in plan.orders}:
        return (f"a proxy fence in the K loop orders a full ring's copies before the reads "
                f"its wait made visible, or a turn's writes before the ordering hands them on; "
                f"{step.channel!r} is none of the plan's full rings or orderings")
    if allowed is None and kind in STORE_KINDS | REDUCTION_KINDS and not loop_fence:
        return (f"a {kind.value} step belongs in the "
                f"{'finish' if kind in REDUCTION_KINDS else 'store or drain'} section")
    if section in ("store", "drain") and agent not in records["Plan.store"]:
        return ("restore Plan.store with this agent in its agents (and its barrier), or drop "
                "the agent's store steps")
    if section == "finish" and agent not in records["Plan.reduction"]:
        return "restore Plan.reduction with this agent in its agents, or drop its finish steps"
    if kind in TURN_KINDS and (section not in LOOP_SECTIONS or agent not in records["Plan.turns"]):
        return ("a turn step orders the adds of an agent of Plan.turns in its K loop: restore "
                "Plan.turns with this agent, or drop its turn steps")
    if step.output_lag and agent not in records["Plan.split"]:
        return ("an output_lag step orders the output tiles of a tile split: restore "
                "Plan.split with this agent, or set output_lag 0")
    stray = _stray_field(step, plan.cluster is not None, section)
    if stray:
        where = " outside a cluster" if stray in CLUSTER_FIELDS else ""
        return (f"{stray}={getattr(step, stray)!r} means nothing to a {kind.value} step{where} "
                f"and no proof reads it; set it back to {_DEFAULTS[stray]!r}")
    owners = _owners(plan, section, kind)
    if kind in NAMED_KINDS | STORE_KINDS | REDUCTION_KINDS and step.channel not in owners \
            and not loop_fence:
        return (f"its channel {step.channel!r} names none of "
                f"{', '.join(sorted(owners)) or 'no record'}, what a {kind.value} step "
                f"{'in ' + section + ' ' if allowed is not None else ''}belongs to")
    want = (sync_tags(sync).get("proxy_fence") if loop_fence
            else step_tag(step, sync, sync_tags(sync), body))
    if want is not None and step.tag != want:
        return (f"its tag {step.tag} is not {want}, the tag a {kind.value} step"
                f"{f' of op {step.op}' if step.op >= 0 else ''} lowers to: the emitter would "
                "write the tag's instruction, the proof reads the step's kind and op; restore "
                "the tag")
    return ""


def _owners(plan: Plan, section: str, kind: StepKind) -> set[str]:
    """The names a step's ``channel`` may take: a store or reduction step's its record's, a
    named step's its ordering's (or, in the store, the store's)."""
    store = {plan.store.name} if plan.store is not None else set()
    if kind in REDUCTION_KINDS:
        return {plan.reduction.name} if plan.reduction is not None else set()
    if kind in STORE_KINDS or section in ("store", "drain"):
        return store
    return {o.name for o in plan.orders}


def step_tag(step: Step, sync: SyncModel, tags: Mapping[str, int],
             body: Sequence[Op]) -> int | None:
    """The tag ``step`` lowers to (``tags``: :func:`~pipeline_core.agents.inject.sync_tags`):
    an op's own, the sync model's for each action; None for a kind no agents plan derives."""
    k = step.kind
    nb, store, red = sync.named_barriers, sync.bulk_store, sync.reduction
    if k == StepKind.OP:
        return body[step.op].tag
    if k in (StepKind.PHASE_WAIT, StepKind.ARRIVE, StepKind.EXPECT_TX, StepKind.FENCE,
             StepKind.ASYNC_ARRIVE, StepKind.DESCRIPTOR_ACQUIRE) or k in TURN_KINDS:
        return tags.get(k.value)
    if k in (StepKind.COMMIT, StepKind.COUNTER_WAIT):
        return tags.get(f"{'commit' if k == StepKind.COMMIT else 'wait'}:{step.channel}")
    if k in NAMED_KINDS and nb is not None:
        return nb.sync_tag if k == StepKind.NAMED_SYNC else nb.arrive_tag
    if k in STORE_KINDS and store is not None:
        return store.tags.get(k.value)
    if k in REDUCTION_KINDS and red is not None:
        return red.tags.get(k.value)
    return None


def unrecorded(plan: Plan, body: Sequence[Op], sync: SyncModel,
               priority: Mapping[HazardKind, int]) -> list[Violation]:
    """The findings on steps no proof would read (none for a derived plan): also a step that
    names an op past the body, a ring the plan lacks, a channel the sync model lacks, or a
    named barrier outside the target's, and a step whose tag is not the one its kind and op
    lower to (an emitter writes the tag's instruction, the proof reads the kind and the op);
    ``priority`` orders them as the agents checker orders its own."""
    found: list[Violation] = []
    names = [p.name for p in plan.programs]

    def report(a: int, section: str, pos: int, what: str, fix: str) -> None:
        agent = names[a]
        found.append(Violation(HazardKind.UNPROVEN,
                               Site(section, pos, 0, a, op=f"{agent} {what}", agent=agent),
                               f"{agent}'s {what} is written into the kernel and proven by "
                               "nothing: " + fix,
                               fix=Fix(action="review", phase=section, index=pos, text=fix),
                               order=(priority[HazardKind.UNPROVEN], 0, 0, 0, a, pos)))

    def refuse(record: str, message: str, fix: str) -> None:  # a record's own fault
        found.append(Violation(HazardKind.UNPROVEN, Site("plan", 0, 0, 0, op=record), message,
                               fix=Fix(action="review", phase="plan", index=0, text=fix),
                               order=(priority[HazardKind.UNPROVEN], 0, 0, 0, 0, 0)))

    records = {"Plan.store": plan.store.agents if plan.store is not None else (),
               "Plan.reduction": plan.reduction.agents if plan.reduction is not None else (),
               "Plan.split": plan.split.agents if plan.split is not None else (),
               "Plan.turns": plan.turns.agents if plan.turns is not None else ()}
    for record, agents in records.items():
        for name in agents:
            if name not in names:
                refuse(record, f"{record} lists agent {name!r}, which the plan does not have "
                       f"(agents: {', '.join(names)})", f"list only the plan's agents in {record}")
    if plan.store is not None and len(plan.store.barriers) != len(plan.store.agents):
        refuse("Plan.store", f"Plan.store lists {len(plan.store.agents)} agents and "
               f"{len(plan.store.barriers)} barriers: an agent without its barrier is not proven",
               "give Plan.store one barrier per storing agent")
    for ring in plan.rings:  # what the proof divides and counts by
        for field in ("stages", "arrivals", "ctas"):
            if getattr(ring, field) < 1:
                refuse(f"ring {ring.name}", f"ring {ring.name} has {field}="
                       f"{getattr(ring, field)}: a ring takes 1 or more",
                       f"give ring {ring.name} {field} >= 1 (the lowering derives it)")
    depth: dict[tuple[int, ...], Ring] = {}
    for ring in plan.rings:  # a stage is one buffer and its two barriers, full and empty
        other = depth.setdefault(tuple(ring.ops), ring)
        if other.stages != ring.stages:
            refuse(f"ring {ring.name}", f"ring {ring.name} has {ring.stages} stages and ring "
                   f"{other.name} of the same copies {other.stages}: a stage is one buffer "
                   "with its full and its empty barrier", "give both rings the same stages")
    if plan.stages < 1:
        refuse("Plan.stages", f"Plan.stages={plan.stages}", "give the plan 1 stage or more")
    for a, prog in enumerate(plan.programs):
        for section, pos, step in _steps(prog):
            fault = _fault(plan, prog.name, section, step, body, sync, records)
            if fault:
                report(a, section, pos, f"{step.kind.value.upper()} ({section}[{pos}])", fault)
        if prog.split_base != "all" and prog.name not in records["Plan.split"]:
            report(a, "plan", 0, f"split_base {prog.split_base!r}", "only an agent of "
                   "Plan.split counts its ring positions by its own output tiles; restore "
                   "Plan.split or set split_base 'all'")
    return found
