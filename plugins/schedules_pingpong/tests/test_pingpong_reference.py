"""The reference's ping-pong assertions (docs/guide/reference-behaviours.md, "The reference's own tests":
test_pipeline_ldg.mojo tests 5-10, 21,
25, 29-32, 39-46, 50, 52, 57, 58), on pipeline-core and this plugin."""
from __future__ import annotations

from collections import Counter

import pytest

from pipeline_core.config import ScheduleConfig
from pipeline_core.ops import DepKind, FrameworkTag, KOffset, OpRole, Phase, ResourceKind

from pipeline_core_amd_mi355x import DoubleBufferTag as T
from pipeline_core_amd_mi355x import mi355x_cost_model, mi355x_double_buffer, mi355x_target
from pipeline_core_schedules_pingpong import PingPongSchedule, logical_half


def _globals(b):
    """(op, is_prefetch) of a block's present global slots (slot order)."""
    return [(o, pf) for o, pf in ((b.global_load, b.global_load_prefetch),
                                  (b.global_load_1, b.global_load_1_prefetch)) if o.is_present]


def role_counts(ops):
    return Counter(o.role for o in ops)


def kind_distance_counts(edges):
    flow0 = sum(1 for e in edges if e.kind == DepKind.FLOW and e.distance == 0)
    flow1 = sum(1 for e in edges if e.kind == DepKind.FLOW and e.distance >= 1)
    anti = sum(1 for e in edges if e.kind == DepKind.ANTI)
    return flow0, flow1, anti


def test_pp_extract_ldg(ref):
    """Test 5."""
    from pipeline_core.graph import validate

    ops, edges = ref.extract_ldg(ref.build_kernel_entries())
    validate(ops, edges)
    assert len(ops) == 24
    rc = role_counts(ops)
    assert (rc[OpRole.GLOBAL_LOAD], rc[OpRole.FRAGMENT_LOAD], rc[OpRole.COMPUTE]) == (8, 8, 8)
    assert len(edges) == 54
    assert kind_distance_counts(edges) == (22, 18, 14)


def test_interleaved_ldg_asap(ref):
    """Test 6."""
    from pipeline_core.graph import asap_times

    ops, edges = ref.extract_ldg(ref.build_kernel_entries())
    asap = asap_times([o.latency for o in ops], edges)
    assert asap[3] >= 20 and asap[15] > asap[3] and asap[18] > asap[6]
    assert (asap[3], asap[15], asap[6], asap[18]) == (20, 220, 20, 220)


def test_interleaved_c2_validation(ref):
    """Test 7."""
    kernel = ref.build_kernel_entries()
    ops, edges = ref.extract_ldg(kernel)
    assert len(ops) == 24
    assert ref.validate_c2(kernel, edges) == 22
    assert sum(1 for e in edges if e.kind == DepKind.ANTI and e.distance == 0) == 14


def test_pp_build_ldg(ref):
    """Test 8: the declared LDG equals the one extracted from the kernel."""
    from pipeline_core.graph import validate

    body, edges = ref.build_ldg()
    validate(body, edges)
    ops, extracted = ref.extract_ldg(ref.build_kernel_entries())
    for a, b in zip(body, ops):
        assert (a.tag, a.stage, a.subtile, a.latency) == (b.tag, b.stage, b.subtile, b.latency)
        if a.role == OpRole.GLOBAL_LOAD:
            assert a.k_offset == b.k_offset
    key = lambda e: (e.producer, e.consumer, e.kind, e.distance)  # noqa: E731
    assert Counter(map(key, edges)) == Counter(map(key, extracted))


def test_greedy_schedule_block_structure(ref):
    """Test 9."""
    from pipeline_core.scheduling.greedy import greedy_schedule

    body, edges = ref.build_ldg()
    order = greedy_schedule(body, edges)
    assert sorted(order) == list(range(24))
    blocks, globals_in_block = 0, 0
    for i in order:
        if body[i].role == OpRole.GLOBAL_LOAD:
            globals_in_block += 1
        if body[i].role == OpRole.COMPUTE:
            assert globals_in_block <= 2
            blocks += 1
            globals_in_block = 0
    assert blocks == 8


