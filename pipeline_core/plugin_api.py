"""What a plugin may import from pipeline-core: the supported surface, in one place.

Everything else in ``pipeline_core`` is internal and may move between releases.
Import from here (``from pipeline_core.plugin_api import TargetProfile, SyncModel``)
so a plugin keeps working when modules are reorganised.  The bundled plugins and the
example import core names from here only (tests/test_plugin_api_surface.py holds them to it).

Grouped by what a plugin does:

* register things: :data:`hookimpl`, the records (:class:`TargetRecord`,
  :class:`ScheduleRecord`, :class:`StrategyRecord`, :class:`KernelTransform`,
  :class:`EmitterRecord`, :class:`Param` with its :class:`Bound` (:data:`COUNTER_TICKS`,
  :data:`GLOBAL_LOAD_TICKS` for per-load tick counts, :data:`PARAM_INT` for a plain integer),
  :class:`BuildContext`;
  :data:`REFUSED` for a schedule's ``forced_knobs()``, :func:`apply_overrides` to read a
  ``-c`` value as the compiler will; :data:`COPY_RING`, a target family a schedule may
  declare, :data:`PING_PONG` another); :class:`Capabilities`, what a schedule or an emitter
  needs (``requires``) and a target offers (``offers``); :func:`installed_version` for a
  plugin's ``__version__``;
* describe a target: :class:`TargetProfile` with a :class:`CostModel` (:class:`OpCost` per
  tag), a :class:`PipelineConfig` (:class:`WarpStagger` ...) and a :class:`SyncModel`
  (:class:`Channel`, :class:`Effect`, :class:`BarrierKind`, :class:`BlockBinding` for a target
  the block program lowers on, :class:`NamedBarriers` for a target whose warp groups order each
  other through named barriers, :class:`CrossCtaReduction` for one whose CTAs reduce partial
  tiles through global memory, :class:`BulkStoreChannel` for one that stores results from
  shared memory by its async proxy);
* describe a schedule: :class:`ScheduleBase` (the schedule protocol, every optional method
  with its default), ops (:class:`Op`, :func:`logical`, :func:`framework_op`,
  :class:`BodyBuilder`), configs, edges (:class:`DepEdge`, :class:`DepKind`,
  :func:`derive_edges`), the execution model, the kernel it declares (:class:`KernelLaunch`);
  a warp-specialized schedule's agents (:class:`AgentSpec`, :class:`AgentRole`, its rings
  :class:`RingSpec`, the orderings between consumer groups :class:`OrderSpec` of
  :class:`Turn`, output tiles taken in turn :class:`TileSplit`, a cross-CTA reduction
  :class:`ReductionSpec`, a staged bulk store :class:`StoreSpec`, adds ordered across CTAs
  :class:`TurnSpec`, a writer's copies issued by several of its warps :class:`SharedIssue`,
  whose steps the lead warp alone runs :func:`lead_only`);
* customise ordering: :class:`SchedulingRequest` (what a strategy receives);
* customise the block program: :func:`emit_minimal_barrier_block` for explicit blocks;
* emit code: an emitter receives a :class:`CompiledSchedule`, whose plan holds the agents'
  programs (:class:`AgentProgram`, :class:`Ring`, :class:`Step`, :class:`StepKind`, the
  turn-ordered adds :class:`Turns`);
  :class:`AgentMachine` is a target's machine for the agents timing model, which
  :func:`simulate_agents` runs a plan on (a plugin's autotuner ranks its variants by it);
* report errors: the :mod:`pipeline_core.errors` classes below;
* compile at run time (a plugin's own call, such as the H100 plugin's ``matmul``):
  :func:`compile_named` on :func:`default_host` or a :class:`PluginHost` of its own;
* test: :func:`fresh_host`, :func:`run_cli`.
"""
from __future__ import annotations

from pipeline_core import installed_version
from pipeline_core.agents.cluster import RELAY as CLUSTER_RELAY
from pipeline_core.agents.timing import AgentMachine, EpilogueCosts
from pipeline_core.agents.timing import simulate as simulate_agents
from pipeline_core.api import compile_named
from pipeline_core.capabilities import Capabilities
from pipeline_core.compiled import CompiledSchedule
from pipeline_core.config import (BlockSizing, FragOrder, LoopCarried, PipelineConfig,
                                  ScheduleConfig, TargetProfile, WarpStagger, apply_overrides)
