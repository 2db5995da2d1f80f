"""The Hopper kit's one door: what a kernel-family package (attention today; attention backward,
grouped GEMM and decoding next) may import from the H100 plugin (issue 34's kit, its first
step).

Why a door: a family that reaches into the plugin's modules (``runtime._require``, the GEMM
emitter's constants) pins their private layout, so the plugin cannot move a piece without
breaking a family it does not know about.  This module names the kit's public pieces, and
``tests/test_plugin_api_surface.py`` holds every other plugin to importing the H100 plugin
through it only, and only names in its ``__all__``, as it holds plugins to
``pipeline_core.plugin_api``.  The pieces, by what a family needs them for:

* the target: its name, machine and sync model (``TARGET_NAME``, ``H100_SXM``, the
  warp groups' register split it can run, ``register_split_refusal``,
  ``H100_AGENT_MACHINE``, ``H100_WGMMA_SYNC``, ``TAG_NAMES``, ``CP_ASYNC_L2_LATENCY``; the
  capability contract a family on the frame needs, TMA + mbarrier rings + wgmma, for its
  ``ScheduleRecord.requires``: ``WGMMA_TMA``; the
  wgmma model with a buffer reduced into global memory every K tile by the bulk async proxy,
  ``H100_BULK_REDUCE_SYNC``, its ``BULK_TAG_NAMES`` and the operand channels of its staging
  write and its reduce, ``STAGE_OPERAND``, ``BULK_REDUCE_OPERAND``; and with those reduces
  ordered across CTAs, ``H100_ORDERED_REDUCE_SYNC``);
* a family's schedule on the target (``kit/schedule.py``: ``family_profile``, the target with
  the family's costs; ``AgentsSchedule``, the schedule protocol's methods every family writes
  alike);
* the warp-specialized frame (``kit/frame.py``: ``agents_kernel_body`` writes a kernel from the
  family's device code ``AgentsFamily``, its agents' programs ``AgentCode`` (an agent's steps
  on an output tile with no K tile: ``once_steps``) and its tile
  scheduler's device loop ``DeviceTileLoop`` of ``TileLoop`` s: ``linear_tile_loop``, or
  ``jagged_tile_loop`` over groups whose sizes only the device knows, ``k_group_tile_loop`` over
  groups of equal tiles whose K tiles only the device knows, ``stream_k_tile_loop`` over a
  CTA's stream-K work units), a step's stage and parity on
  its ring (``kit/rings.py``: ``RingState``, ``loop_tile``, the ring-depth rule), the wgmma
  wrappers (``kit/wgmma.py``: ``wgmma_ss``, ``wgmma_rs``), the programs' lines (``skeleton``:
  stretches, role and section marks, ring and consumer sync lines, the declared geometry) and
  the device headers (``header_source``, ``wgmma_header_source``,
  ``gemm_call_header_source``), the watchdog's default polls (``WATCHDOG``);
* the GEMM's trip rules (``RasterTrips``: every output tile of the raster visits every K tile, a
  uniform ``plugin_api.TripRule``; ``StreamKTrips``: the last partial wave's tiles shared by K
  tiles, with the fixups the core proves), for a family whose output tiles are a GEMM's;
* the host side: building and caching kernels (``KernelBuilder``, ``ARCH``, ``cubin_path``),
  tensor maps (``encode_tiled_2d``, ``DTYPE_*``), launches (``launch``, ``eager``,
  ``describe``, ``Bounded``) and the optional GPU packages (``require_gpu_module``);
* a kernel's parameters, rendered and packed from one list (``KernelSignature``,
  ``KernelParam``, ``kernel_params``, ``SignatureError``, ``TENSOR_MAP_TYPE``:
  kit.signature);
* the PyTorch call layer (kit.call): ``HostCall`` (plugin host, locked build cache
  ``KernelTable``, recipes, packed arguments, launch, custom ops), its records ``Built``,
  ``Recipe``, ``Launch``, ``Op``, and ``load_kernel``, ``tensor_map`` (and
  ``strided_tensor_map``: any rank, a tensor's own strides; ``dense_strides``), ``sm_count``,
  ``register_op``, ``BUILD_OPTIONS``, ``RECIPE_CACHE_SIZE``;
* autotuning (kit.autotune): ``Autotuner`` (a family's candidates ranked on the timing model,
  the best few timed, the winner cached under the family's key and source hash), each
  candidate's ``Workload`` on a problem over its ``TimingModel`` (``timing_model``), the cache's
  ``TuneKey``, the switch ``autotune_enabled`` and ``AutotuneError``;
* what the tests of a family use: ``check_skeleton`` (what runs is what was proven).
"""
from __future__ import annotations

from pipeline_core_nvidia_h100 import TARGET_NAME
from pipeline_core_nvidia_h100.contracts import WGMMA_TMA
from pipeline_core_nvidia_h100.costs import CP_ASYNC_L2_LATENCY
from pipeline_core_nvidia_h100.cuda import (gemm_call_header_source, header_source, pasted,
                                            wgmma_header_source)
from pipeline_core_nvidia_h100.emit_wgmma import SPLIT_BARRIER, WATCHDOG, counter_steps
from pipeline_core_nvidia_h100.gemm_tiles import RasterTrips, StreamKTrips
from pipeline_core_nvidia_h100.kernel_cache import cubin_path
from pipeline_core_nvidia_h100.kit.autotune import (AutotuneError, Autotuner, TimingModel,
                                                    TuneKey, Workload, timing_model)
