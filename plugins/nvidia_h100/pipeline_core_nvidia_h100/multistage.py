"""Schedule ``multistage-gemm``: one K tile per iteration through an S-stage cp.async ring.

C[M,N] = A[M,K] . B[N,K]^T, bf16 in, fp32 accumulate, on a CTA tile ``BM`` x ``BN`` x ``BK`` shared
by a ``warps_m`` x ``warps_n`` warp grid.  The body describes one K tile:

* ``LOAD_A`` / ``LOAD_B``: the tile's cp.async copies of A and B into one ring stage;
* per k-step ``kk`` (``BK / 16`` of them): ``FRAG_A[sub kk]`` and ``FRAG_B[sub kk]`` (the warp's
  ldmatrix.x4 fragments of that k-step) and ``MMA[m=kk, n=kk]`` (its unrolled block of
  ``(WTM/16) x (WTN/8)`` mma.sync m16n8k16, reading the two fragments of k-step kk).

The schedule writes no wait and no barrier: it asks for the core's ring lowering (N stages), which
places one ``WAIT_CP_ASYNC`` + barrier per K tile and derives each wait's count from the target's
sync model; the proof stage of every compile then checks the result.  The ring depth is the target's
``-T stages``.  The geometry lives in :class:`Geometry`, the one home the ``cuda`` emitter reads.

It runs on every copy-ring target (the family's tags 0-4) that offers a cp.async ring, ldmatrix
and mma.sync (``contracts.MMA_SYNC_CP_ASYNC``): ``h100``, and a target plugin's for sm_80 and later
(``a100``, docs/guide/retarget.md), each timed with its own cost model.  The AMD targets offer
none of it and are refused naming what they lack.  The ring's shared memory is checked against
the compiling target's CTA limit (``TargetProfile.smem_per_cta``: the H100's 227 KB, the A100's
163 KB; a target that declares none keeps the H100's), the threads against the H100's 1024.
"""
from __future__ import annotations

from typing import Any

import attrs

from pipeline_core.plugin_api import (COPY_RING, Bound, CostModel, KernelLaunch, Op, Param,
                                      PipelineConfig, ProgramError, ScheduleConfig, ScheduleRecord,
                                      TargetProfile, annotate, logical)

from pipeline_core_nvidia_h100 import TARGET_NAME
from pipeline_core_nvidia_h100.contracts import MMA_SYNC_CP_ASYNC
from pipeline_core_nvidia_h100.costs import H100Tag
from pipeline_core_nvidia_h100.machine import H100_SXM
from pipeline_core_nvidia_h100.sync import TAG_NAMES

SCHEDULE_NAME = "multistage-gemm"
#: The kernel family its body is (``EmitterRecord.kernel_families``): an S-stage cp.async ring
#: feeding ldmatrix + mma.sync on a warp grid; the ``cuda`` emitter writes it.
KERNEL_FAMILY = "gemm-mma-sync"
#: Bytes of one bf16 element and of one cp.async copy.
ELEM_BYTES, COPY_BYTES = 2, 16
#: One mma.sync m16n8k16: the warp-tile granules.
MMA_M, MMA_N, MMA_K = 16, 8, 16
#: Registers the fp32 accumulators of one thread may take before the kernel cannot fit 255.
MAX_ACCUMULATORS = 128
#: K tile depths whose shared-memory rows the swizzle covers (64- or 128-byte rows): the
#: ``-p BK`` choices (listed by ``pipeline-core schedules``) and what :meth:`Geometry.validate`
#: checks for tiles built elsewhere (the emitters' ``-O BK``).
SWIZZLED_BK: tuple[int, ...] = (32, 64)


