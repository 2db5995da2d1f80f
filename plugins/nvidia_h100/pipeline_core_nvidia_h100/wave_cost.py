"""The wave model's ranking of the kernels the call can build for one shape (``Tuning.wave_model``).

Why: the untuned call must pick its tile and split with no timing (a first call must not sync,
and it may run inside a CUDA graph capture), and the right pick depends on how the output tiles
fall into waves of the machine's SMs, on K (a split's fixed costs are paid per K slice) and on
the element type (fp8's tiles rank otherwise than bf16's).  :func:`rank` costs every
(tile, split) the call can launch for ``(M, N, K, dtype, SMs)`` and sorts them, cheapest first;
:func:`pick` is the first.  Both are pure functions of their arguments (no clock, no GPU): the
tests pin the pick of every benchmarked shape.

The cost of a candidate, in seconds (docs/guide/matmul.md, "Decomposition"):

* **work units**: ``tiles x splits`` (``tiles = ceil(M/BM) ceil(N/BN)``, padded tiles computed
  whole); a persistent grid of ``SMs`` CTAs runs them in ``rounds = ceil(units / SMs)``, the last
  round ``fill`` full (:attr:`Costed.waves`, :attr:`Costed.fill`).
* **one unit's time**: its K tiles plus :data:`FILL_K_TILES` (the ring's fill and the epilogue
  a tile pays beside its main loop) at the tile's sustained rate (:data:`RATES`, relative to
  128x256 on the same element type, measured on an H200), plus, split, the fp32 partial tile
  written to and read back from the workspace (:data:`REDUCE_BYTES_PER_S`) and the split's
  fixed time (:data:`SPLIT_FIXED_S`).
* **a floor**: every byte through memory at :data:`DRAM_BYTES_PER_S`: the operands, the
  output and a split's fp32 partial tiles (written, then read back); the shape's cost is the
  larger of ``rounds x unit`` and the floor.

M of at most :data:`SMALL_M` rows competes only the bandwidth-bound tiles (:func:`small_tiles`:
one consumer, eight stages or five), and rows off the 128-byte line only the largest tiles
where those fill a wave (decompose.py says why); a split is ``gemm_call.split_count``'s (what
the plan launches for ``split_k``), priced, not forced.  Ties keep the earlier candidate (the table's order, then
unsplit first).
"""
from __future__ import annotations

import math

import attrs

from pipeline_core_nvidia_h100.autotune import Candidate
from pipeline_core_nvidia_h100.gemm_call import split_count
from pipeline_core_nvidia_h100.warpspecialized import DTYPE_BYTES, k_tile

__all__ = ["Costed", "EPILOGUE_K_TILES", "RATES", "SMALL_TILES", "epilogue_weight", "rank",
           "pick", "small_tiles"]

