"""EXACT: a provably minimal-makespan order under the CSP's constraints, fast at 100+ ops.

Same problem as the reference's CSP (``exhaustive.optimal_schedule_with_halves``):
positions are isolated per partition, an op is placed only after its
same-iteration producers, at most ``max_globals_per_block`` global loads per
block, a hard VGPR budget, the objective (makespan, VGPR peak) costed by the same
evaluator (LDS-port penalty included), the greedy seed as first incumbent and the
same early exit.  It also returns the same order: the CSP keeps the first leaf,
in lexicographic order of op indices, that is strictly better than all before it,
i.e. the lexicographically first optimal order, or the seed when nothing beats it.
EXACT reaches that order without enumerating leaves (``exact_search``):

1. *Optimise*: depth-first branch and bound, children in best-bound order, to find
   and prove the optimal value.  Pruning:
   * partial lower bounds (``bounds.NodeBound``): critical path from the prefix's
     real finish times, per-partition one-machine relaxations (preemptive Jackson)
     of the MMA unit, VALU and LDS port, and release times for global loads that
     must wait for blocks (COMPUTE ops) under the globals cap;
   * dominance memo: prefixes that placed the same ops with the same rule state are
     compared on what their futures depend on (unit free times, finish times of
     placed ops with unplaced consumers, makespan and peak so far); a prefix no
     better than one already explored is cut;
   * symmetry: interchangeable ops (same fields, partition, producers, consumers)
     are placed in index order;
   * commuting pairs: two adjacent ops that neither depend on each other nor share
     a unit, block or VGPR state give the same state in either order; only the
     increasing-index order is explored.
2. *Canonical order*: if the optimum beats the seed, a lexicographic DFS bounded by
   the optimum finds the lexicographically first optimal order.  Every reduction
   above only removes orders whose lexicographically smaller counterpart has the
   same or a better value, so that order stays reachable.

Block mode (``EXACT_BLOCKS``) adds the block program's limits, so that the order
always compiles: <= 2 fragment and <= 2 (or max_globals) global loads per block,
partitions end with their last COMPUTE, and the warp-stagger LDS race rule when
there is no globals cap.  The CSP does not know these limits; its orders can be
rejected by the program builder for grids larger than 2x2.

A search that reaches its time limit returns the best order found with the proven
lower bound and the gap (``ExactResult``) and says so on stderr.
"""
from __future__ import annotations

import math
import sys
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
#: Share of the budget block mode may spend finding a first valid order.
FIRST_ORDER_SHARE = 0.25


@attrs.frozen
class ExactResult:
    """What an exact search found and what it proved.

    ``lower_bound`` holds for every valid order; ``proven_optimal`` means none has
    a smaller makespan (``gap`` = makespan - lower_bound = 0).  ``canonical`` says
    the order is the one the CSP would return (the seed, or the lexicographically
    first optimal order).  ``seed_valid`` is False when the greedy seed breaks a
    rule (the CSP keeps such a seed if nothing valid beats it; so does EXACT).
    """

    order: tuple[int, ...]
    makespan: int
    vgpr_peak: int
    lower_bound: int
    proven_optimal: bool
    gap: int
    nodes: int
    time: float
    status: str  #: "seed-at-bound", "optimal" or "time-limit"
    seed_makespan: int | None
    root_bound: int
    canonical: bool = True
    seed_valid: bool = True

    @property
    def gap_ratio(self) -> float:
        return self.gap / self.makespan if self.makespan else 0.0

    def summary(self) -> str:
        state = "proven optimal" if self.proven_optimal else \
            f"gap {self.gap} cycles ({self.gap_ratio:.1%}) at the time limit"
        return (f"makespan {self.makespan}, lower bound {self.lower_bound}, {state}; "
                f"{self.nodes} nodes in {self.time:.2f}s")


