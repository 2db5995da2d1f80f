"""MI355X synchronisation: vmcnt, lgkmcnt and s_barrier, as the reference's kernels use them.

* ``vmcnt`` counts buffer loads per wave, ``vm_per_load_a/b`` ticks per global
  load (set by the kernel layout), retiring in order.
* ``lgkmcnt`` counts LDS accesses per wave: ``lgkm_per_load_a/b`` ticks per
  fragment load (the PipelineConfig's when set, else the ScheduleConfig's), one
  per SHARED_STORE; in order while only LDS traffic is pending.
* ``s_barrier`` is the workgroup rendezvous.  In the double-buffer kernel global
  loads write LDS directly (``buffer_load ... lds``) and the barrier is bare; in
  the single-buffer kernel loads fill staging registers, SHARED_STORE writes LDS,
  and ``barrier()`` is fenced, so it drains the wave's counters first.
* Assumptions (not ISA guarantees): the compiler interlocks fragment registers
  (SIInsertWaitcnts waits for a ``ds_read`` before its VGPRs are used), and the
  LDS services its queue in arrival order, so a read issued before a
  global->LDS load is serviced before that load's data lands.
* ``s_setprio``, ``sched_barrier`` and ``sched_group_barrier`` are scheduling
  hints: they cost nothing and never stall.
* Encoding limits (``Channel.max_wait``): ``s_waitcnt`` holds vmcnt in 6 bits (SIMM16[3:0]
  and [15:14]) and lgkmcnt in 4 bits (SIMM16[11:8]) on gfx950 as on gfx942, so the largest
  waits are vmcnt 63 and lgkmcnt 15 (expcnt, 3 bits, 7, is unused here).  Sources: the CDNA4
  ISA guide (S_WAITCNT, and the counter widths of its Table 2), LLVM's AMDGPUBaseInfo.cpp
  bit widths and gfx940_waitcnt.rst, collected in docs/design/amd-waits-and-warps.md §6.  A
  derived or manual wait above them cannot be encoded, and compile refuses it.
"""
from __future__ import annotations

from pipeline_core.plugin_api import (BarrierKind, BlockBinding, Channel, Effect, FrameworkTag,
                                      OpRole, SyncModel)

VM, LGKM = "vm", "lgkm"
#: the largest encodable s_waitcnt values on gfx950 (module docstring)
VMCNT_MAX, LGKMCNT_MAX = 63, 15

CHANNELS = (
    Channel(name=VM, label="vmcnt", wait_tag=int(FrameworkTag.WAIT_VM), wait_name="WAIT_VM",
            unit="instruction", in_order=True, owner="wave", op_cost_field="vm_cost",
            max_wait=VMCNT_MAX),
    Channel(name=LGKM, label="lgkmcnt", wait_tag=int(FrameworkTag.WAIT_LGKM),
            wait_name="WAIT_LGKM", unit="instruction", in_order=True, owner="wave",
            op_cost_field="lgkm_cost", max_wait=LGKMCNT_MAX),
)

EFFECTS = (
    Effect(role=OpRole.GLOBAL_LOAD, channel=0, counter=VM, ticks_from=("config.vm_per_load_a",)),
    Effect(role=OpRole.GLOBAL_LOAD, channel=1, counter=VM, ticks_from=("config.vm_per_load_b",)),
    Effect(role=OpRole.GLOBAL_LOAD, channel=-1, counter=VM, ticks_from=("config.vm_per_load_a",)),
    Effect(role=OpRole.FRAGMENT_LOAD, channel=0, counter=LGKM,
           ticks_from=("config.lgkm_per_load_a", "schedule_config.lgkm_per_load_a")),
    Effect(role=OpRole.FRAGMENT_LOAD, channel=1, counter=LGKM,
           ticks_from=("config.lgkm_per_load_b", "schedule_config.lgkm_per_load_b")),
    Effect(role=OpRole.FRAGMENT_LOAD, channel=-1, counter=LGKM,
           ticks_from=("config.lgkm_per_load_a", "schedule_config.lgkm_per_load_a")),
    Effect(role=OpRole.SHARED_STORE, channel=-1, counter=LGKM, ticks=1),
    Effect(role=OpRole.COMPUTE, counter=None),
)

HINTS = {int(FrameworkTag.SET_PRIO): "SET_PRIO",
         int(FrameworkTag.SCHEDULE_BARRIER): "SCHEDULE_BARRIER",
         int(FrameworkTag.SCHED_GROUP_BARRIER): "SCHED_GROUP_BARRIER"}
#: sched_group_barrier carries its mask in ``subtile`` and its count in ``wait_value``
HINT_FORMATS = {int(FrameworkTag.SCHED_GROUP_BARRIER): "mask={subtile}, count={wait_value}"}

#: The instructions each sync and hint tag lowers to (gfx950 assembly). ``schedule_barrier()``
#: is ``sched_barrier 0`` (no instruction may cross); ``sched_group_barrier`` carries its mask in
#: ``subtile`` and its size in ``wait_value`` (sync id 0).
ISA_FORMS = {int(FrameworkTag.WAIT_VM): "s_waitcnt vmcnt({wait_value})",
             int(FrameworkTag.WAIT_LGKM): "s_waitcnt lgkmcnt({wait_value})",
             int(FrameworkTag.BARRIER): "s_barrier",
             int(FrameworkTag.SET_PRIO): "s_setprio {wait_value}",
             int(FrameworkTag.SCHEDULE_BARRIER): "sched_barrier 0",
             int(FrameworkTag.SCHED_GROUP_BARRIER): "sched_group_barrier {subtile:#x}, {wait_value}, 0"}

#: The block program's global waits count vmcnt, its fragment waits lgkmcnt; its priority
#: hint is s_setprio and its scheduling fence sched_barrier (the tags the reference emits).
BLOCK_BINDING = BlockBinding(global_channel=VM, fragment_channel=LGKM,
                             priority_tag=int(FrameworkTag.SET_PRIO),
                             fence_tag=int(FrameworkTag.SCHEDULE_BARRIER))

#: The MI355X peak engine clock, used to state real time next to cycles.
CLOCK_GHZ = 2.4

MI355X_SYNC = SyncModel(
    name="amd-mi355x", channels=CHANNELS, effects=EFFECTS,
    barriers=(BarrierKind(tag=int(FrameworkTag.BARRIER), name="s_barrier", aligned=False,
                          drains=False),),
    hint_tags=HINTS, hint_formats=HINT_FORMATS, priority_tag=int(FrameworkTag.SET_PRIO),
    register_interlock=True, shared_in_order=True, global_loads_write_shared=True,
    combined_wait="s_waitcnt", block_binding=BLOCK_BINDING, isa_forms=ISA_FORMS)

MI355X_SINGLE_BUFFER_SYNC = SyncModel(
    name="amd-mi355x-single-buffer", channels=CHANNELS, effects=EFFECTS,
    barriers=(BarrierKind(tag=int(FrameworkTag.BARRIER), name="s_barrier", aligned=False,
                          drains=True),),
    hint_tags=HINTS, hint_formats=HINT_FORMATS, priority_tag=int(FrameworkTag.SET_PRIO),
    register_interlock=True, shared_in_order=True, global_loads_write_shared=False,
    combined_wait="s_waitcnt", block_binding=BLOCK_BINDING, isa_forms=ISA_FORMS,
    notes=("single buffer (depth 1): global loads fill staging registers, SHARED_STORE writes "
           "LDS, BARRIER is the fenced barrier() that drains the warp's counters",))