@attrs.frozen(kw_only=True)
class SmemLimit:
    """The shared memory one CTA may use on the compiling target, and where that figure is from
    (for the refusal): the target's ``TargetProfile.smem_per_cta``, or the H100's where the
    target declares none (the machine this plugin's kernels were written for)."""

    bytes: int
    where: str  #: "on target a100", or "on the h100 (target X declares no smem_per_cta)"

    @classmethod
    def of(cls, profile: TargetProfile | None, target: str) -> "SmemLimit":
        declared = profile.smem_per_cta if profile is not None else None
        if declared is not None:
            return cls(bytes=declared, where=f"on target {target}")
        where = ("on the h100" if target == TARGET_NAME else
                 f"on the h100 (target {target} declares no TargetProfile.smem_per_cta)")
        return cls(bytes=H100_SXM.smem_per_cta_optin, where=where)


@attrs.frozen(kw_only=True)
class CtaTile:
    """A CTA tile of the mma.sync family fed by a swizzled cp.async ring: what the multistage and
    the ping-pong kernels share.  Subclasses say how many threads there are and which part of
    the tile one warp computes (``threads``, ``warp_tile``) and how many stages the ring has."""

    bm: int
    bn: int
    bk: int
    group_m: int = 8

    @property
    def threads(self) -> int:
        raise NotImplementedError

    @property
    def warp_tile(self) -> tuple[int, int]:
        raise NotImplementedError

    @property
    def ring_stages(self) -> int:
        raise NotImplementedError

    @property
    def mma_tiles(self) -> tuple[int, int]:
        """mma.sync tiles of one warp's tile per k-step: (M direction, N direction)."""
        wtm, wtn = self.warp_tile
        return wtm // MMA_M, wtn // MMA_N

    @property
    def k_steps(self) -> int:
        return self.bk // MMA_K

    @property
    def row_chunks(self) -> int:
        """16-byte chunks per tile row (the swizzle period's width)."""
        return self.bk * ELEM_BYTES // COPY_BYTES

    @property
    def rows_per_pass(self) -> int:
        """Tile rows one cp.async of every thread covers."""
        return self.threads // self.row_chunks

    @property
    def stage_bytes(self) -> int:
        return (self.bm + self.bn) * self.bk * ELEM_BYTES

    @property
    def smem_bytes(self) -> int:
        return self.ring_stages * self.stage_bytes


