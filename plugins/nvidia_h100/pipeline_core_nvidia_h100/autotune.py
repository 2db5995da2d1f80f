"""Autotuning the ``matmul()`` call: the GEMM's candidates on the kit's tuner (kit/autotune.py).

Why: no one tile, ring depth and split suits every shape (issue 26).  The kit's
:class:`~pipeline_core_nvidia_h100.kit.autotune.Autotuner` ranks candidates on the agents timing
model, times the model's best few with the caller's timer and caches the winner, keyed by
family, device, toolkit, problem bucket and a hash of the family's sources, the kit and the
device headers.  This module is what is the GEMM's own: the candidate space (tile, ring depth,
consumers, split-K) and its geometry rules (:func:`takes`, :func:`launched_store`), each
candidate's workload on a shape (its output tiles, K tiles and split) and the shape bucket with
the element type and layout.  No GPU package is imported here.  docs/guide/matmul.md,
"Autotuning".
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TextIO

import attrs

from pipeline_core_nvidia_h100.gemm_call import split_count
from pipeline_core_nvidia_h100.kit.autotune import (ENV, TOP_K, Autotuner, AutotuneError,
                                                    TimingModel, TuneKey, Workload, enabled,
                                                    timing_model)
from pipeline_core_nvidia_h100.kit.autotune import source_hash as kit_source_hash
from pipeline_core_nvidia_h100.warpspecialized import (KERNEL_FAMILY, SCHEDULE_NAME, GemmVariant,
                                                       WsGeometry, k_tile)

__all__ = ["ENV", "TOP_K", "AutotuneError", "enabled", "Candidate", "GemmProblem", "DEFAULT",
           "TUNER", "candidates", "takes", "direct_store", "launched_store", "model_cycles",
           "workload", "score", "rank", "bucket", "source_hash", "tune_key", "cached", "tune",
           "describe_ranking"]

#: The plugin modules whose text decides the kernel a candidate builds (:func:`source_hash`;
#: the kit's modules and the device headers are hashed by the kit).
SOURCES = ("autotune.py", "emit_wgmma.py", "gemm_call.py", "gemm_signature.py", "skeleton.py",
           "warpspecialized.py")
HERE = Path(__file__).parent
#: setmaxnreg of each consumer warp group by consumer count (the SM's 64K registers over the
#: producer's 40 and the consumers: warpspecialized.WsGeometry.validate).
CONSUMER_REGISTERS = {1: 232, 2: 232, 3: 152}
PRODUCER_REGISTERS = 40
BK = 64


@attrs.frozen(kw_only=True, order=True)
class Candidate:
    """One variant the call may launch: CTA tile, ring depth, consumer warp groups, grouped
    raster width and whether K is split (the split count then follows the shape:
    gemm_call.split_count)."""

    bm: int = 128
    bn: int = 256
    stages: int = 4
    consumers: int = 2
    group_m: int = 8
    split_k: bool = False
    #: stream-K where the shape leaves a last partial wave (decompose.choose sets it)
    stream_k: bool = False
    #: consumer ping-pong (``GemmVariant.pingpong``): each consumer owns a whole tile, the
    #: consumers take the CTA's tiles in turn (the plan sets the variant's where it takes it)
    pingpong: bool = False

    def geometry(self, variant: GemmVariant = GemmVariant()) -> WsGeometry:
        return WsGeometry(bm=self.bm, bn=self.bn, bk=k_tile(variant.dtype),
                          consumers=self.consumers,
                          stages=self.stages, producer_registers=PRODUCER_REGISTERS,
                          consumer_registers=CONSUMER_REGISTERS[self.consumers],
                          group_m=self.group_m, variant=variant)

    def params(self, variant: GemmVariant) -> dict[str, str]:
        """The schedule's ``-p`` parameters for this candidate's geometry and ``variant`` (the
        call's plan sets the variant's ``split_k``; the ring depth is the target's ``-T
        stages``)."""
        g = self.geometry(variant)
        return {**{k: str(val) for k, val in g.as_params().items()},
                **{k: str(val).lower() for k, val in attrs.asdict(variant).items()}}

    def describe(self) -> str:
        return (f"{self.bm}x{self.bn} tile, {self.stages} stages, {self.consumers} consumers, "
                f"group_m {self.group_m}" + (", split-K" if self.split_k else "")
                + (", stream-K" if self.stream_k else "")
                + (", ping-pong" if self.pingpong else ""))


#: The space searched: every combination that :meth:`WsGeometry.validate` accepts.
TILE_M = (64, 128, 192, 256)
TILE_N = (64, 128, 160, 192, 256)
STAGES = (3, 4, 5, 6)
CONSUMERS = (1, 2, 3)
GROUP_M = (8,)  # the model has no L2: it cannot rank raster widths, so one is searched


def candidates(m: int, n: int, k: int, variant: GemmVariant, sms: int) -> list[Candidate]:
    """The variants valid for ``variant`` (its layout constrains the tile) and shape M x N x K,
    in a fixed order: split-K ones only where the shape splits (gemm_call.split_count)."""
    found = []
    for bm in TILE_M:
        for bn in TILE_N:
            tiles = -(-m // bm) * -(-n // bn)
            splits = split_count(tiles, max(1, -(-k // BK)), sms)
            for split in (False, True) if splits > 1 else (False,):
                for stages in STAGES:
                    for consumers in CONSUMERS:
                        for group_m in GROUP_M:
                            c = Candidate(bm=bm, bn=bn, stages=stages, consumers=consumers,
                                          group_m=group_m, split_k=split)
                            if takes(c, variant) or takes(c, direct_store(variant)):
                                found.append(c)
    return found


def direct_store(variant: GemmVariant) -> GemmVariant:
    """``variant`` with the direct store: a candidate whose tile or shared memory cannot take
    the TMA-store epilogue still runs, storing directly (matmul_call._plan plans it so)."""
    return attrs.evolve(variant, store="direct")


def takes(c: Candidate, variant: GemmVariant) -> bool:
    """Whether candidate ``c`` builds ``variant`` (its geometry validates).  A's box rows
    (``variant.a_rows``) are left out: the plan derives them from the tile it plans with
    (gemm_call.a_box_rows), so a variant planned with another tile says nothing of ``c``'s."""
    from pipeline_core.plugin_api import ProgramError

    try:
        c.geometry(attrs.evolve(variant, a_rows=0, pingpong=c.pingpong)).validate()
    except ProgramError:
        return False
    return True


