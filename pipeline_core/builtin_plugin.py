"""The core's own defaults, registered through the same hooks any plugin uses.

The host consults these only when no other plugin answers an override hook,
so a plugin overrides a core default exactly the way it overrides another plugin.
The schedule's own ``derive_edges``, ``build_explicit_blocks``, ``bootstrap_frags`` and
``transform_kernel`` (:class:`pipeline_core.schedule.ScheduleBase`) are the core's answers:
one mechanism, the hook, with the schedule's method as its default.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline_core.lowering import LoweringRecord
from pipeline_core.markers import hookimpl
from pipeline_core.schedule import KernelTransform, ScheduleBase, StrategyRecord

if TYPE_CHECKING:
    from pipeline_core.config import PipelineConfig
    from pipeline_core.edges import DepEdge
    from pipeline_core.ops import Entry, Op
    from pipeline_core.program.program import Program


@hookimpl
def pipeline_core_register_lowerings() -> list[LoweringRecord]:
    """The core's three lowerings (pipeline_core/lowering/)."""
    from pipeline_core.lowering import agents, blocks, ring

    return [
        LoweringRecord(agents.AGENTS, "one program per warp role, meeting on mbarrier rings "
                       "(docs/guide/agents.md)", lower=agents.lower,
                       knobless="the agents' programs, rings and waits are derived from their "
                                "roles (docs/guide/agents.md)", compute_channels=True),
        LoweringRecord(blocks.BLOCKS, "the reference's block program (its single-buffer "
                       "recipes at depth 1)", lower=blocks.lower, finish=blocks.finish),
        LoweringRecord(ring.RING, "an N-stage ring whose waits the target's sync model sets",
                       lower=ring.lower,
                       knobless="the ring's waits and barriers are derived from the target's "
                                "sync model (pipeline_core/lowering/ring.py)"),
    ]


@hookimpl
def pipeline_core_register_strategies() -> list[StrategyRecord]:
    from pipeline_core.scheduling.builtin import BUILTIN_STRATEGIES as fn

    return [
        StrategyRecord("IDENTITY", "declaration order, unchanged", fn["IDENTITY"]),
        StrategyRecord("GREEDY", "half-isolated list scheduler: lowest ready index, a COMPUTE closes a block",
                       fn["GREEDY"]),
        StrategyRecord("CSP", "the reference's half-isolated exhaustive search seeded by GREEDY",
                       fn["CSP"]),
        StrategyRecord("EXACT", "provably minimal makespan under CSP's constraints, with pruning; "
                       "CSP's order wherever CSP terminates", fn["EXACT"]),
        StrategyRecord("EXACT_BLOCKS", "EXACT where every order, the greedy seed included, fits "
                       "the block program (always compiles)", fn["EXACT_BLOCKS"]),
    ]


@hookimpl
def pipeline_core_derive_edges(schedule: ScheduleBase, body: tuple[Op, ...],
                               config: PipelineConfig) -> list[DepEdge]:
    """The schedule's own ``derive_edges`` if it answers, else the rule tables."""
    own = schedule.derive_edges(body)
    if own is not None:
        return list(own)
    from pipeline_core.edges import derive_edges
    return derive_edges(body, config)


@hookimpl
def pipeline_core_explicit_blocks(schedule: ScheduleBase, body: tuple[Op, ...],
                                  program: Program) -> list[list[Op]]:
    return [list(block) for block in schedule.build_explicit_blocks(body, program)]


@hookimpl
def pipeline_core_bootstrap_frags(schedule: ScheduleBase) -> list[Op]:
    return list(schedule.bootstrap_frags())


@hookimpl
def pipeline_core_kernel_transforms(schedule: ScheduleBase, target: str,
                                    config: PipelineConfig) -> list[KernelTransform]:
    """The schedule's own ``transform_kernel``: the host runs the core's transforms before
    every plugin's (pipeline_core/hookspecs.py, ``pipeline_core_kernel_transforms``)."""
    def own(kernel: tuple[Entry, ...], body: tuple[Op, ...], config: PipelineConfig) -> list[Entry]:
        return list(schedule.transform_kernel(kernel, body))

    return [KernelTransform(f"transform_kernel() of schedule {schedule.name}", own)]
