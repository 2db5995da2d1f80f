"""Phase derivation: single-buffer recipes, double-buffer prologue/epilogue, warp stagger."""
from __future__ import annotations

import pytest

from golden_data import config_from, edges_from, load, op_from, ops_from, schedule_config_from
from pipeline_core.config import BlockSizing, LoopCarried, PipelineConfig, ScheduleConfig, WarpStagger
from pipeline_core.errors import ProgramError
from pipeline_core.ops import (NONE_OP, Entry, FrameworkTag, KOffset, OpRole, Phase, ResourceKind,
                               barrier, op, schedule_barrier, wait_lgkm, wait_vm)
from pipeline_core.phases import (EPILOGUE_RECIPE, PROLOGUE_RECIPE, PhaseAction, PhaseStep,
                                  apply_phase_recipe, default_epilogue, default_kernel,
                                  default_prologue, derive_epilogue, derive_prologue,
                                  epilogue_blocks, warp_stagger_index)
from pipeline_core.program import BlockSpec, Program, build_kernel_program

DB_CASES = ("pingpong_bf16", "pingpong_testcfg_identity_manual_waits", "fourwave_fp8",
            "fourwave_fp8_bm64")
SB_CASES = ("default_matmul", "default_matmul_t1")
BF16_CSP_ORDER = (0, 1, 2, 3, 4, 6, 7, 5, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 17, 20, 21,
                  22, 23)


def entries_from(items):
    return [Entry(op_from(e["op"]), e["time_slot"], e["phase"], e["is_prefetch"]) for e in items]


def db_inputs(case):
    d = load(case)
    return (ops_from(d["body"]), d["scheduler"]["order"], config_from(d["config"]),
            schedule_config_from(d["schedule_config"]), edges_from(d["edges"]))


def db_program(case):
    body, order, cfg, sched, edges = db_inputs(case)
    return build_kernel_program(body, cfg, sched, edges, order=order).program, cfg, sched


def sb_inputs(case):
    d = load(case)
    return ops_from(d["body"]), config_from(d["config"])


# --- single-buffer recipes --------------------------------------------------------------

def test_recipe_structure():
    # B15 / B16 / A38-style counts.
    assert len(PROLOGUE_RECIPE) == 6
    assert len(EPILOGUE_RECIPE) == 10
    assert [s.action for s in PROLOGUE_RECIPE] == [PhaseAction.EMIT, PhaseAction.EMIT,
                                                   PhaseAction.BARRIER, PhaseAction.EMIT,
                                                   PhaseAction.EMIT, PhaseAction.FENCE]
    assert PROLOGUE_RECIPE[4].match_lc_only and not PROLOGUE_RECIPE[4].match_all
    assert EPILOGUE_RECIPE[1].exclude_lc and EPILOGUE_RECIPE[1].match_all
    assert all(s.match_subtile == -1 for s in PROLOGUE_RECIPE + EPILOGUE_RECIPE)


@pytest.mark.parametrize("case", SB_CASES)
def test_single_buffer_phases_match_golden(case):
    d = load(case)
    body, cfg = sb_inputs(case)
    assert list(default_prologue(body, cfg)) == entries_from(d["prologue"])
    assert list(default_epilogue(body, cfg)) == entries_from(d["epilogue"])
    # the golden kernel is the body plus hints appended later by a plugin
    assert list(default_kernel(body, cfg)) == entries_from(d["kernel"])[:len(body)]
    assert warp_stagger_index(cfg, body, len(default_prologue(body, cfg))) == \
        d["warp_stagger_index"] == 7


def test_phase_recipe_prologue():
    # A36
    body, cfg = sb_inputs("default_matmul")
    pro = apply_phase_recipe(body, PROLOGUE_RECIPE, cfg, Phase.PROLOGUE)
    assert len(pro) == 6
    assert [e.op.role for e in pro[:5]] == [OpRole.GLOBAL_LOAD, OpRole.SHARED_STORE, OpRole.SYNC,
                                            OpRole.GLOBAL_LOAD, OpRole.FRAGMENT_LOAD]
    assert pro[4].op.subtile == cfg.loop_carried.selector == 0
    assert pro[0] == Entry(pro[3].op, 0, Phase.PROLOGUE, False)  # the same first load twice
    assert all(not e.is_prefetch for e in pro)
    assert [e.time_slot for e in pro] == list(range(6))


