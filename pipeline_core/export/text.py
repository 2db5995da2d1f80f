"""A text view for people: numbered phase listings, wait/barrier summaries, block layout."""
from __future__ import annotations

from typing import Mapping

import attrs

from pipeline_core.compiler import CompiledSchedule
from pipeline_core.execution import ExecutionModel
from pipeline_core.ops import Entry, KOffset, OpRole, tag_name
from pipeline_core.sync.model import SyncModel
from pipeline_core.sync.resolve import declared_sync

_K = {KOffset.K0: "K0", KOffset.K1: "K1", KOffset.K_NEXT: "K+2", KOffset.K_PREV: "K-1",
      KOffset.NONE: ""}


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


def describe_op(o, names: Mapping[int, str], sync: SyncModel | None = None) -> str:
    """One op in a compact, readable form: name, operands, wait value (sync ops in the target's words)."""
    name = tag_name(o.tag, names)
    if sync is not None:
        if sync.channel_for_wait(o.tag) is not None or o.tag == sync.priority_tag:
            return f"{name}({o.wait_value})"
        if o.tag in sync.hint_formats:
            return f"{name}({sync.hint_formats[o.tag].format(subtile=o.subtile, wait_value=o.wait_value)})"
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


def phase_listing(label: str, entries: tuple[Entry, ...], names, marks=None,
                  sync: SyncModel | None = None) -> list[str]:
    marks = marks or {}
    lines = [f"{label} ({len(entries)} entries)"]
    width = len(str(max(len(entries) - 1, 0)))
    for i, e in enumerate(entries):
        flag = "  prefetch" if e.is_prefetch else ""
        mark = marks.get(i, "")
        lines.append(f"  {i:>{width}}  {describe_op(e.op, names, sync):<34}{flag}{mark}".rstrip())
    lines.append(f"  sync: {WaitSummary.of(entries, sync)}")
    return lines


def block_layout(c: CompiledSchedule, sync: SyncModel | None = None) -> list[str]:
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
        waits = [describe_op(o, names, sync) for o in (b.entry_wait, b.entry_wait_lgkm, b.pre_sync)
                 if o.is_present]
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
    sync = declared_sync(c)
    names = {**(sync.tag_names() if sync is not None else {}), **c.tag_names}
    out = [f"schedule {c.schedule_name} on {c.target_name or '(no target)'}: "
           f"body {len(c.body)} ops, {len(c.edges)} edges, "
           + (f"generic lowering, ring of {c.config.depth} stages"
            if getattr(c, "lowering", "blocks") == "generic" else
            f"{'double' if c.config.depth >= 2 else 'single'}-buffer")]
    if c.kernel_program is not None:
        kp = c.kernel_program
        out.append(f"strategy {c.schedule_config.scheduling}, order {list(kp.order)}")
        out.append(f"derived waits: wait_lgkm_first={kp.wait_lgkm_first} "
                   f"wait_vm_last={kp.wait_vm_last} ({'applied' if kp.waits_applied else 'not applied: manual waits'})")
    stagger = c.warp_stagger_index
    out.append(f"warp stagger: group 0 runs {stagger} prologue entries before group 1 joins"
               if ExecutionModel.is_staggered(stagger, len(c.prologue))
               else "warp stagger: none (one warp group)")
    out.append("")
    marks = {stagger: "  <- warp group 1 joins here"} if stagger < len(c.prologue) else {}
    out += phase_listing("PROLOGUE", c.prologue, names, marks, sync)
    out.append("")
    kmarks = {}
    if c.kernel_program is not None:
        program = c.kernel_program.program
        bph = c.config.blocks_per_partition
        for i in range(len(program.blocks)):
            kmarks[program.block_start(i)] = f"  <- block {i}" + (
                f" (partition {i // bph})" if i % bph == 0 else "")
    out += phase_listing("KERNEL", c.kernel, names, kmarks, sync)
    out.append("")
    out += phase_listing("EPILOGUE", c.epilogue, names, sync=sync)
    if c.kernel_program is not None:
        out.append("")
        out += block_layout(c, sync)
    return "\n".join(out) + "\n"
