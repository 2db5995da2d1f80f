"""Fixtures for the ping-pong tests: the reference test file's helpers, goldens, the real CLI.

The helpers mirror test_pipeline_ldg.mojo's (_build_ldg, _build_kernel_entries,
_extract_ldg, _validate_c2, _build_bf16_program, _build_fp8_program and the
"patch waits" pattern), built on pipeline-core's public modules.
"""
from __future__ import annotations

from types import SimpleNamespace

import attrs
import pytest

from pipeline_core.config import NO_WAIT, ScheduleConfig
from pipeline_core.costs import annotate
from pipeline_core.ops import OpRole, wait_lgkm, wait_vm

from pipeline_core_amd_mi355x import mi355x_double_buffer, mi355x_target
from pipeline_core_amd_mi355x import testing as mt
from pipeline_core_amd_mi355x.fixtures import cli_json, cli_run, golden  # noqa: F401 (fixtures)
from pipeline_core_schedules_pingpong import PingPongSchedule

DATA_ROLES = (OpRole.GLOBAL_LOAD, OpRole.FRAGMENT_LOAD, OpRole.COMPUTE)
CSP_AUTO = ScheduleConfig(scheduling="CSP", auto_waits=True)


def pp(sched=None, lgkm=(0, 0), target=None, fp8=False) -> PingPongSchedule:
    """DeclarativeSchedule[fp8, lgkm_a, lgkm_b](config=sched, target=target)."""
    return PingPongSchedule(target=target or mi355x_target(),
                            sched=sched if sched is not None else ScheduleConfig(auto_waits=False),
                            is_fp8=fp8, lgkm_per_load_a=lgkm[0], lgkm_per_load_b=lgkm[1])


def compile_pp(schedule):
    from pipeline_core.compiler import compile_schedule

    return compile_schedule(schedule, target_name="mi355x")


def build_ldg():
    """_build_ldg: the declared body (IDENTITY, no auto waits) and its rule-table edges."""
    from pipeline_core.edges import derive_edges

    body = pp().build_body()
    return body, derive_edges(body, mi355x_double_buffer())


def build_kernel_entries(sched=None):
    return compile_pp(pp(sched if sched is not None else ScheduleConfig(auto_waits=False))).kernel


def extract_ldg(kernel):
    """_extract_ldg: the data entries of a kernel, in order, and their rule-table edges."""
    from pipeline_core.edges import derive_edges

    ops = [e.op for e in kernel if e.op.role in DATA_ROLES]
    return ops, derive_edges(ops, mi355x_double_buffer())


def validate_c2(kernel, edges) -> int:
    """_validate_c2: every d=0 FLOW edge points forward in the kernel; returns how many were checked."""
    from pipeline_core.ops import DepKind

    data_idx = [i for i, e in enumerate(kernel) if e.op.role in DATA_ROLES]
    checked = 0
    for e in edges:
        if e.kind == DepKind.FLOW and e.distance == 0:
            assert data_idx[e.consumer] > data_idx[e.producer], e
            checked += 1
    return checked


def build_program(sched, config, body):
    """build_double_buffer_program on the strategy's order (no auto-wait patching)."""
    from pipeline_core.edges import derive_edges
    from pipeline_core.program import construct_blocks, redistribute_globals
    from pipeline_core.scheduling.exhaustive import optimal_schedule_with_halves

    body = annotate(body, mi355x_target().cost_model)
    edges = derive_edges(body, config)
    if sched.scheduling == "CSP":
        order = optimal_schedule_with_halves(body, edges,
                                             max_globals_per_block=config.block_sizing.max_globals)
    else:
        order = list(range(len(body)))
    program = construct_blocks(body, order, config, sched)
    return redistribute_globals(program, config, sched)


def build_bf16_program(sched):
    """_build_bf16_program: target vm 4/4 (max_globals 1), body of [False, 8, 8]."""
    target = mi355x_target(4, 4)
    body = pp(sched, (8, 8), target).build_body()
    return build_program(sched, target.pipeline, body), target.pipeline


def build_fp8_program(sched):
    """_build_fp8_program: config with max_globals 0, body of [True, 4, 4] on the default target."""
    config = mi355x_target(4, 4, max_globals=0).pipeline
    body = pp(sched, (4, 4), mi355x_target(), fp8=True).build_body()
    return build_program(sched, config, body), config


def patch_waits(program, config, lgkm):
    """The reference tests' patch pattern; returns (patched program, (wait_lgkm, wait_vm))."""
    from pipeline_core.program import derive_waits, verify_program

    waits = derive_waits(program, config, lgkm, lgkm)
    bph = config.blocks_per_partition
    blocks = list(program.blocks)
    for h in range(config.num_partitions):
        if waits[0] < NO_WAIT:
            blocks[h * bph] = attrs.evolve(blocks[h * bph], pre_sync=wait_lgkm(waits[0]))
        last = h * bph + bph - 1
        blocks[last] = attrs.evolve(blocks[last], pre_sync=wait_vm(waits[1]))
    program = program.with_blocks(blocks)
    verify_program(program, config, lgkm, lgkm, waits[0], waits[1])
    return program, waits


@pytest.fixture
def ref():
    """The reference test helpers as one namespace."""
    return SimpleNamespace(pp=pp, compile_pp=compile_pp, build_ldg=build_ldg,
                           build_kernel_entries=build_kernel_entries, extract_ldg=extract_ldg,
                           validate_c2=validate_c2, build_bf16_program=build_bf16_program,
                           build_fp8_program=build_fp8_program, patch_waits=patch_waits,
                           CSP_AUTO=CSP_AUTO)


@pytest.fixture
def compile_named():
    """``compile_named(params=..., target_args=..., overrides=...)`` for pingpong."""
    return mt.compiler_for("pingpong")
