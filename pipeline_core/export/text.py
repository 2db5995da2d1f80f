"""A text view for people: numbered phase listings, wait/barrier summaries, block layout."""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import attrs

from pipeline_core.compiled import CompiledSchedule
from pipeline_core.execution import ExecutionModel
from pipeline_core.export.notation import channels_by_tag, isa_form, op_text
from pipeline_core.ops import Entry
from pipeline_core.sync.model import SyncModel
from pipeline_core.sync.resolve import declared_sync

if TYPE_CHECKING:
    from pipeline_core.plan import Plan, Region

#: entries per line of a compact listing outside the kernel's blocks
COMPACT_PER_LINE = 8


@attrs.frozen
class WaitSummary:
    """Synchronisation cost of one phase, in the target's words.

    Waits per channel (adjacent waits on different channels fold into one
    instruction where the target has a combined wait), barriers, and fences
    (the target's operand-less scheduling hints).
    """

    waits: tuple[tuple[str, int], ...] = ()  #: (wait name, count) per channel
    coalesced: int = 0
    combined_wait: str = ""
    barriers: int = 0
    barrier_name: str = "barrier"
    fences: tuple[tuple[str, int], ...] = ()
    known: bool = True  #: False: the target declares no sync model

    @classmethod
    def of(cls, entries: tuple[Entry, ...], sync: SyncModel | None = None) -> "WaitSummary":
        if sync is None:
            return cls(known=False)
        wait_channel = {c.wait_tag: c.name for c in sync.channels}
        barrier_tags = {b.tag for b in sync.barriers}
        fence_tags = [t for t in sync.hint_tags
                      if t != sync.priority_tag and t not in sync.hint_formats]
        waits = dict.fromkeys(c.name for c in sync.channels)
        counts = {name: 0 for name in waits}
        fences = {t: 0 for t in fence_tags}
        coalesced = barriers = 0
        for i, e in enumerate(entries):
            tag = e.op.tag
            if tag in wait_channel:
                counts[wait_channel[tag]] += 1
                nxt = entries[i + 1].op.tag if i + 1 < len(entries) else None
                if sync.combined_wait and nxt in wait_channel and wait_channel[nxt] != wait_channel[tag] \
                        and (i == 0 or entries[i - 1].op.tag not in wait_channel):
                    coalesced += 1
            elif tag in barrier_tags:
                barriers += 1
            elif tag in fences:
                fences[tag] += 1
        return cls(tuple((sync.channel(n).wait_name.lower(), counts[n]) for n in counts), coalesced,
                   sync.combined_wait, barriers, sync.barrier.name,
                   tuple((sync.hint_tags[t].lower(), n) for t, n in fences.items()))

    def __str__(self) -> str:
        if not self.known:
            return "(the target declares no sync model)"
        text = ", ".join(f"{n} {name}" for name, n in self.waits)
        if self.combined_wait:
            text += f" ({self.coalesced} coalesce into one {self.combined_wait})"
        text += f", {self.barriers} {self.barrier_name}"
        text += "".join(f", {n} {name}" for name, n in self.fences)
        return text


def describe_op(o, names: Mapping[int, str], sync: SyncModel | None = None,
                channel_of: Mapping[int, int] | None = None) -> str:
    """One op in the shared notation (:mod:`pipeline_core.export.notation`)."""
    return op_text(o, names, sync, channel_of)


def phase_listing(label: str, entries: tuple[Entry, ...], names, marks=None,
                  sync: SyncModel | None = None, channel_of: Mapping[int, int] | None = None,
                  notes: Mapping[int, str] | None = None) -> list[str]:
    """One numbered line per entry; ``marks`` point at positions, ``notes`` flag redundant syncs."""
    marks = marks or {}
    notes = notes or {}
    lines = [f"{label} ({len(entries)} entries)"]
    width = len(str(max(len(entries) - 1, 0)))
    for i, e in enumerate(entries):
        flag = "  prefetch" if e.is_prefetch else ""
        mark = marks.get(i, "")
        note = f"  [{notes[i]}]" if i in notes else ""
        lines.append(f"  {i:>{width}}  {describe_op(e.op, names, sync, channel_of):<34}"
                     f"{flag}{mark}{note}".rstrip())
    lines.append(f"  sync: {WaitSummary.of(entries, sync)}")
    return lines


