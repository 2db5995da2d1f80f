"""Structural verification: goldens pass, A39/A57/A58 pass, and every rule can fire."""
from __future__ import annotations

import pytest

from pipeline_core.config import ScheduleConfig, WarpStagger
from pipeline_core.errors import VerificationError
from pipeline_core.ops import NONE_OP, KOffset, wait_lgkm, wait_vm
from pipeline_core.program import (RULES, apply_auto_waits, build_kernel_program, check_program,
                                   construct_blocks, derive_waits, redistribute_globals,
                                   verify_program)

from .helpers import (BF16_CSP_ORDER, DB_CASES, IDENTITY_24, bf16_config, built, csp_sched,
                      fp8_config, inputs, pingpong_body_bf16, pingpong_body_fp8)


def patched(program, cfg, lgkm):
    """The reference tests' 'patch waits' pattern."""
    wl, wv = derive_waits(program, cfg, lgkm, lgkm)
    bph = cfg.blocks_per_partition
    blocks = list(program.blocks)
    for h in range(cfg.num_partitions):
        if wl < 255:
            blocks[h * bph] = blocks[h * bph].evolve(pre_sync=wait_lgkm(wl))
        blocks[h * bph + bph - 1] = blocks[h * bph + bph - 1].evolve(pre_sync=wait_vm(wv))
    return program.with_blocks(blocks), wl, wv


def bf16_program():
    cfg = bf16_config(4)
    sched = csp_sched(8)
    program = construct_blocks(pingpong_body_bf16(), BF16_CSP_ORDER, cfg, sched)
    return redistribute_globals(program, cfg, sched), cfg


def fp8_program():
    cfg = fp8_config(4)
    sched = csp_sched(4)
    program = construct_blocks(pingpong_body_fp8(), IDENTITY_24, cfg, sched)
    return redistribute_globals(program, cfg, sched), cfg


@pytest.mark.parametrize("case", DB_CASES)
def test_golden_programs_pass(case):
    kp = built(case)
    _, _, cfg, sched, _ = inputs(case)
    wl, wv = (kp.wait_lgkm_first, kp.wait_vm_last) if sched.auto_waits else (0, 0)
    assert check_program(kp.program, cfg, sched.lgkm_per_load_a, sched.lgkm_per_load_b,
                         wl, wv) == []


def test_verify_schedule_passes_valid():
    # A39 / A57: BF16 program (CSP, auto, lgkm 8/8) + patch pattern with L = 8.
    program, cfg = bf16_program()
    program, wl, wv = patched(program, cfg, 8)
    assert (wl, wv) == (8, 12)
    verify_program(program, cfg, 8, 8, wl, wv)


def test_warp_stagger_safety_fp8_bunched():
    # A58: max_globals 0 so the stagger check runs; bunching puts the prefetches in
    # blocks 2 and 3, so nothing races.
    program, cfg = fp8_program()
    assert [b.num_globals for b in program.blocks] == [1, 0, 2, 1] * 2
    program, wl, wv = patched(program, cfg, 4)
    assert cfg.warp_stagger.enabled and cfg.block_sizing.max_globals == 0
    verify_program(program, cfg, 4, 4, wl, wv)


# --- every rule fires -----------------------------------------------------------------

def _one(findings, rule):
    hits = [f for f in findings if f.rule == rule]
    assert hits, f"{rule} did not fire: {findings}"
    return hits[0]


def _replace(program, i, **changes):
    blocks = list(program.blocks)
    blocks[i] = blocks[i].evolve(**changes)
    return program.with_blocks(blocks)


def test_rule_block_count():
    program, cfg = bf16_program()
    broken = program.with_blocks(program.blocks[:-1])
    with pytest.raises(VerificationError) as exc:
        verify_program(broken, cfg)
    assert exc.value.rule == "block-count"
    assert "expected 8 blocks" in str(exc.value) and "got 7" in str(exc.value)
    assert "exactly 8 COMPUTE ops" in str(exc.value)


def test_rule_block_mma_missing_and_wrong_role():
    program, cfg = bf16_program()
    with pytest.raises(VerificationError) as exc:
        verify_program(_replace(program, 5, mma=NONE_OP), cfg)
    assert (exc.value.rule, exc.value.block, exc.value.partition) == ("block-mma", 5, 1)
    assert "block 5 has no MMA op" in str(exc.value)
    frag = program.blocks[5].pre_op_0
    with pytest.raises(VerificationError) as exc:
        verify_program(_replace(program, 5, mma=frag), cfg)
    assert exc.value.rule == "block-mma" and exc.value.block == 5
    assert "role FRAGMENT_LOAD, expected COMPUTE" in str(exc.value)


def test_rule_wait_bounds():
    program, cfg = bf16_program()
    with pytest.raises(VerificationError) as exc:
        verify_program(program, cfg, 8, 8, 9, 12)
    assert (exc.value.rule, exc.value.block, exc.value.partition) == ("wait-bounds", 0, 0)
    assert "wait_lgkm_first (9) > block 0 global lgkm (8)" in str(exc.value)
    assert "Lower wait_lgkm_first to at most 8" in str(exc.value)
    # skipped when the ScheduleConfig lgkm values are 0 (geometry-driven schedules)
    assert check_program(program, cfg, 0, 0, 9, 12) == []
    # a no-wait value is never bounded
    assert check_program(program, cfg, 8, 8, 255, 12) == []
    with pytest.raises(VerificationError, match="wait_vm_last is negative") as exc:
        verify_program(program, cfg, 8, 8, 8, -1)
    assert exc.value.rule == "wait-bounds"
    with pytest.raises(VerificationError, match="wait_lgkm_first is negative"):
        verify_program(program, cfg, 8, 8, -2, 0)


