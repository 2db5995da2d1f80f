"""What every warp-specialized schedule of a Hopper kernel family says alike: the target as the
family sees it (its own costs on the H100's wgmma sync model and agents machine) and the
schedule protocol's methods that only restate the target and the geometry.  A family then
writes only its body, edges and agents (issue 34: a family is tile math and iteration space)."""
from __future__ import annotations

from typing import Any

from pipeline_core.plugin_api import (CostModel, KernelLaunch, PipelineConfig, SyncModel,
                                      TargetProfile)

from pipeline_core_nvidia_h100.machine import H100_AGENT_MACHINE
from pipeline_core_nvidia_h100.wgmma_sync import H100_WGMMA_SYNC, TAG_NAMES


def family_profile(costs: CostModel, pipeline: PipelineConfig,
                   clock_ghz: float | None, sync: SyncModel = H100_WGMMA_SYNC) -> TargetProfile:
    """The h100 target (its ring depth ``-T stages`` in ``pipeline``, its clock) with a
    family's own op costs, the wgmma sync model (mbarrier rings, wgmma groups, named barriers;
    or a family's extension of it, ``sync``: the attention backward's bulk reduce) and the
    agents machine the timing model runs."""
    return TargetProfile(costs, pipeline, sync=sync, clock_ghz=clock_ghz,
                         agent_machine=H100_AGENT_MACHINE)


class AgentsSchedule:
    """A schedule lowered to agents on :func:`family_profile`'s target, launching kernel family
    :attr:`family` with its :attr:`geometry`; a subclass sets ``name`` and ``family`` and
    gives ``build_body``, ``derive_edges`` and ``agents``."""

    name: str
    family: str

    def __init__(self, target: TargetProfile, geometry: Any) -> None:
        self.target, self.geometry = target, geometry

    def config(self) -> PipelineConfig:
        return self.target.pipeline

    def lowering(self) -> str:
        return "agents"

    def tag_names(self) -> dict[int, str]:
        """The family's tags, then the sync model's (the compiled document's names)."""
        return {**self.target.cost_model.tag_names(), **TAG_NAMES}

    def kernel_launch(self) -> KernelLaunch:
        return KernelLaunch(kernel_family=self.family, geometry=self.geometry)
