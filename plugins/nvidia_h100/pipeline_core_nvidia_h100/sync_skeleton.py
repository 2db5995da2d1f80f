"""What runs is what was proven (issue 33): an emitted kernel's synchronization skeleton per role,
checked against the plan's steps.

The proof (pipeline_core/agents/prove.py) covers the plan, not the CUDA text, so an emitter that
drops, moves or rewrites one synchronization statement would run a kernel nobody proved.  This
module reads the skeleton back out of the emitted source, for each agent of the plan, and
compares it, in program order, with the skeleton the plan's steps call for.

The emitters write every synchronization statement through a small set of device helpers and
inline PTX (``skeleton.ring_step_line``, ``named_step_line``, ``wgmma_group_line``, the TMA
store's and split-K's blocks), and mark where each role's region and each section of its
program begins (``skeleton.ROLE_MARK`` / ``SECTION_MARK``: comments, so the machine code is
unchanged).  The skeleton's vocabulary (:class:`Sync`, ``what``):

* ``mbarrier.wait`` / ``mbarrier.wait.cluster`` (ring, position, phase offset),
  ``mbarrier.expect_tx`` (ring, position, bytes), ``mbarrier.arrive`` (ring, position,
  arriving: ``thread`` for a single-issuer program, ``warp`` for one arrival per warp, the
  counts the ring's arrivals were proven with), ``mbarrier.arrive.peer`` (ring, position, peer
  CTA, scope, arriving), ``mbarrier.arrive.async`` (ring, position, arriving: ``thread``
  when the producer's program runs on its thread 0, ``every thread`` when every thread of its
  warp group runs it, each one arrival the ring's count was proven with: the cp.async
  producer's ``cp.async.mbarrier.arrive.noinc``); the position is the step's lag behind the loop's K tile, or ``once``
  for a step whose position is the output tile;
* ``bar.sync`` / ``bar.arrive`` (named barrier id, thread count, and the output-tile lag of a
  turn that skips the CTA's first tiles, ``Step.output_lag``, when it has one);
* ``wgmma.fence``, ``wgmma.commit_group``, ``wgmma.wait_group`` (groups left pending);
* ``fence.proxy.async`` (generic -> async proxy), ``fence.gpu`` (``__threadfence``: split-K's
  release and acquire);
* ``bulk.wait_group.read`` / ``bulk.wait_group`` (groups left), ``bulk.commit_group``,
  ``bulk.store`` (the TMA store the waits order);
* ``counter.arrive`` / ``counter.acquire`` / ``counter.reset`` (split-K's tile counter);
* ``op``: a body op of a program stretch (a TMA load, a wgmma group, the softmax): the use each
  wait and fence orders, so a wait moved past its use is a changed skeleton.

A writer whose copies several warps issue (``Plan.shared_issue``; its program on the first lane
of each, the frame's ``if (lane == 0 && wtid < 32 N)``) adds to each of its words who runs it:
``lead`` for a statement under the warp-0 test (the steps ``lead_only`` picks), ``each of N
warps`` for any other, N read from the frame's test; so a lead test dropped or added, or a
warp count that is not the record's, is a changed skeleton.

Sections are matched whole, a loop as one: the plan's prologue iterations, its kernel (the loop
over K tiles, once), its epilogue iterations, and the ``once`` (the steps of an output tile with
no K tile, :meth:`AgentProgram.placed` at 0 tiles), ``after`` (a tile split's output-tile turns
after the last tile), ``finish``, ``store`` and ``drain`` sections, against the regions the
section marks delimit (a synchronization statement outside them fails as well).  The words
are compared in order, a role's whole program at once; the first difference is reported with
its section and its position there.  The consumers share one region: it is read once per
consumer index, keeping only the branches on ``consumer == i`` that index takes.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import attrs

from pipeline_core.plugin_api import (CLUSTER_RELAY, AgentProgram, CompiledSchedule,
                                      ProgramError, Step, StepKind, lead_only)

# the named barrier split-K's finish syncs the consumer warp groups on
from pipeline_core_nvidia_h100.emit_wgmma import SPLIT_BARRIER
from pipeline_core_nvidia_h100.skeleton import ROLE_MARK, SECTION_MARK

#: steps that move data or hint and order nothing: no word of the skeleton
_NO_SYNC = (StepKind.HINT, StepKind.STAGE_WRITE, StepKind.SLICE_STORE, StepKind.SLICE_READ)
#: sections whose lines are one step each (a stretch of ``skeleton.agent_stretches``, or the
#: steps of an output tile with no K tile): there, a line that is no synchronization is an op
_STEP_SECTIONS = ("prologue", "kernel", "epilogue", "once")

Arg = int | str
#: the section of a synchronization statement that no section mark covers
OUTSIDE = "outside every section"


@attrs.frozen(kw_only=True)
class Sync:
    """One word of the skeleton: what it is and its arguments (see the module)."""

    what: str
    args: tuple[Arg, ...] = ()

    def __str__(self) -> str:
        return f"{self.what}({', '.join(map(str, self.args))})" if self.args else self.what


@attrs.frozen(kw_only=True)
class Expected:
    """A word the plan calls for: its section and the step it comes from."""

    section: str
    sync: Sync
    step: Step


@attrs.frozen(kw_only=True)
class Found:
    """A word the kernel has: its section and the source line (1-based) it was read from."""

    section: str
    sync: Sync
    line: int
    text: str


@attrs.frozen(kw_only=True)
class Mismatch:
    """The first place where a role's kernel skeleton leaves the plan's."""

    role: str
    section: str
    position: int
    expected: Expected | None
    found: Found | None

    def __str__(self) -> str:
        want = (f"plan step {_describe(self.expected.step)} -> {self.expected.sync} "
                f"[{self.expected.section}]" if self.expected else "no plan step")
        got = (f"kernel line {self.found.line}: {self.found.text.strip()!r} -> "
               f"{self.found.sync} [{self.found.section}]" if self.found
               else "no kernel statement")
        return (f"role {self.role}, section {self.section}, position {self.position}: "
                f"expected {want}, found {got}")


class SkeletonMismatch(AssertionError):
    """An emitted kernel whose synchronization is not the plan's (one line per role)."""