def test_phase_recipe_epilogue():
    # A37
    body, cfg = sb_inputs("default_matmul")
    epi = apply_phase_recipe(body, EPILOGUE_RECIPE, cfg, Phase.EPILOGUE)
    assert len(epi) == 13
    assert epi[0].op.tag >= 128
    assert epi[1].op.role == OpRole.FRAGMENT_LOAD and epi[1].op.subtile != 0
    assert epi[2].op.role == OpRole.SYNC and epi[7].op.role == OpRole.SYNC
    assert [e.op.subtile for e in epi[8:10]] == [1, 0]  # body order decides "all" matches


def _sb_body(t: int):
    load_ = op(0, ResourceKind.GLOBAL_MEM, 200, OpRole.GLOBAL_LOAD, channel=0)
    store = op(1, ResourceKind.LDS, 20, OpRole.SHARED_STORE, channel=0)
    frags = [op(2, ResourceKind.LDS, 20, OpRole.FRAGMENT_LOAD, channel=0, subtile=i)
             for i in range(t)]
    comps = [op(3, ResourceKind.MMA_UNIT, 64, OpRole.COMPUTE, subtile=i) for i in range(t)]
    return [load_, store, barrier()] + frags + comps


@pytest.mark.parametrize("t", [1, 2, 4])
def test_epilogue_length_is_4t_plus_5(t):
    cfg = PipelineConfig(depth=1, num_partitions=1, loop_carried=LoopCarried.fragment_zero())
    assert len(default_epilogue(_sb_body(t), cfg)) == 4 * t + 5
    assert len(default_prologue(_sb_body(t), cfg)) == 6


def test_emit_step_without_match_emits_nothing():
    cfg = PipelineConfig(depth=1, num_partitions=1)
    body = [op(3, ResourceKind.MMA_UNIT, 64, OpRole.COMPUTE, subtile=1)]
    pro = default_prologue(body, cfg)
    assert [e.op for e in pro] == [barrier(), schedule_barrier()]
    step = PhaseStep.emit(OpRole.COMPUTE, subtile=0)
    assert apply_phase_recipe(body, [step], cfg, Phase.KERNEL) == ()
    assert len(apply_phase_recipe(body, [PhaseStep.emit(OpRole.COMPUTE, subtile=1)], cfg,
                                  Phase.KERNEL)) == 1


# --- double-buffer prologue ----------------------------------------------------------------

@pytest.mark.parametrize("case", DB_CASES)
def test_prologue_matches_golden(case):
    d = load(case)
    program, cfg, sched = db_program(case)
    boot = ops_from(d["bootstrap_frags"])
    assert list(derive_prologue(program, cfg, sched, boot)) == entries_from(d["prologue"])


@pytest.mark.parametrize("case", DB_CASES)
def test_epilogue_matches_golden(case):
    d = load(case)
    program, cfg, _ = db_program(case)
    assert list(derive_epilogue(program, cfg)) == entries_from(d["epilogue"])


@pytest.mark.parametrize("case", DB_CASES)
def test_warp_stagger_matches_golden(case):
    d = load(case)
    body, _, cfg, _, _ = db_inputs(case)
    assert warp_stagger_index(cfg, body, len(d["prologue"])) == d["warp_stagger_index"]