def compact_listing(label: str, entries: tuple[Entry, ...], names, sync: SyncModel | None,
                    channel_of: Mapping[int, int] | None, notes: Mapping[int, str],
                    rows: list[tuple[int, int, str]] | None = None) -> list[str]:
    """Several entries per line: ``rows`` (start, end, title) split the kernel by block,
    else COMPACT_PER_LINE entries a line; ``*`` marks a prefetch, ``!`` a redundant sync."""
    if rows is None:
        rows = [(i, min(i + COMPACT_PER_LINE, len(entries)), "")
                for i in range(0, len(entries), COMPACT_PER_LINE)]
    lines = [f"{label} ({len(entries)} entries; * prefetch, ! redundant sync)"]
    width = len(str(max(len(entries) - 1, 0)))
    for start, end, title in rows:
        ops = [describe_op(entries[i].op, names, sync, channel_of)
               + ("*" if entries[i].is_prefetch else "") + ("!" if i in notes else "")
               for i in range(start, end)]
        head = f"  {start:>{width}}-{end - 1:<{width}}" + (f" {title}" if title else "")
        lines.append(f"{head}: {'; '.join(ops)}")
    lines.append(f"  sync: {WaitSummary.of(entries, sync)}")
    return lines


def _per_iteration(c: CompiledSchedule, sync: SyncModel | None) -> str:
    if sync is None:
        return "waits and barriers per iteration: unknown (the target declares no sync model)"
    wait_tags = set(sync.wait_tags)
    barrier_tags = {b.tag for b in sync.barriers}
    waits = sum(1 for e in c.kernel if e.op.tag in wait_tags)
    barriers = sum(1 for e in c.kernel if e.op.tag in barrier_tags)
    return f"per kernel iteration: {waits} waits, {barriers} barriers, {len(c.kernel)} entries"


def _timing_line(c: CompiledSchedule) -> str:
    """Cycles per iteration of the emitted kernel on the timing model (a line saying why not)."""
    from pipeline_core.errors import PipelineError
    from pipeline_core.limits import ANALYZE_ITERATIONS, default_iterations
    from pipeline_core.simulate import model_run

    try:
        s = model_run(c, default_iterations(len(c.kernel), ANALYZE_ITERATIONS)).summary()
    except (PipelineError, ValueError) as exc:
        return f"timing model: not run ({exc})"
    return (f"timing model: {s.steady_state_cycles:.1f} cycles/iteration in the steady state, "
            f"MMA bound {s.mma_bound_cycles} (ratio {s.ratio_to_mma_bound:.2f})")


def header(c: CompiledSchedule, sync: SyncModel | None) -> list[str]:
    """Target, warps, cycles per iteration and sync counts per iteration: the first lines."""
    execution = c.plan.execution
    groups = execution.groups if execution is not None else 1
    warps = execution.warps_per_group if execution is not None else 1
    lowering = c.plan.description
    return [
        f"schedule {c.schedule_name} on {c.target_name or '(no target)'}"
        + (f" (sync model {sync.name})" if sync is not None else "")
        + f": body {len(c.body)} ops, {len(c.edges)} edges, {lowering}",
        f"warps: {groups} warp group(s) x {warps} warp(s)",
        _timing_line(c),
        _per_iteration(c, sync),
    ]


def _region_rows(regions: "tuple[Region, ...]", kernel_len: int
                 ) -> list[tuple[int, int, str]] | None:
    """The compact listing's rows for the kernel's named regions (and what follows them)."""
    if not regions:
        return None
    rows = [(r.start, r.end, r.short) for r in regions]
    if rows[-1][1] < kernel_len:
        rows.append((rows[-1][1], kernel_len, "tail"))
    return rows