from pipeline_core.costs import CostModel, OpCost, annotate
from pipeline_core.dsl import BodyBuilder
from pipeline_core.edges import DepEdge, derive_edges
from pipeline_core.emitters import EmitterRecord
from pipeline_core.errors import (ConfigError, PipelineError, PluginError, ProgramError,
                                  SchedulingError, TargetFactError, TransformError)
from pipeline_core.execution import ExecutionModel
from pipeline_core.hookspecs import hookimpl
from pipeline_core.markers import record_hooks
from pipeline_core.launch import KernelLaunch
from pipeline_core.limits import COUNTER_TICKS, GLOBAL_LOAD_TICKS, PARAM_INT, Bound
from pipeline_core.ops import (DepKind, Entry, FrameworkTag, KOffset, Op, OpRole, Phase,
                               ResourceKind, framework_op, logical)
from pipeline_core.plan import (AgentProgram, AgentRole, AgentSpec, Cluster, ClusterSpec,
                                OrderSpec, ReductionSpec, Ring, RingSpec, SharedIssue, Step,
                                StepKind, StoreSpec, TileSplit, Turn, Turns, TurnSpec)
from pipeline_core.agents.shared_issue import lead_only
from pipeline_core.program.block import emit_minimal_barrier_block
from pipeline_core.schedule import (COPY_RING, PING_PONG, REFUSED, BuildContext, KernelTransform, Param,
                                    ScheduleBase, ScheduleRecord, StrategyRecord, TargetRecord)
from pipeline_core.scheduling.registry import SchedulingRequest
from pipeline_core.plugins import PluginHost, default_host
from pipeline_core.sync import (BarrierKind, BlockBinding, BulkStoreChannel, Channel,
                                ChannelKind, ClusterSync, CrossCtaReduction, Effect, NamedBarriers,
                                SyncModel)
from pipeline_core.testing import fresh_host, run_cli
from pipeline_core.tiles import Fixup, TripRule, TripSample, UniformTrips
from pipeline_core.transforms import (double_buffer_reorder, optimize_within_barriers,
                                      single_buffer_reorder)

__all__ = [
    "hookimpl", "record_hooks", "TargetRecord", "ScheduleRecord", "StrategyRecord", "KernelTransform",
    "EmitterRecord", "Param", "Bound", "COUNTER_TICKS", "GLOBAL_LOAD_TICKS", "PARAM_INT",
    "BuildContext", "REFUSED", "apply_overrides", "COPY_RING", "PING_PONG", "Capabilities",
    "ScheduleBase",
    "installed_version",
    "TargetProfile", "CostModel", "OpCost", "annotate", "PipelineConfig", "ScheduleConfig",
    "BlockSizing", "FragOrder", "LoopCarried", "WarpStagger",
    "SyncModel", "Channel", "ChannelKind", "Effect", "BarrierKind", "BlockBinding",
    "NamedBarriers", "CrossCtaReduction", "BulkStoreChannel", "ClusterSync",
    "ExecutionModel",
    "Op", "Entry", "OpRole", "ResourceKind", "KOffset", "Phase", "FrameworkTag", "logical",
    "framework_op", "BodyBuilder", "DepEdge", "DepKind", "derive_edges", "KernelLaunch",
    "AgentSpec", "Fixup", "TripRule", "TripSample", "UniformTrips", "AgentRole", "RingSpec", "OrderSpec", "Turn", "TileSplit", "ReductionSpec",
    "StoreSpec", "TurnSpec", "ClusterSpec", "Cluster", "CLUSTER_RELAY", "SharedIssue", "lead_only",
    "SchedulingRequest",
    "CompiledSchedule", "AgentProgram", "Ring", "Step", "StepKind", "Turns", "AgentMachine", "EpilogueCosts",
    "simulate_agents",
    "emit_minimal_barrier_block", "double_buffer_reorder", "optimize_within_barriers",
    "single_buffer_reorder",
    "PipelineError", "ConfigError", "PluginError", "ProgramError", "SchedulingError",
    "TargetFactError", "TransformError",
    "compile_named", "default_host", "PluginHost", "fresh_host", "run_cli",
]
