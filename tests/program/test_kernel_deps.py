"""kernel_deps_double_buffer
(docs/guide/reference-behaviours.md, "Kernel-entry deps"): goldens and the edge cases of its scan."""
from __future__ import annotations

import pytest

from pipeline_core.config import PipelineConfig
from pipeline_core.ops import (DepKind, Phase, barrier, entries, op, OpRole, ResourceKind,
                               schedule_barrier, set_prio, wait_lgkm, wait_vm)
from pipeline_core.program import kernel_deps_double_buffer

from .helpers import DB_CASES, edges_from, entries_from, inputs, load

MMA = op(5, ResourceKind.MMA_UNIT, 16, OpRole.COMPUTE)
FRAG = op(3, ResourceKind.LDS, 20, OpRole.FRAGMENT_LOAD, channel=0)
ONE = PipelineConfig(num_partitions=1)


def deps(ops, cfg=ONE):
    return [(e.producer, e.consumer) for e in kernel_deps_double_buffer(entries(ops, Phase.KERNEL),
                                                                       cfg)]


@pytest.mark.parametrize("case", DB_CASES)
def test_kernel_deps_match_golden(case):
    d = load(case)
    got = kernel_deps_double_buffer(entries_from(d["kernel"]), inputs(case)[2])
    assert list(got) == edges_from(d["kernel_deps"])
    assert all(e.kind == DepKind.FLOW and e.distance == 0 for e in got)


def test_pingpong_duplicates_are_kept():
    d = load("pingpong_bf16")
    got = [(e.producer, e.consumer) for e in
           kernel_deps_double_buffer(entries_from(d["kernel"]), inputs("pingpong_bf16")[2])]
    assert got == [(3, 7), (3, 7), (7, 16), (16, 24), (38, 42), (38, 42), (42, 51), (51, 59)]


def test_fence_entries_are_not_block_starts():
    # 4-wave: entry 0 is a schedule_barrier (FENCE), so the start is entry 1.
    d = load("fourwave_fp8")
    got = [(e.producer, e.consumer) for e in
           kernel_deps_double_buffer(entries_from(d["kernel"]), inputs("fourwave_fp8")[2])]
    assert got[:4] == [(1, 8), (2, 8), (8, 15), (15, 24)]


def test_sync_after_first_mma_gives_no_start_edge():
    ops = [FRAG, set_prio(1), MMA, barrier(), wait_lgkm(0), MMA, MMA]
    # no SYNC before the first MMA; the lgkm wait after it is still used
    assert deps(ops) == [(4, 2), (2, 5), (5, 6)]


def test_fewer_than_three_mmas_gives_no_chain():
    assert deps([wait_vm(0), FRAG, MMA, barrier(), MMA]) == [(0, 2)]
    assert deps([FRAG, schedule_barrier()]) == []


def test_slices_are_cut_by_count():
    # 7 entries, 2 partitions: slices [0, 3) and [3, 6); entry 6 is never scanned.
    cfg = PipelineConfig(num_partitions=2)
    ops = [barrier(), MMA, FRAG, wait_lgkm(0), MMA, MMA, MMA]
    assert deps(ops, cfg) == [(0, 1), (3, 4), (3, 4)]
