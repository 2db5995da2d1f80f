"""build_kernel_program end to end against the goldens; the ordering stage; order validation."""
from __future__ import annotations


import pytest

from pipeline_core.errors import ConfigError, ProgramError, SchedulingError
from pipeline_core.ops import KOffset, OpRole, Phase, wait_lgkm, wait_vm
from pipeline_core.program import (KernelProgram, build_kernel_program,
                                   emit_minimal_barrier_block, kernel_deps_double_buffer)
from pipeline_core.ordering import schedule_order
from pipeline_core.scheduling import SchedulingRequest, get_strategy

from .helpers import (BF16_CSP_ORDER, DB_CASES, FOURWAVE_CASES, PINGPONG_CASES, bf16_config,
                      built, csp_sched, entries_from, inputs, load, ops_from, pingpong_body_bf16)
from .test_construct import assert_blocks_equal_golden


def kernel_of(case):
    program = built(case).program
    if case in FOURWAVE_CASES:
        program = program.with_explicit_blocks(
            [emit_minimal_barrier_block(b, wrap_waits=b.wrap_waits_with_sched_barrier)
             for b in program.blocks])
    return program, program.expand(Phase.KERNEL)


@pytest.mark.parametrize("case", DB_CASES)
def test_build_matches_golden(case):
    d = load(case)
    kp = built(case)
    assert isinstance(kp, KernelProgram)
    assert kp.order == tuple(d["scheduler"]["order"])
    assert kp.main_wait_vm == d["main_wait_vm"]
    assert (kp.wait_lgkm_first, kp.wait_vm_last) == (d["wait_lgkm_first"], d["wait_vm_last"])
    assert kp.waits_applied == d["derived_waits"]["applied"]
    assert kp.derived_drain_mask == d["derived_drain_mask"]
    assert kp.program.trailing_barrier == d["program_trailing_barrier"]
    assert_blocks_equal_golden(kp.program, d["blocks"])


@pytest.mark.parametrize("case", DB_CASES)
def test_kernel_matches_golden(case):
    d = load(case)
    program, kernel = kernel_of(case)
    if case in FOURWAVE_CASES:
        assert [list(x) for x in program.explicit_blocks] == \
            [ops_from(x) for x in d["explicit_blocks"]]
    else:
        assert program.explicit_blocks == () and not any(d["explicit_blocks"])
    assert list(kernel) == entries_from(d["kernel"])
    assert program.block_starts() == d["block_entry_starts"]
    assert [program.mma_entry(i) for i in range(len(program.blocks))] == d["block_mma_entries"]
    assert program.total_entries() == d["program_total_entries"] == len(kernel)
    assert d["program_expansion_matches_kernel"]


def test_manual_waits_are_reported_as_derived():
    # docs/guide/reference-behaviours.md, "Wait derivation":
    # auto_waits False reports 0/12 while the kernel carries 8/6.
    kp = built("pingpong_testcfg_identity_manual_waits")
    assert (kp.wait_lgkm_first, kp.wait_vm_last, kp.waits_applied) == (0, 12, False)
    assert kp.program.blocks[0].pre_sync == wait_lgkm(8)
    assert kp.program.blocks[3].pre_sync == wait_vm(6)


def test_schedule_compiler_interleaved_counts():
    # A21 (IDENTITY, auto_waits False): kernel 70, kernel_deps 8.
    _, kernel = kernel_of("pingpong_testcfg_identity_manual_waits")
    assert len(kernel) == 70
    assert len(kernel_deps_double_buffer(kernel, inputs("pingpong_bf16")[2])) == 8


@pytest.mark.parametrize("case", PINGPONG_CASES)
def test_prefetch_marking_in_kernel_body(case):
    # A10: 7 prefetch entries, all non-K_PREV globals; the 1 non-prefetch global is K_PREV.
    _, kernel = kernel_of(case)
    pf = [e for e in kernel if e.is_prefetch]
    assert len(pf) == 7
    assert all(e.op.role == OpRole.GLOBAL_LOAD and e.op.k_offset != KOffset.K_PREV for e in pf)
    rest = [e for e in kernel if e.op.role == OpRole.GLOBAL_LOAD and not e.is_prefetch]
    assert len(rest) == 1 and rest[0].op.k_offset == KOffset.K_PREV


def test_distribution_preserved_after_csp():
    # A43: CSP + auto waits with max_globals 1: every block holds exactly one global.
    kp = build_kernel_program(pingpong_body_bf16(), bf16_config(4), csp_sched(8),
                              order=BF16_CSP_ORDER)
    assert [b.num_globals for b in kp.program.blocks] == [1] * 8
    assert (kp.wait_lgkm_first, kp.wait_vm_last) == (8, 12)


