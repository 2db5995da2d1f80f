"""Body transforms: turn a declared (annotated) body into execution order.

Each transform is a pure function of the op list and the config. Where the
reference silently lost ops (a global that never fits a block, a fragment no MMA
uses, an op of a role the transform does not place) these raise TransformError
naming the ops instead.
"""
from __future__ import annotations

from typing import Sequence

from pipeline_core.config import PipelineConfig
from pipeline_core.edges import DepEdge, derive_edges
from pipeline_core.errors import TransformError
from pipeline_core.ops import Op, OpRole, barrier, tag_name
from pipeline_core.scheduling.exhaustive import optimal_schedule


def _describe(i: int, o: Op) -> str:
    return (f"op {i} ({tag_name(o.tag)}, {o.role.name}, channel {o.channel}, stage {o.stage}, "
            f"subtile {o.subtile})")


def _dropped_error(what: str, dropped: Sequence[tuple[int, Op]], why: str) -> TransformError:
    listing = "; ".join(_describe(i, o) for i, o in dropped)
    return TransformError(f"{what} would drop {len(dropped)} op(s): {listing}. {why}",
                          ops=tuple(i for i, _ in dropped))


# --- single buffer -----------------------------------------------------------

def single_buffer_reorder(body: Sequence[Op], config: PipelineConfig) -> list[Op]:
    """Software-pipeline a single-buffer body around two new barriers.

    Order: non-carried frags, carried computes, barrier, stores, globals, the other
    computes, barrier, the loop-carried ops (role ``loop_carried.role``, subtile ==
    selector). The body's own SYNC ops are replaced by the two new barriers.
    Raises TransformError for ops no step places (e.g. un-annotated ops, or carried
    frags when loop_carried.role is NONE) and for ops two steps would both place.
    """
    sel = config.loop_carried.selector
    lc_role = config.loop_carried.role
    indexed = list(enumerate(body))

    def pick(pred) -> list[tuple[int, Op]]:
        return [(i, o) for i, o in indexed if pred(o)]

    steps = [
        pick(lambda o: o.role == OpRole.FRAGMENT_LOAD and o.subtile != sel),
        pick(lambda o: o.role == OpRole.COMPUTE and o.subtile == sel),
        None,
        pick(lambda o: o.role == OpRole.SHARED_STORE),
        pick(lambda o: o.role == OpRole.GLOBAL_LOAD),
        pick(lambda o: o.role == OpRole.COMPUTE and o.subtile != sel),
        None,
        pick(lambda o: o.role == lc_role and o.subtile == sel),
    ]
    out: list[Op] = []
    used: dict[int, int] = {}
    for step in steps:
        if step is None:
            out.append(barrier())
            continue
        for i, o in step:
            used[i] = used.get(i, 0) + 1
            out.append(o)
    twice = [(i, body[i]) for i, k in sorted(used.items()) if k > 1]
    if twice:
        raise TransformError(
            "single_buffer_reorder would emit these ops twice: "
            + "; ".join(_describe(i, o) for i, o in twice)
            + f". loop_carried.role {lc_role.name} overlaps another step; use FRAGMENT_LOAD",
            ops=tuple(i for i, _ in twice))
    dropped = [(i, o) for i, o in indexed if i not in used and o.role != OpRole.SYNC]
    if dropped:
        raise _dropped_error(
            "single_buffer_reorder", dropped,
            "It places only FRAGMENT_LOAD, COMPUTE, SHARED_STORE and GLOBAL_LOAD ops (annotate "
            f"the body first) and re-adds carried ops of loop_carried.role ({lc_role.name}) with "
            f"subtile {sel}")
    return out


def optimize_within_barriers(body: Sequence[Op], config: PipelineConfig) -> list[Op]:
    """Reorder each stretch between SYNC ops for makespan; SYNC ops keep their positions.

    Edges are derived once from the whole body; each segment of 2+ ops is ordered by
    ``optimal_schedule`` under the distance-0 edges lying inside it.
    """
    edges = derive_edges(body, config)
    out: list[Op] = []
    start = 0
    bounds = [i for i, o in enumerate(body) if o.role == OpRole.SYNC] + [len(body)]
    for end in bounds:
        segment = list(body[start:end])
        if len(segment) >= 2:
            local = [DepEdge(e.producer - start, e.consumer - start, e.kind, e.distance)
                     for e in edges
                     if e.distance == 0 and start <= e.producer < end and start <= e.consumer < end]
            order = optimal_schedule(segment, local)
            out.extend(segment[k] for k in order)
        else:
            out.extend(segment)
        if end < len(body):
            out.append(body[end])
        start = end + 1
    return out