#: Each large tile's sustained throughput relative to 128x256 on two consumers, per input type,
#: in the order ties are broken.  16-bit: decompose.WAVE_TILES' panel medians (benchmarks/
#: results/gemm_decompose_h200.jsonl, the large shapes); 256x160 and 128x192 (their TMA store
#: in 64-byte rows) each timed tile's rounds over 128x256's on 8192^3 and 4000^3, rounded down
#: (benchmarks/results/gemm_wide_tiles_s23_h200.jsonl: 256x160 0.985-0.994, 128x192 0.98).
#: 128x192 in ping-pong with the TMA store: its per-round medians over 128x256's, each times
#: its rounds and tile area over 128x256's (benchmarks/results/gemm_pingpong_tma_s25_h200.jsonl:
#: 8192^3 1.029 x 0.984, 8192x14336x4096 1.020 x 0.991, 6144^3 1.014 x 1.0, 4096x8192x2048
#: 1.014 x 1.031), rounded down from the least; it never splits (the kernel does not).
#: e4m3: the same panel's fp8 rows at
#: 3000x14336x4096, each divided by its own wave fill and M padding (192x128 1255 TFLOPS over
#: 0.97 x 0.977; 128x256 1194 over 0.927 x 0.977; ...), relative to 128x256's; 192x128 rounded
#: down from 1.0 (one shape measured it) so that the large shapes keep 128x256.
RATES: dict[str, tuple[tuple[Candidate, float], ...]] = {
    "16bit": ((Candidate(bm=128, bn=256, stages=4, consumers=2), 1.0),
              (Candidate(bm=256, bn=128, stages=4, consumers=2), 0.96),
              (Candidate(bm=256, bn=160, stages=4, consumers=2), 0.98),
              (Candidate(bm=192, bn=128, stages=4, consumers=3), 0.93),
              (Candidate(bm=128, bn=192, stages=4, consumers=2), 0.97),
              (Candidate(bm=128, bn=192, stages=4, consumers=2, pingpong=True), 1.01),
              (Candidate(bm=128, bn=128, stages=4, consumers=2), 0.94),
              (Candidate(bm=64, bn=256, stages=4, consumers=1), 0.93)),
    "e4m3": ((Candidate(bm=128, bn=256, stages=4, consumers=2), 1.0),
             (Candidate(bm=192, bn=128, stages=4, consumers=3), 0.98),
             (Candidate(bm=256, bn=128, stages=4, consumers=2), 0.99),
             (Candidate(bm=128, bn=128, stages=4, consumers=2), 0.97),
             (Candidate(bm=64, bn=256, stages=4, consumers=1), 0.93)),
}
#: M of at most 128 rows: the bandwidth-bound tiles (decompose.small_m's), in the order ties
#: go: 64x128 first, eight stages before five (five only where eight do not fit the variant's
#: shared memory).  The rate is 128x64's on large shapes (0.57-0.66 of 128x256 in the panel).
#: Why eight and 64x128 (benchmarks/gemm_small_m.py on an H200, CUDA-graph replays against
#: cuBLAS's, medians of 5 rounds, benchmarks/results/gemm_small_m_s17_h200.jsonl): the GEMM reads
#: B once, so the bytes each SM keeps in flight bound it; 128x8192x8192 ran 0.889 with 64x128
#: at five stages, 0.998 at eight, 0.86 / 0.934 with 128x64; 1x4096x4096 0.727 -> 0.772;
#: 16x8192x8192 0.79 -> 0.805; 64x8192x8192 0.86 either way.
SMALL_TILES: tuple[tuple[Candidate, float], ...] = (
    (Candidate(bm=64, bn=128, stages=8, consumers=1), 0.6),
    (Candidate(bm=64, bn=64, stages=8, consumers=1), 0.6),
    (Candidate(bm=128, bn=64, stages=8, consumers=1), 0.6),
    (Candidate(bm=64, bn=128, stages=5, consumers=1), 0.6),
    (Candidate(bm=64, bn=64, stages=5, consumers=1), 0.6),
    (Candidate(bm=128, bn=64, stages=5, consumers=1), 0.6),
)


def small_tiles(m: int) -> tuple[tuple[Candidate, float], ...]:
    """:data:`SMALL_TILES` an M of ``m`` (at most :data:`SMALL_M`) competes: at M of 64 or
    less the 64-row tiles (a 128-row tile would compute half zeros); above, all but 64x64,
    which would read B once per 64 rows (128x8192x8192: 0.75 of cuBLAS against 64x128's
    0.97, benchmarks/results/gemm_small_m_sweep_clip_s17_h200.jsonl).  Such M is bound by the
    bytes it moves: the floor of :func:`cost` decides, split partials counted, and a tie goes
    to the table's order (64x128 first)."""
    if m <= 64:
        return tuple((c, r) for c, r in SMALL_TILES if c.bm == 64)
    return tuple((c, r) for c, r in SMALL_TILES if (c.bm, c.bn) != (64, 64))