def test_prefetch_marking_in_kernel_body(ref):
    """Test 10."""
    kernel = ref.build_kernel_entries()
    pf = [e for e in kernel if e.is_prefetch]
    assert len(pf) == 7
    assert all(e.op.role == OpRole.GLOBAL_LOAD and e.op.k_offset != KOffset.K_PREV for e in pf)
    non_pf = [e for e in kernel if e.op.role == OpRole.GLOBAL_LOAD and not e.is_prefetch]
    assert len(non_pf) == 1 and non_pf[0].op.k_offset == KOffset.K_PREV


def test_schedule_compiler_interleaved(ref):
    """Test 21 (+ warp_stagger_index 4 and epilogue 58 from the goldens)."""
    c = ref.compile_pp(ref.pp(ScheduleConfig(auto_waits=False), (4, 4)))
    assert (len(c.body), len(c.edges), len(c.kernel), len(c.prologue), len(c.kernel_deps)) == (24, 54, 70, 10, 8)
    assert sum(1 for e in c.edges if e.kind != DepKind.FLOW) == 14
    assert c.warp_stagger_index == 4 and len(c.epilogue) == 58


def test_identity_kernel_layout(ref):
    """The ping-pong kernel: each 35-entry half is 11 + 8 + 9 + 7 entries with manual waits lgkm(8) and vm(6)."""
    k = ref.build_kernel_entries()
    tags = [e.op.tag for e in k[:35]]
    assert tags[:11] == [T.MMA_LOAD_B, T.MMA_LOAD_A, T.LOAD_A, FrameworkTag.WAIT_LGKM, FrameworkTag.BARRIER,
                         FrameworkTag.WAIT_LGKM, FrameworkTag.SET_PRIO, T.MMA, FrameworkTag.SET_PRIO,
                         FrameworkTag.BARRIER, FrameworkTag.SCHEDULE_BARRIER]
    assert k[3].op.wait_value == 8
    vm = [e for e in k[:35] if e.op.tag == FrameworkTag.WAIT_VM]
    assert [e.op.wait_value for e in vm] == [6]


def test_optimal_schedule_interleaved(ref):
    """Test 25."""
    from pipeline_core.scheduling.evaluate import evaluate_makespan
    from pipeline_core.scheduling.exhaustive import optimal_schedule_with_halves
    from pipeline_core.scheduling.greedy import greedy_schedule

    body, edges = ref.build_ldg()
    opt = optimal_schedule_with_halves(body, edges)
    assert sorted(opt) == list(range(24))
    assert all(i < 12 for i in opt[:12]) and all(i >= 12 for i in opt[12:])
    assert evaluate_makespan(body, edges, opt) <= evaluate_makespan(body, edges, greedy_schedule(body, edges))


def test_target_profile_declarative_equivalence():
    """Test 29: the two constructors build the same body."""
    sched = ScheduleConfig(auto_waits=False)
    a = PingPongSchedule(mi355x_target(), sched).build_body()
    b = PingPongSchedule.from_parts(sched, mi355x_double_buffer(), mi355x_cost_model()).build_body()
    assert len(a) == len(b) == 24
    assert [(o.tag, o.stage, o.subtile) for o in a] == [(o.tag, o.stage, o.subtile) for o in b]


def test_declarative_body_structure(ref):
    """Test 30."""
    body = ref.pp().build_body()
    assert len(body) == 24
    rc = role_counts(body)
    assert (rc[OpRole.GLOBAL_LOAD], rc[OpRole.FRAGMENT_LOAD], rc[OpRole.COMPUTE]) == (8, 8, 8)
    assert all(o.resource != ResourceKind.NONE for o in body)


def test_declarative_schedule_compiles(ref):
    """Test 31."""
    c = ref.compile_pp(ref.pp(ScheduleConfig(auto_waits=False)))
    assert len(c.body) == 24 and len(c.kernel) > 24
    assert sum(1 for e in c.kernel if e.op.tag < 128) == 24
    assert c.prologue and c.epilogue and len(c.edges) == 54


