"""BlockSpec template, counters and the minimal-barrier emitter
(docs/guide/reference-behaviours.md, "The block template", "Minimal-barrier block emitter")."""
from __future__ import annotations

import itertools

import pytest

from pipeline_core.ops import (NONE_OP, FrameworkTag, KOffset, Op, OpRole, Phase, ResourceKind,
                               barrier, op, schedule_barrier, set_prio, wait_lgkm, wait_vm)
from pipeline_core.program import (FLAG_NAMES, SLOT_NAMES, BlockSpec, Program,
                                   emit_minimal_barrier_block)

from .helpers import DB_CASES, FOURWAVE_CASES, block_from_golden, load, ops_from

FA = op(3, ResourceKind.LDS, 20, OpRole.FRAGMENT_LOAD, channel=0, subtile=1)
FB = op(4, ResourceKind.LDS, 20, OpRole.FRAGMENT_LOAD, channel=1, subtile=0)
LA = op(0, ResourceKind.GLOBAL_MEM, 200, OpRole.GLOBAL_LOAD, channel=0, k_offset=KOffset.K0)
LB = op(1, ResourceKind.GLOBAL_MEM, 200, OpRole.GLOBAL_LOAD, channel=1, k_offset=KOffset.K_PREV)
MMA = op(5, ResourceKind.MMA_UNIT, 16, OpRole.COMPUTE, stage=1, subtile=1)
MMA2 = op(5, ResourceKind.MMA_UNIT, 16, OpRole.COMPUTE, stage=1, subtile=0)
BAR, SB, L0, P1, P0 = barrier(), schedule_barrier(), wait_lgkm(0), set_prio(1), set_prio(0)


def ops_of(block: BlockSpec) -> list[Op]:
    return [o for o, _ in block.expand()]


def test_defaults_match_reference():
    b = BlockSpec(mma=MMA)
    for name in SLOT_NAMES[1:]:
        assert getattr(b, name) == NONE_OP
    assert b.flags() == {
        "pre_mma_barrier": True, "pre_mma_set_prio": True, "post_mma_barrier": True,
        "post_mma_set_prio": True, "post_barrier_lgkm": True, "post_barrier_sched": False,
        "trailing_sched_barrier": False, "global_load_prefetch": False,
        "global_load_1_prefetch": False, "drain_lgkm_before_loads": False,
        "global_before_frag": False, "barrier_before_pre_ops": False,
        "wrap_waits_with_sched_barrier": False}
    assert tuple(b.flags()) == FLAG_NAMES
    assert ops_of(b) == [BAR, L0, P1, MMA, P0, BAR]


def test_full_template_order():
    b = BlockSpec(mma=MMA, pre_op_0=FB, pre_op_1=FA, global_load=LA, global_load_1=LB,
                  entry_wait=wait_vm(7), entry_wait_lgkm=wait_lgkm(3), pre_sync=wait_lgkm(8),
                  fused_mma=MMA2, post_barrier_sched=True, trailing_sched_barrier=True,
                  drain_lgkm_before_loads=True, global_load_prefetch=True)
    assert ops_of(b) == [wait_vm(7), wait_lgkm(3), BAR, FB, FA, L0, LA, LB, wait_lgkm(8), BAR, SB,
                         L0, P1, MMA, MMA2, P0, BAR, SB]
    # is_prefetch comes from the slot flags, never from k_offset (LB is K_PREV, LA K0).
    flags = [pf for _, pf in b.expand()]
    assert flags == [o == LA for o in ops_of(b)]
    b2 = b.evolve(global_load_prefetch=False, global_load_1_prefetch=True)
    assert [o for o, pf in b2.expand() if pf] == [LB]


def test_global_before_frag_and_drain_position():
    b = BlockSpec(mma=MMA, pre_op_0=FB, global_load=LA, global_before_frag=True,
                  drain_lgkm_before_loads=True)
    assert ops_of(b)[:3] == [LA, L0, FB]
    b = b.evolve(global_before_frag=False)
    assert ops_of(b)[:3] == [FB, L0, LA]


