"""EXACT / EXACT_BLOCKS: optimality against brute force, the CSP's orders, bounds, time limits.

The brute force enumerates every order the CSP's rules allow (partition
isolation, producers first, globals cap, VGPR budget) and applies the CSP's
acceptance rule (greedy seed first, then strictly better leaves in lexicographic
order), so "same order as the CSP" is checked exactly, not just "same makespan".
"""
from __future__ import annotations

import io
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golden_data import DOUBLE_BUFFER_CASES, config_from, edges_from, load, ops_from
from pipeline_core.edges import DepEdge
from pipeline_core.errors import SchedulingError
from pipeline_core.ops import Op, OpRole, ResourceKind
from pipeline_core.scheduling.bounds import Problem, chain_bound
from pipeline_core.scheduling.evaluate import Tables, lower_bound
from pipeline_core.scheduling.exact import (UNLIMITED_VGPR, ExactResult, exact_blocks_strategy,
                                            exact_schedule, exact_strategy)
from pipeline_core.scheduling.exact_search import BLOCK_SLOTS, BlockRules, Search
from pipeline_core.scheduling.exhaustive import position_ranges, optimal_schedule_with_halves
from pipeline_core.scheduling.greedy import greedy_order
from pipeline_core.scheduling.progress import TerminalProgress, terminal_progress
from pipeline_core.scheduling.registry import SchedulingRequest

KINDS = [(ResourceKind.MMA_UNIT, OpRole.COMPUTE), (ResourceKind.LDS, OpRole.FRAGMENT_LOAD),
         (ResourceKind.GLOBAL_MEM, OpRole.GLOBAL_LOAD), (ResourceKind.VALU, OpRole.VALU_COMPUTE),
         (ResourceKind.SCALAR, OpRole.SYNC)]


# --- instance generators ------------------------------------------------------------------

def random_instance(rng: random.Random, n: int):
    """Any roles and units, random edges (acyclic at distance 0), VGPR kills sometimes."""
    ops = []
    for _ in range(n):
        res, role = rng.choice(KINDS)
        lat = 0 if res == ResourceKind.SCALAR else rng.choice([0, 1, 4, 16, 20, 50])
        ops.append(Op(tag=rng.randrange(8), resource=res, role=role, latency=lat,
                      vgpr_def=rng.choice([0, 4, 8]), vgpr_kill=rng.choice([0, 0, 0, 3, 8])))
    rank = list(range(n))
    rng.shuffle(rank)
    edges = [DepEdge(p, c, rng.choice([0, 1]), rng.choice([0, 0, 0, 1]))
             for c in range(n) for p in range(n) if p != c and rng.random() < 0.18]
    edges = [e for e in edges if e.distance >= 1 or rank[e.producer] < rank[e.consumer]]
    return ops, edges, rng.choice([1, 2, 2, 3])


