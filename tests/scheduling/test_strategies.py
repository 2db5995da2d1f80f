"""IDENTITY, GREEDY and CSP through the registry, and the searches behind them.

Reference tests A9 and A25
(docs/guide/reference-behaviours.md, "The reference's own tests", "The evaluator"), and the goldens'
scheduler orders.
"""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golden_data import DOUBLE_BUFFER_CASES, config_from, edges_from, load, ops_from
from pipeline_core.edges import DepEdge, derive_edges
from pipeline_core.errors import SchedulingError
from pipeline_core.ops import OpRole, ResourceKind, op
from pipeline_core.scheduling import SchedulingRequest, get_strategy, strategy_names
from pipeline_core.scheduling.evaluate import asap_lower_bound, evaluate_schedule
from pipeline_core.scheduling.exhaustive import optimal_schedule, optimal_schedule_with_halves
from pipeline_core.scheduling.greedy import greedy_schedule, simple_greedy_schedule
from reference_bodies import mi355x_double_buffer, pingpong_body

GM, LDS, MMA_U = ResourceKind.GLOBAL_MEM, ResourceKind.LDS, ResourceKind.MMA_UNIT


def _golden(case):
    d = load(case)
    return d, ops_from(d["body"]), edges_from(d["edges"]), config_from(d["config"])


def _request(body, edges, config, **kw):
    return SchedulingRequest(body, edges, max_globals_per_block=config.block_sizing.max_globals,
                             num_partitions=config.num_partitions,
                             blocks_per_partition=config.blocks_per_partition, **kw)


def _pingpong_ldg():
    body = pingpong_body(max_globals=1)
    return body, derive_edges(body, mi355x_double_buffer())


# --- registry ----------------------------------------------------------------------

def test_builtins_are_registered():
    assert {"IDENTITY", "GREEDY", "CSP"} <= set(strategy_names())
    assert get_strategy("csp") is get_strategy("CSP")


def test_identity_is_declaration_order():
    body, edges = _pingpong_ldg()
    assert get_strategy("IDENTITY")(SchedulingRequest(body, edges)) == list(range(24))


# --- goldens -------------------------------------------------------------------------

@pytest.mark.parametrize("case", DOUBLE_BUFFER_CASES)
def test_golden_strategy_order(case):
    d, body, edges, config = _golden(case)
    strategy = d["schedule_config"]["scheduling_name"]
    assert strategy == d["scheduler"]["strategy"]
    assert get_strategy(strategy)(_request(body, edges, config)) == d["scheduler"]["order"]


@pytest.mark.parametrize("case", ["pingpong_bf16", "pingpong_testcfg_identity_manual_waits"])
def test_golden_pingpong_greedy_and_csp_orders(case):
    d, body, edges, config = _golden(case)
    req = _request(body, edges, config)
    assert get_strategy("GREEDY")(req) == d["scheduler"]["greedy_order"]
    assert get_strategy("CSP")(req) == d["scheduler"]["greedy_order"]  # seed hits the bound
    assert evaluate_schedule(body, edges, d["scheduler"]["greedy_order"]) == (420, 96)


@pytest.mark.parametrize("case", ["fourwave_fp8", "fourwave_fp8_bm64"])
def test_greedy_cannot_place_fourwave_loads(case):
    _, body, edges, config = _golden(case)
    with pytest.raises(SchedulingError) as err:
        get_strategy("GREEDY")(_request(body, edges, config))
    msg = str(err.value)
    assert err.value.ops == (0, 3, 6, 9) and err.value.strategy == "GREEDY"
    assert "partition 0" in msg and "[0, 3, 6, 9] never placed" in msg
    assert "0 (tag 0, GLOBAL_LOAD" in msg and "waits for 19 (FRAGMENT_LOAD) via edge #44 ANTI" in msg


def test_csp_raises_rather_than_evaluating_a_short_seed():
    _, body, edges, config = _golden("fourwave_fp8")
    with pytest.raises(SchedulingError) as err:
        get_strategy("CSP")(_request(body, edges, config))
    assert err.value.strategy == "CSP" and err.value.ops == (0, 3, 6, 9)
    assert "greedy seed failed" in str(err.value)


def test_csp_seed_ignores_the_globals_cap():
    """BF16 ping-pong: max_globals 1, yet the accepted seed bunches globals [1, 0, 2, 1]."""
    d, body, edges, config = _golden("pingpong_bf16")
    assert config.block_sizing.max_globals == 1
    order = get_strategy("CSP")(_request(body, edges, config))
    per_block, count = [], 0
    for i in order[:12]:
        if body[i].role == OpRole.GLOBAL_LOAD:
            count += 1
        elif body[i].role == OpRole.COMPUTE:
            per_block.append(count)
            count = 0
    assert per_block == [1, 0, 2, 1]