def launched_store(c: Candidate, variant: GemmVariant) -> str:
    """The epilogue's store candidate ``c`` launches for ``variant``: the variant's, unless K is
    split (the reduced tile is stored directly) or the TMA store does not fit ``c``
    (matmul_call._plan falls back to the direct store then)."""
    if variant.store == "tma" and not c.split_k and not c.stream_k and takes(c, variant):
        return "tma"
    return "direct"


@functools.lru_cache(maxsize=256)
def _compiled(c: Candidate, store: str = "direct") -> TimingModel | None:
    """The candidate's schedule with ``store`` compiled (and so proven) once per process, on
    the timing model (its cycles memoised); None when the compile refuses it (such a candidate
    is never ranked)."""
    from pipeline_core.plugin_api import PipelineError, compile_named

    from pipeline_core_nvidia_h100.matmul_call import CALL

    variant = GemmVariant(tails=True, split_k=c.split_k, store=store)
    try:
        compiled = compile_named(SCHEDULE_NAME, target="h100", params=c.params(variant),
                                 target_args={"stages": str(c.stages)}, host=CALL.host())
    except PipelineError:
        return None
    return timing_model(compiled)


def model_cycles(c: Candidate, k_tiles: int, store: str = "direct",
                 splits: int = 1) -> float | None:
    """One output tile of ``k_tiles`` K tiles on the timing model, with its epilogue (the
    ``store``'s steps; with split-K the finish of the tile's last CTA, reading ``splits``
    slices): :meth:`TimingModel.cycles`.  None: the candidate does not compile."""
    model = _compiled(c, store)
    return None if model is None else model.cycles(k_tiles, splits)