def matmul_like_instance(rng: random.Random, n: int):
    """Globals, frags and MMAs per partition with the matmul edge shapes (frag->MMA, ANTI, ...)."""
    parts = rng.choice([1, 2, 2])
    per = max(1, n // parts)
    ops, part = [], []
    for k in range(parts):
        for _ in range(per if k < parts - 1 else n - per * (parts - 1)):
            r = rng.random()
            if r < 0.3:
                ops.append(Op(tag=0, resource=ResourceKind.GLOBAL_MEM, role=OpRole.GLOBAL_LOAD,
                              latency=rng.choice([50, 200]), channel=rng.randrange(2)))
            elif r < 0.6:
                ops.append(Op(tag=3, resource=ResourceKind.LDS, role=OpRole.FRAGMENT_LOAD,
                              latency=20, channel=rng.randrange(2), vgpr_def=8))
            else:
                ops.append(Op(tag=5, resource=ResourceKind.MMA_UNIT, role=OpRole.COMPUTE,
                              latency=16, vgpr_def=4, vgpr_kill=rng.choice([0, 0, 4])))
            part.append(k)
    edges = []
    for c, oc in enumerate(ops):
        for p, op_ in enumerate(ops):
            a, b = op_.role, oc.role
            if p == c:
                continue
            if a == OpRole.FRAGMENT_LOAD and b == OpRole.COMPUTE and part[p] == part[c]:
                if rng.random() < 0.6:
                    edges.append(DepEdge.flow(p, c))
            elif (a == OpRole.FRAGMENT_LOAD and b == OpRole.GLOBAL_LOAD
                  and op_.channel == oc.channel and part[p] <= part[c]):
                if rng.random() < 0.7:
                    edges.append(DepEdge.anti(p, c))
            elif a == OpRole.GLOBAL_LOAD and b == OpRole.FRAGMENT_LOAD and part[p] < part[c]:
                if rng.random() < 0.5:
                    edges.append(DepEdge.flow(p, c))
            elif a == OpRole.COMPUTE and b == OpRole.COMPUTE and part[p] < part[c]:
                if rng.random() < 0.4:
                    edges.append(DepEdge.flow(p, c))
    return ops, edges, parts


# --- the brute force ----------------------------------------------------------------------------

def all_valid_orders(pb: Problem, max_globals: int, max_vgpr: int, blocks: BlockRules | None = None):
    """Every order the rules allow, in lexicographic order, with its (makespan, peak)."""
    search = Search(pb, max_globals=max_globals, max_vgpr=max_vgpr, blocks=blocks, deadline=None,
                    progress=None)
    out = []

    def rec():
        if len(search.order) == pb.n:
            out.append((pb.simulate(search.order), list(search.order)))
            return
        lo, hi = pb.ranges[len(search.order)]
        for c in range(lo, hi):
            if search.allowed(c):
                saved = search.place(c)
                if search.blocks_feasible():
                    rec()
                search.unplace(c, saved)

    rec()
    return out


def csp_answer(body, edges, pb, leaves, *, penalty, max_globals, max_vgpr, parts, bph, valid_rb):
    """What the reference's CSP returns: early exit, else the seed unless a leaf is strictly better."""
    t = Tables(body, edges)
    try:
        seed = greedy_order(t, parts, bph)
    except SchedulingError:
        seed = None
    if seed is not None:
        ms, pk = pb.simulate(seed)
        ref_lb = lower_bound(t, penalty)
        if ms == ref_lb and ref_lb <= valid_rb and (max_vgpr == UNLIMITED_VGPR or pk <= max_vgpr):
            return seed
        value, best = (ms, pk), seed
    else:
        value, best = (math.inf, math.inf), None
    for v, order in leaves:
        if v < value:
            value, best = v, order
    return best


def _bph(pb: Problem) -> int:
    lo, hi = pb.part_bounds[0]
    return max(1, sum(pb.is_compute[i] for i in range(lo, hi)))


def _check_instance(ops, edges, parts, rng):
    penalty = rng.choice([0, 0, 3, 8, 30])
    max_globals = rng.choice([0, 1, 2])
    max_vgpr = rng.choice([UNLIMITED_VGPR, UNLIMITED_VGPR, 12, 24])
    slots = rng.choice([0, 1, 2])  # 0: the reference's CSP; 2: the CSP strategy's block slots
    pb = Problem(ops, edges, penalty=penalty, num_partitions=parts)
    bph = _bph(pb)
    rules = BlockRules(slots, slots, bph, stagger_rule=False) if slots else None
    leaves = all_valid_orders(pb, max_globals, max_vgpr, rules)
    kwargs = dict(max_globals_per_block=max_globals, lds_contention_penalty=penalty,
                  max_vgpr=max_vgpr, num_partitions=parts, blocks_per_partition=bph,
                  block_slots=slots)
    try:
        result = exact_schedule(ops, edges, time_limit=None, **kwargs)
    except SchedulingError:
        assert not leaves, "EXACT found no order although valid orders exist"
        return
    assert result.gap == 0 and result.canonical
    # the CSP keeps a seed that breaks the rules: one no block program holds is never
    # "proven optimal"; an order the CSP's own rules accept always fits
    assert result.proven_optimal == result.order_valid
    if list(result.order) in [order for _, order in leaves]:
        assert result.order_valid
    expected = csp_answer(ops, edges, pb, leaves, penalty=penalty, max_globals=max_globals,
                          max_vgpr=max_vgpr, parts=parts, bph=bph, valid_rb=result.root_bound)
    assert list(result.order) == list(expected)
    assert (result.makespan, result.vgpr_peak) == pb.simulate(expected)
    if leaves:
        optimum = min(v for v, _ in leaves)
        assert result.root_bound <= optimum[0]
        assert result.lower_bound <= optimum[0] or (result.makespan, result.vgpr_peak) < optimum
        if result.seed_valid:
            assert result.makespan == optimum[0]
            if result.status != "seed-at-bound":  # the early exit looks at the makespan only
                assert (result.makespan, result.vgpr_peak) == optimum
    return result, kwargs


@pytest.mark.parametrize("seed", range(6))
def test_same_order_as_brute_force_csp_on_random_bodies(seed):
    rng = random.Random(seed)
    for _ in range(40):
        ops, edges, parts = random_instance(rng, rng.randint(1, 7))
        _check_instance(ops, edges, parts, rng)


@pytest.mark.parametrize("seed", range(6))
def test_same_order_as_brute_force_csp_on_matmul_like_bodies(seed):
    rng = random.Random(100 + seed)
    for _ in range(40):
        ops, edges, parts = matmul_like_instance(rng, rng.randint(2, 9))
        _check_instance(ops, edges, parts, rng)


@pytest.mark.parametrize("slots", [0, 2])
def test_same_order_as_the_csp_implementation(slots):
    """Cross-check with the port of the reference's search itself (small bodies, no time limit),
    as the reference runs it (no block slots) and as the CSP strategy runs it (2 slots)."""
    rng = random.Random(7 + slots)
    checked = 0
    while checked < 40:
        ops, edges, parts = matmul_like_instance(rng, rng.randint(2, 8))
        penalty, max_globals = rng.choice([0, 4, 8]), rng.choice([0, 1])
        pb = Problem(ops, edges, penalty=penalty, num_partitions=parts)
        kwargs = dict(max_globals_per_block=max_globals, lds_contention_penalty=penalty,
                      num_partitions=parts, blocks_per_partition=_bph(pb), block_slots=slots)
        try:
            csp = optimal_schedule_with_halves(ops, edges, **kwargs)
        except SchedulingError:
            continue
        assert list(exact_schedule(ops, edges, time_limit=None, **kwargs).order) == list(csp)
        checked += 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**9), st.integers(min_value=2, max_value=8))