def render(c: CompiledSchedule, *, kernel_only: bool = False, compact: bool = False,
           host: object = None) -> str:
    """The text view: header, phases (or the kernel alone), block layout unless compact.

    Syncs the checker shows redundant are flagged (:mod:`pipeline_core.export.redundant`).
    """
    from pipeline_core.export.redundant import redundant_syncs

    plan = c.plan
    if not plan.lockstep:  # one program per agent: a section each (pipeline_core.agents)
        return _agents_listing(c, plan)
    sync = declared_sync(c)
    names = {**(sync.tag_names() if sync is not None else {}), **c.tag_names}
    channel_of = channels_by_tag(c.body)
    redundant = redundant_syncs(c, sync, host)
    notes = {phase: {i: text for (ph, i), text in redundant.items() if ph == phase}
             for phase in ("prologue", "kernel", "epilogue")}
    out = header(c, sync)
    out += plan.details.text_notes(plan, sync)
    regions = plan.details.regions(plan, sync)
    stagger = c.warp_stagger_index
    out.append(f"warp stagger: group 0 runs {stagger} prologue entries before group 1 joins"
               if ExecutionModel.is_staggered(stagger, len(c.prologue))
               else "warp stagger: none (one warp group)")
    flagged = sum(len(v) for v in notes.values())
    if flagged:
        out.append(f"redundant syncs (proven by the checker's run): {flagged}, flagged below")
    out.append("")
    if compact:
        if not kernel_only:
            out += compact_listing("PROLOGUE", c.prologue, names, sync, channel_of, notes["prologue"])
            out.append("")
        out += compact_listing("KERNEL", c.kernel, names, sync, channel_of, notes["kernel"],
                               _region_rows(regions, len(c.kernel)))
        if not kernel_only:
            out.append("")
            out += compact_listing("EPILOGUE", c.epilogue, names, sync, channel_of, notes["epilogue"])
        return "\n".join(out) + "\n"
    if not kernel_only:
        marks = {stagger: "  <- warp group 1 joins here"} if stagger < len(c.prologue) else {}
        out += phase_listing("PROLOGUE", c.prologue, names, marks, sync, channel_of, notes["prologue"])
        out.append("")
    kmarks = {r.start: f"  <- {r.label}" + (f" ({r.heading})" if r.heading else "")
              for r in regions}
    out += phase_listing("KERNEL", c.kernel, names, kmarks, sync, channel_of, notes["kernel"])
    if not kernel_only:
        out.append("")
        out += phase_listing("EPILOGUE", c.epilogue, names, sync=sync, channel_of=channel_of,
                             notes=notes["epilogue"])
        layout = plan.details.layout(plan, c.tag_names, sync)
        if layout:
            out.append("")
            out += layout
    return "\n".join(out) + "\n"