def _pingpong(vm=4, max_globals=1, order=BF16_CSP_ORDER, lgkm=8):
    body, _, cfg, _, _ = db_inputs("pingpong_bf16")
    cfg = cfg.evolve(vm_per_load_a=vm, vm_per_load_b=vm, block_sizing=BlockSizing(4, 2, max_globals))
    if max_globals == 0:  # the FP8 body is the BF16 body in its greedy order
        body = [body[i] for i in BF16_CSP_ORDER]
        order = tuple(range(24))
    sched = ScheduleConfig(scheduling="CSP", auto_waits=True, lgkm_per_load_a=lgkm,
                           lgkm_per_load_b=lgkm)
    return build_kernel_program(body, cfg, sched, order=order).program, cfg


def test_prologue_from_program_structure():
    # A45: the default ScheduleConfig for the prologue: 7 loads, 2 wait_vm, 1 barrier.
    program, cfg = _pingpong()
    pro = derive_prologue(program, cfg, ScheduleConfig())
    assert sum(e.op.role == OpRole.GLOBAL_LOAD for e in pro) == 7
    assert sum(e.op.tag == FrameworkTag.WAIT_VM for e in pro) == 2
    assert sum(e.op.tag == FrameworkTag.BARRIER for e in pro) == 1
    assert all(e.op.channel == -1 for e in pro)  # the channel is not copied


def test_prologue_from_program_entry_count():
    # A46: BF16 and FP8 both give 10 entries.
    for program, cfg in (_pingpong(), _pingpong(max_globals=0, lgkm=4)):
        assert len(derive_prologue(program, cfg, ScheduleConfig())) == 10


def test_prologue_loads_are_fresh_ops():
    program, cfg = _pingpong(vm=3)
    cfg = cfg.evolve(vm_per_load_b=5)
    pro = derive_prologue(program, cfg, ScheduleConfig())
    loads = [e.op for e in pro if e.op.role == OpRole.GLOBAL_LOAD]
    assert [o.k_offset for o in loads] == [KOffset.K0] * 4 + [KOffset.K1] * 3
    assert [o.stage for o in loads] == [0] * 4 + [1] * 3
    assert all(o.channel == -1 and o.vgpr_def == 0 and o.lgkm_cost == 0 for o in loads)
    # vm_cost from the original channel: LB LA LB LA | LB LA LB (BF16 production order)
    assert [o.tag for o in loads] == [1, 0, 1, 0, 1, 0, 1]
    assert [o.vm_cost for o in loads] == [5, 3, 5, 3, 5, 3, 5]
    assert not any(e.is_prefetch for e in pro)


def test_partial_drain_without_bootstrap_emits_only_loads():
    program, cfg, sched = db_program("fourwave_fp8")
    pro = derive_prologue(program, cfg, sched)
    assert len(pro) == 8 and all(e.op.role == OpRole.GLOBAL_LOAD for e in pro)


def test_bootstrap_frags_ignored_without_partial_drain():
    program, cfg, sched = db_program("fourwave_fp8")
    boot = ops_from(load("fourwave_fp8")["bootstrap_frags"])
    pro = derive_prologue(program, cfg, sched.evolve(partial_prologue_drain=False), boot)
    assert len(pro) == 8 + 3 and not any(e.op in boot for e in pro)


def test_bootstrap_waits_are_per_load():
    # docs/guide/reference-behaviours.md, "Bootstrap waits":
    # vm 2/4 gives 22 then 18 (total 24 - vm_a - vm_b).
    program, cfg, sched = db_program("fourwave_fp8")
    cfg = cfg.evolve(vm_per_load_b=4)
    boot = ops_from(load("fourwave_fp8")["bootstrap_frags"])
    pro = derive_prologue(program, cfg, sched, boot)
    waits = [e.op.wait_value for e in pro if e.op.tag == FrameworkTag.WAIT_VM]
    assert waits == [22, 18]
    assert [e.op for e in pro[-6:]] == [wait_vm(22), barrier(), boot[0], wait_vm(18), barrier(),
                                        boot[1]]


def test_more_bootstrap_frags_than_prefetches_is_an_error():
    program, cfg, sched = db_program("fourwave_fp8")
    frag = ops_from(load("fourwave_fp8")["bootstrap_frags"])[0]
    with pytest.raises(ProgramError, match="9 bootstrap frags but only 8 prologue prefetch"):
        derive_prologue(program, cfg, sched, [frag] * 9)