def test_property_exact_equals_brute_force(seed, n):
    rng = random.Random(seed)
    ops, edges, parts = matmul_like_instance(rng, n)
    _check_instance(ops, edges, parts, rng)


@pytest.mark.parametrize("seed", range(3))
def test_strict_mode_is_optimal_over_block_valid_orders(seed):
    rng = random.Random(200 + seed)
    checked = 0
    for _ in range(40):
        ops, edges, parts = matmul_like_instance(rng, rng.randint(3, 9))
        penalty, max_globals = rng.choice([0, 4, 8]), rng.choice([0, 1])
        pb = Problem(ops, edges, penalty=penalty, num_partitions=parts)
        bph = _bph(pb)
        rules = BlockRules(BLOCK_SLOTS, BLOCK_SLOTS, bph, stagger_rule=max_globals == 0)
        leaves = all_valid_orders(pb, max_globals, UNLIMITED_VGPR, rules)
        kwargs = dict(max_globals_per_block=max_globals, lds_contention_penalty=penalty,
                      num_partitions=parts, blocks_per_partition=bph, strict=True)
        if not leaves:
            with pytest.raises(SchedulingError):
                exact_schedule(ops, edges, time_limit=None, **kwargs)
            continue
        result = exact_schedule(ops, edges, time_limit=None, **kwargs)
        search = Search(pb, max_globals=max_globals, max_vgpr=UNLIMITED_VGPR, blocks=rules,
                        deadline=None, progress=None)
        assert search.is_valid(result.order, csp_rules=False)
        optimum = min(v for v, _ in leaves)
        assert result.makespan <= optimum[0]
        if result.status != "seed-at-bound":  # the early exit looks at the makespan only
            assert (result.makespan, result.vgpr_peak) <= optimum
        assert result.root_bound <= optimum[0]
        checked += 1
    assert checked > 10