def _describe(s: Step) -> str:
    fields = [f"{k}={v}" for k, v in (("channel", s.channel), ("lag", s.lag),
                                      ("value", s.value), ("barrier", s.barrier),
                                      ("phase_offset", s.phase_offset), ("once", s.once),
                                      ("output_lag", s.output_lag), ("peer", s.peer),
                                      ("scope", s.scope))
              if v not in ("", 0, -1, False)]
    return f"{s.kind.value}({', '.join(fields)})"


# --- the plan's skeleton -----------------------------------------------------------------------

def _position(s: Step) -> Arg:
    return "once" if s.once else s.lag


def step_syncs(s: Step, consumers: int, single_issuer: bool) -> tuple[Sync, ...]:
    """The words one plan step lowers to (``consumers``: the consumer warp groups, whose threads
    split-K's counter steps sync on; ``single_issuer``: the agent's program runs on one thread,
    else each warp arrives once).  Data steps (a stage write, a slice's stores and reads) and
    hints have none: they order nothing; a step of any other kind without words is refused, so
    a new kind of step cannot pass unchecked."""
    pos = _position(s)
    k = s.kind
    who = "thread" if single_issuer else "warp"
    turn = (s.output_lag,) if s.output_lag else ()
    if k == StepKind.PHASE_WAIT:
        what = "mbarrier.wait.cluster" if s.scope == "cluster" else "mbarrier.wait"
        return (Sync(what=what, args=(s.channel, pos, s.phase_offset)),)
    if k == StepKind.EXPECT_TX:
        return (Sync(what="mbarrier.expect_tx", args=(s.channel, pos, s.value)),)
    if k == StepKind.ARRIVE:
        if s.peer:
            return (Sync(what="mbarrier.arrive.peer",
                         args=(s.channel, pos, s.peer, "cluster" if s.scope == "cluster"
                               else "cta", who)),)
        return (Sync(what="mbarrier.arrive", args=(s.channel, pos, who)),)
    if k == StepKind.ASYNC_ARRIVE:
        return (Sync(what="mbarrier.arrive.async",
                     args=(s.channel, pos, "thread" if single_issuer else "every thread")),)
    split = Sync(what="bar.sync", args=(SPLIT_BARRIER, 128 * consumers))
    table: dict[StepKind, tuple[Sync, ...]] = {
        StepKind.OP: (Sync(what="op"),),
        StepKind.FENCE: (Sync(what="wgmma.fence"),),
        StepKind.COMMIT: (Sync(what="wgmma.commit_group"),),
        StepKind.COUNTER_WAIT: (Sync(what="wgmma.wait_group", args=(s.value,)),),
        StepKind.NAMED_SYNC: (Sync(what="bar.sync", args=(s.barrier, s.value, *turn)),),
        StepKind.NAMED_ARRIVE: (Sync(what="bar.arrive", args=(s.barrier, s.value, *turn)),),
        StepKind.STORE_WAIT: (Sync(what="bulk.wait_group.read", args=(s.value,)),),
        StepKind.PROXY_FENCE: (Sync(what="fence.proxy.async"),),
        StepKind.DESCRIPTOR_ACQUIRE: (Sync(what="fence.proxy.tensormap.acquire"),),
        StepKind.STORE_ISSUE: (Sync(what="bulk.store"),),
        StepKind.STORE_COMMIT: (Sync(what="bulk.commit_group"),),
        StepKind.STORE_DRAIN: (Sync(what="bulk.wait_group", args=(s.value,)),),
        StepKind.RELEASE_FENCE: (Sync(what="fence.gpu"),),
        StepKind.COUNT_ARRIVE: (split, Sync(what="counter.arrive"), split),
        StepKind.COUNT_ACQUIRE: (Sync(what="counter.acquire"), Sync(what="fence.gpu")),
        StepKind.COUNT_RESET: (split, Sync(what="counter.reset")),
    }
    if k in _NO_SYNC:
        return ()
    if k not in table:
        raise ProgramError(f"sync skeleton: no words for step {_describe(s)} (a kind the "
                           "warp-specialized kernels do not write)")
    return table[k]


