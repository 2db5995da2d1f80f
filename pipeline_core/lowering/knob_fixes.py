"""How a user applies the hazard checker's fix: the ``-c`` flags that set the wait it names.

The checker (pipeline_core/check/fixes.py) names an entry and a value ("lower wait_copy at
kernel[21] from 12 to 0"); a user cannot edit an entry, only the knobs the schedule is compiled
with.  On the blocks lowering two kernel waits per partition are a knob's
(docs/guide/reference-behaviours.md, "Wait derivation"): block 0's fragment-channel wait is
``wait_lgkm_first``'s and the last block's global-channel wait is ``wait_vm_last``'s, unless
``auto_waits`` replaces both by the derived values.  This module finds where the emitted kernel
holds those two waits and turns a fix on one of them into the flags that make it, so a refusal
names a fix the user can type (issue 25).  Any other wait is placed by the block template or
by the schedule; :func:`fix_flags` then names the schedule method that decides it.  The block
program's plan answers ``LoweringDetails.how_to_apply`` with it (pipeline_core/lowering/blocks.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pipeline_core.check.verdict import Fix
    from pipeline_core.config import PipelineConfig, ScheduleConfig
    from pipeline_core.ops import Entry
    from pipeline_core.program.program import KernelProgram
    from pipeline_core.sync.model import SyncModel

#: the knobs of a partition's first and last block wait (pipeline_core/program/construct.py)
FIRST_KNOB, LAST_KNOB = "wait_lgkm_first", "wait_vm_last"


@attrs.frozen(kw_only=True)
class KnobWait:
    """One wait a knob places: its knob, block, channel and emitted kernel index.

    ``index`` is None when the emitted kernel has no such entry (the target has no instruction
    for it) or the block is one of the schedule's explicit blocks (its own list, where the
    knob's value stands as written; ``explicit`` is then True).
    """

    knob: str
    block: int
    channel: str | None
    index: int | None
    explicit: bool = False


def knob_waits(result: KernelProgram, config: PipelineConfig, kernel: Sequence[Entry],
               sync: SyncModel | None, *, partitions: int | None = None) -> tuple[KnobWait, ...]:
    """The waits ``wait_lgkm_first`` / ``wait_vm_last`` place in each of the first
    ``partitions`` partitions (None: all) of the block program ``result``, where the emitted
    ``kernel`` holds them; () when the settle stage added entries to the kernel."""
    from pipeline_core.ops import Phase
    from pipeline_core.program.binding import lowering_for

    program = result.program
    kept = lowering_for(sync).kept_before(program.expand(Phase.KERNEL))
    if kept[-1] != len(kernel):  # entries were added after the template (settle)
        return ()
    binding = sync.block_binding if sync is not None else None
    fragment = binding.fragment_channel if binding else "lgkm"
    global_ = binding.global_channel if binding else "vm"
    bph = config.blocks_per_partition
    starts = program.block_starts()
    count = config.num_partitions if partitions is None else partitions
    out = []
    for h in range(count):
        for knob, block, channel in ((FIRST_KNOB, h * bph, fragment),
                                     (LAST_KNOB, h * bph + bph - 1, global_)):
            if block >= len(starts):
                continue
            if program.explicit(block):
                out.append(KnobWait(knob=knob, block=block, channel=channel, index=None,
                                    explicit=True))
                continue
            offset = program.blocks[block].pre_sync_offset()
            at = None if offset is None else starts[block] + offset
            index = None if at is None or kept[at + 1] == kept[at] else kept[at]
            out.append(KnobWait(knob=knob, block=block, channel=channel, index=index))
    return tuple(out)


def _typed(pairs: dict[str, int | bool]) -> str:
    from pipeline_core.config import value_text

    return " ".join(f"-c {key}={value_text(value)}" for key, value in pairs.items())


def knob_flags(result: KernelProgram, config: PipelineConfig, sched: ScheduleConfig,
               kernel: Sequence[Entry], sync: SyncModel | None, fix: Fix) -> str:
    """The ``-c`` flags that give the wait ``fix`` lowers its new value; "" when no knob sets
    that wait.

    Under ``auto_waits=true`` the derived values replace both knobs, so the flags turn it off
    and keep the other knob wait at the value the kernel emits now (and, under ``auto_drain``,
    the drain mask it derived), so that only the named wait changes.
    """
    if fix.action != "lower_wait" or fix.phase != "kernel" or fix.value is None:
        return ""
    sites = knob_waits(result, config, kernel, sync)
    hit = next((s for s in sites if s.index == fix.index and s.channel == fix.counter), None)
    if hit is None:
        return ""
    if not sched.auto_waits:
        return _typed({hit.knob: fix.value})
    pairs: dict[str, int | bool] = {"auto_waits": False, hit.knob: fix.value}
    other = next(((s.knob, s.index) for s in sites if s.knob != hit.knob and s.index is not None),
                 None)
    if other is not None:
        pairs[other[0]] = kernel[other[1]].op.wait_value
    if sched.auto_drain:
        pairs["drain_lgkm_mask"] = result.derived_drain_mask
    return _typed(pairs)


def fix_flags(result: KernelProgram, config: PipelineConfig, sched: ScheduleConfig,
              kernel: Sequence[Entry], sync: SyncModel | None, fix: Fix, *,
              derived: bool) -> str:
    """How the user applies ``fix`` to a block program: the ``-c`` flags (:func:`knob_flags`),
    else the schedule method that decides the entry.  ``derived``: the schedule's waits were
    settled by the core (``wait_source() == "derived"``, pipeline_core/sync/settle.py), which
    tried the checker's wait and barrier fixes already."""
    flags = knob_flags(result, config, sched, kernel, sync, fix)
    if flags:
        return f"apply it with {flags}"
    if fix.action in ("lower_wait", "insert_wait", "insert_barrier") and not derived:
        return ("no -c knob sets this entry: the schedule's wait_source() keeps the block "
                "template's waits; returning \"derived\" from it lets compile derive and place "
                'them (docs/guide/schedule-plugin.md, "The schedule protocol")')
    return ""
