"""EXACT: a provably minimal-makespan order under the CSP's constraints, fast at 100+ ops.

Same problem as the CSP (``exhaustive.optimal_schedule_with_halves``): positions
isolated per partition, an op placed only after its same-iteration producers, at
most ``max_globals_per_block`` global loads per block, a hard VGPR budget, the
objective (makespan, VGPR peak) costed by the same evaluator (LDS-port penalty
included), the greedy seed as first incumbent and the same early exit; with
``block_slots`` (the CSP strategy passes 2) also the block program's shape: at most
that many fragment and global loads per block, every partition ending with a
COMPUTE.  It returns the same order: the CSP keeps the first leaf, in
lexicographic order of op indices, that is strictly better than all before it,
i.e. the lexicographically first optimal order, or the seed when nothing beats it.
EXACT reaches that order without enumerating leaves (``exact_search``):

1. *Bounds first*: the root relaxation (``bounds.NodeBound``) and, per later
   partition, an exact solve of that partition from an optimistic past
   (``_decomposition_bound``); when the incumbent meets them, it is optimal.
2. *Optimise*: depth-first branch and bound, children in best-bound order, to find
   and prove the optimal value.  Pruning:
   * partial lower bounds: critical path from the prefix's real finish times (with
     producers that share a unit serialised), per-partition one-machine relaxations
     (preemptive Jackson) of the MMA unit, VALU and LDS port, and release times for
     loads that must wait for blocks (COMPUTE ops) under the block limits;
   * dominance memo: prefixes that placed the same ops with the same rule state are
     compared on what their futures depend on (unit free times, finish times of
     placed ops with unplaced consumers, makespan and peak so far); a prefix no
     better than one already explored is cut;
   * feasibility: the loads left in a partition must fit its remaining blocks
     (counting, and Hall's condition for loads that wait for fragment loads);
   * symmetry: interchangeable ops (same fields, partition, producers, consumers)
     are placed in index order;
   * commuting pairs: two adjacent ops that neither depend on each other nor share
     a unit, block or VGPR state give the same state in either order; only the
     increasing-index order is explored.
3. *Canonical order*: if the optimum beats the seed, a lexicographic DFS bounded by
   the optimum finds the lexicographically first optimal order.  Every reduction
   above only removes orders whose lexicographically smaller counterpart has the
   same or a better value, so that order stays reachable.

``strict`` (``EXACT_BLOCKS``) holds the seed to the rules too, so that every result
compiles (the CSP keeps a seed whose blocks overflow, e.g. GREEDY's bunched global
loads on grids beyond 2 x 2), and adds the warp-stagger LDS race rule when there is
no globals cap; its result is the seed or the first optimum found.

A search that reaches its time limit returns the best order found with the proven
lower bound and the gap (``ExactResult``) and says so on stderr.
"""
from __future__ import annotations

import math
import time
from typing import Callable, Sequence

import attrs

from pipeline_core.edges import DepEdge
from pipeline_core.errors import SchedulingError
from pipeline_core.ops import Op
from pipeline_core.scheduling.bounds import Problem
from pipeline_core.scheduling.evaluate import Tables, lower_bound
from pipeline_core.scheduling.exact_search import BLOCK_SLOTS, BlockRules, Search
from pipeline_core.scheduling.greedy import greedy_order
from pipeline_core.scheduling.registry import SchedulingRequest

#: The reference's "no VGPR budget" sentinel.
UNLIMITED_VGPR = 999999
#: Time budget of the registered strategies when the request gives none (seconds).
DEFAULT_TIME_LIMIT = 60.0
#: Node budget of the canonical-order search (phase 2); past it the optimum found stands.
CANONICAL_NODES = 5000
#: Share of the remaining budget for each partition's decomposition bound.
DECOMPOSITION_SHARE = 0.3


@attrs.frozen
class ExactResult:
    """What an exact search found and what it proved.

    ``lower_bound`` holds for every valid order; ``proven_optimal`` means none has
    a smaller makespan (``gap`` = makespan - lower_bound = 0).  ``canonical`` says
    the order is the one the CSP would return (the seed, or the lexicographically
    first optimal order).  ``seed_valid`` is False when the greedy seed breaks a
    rule (the CSP keeps such a seed if nothing valid beats it; so does
    :func:`exact_schedule` unless ``valid_only``).  ``order_valid`` is False when the
    returned order breaks a rule no program can hold (the block slots: it would not
    compile): it is then never ``proven_optimal``.
    """

    order: tuple[int, ...]
    makespan: int
    vgpr_peak: int
    lower_bound: int
    proven_optimal: bool
    gap: int
    nodes: int
    time: float
    status: str  #: "seed-at-bound", "optimal", "time-limit", "node-limit" or "invalid-seed"
    seed_makespan: int | None
    root_bound: int
    canonical: bool = True
    seed_valid: bool = True
    order_valid: bool = True

    @property
    def gap_ratio(self) -> float:
        return self.gap / self.makespan if self.makespan else 0.0

    def summary(self) -> str:
        budget = "node limit" if self.status == "node-limit" else "time limit"
        state = "proven optimal" if self.proven_optimal else \
            "the greedy seed, which breaks the strategy's rules" if not self.order_valid else \
            f"gap {self.gap} cycles ({self.gap_ratio:.1%}) at the {budget}"
        return (f"makespan {self.makespan}, lower bound {self.lower_bound}, {state}; "
                f"{self.nodes} nodes in {self.time:.2f}s")