#: 128x256's sustained rate on one SM of an H200 (132 SMs): about 690 TFLOPS 16-bit and 1320
#: fp8 on the large shapes (benchmarks/results/gemm_speed_h200.jsonl).
SM_FLOPS_PER_S = {"16bit": 690e12 / 132, "e4m3": 1320e12 / 132}
#: K tiles' worth of time a unit pays beside its main loop: the ring's fill before its first
#: wgmma and the part of its epilogue the next tile does not hide.
FILL_K_TILES = 2
#: One SM's rate of moving split-K's fp32 partial tiles through L2 (write, then read back).
REDUCE_BYTES_PER_S = 100e9
#: A split unit's fixed time beside its partial tile's bytes: the counter's atomic, the last
#: arriver's wait for it and the fixup it then runs alone.  Fitted on an H200 (benchmarks/
#: results/gemm_mid_s23_h200.jsonl, CUDA-graph replays): 128x128 split in two ran 18.6 us at
#: 1000^3 against 13.2 whole, 17.5 against 16.2 at 1024^3, though each slice is half the K.
SPLIT_FIXED_S = 4e-6
#: The H200's HBM3e at the rate a streaming GEMM reaches (4.8e12 peak).
DRAM_BYTES_PER_S = 4.0e12
#: M of at most one 128-row tile: the bandwidth-bound tiles only (decompose.small_m's rule)
SMALL_M = 128
#: K tiles' worth of time a fused epilogue adds to a unit of a cooperative tile beside the
#: plain store: a bias or relu (``light``), an activation with an exponential (``heavy``: gelu,
#: silu).  A ping-pong consumer runs its epilogue under the other consumer's mainloop, so its
#: unit pays none.  Measured on an H200 (benchmarks/gemm_epilogues.py, 5 rounds, one
#: process, results/gemm_gelu_epilogue_s26_h200.jsonl): the forced 128x192 ping-pong over the
#: forced 128x256 cooperative kernel, with the epilogue over without, times the cooperative
#: unit's K tiles + FILL_K_TILES, on seven shapes of 32 to 128 K tiles: bias 1.7-4.1 K tiles
#: (median 3.4), bias + relu 1.4-3.9 (3.0), bias + gelu 3.0-13.3 (6.2); rounded down.  With the
#: bias read before the sub-tiles and silu's fast divide (results/gemm_bias_early_s26_h200.jsonl,
#: ten shapes, two runs) the medians fell to 2.3 (bias, relu), 3.6 (gelu) and 3.4 (silu); the
#: constants stay, since the picks they make were the faster or tied on every timed shape there
#: (at K 1024, 3 for a bias takes ping-pong, 1-2.5% ahead; 2 would keep 128x256).
EPILOGUE_K_TILES = {"none": 0.0, "light": 3.0, "heavy": 6.0}
#: the activations that take the heavy price (an exponential and a divide per element)
HEAVY_ACTIVATIONS = ("gelu", "silu")


def epilogue_weight(bias: str, activation: str) -> str:
    """A fused epilogue's key into :data:`EPILOGUE_K_TILES` (``bias`` and ``activation`` as
    GemmVariant names them, ``none`` for neither)."""
    if activation in HEAVY_ACTIVATIONS:
        return "heavy"
    return "light" if bias != "none" or activation != "none" else "none"


@attrs.frozen(kw_only=True)
class Costed:
    """One candidate the call can launch, with its split count and what the model charged:
    ``seconds`` (the rank's key), ``waves`` (units over SMs) and ``fill`` (the last round's
    share of busy SMs, 1.0 for whole waves)."""

    candidate: Candidate
    splits: int
    seconds: float
    waves: float
    fill: float


def _kind(dtype: str) -> str:
    return "e4m3" if dtype == "e4m3" else "16bit"


def cost(c: Candidate, rate: float, splits: int, m: int, n: int, k: int, dtype: str,
         sms: int, batch: int = 1, epilogue: str = "none") -> Costed:
    """Candidate ``c`` (relative ``rate``) run with ``splits`` K slices on ``batch`` [m, n, k]
    products over ``sms`` SMs with a fused ``epilogue`` (:func:`epilogue_weight`), costed as the
    module says."""
    bk = k_tile(dtype)
    k_tiles = max(1, math.ceil(k / bk))
    slice_tiles = math.ceil(k_tiles / splits)
    units = math.ceil(m / c.bm) * math.ceil(n / c.bn) * batch * splits
    rounds = math.ceil(units / sms)
    # the epilogue a cooperative tile runs after its mainloop (ping-pong's runs under the other
    # consumer's: EPILOGUE_K_TILES)
    epi = 0.0 if c.pingpong else EPILOGUE_K_TILES[epilogue]
    flops = 2.0 * c.bm * c.bn * bk * (slice_tiles + FILL_K_TILES + epi)
    unit = flops / (SM_FLOPS_PER_S[_kind(dtype)] * rate)
    if splits > 1:
        unit += 2 * 4 * c.bm * c.bn / REDUCE_BYTES_PER_S + SPLIT_FIXED_S
    elem = DTYPE_BYTES[dtype]
    # every byte through memory: the operands, the output and a split's fp32 partial tiles
    # (written, then read back by the tile's last CTA)
    partials = 2 * 4 * c.bm * c.bn * units if splits > 1 else 0
    floor = (batch * (elem * k * (m + n) + 2 * m * n) + partials) / DRAM_BYTES_PER_S
    rest = units - (rounds - 1) * sms
    return Costed(candidate=attrs.evolve(c, split_k=splits > 1), splits=splits,
                  seconds=max(rounds * unit, floor), waves=units / sms, fill=rest / sms)


