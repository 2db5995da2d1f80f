"""Block construction and redistribution
(docs/guide/reference-behaviours.md, "Double-buffer block construction", "Global-load redistribution") against the goldens."""
from __future__ import annotations

import pytest

from pipeline_core.config import BlockSizing, PipelineConfig, ScheduleConfig
from pipeline_core.errors import ProgramError
from pipeline_core.ops import (NONE_OP, KOffset, OpRole, ResourceKind, barrier, op,
                               schedule_barrier, wait_lgkm, wait_vm)
from pipeline_core.program import (SLOT_NAMES, apply_auto_waits, construct_blocks, derive_waits,
                                   main_wait_vm, redistribute_globals)

from .helpers import (BF16_CSP_ORDER, DB_CASES, inputs, load, pingpong_body_bf16, slot)


def assert_blocks_equal_golden(program, golden_blocks, *, skip_slots=()):
    """Compare every slot, flag and counter of every block with the golden."""
    assert len(program.blocks) == len(golden_blocks)
    for gb, b in zip(golden_blocks, program.blocks):
        i = gb["index"]
        for name in SLOT_NAMES:
            if name not in skip_slots:
                assert getattr(b, name) == slot(gb[name]), (i, name)
        assert b.flags() == gb["flags"], i
        assert b.num_pre_ops == gb["num_pre_ops"], i
        assert b.num_globals == gb["num_globals"], i
        if not skip_slots:
            assert b.entry_count() == gb["entry_count"], i
            assert b.mma_position() == gb["mma_position"], i
            assert b.post_barrier_lgkm_position() == gb["post_barrier_lgkm_position"], i


@pytest.mark.parametrize("case", DB_CASES)
def test_main_wait_vm_matches_golden(case):
    body, order, cfg, _, _ = inputs(case)
    assert main_wait_vm(body, order, cfg) == load(case)["main_wait_vm"]


@pytest.mark.parametrize("case", DB_CASES)
def test_construct_redistribute_waits_match_golden_blocks(case):
    body, order, cfg, sched, _ = inputs(case)
    d = load(case)
    program = redistribute_globals(construct_blocks(body, order, cfg, sched), cfg, sched)
    wl, wv = derive_waits(program, cfg, sched.lgkm_per_load_a, sched.lgkm_per_load_b)
    assert (wl, wv) == (d["wait_lgkm_first"], d["wait_vm_last"])
    if sched.auto_waits:
        program = apply_auto_waits(program, cfg, sched, wl, wv)
    assert_blocks_equal_golden(program, d["blocks"])


@pytest.mark.parametrize("case", DB_CASES)
def test_block_slots_hold_body_ops_unchanged(case):
    body, order, cfg, sched, _ = inputs(case)
    program = construct_blocks(body, order, cfg, sched)
    data = [o for b in program.blocks for o in (b.pre_op_0, b.pre_op_1, b.global_load,
                                                 b.global_load_1, b.mma) if o.is_present]
    assert sorted(map(repr, data)) == sorted(map(repr, body))


def test_pingpong_redistribution_walkthrough():
    # docs/guide/reference-behaviours.md, "Ping-pong":
    # the greedy order leaves block 1 empty and block 2
    # with two loads; redistribution moves LB[s0,0] (slot 1 of block 2) into block 1.
    body, order, cfg, sched, _ = inputs("pingpong_bf16")
    built = construct_blocks(body, order, cfg, sched)
    assert [b.num_globals for b in built.blocks] == [1, 0, 2, 1, 1, 0, 2, 1]
    lb = built.blocks[2].global_load_1
    assert (lb.tag, lb.stage, lb.subtile) == (1, 0, 0)
    moved = redistribute_globals(built, cfg, sched)
    assert [b.num_globals for b in moved.blocks] == [1] * 8
    assert moved.blocks[1].global_load == lb and moved.blocks[1].global_load_prefetch
    assert moved.blocks[2].global_load_1 == NONE_OP
    assert not moved.blocks[2].global_load_1_prefetch
    assert moved.blocks[5].global_load == built.blocks[6].global_load_1


def test_construction_uses_manual_waits_before_patching():
    body, order, cfg, sched, _ = inputs("pingpong_bf16")
    program = construct_blocks(body, order, cfg, sched.evolve(wait_lgkm_first=5, wait_vm_last=3))
    assert program.blocks[0].pre_sync == wait_lgkm(5)
    assert program.blocks[3].pre_sync == wait_vm(3)
    assert not program.blocks[3].post_barrier_lgkm
    assert [b.trailing_sched_barrier for b in program.blocks] == [True, False] * 4
    assert not program.trailing_barrier
    keep = construct_blocks(body, order, cfg, sched.evolve(lgkm_after_last=True))
    assert keep.blocks[3].post_barrier_lgkm


