"""Wait derivation, drain mask and the auto-wait patch
(docs/guide/reference-behaviours.md, "Wait derivation", "Drain mask", "The auto-wait patch"; reference tests A40-A44, A50)."""
from __future__ import annotations

import pytest

from pipeline_core.config import PipelineConfig, ScheduleConfig
from pipeline_core.ops import NONE_OP, FrameworkTag, Phase, wait_lgkm, wait_vm
from pipeline_core.program import (apply_auto_drain, apply_auto_waits, build_kernel_program,
                                   construct_blocks, derive_drain_mask, derive_waits,
                                   redistribute_globals)
from pipeline_core.program.waits import lgkm_cost

from .helpers import (BF16_CSP_ORDER, DB_CASES, bf16_config, built, csp_sched, inputs, load,
                      pingpong_body_bf16)


def bf16_program(sched: ScheduleConfig, vm: int = 4):
    """The reference test helper _build_bf16_program: construct + redistribute, no patch."""
    cfg = bf16_config(vm)
    program = construct_blocks(pingpong_body_bf16(), BF16_CSP_ORDER, cfg, sched)
    return redistribute_globals(program, cfg, sched), cfg


@pytest.mark.parametrize("case", DB_CASES)
def test_derived_waits_and_drain_mask_match_golden(case):
    d = load(case)
    kp = built(case)
    _, _, cfg, sched, _ = inputs(case)
    assert derive_waits(kp.program, cfg, sched.lgkm_per_load_a, sched.lgkm_per_load_b) == \
        (d["wait_lgkm_first"], d["wait_vm_last"])
    assert (kp.wait_lgkm_first, kp.wait_vm_last) == (d["wait_lgkm_first"], d["wait_vm_last"])
    assert kp.waits_applied == d["derived_waits"]["applied"]
    assert derive_drain_mask(kp.program, cfg) == d["derived_drain_mask"]


def test_lgkm_channel_mapping_and_fallback():
    cfg = PipelineConfig()
    assert [lgkm_cost(cfg, ch, 8, 4) for ch in (0, 1, -1, 2)] == [8, 4, 4, 4]
    cfg = PipelineConfig(lgkm_per_load_a=2, lgkm_per_load_b=0)
    assert [lgkm_cost(cfg, ch, 8, 4) for ch in (0, 1)] == [2, 4]


def test_wait_counts_match_block_structure():
    # A44: wait_lgkm == 8 x globals in block 0; wait_vm == half-0 total - completion (16 - 4).
    program, cfg = bf16_program(csp_sched(8))
    wl, wv = derive_waits(program, cfg, 8, 8)
    assert wl == 8 * program.blocks[0].num_globals == 8
    assert wv == 12
    assert 0 <= wl <= 16 and 0 <= wv <= 16


def test_vm_wait_is_the_minimum_over_partitions():
    program, cfg = bf16_program(csp_sched(8))
    # make partition 1 hold an extra same-stage load: its prefetch vm grows, the min stays 12
    b7 = program.blocks[7]
    bigger = program.with_blocks(program.blocks[:7] + (b7.evolve(global_load_1=b7.global_load),))
    assert derive_waits(bigger, cfg, 8, 8)[1] == 12
    smaller = program.with_blocks((program.blocks[0].evolve(global_load=NONE_OP),)
                                  + program.blocks[1:])
    assert derive_waits(smaller, cfg, 8, 8) == (8, 12)  # lgkm: max over partitions


def test_stage_based_completion_symmetric():
    # A50: CSP + auto waits with lgkm 4/4: every half has a completion load and the
    # first two WAIT_VM kernel entries are equal (12).
    cfg = bf16_config(4)
    kp = build_kernel_program(pingpong_body_bf16(), cfg, csp_sched(4), order=BF16_CSP_ORDER)
    bph = cfg.blocks_per_partition
    for h in range(cfg.num_partitions):
        assert any(op.stage != h for b in kp.program.blocks[h * bph:(h + 1) * bph]
                   for op, _ in b.global_loads())
    vms = [e.op.wait_value for e in kp.program.expand(Phase.KERNEL)
           if e.op.tag == FrameworkTag.WAIT_VM]
    assert len(vms) >= 2 and vms[0] == vms[1] == 12
    assert kp.wait_lgkm_first == 4


def test_drain_mask_selective():
    # A40: mask 0b11011101 with CSP + auto waits: blocks 0, 2, 4, 6 drain; 3 and 7 have no frag.
    cfg = bf16_config(4)
    kp = build_kernel_program(pingpong_body_bf16(), cfg, csp_sched(8, drain_lgkm_mask=0b11011101),
                              order=BF16_CSP_ORDER)
    draining = [i for i, b in enumerate(kp.program.blocks) if b.drain_lgkm_before_loads]
    assert draining == [0, 2, 4, 6]
    assert all(i % 4 != 1 for i in draining)
    assert not kp.program.blocks[3].has_frag and not kp.program.blocks[7].has_frag