def rank(m: int, n: int, k: int, dtype: str, sms: int, batch: int = 1,
         off_line: bool = False, may_split: bool = True, pingpong: bool = True,
         epilogue: str = "none") -> tuple[Costed, ...]:
    """Every (tile, split) the call can launch for ``batch`` [m, n, k] products of ``dtype``
    on ``sms`` SMs, cheapest first (ties: the tables' order, unsplit first).  Only one product
    (``batch`` 1) of a kernel that ``may_split`` splits K (a batched kernel does not);
    ``off_line``: only the largest tiles compete (every tile where they leave SMs idle), never
    the ping-pong tile; ``pingpong`` False (``Tuning.pingpong``): the ping-pong tile does not;
    ``epilogue``: the fused epilogue's weight (:func:`epilogue_weight`), which every tile but
    the ping-pong one pays after its mainloop."""
    if sms <= 0:
        raise ValueError(f"sms: {sms}; the wave model needs the device's SM count (> 0)")
    table = small_tiles(m) if m <= SMALL_M else RATES[_kind(dtype)]
    # straddling box rows cost L2 bandwidth per byte: they bind where the largest tiles keep
    # every SM busy, and smaller tiles read more bytes per FLOP; a grid short of a wave of them
    # leaves the bandwidth to spare (1000^3, 2000-byte rows: 128x128 whole 13.2 us against
    # 128x256 split in two 20.4, gemm_mid_s23_h200.jsonl)
    # (the large tiles: of at least the area of the table's first, 128x256)
    big = RATES[_kind(dtype)][0][0]
    if m > SMALL_M and off_line and math.ceil(m / big.bm) * math.ceil(n / big.bn) * batch >= sms:
        table = tuple((c, r) for c, r in table if c.bm * c.bn >= big.bm * big.bn)
    if not pingpong or off_line:
        # rows off the line: 128x160 in ping-pong ran 0.65 of cuBLAS at 2000x5000x3000
        # (6000-byte rows) against 256x160's 0.86, and 0.95-0.98 against 0.94-0.95 at
        # 2000x5000x3072 (6144-byte rows; results/gemm_wide_tiles_pingpong*_s25_h200.jsonl)
        table = tuple((c, r) for c, r in table if not c.pingpong)
    k_tiles = max(1, math.ceil(k / k_tile(dtype)))
    found = []
    for order, (c, rate) in enumerate(table):
        tiles = math.ceil(m / c.bm) * math.ceil(n / c.bn)
        splits = {1, split_count(tiles, k_tiles, sms)
                  if may_split and batch == 1 and not c.pingpong else 1}
        for s in sorted(splits):
            found.append((cost(c, rate, s, m, n, k, dtype, sms, batch, epilogue), order, s))
    found.sort(key=lambda x: (x[0].seconds, x[1], x[2]))
    return tuple(x[0] for x in found)


def pick(m: int, n: int, k: int, dtype: str, sms: int, batch: int = 1,
         off_line: bool = False, may_split: bool = True, pingpong: bool = True,
         epilogue: str = "none") -> Candidate:
    """:func:`rank`'s first candidate (``split_k`` set where it splits)."""
    return rank(m, n, k, dtype, sms, batch, off_line, may_split, pingpong,
                epilogue)[0].candidate