def test_declarative_c2_validation(ref):
    """Test 32: CSP without auto waits keeps every data op."""
    c = ref.compile_pp(ref.pp(ScheduleConfig(scheduling="CSP", auto_waits=False)))
    assert sum(1 for e in c.kernel if e.op.tag < 128) == len(c.body) == 24


def test_verify_schedule_passes_valid(ref):
    """Test 39: waits (8, 12)."""
    program, config = ref.build_bf16_program(ref.CSP_AUTO.evolve(lgkm_per_load_a=8, lgkm_per_load_b=8))
    _, waits = ref.patch_waits(program, config, 8)
    assert waits == (8, 12)


def _drains(program):
    return [i for i, b in enumerate(program.blocks) if b.drain_lgkm_before_loads]


def test_drain_mask_selective(ref):
    """Test 40: blocks 0, 2, 4, 6 drain; none at position 1 of its half."""
    sched = ref.CSP_AUTO.evolve(lgkm_per_load_a=8, lgkm_per_load_b=8, drain_lgkm_mask=0b11011101)
    program, config = ref.build_bf16_program(sched)
    drains = _drains(program)
    assert len(drains) >= 2
    assert all(i % config.blocks_per_partition != 1 for i in drains)
    assert drains == [0, 2, 4, 6]


def test_drain_mask_backward_compat(ref):
    """Test 41."""
    program, _ = ref.build_bf16_program(ScheduleConfig(scheduling="CSP", auto_waits=False,
                                                       drain_lgkm_mask=0xFF))
    both = [i for i, b in enumerate(program.blocks) if b.has_frag and b.has_global]
    assert len(_drains(program)) == len(both)


def test_auto_drain_derivation(ref):
    """Test 42: the derived mask (0b10001)."""
    from pipeline_core.program import derive_drain_mask

    program, config = ref.build_bf16_program(ref.CSP_AUTO.evolve(lgkm_per_load_a=8, lgkm_per_load_b=8))
    mask = derive_drain_mask(program, config)
    for i, b in enumerate(program.blocks):
        bit = (mask >> i) & 1
        if not b.has_frag or not b.global_load.is_present:
            assert bit == 0
        else:
            cross = any(f.channel >= 0 and f.channel != b.global_load.channel for f in b.frags())
            assert bit == int(cross)
    assert mask == 0b10001


def test_distribution_preserved_after_csp(ref):
    """Test 43: one global per block in both halves."""
    program, _ = ref.build_bf16_program(ref.CSP_AUTO.evolve(lgkm_per_load_a=8, lgkm_per_load_b=8))
    assert [b.num_globals for b in program.blocks] == [1] * 8


def test_wait_counts_match_block_structure(ref):
    """Test 44."""
    from pipeline_core.program import derive_waits

    program, config = ref.build_bf16_program(ref.CSP_AUTO.evolve(lgkm_per_load_a=8, lgkm_per_load_b=8))
    wl, wv = derive_waits(program, config, 8, 8)
    assert wl == 8 * program.blocks[0].num_globals == 8
    half0 = program.blocks[:config.blocks_per_partition]
    total = sum(config.vm_per_channel(o.channel) for b in half0 for o, _ in _globals(b))
    not_pf = sum(config.vm_per_channel(o.channel) for b in half0 for o, pf in _globals(b) if not pf)
    assert wv == total - not_pf == 12
    assert 0 <= wl <= 16 and 0 <= wv <= 16


def _prologue(ref, lgkm, fp8=False, sched=None):
    from pipeline_core.phases import derive_prologue
    from pipeline_core.ordering import schedule_order
    from pipeline_core.program import build_kernel_program
    from pipeline_core.scheduling import get_strategy

    sched = sched or ref.CSP_AUTO
    schedule = ref.pp(sched, lgkm, mi355x_target(4, 4), fp8=fp8)
    config = schedule.config()
    sched = sched.evolve(lgkm_per_load_a=8, lgkm_per_load_b=8)
    body = schedule.build_body()
    order = schedule_order(body, config, sched, strategy=get_strategy(sched.scheduling))
    result = build_kernel_program(body, config, sched, order=order)
    return derive_prologue(result.program, config, ScheduleConfig())