# --- reference tests A ---------------------------------------------------------------

def test_a9_greedy_schedule_block_structure():
    body, edges = _pingpong_ldg()
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


def test_a25_optimal_schedule_interleaved():
    body, edges = _pingpong_ldg()
    order = optimal_schedule_with_halves(body, edges)
    assert sorted(order) == list(range(24))
    assert all(i < 12 for i in order[:12]) and all(i >= 12 for i in order[12:])
    greedy = greedy_schedule(body, edges)
    assert evaluate_schedule(body, edges, order)[0] <= evaluate_schedule(body, edges, greedy)[0]


# --- greedy ----------------------------------------------------------------------------

def _g(lat=200):
    return op(0, GM, lat, OpRole.GLOBAL_LOAD)


def _f(lat=20):
    return op(3, LDS, lat, OpRole.FRAGMENT_LOAD)


def _m(lat=16, **kw):
    return op(5, MMA_U, lat, OpRole.COMPUTE, **kw)


def test_greedy_generalises_partitions_and_blocks():
    body = [_g(), _m(), _f(), _m()] * 3  # 3 partitions x 2 blocks
    edges = [DepEdge.flow(0, 1), DepEdge.flow(2, 3), DepEdge.flow(4, 5), DepEdge.anti(10, 8)]
    order = greedy_schedule(body, edges, num_partitions=3, blocks_per_partition=2)
    assert order == [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 8, 11]
    req = SchedulingRequest(body, edges, num_partitions=3, blocks_per_partition=2)
    assert get_strategy("GREEDY")(req) == order
    csp = get_strategy("CSP")(req)
    assert [sorted(csp[k:k + 4]) for k in (0, 4, 8)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert evaluate_schedule(body, edges, csp)[0] <= evaluate_schedule(body, edges, order)[0]


def test_greedy_moves_a_frag_ahead_of_an_anti_constrained_load():
    body = [_g(), _f(), _m(), _m()]
    order = greedy_schedule(body, [DepEdge.anti(1, 0)], num_partitions=1, blocks_per_partition=2)
    assert order == [1, 0, 2, 3]


def test_greedy_reports_a_block_without_ready_op():
    body = [_f(), _m(), _f(), _m()]
    with pytest.raises(SchedulingError) as err:
        greedy_schedule(body, [DepEdge.flow(2, 0), DepEdge.flow(2, 1)], num_partitions=2,
                        blocks_per_partition=1)
    msg = str(err.value)
    assert "no ready op for block 0 of partition 0" in msg
    assert "waits for 2 (FRAGMENT_LOAD) via edge #0 FLOW d=0" in msg
    assert "waits for 2 (FRAGMENT_LOAD) via edge #1 FLOW d=0" in msg
    assert err.value.ops == (0, 1)


def test_greedy_reports_too_few_compute_ops():
    with pytest.raises(SchedulingError) as err:
        greedy_schedule([_f(), _m(), _f(), _m()], [], num_partitions=2, blocks_per_partition=2)
    assert "fewer COMPUTE ops than the 2 blocks" in str(err.value)


def test_greedy_reports_ops_outside_every_partition():
    with pytest.raises(SchedulingError) as err:
        greedy_schedule([_m(), _m(), _g()], [], num_partitions=2, blocks_per_partition=1)
    assert err.value.ops == (2,) and "equal partitions" in str(err.value)


def test_greedy_reports_ops_after_the_last_block():
    with pytest.raises(SchedulingError) as err:
        greedy_schedule([_m(), _g()], [], num_partitions=1, blocks_per_partition=1)
    assert err.value.ops == (1,) and "never placed" in str(err.value)


def test_empty_body_gives_empty_orders():
    req = SchedulingRequest((), ())
    assert [get_strategy(s)(req) for s in ("IDENTITY", "GREEDY", "CSP")] == [[], [], []]
    assert simple_greedy_schedule([], []) == [] and optimal_schedule([], []) == []


def test_simple_greedy_and_self_loop():
    body = [_g(), _f(), _m()]
    assert simple_greedy_schedule(body, [DepEdge.flow(2, 0)]) == [1, 2, 0]
    with pytest.raises(SchedulingError) as err:
        simple_greedy_schedule(body, [DepEdge(1, 1, 0, -1)])
    assert err.value.ops == (1,)


# --- exhaustive ------------------------------------------------------------------------

def test_optimal_schedule_improves_on_simple_greedy():
    # in-order MMA issue: the dependent MMA should not block the independent one
    body = [_g(100), _m(16), _m(16)]
    edges = [DepEdge.flow(0, 1)]
    seed = simple_greedy_schedule(body, edges)
    assert seed == [0, 1, 2] and evaluate_schedule(body, edges, seed)[0] == 132
    assert asap_lower_bound(body, edges) == 116
    best = optimal_schedule(body, edges)
    assert best == [0, 2, 1] and evaluate_schedule(body, edges, best)[0] == 116


def test_optimal_schedule_returns_a_seed_that_reaches_the_bound():
    body = [_m(50), _f(20), _m(16)]
    edges = [DepEdge.flow(1, 2)]
    assert optimal_schedule(body, edges) == [0, 1, 2]  # 66 == lower bound


def test_csp_search_respects_partitions_and_globals_cap():
    # seed [0,1,2,3 | ...] bunches both loads before the MMA; penalty makes the search run
    half = [_g(30), _g(30), _m(16), _f(10)]
    body = half + half
    req = SchedulingRequest(body, [], max_globals_per_block=1, lds_contention_penalty=25,
                            num_partitions=2, blocks_per_partition=1)
    with pytest.raises(SchedulingError):  # the frag after the block's MMA is never placed
        get_strategy("CSP")(req)
    half = [_g(30), _g(30), _f(10), _m(16)]
    body = half + half
    for cap in (0, 1):
        req = SchedulingRequest(body, [], max_globals_per_block=cap, lds_contention_penalty=25,
                                num_partitions=2, blocks_per_partition=1)
        order = get_strategy("CSP")(req)
        assert sorted(order[:4]) == [0, 1, 2, 3] and sorted(order[4:]) == [4, 5, 6, 7]
        assert evaluate_schedule(body, [], order, 25)[0] <= \
            evaluate_schedule(body, [], list(range(8)), 25)[0]


def test_vgpr_budget_keeps_the_seed_as_incumbent():
    body = [_f(), _f(), _m(), _m()]
    body = [o.evolve(vgpr_def=8) for o in body]
    req = SchedulingRequest(body, [], max_vgpr=8, num_partitions=1, blocks_per_partition=2)
    # every order peaks at 32 > 8, so no leaf qualifies and the seed comes back
    assert get_strategy("CSP")(req) == greedy_schedule(body, [], num_partitions=1,
                                                       blocks_per_partition=2)


def test_csp_strategy_only_searches_orders_the_block_program_can_hold():
    body, edges = _pingpong_ldg()
    req = SchedulingRequest(body, edges, lds_contention_penalty=15, time_limit=0.3)
    order = get_strategy("CSP")(req)
    frags = globals_ = 0
    for pos, i in enumerate(order):
        role = body[i].role
        frags += role == OpRole.FRAGMENT_LOAD
        globals_ += role == OpRole.GLOBAL_LOAD
        assert frags <= 2 and globals_ <= 2
        if role == OpRole.COMPUTE:
            frags = globals_ = 0
        if pos in (11, 23):
            assert role == OpRole.COMPUTE


def test_csp_node_limit_returns_the_incumbent():
    body, edges = _pingpong_ldg()
    req = SchedulingRequest(body, edges, lds_contention_penalty=20, node_limit=5000)
    order = get_strategy("CSP")(req)
    assert order == get_strategy("CSP")(req)  # a node budget cuts at the same place every time
    seed = greedy_schedule(body, edges)
    assert sorted(order) == list(range(24))
    assert evaluate_schedule(body, edges, order, 20)[0] <= evaluate_schedule(body, edges, seed, 20)[0]


# --- the pruned CSP search returns exactly what the reference's unpruned one does -------

def _reference_csp(body, edges, cap, penalty, max_vgpr, parts, blocks, slots=0):
    """Brute force over ready orders in the DFS's lexicographic visiting order."""
    n = len(body)
    seed = greedy_schedule(body, edges, num_partitions=parts, blocks_per_partition=blocks)
    ms, pk = evaluate_schedule(body, edges, seed, penalty)
    lb = asap_lower_bound(body, edges, penalty)
    if ms == lb and (max_vgpr == 999999 or pk <= max_vgpr):
        return seed
    size = n // parts
    preds = [[e.producer for e in edges if e.consumer == i and e.distance < 1] for i in range(n)]
    best, best_ms, best_pk = seed, ms, pk
    for perm in itertools.permutations(range(n)):
        ok, vg, pos_of = True, 0, {}
        for pos, i in enumerate(perm):
            k = min(pos // size, parts - 1)
            lo, hi = k * size, (n if k == parts - 1 else (k + 1) * size)
            if not lo <= i < hi or any(p not in pos_of for p in preds[i]):
                ok = False
                break
            if cap > 0 and body[i].role == OpRole.GLOBAL_LOAD:
                count = 0
                for q in range(pos - 1, lo - 1, -1):
                    r = body[perm[q]].role
                    if r == OpRole.COMPUTE:
                        break
                    count += r == OpRole.GLOBAL_LOAD
                if count >= cap:
                    ok = False
                    break
            if slots and not _fits_slots(body, perm, pos, lo, hi, slots):
                ok = False
                break
            if vg + body[i].vgpr_def > max_vgpr:
                ok = False
                break
            vg += body[i].vgpr_def - body[i].vgpr_kill
            pos_of[i] = pos
        if not ok:
            continue
        ms, pk = evaluate_schedule(body, edges, perm, penalty)
        if pk <= max_vgpr and (ms < best_ms or (ms == best_ms and pk < best_pk)):
            best, best_ms, best_pk = list(perm), ms, pk
        if best_ms == lb and best_pk == 0:
            break
    return best


def _fits_slots(body, perm, pos, lo, hi, slots):
    role = body[perm[pos]].role
    if pos == hi - 1 and role != OpRole.COMPUTE:
        return False
    if role not in (OpRole.FRAGMENT_LOAD, OpRole.GLOBAL_LOAD):
        return True
    same = 0
    for q in range(pos - 1, lo - 1, -1):
        r = body[perm[q]].role
        if r == OpRole.COMPUTE:
            break
        same += r == role
    return same < slots


_ROLE_OPS = {
    OpRole.GLOBAL_LOAD: (0, GM), OpRole.FRAGMENT_LOAD: (3, LDS), OpRole.COMPUTE: (5, MMA_U),
    OpRole.VALU_COMPUTE: (6, ResourceKind.VALU),
}


@st.composite
def _small_problems(draw):
    size = draw(st.integers(2, 4))
    k = draw(st.integers(1, size))
    body = []
    for _ in range(2):
        roles = [OpRole.COMPUTE] * (k - 1) + draw(st.lists(
            st.sampled_from([OpRole.GLOBAL_LOAD, OpRole.FRAGMENT_LOAD, OpRole.VALU_COMPUTE]),
            min_size=size - k, max_size=size - k))
        # a partition ending in COMPUTE keeps most greedy seeds complete
        for r in draw(st.permutations(roles)) + [OpRole.COMPUTE]:
            tag, res = _ROLE_OPS[r]
            body.append(op(tag, res, draw(st.integers(0, 40)), r,
                           vgpr_def=draw(st.integers(0, 6)), vgpr_kill=draw(st.integers(0, 3))))
    n = len(body)
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1),
                                    st.sampled_from([0, 0, 0, 1])), max_size=6))
    edges = [DepEdge.flow(min(a, b), max(a, b), d) for a, b, d in pairs if a != b]
    cap = draw(st.integers(0, 2))
    penalty = draw(st.sampled_from([0, 5, 15, 30]))
    max_vgpr = draw(st.sampled_from([999999, 999999, 10, 20]))
    slots = draw(st.sampled_from([0, 1, 2]))
    return body, edges, cap, penalty, max_vgpr, k, slots


