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
    from pipeline_core.agents.model import AgentPlan

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


def _kept_before(c: CompiledSchedule, sync: SyncModel | None) -> tuple[int, ...] | None:
    """Template kernel position -> emitted kernel position (the target's binding drops the
    entries it has no instruction for, pipeline_core/program/binding.py); None: no blocks."""
    from pipeline_core.ops import Phase
    from pipeline_core.program.binding import lowering_for

    program = c.program
    if program is None:
        return None
    kept = lowering_for(sync).kept_before(program.expand(Phase.KERNEL))
    return kept if kept[-1] == len(c.kernel) else None


def block_ranges(c: CompiledSchedule, sync: SyncModel | None) -> list[tuple[int, int]]:
    """[start, end) of each program block in the emitted kernel; [] when it has no blocks."""
    program = c.program
    kept = _kept_before(c, sync)
    if program is None or kept is None:
        return []
    return [(kept[start], kept[start + program.block_entry_count(i)])
            for i, start in enumerate(program.block_starts())]


def block_layout(c: CompiledSchedule, sync: SyncModel | None = None) -> list[str]:
    program = c.program
    ranges = block_ranges(c, sync)
    if program is None or not ranges:  # single buffer: the kernel is not built from blocks
        return []
    names = c.tag_names
    bph = c.config.blocks_per_partition
    lines = ["BLOCKS (per partition; kernel entry range, then contents)"]
    for i, b in enumerate(program.blocks):
        part, pos = divmod(i, bph)
        if pos == 0:
            lines.append(f"  partition {part}")
        start, end = ranges[i][0], ranges[i][1] - 1
        frags = [describe_op(o, names, sync) for o in (b.pre_op_0, b.pre_op_1) if o.is_present]
        loads = []
        for o, pf in ((b.global_load, b.global_load_prefetch), (b.global_load_1, b.global_load_1_prefetch)):
            if o.is_present:
                kind = "prefetch" if o.stage == part else "completion"
                loads.append(f"{describe_op(o, names, sync)} ({kind})")
        waits = [describe_op(o, names, sync) for o in (b.entry_wait, b.entry_wait_lgkm, b.pre_sync)
                 if o.is_present]
        lines.append(f"    block {i} [{start}-{end}]  mma {describe_op(b.mma, names, sync)}")
        if frags:
            lines.append(f"      frags: {', '.join(frags)}")
        if loads:
            lines.append(f"      loads: {', '.join(loads)}")
        if waits:
            lines.append(f"      waits: {', '.join(waits)}")
        if b.drain_lgkm_before_loads:
            lines.append("      drains lgkm before its loads")
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


def _emitted_knob_waits(c: CompiledSchedule, sync: SyncModel | None) -> str:
    """The waits the ``wait_lgkm_first`` / ``wait_vm_last`` knobs place (the first block's
    fragment wait, the last block of partition 0's global wait) as the kernel emits them, named
    after the target's channel: ``wait_<channel>_first=N wait_<channel>_last=N``
    (docs/guide/concepts.md, "Reading the views").  A schedule's explicit block is its own
    list, so there the knob's value stands."""
    kp = c.kernel_program
    kept = _kept_before(c, sync)
    if kp is None or kept is None:
        return "none"
    program = kp.program
    binding = sync.block_binding if sync is not None else None
    words = [("first", 0, binding.fragment_channel if binding else "lgkm", kp.wait_lgkm_first),
             ("last", c.config.blocks_per_partition - 1,
              binding.global_channel if binding else "vm", kp.wait_vm_last)]
    starts = program.block_starts()
    out = []
    for which, block, channel, knob in words:
        if channel is None or block >= len(starts):  # the target has no such wait
            continue
        if program.explicit(block):
            out.append(f"wait_{channel}_{which}={knob}")
            continue
        offset = program.blocks[block].pre_sync_offset()
        if offset is None:
            continue
        at = starts[block] + offset
        if kept[at + 1] == kept[at]:  # the target has no instruction for it
            continue
        out.append(f"wait_{channel}_{which}={c.kernel[kept[at]].op.wait_value}")
    return " ".join(out) or "none"