def test_fourwave_entry_waits_and_flags():
    body, order, cfg, sched, _ = inputs("fourwave_fp8")
    main = main_wait_vm(body, order, cfg)
    assert main == 8
    blocks = construct_blocks(body, order, cfg, sched).blocks
    # block 0: top drain (cross frags later in the partition); block 2: first cross-stage.
    assert [b.entry_wait for b in blocks[:4]] == [wait_vm(8), NONE_OP, wait_vm(8), NONE_OP]
    assert [b.entry_wait_lgkm for b in blocks[:4]] == [wait_lgkm(0)] * 3 + [NONE_OP]
    assert [b.pre_sync for b in blocks[:4]] == [NONE_OP] * 3 + [wait_vm(sched.wait_vm_last)]
    for b in blocks:
        assert not (b.pre_mma_barrier or b.pre_mma_set_prio or b.post_mma_barrier
                    or b.post_mma_set_prio or b.post_barrier_lgkm)


def test_minimal_barriers_set_prio_only_on_first_and_cross_blocks():
    body, order, cfg, sched, _ = inputs("fourwave_fp8")
    blocks = construct_blocks(body, order, cfg, sched.evolve(omit_mma_set_prio=False)).blocks
    assert [b.pre_mma_set_prio for b in blocks] == [True, False, True, False] * 2


def test_block0_falls_through_when_wait_lgkm_first_is_no_wait():
    # docs/guide/reference-behaviours.md, "Double-buffer block construction":
    # wait_lgkm_first >= 255 lets block 0 reach the inter-block drain case.
    body, order, cfg, sched, _ = inputs("pingpong_bf16")
    s = sched.evolve(wait_lgkm_first=255, inter_block_lgkm_drain=True)
    program = construct_blocks(body, order, cfg, s)
    assert program.blocks[0].entry_wait_lgkm == wait_lgkm(0)
    assert program.blocks[0].pre_sync == NONE_OP
    # and the auto-wait patch then adds pre_sync without touching entry_wait_lgkm (8.9)
    wl, wv = derive_waits(program, cfg, s.lgkm_per_load_a, s.lgkm_per_load_b)
    patched = apply_auto_waits(program, cfg, s, wl, wv)
    assert patched.blocks[0].entry_wait_lgkm == wait_lgkm(0)
    assert patched.blocks[0].pre_sync == wait_lgkm(wl)


# --- a tiny body with one block per partition
# (docs/guide/reference-behaviours.md, "Double-buffer block construction") ---

def _mk(tag, role, res, lat, **kw):
    return op(tag, res, lat, role, **kw)


def _frag(stage, ch=0, sub=0):
    return _mk(3 + ch, OpRole.FRAGMENT_LOAD, ResourceKind.LDS, 20, channel=ch, stage=stage,
               subtile=sub)


def _load(stage, ch=0, sub=0, k=KOffset.K0):
    return _mk(ch, OpRole.GLOBAL_LOAD, ResourceKind.GLOBAL_MEM, 200, channel=ch, stage=stage,
               subtile=sub, k_offset=k)


def _mma(row=0, col=0):
    return _mk(5, OpRole.COMPUTE, ResourceKind.MMA_UNIT, 16, stage=row, subtile=col)


ONE_BY_ONE = PipelineConfig(m_mmas=1, n_mmas=1, vm_per_load_a=2, vm_per_load_b=3)


def test_one_block_per_partition():
    body = (_frag(0), _load(1, k=KOffset.K_PREV), _mma(), _frag(1, ch=1), _load(0, ch=1), _mma())
    sched = ScheduleConfig()
    program = construct_blocks(body, range(6), ONE_BY_ONE, sched)
    assert [b.pre_sync for b in program.blocks] == [wait_lgkm(8), wait_lgkm(8)]
    wl, wv = derive_waits(program, ONE_BY_ONE)
    patched = apply_auto_waits(program, ONE_BY_ONE, sched, wl, wv)
    assert [b.pre_sync for b in patched.blocks] == [wait_vm(wv)] * 2
    assert main_wait_vm(body, range(6), ONE_BY_ONE) == 3 - 3 // 2


# --- rejected bodies ---------------------------------------------------------------------

PP = PipelineConfig(m_mmas=1, n_mmas=2, num_partitions=1)  # 2 blocks


def _construct(body, cfg=PP):
    return construct_blocks(body, range(len(body)), cfg, ScheduleConfig())


def test_third_frag_in_a_block_is_an_error():
    body = (_frag(0), _frag(0, ch=1), _frag(0, sub=1), _mma(), _mma(col=1))
    with pytest.raises(ProgramError, match="block 0 would hold 3 fragment loads") as exc:
        _construct(body)
    assert exc.value.block == 0 and exc.value.ops == (0, 1, 2)
    assert "#2 OP3(role FRAGMENT_LOAD, stage 0, sub 1" in str(exc.value)


def test_third_global_in_a_block_is_an_error():
    body = (_mma(), _load(0), _load(0, ch=1), _frag(0), _load(0, sub=1), _mma(col=1))
    with pytest.raises(ProgramError, match="block 1 would hold 3 global loads") as exc:
        _construct(body)
    assert exc.value.block == 1 and exc.value.ops == (1, 2, 4)