# --- double-buffer epilogue ---------------------------------------------------------------------

def test_pingpong_epilogue_lengths():
    # docs/guide/reference-behaviours.md, "Ping-pong":
    # 58 entries with max_globals 1, 57 with max_globals 0.
    program, cfg = _pingpong()
    epi = derive_epilogue(program, cfg)
    assert len(epi) == 58
    assert epi[32].op == wait_vm(0)  # half 1 drains from its block 0
    assert epi[-1].op == barrier()
    program, cfg = _pingpong(max_globals=0, lgkm=4)
    assert len(derive_epilogue(program, cfg)) == 57


def test_epilogue_block_fields():
    program, cfg = _pingpong()
    blocks = epilogue_blocks(program, cfg)
    assert len(blocks) == 6  # block 3 fused into 2, block 7 into 6
    assert blocks[2].fused_mma == program.blocks[3].mma
    assert blocks[5].fused_mma == program.blocks[7].mma
    for b in blocks:
        assert b.entry_wait_lgkm == wait_lgkm(0) and b.entry_wait == NONE_OP
        assert not (b.global_load_prefetch or b.global_load_1_prefetch or b.trailing_sched_barrier
                    or b.drain_lgkm_before_loads or b.wrap_waits_with_sched_barrier)
    # half 0: only the K_PREV load survives, in block 0, and no vm drain there
    assert blocks[0].global_load.k_offset == KOffset.K_PREV and blocks[0].pre_sync == NONE_OP
    assert [b.pre_sync for b in blocks] == [NONE_OP, wait_vm(0), wait_vm(0), wait_vm(0),
                                            wait_vm(0), NONE_OP]


def _mma(i):
    return op(5, ResourceKind.MMA_UNIT, 16, OpRole.COMPUTE, subtile=i)


def test_epilogue_fusion_does_not_chain_or_cross_partitions():
    frag = op(3, ResourceKind.LDS, 20, OpRole.FRAGMENT_LOAD, channel=0)
    cfg = PipelineConfig(m_mmas=1, n_mmas=3, num_partitions=2)
    part0 = [BlockSpec(mma=_mma(0), pre_op_0=frag), BlockSpec(mma=_mma(1)),
             BlockSpec(mma=_mma(2))]
    part1 = [BlockSpec(mma=_mma(3)), BlockSpec(mma=_mma(4), pre_op_0=frag),
             BlockSpec(mma=_mma(5), pre_op_1=frag)]  # pre_op_1 alone does not stop fusion
    blocks = epilogue_blocks(Program(part0 + part1), cfg)
    assert [(b.mma.subtile, b.fused_mma.subtile if b.fused_mma.is_present else None)
            for b in blocks] == [(0, 1), (2, None), (3, None), (4, 5)]
    # the last output block loses its pre_sync even when fused
    assert blocks[-1].pre_sync == NONE_OP


def test_epilogue_ignores_explicit_blocks():
    program, cfg, _ = db_program("fourwave_fp8")
    explicit = program.with_explicit_blocks([[b.mma] for b in program.blocks])
    assert derive_epilogue(explicit, cfg) == derive_epilogue(program, cfg)
    assert len(derive_epilogue(program, cfg)) == 32


# --- warp stagger -----------------------------------------------------------------------------

def test_warp_stagger_rules():
    body, _, cfg, _, _ = db_inputs("pingpong_bf16")
    assert warp_stagger_index(cfg, body, 10) == 4
    assert warp_stagger_index(cfg.evolve(warp_stagger=WarpStagger.none()), body, 10) == 11
    assert warp_stagger_index(cfg.evolve(warp_stagger=WarpStagger.fixed(3)), body, 10) == 3
    # counts body ops, not program slots: a K_PREV or stage-1 load never counts
    assert sum(1 for o in body if o.role == OpRole.GLOBAL_LOAD) == 8