def exact_schedule(body: Sequence[Op], edges: Sequence[DepEdge], *, max_globals_per_block: int = 0,
                   lds_contention_penalty: int = 0, max_vgpr: int = UNLIMITED_VGPR,
                   num_partitions: int = 2, blocks_per_partition: int = 4,
                   time_limit: float | None = DEFAULT_TIME_LIMIT, block_slots: int = 0,
                   strict: bool = False, progress: Callable | None = None,
                   node_limit: int | None = None, valid_only: bool = False) -> ExactResult:
    """Solve the CSP's problem exactly (module docstring); a timeout returns the best so far.

    ``block_slots`` > 0: like the CSP strategy's option, only orders with at most that
    many fragment and global loads per block, each partition ending with a COMPUTE.
    ``strict``: every order must compile, the greedy seed included (the CSP keeps a
    seed that breaks the rules), plus the warp-stagger LDS race rule without a globals
    cap; the result is then the seed or the first optimum found, not the CSP's order.
    ``node_limit`` caps the nodes of the optimisation (and of each decomposition bound, a
    share of it): unlike ``time_limit`` it stops the search at the same point on every
    machine, so its result is reproducible.
    ``valid_only``: a seed that would not compile (block slots) is not kept, as the CSP
    keeps it, so the result is an order the program builder accepts.
    Raises SchedulingError only when no valid order exists (or none was found in time).
    """
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    penalty = lds_contention_penalty
    pb = Problem(body, edges, penalty=penalty, num_partitions=num_partitions)
    tables = Tables(body, edges)
    n = pb.n
    ref_lb = lower_bound(tables, penalty)
    if strict and block_slots <= 0:
        block_slots = BLOCK_SLOTS
    rules = None
    if block_slots > 0:
        rules = BlockRules(block_slots, block_slots, blocks_per_partition,
                           stagger_rule=strict and max_globals_per_block == 0)
    search = Search(pb, max_globals=max_globals_per_block, max_vgpr=max_vgpr, blocks=rules,
                    deadline=deadline, progress=progress)
    rb = search.node_bound() if n else 0
    sub_budget = None if node_limit is None else int(DECOMPOSITION_SHARE * node_limit)

    def elapsed() -> float:
        return time.perf_counter() - t0

    try:
        seed = greedy_order(tables, num_partitions, blocks_per_partition) if n else []
    except SchedulingError:
        seed = None
    seed_valid = seed is not None and search.is_valid(seed)
    # like the CSP, accept a seed that breaks the rules; strict mode needs it to compile
    seed_usable = seed is not None and (not strict or search.is_valid(seed, csp_rules=False))
    if valid_only and seed is not None and not search.is_valid(seed, csp_rules=False):
        seed_usable = False  # it would not compile
    seed_ms = None
    if seed is not None:
        seed_value = pb.simulate(seed)
        seed_ms = seed_value[0]
        # The CSP's early exit comes first: the seed reaches the ASAP bound and fits the
        # budget.  Its port term (penalty x port ops) is no bound when the penalty exceeds
        # an op's latency; then ref_lb > rb, and the seed must meet the valid bound instead.
        if (seed_value[0] == ref_lb and ref_lb <= rb and seed_usable
                and (max_vgpr == UNLIMITED_VGPR or seed_value[1] <= max_vgpr)):
            fits = search.is_valid(seed, csp_rules=False)
            return ExactResult(tuple(seed), seed_value[0], seed_value[1], ref_lb, fits,
                               0, 0, elapsed(), "seed-at-bound", seed_ms, rb, True, seed_valid,
                               order_valid=fits)
    if not seed_usable:
        seed = None
    if seed is None:
        # no usable seed: the lexicographically first valid order is the first incumbent
        first = search.first_at_most((math.inf, math.inf), use_bounds=False)
        if first is None:
            why = "within the time limit" if search.timed_out else "at all"
            raise SchedulingError(
                f"EXACT: no order satisfies the constraints {why} (partition isolation, "
                f"producers first, max {max_globals_per_block or 'any'} globals per block, VGPR "
                f"budget {max_vgpr}{', block slots' if rules else ''})", strategy="EXACT")
        inc_order, inc_value = first, pb.simulate(first)
    else:
        inc_order, inc_value = list(seed), seed_value
    rb = max(rb, _decomposition_bound(pb, search, rb, inc_value, max_globals_per_block, max_vgpr,
                                      rules, deadline, t0, progress, sub_budget))
    if rb >= inc_value[0] and not pb.any_kill:
        finished = True  # the incumbent meets a proven bound
        search.best_order, search.best = inc_order, inc_value
    else:
        search.node_budget = None if node_limit is None else search.nodes + node_limit
        finished = search.optimise(inc_order, inc_value, stop_at=rb)
        search.node_budget = None
    best_order, best_value = search.best_order, search.best
    assert best_order is not None  # both branches above start from the incumbent
    lb = best_value[0] if finished else max(rb, min(search.open_lb, best_value[0]))
    # strict mode has no CSP order to reproduce: its result is the seed or the first optimum
    canonical = finished and not strict
    if finished and not strict and (seed is None or best_value < seed_value):
        # phase 2 has a node budget (so the order never depends on the machine's speed) and
        # what is left of the time budget, at least a few seconds
        if deadline is not None:
            search.deadline = max(deadline, time.perf_counter() + 5.0)
        lex = search.first_at_most(best_value, node_limit=CANONICAL_NODES)
        if lex is not None:
            best_order = lex
        else:
            canonical = False
    ms, pk = pb.simulate(best_order)
    lb = min(lb, ms)
    order_valid = search.is_valid(best_order, csp_rules=False)  # the order compiles
    proven = (finished or lb == ms) and order_valid
    clock_ran_out = deadline is not None and time.perf_counter() > deadline
    cut_by = "node-limit" if node_limit is not None and not clock_ran_out else "time-limit"
    return ExactResult(tuple(best_order), ms, pk, int(lb), proven, int(ms - lb), search.nodes,
                       elapsed(), "optimal" if proven else cut_by if order_valid else
                       "invalid-seed", seed_ms, int(rb), canonical, seed_valid,
                       order_valid=order_valid)