@pytest.mark.parametrize("block_mode", [False, True])
def test_node_bounds_never_exceed_the_best_completion(block_mode):
    """For every prefix of every valid order: bound <= the best makespan among its completions."""
    rng = random.Random(11)
    checked = 0
    for _ in range(60):
        ops, edges, parts = matmul_like_instance(rng, rng.randint(2, 8))
        penalty, max_globals = rng.choice([0, 4, 8, 30]), rng.choice([0, 1, 2])
        pb = Problem(ops, edges, penalty=penalty, num_partitions=parts)
        rules = BlockRules(BLOCK_SLOTS, BLOCK_SLOTS, _bph(pb), max_globals == 0) if block_mode else None
        best: dict[tuple, int] = {}
        for (ms, _pk), order in all_valid_orders(pb, max_globals, UNLIMITED_VGPR, rules):
            for k in range(len(order) + 1):
                key = tuple(order[:k])
                best[key] = min(best.get(key, ms), ms)
        search = Search(pb, max_globals=max_globals, max_vgpr=UNLIMITED_VGPR, blocks=rules,
                        deadline=None, progress=None)
        for prefix, ms in best.items():
            saved = [(i, search.place(i)) for i in prefix]
            assert search.node_bound() <= ms, (prefix, ms)
            for i, s in reversed(saved):
                search.unplace(i, s)
            checked += 1
    assert checked > 300


# --- goldens ---------------------------------------------------------------------------------

def _golden_problem(case):
    d = load(case)
    return d, ops_from(d["body"]), edges_from(d["edges"]), config_from(d["config"])


@pytest.mark.parametrize("case", [c for c in DOUBLE_BUFFER_CASES if c.startswith("pingpong")])
def test_golden_orders_unchanged(case):
    """Where the CSP (greedy seed + early exit) decides, EXACT returns exactly its order."""
    d, body, edges, config = _golden_problem(case)
    result = exact_schedule(body, edges, max_globals_per_block=config.block_sizing.max_globals,
                            lds_contention_penalty=d["scheduler"]["lds_contention_penalty"],
                            num_partitions=config.num_partitions,
                            blocks_per_partition=config.blocks_per_partition)
    csp_order = d["scheduler"]["order"] if d["scheduler"]["strategy"] == "CSP" else \
        d["scheduler"]["greedy_order"]
    assert list(result.order) == csp_order
    assert result.makespan == d["scheduler"]["asap_lower_bound"] == 420
    assert result.status == "seed-at-bound" and result.proven_optimal


def test_pingpong_golden_through_the_strategy_registry():
    d, body, edges, config = _golden_problem("pingpong_bf16")
    request = SchedulingRequest(body, edges, max_globals_per_block=config.block_sizing.max_globals,
                                num_partitions=2, blocks_per_partition=config.blocks_per_partition)
    assert exact_strategy(request) == d["scheduler"]["order"]
    # block mode accepts the seed as well: its [1, 0, 2, 1] globals fit the blocks' two slots
    assert exact_blocks_strategy(request) == d["scheduler"]["order"]


