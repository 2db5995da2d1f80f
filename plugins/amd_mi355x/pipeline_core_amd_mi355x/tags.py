"""Kernel op tags of the MI355X schedules and their names.

Tags are plain ints in the JSON contract; the enums exist so that code reads
``Tag.MMA_LOAD_A`` instead of ``3``. Ping-pong and 4-wave share one tag set
(the reference's PingPongOps / FourWaveOps); the single-buffer default matmul
has its own (DefaultMatmulOps).
"""
from __future__ import annotations

import enum


class DoubleBufferTag(enum.IntEnum):
    """Tags of the double-buffer (ping-pong / 4-wave) bodies."""

    LOAD_A = 0  #: global A tile -> LDS (channel 0)
    LOAD_B = 1  #: global B tile -> LDS (channel 1)
    COMPUTE = 2  #: legacy alias of MMA, costed but never emitted by our schedules
    MMA_LOAD_A = 3  #: LDS -> registers, A fragment
    MMA_LOAD_B = 4  #: LDS -> registers, B fragment
    MMA = 5  #: one MFMA quadrant


class SingleBufferTag(enum.IntEnum):
    """Tags of the single-buffer default matmul (A and B bundled in each op)."""

    LOAD_DRAM = 0
    STORE_SMEM = 1
    LOAD_FRAG = 2
    COMPUTE = 3


#: {tag: name} for listings and JSON ``tag_name`` fields.
DOUBLE_BUFFER_TAG_NAMES: dict[int, str] = {int(t): t.name for t in DoubleBufferTag}
SINGLE_BUFFER_TAG_NAMES: dict[int, str] = {int(t): t.name for t in SingleBufferTag}

#: Data channels (ops on one channel share an LDS buffer).
CHANNEL_A = 0
CHANNEL_B = 1
