"""Load the reference's golden files as pipeline-core records (for tests).

The documents live in ``tests/goldens/`` (captured from the reference; their layout is
described in ``docs/document-format.md``).
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from pipeline_core.config import (BlockSizing, FragOrder, LoopCarried, PipelineConfig,
                                  ScheduleConfig, WarpStagger)
from pipeline_core.edges import DepEdge
from pipeline_core.ops import Op

GOLDENS = Path(__file__).resolve().parent / "goldens"
CASES = sorted(p.stem for p in GOLDENS.glob("*.json"))
DOUBLE_BUFFER_CASES = [c for c in CASES if not c.startswith("default_matmul")]
OP_FIELDS = ("tag", "stage", "subtile", "k_offset", "vm_cost", "lgkm_cost", "wait_value",
             "resource", "latency", "role", "channel", "vgpr_def", "vgpr_kill")


@lru_cache(maxsize=None)
def load(case: str) -> dict:
    return json.loads((GOLDENS / f"{case}.json").read_text())


def op_from(d: dict | None) -> Op | None:
    if d is None:
        return None
    return Op(**{k: d[k] for k in OP_FIELDS})


def ops_from(items) -> list[Op]:
    return [op_from(d) for d in items]


def entry_ops(items) -> list[Op]:
    return [op_from(e["op"]) for e in items]


def edges_from(items) -> list[DepEdge]:
    return [DepEdge(e["producer"], e["consumer"], e["kind_value"], e["distance"]) for e in items]


def config_from(d: dict) -> PipelineConfig:
    return PipelineConfig(
        depth=d["depth"], prefetch=d["prefetch"], drain_passes=d["drain_passes"],
        prologue_fill=d["prologue_fill"],
        loop_carried=LoopCarried(d["loop_carried"]["role"], d["loop_carried"]["selector"]),
        block_sizing=BlockSizing(**d["block_sizing"]), frag_order=FragOrder(**d["frag_order"]),
        m_mmas=d["m_mmas"], n_mmas=d["n_mmas"], num_partitions=d["num_partitions"],
        mma_serial=d["mma_serial"], mma_latency=d["mma_latency"],
        vm_per_load_a=d["vm_per_load_a"], vm_per_load_b=d["vm_per_load_b"],
        lgkm_per_load_a=d["lgkm_per_load_a"], lgkm_per_load_b=d["lgkm_per_load_b"],
        ch0_match_field=d["ch0_match_field"], ch1_match_field=d["ch1_match_field"],
        warp_stagger=WarpStagger(**d["warp_stagger"]),
        cross_stage_rotation=d["cross_stage_rotation"])


def schedule_config_from(d: dict) -> ScheduleConfig:
    fields = {k: v for k, v in d.items() if k not in ("scheduling", "scheduling_name")}
    return ScheduleConfig(scheduling=d["scheduling_name"], **fields)
