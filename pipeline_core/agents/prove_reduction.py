"""The proofs of what CTAs hand each other through global memory: a cross-CTA reduction over
every split, every arrival order and two generations; turn-ordered adds over every add's steps
and every part's turns.

The agents checker (:mod:`pipeline_core.agents.prove`) proves one CTA's programs; a reduction
(:mod:`pipeline_core.agents.reduction`) hands results between the CTAs of one output tile
through global memory, so it is proven here over the CTAs (docs/guide/agents.md, "Cross-CTA
reductions").  For each split count of :data:`SPLITS` (or the trip rule's: stream-K's tiles
shared by uneven K ranges, whose ranges and fixup order :mod:`pipeline_core.agents.prove_fixup`
proves), each CTA that may arrive last and two
generations of the counter and its workspace (the counter's next use: a later tile on it, or
the next launch), with each reducing agent's ``finish`` steps:

* a step after the ``count_acquire`` runs on the last arriver only (the count reached the
  splits); every other step runs on every split's CTA;
* the arrive and the reset are one action per CTA, after every reducing agent reached them
  (``CrossCtaReduction.cta_join``); the counter's atomic arrivals are totally ordered, and the
  last one follows every other of its generation;
* a slice is **published** to another CTA when its stores precede a ``release_fence`` that
  precedes the CTA's arrive, and the reader reads it after its own arrive and a
  ``count_acquire``: else **SMEM_RAW** (the workspace read may see the slice before it was
  written; its own slice a CTA reads in program order);
* the next generation's stores and arrivals begin after the reset (``next_use``): a slice read
  after the reset may be overwritten first, **SMEM_WAR**;
* the reset must follow every arrival of its generation (the last arriver's, after its
  acquire): an earlier one may erase an arrival, and a missing one leaves the count at the
  splits for the next generation, whose arrivals then never make a CTA last: **DEADLOCK**, as
  is a tile with no arrival at all;
* the epilogue runs once per tile: without the acquire every split runs it,
  **DUPLICATE_PRODUCT**; a tile whose slices are never stored or read, **MISSING_PRODUCT**.

Turn-ordered adds (:mod:`pipeline_core.agents.turns`; docs/guide/agents.md, "Turn-ordered
adds"): each CTA's adds to a part of the accumulator (the attention backward's query block of
dQ) take turns ``slots * rank + slot + first`` on the part's counter, ``rank`` the output tile's
among those adding to the part (the trip rule's).  :func:`prove_turns` checks

* each add's steps: a ``turn_wait`` before it, else the add may land before an earlier
  turn's, **ADD_ORDER**; after its commit a ``turn_drain`` that covers its group (every
  write performed: the read wait that frees its buffer is not enough, the next turn's add
  could reach memory first), then a ``turn_fence``, then one ``turn_release``, else
  **ADD_ORDER**; no release at all (or two), the next turn is never reached (or skipped),
  **DEADLOCK**;
* the slots: the CTA's adds wait for slots ``0 .. slots-1``, one each: two with one slot,
  **ADD_ORDER**; a slot no add takes, **DEADLOCK**;
* the turns (the trip rule's ``turn_orders()``: for each part of small problems of every
  shape, the ranks of the output tiles that add to it, in launch order): they are ``0, 1, ..``
  in launch order, every one taken once.  Two adds with one turn, **ADD_ORDER**; a turn no add
  takes (the first one not 0: a masked rule's first adder ranked wrong) or one taken
  before an earlier-launched tile's, **DEADLOCK**.

No cycle of waits exists then: an add waits only for adds of a smaller turn, made by tiles
launched before its own (or by its own CTA's earlier slot), so the pending add of the smallest
turn of the smallest-launched tile always proceeds (its CTA is resident: a persistent grid of
at most one CTA per SM takes its tiles in launch order; the CTA's own steps are proven
deadlock-free with the wait as an external one that returns).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipeline_core.agents.prove_fixup import rule_fixups, split_counts
from pipeline_core.check.verdict import Fix, HazardKind, Site, Violation
from pipeline_core.ops import tag_name
from pipeline_core.plan import Plan, Step, StepKind, Turns
from pipeline_core.sync.model import SyncModel

#: the split counts a proof runs: two CTAs (one other slice), and three (an arrival between
#: the first and the last); more splits repeat three's orders
SPLITS = (2, 3)
#: generations of the counter and workspace: one, and the next use after its reset
GENERATIONS = 2

STORE, FENCE, ARRIVE, ACQUIRE, READ, RESET = (
    StepKind.SLICE_STORE, StepKind.RELEASE_FENCE, StepKind.COUNT_ARRIVE, StepKind.COUNT_ACQUIRE,
    StepKind.SLICE_READ, StepKind.COUNT_RESET)


def _at(steps: Sequence[Step], kind: StepKind) -> int | None:
    return next((i for i, s in enumerate(steps) if s.kind == kind), None)


def _before(steps: Sequence[Step], kind: StepKind, lo: int, hi: int) -> bool:
    """Whether a ``kind`` step lies strictly between positions ``lo`` and ``hi``."""
    return any(s.kind == kind for s in steps[lo + 1:hi])


def _splits(plan: Plan) -> tuple[int, ...]:
    """The CTA counts the proof runs: the trip rule's (its ``fixups()``: stream-K's tiles
    shared by 2, 3, .. CTAs), else :data:`SPLITS`."""
    return split_counts(rule_fixups(plan) or [], SPLITS)


def reduction_assumptions(plan: Plan, sync: SyncModel) -> list[str]:
    """The lines a verdict adds for a plan with a reduction (its model's assumptions)."""
    red, model = plan.reduction, sync.reduction
    if red is None or model is None:
        return []
    return [f"cross-CTA reduction {red.name} of agents {', '.join(red.agents)}: "
            f"{' and '.join(map(str, _splits(plan)))} splits, every CTA arriving last, "
            f"{GENERATIONS} generations of its counter and workspace",
            f"the arrive and the reset join the CTA's reducing agents: {model.cta_join}",
            f"a counter's next use begins after its reset: {model.next_use}"]


def prove_reduction(plan: Plan, sync: SyncModel, names: Mapping[int, str],
                    priority: Mapping[HazardKind, int]) -> list[Violation]:
    """The findings on ``plan``'s reduction (none when it has none); ``priority`` orders them
    as the agents checker orders its own."""
    red = plan.reduction
    if red is None:
        return []
    found: dict[tuple, Violation] = {}
    index = {p.name: a for a, p in enumerate(plan.programs)}
    finishes = {a: plan.program(a).finish for a in red.agents}
    # the CTA-joined actions exist when any agent takes them (each agent that does joins)
    arrives = any(_at(f, ARRIVE) is not None for f in finishes.values())
    resets = any(_at(f, RESET) is not None for f in finishes.values())

    def text(agent: str, i: int, who: str) -> str:
        steps = finishes[agent]
        s = steps[i] if 0 <= i < len(steps) else None
        name = (tag_name(s.tag, names) if s is not None and s.tag >= 0
                else s.kind.value.upper() if s is not None else "")
        return f"{agent} {name} {red.name} after the loop{who}".replace("  ", " ")

    def report(kind: HazardKind, agent: str, i: int, who: str, message: str, fix: str,
               other: tuple[str, int, str] | None = None) -> None:
        key = (kind, agent, i)
        if key in found:
            return
        site = Site("finish", i, 0, index[agent], op=text(agent, i, who), agent=agent)
        o = (Site("finish", other[1], 0, index[other[0]], op=text(*other), agent=other[0])
             if other is not None else None)
        found[key] = Violation(kind, site, message, o,
                               Fix(action="review", phase="finish", index=i, text=fix),
                               order=(priority[kind], 0, 0, 0, index[agent], i))

    for agent, steps in finishes.items():
        store, fence, arrive, acquire, read, reset = (
            _at(steps, k) for k in (STORE, FENCE, ARRIVE, ACQUIRE, READ, RESET))
        last_only = (lambda i: acquire is not None and acquire < i)
        end = len(steps) - 1
        if not arrives:
            report(HazardKind.DEADLOCK, agent, acquire if acquire is not None else end, "",
                   f"no split's CTA arrives on the {red.name} counter: its count never reaches "
                   "the splits, so no CTA is the last and the tile is never reduced",
                   f"add the {ARRIVE.value.upper()} step after the {FENCE.value.upper()}")
        if acquire is None:
            report(HazardKind.DUPLICATE_PRODUCT, agent, end, "",
                   f"no {ACQUIRE.value.upper()}: every split's CTA reads the slices and runs "
                   "the tile's epilogue, not only the last to arrive",
                   f"add the {ACQUIRE.value.upper()} step after the {ARRIVE.value.upper()}")
        if store is None or read is None:
            what = "stored" if store is None else "read back"
            report(HazardKind.MISSING_PRODUCT, agent, end, "",
                   f"the splits' partial results are never {what}: the last CTA's sum misses "
                   "the other slices", f"keep the {STORE.value.upper()} and "
                   f"{READ.value.upper()} steps")
            continue
        if store is not None and last_only(store):
            report(HazardKind.MISSING_PRODUCT, agent, store, "",
                   "the slice is stored by the last arriver only: the other splits' partial "
                   "results never reach the workspace",
                   f"store before the {ACQUIRE.value.upper()}")
        # every split count, every CTA that may arrive last, two generations
        for splits in _splits(plan):
            for last in range(splits):
                readers = [last] if last_only(read) else list(range(splits))
                for x in readers:
                    who = f" of CTA {x} (split {x} of {splits})"
                    for c in range(splits):
                        if c == x:
                            if not store < read:
                                report(HazardKind.SMEM_RAW, agent, read, who,
                                       f"CTA {x} reads its own slice before it stored it",
                                       f"move the {READ.value.upper()} after the "
                                       f"{STORE.value.upper()}")
                            continue
                        published = (arrive is not None and _before(steps, FENCE, store, arrive))
                        acquired = (arrive is not None and x == last and last_only(read)
                                    and arrive < (acquire or 0) < read)
                        if arrive is None and arrives:
                            report(HazardKind.SMEM_RAW, agent, read, who,
                                   f"{agent} does not join its CTA's {ARRIVE.value.upper()}: "
                                   f"CTA {x} may read the part of CTA {c}'s workspace slice "
                                   f"that {agent} stored before the stores are released",
                                   f"add the {ARRIVE.value.upper()} step to {agent}, after its "
                                   f"{FENCE.value.upper()}",
                                   other=(agent, store, f" of CTA {c} (split {c} of {splits})"))
                        elif not published:
                            report(HazardKind.SMEM_RAW, agent, read, who,
                                   f"CTA {x} may read CTA {c}'s workspace slice before it is "
                                   f"published: CTA {c}'s stores are not followed by a "
                                   f"{FENCE.value.upper()} before its "
                                   f"{ARRIVE.value.upper()} (release), so the arrival can be "
                                   "seen before the stores",
                                   f"put a {FENCE.value.upper()} between the "
                                   f"{STORE.value.upper()} and the {ARRIVE.value.upper()}",
                                   other=(agent, store, f" of CTA {c} (split {c} of {splits})"))
                        elif not acquired:
                            report(HazardKind.SMEM_RAW, agent, read, who,
                                   f"CTA {x} may read CTA {c}'s workspace slice before the "
                                   f"count reached {splits}: the read comes before its own "
                                   f"{ACQUIRE.value.upper()} (it must follow the last "
                                   "arrival, which follows every split's release)",
                                   f"move the {READ.value.upper()} after the "
                                   f"{ACQUIRE.value.upper()}",
                                   other=(agent, arrive or 0, f" of CTA {c} (split {c} of "
                                          f"{splits})"))
                # the reset: after every arrival of its generation, before the next use
                if reset is None:
                    if not resets:
                        report(HazardKind.DEADLOCK, agent, end, "",
                               f"no {RESET.value.upper()}: the {red.name} counter still holds "
                               f"{splits} when its next generation arrives, so no arrival of "
                               "that generation is the last and its tile is never reduced",
                               f"add the {RESET.value.upper()} after the {READ.value.upper()}")
                    else:
                        report(HazardKind.SMEM_WAR, agent, read, f" of CTA {last}",
                               f"{agent} does not join its CTA's {RESET.value.upper()}: the "
                               "next generation may store its slices (after the reset) "
                               "before this agent's read of them ends",
                               f"add the {RESET.value.upper()} step to {agent}")
                    continue
                resetters = [last] if last_only(reset) else list(range(splits))
                for x in resetters:
                    who = f" of CTA {x} (split {x} of {splits})"
                    # an agent that does not join the arrive joins the reset the others
                    # order after it (its own missing arrive is reported at its read)
                    after_all = ((arrive is not None or arrives) and x == last
                                 and last_only(reset)
                                 and (arrive is None or arrive < (acquire or 0) < reset))
                    if not after_all:
                        c = next(c for c in range(splits) if c != x)
                        report(HazardKind.DEADLOCK, agent, reset, who,
                               f"CTA {x}'s {RESET.value.upper()} may race CTA {c}'s arrival "
                               f"of the same generation and erase it: the count then never "
                               f"reaches {splits} and the tile is never reduced (only the "
                               "last arriver, after its acquire, may reset)",
                               f"move the {RESET.value.upper()} after the "
                               f"{ACQUIRE.value.upper()}")
                for x in readers:
                    if not read < reset or (x != last and last_only(reset)):
                        c = next(c for c in range(splits) if c != x)
                        report(HazardKind.SMEM_WAR, agent, read, f" of CTA {x} (split {x} of "
                               f"{splits})",
                               f"the next generation's CTA {c} may store its slice (its use "
                               f"begins at the {RESET.value.upper()}) before CTA {x} read it: "
                               f"the read is not ordered before the reset",
                               f"move the {RESET.value.upper()} after the {READ.value.upper()}",
                               other=(agent, reset, f" of CTA {last}"))
    return list(found.values())


def turn_assumptions(plan: Plan) -> list[str]:
    """The lines a verdict adds for a plan with turn-ordered adds."""
    t = plan.turns
    if t is None:
        return []
    return [f"turn-ordered adds {t.name} of agents {', '.join(t.agents)}: {t.slots} per CTA and "
            "K tile, turns from the trip rule's turn_rank over its turn_orders(); every CTA "
            "resident, taking its output tiles in launch order (a persistent grid)"]


def _turn_steps(kernel: Sequence[Step], op: int, name: str) -> dict[str, list[int]]:
    """Where the add and its turn steps sit in ``kernel`` (those of the add's K tile: a step
    of another lag serves another tile's add)."""
    at: dict[str, list[int]] = {"op": [], "commit": [], "wait": [], "drain": [], "fence": [],
                                "release": []}
    kinds = {StepKind.TURN_WAIT: "wait", StepKind.TURN_FENCE: "fence",
             StepKind.TURN_RELEASE: "release"}
    lag = next((s.lag for s in kernel if s.kind == StepKind.OP and s.op == op), 0)
    for i, s in enumerate(kernel):
        if s.kind == StepKind.OP and s.op == op:
            at["op"].append(i)
        elif s.lag != lag:
            continue
        elif s.kind == StepKind.COMMIT:
            at["commit"].append(i)
        elif s.kind == StepKind.TURN_DRAIN:
            at["drain"].append(i)
        elif s.kind in kinds and s.channel == name:
            at[kinds[s.kind]].append(i)
    return at


def prove_turns(plan: Plan, names: Mapping[int, str],
                priority: Mapping[HazardKind, int]) -> list[Violation]:
    """The findings on ``plan``'s turn-ordered adds (none when it has none); the module says
    what is checked."""
    t = plan.turns
    if t is None:
        return []
    found: dict[tuple, Violation] = {}
    index = {p.name: a for a, p in enumerate(plan.programs)}

    def report(kind: HazardKind, agent: str, i: int, message: str, fix: str) -> None:
        key = (kind, agent, i)
        if key in found or agent not in index:
            return
        steps = plan.program(agent).kernel
        s = steps[i] if 0 <= i < len(steps) else None
        what = (tag_name(s.tag, names) if s is not None and s.tag >= 0
                else s.kind.value.upper() if s is not None else "the rule")
        site = Site("kernel", i, 0, index[agent], op=f"{agent} {what} {t.name}", agent=agent)
        found[key] = Violation(kind, site, message, None,
                               Fix(action="review", phase="kernel", index=i, text=fix),
                               order=(priority[kind], 0, 0, 0, index[agent], i))

    slots: list[int] = []
    for agent, op in zip(t.agents, t.ops, strict=True):
        steps = plan.program(agent).kernel
        at = _turn_steps(steps, op, t.name)
        if not at["op"]:
            continue  # a missing add is the agents checker's MISSING_PRODUCT
        add = at["op"][0]
        waits = [i for i in at["wait"] if i < add]
        if not waits:
            report(HazardKind.ADD_ORDER, agent, add,
                   f"the add waits for no turn on {t.name}'s counter: it may land before an "
                   "earlier turn's add to the same part, so the sum's bits vary run to run",
                   f"put a {StepKind.TURN_WAIT.value.upper()} right before the add")
        else:
            slots.append(steps[waits[-1]].value)
        commit = next((i for i in at["commit"] if i > add), None)
        releases = [i for i in at["release"] if i > add]
        if not releases:
            report(HazardKind.DEADLOCK, agent, add,
                   f"no {StepKind.TURN_RELEASE.value.upper()} after the add: the part's next "
                   "turn is never released and its add waits for ever",
                   f"end the add with a {StepKind.TURN_RELEASE.value.upper()}")
            continue
        if len(at["release"]) > 1 or len(at["wait"]) > 1:
            report(HazardKind.DEADLOCK, agent, releases[-1],
                   "the add takes its turn or releases it more than once per K tile: the "
                   "counter skips a turn another add waits for",
                   "keep one turn wait and one release per add")
        release = releases[0]
        drains = [i for i in at["drain"] if commit is not None and commit < i < release
                  and steps[i].channel == steps[commit].channel
                  and steps[i].value <= sum(commit < c < i for c in at["commit"])]
        if not drains:
            report(HazardKind.ADD_ORDER, agent, release,
                   "the release does not follow a wait for the add's completion (its writes "
                   "performed; a read wait only frees its source): the next turn's add may "
                   "reach the accumulator first",
                   f"put a {StepKind.TURN_DRAIN.value.upper()} 0 of the add's channel between "
                   "its commit and the release")
        elif not any(drains[0] < i < release for i in at["fence"]):
            report(HazardKind.ADD_ORDER, agent, release,
                   "no fence between the add's completion and the release: the release "
                   "(generic proxy) is not ordered after the add's writes (async proxy)",
                   f"put a {StepKind.TURN_FENCE.value.upper()} before the release")
    if len(slots) == t.slots and sorted(slots) != list(range(t.slots)):
        agent = t.agents[0]
        dup = len(set(slots)) < len(slots)
        report(HazardKind.ADD_ORDER if dup else HazardKind.DEADLOCK, agent, 0,
               f"the CTA's adds wait for slots {slots}: "
               + ("two share a slot, so they add in either order" if dup
                  else f"slot {min(set(range(t.slots)) - set(slots))} no add takes, so the "
                       "turns after it are never reached"),
               f"give the adds slots 0..{t.slots - 1}, one each, in the order AgentSpec.turns "
               "lists them")
    for kind, fault in turn_faults(plan.trip_rule, t, sorted(slots) or list(range(t.slots))):
        report(kind, t.agents[0], 0, fault, "rank each output tile among the part's adders "
               "in launch order, from 0 (the trip rule's turn_rank)")
    return list(found.values())


def turn_faults(rule: object, t: Turns, slots: Sequence[int]) -> list[tuple[HazardKind, str]]:
    """The turns the trip rule gives every part of its sample problems, checked: ``0, 1, ..``
    in launch order, each taken once (the first fault of each kind)."""
    orders = getattr(rule, "turn_orders", None)
    if not callable(orders):
        return [(HazardKind.ADD_ORDER, "the trip rule names no turn order (turn_orders(), "
                 "turn_rank): which output tiles add to a part, and in which turn, is unproven")]
    out: dict[HazardKind, str] = {}
    for part, ranks in orders():
        turns = [t.slots * r + s + t.first for r in ranks for s in slots]
        if len(set(turns)) < len(turns):
            out.setdefault(HazardKind.ADD_ORDER, f"{part}: two adds take one turn (turns "
                           f"{turns}): they land in either order")
        elif turns != list(range(len(turns))):
            out.setdefault(HazardKind.DEADLOCK, f"{part}: its adds take turns {turns}, not 0.."
                           f"{len(turns) - 1} in launch order: a turn no add releases is waited "
                           "for, or an add waits for a tile launched after its own")
    return list(out.items())