def test_fourwave_has_no_partition_isolated_order():
    """4-wave's half-1 frags feed half-0 loads: like the CSP, EXACT cannot place them."""
    _d, body, edges, config = _golden_problem("fourwave_fp8")
    with pytest.raises(SchedulingError, match="no order satisfies"):
        exact_schedule(body, edges, num_partitions=2, blocks_per_partition=4, time_limit=5)


# --- time limits, progress, edge cases ------------------------------------------------------------

def _grid_body(m, n, max_globals=1):
    from pipeline_core.costs import annotate
    from pipeline_core.edges import derive_edges
    from pipeline_core.transforms import double_buffer_reorder

    pytest.importorskip("pipeline_core_schedules_matmul_grid")
    from pipeline_core_amd_mi355x import mi355x_cost_model, mi355x_double_buffer
    from pipeline_core_schedules_matmul_grid import logical_body

    config = mi355x_double_buffer(max_globals=max_globals).evolve(m_mmas=m, n_mmas=n)
    body = double_buffer_reorder(annotate(logical_body(m, n), mi355x_cost_model()), config)
    return body, derive_edges(body, config), config


def test_node_limit_returns_best_order_with_proven_gap():
    body, edges, config = _grid_body(2, 5)
    result = exact_schedule(body, edges, max_globals_per_block=1, lds_contention_penalty=4,
                            num_partitions=2, blocks_per_partition=10, time_limit=None,
                            strict=True, node_limit=50)
    assert isinstance(result, ExactResult)
    assert result.status == "node-limit" and not result.proven_optimal
    assert 0 < result.gap == result.makespan - result.lower_bound
    assert result.root_bound <= result.lower_bound <= result.makespan
    assert "gap" in result.summary() and "node limit" in result.summary()
    pb = Problem(body, edges, penalty=4, num_partitions=2)
    search = Search(pb, max_globals=1, max_vgpr=UNLIMITED_VGPR,
                    blocks=BlockRules(2, 2, 10, False), deadline=None, progress=None)
    assert search.is_valid(result.order)


def test_a_node_limit_cuts_the_search_at_the_same_place_every_time():
    body, edges, _ = _grid_body(2, 5)
    runs = [exact_schedule(body, edges, max_globals_per_block=1, lds_contention_penalty=4,
                           num_partitions=2, blocks_per_partition=10, time_limit=None,
                           strict=True, node_limit=200) for _ in range(2)]
    assert runs[0].order == runs[1].order and runs[0].nodes == runs[1].nodes
    assert runs[0].gap < 40  # more nodes than the 50 above close more of the gap


@pytest.mark.parametrize("m,n,penalty", [(2, 2, 8), (2, 5, 4), (2, 5, 8), (3, 3, 4), (4, 4, 16),
                                         (2, 11, 16), (4, 7, 16), (5, 8, 16)])
@pytest.mark.parametrize("slots,strict", [(0, False), (2, False), (2, True)])
def test_grid_bodies_are_proven_within_a_node_budget(m, n, penalty, slots, strict):
    body, edges, _ = _grid_body(m, n)
    result = exact_schedule(body, edges, max_globals_per_block=1, lds_contention_penalty=penalty,
                            num_partitions=2, blocks_per_partition=m * n, time_limit=None,
                            block_slots=slots, strict=strict, node_limit=10_000)
    assert result.proven_optimal  # within the node budget: the same on every machine
    assert not (strict and result.canonical)


def test_strategy_reports_a_search_budget_on_stderr(capsys):
    body, edges, _ = _grid_body(2, 5)
    request = SchedulingRequest(body, edges, max_globals_per_block=1, lds_contention_penalty=4,
                                num_partitions=2, blocks_per_partition=10, node_limit=50)
    order = exact_blocks_strategy(request)
    assert sorted(order) == list(range(len(body)))
    assert "node limit of 50 nodes reached" in capsys.readouterr().err