def test_drain_mask_backward_compat():
    # A41: mask 0xFF, auto_waits False: drains == blocks having both a frag and a global.
    cfg = bf16_config(4)
    sched = ScheduleConfig(scheduling="CSP", auto_waits=False, drain_lgkm_mask=0xFF)
    kp = build_kernel_program(pingpong_body_bf16(), cfg, sched, order=BF16_CSP_ORDER)
    blocks = kp.program.blocks
    assert sum(b.drain_lgkm_before_loads for b in blocks) == \
        sum(b.has_frag and b.has_global for b in blocks) == 6


def test_auto_drain_derivation():
    # A42: bit i set exactly when block i has a frag and a slot-0 global and some frag's
    # channel differs from that global's (actual mask 0b10001).
    program, cfg = bf16_program(csp_sched(8))
    mask = derive_drain_mask(program, cfg)
    assert mask == 0b10001
    for i, b in enumerate(program.blocks):
        expected = (b.has_frag and b.global_load.is_present
                    and any(f.channel != b.global_load.channel for f in b.frags()))
        assert bool(mask >> i & 1) == expected
    drained = apply_auto_drain(program, cfg)
    assert [i for i, b in enumerate(drained.blocks) if b.drain_lgkm_before_loads] == [0, 4]


def test_drain_mask_ignores_channel_minus_one_and_slot_1():
    program, cfg = bf16_program(csp_sched(8))
    b0 = program.blocks[0]
    neutral = b0.evolve(pre_op_0=b0.pre_op_0.evolve(channel=-1))
    assert derive_drain_mask(program.with_blocks((neutral,) + program.blocks[1:]), cfg) & 1 == 0
    slot1_only = b0.evolve(global_load=NONE_OP, global_load_1=b0.global_load)
    assert derive_drain_mask(program.with_blocks((slot1_only,) + program.blocks[1:]), cfg) & 1 == 0


def test_auto_drain_only_with_auto_waits():
    cfg = bf16_config(4)
    on = build_kernel_program(pingpong_body_bf16(), cfg, csp_sched(8, auto_drain=True),
                              order=BF16_CSP_ORDER)
    assert [b.drain_lgkm_before_loads for b in on.program.blocks].count(True) == 2
    off = build_kernel_program(
        pingpong_body_bf16(), cfg,
        ScheduleConfig(auto_waits=False, auto_drain=True, lgkm_per_load_a=8, lgkm_per_load_b=8),
        order=BF16_CSP_ORDER)
    assert not any(b.drain_lgkm_before_loads for b in off.program.blocks)


def test_auto_wait_patch_touches_only_named_slots():
    program, cfg = bf16_program(csp_sched(8))
    sched = csp_sched(8)
    patched = apply_auto_waits(program, cfg, sched, 3, 9)
    for i, (a, b) in enumerate(zip(program.blocks, patched.blocks)):
        if i in (0, 4):
            assert b == a.evolve(pre_sync=wait_lgkm(3))
        elif i in (3, 7):
            assert b == a.evolve(pre_sync=wait_vm(9))
        else:
            assert b == a
    # no-wait lgkm value: block 0 untouched, vm always patched
    skipped = apply_auto_waits(program, cfg, sched, 255, 0)
    assert skipped.blocks[0] == program.blocks[0]
    assert skipped.blocks[3].pre_sync == wait_vm(0)
    # barrier_before_pre_ops forces 0
    bbpo = apply_auto_waits(program, cfg, sched.evolve(barrier_before_pre_ops=True), 3, 9)
    assert bbpo.blocks[0].pre_sync == wait_lgkm(0)


def test_auto_wait_patch_minimal_barriers_uses_entry_wait_lgkm():
    body, order, cfg, sched, _ = inputs("fourwave_fp8")
    program = construct_blocks(body, order, cfg, sched)
    patched = apply_auto_waits(program, cfg, sched, 4, 8)
    assert patched.blocks[0].entry_wait_lgkm == wait_lgkm(4)
    assert patched.blocks[0].pre_sync == NONE_OP
    assert patched.blocks[3].pre_sync == wait_vm(8)
    # without an entry wait the minimal branch does not apply
    no_entry = program.with_blocks((program.blocks[0].evolve(entry_wait=NONE_OP),)
                                   + program.blocks[1:])
    patched = apply_auto_waits(no_entry, cfg, sched, 4, 8)
    assert patched.blocks[0].pre_sync == wait_lgkm(4)
    assert patched.blocks[0].entry_wait_lgkm == wait_lgkm(0)


def test_inputs_are_not_mutated():
    program, cfg = bf16_program(csp_sched(8))
    before = program.blocks
    apply_auto_waits(program, cfg, csp_sched(8), 1, 2)
    apply_auto_drain(program, cfg)
    assert program.blocks is before
