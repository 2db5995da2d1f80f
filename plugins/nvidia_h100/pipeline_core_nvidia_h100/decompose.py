"""The untuned ``matmul()`` call's decomposition: which tile, consumers and split each shape runs.

Why: one tile cannot suit every shape.  The 128x256 tile that is at cuBLAS on large shapes
leaves the last wave of a persistent grid mostly idle where the output tiles do not divide
into the SMs (512x28672x4096: 448 tiles on 132 SMs run as 4 waves, 3.39 of them busy: 0.87x
cuBLAS), and where M is one tile or less the GEMM is bound by reading B, not by the tensor
cores, so what counts is how many CTAs stream B and how often each re-reads A.  The call
chooses per shape, with no timing (it may run inside a CUDA graph capture, and a first call
must not sync), by two rules (docs/guide/matmul.md, "Decomposition"):

* **M of one tile or less** (:func:`small_m`): the first of ``wave_cost.small_tiles(m)``
  the variant takes, 64x128 on one consumer warp group with eight ring stages (the bound is
  bandwidth: bytes in flight per SM; five where eight do not fit), and K split across CTAs
  where the tiles leave over half the SMs idle (``gemm_call.split_count``).  (The ranking
  below prices the same table and also takes 64x64 where it moves fewer bytes.)
* **Otherwise the wave model** (:func:`wave_pick`): each candidate of :data:`WAVE_TILES` costs
  ``ceil(tiles / SMs)`` rounds of one tile's work at that tile's sustained rate, relative to
  the 128x256 tile's (:data:`WAVE_TILES`' rates, from the panel measured on an H200 with
  ``benchmarks/gemm_decompose.py``: benchmarks/results/gemm_decompose_h200.jsonl).  The
  cheapest wins, ties going to the earlier (larger) tile; K is split as before where the chosen
  tiles leave over half the SMs idle.  Where an operand's rows are off the 128-byte line
  (a K of 3000 bf16: 6000-byte rows), TMA's box rows straddle two lines and the smaller tiles
  lose most (2000x5000x3000 on an H200: 128x256 0.61x cuBLAS, 128x128 0.50x, 64x256 0.40x),
  so only the largest tiles compete there.
* **Stream-K where the last wave is under half full** (:func:`stream_k_cost`): each candidate
  also costs ``tiles / SMs + STREAM_K_FIXUP_WAVES`` rounds under the stream-K hybrid (the last
  wave's tiles shared by every SM by K tiles, docs/guide/matmul.md, "Stream-K"), where its
  last wave is under half full, each SM's share of the shared tiles is at least
  :data:`STREAM_K_MIN_SHARE` K tiles, and that saves at least :data:`STREAM_K_MIN_GAIN` of the
  data-parallel rounds, which bounds the waves to about ten (2000x5000x3000's 2.42 waves of
  128x256, 512x28672x4096's 3.39 and 3000x14336x4096's 10.2 take it; 4000^3's 3.88 fill the
  last wave over half; a dozen waves never take it: the last wave is a small part of the time,
  and the model's fixup cost is not measured to that precision).  The call passes
  ``Tuning.stream_k``, off by default: measured, stream-K lost on all three (gemm_call.Tuning).

The call's default is the ranking (:func:`ranked`, ``Tuning.wave_model``: wave_cost.py prices
tile and split together, with K and the element type); ``Tuning(wave_model=False)`` keeps the
rules above (:func:`choose`) for the ablation.  A tuned call (``$PIPELINE_CORE_AUTOTUNE=1``,
autotune.py) times candidates instead and ignores both.  No GPU package is imported here.
"""
from __future__ import annotations

import math

import attrs

from pipeline_core_nvidia_h100.autotune import Candidate, direct_store, takes
from pipeline_core_nvidia_h100.wave_cost import SMALL_M, epilogue_weight, rank, small_tiles
from pipeline_core_nvidia_h100.gemm_call import CallPlan, rows_off_line, split_count
from pipeline_core_nvidia_h100.warpspecialized import DTYPE_BYTES, GemmVariant, k_tile

__all__ = ["WAVE_TILES", "choose", "for_plan", "grouped", "ranked", "small_m", "stream_k_cost",
           "wave_pick", "wave_cost"]