def test_rule_global_distribution():
    cfg = bf16_config(4)
    bunched = construct_blocks(pingpong_body_bf16(), BF16_CSP_ORDER, cfg, csp_sched(8))
    with pytest.raises(VerificationError) as exc:
        verify_program(bunched, cfg)
    assert (exc.value.rule, exc.value.block, exc.value.partition) == \
        ("global-distribution", 1, 0)
    assert "block 1 has 0 globals, expected 1" in str(exc.value)
    assert "redistribute_globals" in str(exc.value)
    assert [f.block for f in check_program(bunched, cfg) if f.rule == "global-distribution"] == \
        [1, 2, 5, 6]


def test_rule_stage_consistency():
    program, cfg = bf16_program()
    frag = program.blocks[2].pre_op_0
    broken = _replace(program, 2, pre_op_0=frag.evolve(stage=1))
    with pytest.raises(VerificationError) as exc:
        verify_program(broken, cfg)
    assert (exc.value.rule, exc.value.block, exc.value.partition) == ("stage-consistency", 2, 0)
    assert "block 2 pre_op_0" in str(exc.value) and "stage 1, expected 0" in str(exc.value)
    assert "cross_stage_rotation" in str(exc.value)
    # skipped under cross-stage rotation
    assert not [f for f in check_program(broken, cfg.evolve(cross_stage_rotation=True))
                if f.rule == "stage-consistency"]


def test_rule_prefetch_coverage():
    program, cfg = bf16_program()
    broken = program.with_blocks(b.evolve(global_load_prefetch=False, global_load_1_prefetch=False)
                                 for b in program.blocks)
    with pytest.raises(VerificationError) as exc:
        verify_program(broken, cfg)
    assert exc.value.rule == "prefetch-coverage" and exc.value.block is None
    assert "no global load is marked as prefetch" in str(exc.value)
    assert "k_offset" in str(exc.value)


def test_rule_completion_coverage():
    program, cfg = bf16_program()
    kprev = program.blocks[0].global_load
    assert kprev.k_offset == KOffset.K_PREV and kprev.stage == 1
    broken = _replace(program, 0, global_load=kprev.evolve(stage=0))
    with pytest.raises(VerificationError) as exc:
        verify_program(broken, cfg)
    assert (exc.value.rule, exc.value.partition) == ("completion-coverage", 0)
    assert "partition 0 has no completion load (stage != 0)" in str(exc.value)
    assert "race condition" in str(exc.value)


def test_rule_warp_stagger_lds_race():
    program, cfg = fp8_program()
    # move block 2's first load (a stage-0 prefetch) into block 1: block 2 reads stage 0.
    load = program.blocks[2].global_load
    broken = _replace(_replace(program, 2, global_load=program.blocks[2].global_load_1,
                               global_load_1=NONE_OP, global_load_1_prefetch=False),
                      1, global_load=load, global_load_prefetch=True)
    with pytest.raises(VerificationError) as exc:
        verify_program(broken, cfg)
    assert (exc.value.rule, exc.value.block, exc.value.partition) == \
        ("warp-stagger-lds-race", 1, 0)
    assert "block 1 prefetch" in str(exc.value) and "writes stage 0" in str(exc.value)
    assert "block 2 reads" in str(exc.value)
    # the check only runs with warp stagger on and max_globals 0
    assert check_program(broken, cfg.evolve(warp_stagger=WarpStagger.none())) == []


def test_check_program_reports_all_findings_in_rule_order():
    program, cfg = bf16_program()
    broken = _replace(_replace(program, 5, mma=NONE_OP), 2,
                      pre_op_0=program.blocks[2].pre_op_0.evolve(stage=1))
    findings = check_program(broken, cfg, 8, 8, 8, -1)
    assert [f.rule for f in findings] == ["block-mma", "wait-bounds", "stage-consistency"]
    assert [f.rule for f in findings] == sorted((f.rule for f in findings), key=RULES.index)
    with pytest.raises(VerificationError) as exc:
        verify_program(broken, cfg, 8, 8, 8, -1)
    assert exc.value.rule == "block-mma"


def test_build_runs_verification():
    # every load a K_PREV completion load: nothing prefetches, so the build must fail.
    body = tuple(o.evolve(k_offset=KOffset.K_PREV) if o.role == 0 else o
                 for o in pingpong_body_bf16())
    with pytest.raises(VerificationError) as exc:
        build_kernel_program(body, bf16_config(4), ScheduleConfig(), order=BF16_CSP_ORDER)
    assert exc.value.rule == "prefetch-coverage"


def test_manual_waits_pass_zero_to_verification():
    # auto_waits False: verify gets 0/0 even though the kernel carries wait_lgkm(8).
    cfg = bf16_config(4)
    sched = ScheduleConfig(auto_waits=False, lgkm_per_load_a=1, lgkm_per_load_b=1)
    kp = build_kernel_program(pingpong_body_bf16(), cfg, sched, order=BF16_CSP_ORDER)
    assert kp.program.blocks[0].pre_sync == wait_lgkm(8)
    assert check_program(kp.program, cfg, 1, 1, 8, 0)  # 8 > 1 would fail with the manual value


def test_apply_auto_waits_result_verifies():
    program, cfg = bf16_program()
    wl, wv = derive_waits(program, cfg, 8, 8)
    final = apply_auto_waits(program, cfg, csp_sched(8), wl, wv)
    verify_program(final, cfg, 8, 8, wl, wv)