def workload(c: Candidate, m: int, n: int, k: int, sms: int,
             store: str = "direct") -> Workload | None:
    """Candidate ``c`` on shape M x N x K: its output tiles (times the split, each a slice of
    the K tiles) dealt to ``sms`` CTAs, with the ``store`` it launches
    (:func:`launched_store`); None: it does not compile."""
    model = _compiled(c, store)
    if model is None:
        return None
    tiles = -(-m // c.bm) * -(-n // c.bn)
    k_tiles = max(1, -(-k // BK))
    splits = split_count(tiles, k_tiles, sms) if c.split_k else 1
    return Workload(model=model, trips=(-(-k_tiles // splits),) * (tiles * splits), ctas=sms,
                    splits=splits)


def score(c: Candidate, m: int, n: int, k: int, sms: int,
          store: str = "direct") -> float | None:
    """The modelled cycles of the whole call (:meth:`Workload.cycles`: the output tiles in
    waves of ``sms`` CTAs, each one tile's modelled cycles over its K tiles and epilogue)."""
    work = workload(c, m, n, k, sms, store)
    return None if work is None else work.cycles()


#: The variant the call launches untuned (matmul_call.CALL_TILE, CALL_STAGES).
DEFAULT = Candidate()
#: Each field of a stored winner and the values the search gives it (:func:`candidates`).
SEARCHED = {"bm": TILE_M, "bn": TILE_N, "stages": STAGES, "consumers": CONSUMERS,
            "group_m": GROUP_M, "split_k": (False, True),
            # stream-K and ping-pong are the decomposition's (decompose.stream_k_cost,
            # wave_cost.RATES), not searched: timed where the untuned call picks them
            # (matmul_call._tuned's ``also``), so a stored winner may hold either
            "stream_k": (False, True), "pingpong": (False, True)}


@attrs.frozen(kw_only=True)
class GemmProblem:
    """One call's shape and variant, and the SMs its tiles are dealt to (ranking only: the
    tuning key names the device)."""

    m: int
    n: int
    k: int
    variant: GemmVariant
    sms: int = 1


def bucket(m: int, n: int, k: int) -> tuple[int, int, int]:
    """The shape bucket a tuning is kept for: each dimension rounded up to a power of two
    (4000 and 4096 share one, 4097 starts the next), as Triton's autotuner keys by."""
    return (_pow2(m), _pow2(n), _pow2(k))


def _pow2(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def _problem_key(p: GemmProblem) -> tuple[str, ...]:
    return (p.variant.dtype, f"{p.variant.a_major},{p.variant.b_major}",
            "x".join(str(d) for d in bucket(p.m, p.n, p.k))
            ) + (("cp_async",) if p.variant.load == "cp_async" else ())


def _describe(p: GemmProblem) -> str:
    v = p.variant
    return (f"{v.dtype} {v.a_major.upper()}{v.b_major.upper()} {p.m}x{p.n}x{p.k} (bucket "
            f"{'x'.join(str(d) for d in bucket(p.m, p.n, p.k))})")


def _sources(root: Path) -> tuple[Path, ...]:
    return tuple(root / name for name in SOURCES)


#: The GEMM on the kit's tuner: its file is ``autotune-gemm-wgmma.json`` in the kernel cache.
TUNER: Autotuner[Candidate, GemmProblem] = Autotuner(
    name=KERNEL_FAMILY, call="matmul", sources=_sources(HERE), make=Candidate,
    searched=SEARCHED, default=DEFAULT,
    candidates=lambda p: candidates(p.m, p.n, p.k, p.variant, p.sms),
    workload=lambda c, p: workload(c, p.m, p.n, p.k, p.sms, launched_store(c, p.variant)),
    problem_key=_problem_key, describe=_describe)


def rank(m: int, n: int, k: int, variant: GemmVariant, sms: int) -> list[tuple[float, Candidate]]:
    """Every valid candidate that compiles, fastest modelled first (:meth:`Autotuner.rank`:
    ties go to the one closest to :data:`DEFAULT`, then candidate order)."""
    return TUNER.rank(GemmProblem(m=m, n=n, k=k, variant=variant, sms=sms))


def source_hash(root: Path = HERE) -> str:
    """The kit's hash (kit.autotune.source_hash) of :data:`SOURCES`, the kit's modules and the
    device headers, under ``root`` (this package by default)."""
    return kit_source_hash(_sources(root), root / "kit", root / "cuda")


def tune_key(device: str, variant: GemmVariant, m: int, n: int, k: int, toolkit: str) -> TuneKey:
    return TUNER.key(GemmProblem(m=m, n=n, k=k, variant=variant), device, toolkit)


def cached(m: int, n: int, k: int, variant: GemmVariant, *, device: str, toolkit: str,
           path: Path | None = None, err: TextIO | None = None) -> Candidate | None:
    """The tuning cache's winner for this shape's bucket, or None (nothing is timed)."""
    return TUNER.cached(GemmProblem(m=m, n=n, k=k, variant=variant), device=device,
                        toolkit=toolkit, path=path, err=err)


def tune(m: int, n: int, k: int, variant: GemmVariant, *, device: str, sms: int, toolkit: str,
         timer: Callable[[Candidate], float], top_k: int = TOP_K, path: Path | None = None,
         err: TextIO | None = None, also: Sequence[Candidate] = ()) -> Candidate:
    """The candidate the call launches for this shape (:meth:`Autotuner.tune`): the cached
    winner of its bucket, else the model's best ``top_k`` and ``also`` timed by ``timer``."""
    return TUNER.tune(GemmProblem(m=m, n=n, k=k, variant=variant, sms=sms), device=device,
                      toolkit=toolkit, timer=timer, top_k=top_k, path=path, err=err, also=also)


def describe_ranking(ranked: Iterable[tuple[float, Candidate]]) -> list[str]:
    """One line per ranked candidate (the benchmark's and the docs' listing)."""
    return [f"{cycles:12.0f}  {c.describe()}" for cycles, c in ranked]
