"""The built-in strategies IDENTITY, GREEDY, CSP, EXACT and EXACT_BLOCKS.

Each takes a SchedulingRequest and returns a permutation of the body's indices.
"""
from __future__ import annotations

from types import MappingProxyType

from pipeline_core.errors import UnknownNameError
from pipeline_core.scheduling.exact import exact_blocks_strategy, exact_strategy
from pipeline_core.scheduling.exhaustive import optimal_schedule_with_halves
from pipeline_core.scheduling.greedy import greedy_schedule
from pipeline_core.scheduling.registry import SchedulingRequest, Strategy


def identity_strategy(request: SchedulingRequest) -> list[int]:
    """Declaration order, unchanged (edges are not consulted, as in the reference)."""
    return list(range(len(request.body)))


def greedy_strategy(request: SchedulingRequest) -> list[int]:
    """Partition-isolated list scheduler; a COMPUTE op closes each block."""
    return greedy_schedule(request.body, request.edges, num_partitions=request.num_partitions,
                           blocks_per_partition=request.blocks_per_partition)


#: Frag and global slots of a block (pre_op_0/1, global_load/_1). The reference's
#: search may return orders whose blocks overflow these slots or that end a partition
#: after its last MMA; its block builder then drops ops silently. The CSP strategy
#: searches only orders that fit (the greedy seed and golden results are unchanged).
BLOCK_SLOTS = 2


def csp_strategy(request: SchedulingRequest) -> list[int]:
    """Partition-isolated exhaustive search seeded by GREEDY (the reference's CSP)."""
    return optimal_schedule_with_halves(
        request.body, request.edges, max_globals_per_block=request.max_globals_per_block,
        block_slots=BLOCK_SLOTS,
        lds_contention_penalty=request.lds_contention_penalty, max_vgpr=request.max_vgpr,
        num_partitions=request.num_partitions, blocks_per_partition=request.blocks_per_partition,
        time_limit=request.time_limit, node_limit=request.node_limit,
        on_cut=lambda cut: request.warn_cut("CSP", cut))


#: Read-only: the core plugin registers these with each host it is loaded into.
BUILTIN_STRATEGIES = MappingProxyType({
    "IDENTITY": identity_strategy,
    "GREEDY": greedy_strategy,
    "CSP": csp_strategy,
    "EXACT": exact_strategy,
    "EXACT_BLOCKS": exact_blocks_strategy,
})


def get_strategy(name: str) -> Strategy:
    """A built-in strategy by name (case-insensitive); plugin strategies live on the host."""
    key = name.strip().upper()
    try:
        return BUILTIN_STRATEGIES[key]
    except KeyError:
        raise UnknownNameError("scheduling strategy", key, strategy_names()) from None


def strategy_names() -> list[str]:
    """The built-in strategy names."""
    return sorted(BUILTIN_STRATEGIES)