def test_drain_flag_is_emitted_without_a_second_check():
    # docs/guide/reference-behaviours.md, "The block template": the flag alone decides; the builder only sets it with frag + global.
    b = BlockSpec(mma=MMA, drain_lgkm_before_loads=True)
    assert ops_of(b) == [L0, BAR, L0, P1, MMA, P0, BAR]


def test_barrier_before_pre_ops_swaps_sections():
    b = BlockSpec(mma=MMA, pre_op_0=FB, global_load=LA, pre_sync=wait_lgkm(4),
                  entry_wait=wait_vm(2), barrier_before_pre_ops=True)
    assert ops_of(b) == [wait_vm(2), BAR, wait_lgkm(4), BAR, L0, FB, LA, P1, MMA, P0, BAR]


def test_wrap_groups():
    b = BlockSpec(mma=MMA, pre_op_0=FB, entry_wait_lgkm=wait_lgkm(0), pre_sync=wait_vm(3),
                  wrap_waits_with_sched_barrier=True)
    assert ops_of(b) == [SB, L0, SB, FB, SB, wait_vm(3), BAR, L0, SB, P1, MMA, P0, BAR]
    # No entry waits and no sync group: no wrappers at all.
    b = BlockSpec(mma=MMA, pre_mma_barrier=False, wrap_waits_with_sched_barrier=True,
                  pre_mma_set_prio=False, post_mma_set_prio=False, post_mma_barrier=False)
    assert ops_of(b) == [MMA]


def test_flag_gated_ops_depend_on_their_parent_flag():
    # post_barrier_lgkm / post_barrier_sched need pre_mma_barrier; trailing needs post barrier.
    b = BlockSpec(mma=MMA, pre_mma_barrier=False, post_barrier_sched=True,
                  post_mma_barrier=False, trailing_sched_barrier=True)
    assert ops_of(b) == [P1, MMA, P0]


def test_none_mma_placeholder_is_emitted():
    b = BlockSpec(mma=NONE_OP, pre_mma_barrier=False, pre_mma_set_prio=False,
                  post_mma_set_prio=False, post_mma_barrier=False)
    assert ops_of(b) == [NONE_OP]


def test_synthesised_ops_have_default_fields():
    b = BlockSpec(mma=MMA, trailing_sched_barrier=True)
    for o in ops_of(b):
        if o.tag >= 128:
            assert (o.stage, o.subtile, o.k_offset, o.channel, o.latency, o.vm_cost) == \
                (0, 0, KOffset.NONE, -1, 0, 0)
            assert o.resource == ResourceKind.SCALAR
    assert [o for o in ops_of(b) if o.tag == FrameworkTag.SET_PRIO] == [
        Op(tag=131, wait_value=1, resource=ResourceKind.SCALAR, role=OpRole.FENCE),
        Op(tag=131, wait_value=0, resource=ResourceKind.SCALAR, role=OpRole.FENCE)]


_VARIANTS = {
    "entry_wait": [NONE_OP, wait_vm(4)],
    "entry_wait_lgkm": [NONE_OP, wait_lgkm(0)],
    "pre_op_1": [NONE_OP, FA],
    "global_load_1": [NONE_OP, LB],
    "pre_sync": [NONE_OP, wait_lgkm(8)],
    "fused_mma": [NONE_OP, MMA2],
    "pre_mma_barrier": [False, True],
    "post_barrier_sched": [False, True],
    "drain_lgkm_before_loads": [False, True],
    "barrier_before_pre_ops": [False, True],
    "wrap_waits_with_sched_barrier": [False, True],
    "global_before_frag": [False, True],
}


def _all_variants():
    keys = list(_VARIANTS)
    for values in itertools.product(*_VARIANTS.values()):
        yield BlockSpec(mma=MMA, pre_op_0=FB, global_load=LA, **dict(zip(keys, values)))