def _sections(p: AgentProgram, *, once: bool, split: bool) -> Iterator[tuple[str, Sequence[Step]]]:
    """A program's sections in the order the emitters lay them out."""
    if once:
        yield "once", [x.step for x in p.placed(0)]
    for i, steps in enumerate(p.prologue):
        yield f"prologue {i}", steps
    yield "kernel", p.kernel
    for j, steps in enumerate(p.epilogue):
        yield f"epilogue {j}", steps
    if split:  # the output-tile turns the next consumer takes after the CTA's last tile
        yield "after", [s for it in (*p.prologue, p.kernel) for s in it if s.output_lag]
    yield "finish", p.finish
    yield "store", p.store
    yield "drain", p.drain


def plan_skeleton(compiled: CompiledSchedule, p: AgentProgram, *,
                  once: bool = False) -> list[Expected]:
    """The skeleton program ``p`` of the compiled plan calls for.  ``once``: the emitter writes the
    steps of an output tile with no K tile as their own branch (the attention kernel's)."""
    plan = compiled.plan
    consumers = sum(1 for q in plan.programs[1:] if q.name != CLUSTER_RELAY)
    split = plan.split is not None and p.name in plan.split.agents
    shared = plan.shared_issue if plan.shared_issue is not None \
        and plan.shared_issue.agent == p.name else None

    def who(s: Step, w: Sync) -> Sync:
        """A shared issue's word with the warps that run it (the lead's, or every issuer's)."""
        if shared is None:
            return w
        run = LEAD if lead_only(shared, plan.rings, s) else _each(shared.warps)
        return attrs.evolve(w, args=(*w.args, run))

    return [Expected(section=sec, sync=who(s, w), step=s)
            for sec, steps in _sections(p, once=once, split=split)
            for s in steps for w in step_syncs(s, consumers, p.role.issuers == 1)]


