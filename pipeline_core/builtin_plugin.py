"""The core's own defaults, registered through the same hooks any plugin uses.

The host consults these only when no other plugin answers an override hook,
so a plugin overrides a core default exactly the way it overrides another plugin.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline_core.markers import hookimpl
from pipeline_core.schedule import KernelTransform, Schedule, StrategyRecord

if TYPE_CHECKING:
    from pipeline_core.config import PipelineConfig
    from pipeline_core.edges import DepEdge
    from pipeline_core.ops import Op
    from pipeline_core.program.program import Program


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
def pipeline_core_derive_edges(schedule: Schedule, body: tuple[Op, ...],
                               config: PipelineConfig) -> list[DepEdge]:
    """The schedule's own ``derive_edges`` if it has one, else the rule tables."""
    own = getattr(schedule, "derive_edges", None)
    if callable(own):
        return list(own(body))
    from pipeline_core.edges import derive_edges
    return derive_edges(body, config)


@hookimpl
def pipeline_core_explicit_blocks(schedule: Schedule, body: tuple[Op, ...],
                                  program: Program) -> list[list[Op]]:
    own = getattr(schedule, "build_explicit_blocks", None)
    return list(own(body, program)) if callable(own) else []


@hookimpl
def pipeline_core_bootstrap_frags(schedule: Schedule) -> list[Op]:
    own = getattr(schedule, "bootstrap_frags", None)
    return list(own()) if callable(own) else []


@hookimpl
def pipeline_core_kernel_transforms(schedule: Schedule, target: str,
                                    config: PipelineConfig) -> list[KernelTransform]:
    return []