def test_counters_agree_with_the_expansion():
    for b in _all_variants():
        ops = ops_of(b)
        assert b.entry_count() == len(ops)
        assert ops[b.mma_position()] is MMA
        assert b.num_pre_ops == 1 + b.pre_op_1.is_present
        assert b.num_globals == 1 + b.global_load_1.is_present


def _real_lgkm_position(b: BlockSpec) -> int:
    """The true offset of the post-barrier wait_lgkm(0)."""
    ops = ops_of(b)
    # the barrier right after the (optional) pre_sync in the sync section:
    start = len(b._entry_section()) + (0 if b.barrier_before_pre_ops else len(b._load_section()))
    start += (1 if b._sync_wrapped else 0) + b.pre_sync.is_present
    assert ops[start] == BAR
    pos = start + 1 + (1 if b.post_barrier_sched else 0)
    assert ops[pos] == L0
    return pos


def test_post_barrier_lgkm_position_formula_and_its_off_by_ones():
    for b in _all_variants():
        got = b.post_barrier_lgkm_position()
        if not b.pre_mma_barrier:
            assert got == -1
            continue
        real = _real_lgkm_position(b)
        if b.barrier_before_pre_ops:
            # entry_wait counted once instead of twice (wait + barrier)
            assert got == real - (1 if b.entry_wait.is_present else 0)
        else:
            # both sync-group wrappers counted, although only one precedes the wait
            assert got == real + (1 if b._sync_wrapped else 0)
    assert BlockSpec(mma=MMA, post_barrier_lgkm=False).post_barrier_lgkm_position() == -1


def test_post_barrier_lgkm_position_pingpong_wrap_example():
    # docs/guide/reference-behaviours.md, "The off-by-ones kept for parity":
    # ping-pong block 0 with wrap on reports 7 while the wait sits at 6.
    gb = load("pingpong_bf16")["blocks"][0]
    b = block_from_golden(gb).evolve(wrap_waits_with_sched_barrier=True)
    assert b.post_barrier_lgkm_position() == 7
    assert _real_lgkm_position(b) == 6


@pytest.mark.parametrize("case", DB_CASES)
def test_golden_block_counters_from_golden_slots(case):
    """Counters of blocks rebuilt straight from the golden JSON (independent of construction)."""
    for gb in load(case)["blocks"]:
        b = block_from_golden(gb)
        assert b.num_pre_ops == gb["num_pre_ops"]
        assert b.num_globals == gb["num_globals"]
        assert b.entry_count() == gb["entry_count"]
        assert b.mma_position() == gb["mma_position"]
        assert b.post_barrier_lgkm_position() == gb["post_barrier_lgkm_position"]


@pytest.mark.parametrize("case", ("pingpong_bf16", "pingpong_testcfg_identity_manual_waits"))
def test_golden_template_expansion_matches_kernel_slices(case):
    d = load(case)
    kernel = d["kernel"]
    for gb, start in zip(d["blocks"], d["block_entry_starts"]):
        b = block_from_golden(gb)
        got = b.expand()
        want = kernel[start:start + len(got)]
        assert [o for o, _ in got] == ops_from([e["op"] for e in want])
        assert [pf for _, pf in got] == [e["is_prefetch"] for e in want]


@pytest.mark.parametrize("case", FOURWAVE_CASES)
def test_minimal_barrier_block_matches_golden_explicit_blocks(case):
    d = load(case)
    for gb, want in zip(d["blocks"], d["explicit_blocks"]):
        b = block_from_golden(gb)
        assert emit_minimal_barrier_block(b, wrap_waits=b.wrap_waits_with_sched_barrier) == \
            ops_from(want)


@pytest.mark.parametrize("case", FOURWAVE_CASES)
def test_counters_describe_the_template_not_the_explicit_list(case):
    # docs/guide/reference-behaviours.md, "The off-by-ones kept for parity":
    # golden block 0 of fourwave_fp8 reports entry_count 8 / mma 7,
    # its explicit list is one longer (the frag/global fence).
    d = load(case)
    for gb, explicit in zip(d["blocks"], d["explicit_blocks"]):
        b = block_from_golden(gb)
        assert len(explicit) == b.entry_count() + 1  # each 4-wave block has frag + global
        assert b.entry_count() == gb["entry_count"]