#: The wave model's candidates, largest tile first, each with its sustained throughput
#: relative to 128x256 with two consumers (the call's tile on large shapes): the median of
#: its per-round ratios to that tile over the large shapes of the panel, rounded down.
WAVE_TILES: tuple[tuple[Candidate, float], ...] = (
    (Candidate(bm=128, bn=256, stages=4, consumers=2), 1.0),
    (Candidate(bm=256, bn=128, stages=4, consumers=2), 0.96),
    (Candidate(bm=192, bn=128, stages=4, consumers=3), 0.93),
    (Candidate(bm=128, bn=128, stages=4, consumers=2), 0.94),
    (Candidate(bm=64, bn=256, stages=4, consumers=1), 0.93),
)
#: Stream-K's cost beyond its share of the work, in rounds of one tile: each shared tile's
#: pieces stored to the fp32 workspace and read back by its last CTA (L2 round trips), and each
#: CTA's short units (a ring fill each).  A model constant, too low as measured (benchmarks/
#: gemm_streamk.py on an H200: 0.76-0.87x the data-parallel pick where this took stream-K; it
#: also charges nothing for the direct store the stream-K kernel takes), hence the call's
#: Tuning.stream_k off by default.
STREAM_K_FIXUP_WAVES = 0.25
#: The fewest K tiles each CTA's share of the shared tiles may hold: below it the ring's fill
#: and the fixup cost more than the balance saves.
STREAM_K_MIN_SHARE = 4
#: The least modelled saving (data-parallel rounds over stream-K's) that takes stream-K.
STREAM_K_MIN_GAIN = 1.05


def wave_cost(c: Candidate, rate: float, m: int, n: int, batch: int, sms: int) -> float:
    """Candidate ``c``'s modelled time on [m, n] output tiles (``batch`` times), in units of
    one 128x256 tile's work at its rate: the rounds of a persistent grid of ``sms`` CTAs times
    one tile's area over its relative ``rate``."""
    tiles = math.ceil(m / c.bm) * math.ceil(n / c.bn) * batch
    return math.ceil(tiles / sms) * c.bm * c.bn / rate


def stream_k_cost(c: Candidate, rate: float, m: int, n: int, k_tiles: int, sms: int
                  ) -> float | None:
    """Candidate ``c``'s modelled time under the stream-K hybrid, in :func:`wave_cost`'s units,
    or None where the module's rule does not take it (a last wave at least half full, a share
    under :data:`STREAM_K_MIN_SHARE` K tiles, a saving under :data:`STREAM_K_MIN_GAIN`)."""
    tiles = math.ceil(m / c.bm) * math.ceil(n / c.bn)
    rest = tiles % sms if sms > 0 else 0
    if tiles <= sms or not 0 < 2 * rest < sms or rest * k_tiles < STREAM_K_MIN_SHARE * sms:
        return None
    rounds = tiles / sms + STREAM_K_FIXUP_WAVES
    if math.ceil(tiles / sms) < STREAM_K_MIN_GAIN * rounds:
        return None
    return rounds * c.bm * c.bn / rate


def wave_pick(m: int, n: int, batch: int, sms: int, off_line: bool = False,
              k_tiles: int = 0) -> Candidate:
    """The :data:`WAVE_TILES` candidate of least :func:`wave_cost` (the first on a tie);
    ``off_line`` (an operand's rows off the 128-byte line: gemm_call.rows_off_line), only the
    largest tiles (128x256, 256x128), which straddle lines least per FLOP.  ``k_tiles`` > 0 and
    one batch: each candidate also runs stream-K where :func:`stream_k_cost` takes it, which
    then competes as one more candidate (after its data-parallel self on a tie)."""
    largest = max(c.bm * c.bn for c, _ in WAVE_TILES)
    tiles = [(i, c, rate) for i, (c, rate) in enumerate(WAVE_TILES)
             if not off_line or c.bm * c.bn == largest]
    costs = [(wave_cost(c, rate, m, n, batch, sms), i, False) for i, c, rate in tiles]
    if k_tiles > 0 and batch == 1:
        costs += [(cost, i, True) for i, c, rate in tiles
                  for cost in [stream_k_cost(c, rate, m, n, k_tiles, sms)] if cost is not None]
    _, i, stream_k = min(costs)
    return attrs.evolve(WAVE_TILES[i][0], stream_k=stream_k)


def small_m(m: int, variant: GemmVariant = GemmVariant()) -> Candidate:
    """The bandwidth-bound shapes' tile: M of at most :data:`SMALL_M` rows; the first of
    ``wave_cost.small_tiles(m)`` that ``variant`` can take (its store, or the direct one),
    the first of them where none can."""
    table = [c for c, _ in small_tiles(m)]
    return next((c for c in table if takes(c, variant) or takes(c, direct_store(variant))),
                table[0])