@attrs.frozen(kw_only=True)
class Geometry(CtaTile):
    """The CTA tile, the warp grid and the ring: everything the emitted kernel is sized by."""

    warps_m: int
    warps_n: int
    stages: int

    @property
    def warps(self) -> int:
        """Warps of the CTA: all of them share every ring stage (the proof models each one)."""
        return self.warps_m * self.warps_n

    @property
    def threads(self) -> int:
        return self.warps * 32

    @property
    def warp_tile(self) -> tuple[int, int]:
        return self.bm // self.warps_m, self.bn // self.warps_n

    @property
    def ring_stages(self) -> int:
        return self.stages

    @property
    def mma_per_k_step(self) -> int:
        """mma.sync one warp issues per MMA op (one k-step)."""
        mi, ni = self.mma_tiles
        return mi * ni

    @property
    def ldmatrix_per_k_step(self) -> tuple[int, int]:
        """ldmatrix.x4 one warp issues per FRAG_A and per FRAG_B op."""
        mi, ni = self.mma_tiles
        return mi, ni // 2

    @property
    def copies_per_tile(self) -> tuple[int, int]:
        """cp.async one thread issues per LOAD_A and per LOAD_B op."""
        return self.bm // self.rows_per_pass, self.bn // self.rows_per_pass

    def validate(self, who: str = f"schedule {SCHEDULE_NAME}", *,
                 smem: "SmemLimit | None" = None) -> None:
        """Refuse a geometry the kernel cannot tile, naming the parameter at fault; ``smem``
        the CTA's shared memory on the compiling target (None: the H100's)."""
        def bad(param: str, why: str) -> ProgramError:
            return ProgramError(f"{who}: -p {param}: {why}")

        if self.bk not in SWIZZLED_BK:
            raise bad("BK", f"must be 32 or 64 (64- or 128-byte swizzled rows), got {self.bk}")
        if self.bm % (self.warps_m * MMA_M):
            raise bad("BM", f"{self.bm} is not a multiple of warps_m x 16 = {self.warps_m * MMA_M}")
        if self.bn % (self.warps_n * 2 * MMA_N):
            raise bad("BN", f"{self.bn} is not a multiple of warps_n x 16 = {self.warps_n * 16}")
        if self.threads > H100_SXM.threads_per_cta:
            raise bad("warps_m", f"warps_m x warps_n x 32 = {self.threads} threads exceed "
                                 f"{H100_SXM.threads_per_cta} per CTA")
        if self.threads % self.row_chunks or self.rows_per_pass % 8:
            raise bad("warps_m", f"{self.threads} threads do not copy whole 8-row swizzle periods "
                                 f"of {self.row_chunks}-chunk rows")
        for param, rows in (("BM", self.bm), ("BN", self.bn)):
            if rows % self.rows_per_pass:
                raise bad(param, f"{rows} rows are not a multiple of the {self.rows_per_pass} "
                                 "rows one cp.async of every thread covers")
        mi, ni = self.mma_tiles
        if mi * ni * 4 > MAX_ACCUMULATORS:
            raise bad("BM", f"warp tile {self.warp_tile[0]}x{self.warp_tile[1]} needs "
                            f"{mi * ni * 4} fp32 accumulators per thread (at most "
                            f"{MAX_ACCUMULATORS}): raise warps_m / warps_n or shrink BM / BN")
        limit = smem or SmemLimit.of(None, TARGET_NAME)
        if self.smem_bytes > limit.bytes:
            raise ProgramError(f"{who}: -T stages: {self.stages} stages of {self.stage_bytes} bytes "
                               f"(the BM x BK and BN x BK tiles) need {self.smem_bytes} bytes of "
                               f"shared memory, over the {limit.bytes} a CTA may use "
                               f"{limit.where}; lower -T stages or shrink -p BM / BN / BK")

    def check_shape(self, m: int, n: int, k: int) -> None:
        """Tile multiples only: refuse a problem shape the kernel would read past, naming it."""
        for name, value, tile in (("M", m, self.bm), ("N", n, self.bn), ("K", k, self.bk)):
            if value <= 0 or value % tile:
                raise ValueError(f"{name}={value}: the multistage kernel takes tile multiples only "
                                 f"({name} a positive multiple of {tile})")
        if k // self.bk < self.stages - 1:
            raise ValueError(f"K={k}: {k // self.bk} K tiles are fewer than the {self.stages - 1} "
                             f"the prologue of a {self.stages}-stage ring fills")

    def as_params(self) -> dict[str, Any]:
        return {"BM": self.bm, "BN": self.bn, "BK": self.bk, "warps_m": self.warps_m,
                "warps_n": self.warps_n, "stages": self.stages, "group_m": self.group_m}


PARAMS = (
    Param("BM", int, 128, "CTA tile rows (M)", bound=Bound(low=16, high=512)),
    Param("BN", int, 256, "CTA tile columns (N)", bound=Bound(low=16, high=512)),
    Param("BK", int, 64, "K tile depth (64- or 128-byte swizzled rows)", choices=SWIZZLED_BK),
    Param("warps_m", int, 2, "warp grid rows", bound=Bound(low=1, high=8)),
    Param("warps_n", int, 4, "warp grid columns", bound=Bound(low=1, high=8)),
    Param("group_m", int, 8, "grouped raster: CTA rows that share B tiles in L2",
          bound=Bound(low=1, high=64)),
)