#: a shared issue's word run by its lead warp alone (``lead_only``; the kernel's warp-0 test)
LEAD = "lead"


def _each(warps: int) -> str:
    """A shared issue's word that each of its ``warps`` issuing warps runs."""
    return f"each of {warps} warps"


# --- the kernel's skeleton ---------------------------------------------------------------------

_POS = r"(?:\(rb \+ t(?: - (?P<lag>\d+))?\)|(?P<once>\bo\b))"
_PHASE = r"\+ \((?P<phase>-?\d+)\)\) & 1\)"
#: each word's statement pattern (no two overlap; a line may hold several statements)
_WORDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((w, re.compile(p)) for w, p in (
    ("mbarrier.wait.cluster", rf"mbar_wait_cluster\((?P<ring>\w+)_bar\(\({_POS}.*?{_PHASE}"),
    ("mbarrier.wait", rf"mbar_wait(?:_bounded)?\((?P<ring>\w+)_bar\(\({_POS}.*?{_PHASE}"),
    ("mbarrier.expect_tx", rf"mbar_expect_tx\((?P<ring>\w+)_bar\(\({_POS}.*, (?P<n>\d+)u\);"),
    ("mbarrier.arrive.peer", rf"mbar_arrive_peer(?P<cta>_cta)?\((?P<ring>\w+)_bar\(\({_POS}"
                             r".*\(crank \+ (?P<peer>\d+)\)"),
    ("mbarrier.arrive", rf"mbar_arrive\((?P<ring>\w+)_bar\(\({_POS}"),
    ("mbarrier.arrive.async", rf"\bcp_async_arrive\((?P<ring>\w+)_bar\(\({_POS}"),
    ("bar.sync", r"\"bar\.sync (?P<id>\d+|%0), (?P<n>\d+);"),
    ("bar.arrive", r"\"bar\.arrive (?P<id>\d+|%0), (?P<n>\d+);"),
    ("wgmma.fence", r"\bwgmma_fence\(\);"),
    ("wgmma.commit_group", r"\bwgmma_commit\(\);"),
    ("wgmma.wait_group", r"\bwgmma_wait<(?P<n>\d+)>\(\);"),
    ("fence.proxy.async", r"\bfence_proxy_async_shared\(\);"),
    ("fence.proxy.tensormap.acquire", r"\bacquire_maps\("),
    ("fence.gpu", r"\b__threadfence\(\);"),
    ("bulk.wait_group.read", r"\bbulk_wait_read<(?P<n>\d+)>\(\);"),
    ("bulk.wait_group", r"\bbulk_wait<(?P<n>\d+)>\(\);"),
    ("bulk.commit_group", r"\bbulk_commit\(\);"),
    ("bulk.store", r"\btma_store_[23]d\("),
    ("counter.arrive", r"\batomicAdd\(counters"),
    ("counter.acquire", r"if \(!split_last\) continue;"),
    # (stream-K: its own tiles'; decode: its splits' output tile's)
    ("counter.reset", r"\bcounters\[(?:sk_|out_)?tile\] = 0u;"),
))
#: lines of a step section that are its frame, not a step: braces, the loop head, ``t``'s binding
_FRAME = re.compile(r"^(\{.*|\}.*|for \(int t = .*|const int t = .*|#pragma.*|//.*|)$")
_BRANCH = re.compile(r"^(?P<ind>\s*)(?:\} else )?if \(consumer == (?P<i>\d+)\) \{$")
_INLINE = re.compile(r"if \(consumer == (?P<i>\d+)\) \{ (?P<code>.*?) \}(?= else |$)")
_STORE_BAR = re.compile(r"const int store_bar = (?P<expr>[^;]+);")
#: the guard of a turn that fills an earlier output tile's generation (emit_wgmma's
#: ``_first_tiles_guard`` and ``_after_tiles``)
_TURN = re.compile(r"tile >= \(int\)blockIdx\.x \+ (\d+) \* \(int\)gridDim\.x")
#: one arrival per warp: the arrive is lane 0's
_PER_WARP = "if (lane == 0) "
#: the producer's program on its warp group's thread 0 alone (``kit.frame``); without it, on
#: every thread of the warp group
_THREAD_ZERO = "if (wtid == 0) {"
#: the producer's program on the first lane of each of its issuing warps (a shared issue,
#: ``kit.frame``'s ``producer_warps``), and a statement of it the lead warp alone runs
_SHARED_HEAD = re.compile(r"^if \(lane == 0 && wtid < (?P<threads>\d+)\) \{")
_LEAD_TEST = "if (wtid == 0) "


