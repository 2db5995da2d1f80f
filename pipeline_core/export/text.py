"""A text view for people: numbered phase listings, wait/barrier summaries, block layout."""
from __future__ import annotations

from typing import Mapping

import attrs

from pipeline_core.compiler import CompiledSchedule
from pipeline_core.ops import Entry, FrameworkTag, KOffset, OpRole, tag_name

_K = {KOffset.K0: "K0", KOffset.K1: "K1", KOffset.K_NEXT: "K+2", KOffset.K_PREV: "K-1",
      KOffset.NONE: ""}


@attrs.frozen
class WaitSummary:
    """Synchronisation cost of one phase (a wait_vm directly followed by wait_lgkm coalesces)."""

    vm: int = 0
    lgkm: int = 0
    coalesced: int = 0
    barriers: int = 0
    sched_barriers: int = 0

    @classmethod
    def of(cls, entries: tuple[Entry, ...]) -> "WaitSummary":
        vm = lgkm = coalesced = barriers = sched = 0
        for i, e in enumerate(entries):
            tag = e.op.tag
            nxt = entries[i + 1].op.tag if i + 1 < len(entries) else FrameworkTag.NONE
            if tag == FrameworkTag.WAIT_VM:
                vm += 1
                coalesced += nxt == FrameworkTag.WAIT_LGKM
            elif tag == FrameworkTag.WAIT_LGKM:
                lgkm += 1
            elif tag == FrameworkTag.BARRIER:
                barriers += 1
            elif tag == FrameworkTag.SCHEDULE_BARRIER:
                sched += 1
        return cls(vm, lgkm, coalesced, barriers, sched)

    def __str__(self) -> str:
        return (f"{self.vm} wait_vm, {self.lgkm} wait_lgkm ({self.coalesced} coalesce into one "
                f"s_waitcnt), {self.barriers} s_barrier, {self.sched_barriers} schedule_barrier")


def describe_op(o, names: Mapping[int, str]) -> str:
    """One op in a compact, readable form: name, operands, wait value."""
    name = tag_name(o.tag, names)
    if o.tag in (FrameworkTag.WAIT_VM, FrameworkTag.WAIT_LGKM, FrameworkTag.SET_PRIO):
        return f"{name}({o.wait_value})"
    if o.tag == FrameworkTag.SCHED_GROUP_BARRIER:
        return f"{name}(mask={o.subtile}, count={o.wait_value})"
    if o.tag >= 128:
        return name
    if o.role == OpRole.COMPUTE:
        return f"{name}[m={o.stage}, n={o.subtile}]"
    parts = [f"stage {o.stage}", f"sub {o.subtile}"]
    if o.channel >= 0:
        parts.insert(0, "AB"[o.channel] if o.channel < 2 else f"ch{o.channel}")
    if o.k_offset != KOffset.NONE:
        parts.append(_K[o.k_offset])
    return f"{name}[{', '.join(parts)}]"


def phase_listing(label: str, entries: tuple[Entry, ...], names, marks=None) -> list[str]:
    marks = marks or {}
    lines = [f"{label} ({len(entries)} entries)"]
    width = len(str(max(len(entries) - 1, 0)))
    for i, e in enumerate(entries):
        flag = "  prefetch" if e.is_prefetch else ""
        mark = marks.get(i, "")
        lines.append(f"  {i:>{width}}  {describe_op(e.op, names):<34}{flag}{mark}".rstrip())
    lines.append(f"  sync: {WaitSummary.of(entries)}")
    return lines


def block_layout(c: CompiledSchedule) -> list[str]:
    program = c.program
    if program is None:  # single buffer: the kernel is not built from blocks
        return []
    names = c.tag_names
    bph = c.config.blocks_per_partition
    lines = ["BLOCKS (per partition; kernel entry range, then contents)"]
    for i, b in enumerate(program.blocks):
        part, pos = divmod(i, bph)
        if pos == 0:
            lines.append(f"  partition {part}")
        start = program.block_start(i)
        end = start + program.block_entry_count(i) - 1
        frags = [describe_op(o, names) for o in (b.pre_op_0, b.pre_op_1) if o.is_present]
        loads = []
        for o, pf in ((b.global_load, b.global_load_prefetch), (b.global_load_1, b.global_load_1_prefetch)):
            if o.is_present:
                kind = "prefetch" if o.stage == part else "completion"
                loads.append(f"{describe_op(o, names)} ({kind})")
        waits = [describe_op(o, names) for o in (b.entry_wait, b.entry_wait_lgkm, b.pre_sync) if o.is_present]
        lines.append(f"    block {i} [{start}-{end}]  mma {describe_op(b.mma, names)}")
        if frags:
            lines.append(f"      frags: {', '.join(frags)}")
        if loads:
            lines.append(f"      loads: {', '.join(loads)}")
        if waits:
            lines.append(f"      waits: {', '.join(waits)}")
        if b.drain_lgkm_before_loads:
            lines.append("      drains lgkm before its loads")
    return lines


def render(c: CompiledSchedule) -> str:
    names = c.tag_names
    out = [f"schedule {c.schedule_name} on {c.target_name or '(no target)'}: "
           f"body {len(c.body)} ops, {len(c.edges)} edges, "
           f"{'double' if c.config.depth >= 2 else 'single'}-buffer"]
    if c.kernel_program is not None:
        kp = c.kernel_program
        out.append(f"strategy {c.schedule_config.scheduling}, order {list(kp.order)}")
        out.append(f"derived waits: wait_lgkm_first={kp.wait_lgkm_first} "
                   f"wait_vm_last={kp.wait_vm_last} ({'applied' if kp.waits_applied else 'not applied: manual waits'})")
    stagger = c.warp_stagger_index
    out.append(f"warp stagger: group 0 runs {stagger} prologue entries before group 1 joins"
               if stagger <= len(c.prologue) else "warp stagger: none (one warp group)")
    out.append("")
    marks = {stagger: "  <- warp group 1 joins here"} if stagger < len(c.prologue) else {}
    out += phase_listing("PROLOGUE", c.prologue, names, marks)
    out.append("")
    kmarks = {}
    if c.kernel_program is not None:
        program = c.kernel_program.program
        bph = c.config.blocks_per_partition
        for i in range(len(program.blocks)):
            kmarks[program.block_start(i)] = f"  <- block {i}" + (
                f" (partition {i // bph})" if i % bph == 0 else "")
    out += phase_listing("KERNEL", c.kernel, names, kmarks)
    out.append("")
    out += phase_listing("EPILOGUE", c.epilogue, names)
    if c.kernel_program is not None:
        out.append("")
        out += block_layout(c)
    return "\n".join(out) + "\n"