def _cta_cost(op: Op, g: Geometry, costs: CostModel) -> Op:
    """An op's cost as the SM sees it: the whole CTA's instructions of that op at the SM's issue
    interval of the target's cost model (``OpCost.interval``: every warp of the CTA issues one,
    and the SM's tensor cores and shared-memory port are shared by them; the H100's is measured,
    and its mma's calibrated to the share of the peak a pipelined GEMM reaches,
    benchmarks/h100/GEMM_NOTES.md).  The per-instruction latency stays the floor; a tag whose
    cost declares no interval keeps its latency."""
    interval = costs.get(op.tag).interval
    if interval is None:
        return op
    if op.tag == H100Tag.MMA:
        count = g.mma_per_k_step
    elif op.tag in (H100Tag.FRAG_A, H100Tag.FRAG_B):
        count = g.ldmatrix_per_k_step[0 if op.tag == H100Tag.FRAG_A else 1]
    else:
        return op
    return op.evolve(latency=max(op.latency, round(count * g.warps * interval)))


def geometry_of(params: dict[str, Any], stages: int) -> Geometry:
    return Geometry(bm=params["BM"], bn=params["BN"], bk=params["BK"], warps_m=params["warps_m"],
                    warps_n=params["warps_n"], stages=stages, group_m=params["group_m"])


class MultistageGemm:
    """One K tile: LOAD_A, LOAD_B, then per k-step FRAG_A, FRAG_B, MMA (ring lowering)."""

    name = SCHEDULE_NAME

    def __init__(self, target: TargetProfile, geometry: Geometry, sched: ScheduleConfig) -> None:
        self.target = target
        self.geometry = geometry
        self._sched = sched

    def config(self) -> PipelineConfig:
        return self.target.pipeline

    def lowering(self) -> str:
        return "ring"

    def warps_per_group(self) -> int:
        """Every warp of the grid runs the one stream and reads every stage that all of them
        copied, and a cp.async's data is visible to the waiting thread only, so the proof models
        each warp and a stage needs its barrier (README.md, "Sync model")."""
        return self.geometry.warps

    def build_body(self) -> list[Op]:
        ops = [logical(H100Tag.LOAD_A, channel=0), logical(H100Tag.LOAD_B, channel=1)]
        for kk in range(self.geometry.k_steps):
            ops += [logical(H100Tag.FRAG_A, channel=0, subtile=kk),
                    logical(H100Tag.FRAG_B, channel=1, subtile=kk),
                    logical(H100Tag.MMA, stage=kk, subtile=kk)]
        costs = self.target.cost_model
        return [_cta_cost(o, self.geometry, costs) for o in annotate(ops, costs)]

    def schedule_config(self) -> ScheduleConfig:
        return self._sched

    def tag_names(self) -> dict[int, str]:
        return {**self.target.cost_model.tag_names(), **TAG_NAMES}

    def kernel_launch(self) -> KernelLaunch:
        """Kernel family ``gemm-mma-sync`` sized by the geometry built and validated once."""
        return KernelLaunch(kernel_family=KERNEL_FAMILY, geometry=self.geometry)


def _build(ctx: Any) -> MultistageGemm:
    target = ctx.make_target()
    geometry = geometry_of(dict(ctx.params), target.pipeline.depth)
    geometry.validate(smem=SmemLimit.of(target, ctx.target.name))
    return MultistageGemm(target, geometry, ctx.schedule_config(ScheduleConfig()))


SCHEDULES = (ScheduleRecord(
    SCHEDULE_NAME, "C = A.B^T, bf16 in / fp32 accumulate: one K tile per iteration through an "
    "S-stage cp.async ring (-T stages), CTA tile BM x BN x BK on a warp grid; waits and "
    "barriers derived by the core", _build, params=PARAMS, default_target=TARGET_NAME,
    # any copy-ring target (the family's tags 0-4) offering a cp.async ring, ldmatrix and
    # mma.sync: its cost model times it, the cuda emitter writes it for the target's arch
    families=(COPY_RING,), requires=MMA_SYNC_CP_ASYNC),)
