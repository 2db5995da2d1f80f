"""What a plugin may import from pipeline-core: the supported surface, in one place.

Everything else in ``pipeline_core`` is internal and may move between releases.
Import from here (``from pipeline_core.plugin_api import TargetProfile, SyncModel``)
so a plugin keeps working when modules are reorganised.

Grouped by what a plugin does:

* register things: :data:`hookimpl`, the records (:class:`TargetRecord`,
  :class:`ScheduleRecord`, :class:`StrategyRecord`, :class:`KernelTransform`,
  :class:`Param`, :class:`BuildContext`; :data:`REFUSED` for a schedule's
  ``forced_knobs()``; :data:`COPY_RING`, a target family a schedule may declare);
* describe a target: :class:`TargetProfile` with a :class:`CostModel`, a
  :class:`PipelineConfig` and a :class:`SyncModel` (channels, effects, barrier kinds);
* describe a schedule: :class:`ScheduleBase` (the schedule protocol, every optional method
  with its default), ops (:class:`Op`, :func:`logical`, :class:`BodyBuilder`),
  configs, edges (:class:`DepEdge`, :func:`derive_edges`), the execution model;
* customise ordering: :class:`SchedulingRequest` (what a strategy receives);
* customise the block program: :func:`emit_minimal_barrier_block` for explicit blocks;
* report errors: the :mod:`pipeline_core.errors` classes below;
* test: :func:`fresh_host`, :func:`run_cli`.
"""
from __future__ import annotations

from pipeline_core.api import compile_named
from pipeline_core.config import (BlockSizing, FragOrder, LoopCarried, PipelineConfig,
                                  ScheduleConfig, TargetProfile, WarpStagger)
from pipeline_core.costs import CostModel, OpCost, annotate
from pipeline_core.dsl import BodyBuilder
from pipeline_core.edges import DepEdge, derive_edges
from pipeline_core.errors import (ConfigError, PipelineError, PluginError, ProgramError,
                                  SchedulingError, TargetFactError, TransformError)
from pipeline_core.execution import ExecutionModel
from pipeline_core.hookspecs import hookimpl
from pipeline_core.ops import (Entry, FrameworkTag, KOffset, Op, OpRole, Phase, ResourceKind,
                               logical)
from pipeline_core.program.block import emit_minimal_barrier_block
from pipeline_core.schedule import (COPY_RING, REFUSED, BuildContext, KernelTransform, Param,
                                    ScheduleBase, ScheduleRecord, StrategyRecord, TargetRecord)
from pipeline_core.scheduling.registry import SchedulingRequest
from pipeline_core.sync import BarrierKind, Channel, ChannelKind, Effect, SyncModel
from pipeline_core.testing import fresh_host, run_cli
from pipeline_core.transforms import (double_buffer_reorder, optimize_within_barriers,
                                      single_buffer_reorder)

__all__ = [
    "hookimpl", "TargetRecord", "ScheduleRecord", "StrategyRecord", "KernelTransform", "Param",
    "BuildContext", "REFUSED", "COPY_RING", "ScheduleBase",
    "TargetProfile", "CostModel", "OpCost", "annotate", "PipelineConfig", "ScheduleConfig",
    "BlockSizing", "FragOrder", "LoopCarried", "WarpStagger",
    "SyncModel", "Channel", "ChannelKind", "Effect", "BarrierKind", "ExecutionModel",
    "Op", "Entry", "OpRole", "ResourceKind", "KOffset", "Phase", "FrameworkTag", "logical",
    "BodyBuilder", "DepEdge", "derive_edges", "SchedulingRequest",
    "emit_minimal_barrier_block", "double_buffer_reorder", "optimize_within_barriers",
    "single_buffer_reorder",
    "PipelineError", "ConfigError", "PluginError", "ProgramError", "SchedulingError",
    "TargetFactError", "TransformError",
    "compile_named", "fresh_host", "run_cli",
]