from pipeline_core_nvidia_h100.kit.autotune import enabled as autotune_enabled
from pipeline_core_nvidia_h100.kit.call import (BUILD_OPTIONS, RECIPE_CACHE_SIZE, Built, HostCall,
                                                KernelTable, Launch, Op, Recipe, dense_strides,
                                                load_kernel, register_op, sm_count,
                                                split_workspace, strided_tensor_map,
                                                tensor_map, tma_copy, tma_readable)
from pipeline_core_nvidia_h100.kit.signature import (TENSOR_MAP_TYPE, KernelParam,
                                                     KernelSignature, SignatureError)
from pipeline_core_nvidia_h100.kit.signature import params as kernel_params
from pipeline_core_nvidia_h100.launch_cache import Bounded, current_stream, describe, eager, launch
from pipeline_core_nvidia_h100.machine import (H100_AGENT_MACHINE, H100_SXM,
                                                register_split_refusal)
from pipeline_core_nvidia_h100.runtime import ARCH, KernelBuilder
from pipeline_core_nvidia_h100.runtime import _require as require_gpu_module
from pipeline_core_nvidia_h100.kit.frame import (AgentCode, AgentsFamily, agent_code,
                                                  agents_kernel_body, once_steps)
from pipeline_core_nvidia_h100.kit.rings import RingState, loop_tile, require_ring_depths
from pipeline_core_nvidia_h100.kit.schedule import AgentsSchedule, family_profile
from pipeline_core_nvidia_h100.kit.tiles import (DeviceTileLoop, TileLoop, jagged_tile_loop,
                                                  k_group_tile_loop, linear_tile_loop,
                                                  stream_k_tile_loop)
from pipeline_core_nvidia_h100.kit.wgmma import wgmma_rs, wgmma_ss
from pipeline_core_nvidia_h100.skeleton import (agent_stretches, consumer_branches,
                                                consumer_sync_line, declared_geometry, render,
                                                ring_step_line, role_mark, section_mark)
from pipeline_core_nvidia_h100.sync_skeleton import SkeletonMismatch, check_skeleton
from pipeline_core_nvidia_h100.tma import DTYPE_BFLOAT16, DTYPE_FLOAT16, encode_tiled_2d
from pipeline_core_nvidia_h100.wgmma_sync import (BULK_REDUCE_OPERAND, BULK_TAG_NAMES,
                                                   H100_BULK_REDUCE_SYNC,
                                                   H100_ORDERED_REDUCE_SYNC, H100_WGMMA_SYNC,
                                                   STAGE_OPERAND, TAG_NAMES)

#: the plugin module a family's own plugin host loads beside itself (its target and emitters)
PLUGIN_MODULE = "pipeline_core_nvidia_h100.plugin"

__all__ = [
    # the target
    "TARGET_NAME", "H100_SXM", "H100_AGENT_MACHINE", "H100_WGMMA_SYNC", "TAG_NAMES",
    "register_split_refusal", "WGMMA_TMA",
    "CP_ASYNC_L2_LATENCY", "PLUGIN_MODULE", "AgentsSchedule", "family_profile",
    "H100_BULK_REDUCE_SYNC", "BULK_TAG_NAMES", "STAGE_OPERAND", "BULK_REDUCE_OPERAND",
    "H100_ORDERED_REDUCE_SYNC",
    # the frame, its tile loop, its lines, the wgmma wrappers and the device headers
    "AgentsFamily", "AgentCode", "agent_code", "agents_kernel_body", "once_steps",
    "DeviceTileLoop",
    "TileLoop", "linear_tile_loop", "jagged_tile_loop", "k_group_tile_loop",
    "stream_k_tile_loop",
    "wgmma_ss", "wgmma_rs", "agent_stretches", "consumer_branches", "consumer_sync_line",
    "declared_geometry", "render",
    "RingState", "loop_tile", "require_ring_depths", "ring_step_line", "role_mark",
    "section_mark", "header_source", "pasted",
    "wgmma_header_source", "gemm_call_header_source", "WATCHDOG", "SPLIT_BARRIER",
    "counter_steps",
    # the GEMM's trip rule
    "RasterTrips", "StreamKTrips",
    # the host side
    "KernelBuilder", "ARCH", "cubin_path", "encode_tiled_2d", "DTYPE_BFLOAT16", "DTYPE_FLOAT16",
    "launch", "eager", "describe", "Bounded", "require_gpu_module", "current_stream",
    # a kernel's signature
    "KernelSignature", "KernelParam", "kernel_params", "SignatureError", "TENSOR_MAP_TYPE",
    # the call layer
    "HostCall", "KernelTable", "Built", "Recipe", "Launch", "Op", "load_kernel", "tensor_map",
    "strided_tensor_map", "dense_strides", "sm_count", "register_op", "tma_readable", "tma_copy",
    "split_workspace",
    "BUILD_OPTIONS", "RECIPE_CACHE_SIZE",
    # autotuning
    "Autotuner", "Workload", "TimingModel", "timing_model", "TuneKey", "autotune_enabled",
    "AutotuneError",
    # what a family's tests check
    "check_skeleton", "SkeletonMismatch",
]