def for_plan(plan: CallPlan, sms: int, stream_k: bool = True, model: bool = False,
             pingpong: bool = True) -> Candidate:
    """:func:`choose` for a call's plan (planned with the default tile): its shape, variant,
    batch and whether its operands' rows are off the 128-byte line (``stream_k``: as
    choose's); ``model`` (``Tuning.wave_model``): :func:`ranked` instead (``pingpong``: as
    its)."""
    off_line = rows_off_line((plan.a, plan.b), DTYPE_BYTES[plan.variant.dtype])
    if model:
        return ranked(plan.m, plan.n, plan.k, plan.variant, sms, plan.batch, off_line,
                      pingpong)
    return choose(plan.m, plan.n, plan.k, plan.variant, sms, plan.batch, off_line, stream_k)


def ranked(m: int, n: int, k: int, variant: GemmVariant, sms: int, batch: int = 1,
           off_line: bool = False, pingpong: bool = True) -> Candidate:
    """The wave model's cheapest candidate (``wave_cost.rank``: tile and split priced
    together) for an [m, n, k] product of ``variant`` (a batched variant never splits) that
    the variant's layout and epilogue can take (with its store, or the direct one; a
    ping-pong tile, ``pingpong`` allowing it, where the variant takes ping-pong); ``sms`` 0
    (not known), or none taken: the 128x256 tile."""
    if sms <= 0:
        return Candidate()
    found = rank(m, n, k, variant.dtype, sms, batch, off_line,
                 may_split=batch == 1 and variant.batch == "none", pingpong=pingpong,
                 epilogue=epilogue_weight(variant.bias, variant.activation))
    return next((r.candidate for r in found
                 if takes(r.candidate, variant) or takes(r.candidate, direct_store(variant))),
                Candidate())


def choose(m: int, n: int, k: int, variant: GemmVariant, sms: int,
           batch: int = 1, off_line: bool = False, stream_k: bool = True) -> Candidate:
    """The candidate the untuned call launches for an [m, n, k] product (``batch`` of them on
    one grid z), with split-K on where its tiles leave over half the ``sms`` idle and the
    variant may split (a batched kernel does not), stream-K where the wave model takes it
    (:func:`wave_pick`) and the variant may share tiles; ``sms`` 0 (not known): the 128x256
    tile.  ``off_line``: an operand's rows are off the 128-byte line (:func:`wave_pick`);
    ``stream_k`` False (``Tuning.stream_k`` off): the wave model without stream-K."""
    if sms <= 0:
        return Candidate()
    k_tiles = max(1, math.ceil(k / k_tile(variant.dtype)))
    shares = stream_k and batch == 1 and variant.batch == "none"
    c = (small_m(m, variant) if m <= SMALL_M else
         wave_pick(m, n, batch, sms, off_line, k_tiles if shares else 0))
    if not (takes(c, variant) or takes(c, direct_store(variant))):
        return Candidate()  # a layout or epilogue the chosen tile cannot take
    tiles = math.ceil(m / c.bm) * math.ceil(n / c.bn)
    if batch == 1 and variant.batch == "none" and split_count(tiles, k_tiles, sms) > 1:
        c = Candidate(bm=c.bm, bn=c.bn, stages=c.stages, consumers=c.consumers,
                      group_m=c.group_m, split_k=True)
    return c


#: A grouped GEMM's groups of at most this many rows on average run 64-row tiles: a 128-row
#: tile computes a partial tile of zeros at every group's end, which costs most where groups
#: are short (on an H200, DeepSeek-like 256 experts over 32k tokens, 128 rows a group:
#: 1.38x / 1.30x torch._grouped_mm up / down with 64x256 against 1.18x / 1.06x with 128x256;
#: 512 rows a group was mixed, 1.13 / 0.97 against 1.12 / 0.99:
#: benchmarks/results/grouped_tiles_h200.jsonl)
GROUP_ROWS_64 = 256


def grouped(rows: int, groups: int, dtype: str, along_n: bool) -> Candidate:
    """The tile of a grouped GEMM over ``groups`` groups of ``rows`` rows in all (the host
    knows both without reading ``offs``): 64x256 on one consumer where a 16-bit grouped GEMM
    along M averages at most :data:`GROUP_ROWS_64` rows a group, else 128x256 (groups along N,
    and fp8, were not measured against it)."""
    if not along_n and dtype in ("bf16", "fp16") and groups > 0 \
            and rows <= GROUP_ROWS_64 * groups:
        return Candidate(bm=64, bn=256, stages=4, consumers=1)
    return Candidate()