def test_minimal_barrier_block_fences_and_ignored_fields():
    b = BlockSpec(mma=MMA, pre_op_0=FB, global_load=LA, entry_wait=wait_vm(8),
                  pre_sync=wait_vm(6), pre_mma_barrier=True, post_barrier_lgkm=True,
                  fused_mma=MMA2, trailing_sched_barrier=True, drain_lgkm_before_loads=True,
                  post_barrier_sched=True, barrier_before_pre_ops=True, global_before_frag=True)
    assert emit_minimal_barrier_block(b, wrap_waits=False) == [
        wait_vm(8), BAR, FB, SB, LA, wait_vm(6), BAR, L0, MMA]
    assert emit_minimal_barrier_block(b, wrap_waits=True, global_before_frag=True) == [
        SB, wait_vm(8), BAR, SB, LA, SB, FB, SB, wait_vm(6), BAR, L0, SB, MMA]
    # The load fence needs both a frag and a global; closing fences mirror opening ones.
    only_frag = BlockSpec(mma=MMA, pre_op_0=FB, pre_mma_barrier=False)
    assert emit_minimal_barrier_block(only_frag, wrap_waits=True) == [FB, MMA]
    only_lgkm = BlockSpec(mma=MMA, global_load=LA, entry_wait_lgkm=wait_lgkm(0),
                          pre_mma_barrier=False)
    assert emit_minimal_barrier_block(only_lgkm, wrap_waits=True) == [SB, L0, SB, LA, MMA]


def test_program_helpers_with_and_without_explicit_lists():
    a = BlockSpec(mma=MMA, pre_op_0=FB, global_load=LA, global_load_prefetch=True)
    c = BlockSpec(mma=MMA2)
    prog = Program((a, c))
    assert prog.block_entry_counts() == [a.entry_count(), c.entry_count()]
    assert prog.block_start(1) == a.entry_count()
    assert prog.mma_entry(1) == a.entry_count() + c.mma_position()
    ker = prog.expand(Phase.KERNEL)
    assert [e.time_slot for e in ker] == list(range(len(ker)))
    assert {e.phase for e in ker} == {Phase.KERNEL}
    assert [e.op for e in ker if e.is_prefetch] == [LA]

    explicit = prog.with_explicit_blocks([[LA, FB, MMA], []])
    ker = explicit.expand(Phase.KERNEL)
    assert [e.op for e in ker[:3]] == [LA, FB, MMA]
    assert not any(e.is_prefetch for e in ker[:3])  # explicit lists are verbatim, never prefetch
    assert explicit.block_entry_count(0) == 3 and explicit.mma_entry(0) == 2
    assert explicit.total_entries() == 3 + c.entry_count()
    no_mma = prog.with_explicit_blocks([[LA, FB], []])
    assert no_mma.mma_entry(0) == 0  # falls back to the block start
    trailing = Program((a,), trailing_barrier=True)
    assert trailing.expand(Phase.EPILOGUE)[-1].op == BAR
    assert trailing.total_entries() == a.entry_count() + 1
    # all-empty lists mean "no explicit blocks"
    assert prog.with_explicit_blocks([[], []]).explicit_blocks == ()


def test_program_rejects_wrong_number_of_explicit_lists():
    from pipeline_core.errors import ProgramError
    prog = Program((BlockSpec(mma=MMA), BlockSpec(mma=MMA2)))
    with pytest.raises(ProgramError, match="one list per block|exactly one list"):
        prog.with_explicit_blocks([[MMA]])
    with pytest.raises(ProgramError):
        Program((BlockSpec(mma=MMA),), explicit_blocks=[[MMA], [MMA2]])