@pytest.mark.parametrize("intruder", [barrier(), wait_vm(0), schedule_barrier(),
                                      _mk(7, OpRole.SHARED_STORE, ResourceKind.LDS, 20),
                                      _mk(8, OpRole.VALU_COMPUTE, ResourceKind.VALU, 4)])
def test_other_roles_are_rejected(intruder):
    body = (_frag(0), _mma(), intruder, _mma(col=1))
    with pytest.raises(ProgramError, match=f"role {intruder.role.name}") as exc:
        _construct(body)
    assert exc.value.block == 1 and exc.value.ops == (2,)
    assert "cannot hold" in str(exc.value)


def test_block_without_mma_is_an_error():
    body = (_frag(0), _mma(), _load(0))
    with pytest.raises(ProgramError, match="block 1 has no MMA") as exc:
        _construct(body)
    assert exc.value.block == 1 and exc.value.ops == (2,)
    with pytest.raises(ProgramError, match="block 1 has no MMA"):
        _construct((_mma(),))


def test_ops_left_after_the_last_block_are_an_error():
    body = (_mma(), _mma(col=1), _frag(0), _mma())
    with pytest.raises(ProgramError, match="2 ops are left after the last block") as exc:
        _construct(body)
    assert exc.value.block == 1 and exc.value.ops == (2, 3)


def test_errors_name_body_indices_through_the_order():
    body = (_mma(), _frag(0), _frag(0), _frag(0), _mma())
    with pytest.raises(ProgramError) as exc:
        construct_blocks(body, (0, 3, 2, 1, 4), PP, ScheduleConfig())
    assert exc.value.block == 1 and exc.value.ops == (3, 2, 1)


# --- redistribution --------------------------------------------------------------------------

def _redistribute_case():
    cfg = PipelineConfig(block_sizing=BlockSizing(4, 2, 1))
    body = pingpong_body_bf16()
    return body, cfg


def test_redistribution_noop_without_cap():
    body, order, cfg, sched, _ = inputs("fourwave_fp8")
    program = construct_blocks(body, order, cfg, sched)
    assert redistribute_globals(program, cfg, sched) is program


def test_redistribution_fifo_across_partitions_and_drain_recompute():
    body, cfg = _redistribute_case()
    order = BF16_CSP_ORDER  # globals per block [1, 0, 2, 1, 1, 0, 2, 1]
    sched = ScheduleConfig(drain_lgkm_mask=0b10)
    program = construct_blocks(body, order, cfg, sched)
    assert not program.blocks[1].drain_lgkm_before_loads  # no global yet
    moved = redistribute_globals(program, cfg, sched)
    assert moved.blocks[1].drain_lgkm_before_loads  # recomputed in pass 2 (frag + global)
    # Pool order: block 2 slot 1, block 6 slot 1 -> block 1 then block 5.
    assert moved.blocks[1].global_load == program.blocks[2].global_load_1
    assert moved.blocks[5].global_load == program.blocks[6].global_load_1


def test_redistribution_may_move_a_load_into_an_earlier_partition():
    # docs/guide/reference-behaviours.md, "Global-load redistribution":
    # pass 2 restarts at block 0, so a pooled partition-1 load can land in
    # partition 0. Moving M11 (index 11) before LB[s0,1] (index 10) empties block 3 and
    # gives block 4 two loads.
    body, cfg = _redistribute_case()
    order = tuple(range(10)) + (11, 10) + tuple(range(12, 24))
    sched = ScheduleConfig()
    program = construct_blocks(body, order, cfg, sched)
    assert [b.num_globals for b in program.blocks] == [1, 1, 1, 0, 2, 1, 1, 1]
    moved = redistribute_globals(program, cfg, sched)
    assert [b.num_globals for b in moved.blocks] == [1] * 8
    assert moved.blocks[3].global_load == body[14]  # LA[s0,1] from block 4, slot 1
    assert moved.blocks[3].global_load_prefetch
    assert moved.blocks[4].global_load == body[10] and not moved.blocks[4].global_load_1_prefetch


def test_redistribution_prefetch_flag_follows_the_load():
    body, cfg = _redistribute_case()
    order = BF16_CSP_ORDER
    program = construct_blocks(body, order, cfg, ScheduleConfig())
    # Swap block 2's loads so the pooled load is a K_PREV one: its flag must become False.
    b2 = program.blocks[2]
    kprev = body[2]
    assert kprev.k_offset == KOffset.K_PREV
    program = program.with_blocks(program.blocks[:2] + (b2.evolve(global_load_1=kprev,
                                                                   global_load_1_prefetch=False),)
                                  + program.blocks[3:])
    moved = redistribute_globals(program, cfg, ScheduleConfig())
    assert moved.blocks[1].global_load == kprev and not moved.blocks[1].global_load_prefetch