# --- double buffer -----------------------------------------------------------

def mma_block_interleave(ops: Sequence[Op], config: PipelineConfig, *,
                         max_globals: int | None = None, base_index: int = 0) -> list[Op]:
    """Distribute one partition's [globals, frags, MMAs] into MMA-centred blocks.

    Per MMA (in order): the B frag for a new column and the A frag for a new row
    (``frag_order``), then up to ``available`` globals first-in first-out, then the
    MMA. ``available`` = heavy/light target - frags - 1 (min 0); with a globals cap
    > 0 it is clamped to [1, cap]. ``max_globals`` defaults to
    ``config.block_sizing.max_globals``; pass 0 for the reference's Pipe version,
    which ignores the cap. Frags match MMAs by subtile only (A: row, B: column).
    ``base_index`` offsets op indices in error messages.
    """
    cap = config.block_sizing.max_globals if max_globals is None else max_globals
    heavy, light = config.block_sizing.heavy, config.block_sizing.light
    b_first = config.frag_order.b_before_a
    globals_, frag_a, frag_b, mmas, other = [], [], [], [], []
    for i, o in enumerate(ops):
        item = (base_index + i, o)
        if o.role == OpRole.GLOBAL_LOAD:
            globals_.append(item)
        elif o.role == OpRole.FRAGMENT_LOAD and o.channel == 0:
            frag_a.append(item)
        elif o.role == OpRole.FRAGMENT_LOAD and o.channel == 1:
            frag_b.append(item)
        elif o.role == OpRole.COMPUTE:
            mmas.append(item)
        else:
            other.append(item)
    if other:
        raise _dropped_error(
            "mma_block_interleave", other,
            "It places only GLOBAL_LOAD ops, FRAGMENT_LOAD ops on channel 0 or 1 and COMPUTE "
            "ops; annotate the body first and leave barriers and waits to the block program")

    def first_with_subtile(frags, subtile):
        return next((item for item in frags if item[1].subtile == subtile), None)

    out: list[tuple[int, Op]] = []
    seen_rows: set[int] = set()
    seen_cols: set[int] = set()
    cursor = 0
    for mma in mmas:
        m, n = mma[1].stage, mma[1].subtile
        new_m, new_n = m not in seen_rows, n not in seen_cols
        seen_rows.add(m)
        seen_cols.add(n)
        fb = first_with_subtile(frag_b, n) if new_n else None
        fa = first_with_subtile(frag_a, m) if new_m else None
        for frag in ((fb, fa) if b_first else (fa, fb)):
            if frag is not None:
                out.append(frag)
        available = max((heavy if new_m else light) - (int(new_n) + int(new_m)) - 1, 0)
        if cap > 0:
            available = min(max(available, 1), cap)
        take = min(available, len(globals_) - cursor)
        out.extend(globals_[cursor:cursor + take])
        cursor += take
        out.append(mma)
    placed = {i for i, _ in out}
    dropped = [item for item in globals_ + frag_a + frag_b if item[0] not in placed]
    if dropped:
        raise _dropped_error(
            "mma_block_interleave", sorted(dropped, key=lambda item: item[0]),
            f"Globals beyond the block budget (heavy {heavy}, light {light}, max_globals {cap}; "
            'docs/guide/concepts.md, "Block sizing") never fit, and a frag is placed only '
            "with the first MMA of its row (A) or column (B), the first frag per subtile winning")
    return [o for _, o in out]


def double_buffer_reorder(body: Sequence[Op], config: PipelineConfig) -> list[Op]:
    """Split the body into ``num_partitions`` equal parts (the last takes any remainder)
    and interleave each into MMA blocks with the config's globals cap."""
    parts = max(config.num_partitions, 1)
    size = len(body) // parts
    out: list[Op] = []
    for k in range(parts):
        lo = k * size
        hi = len(body) if k == parts - 1 else lo + size
        out.extend(mma_block_interleave(body[lo:hi], config, base_index=lo))
    return out