@settings(max_examples=200, deadline=None)
@given(_small_problems())
def test_pruned_csp_equals_unpruned_reference_search(problem):
    body, edges, cap, penalty, max_vgpr, blocks, slots = problem
    kw = dict(max_globals_per_block=cap, lds_contention_penalty=penalty, max_vgpr=max_vgpr,
              blocks_per_partition=blocks, block_slots=slots)
    try:
        expect = _reference_csp(body, edges, cap, penalty, max_vgpr, 2, blocks, slots)
    except SchedulingError:
        with pytest.raises(SchedulingError):
            optimal_schedule_with_halves(body, edges, **kw)
        return
    assert optimal_schedule_with_halves(body, edges, **kw) == expect


@st.composite
def _small_dags(draw):
    n = draw(st.integers(1, 6))
    body = []
    for _ in range(n):
        r = draw(st.sampled_from(sorted(_ROLE_OPS)))
        tag, res = _ROLE_OPS[r]
        body.append(op(tag, res, draw(st.integers(0, 60)), r, vgpr_def=draw(st.integers(0, 4))))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=6))
    edges = [DepEdge.flow(min(a, b), max(a, b)) for a, b in pairs if a != b]
    return body, draw(st.permutations(edges))


@settings(max_examples=150, deadline=None)
@given(_small_dags())
def test_optimal_schedule_reaches_the_minimum_makespan(dag):
    body, edges = dag
    n = len(body)
    preds = [{e.producer for e in edges if e.consumer == i} for i in range(n)]
    best = min(evaluate_schedule(body, edges, perm)[0]
               for perm in itertools.permutations(range(n))
               if all(preds[i] <= set(perm[:k]) for k, i in enumerate(perm)))
    order = optimal_schedule(body, edges)
    assert sorted(order) == list(range(n))
    assert all(preds[i] <= set(order[:k]) for k, i in enumerate(order))
    assert evaluate_schedule(body, edges, order)[0] == best