def test_data_op_count_equals_body():
    # A31/A32: exactly len(body) kernel entries with a data tag (< 128).
    for case in DB_CASES:
        _, kernel = kernel_of(case)
        assert sum(e.op.tag < 128 for e in kernel) == 24


# --- strategy plumbing ------------------------------------------------------------------

def test_strategy_request_and_order():
    body, order, cfg, sched, edges = inputs("pingpong_bf16")
    seen: list[SchedulingRequest] = []

    def strategy(request):
        seen.append(request)
        return list(order)

    sched = sched.evolve(lds_contention_penalty=7, max_vgpr=120)
    final = schedule_order(body, cfg, sched, edges, strategy=strategy)
    assert final == tuple(order)
    (req,) = seen
    assert req.body == body and req.edges == edges
    assert (req.max_globals_per_block, req.lds_contention_penalty, req.max_vgpr,
            req.num_partitions, req.blocks_per_partition) == (1, 7, 120, 2, 4)
    kp = build_kernel_program(body, cfg, sched, edges, order=final)
    assert kp.program == built("pingpong_bf16").program


def test_empty_edges_are_derived(monkeypatch):
    import pipeline_core.edges as edges_mod
    body, order, cfg, sched, edges = inputs("pingpong_bf16")
    calls = []

    def fake_derive(b, c):
        calls.append((b, c))
        return list(edges)

    monkeypatch.setattr(edges_mod, "derive_edges", fake_derive, raising=False)
    schedule_order(body, cfg, sched,
                   strategy=lambda req: (calls.append(req.edges), list(order))[1])
    assert calls[0] == (body, cfg) and calls[1] == edges
    # the block builder never derives edges or asks a strategy: it takes the order
    calls.clear()
    build_kernel_program(body, cfg, sched, order=order)
    assert calls == []


def test_builder_requires_an_order():
    body, _, cfg, sched, edges = inputs("pingpong_bf16")
    with pytest.raises(TypeError, match="order"):
        build_kernel_program(body, cfg, sched, edges)  # type: ignore[call-arg]


def test_host_strategy_is_used_by_compile():
    from pipeline_core import hookimpl
    from pipeline_core.schedule import StrategyRecord
    from pipeline_core.testing import fresh_host

    body, order, cfg, sched, edges = inputs("pingpong_bf16")

    class GoldenOrder:
        @hookimpl
        def pipeline_core_register_strategies(self):
            return [StrategyRecord("TEST_GOLDEN_ORDER", "the golden order", lambda req: list(order))]

    host = fresh_host(GoldenOrder())
    strategy = host.get_strategy("test_golden_order")
    final = schedule_order(body, cfg, sched.evolve(scheduling="test_golden_order"), edges,
                           strategy=strategy)
    assert build_kernel_program(body, cfg, sched, edges, order=final).order == tuple(order)


@pytest.mark.parametrize("bad, problem", [
    ([0, 1, 2], "3 entries for a body of 24 ops"),
    (list(range(23)) + [0], "index 0 appears twice"),
    (list(range(23)) + [24], "index 24 is outside 0..23"),
    (list(range(-1, 23)), "index -1 is outside"),
])
def test_invalid_orders(bad, problem):
    body, _, cfg, sched, edges = inputs("pingpong_bf16")
    with pytest.raises(ProgramError, match=problem):
        build_kernel_program(body, cfg, sched, edges, order=bad)
    with pytest.raises(SchedulingError, match=problem) as exc:
        schedule_order(body, cfg, sched, edges, strategy=lambda req: bad)
    assert exc.value.strategy == "CSP"


def test_short_order_names_missing_ops():
    body, _, cfg, sched, edges = inputs("pingpong_bf16")
    with pytest.raises(ProgramError) as exc:
        build_kernel_program(body, cfg, sched, edges, order=range(20))
    assert exc.value.ops == (20, 21, 22, 23)


def test_single_buffer_config_is_rejected():
    body, order, cfg, sched, edges = inputs("pingpong_bf16")
    with pytest.raises(ConfigError, match="depth"):
        build_kernel_program(body, cfg.evolve(depth=1), sched, edges, order=order)


def test_result_is_frozen_and_inputs_untouched():
    body, order, cfg, sched, edges = inputs("pingpong_bf16")
    body_list = list(body)
    kp = build_kernel_program(body_list, cfg, sched, edges, order=list(order))
    assert body_list == list(body)
    with pytest.raises(AttributeError):
        kp.order = ()  # type: ignore[misc]


@pytest.mark.parametrize("case", DB_CASES)
def test_builtin_strategies_reproduce_golden(case):
    """Integration with the registry's built-in strategies (when installed)."""
    body, order, cfg, sched, edges = inputs(case)
    final = schedule_order(body, cfg, sched, edges, strategy=get_strategy(sched.scheduling))
    kp = build_kernel_program(body, cfg, sched, edges, order=final)
    assert kp.order == order
    assert kp.program == built(case).program