def header(c: CompiledSchedule, sync: SyncModel | None) -> list[str]:
    """Target, warps, cycles per iteration and sync counts per iteration: the first lines."""
    execution = c.execution
    groups = execution.groups if execution is not None else 1
    warps = execution.warps_per_group if execution is not None else 1
    lowering = (f"generic lowering, ring of {c.config.depth} stages"
                if getattr(c, "lowering", "blocks") == "generic" else
                f"{'double' if c.config.depth >= 2 else 'single'}-buffer")
    return [
        f"schedule {c.schedule_name} on {c.target_name or '(no target)'}"
        + (f" (sync model {sync.name})" if sync is not None else "")
        + f": body {len(c.body)} ops, {len(c.edges)} edges, {lowering}",
        f"warps: {groups} warp group(s) x {warps} warp(s)",
        _timing_line(c),
        _per_iteration(c, sync),
    ]


def _block_rows(c: CompiledSchedule, sync: SyncModel | None) -> list[tuple[int, int, str]] | None:
    ranges = block_ranges(c, sync)
    if not ranges:
        return None
    bph = c.config.blocks_per_partition
    rows = [(start, end, f"b{i}" + (f" p{i // bph}" if bph else ""))
            for i, (start, end) in enumerate(ranges)]
    covered = rows[-1][1] if rows else 0
    if covered < len(c.kernel):
        rows.append((covered, len(c.kernel), "tail"))
    return rows


def render(c: CompiledSchedule, *, kernel_only: bool = False, compact: bool = False,
           host: object = None) -> str:
    """The text view: header, phases (or the kernel alone), block layout unless compact.

    Syncs the checker shows redundant are flagged (:mod:`pipeline_core.export.redundant`).
    """
    from pipeline_core.export.redundant import redundant_syncs

    if c.agents is not None:  # one program per agent (pipeline_core.agents)
        return _agents_listing(c, c.agents)
    sync = declared_sync(c)
    names = {**(sync.tag_names() if sync is not None else {}), **c.tag_names}
    channel_of = channels_by_tag(c.body)
    redundant = redundant_syncs(c, sync, host)
    notes = {phase: {i: text for (ph, i), text in redundant.items() if ph == phase}
             for phase in ("prologue", "kernel", "epilogue")}
    out = header(c, sync)
    if c.kernel_program is not None:
        kp = c.kernel_program
        out.append(f"strategy {c.schedule_config.scheduling}, body order {list(kp.order)}")
        out.append(f"derived waits: {_emitted_knob_waits(c, sync)} "
                   f"({'applied' if kp.waits_applied else 'not applied: manual waits'})")
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
                               _block_rows(c, sync))
        if not kernel_only:
            out.append("")
            out += compact_listing("EPILOGUE", c.epilogue, names, sync, channel_of, notes["epilogue"])
        return "\n".join(out) + "\n"
    if not kernel_only:
        marks = {stagger: "  <- warp group 1 joins here"} if stagger < len(c.prologue) else {}
        out += phase_listing("PROLOGUE", c.prologue, names, marks, sync, channel_of, notes["prologue"])
        out.append("")
    kmarks = {}
    bph = c.config.blocks_per_partition
    for i, (start, _) in enumerate(block_ranges(c, sync)):
        kmarks[start] = f"  <- block {i}" + (f" (partition {i // bph})" if i % bph == 0 else "")
    out += phase_listing("KERNEL", c.kernel, names, kmarks, sync, channel_of, notes["kernel"])
    if not kernel_only:
        out.append("")
        out += phase_listing("EPILOGUE", c.epilogue, names, sync=sync, channel_of=channel_of,
                             notes=notes["epilogue"])
        if c.kernel_program is not None:
            out.append("")
            out += block_layout(c, sync)
    return "\n".join(out) + "\n"


def _agents_listing(compiled: CompiledSchedule, plan: "AgentPlan") -> str:
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
            out.append(f"  {o.name}: each K tile {turns}; named barriers {bars}")
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
    return "\n".join(out) + "\n"
