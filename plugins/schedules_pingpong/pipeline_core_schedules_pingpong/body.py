"""The ping-pong loop body: 24 logical ops, two halves of 12
(docs/guide/reference-behaviours.md, "Ping-pong").

Half h is one warp group's slice: it reads LDS stage h, and while it computes,
it refills the other buffers. Its first load is the "completion" load: in half
0 it finishes the previous iteration's stage-1 A tile (K_PREV); in half 1 it is
an ordinary stage-0 load for the next iteration.
"""
from __future__ import annotations

from pipeline_core.plugin_api import KOffset, Op, logical

from pipeline_core_amd_mi355x.tags import CHANNEL_A, CHANNEL_B, DoubleBufferTag as T

NUM_HALVES = 2
OPS_PER_HALF = 12


def logical_half(h: int) -> list[Op]:
    """One warp group's 12 ops: 4 global loads, 4 fragment loads, a 2x2 MMA grid."""
    if h not in (0, 1):
        raise ValueError(f"ping-pong has halves 0 and 1, got {h}")
    s, other = h, 1 - h
    k_off = KOffset.K1 if h == 1 else KOffset.K0
    k_completion = KOffset.K_PREV if h == 0 else KOffset.K0
    ops = [
        logical(T.LOAD_A, channel=CHANNEL_A, stage=other, subtile=1, k_offset=k_completion),
        logical(T.LOAD_A, channel=CHANNEL_A, stage=s, subtile=0, k_offset=k_off),
        logical(T.LOAD_B, channel=CHANNEL_B, stage=s, subtile=0, k_offset=k_off),
        logical(T.LOAD_B, channel=CHANNEL_B, stage=s, subtile=1, k_offset=k_off),
        logical(T.MMA_LOAD_A, channel=CHANNEL_A, stage=s, subtile=0),
        logical(T.MMA_LOAD_A, channel=CHANNEL_A, stage=s, subtile=1),
        logical(T.MMA_LOAD_B, channel=CHANNEL_B, stage=s, subtile=0),
        logical(T.MMA_LOAD_B, channel=CHANNEL_B, stage=s, subtile=1),
    ]
    ops += [logical(T.MMA, stage=i, subtile=j) for i in range(2) for j in range(2)]
    return ops


def logical_body() -> list[Op]:
    """declare_ops: half 0 then half 1."""
    return logical_half(0) + logical_half(1)