def _word(what: str, m: re.Match[str], store_bar: int | None, alone: bool = True) -> Sync:
    g = m.groupdict()
    before = m.string[:m.start()]
    who = "warp" if before.endswith(_PER_WARP) else "thread"
    pos: Arg = "once" if g.get("once") else int(g.get("lag") or 0)
    if what.startswith("mbarrier.wait"):
        return Sync(what=what, args=(g["ring"], pos, int(g["phase"])))
    if what == "mbarrier.expect_tx":
        return Sync(what=what, args=(g["ring"], pos, int(g["n"])))
    if what == "mbarrier.arrive.peer":
        return Sync(what=what, args=(g["ring"], pos, int(g["peer"]),
                                     "cta" if g["cta"] else "cluster", who))
    if what == "mbarrier.arrive":
        return Sync(what=what, args=(g["ring"], pos, who))
    if what == "mbarrier.arrive.async":
        return Sync(what=what, args=(g["ring"], pos, "thread" if alone else "every thread"))
    if what in ("bar.sync", "bar.arrive"):
        bar: Arg = store_bar if g["id"] == "%0" and store_bar is not None else g["id"]
        turn = _TURN.search(before)
        return Sync(what=what, args=(int(bar), int(g["n"]), *([int(turn[1])] if turn else [])))
    return Sync(what=what, args=(int(g["n"]),) if g.get("n") else ())


def _store_bar(expr: str, consumer: int) -> int:
    """``consumer == 0 ? 3 : consumer == 1 ? 4 : 5`` (the TMA store's barrier) at ``consumer``."""
    *arms, last = expr.split(" : ")
    for arm in arms:
        m = re.fullmatch(r"consumer == (\d+) \? (\d+)", arm.strip())
        if m and int(m[1]) == consumer:
            return int(m[2])
    return int(last)


def _project(lines: Sequence[tuple[int, str]], consumer: int) -> list[tuple[int, str]]:
    """The consumers' region as consumer ``consumer`` runs it: of each ``if (consumer == i)``
    block (``skeleton.consumer_branches``) and each one-line branch
    (``skeleton.merged_consumer_lines``), only its own."""
    out: list[tuple[int, str]] = []
    inside: tuple[str, int] | None = None  # the open block's indent and consumer index
    for no, text in lines:
        b = _BRANCH.match(text)
        if b:
            inside = (b["ind"], int(b["i"]))
            continue
        if inside is not None and text == inside[0] + "}":
            inside = None
            continue
        if inside is not None and inside[1] != consumer:
            continue
        arms = _INLINE.findall(text)
        if arms:
            text = next((code for i, code in arms if int(i) == consumer), "")
        out.append((no, text))
    return out