def _agents_listing(compiled: CompiledSchedule, plan: "Plan") -> str:
    """The text view of an agents plan: the rings, the proof, then one section per agent."""
    from pipeline_core.agents.views import is_after_loop, program_sections

    sync = compiled.target_profile.sync if compiled.target_profile is not None else None
    names = {**(sync.tag_names() if sync is not None else {}), **compiled.tag_names}
    body = compiled.body
    out = [f"schedule {compiled.schedule_name} on {compiled.target_name or '(own target)'}"
           + (f" (sync model {sync.name})" if sync is not None else "")
           + f": agents lowering, {len(plan.programs)} agents, {plan.stages} ring stages, "
             f"at least {plan.min_tiles} K tile{'s' if plan.min_tiles > 1 else ''}",
           "t is the loop index over K tiles; a step with lag L serves tile t-L", ""]
    out.append("RINGS")
    for r in plan.rings:
        tx = f", {r.tx_bytes} bytes per phase" if r.tx_bytes else ""
        out.append(f"  {r.name}[{r.stages}] ({r.kind}): {r.arrivals} arrival"
                   f"{'s' if r.arrivals > 1 else ''}{tx}; signalled by "
                   f"{', '.join(r.signallers)}; waited on by {', '.join(r.waiters)}")
    if plan.orders:  # docs/guide/agents.md, "Named barriers"
        out.append("ORDERS")
        for o in plan.orders:
            turns = ", then ".join(f"{t.agent} (ops {', '.join(map(str, t.ops))})"
                                   for t in o.turns)
            bars = ", ".join(f"{b} ({n} threads)" for b, n in zip(o.barriers, o.counts))
            if o.scope == "join":
                # a part of no op meets first in its K tile
                parts = ", ".join(f"{t.agent} after ops {', '.join(map(str, t.ops))}" if t.ops
                                  else f"{t.agent} first" for t in o.turns)
                out.append(f"  {o.name}: each K tile a join of {parts}; named barrier {bars}")
                continue
            each = "each output tile" if o.scope == "output_tile" else "each K tile"
            out.append(f"  {o.name}: {each} {turns}; named barriers {bars}")
    if plan.split is not None:  # docs/guide/agents.md, "Tile splits"
        out.append("SPLIT")
        out.append(f"  output tiles round-robin over {', '.join(plan.split.agents)}: output tile "
                   f"o runs on agent o % {len(plan.split.agents)}; the ring positions count "
                   "every earlier output tile's K tiles")
    if plan.reduction is not None:  # docs/guide/agents.md, "Cross-CTA reductions"
        out.append("REDUCTION")
        out.append(f"  {plan.reduction.name}: the CTAs of one output tile hand their partial "
                   f"results to the last to arrive; steps in the FINISH of "
                   f"{', '.join(plan.reduction.agents)}")
    if plan.store is not None:  # docs/guide/agents.md, "Bulk stores"
        st = plan.store
        out.append("STORE")
        out.append(f"  {st.name}: {', '.join(st.agents)} store their results through "
                   f"{st.buffers} staging buffers each (named barriers "
                   f"{', '.join(map(str, st.barriers))}); steps in their STORE and DRAIN")
        if st.optional:
            out.append(f"  an output tile may skip its {st.subtiles} staged sub-tiles (stored "
                       "another way, chosen at run time)")
    proof = compiled.proof
    if proof is not None:
        v = proof.verdict
        out.append("")
        if v is None:
            out.append(f"proof: UNPROVEN: {proof.unprovable}")
        elif v.safe:
            out.append(f"proof: SAFE over every timing ({v.assumptions_text()})")
        else:
            first = v.first
            assert first is not None
            out.append(f"proof: UNSAFE ({len(v.distinct())} distinct hazards, emitted with "
                       f"--allow-unsafe): {first.kind.value} at {first.site.text()}: "
                       f"{first.message}")
    for prog in plan.programs:
        role = prog.role
        regs = f", setmaxnreg {role.registers}" if role.registers else ""
        out += ["", f"AGENT {prog.name} ({role.warps} warps, {role.issuers} issuing "
                    f"thread{'s' if role.issuers > 1 else ''}{regs}; body ops "
                    f"{', '.join(map(str, role.ops))})"]
        for section, it, steps in program_sections(prog):
            label = section.upper() if section == "kernel" else f"{section.upper()} t={it}" \
                if section == "prologue" else f"{section.upper()} t=KT+{it}"
            if section == "kernel":
                label = f"KERNEL t={len(prog.prologue)}..KT-1"
            out.append(f"  {label}")
            for pos, s in enumerate(steps):
                after = is_after_loop(prog, section, it, pos)
                out.append(f"    [{pos}] {isa_form(s, plan, body, names, sync, after_loop=after)}")
        if prog.finish:
            out.append("  FINISH (once per output tile, after the loop)")
            out += [f"    [{pos}] {isa_form(s, plan, body, names, sync, after_loop=True)}"
                    for pos, s in enumerate(prog.finish)]
        for title, steps in (("STORE (once per staged sub-tile, after the finish)", prog.store),
                             ("DRAIN (once, after the last output tile)", prog.drain)):
            if steps:
                out.append(f"  {title}")
                out += [f"    [{pos}] {isa_form(s, plan, body, names, sync, after_loop=True)}"
                        for pos, s in enumerate(steps)]
    return "\n".join(out) + "\n"
