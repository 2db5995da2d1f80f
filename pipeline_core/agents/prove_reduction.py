"""The proof of a cross-CTA reduction: every split, every arrival order, two generations.

The agents checker (:mod:`pipeline_core.agents.prove`) proves one CTA's programs; a reduction
(:mod:`pipeline_core.agents.reduction`) hands results between the CTAs of one output tile
through global memory, so it is proven here over the CTAs (docs/guide/agents.md, "Cross-CTA
reductions").  For each split count of :data:`SPLITS`, each CTA that may arrive last and two
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
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipeline_core.check.verdict import Fix, HazardKind, Site, Violation
from pipeline_core.ops import tag_name
from pipeline_core.plan import Plan, Step, StepKind
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


def reduction_assumptions(plan: Plan, sync: SyncModel) -> list[str]:
    """The lines a verdict adds for a plan with a reduction (its model's assumptions)."""
    red, model = plan.reduction, sync.reduction
    if red is None or model is None:
        return []
    return [f"cross-CTA reduction {red.name} of agents {', '.join(red.agents)}: "
            f"{' and '.join(map(str, SPLITS))} splits, every CTA arriving last, "
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
        for splits in SPLITS:
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
