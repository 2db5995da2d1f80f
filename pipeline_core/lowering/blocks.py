"""The ``blocks`` lowering: the reference's block program (or its single-buffer recipes).

Depth >= 2: the ordered body is cut into blocks (``pipeline_core.program``), the template's
placeholders are lowered to the target's tags (``program.binding``), and the prologue and
epilogue come from the recipes of ``pipeline_core.phases``; depth 1: the single-buffer recipes,
with the schedule's and the plugins' kernel transforms.  The waits are the reference's formulas
or, for a schedule that derives them, settled by the repair loop of ``sync/settle.py``
(:func:`finish`).  The plan is lockstep: every warp group runs the phase lists, the reference's
warp stagger making group 1 one barrier late (pipeline_core/execution.py).

What the block program adds to the views (its blocks, the derived knob waits) is
:class:`BlockDetails`; readers reach it through ``Plan.details`` like any lowering's.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from pipeline_core.config import PipelineConfig, ScheduleConfig
from pipeline_core.errors import ConfigError, ProgramError
from pipeline_core.execution import ExecutionModel
from pipeline_core.lowering import LoweringInput, declared_warps_per_group
from pipeline_core.ops import Op, OpRole, Phase, entries
from pipeline_core.plan import NO_DETAILS, LoweringDetails, Plan, Region, lockstep_plan
from pipeline_core.program.program import KernelProgram
from pipeline_core.sync.model import SyncModel

if TYPE_CHECKING:
    from pipeline_core.check.verdict import Fix
    from pipeline_core.compiled import CompiledSchedule
    from pipeline_core.program.program import Program

BLOCKS = "blocks"


def check_global_ticks(ctx: LoweringInput) -> None:
    """A global load must add ticks to the global channel (vm per load >= 1), or every derived
    global wait is 0 and protects nothing (the ring and agents lowerings count through the
    target's sync model and never read those fields, ``config.BLOCK_PIPELINE_FIELDS``)."""
    from pipeline_core.limits import GLOBAL_LOAD_TICKS

    where = ctx.target_name or "(the schedule's own)"
    for o in ctx.body:
        if o.role == OpRole.GLOBAL_LOAD and ctx.config.vm_per_channel(o.channel) < 1:
            field = "vm_per_load_a" if o.channel == 0 else "vm_per_load_b"
            raise ConfigError(f"target {where}", field, ctx.config.vm_per_channel(o.channel),
                              f"{GLOBAL_LOAD_TICKS.allowed()}: schedule "
                              f"{ctx.schedule.name}'s global loads on channel {o.channel} would "
                              "never add ticks to the target's global channel, so every global "
                              "wait would derive to 0 and protect nothing")


def lower(ctx: LoweringInput) -> Plan:
    """The block program's plan (the module says how it is built)."""
    from pipeline_core import phases
    from pipeline_core.ordering import schedule_order
    from pipeline_core.program import build_kernel_program, kernel_deps_double_buffer
    from pipeline_core.program.binding import lowering_for
    from pipeline_core.program.verify import check_explicit_blocks
    from pipeline_core.sync.settle import DERIVED, wait_source

    check_global_ticks(ctx)
    schedule, body, edges, config, host = ctx.schedule, ctx.body, ctx.edges, ctx.config, ctx.host
    sched = ctx.schedule_config
    sync = ctx.target.sync if ctx.target is not None else None
    binding = lowering_for(sync)
    details: LoweringDetails = NO_DETAILS
    order: tuple[int, ...] | None = None
    explicit_source = ""
    if config.depth >= 2:
        order = tuple(schedule_order(body, config, sched, edges,
                                     strategy=host.get_strategy(sched.scheduling)))
        result = build_kernel_program(body, config, sched, edges, order=order,
                                      keep_reads_first=wait_source(schedule) == DERIVED)
        program = result.program
        source, explicit = host.explicit_blocks_with_source(schedule, body, program)
        if explicit:
            explicit = tuple(tuple(block) for block in explicit)
            if len(explicit) != len(program.blocks):
                raise ProgramError(
                    f"schedule {schedule.name}: explicit blocks from {source} give "
                    f"{len(explicit)} op lists for {len(program.blocks)} program blocks; return "
                    "exactly one list per block (an empty list keeps the template)")
            program = attrs.evolve(program, explicit_blocks=explicit)
            findings = check_explicit_blocks(program, source)
            if findings:
                raise findings[0]
            result = attrs.evolve(result, program=program)
        bootstrap = tuple(host.bootstrap_frags(schedule) or ())
        prologue = phases.derive_prologue(program, config, sched, bootstrap)
        kernel = program.expand(Phase.KERNEL)
        epilogue = phases.derive_epilogue(program, config)
        prologue, kernel, epilogue = (binding.entries(p) for p in (prologue, kernel, epilogue))
        kernel_deps = tuple(kernel_deps_double_buffer(kernel, config, binding.fragment_wait_tag))
        details = BlockDetails(result=result, bootstrap_frags=bootstrap, config=config,
                               schedule_config=sched,
                               derived=wait_source(schedule) == DERIVED)
        explicit_source = source if any(explicit) else ""  # "": every block keeps its template
        order = tuple(result.order)
    else:
        prologue = phases.default_prologue(body, config)
        kernel = phases.default_kernel(body)
        # the schedule's own transform_kernel first (the core's answer), then the plugins'
        for transform in host.kernel_transforms(schedule, ctx.target_name, config):
            kernel = tuple(transform.function(kernel, body, config))
        epilogue = phases.default_epilogue(body, config)
        prologue, kernel, epilogue = (binding.entries(p) for p in (prologue, kernel, epilogue))
        kernel_deps = edges
    prefix = list(schedule.epilogue_prefix())
    if prefix:
        epilogue = entries(prefix + [e.op for e in epilogue], Phase.EPILOGUE)
    stagger = phases.warp_stagger_index(config, body, len(prologue))
    if config.warp_stagger.enabled and not ExecutionModel.is_staggered(stagger, len(prologue)):
        # an enabled stagger must split the prologue: past it, one warp group would be proven
        # (check --input refuses such a document too, pipeline_core/check/program.py)
        raise ConfigError(f"schedule {schedule.name}", "warp_stagger.fixed_amount", stagger,
                          f"a warp-stagger index in 0..{len(prologue)} for a prologue of "
                          f"{len(prologue)} entries")
    execution = ExecutionModel.of(stagger, len(prologue),
                                  warps_per_group=declared_warps_per_group(schedule, ctx.target))
    double = isinstance(details, BlockDetails)
    return lockstep_plan(
        lowering=BLOCKS, stages=config.depth, prologue=prologue, kernel=kernel,
        epilogue=epilogue, stagger_index=stagger, execution=execution, kernel_deps=kernel_deps,
        order=order, partitions=config.num_partitions if double else 1,
        blocks_per_partition=config.blocks_per_partition if double else 0,
        max_globals=config.block_sizing.max_globals if double else 0,
        details=details, launch=schedule.kernel_launch(), sync=sync, template_counters=True,
        description=f"{'double' if double else 'single'}-buffer", explicit_source=explicit_source)


def finish(ctx: LoweringInput, compiled: CompiledSchedule) -> CompiledSchedule:
    """A schedule that derives its waits: the repair loop settles them under the proof
    (pipeline_core/sync/settle.py), and the kernel's dependences follow the settled kernel."""
    from pipeline_core.program import kernel_deps_double_buffer
    from pipeline_core.program.binding import lowering_for
    from pipeline_core.sync.settle import DERIVED, settle, wait_source

    if wait_source(ctx.schedule) != DERIVED or ctx.sync is None or ctx.prove is None:
        return compiled  # no sync model: the proof stage refuses it as unprovable
    settled = settle(compiled, ctx.sync, prove=ctx.prove)
    if isinstance(compiled.plan.details, BlockDetails) and settled.kernel != compiled.kernel:
        fragment_wait = lowering_for(compiled.plan.sync).fragment_wait_tag
        deps = tuple(kernel_deps_double_buffer(settled.kernel, compiled.config, fragment_wait))
        settled = attrs.evolve(settled, plan=attrs.evolve(settled.plan, kernel_deps=deps))
    return settled


# --- what the block program adds to the views ----------------------------------------------

@attrs.frozen(kw_only=True)
class BlockDetails:
    """The double-buffer block program behind a plan: its blocks, derived knob waits and the
    schedule's explicit blocks and bootstrap fragments (docs/document-format.md)."""

    result: KernelProgram
    bootstrap_frags: tuple[Op, ...] = ()
    config: PipelineConfig
    schedule_config: ScheduleConfig
    #: the schedule's waits are derived and settled by the core (``wait_source()``)
    derived: bool = True

    @property
    def program(self) -> "Program":
        return self.result.program

    def document_sections(self, plan: Plan, names: Mapping[int, str]
                          ) -> tuple[tuple[str, object], ...]:
        from pipeline_core.document import block_doc, op_doc

        kp, program = self.result, self.result.program
        n = range(len(program.blocks))
        return (
            ("scheduler", {"strategy": self.schedule_config.scheduling, "order": list(kp.order)}),
            ("main_wait_vm", kp.main_wait_vm),
            ("wait_lgkm_first", kp.wait_lgkm_first),
            ("wait_vm_last", kp.wait_vm_last),
            ("derived_waits", {"wait_lgkm_first": kp.wait_lgkm_first,
                               "wait_vm_last": kp.wait_vm_last, "applied": kp.waits_applied}),
            ("derived_drain_mask", kp.derived_drain_mask),
            ("blocks", [block_doc(i, b, self.config, names) for i, b in enumerate(program.blocks)]),
            ("block_entry_starts", [program.block_start(i) for i in n]),
            ("block_mma_entries", [program.mma_entry(i) for i in n]),
            ("explicit_blocks", [[op_doc(o, names) for o in blk]
                                 for blk in program.explicit_blocks]),
            ("bootstrap_frags", [op_doc(o, names) for o in self.bootstrap_frags]),
        )

    def text_notes(self, plan: Plan, sync: SyncModel | None) -> tuple[str, ...]:
        kp = self.result
        return (f"strategy {self.schedule_config.scheduling}, body order {list(kp.order)}",
                f"derived waits: {self._knob_waits(plan, sync)} "
                f"({'applied' if kp.waits_applied else 'not applied: manual waits'})")

    def _kept_before(self, plan: Plan, sync: SyncModel | None) -> tuple[int, ...] | None:
        """Template kernel position -> emitted kernel position (the target's binding drops the
        entries it has no instruction for, pipeline_core/program/binding.py); None when the
        kernel was changed since (a mutation)."""
        from pipeline_core.program.binding import lowering_for

        kept = lowering_for(sync).kept_before(self.program.expand(Phase.KERNEL))
        return kept if kept[-1] == len(plan.entries(Phase.KERNEL)) else None

    def regions(self, plan: Plan, sync: SyncModel | None) -> tuple[Region, ...]:
        """Each block's ``[start, end)`` in the emitted kernel, headed by its partition."""
        program, kept = self.program, self._kept_before(plan, sync)
        if kept is None:
            return ()
        bph = self.config.blocks_per_partition
        return tuple(
            Region(start=kept[start], end=kept[start + program.block_entry_count(i)],
                   label=f"block {i}", short=f"b{i}" + (f" p{i // bph}" if bph else ""),
                   heading=f"partition {i // bph}" if i % bph == 0 else "")
            for i, start in enumerate(program.block_starts()))

    def layout(self, plan: Plan, names: Mapping[int, str], sync: SyncModel | None
               ) -> tuple[str, ...]:
        from pipeline_core.export.notation import op_text

        program = self.program
        ranges = self.regions(plan, sync)
        if not ranges:
            return ()
        bph = self.config.blocks_per_partition
        lines = ["BLOCKS (per partition; kernel entry range, then contents)"]
        for i, b in enumerate(program.blocks):
            part, pos = divmod(i, bph)
            if pos == 0:
                lines.append(f"  partition {part}")
            start, end = ranges[i].start, ranges[i].end - 1
            frags = [op_text(o, names, sync) for o in (b.pre_op_0, b.pre_op_1) if o.is_present]
            loads = []
            for o in (b.global_load, b.global_load_1):
                if o.is_present:
                    kind = "prefetch" if o.stage == part else "completion"
                    loads.append(f"{op_text(o, names, sync)} ({kind})")
            waits = [op_text(o, names, sync) for o in (b.entry_wait, b.entry_wait_lgkm, b.pre_sync)
                     if o.is_present]
            lines.append(f"    block {i} [{start}-{end}]  mma {op_text(b.mma, names, sync)}")
            if frags:
                lines.append(f"      frags: {', '.join(frags)}")
            if loads:
                lines.append(f"      loads: {', '.join(loads)}")
            if waits:
                lines.append(f"      waits: {', '.join(waits)}")
            if b.drain_lgkm_before_loads:
                lines.append("      drains lgkm before its loads")
        return tuple(lines)

    def how_to_apply(self, plan: Plan, sync: SyncModel | None, fix: Fix) -> str:
        from pipeline_core.lowering.knob_fixes import fix_flags

        return fix_flags(self.result, self.config, self.schedule_config,
                         plan.entries(Phase.KERNEL), sync, fix, derived=self.derived)

    def _knob_waits(self, plan: Plan, sync: SyncModel | None) -> str:
        """The waits the ``wait_lgkm_first`` / ``wait_vm_last`` knobs place (the first block's
        fragment wait, the last block of partition 0's global wait) as the kernel emits them,
        named after the target's channel: ``wait_<channel>_first=N wait_<channel>_last=N``
        (docs/guide/concepts.md, "Reading the views").  A schedule's explicit block is its own
        list, so there the knob's value stands."""
        from pipeline_core.lowering.knob_fixes import FIRST_KNOB, knob_waits

        kp, kernel = self.result, plan.entries(Phase.KERNEL)
        out = []
        for site in knob_waits(kp, self.config, kernel, sync, partitions=1):
            which, knob = (("first", kp.wait_lgkm_first) if site.knob == FIRST_KNOB
                           else ("last", kp.wait_vm_last))
            if site.channel is None:  # the target has no such wait
                continue
            if site.explicit:
                out.append(f"wait_{site.channel}_{which}={knob}")
            elif site.index is not None:
                out.append(f"wait_{site.channel}_{which}={kernel[site.index].op.wait_value}")
        return " ".join(out) or "none"
