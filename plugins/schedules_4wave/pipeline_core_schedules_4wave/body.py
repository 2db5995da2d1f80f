"""The 4-wave loop body: a table of (load, frag, MMA) mini-iterations
(docs/guide/reference-behaviours.md, "The 4-wave configs").

Each outer iteration processes two K-tiles ("partitions"), each in its own LDS
stage. A partition is four mini-iterations; each issues one global load into
its own stage, one fragment load and one MMA quadrant. Minis 3 and 4 read their
fragment from the *other* stage ("cross-stage rotation"): the A/B fragments for
the next quadrant row are fetched while the current stage is being refilled.
"""
from __future__ import annotations

import attrs

from pipeline_core.plugin_api import KOffset, Op

from pipeline_core_amd_mi355x.tags import CHANNEL_A, CHANNEL_B, DoubleBufferTag as T

NUM_PARTITIONS = 2


@attrs.frozen
class MiniIteration:
    """One row of the table: which tile to load, which fragment to read, which quadrant to multiply."""

    load_tag: T
    load_channel: int
    load_subtile: int
    frag_tag: T
    frag_channel: int
    frag_subtile: int
    cross_stage: bool  #: the fragment reads the other partition's stage
    mma_m: int  #: MMA quadrant row (MMA.stage)
    mma_n: int  #: MMA quadrant column (MMA.subtile)


FOUR_WAVE_MINI_ITERS: tuple[MiniIteration, ...] = (
    MiniIteration(T.LOAD_A, CHANNEL_A, 0, T.MMA_LOAD_B, CHANNEL_B, 1, False, 0, 0),
    MiniIteration(T.LOAD_B, CHANNEL_B, 0, T.MMA_LOAD_A, CHANNEL_A, 1, False, 0, 1),
    MiniIteration(T.LOAD_B, CHANNEL_B, 1, T.MMA_LOAD_A, CHANNEL_A, 0, True, 1, 0),
    MiniIteration(T.LOAD_A, CHANNEL_A, 1, T.MMA_LOAD_B, CHANNEL_B, 0, True, 1, 1),
)


def logical_partition(p: int, minis=FOUR_WAVE_MINI_ITERS) -> list[Op]:
    """Partition ``p``: loads into stage p (K0 or K1), frags from stage p or 1 - p."""
    from pipeline_core.plugin_api import BodyBuilder

    if p not in (0, 1):
        raise ValueError(f"4-wave has partitions 0 and 1, got {p}")
    k = KOffset.K0 if p == 0 else KOffset.K1
    b = BodyBuilder()
    for mini in minis:
        b.load(mini.load_tag, ch=mini.load_channel, stage=p, sub=mini.load_subtile, k=k)
        b.frag(mini.frag_tag, ch=mini.frag_channel, stage=1 - p if mini.cross_stage else p,
               sub=mini.frag_subtile)
        b.compute(T.MMA, stage=mini.mma_m, sub=mini.mma_n)
    return b.done()


def logical_body(minis=FOUR_WAVE_MINI_ITERS) -> list[Op]:
    """Both partitions, 24 ops in (load, frag, MMA) order."""
    return logical_partition(0, minis) + logical_partition(1, minis)
