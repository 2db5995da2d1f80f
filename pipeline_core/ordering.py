"""The ordering stage of the compiler: a strategy's permutation of the body, validated.

The compiler asks its plugin host for the strategy named by
``ScheduleConfig.scheduling`` (``PluginHost.get_strategy``) and hands the
order it returns to the lowering; no lowering looks a strategy up itself.
"""
from __future__ import annotations

from typing import Sequence

from pipeline_core.config import PipelineConfig, ScheduleConfig
from pipeline_core.edges import DepEdge
from pipeline_core.errors import ProgramError, SchedulingError
from pipeline_core.ops import Op
from pipeline_core.scheduling.registry import SchedulingRequest, Strategy


def check_order(order: Sequence[int], n: int, source: str) -> tuple[int, ...]:
    """The order as a tuple, or an error saying how it is not a permutation of range(n).

    ``source`` names where the order came from: ``"strategy NAME"`` raises a
    :class:`SchedulingError` naming the strategy, anything else a :class:`ProgramError`.
    """
    try:
        result = tuple(int(i) for i in order)
    except (TypeError, ValueError):
        result = None
    problem = ""
    if result is None:
        problem = "it is not a sequence of integers"
    elif len(result) != n:
        problem = f"it has {len(result)} entries for a body of {n} ops"
    else:
        seen: set[int] = set()
        for i in result:
            if not 0 <= i < n:
                problem = f"index {i} is outside 0..{n - 1}"
                break
            if i in seen:
                problem = f"index {i} appears twice"
                break
            seen.add(i)
    if not problem:
        return result  # type: ignore[return-value]
    missing = tuple(sorted(set(range(n)) - set(result or ())))
    msg = (f"the order from {source} is not a permutation of the body indices 0..{n - 1}: "
           f"{problem}" + (f" (missing: {list(missing)})" if missing else "") + ".")
    if source.startswith("strategy"):
        raise SchedulingError(msg + " The strategy must place every op exactly once.",
                              strategy=source.split(" ", 1)[1], ops=missing)
    raise ProgramError(msg + " Pass a permutation of range(len(body)).", ops=missing)


def scheduling_request(body: Sequence[Op], edges: Sequence[DepEdge], config: PipelineConfig,
                       sched: ScheduleConfig) -> SchedulingRequest:
    """What a strategy is told about this body: edges, block sizing and the search knobs."""
    return SchedulingRequest(
        body=body, edges=edges,
        max_globals_per_block=config.block_sizing.max_globals,
        lds_contention_penalty=sched.lds_contention_penalty,
        max_vgpr=sched.max_vgpr,
        time_limit=sched.search_time_limit_ms / 1000 if sched.search_time_limit_ms else None,
        node_limit=sched.search_node_limit or None,
        num_partitions=config.num_partitions,
        blocks_per_partition=config.blocks_per_partition)


def schedule_order(body: Sequence[Op], config: PipelineConfig, sched: ScheduleConfig,
                   edges: Sequence[DepEdge] = (), *, strategy: Strategy) -> tuple[int, ...]:
    """Ask ``strategy`` (named by ``sched.scheduling``) for an order of ``body``.

    Edges are derived from the rule tables when none are given (tools, tests).
    """
    body = tuple(body)
    if not edges:
        from pipeline_core.edges import derive_edges
        edges = derive_edges(body, config)
    request = scheduling_request(body, edges, config, sched)
    label = sched.scheduling.strip().upper()
    order = check_order(strategy(request), len(body), f"strategy {label}")
    check_vgpr_budget(body, edges, order, sched, label)
    return order


def check_vgpr_budget(body: Sequence[Op], edges: Sequence[DepEdge], order: Sequence[int],
                      sched: ScheduleConfig, label: str) -> None:
    """Refuse an order over ``-c max_vgpr``: a strategy returns its best order even when no
    order it found meets the budget (the CSP and EXACT fall back to their seed), and a
    schedule over its register budget must not leave ``compile`` silently."""
    from pipeline_core.limits import VGPR_BUDGET
    from pipeline_core.scheduling.evaluate import Tables, simulate

    if sched.max_vgpr >= VGPR_BUDGET.high:  # the top value means "unlimited"
        return
    tables = Tables(body, edges)
    _, peak = simulate(tables, order, sched.lds_contention_penalty)
    if peak <= sched.max_vgpr:
        return
    found = (f"every order peaks at {peak} VGPRs (no op of the body frees registers)"
             if not any(tables.vgpr_kill) else
             f"the best order strategy {label} found peaks at {peak} VGPRs")
    raise SchedulingError(
        f"-c max_vgpr={sched.max_vgpr}: no order meets the VGPR budget: {found}; raise "
        f"max_vgpr to at least {peak} (or {int(VGPR_BUDGET.high)} for no budget)",
        strategy=label)