def kernel_skeleton(source: str, role: str, consumer: int = 0) -> list[Found]:
    """The skeleton of ``role``'s region of an emitted kernel (``producer``, ``relay``,
    ``consumers``; for the consumers, as consumer index ``consumer`` runs it).  A
    synchronization statement outside every section (in the family's code around them, which
    the plan has none in) is a word of section :data:`OUTSIDE`, so it fails the check too; ops
    count only inside the step sections."""
    region: list[tuple[int, str]] = []
    current: str | None = None
    for no, text in enumerate(source.split("\n"), 1):
        stripped = text.strip()
        if stripped.startswith(ROLE_MARK + " "):
            current = stripped[len(ROLE_MARK) + 1:]
        elif current == role:
            region.append((no, text))
    if role == "consumers":
        region = _project(region, consumer)
    found: list[Found] = []
    section: str | None = None
    store_bar: int | None = None
    alone = False  # the region's program runs on thread 0 of its warp group alone
    warps = 0  # a shared issue's warps: the program runs on the first lane of each
    for no, text in region:
        stripped = text.strip()
        alone = alone or (section is None and stripped == _THREAD_ZERO)
        head = _SHARED_HEAD.match(stripped) if section is None else None
        if head:
            alone, warps = True, int(head["threads"]) // 32
        if stripped.startswith(SECTION_MARK + " "):
            name = stripped[len(SECTION_MARK) + 1:]
            section = None if name == "end" else name
            continue
        bar = _STORE_BAR.search(stripped)
        if bar:
            store_bar = _store_bar(bar["expr"], consumer)
        words = [word for _, word in sorted(((m.start(), _word(w, m, store_bar, alone))
                                             for w, p in _WORDS for m in p.finditer(stripped)),
                                            key=lambda x: x[0])]
        if (not words and section is not None and section.split()[0] in _STEP_SECTIONS
                and not _FRAME.match(stripped)):
            words = [Sync(what="op")]
        if warps:  # who runs it: the lead warp alone, or each issuing warp
            run = LEAD if stripped.startswith(_LEAD_TEST) else _each(warps)
            words = [attrs.evolve(w, args=(*w.args, run)) for w in words]
        found += [Found(section=section or OUTSIDE, sync=word, line=no, text=text)
                  for word in words]
    return found


# --- the check ---------------------------------------------------------------------------------

def _region(p: AgentProgram, first: str) -> str:
    return "relay" if p.name == CLUSTER_RELAY else "producer" if p.name == first else "consumers"


def skeleton_mismatches(compiled: CompiledSchedule, source: str, *,
                        once: bool = False) -> list[Mismatch]:
    """Per agent of the compiled plan, the first place its skeleton in ``source`` leaves the plan's
    (none: the kernel synchronizes exactly as the plan that was proven).  The first agent is
    the producer; the relay (a cluster's) has its own region; every other agent is a consumer,
    numbered in plan order as the kernel's consumer index."""
    out: list[Mismatch] = []
    plan = compiled.plan
    first = plan.programs[0].name
    consumers = [p for p in plan.programs if _region(p, first) == "consumers"]
    for p in plan.programs:
        region = _region(p, first)
        index = consumers.index(p) if region == "consumers" else 0
        want = plan_skeleton(compiled, p, once=once)
        got = kernel_skeleton(source, region, index)
        for n in range(max(len(want), len(got))):
            e = want[n] if n < len(want) else None
            f = got[n] if n < len(got) else None
            if e and f and (e.section, e.sync) == (f.section, f.sync):
                continue
            section = e.section if e else f.section if f else ""
            position = sum(1 for x in (want if e else got)[:n] if x.section == section)
            out.append(Mismatch(role=p.name, section=section, position=position, expected=e,
                                found=f))
            break
    return out


def check_skeleton(compiled: CompiledSchedule, source: str, *, once: bool = False,
                   label: str = "") -> None:
    """Raise :class:`SkeletonMismatch` naming, per role, the first statement of ``source`` that
    is not the plan's step there (see :func:`skeleton_mismatches`)."""
    bad = skeleton_mismatches(compiled, source, once=once)
    if bad:
        head = f"{label}: " if label else ""
        raise SkeletonMismatch(head + "the kernel's synchronization is not the plan's:\n"
                               + "\n".join(map(str, bad)))
