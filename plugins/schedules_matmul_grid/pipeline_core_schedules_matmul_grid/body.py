"""The logical body of an m x n double-buffer matmul: ping-pong's rules, any grid.

Ping-pong (docs/guide/reference-behaviours.md, "Ping-pong") is the 2 x 2 case.
Partition h is one warp group's
slice: it reads LDS stage h and refills stage h for the next iteration while it
computes.  Per partition, with s = h and the other stage o = 1 - h:

* global loads (m + n): the "completion" load A[stage o, subtile m-1] first
  (K_PREV in partition 0: the rest of this iteration's stage-1 A tile, read by
  partition 1 in the same iteration; K0 in partition 1: next iteration's stage-0
  tile), then A[s, i] for i < m-1 and B[s, j] for every j, at K0 (h = 0) or K1;
* fragment loads (m + n): A[s, i] for every row i, B[s, j] for every column j;
* MMAs (m * n): row-major, stage = row, subtile = column.

So the A tile of a stage is split into m row subtiles and the B tile into n column
subtiles, one global load each, exactly as ping-pong splits its 2 x 2 quadrants.
"""
from __future__ import annotations

from pipeline_core.plugin_api import KOffset, Op, logical

from pipeline_core_amd_mi355x.tags import CHANNEL_A, CHANNEL_B, DoubleBufferTag as T

#: Partitions (warp groups / LDS stages) the double-buffer program supports.
PARTITIONS = 2


def ops_per_partition(m: int, n: int) -> int:
    return m * n + 2 * (m + n)


def logical_partition(h: int, m: int, n: int) -> list[Op]:
    """One warp group's globals, fragment loads and MMA grid (ping-pong order)."""
    if h not in (0, 1):
        raise ValueError(f"a double-buffer matmul has partitions 0 and 1, got {h}")
    if m < 1 or n < 1:
        raise ValueError(f"the MMA grid needs m >= 1 and n >= 1, got {m} x {n}")
    s, other = h, 1 - h
    k_off = KOffset.K1 if h == 1 else KOffset.K0
    k_completion = KOffset.K_PREV if h == 0 else KOffset.K0
    ops = [logical(T.LOAD_A, channel=CHANNEL_A, stage=other, subtile=m - 1, k_offset=k_completion)]
    ops += [logical(T.LOAD_A, channel=CHANNEL_A, stage=s, subtile=i, k_offset=k_off)
            for i in range(m - 1)]
    ops += [logical(T.LOAD_B, channel=CHANNEL_B, stage=s, subtile=j, k_offset=k_off)
            for j in range(n)]
    ops += [logical(T.MMA_LOAD_A, channel=CHANNEL_A, stage=s, subtile=i) for i in range(m)]
    ops += [logical(T.MMA_LOAD_B, channel=CHANNEL_B, stage=s, subtile=j) for j in range(n)]
    ops += [logical(T.MMA, stage=i, subtile=j) for i in range(m) for j in range(n)]
    return ops


def logical_body(m: int, n: int) -> list[Op]:
    """declare_ops: partition 0 then partition 1."""
    return logical_partition(0, m, n) + logical_partition(1, m, n)