def exact_schedule(body: Sequence[Op], edges: Sequence[DepEdge], *, max_globals_per_block: int = 0,
                   lds_contention_penalty: int = 0, max_vgpr: int = UNLIMITED_VGPR,
                   num_partitions: int = 2, blocks_per_partition: int = 4,
                   time_limit: float | None = DEFAULT_TIME_LIMIT, blocks: bool = False,
                   progress: Callable | None = None) -> ExactResult:
    """Solve the CSP's problem exactly (module docstring); a timeout returns the best so far.

    Raises SchedulingError only when no valid order exists (or none was found in time).
    """
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    penalty = lds_contention_penalty
    pb = Problem(body, edges, penalty=penalty, num_partitions=num_partitions)
    tables = Tables(body, edges)
    n = pb.n
    ref_lb = lower_bound(tables, penalty)
    rules = None
    if blocks:
        rules = BlockRules(BLOCK_SLOTS, BLOCK_SLOTS, blocks_per_partition,
                           stagger_rule=max_globals_per_block == 0)
    search = Search(pb, max_globals=max_globals_per_block, max_vgpr=max_vgpr, blocks=rules,
                    deadline=deadline, progress=progress)
    rb = search.node_bound() if n else 0

    def elapsed() -> float:
        return time.perf_counter() - t0

    try:
        seed = greedy_order(tables, num_partitions, blocks_per_partition) if n else []
    except SchedulingError:
        seed = None
    seed_valid = seed is not None and search.is_valid(seed)
    # like the CSP, accept a seed that breaks the globals cap or the VGPR budget; block
    # mode still needs it to compile
    seed_usable = seed is not None and (not blocks or search.is_valid(seed, csp_rules=False))
    seed_ms = None
    if seed is not None:
        seed_value = pb.simulate(seed)
        seed_ms = seed_value[0]
        # The CSP's early exit comes first: the seed reaches the ASAP bound and fits the
        # budget.  Its port term (penalty x port ops) is no bound when the penalty exceeds
        # an op's latency; then ref_lb > rb, and the seed must meet the valid bound instead.
        if (seed_value[0] == ref_lb and ref_lb <= rb and seed_usable
                and (max_vgpr == UNLIMITED_VGPR or seed_value[1] <= max_vgpr)):
            return ExactResult(tuple(seed), seed_value[0], seed_value[1], ref_lb, True, 0, 0,
                               elapsed(), "seed-at-bound", seed_ms, rb, True, seed_valid)
    if not seed_usable:
        seed = None
    if seed is None:
        # no usable seed: the lexicographically first valid order is the first incumbent
        if deadline is not None:
            search.deadline = t0 + FIRST_ORDER_SHARE * time_limit
        first = search.first_at_most((math.inf, math.inf), use_bounds=False)
        search.deadline = deadline
        if first is None:
            why = "within the time limit" if search.timed_out else "at all"
            raise SchedulingError(
                f"EXACT: no order satisfies the constraints {why} (partition isolation, "
                f"producers first, max {max_globals_per_block or 'any'} globals per block, VGPR "
                f"budget {max_vgpr}{', block slots' if blocks else ''})", strategy="EXACT")
        inc_order, inc_value = first, pb.simulate(first)
    else:
        inc_order, inc_value = list(seed), seed_value
    finished = search.optimise(inc_order, inc_value)
    best_order, best_value = search.best_order, search.best
    lb = best_value[0] if finished else max(rb, min(search.open_lb, best_value[0]))
    canonical = finished
    if finished and (seed is None or best_value < seed_value):
        # phase 2 gets what is left of the budget, and at least a few seconds
        if deadline is not None:
            search.deadline = max(deadline, time.perf_counter() + 5.0)
        lex = search.first_at_most(best_value)
        if lex is not None:
            best_order = lex
        else:
            canonical = False
    ms, pk = pb.simulate(best_order)
    lb = min(lb, ms)
    proven = finished or lb == ms
    return ExactResult(tuple(best_order), ms, pk, int(lb), proven, int(ms - lb), search.nodes,
                       elapsed(), "optimal" if proven else "time-limit", seed_ms, int(rb),
                       canonical, seed_valid)


def _run(request: SchedulingRequest, *, blocks: bool, label: str) -> list[int]:
    from pipeline_core.scheduling.progress import terminal_progress

    limit = DEFAULT_TIME_LIMIT if request.time_limit is None else request.time_limit
    progress = terminal_progress(label)
    try:
        result = exact_schedule(
            request.body, request.edges, max_globals_per_block=request.max_globals_per_block,
            lds_contention_penalty=request.lds_contention_penalty, max_vgpr=request.max_vgpr,
            num_partitions=request.num_partitions,
            blocks_per_partition=request.blocks_per_partition, time_limit=limit, blocks=blocks,
            progress=progress)
    except SchedulingError as exc:
        raise SchedulingError(str(exc).replace("EXACT", label, 1), strategy=label,
                              ops=exc.ops) from None
    finally:
        if progress is not None:
            progress.close()
    if not result.proven_optimal:
        print(f"{label}: time limit of {limit:g}s reached; returning the best order found: "
              f"{result.summary()}", file=sys.stderr)
    return list(result.order)


def exact_strategy(request: SchedulingRequest) -> list[int]:
    """EXACT: the CSP's constraints and result, proven optimal (or the best with its gap)."""
    return _run(request, blocks=False, label="EXACT")


def exact_blocks_strategy(request: SchedulingRequest) -> list[int]:
    """EXACT_BLOCKS: EXACT restricted to orders the block program accepts."""
    return _run(request, blocks=True, label="EXACT_BLOCKS")
