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
    return check_order(strategy(request), len(body), f"strategy {sched.scheduling.strip().upper()}")