def test_prologue_from_program_structure(ref):
    """Test 45: 7 loads, 2 WAIT_VM, 1 BARRIER."""
    pro = _prologue(ref, (8, 8))
    assert sum(1 for e in pro if e.op.role == OpRole.GLOBAL_LOAD) == 7
    assert sum(1 for e in pro if e.op.tag == FrameworkTag.WAIT_VM) == 2
    assert sum(1 for e in pro if e.op.tag == FrameworkTag.BARRIER) == 1


def test_prologue_from_program_entry_count(ref):
    """Test 46: BF16 [False, 8, 8] and FP8 [True, 4, 4] prologues both have 10 entries."""
    assert len(_prologue(ref, (8, 8))) == 10
    assert len(_prologue(ref, (4, 4), fp8=True)) == 10


def test_stage_based_completion_symmetric(ref):
    """Test 50: each half has a completion load; the two kernel WAIT_VMs are equal (12)."""
    from pipeline_core.ordering import schedule_order
    from pipeline_core.program import build_kernel_program
    from pipeline_core.scheduling import get_strategy

    schedule = ref.pp(ref.CSP_AUTO, (4, 4))
    config = schedule.config()
    sched = ScheduleConfig(scheduling="CSP", auto_waits=True, lgkm_per_load_a=4, lgkm_per_load_b=4)
    body = schedule.build_body()
    order = schedule_order(body, config, sched, strategy=get_strategy(sched.scheduling))
    result = build_kernel_program(body, config, sched, order=order)
    bph = config.blocks_per_partition
    for h in range(2):
        half = result.program.blocks[h * bph:(h + 1) * bph]
        assert any(o.stage != h for b in half for o, _ in _globals(b))
    vms = [e.op.wait_value for e in result.program.expand(Phase.KERNEL) if e.op.tag == FrameworkTag.WAIT_VM]
    assert len(vms) >= 2 and vms[0] == vms[1] == 12


@pytest.mark.parametrize("h", [0, 1])
def test_pipeline_body_pingpong(h):
    """Test 52: the builder sequence equals the logical half."""
    from pipeline_core.dsl import BodyBuilder

    s, o = h, 1 - h
    k = KOffset.K1 if h else KOffset.K0
    b = BodyBuilder()
    b.load(T.LOAD_A, ch=0, stage=o, sub=1, k=KOffset.K_PREV if h == 0 else KOffset.K0)
    b.load(T.LOAD_A, ch=0, stage=s, sub=0, k=k)
    b.load(T.LOAD_B, ch=1, stage=s, sub=0, k=k)
    b.load(T.LOAD_B, ch=1, stage=s, sub=1, k=k)
    b.frag(T.MMA_LOAD_A, ch=0, stage=s, sub=0)
    b.frag(T.MMA_LOAD_A, ch=0, stage=s, sub=1)
    b.frag(T.MMA_LOAD_B, ch=1, stage=s, sub=0)
    b.frag(T.MMA_LOAD_B, ch=1, stage=s, sub=1)
    b.grid(2, 2, T.MMA)
    key = lambda x: (x.tag, x.channel, x.stage, x.subtile, x.k_offset)  # noqa: E731
    assert [key(x) for x in b.done()] == [key(x) for x in logical_half(h)]


def test_warp_stagger_safety_bf16(ref):
    """Test 57."""
    program, config = ref.build_bf16_program(ref.CSP_AUTO.evolve(lgkm_per_load_a=8, lgkm_per_load_b=8))
    ref.patch_waits(program, config, 8)


def test_warp_stagger_safety_fp8_bunched(ref):
    """Test 58: greedy bunching [1, 0, 2, 1 | 1, 0, 2, 1] passes the warp-stagger check."""
    program, config = ref.build_fp8_program(ref.CSP_AUTO.evolve(lgkm_per_load_a=4, lgkm_per_load_b=4))
    ref.patch_waits(program, config, 4)
    assert [b.num_globals for b in program.blocks] == [1, 0, 2, 1, 1, 0, 2, 1]