def test_progress_only_on_a_terminal():
    assert terminal_progress("EXACT", io.StringIO()) is None

    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    progress = terminal_progress("EXACT", stream)
    assert isinstance(progress, TerminalProgress)
    progress(phase="optimise", nodes=1000, best=432, depth=7)
    assert "optimise" in stream.getvalue() and "432" in stream.getvalue()
    progress.close()
    assert stream.getvalue().endswith("\r\x1b[2K")


def test_empty_body_and_single_op():
    assert exact_schedule([], [], time_limit=None).order == ()
    one = [Op(tag=5, resource=ResourceKind.MMA_UNIT, role=OpRole.COMPUTE, latency=16)]
    result = exact_schedule(one, [], num_partitions=1, blocks_per_partition=1, time_limit=None)
    assert result.order == (0,) and result.makespan == 16


def test_more_partitions_than_two():
    """The seed and the search split positions like the CSP for any partition count."""
    mma = Op(tag=5, resource=ResourceKind.MMA_UNIT, role=OpRole.COMPUTE, latency=16)
    frag = Op(tag=3, resource=ResourceKind.LDS, role=OpRole.FRAGMENT_LOAD, latency=20)
    body = [frag, mma, frag, mma, frag, mma]
    edges = [DepEdge.flow(0, 1), DepEdge.flow(2, 3), DepEdge.flow(4, 5), DepEdge.flow(1, 3),
             DepEdge.flow(3, 5)]
    result = exact_schedule(body, edges, num_partitions=3, blocks_per_partition=1,
                            lds_contention_penalty=8, time_limit=None)
    assert result.order == (0, 1, 2, 3, 4, 5)
    assert result.proven_optimal


def testposition_ranges_match_the_csp():
    for n in range(0, 13):
        for parts in range(1, 5):
            assert position_ranges(n, parts) == position_ranges(n, parts)


def test_block_slots_match_the_program_builder():
    from pipeline_core.program.construct import MAX_SLOTS

    assert BLOCK_SLOTS == MAX_SLOTS


def test_chain_bound_is_the_preemptive_jackson_value():
    # one machine, jobs (head, work, tail)
    assert chain_bound([], 5) == (5, 5)
    assert chain_bound([(0, 10, 0)], 0) == (10, 10)
    # the long-tail job runs first when both are released
    assert chain_bound([(0, 4, 0), (0, 4, 100)], 0) == (8, 104)
    # releases leave the machine idle; preemption at release 10
    assert chain_bound([(0, 20, 0), (10, 5, 50)], 0) == (25, 65)


@pytest.mark.parametrize("m,n", [(4, 7), (5, 8)])
def test_a_seed_no_block_program_holds_is_never_proven_optimal(m, n):
    # issue 16: at lds_contention_penalty=8 the greedy seed puts 3-4 global loads in one
    # block; the CSP keeps it, EXACT called it proven optimal and the compile then failed
    from pipeline_core.api import compile_named

    compiled = compile_named("matmul-grid", params={"m": str(m), "n": str(n)},
                             config_overrides={"lds_contention_penalty": "8",
                                               "scheduling": "EXACT"})
    assert compiled.proof.safe  # the strategy's order compiles
    cfg = compiled.config
    kwargs = dict(max_globals_per_block=cfg.block_sizing.max_globals, lds_contention_penalty=8,
                  num_partitions=cfg.num_partitions,
                  blocks_per_partition=cfg.blocks_per_partition, block_slots=BLOCK_SLOTS,
                  time_limit=None, node_limit=20000)
    kept = exact_schedule(compiled.body, compiled.edges, **kwargs)
    assert not kept.seed_valid and not kept.order_valid
    assert not kept.proven_optimal and "breaks the strategy's rules" in kept.summary()
    valid = exact_schedule(compiled.body, compiled.edges, valid_only=True, **kwargs)
    assert valid.order_valid and valid.proven_optimal and valid.order == compiled.order