def _decomposition_bound(pb: Problem, search: Search, rb: int, inc_value: tuple,
                         max_globals: int, max_vgpr: int, rules, deadline, t0: float,
                         progress, node_budget: int | None = None) -> int:
    """Solve each later partition from an optimistic past (``Search.assume_partitions``).

    Its optimum is a lower bound for the whole problem: partition isolation makes the
    past matter only through its state, and a better state never hurts.  It sees what
    the relaxations miss inside a partition (block limits, port order); the budget
    share is small, and a timeout still yields that search's proven bound.
    """
    best = rb
    for k in range(1, pb.parts):
        share = None
        if deadline is not None:
            share = time.perf_counter() + DECOMPOSITION_SHARE * max(0.0, deadline - time.perf_counter())
        sub = Search(pb, max_globals=max_globals, max_vgpr=max_vgpr, blocks=rules,
                     deadline=share, progress=progress)
        sub.assume_partitions(k)
        sub.node_budget = node_budget
        if sub.optimise(None, inc_value):
            value = sub.best[0]
        else:
            value = min(sub.open_lb, sub.best[0])
        search.nodes += sub.nodes
        if value != math.inf and value > best:
            best = int(value)
    return best


def _run(request: SchedulingRequest, *, strict: bool, label: str) -> list[int]:
    from pipeline_core.scheduling.progress import terminal_progress

    limit = DEFAULT_TIME_LIMIT if request.time_limit is None else request.time_limit
    progress = terminal_progress(label)
    try:
        result = exact_schedule(
            request.body, request.edges, max_globals_per_block=request.max_globals_per_block,
            lds_contention_penalty=request.lds_contention_penalty, max_vgpr=request.max_vgpr,
            num_partitions=request.num_partitions,
            blocks_per_partition=request.blocks_per_partition, time_limit=limit,
            block_slots=BLOCK_SLOTS, strict=strict, progress=progress,
            node_limit=request.node_limit, valid_only=True)
    except SchedulingError as exc:
        raise SchedulingError(str(exc).replace("EXACT", label, 1), strategy=label,
                              ops=exc.ops) from None
    finally:
        if progress is not None:
            progress.close()
    if result.status in ("node-limit", "time-limit"):
        timed = attrs.evolve(request, time_limit=limit)
        timed.warn_cut(label, result.status, result.summary())
    return list(result.order)


def exact_strategy(request: SchedulingRequest) -> list[int]:
    """EXACT: the CSP strategy's constraints (block slots included) and result, proven optimal
    (or the best order found, with its gap, at the time limit)."""
    return _run(request, strict=False, label="EXACT")


def exact_blocks_strategy(request: SchedulingRequest) -> list[int]:
    """EXACT_BLOCKS: EXACT where every order, the seed included, compiles."""
    return _run(request, strict=True, label="EXACT_BLOCKS")
