"""Tile shape -> KernelGeometry and launch defaults, with MI355X's load/LDS arithmetic.

Both production kernels (ping-pong: 8 loading warps as a 2x4 grid; 4-wave: 4
warps as 2x2) derive their per-load counter costs with the same formulas
(docs/guide/reference-behaviours.md, "Geometry factors"): every
division is a floor division except ds_reads_per_frag (a ceiling), and the
per-fragment factors come from MMA_M and MMA_K only. They differ only in the
warp layout, so the layout is a parameter here and each schedule plugin passes
its own.

Unlike the reference (which silently floors and can produce vm 0), a shape that
does not divide evenly is rejected with a ConfigError naming the parameter:
a floored count would make every derived wait wrong.
"""
from __future__ import annotations

import attrs

from pipeline_core.plugin_api import COUNTER_TICKS, GLOBAL_LOAD_TICKS, PARAM_INT, Bound, ConfigError


@attrs.frozen
class KernelGeometry:
    """Tile shape and the per-load counter costs a kernel layout derives from it."""

    BM: int
    BN: int
    BK: int
    MMA_M: int
    MMA_N: int
    MMA_K: int
    elem_bytes: int
    simd_width: int
    is_fp8: bool
    vm_per_load_a: int
    vm_per_load_b: int
    lgkm_per_load_a: int
    lgkm_per_load_b: int


def derive_safe_max_globals(num_k_mmas: int) -> int:
    """1 global per block is safe when 2+ K-MMAs cover the async LDS write of a
    ``buffer_load ... lds``, else 0 (an MI355X fact, so it lives in this plugin)."""
    return 1 if num_k_mmas >= 2 else 0


#: The range of each tile-shape size (BM, BN, BK, MMA_M, MMA_N, MMA_K) on its own: the
#: schedules' ``-p`` parameters declare it (so ``pipeline-core schedules`` lists it) and
#: :func:`tile_launch_defaults` checks it; what a size must divide or be a multiple of
#: depends on the others and is checked there, naming them.
TILE_SIZE = Bound(low=1, high=PARAM_INT.high)

#: bytes per element of each supported input type.
ELEM_BYTES: dict[str, int] = {"bf16": 2, "fp8": 1}
DTYPES: tuple[str, ...] = tuple(ELEM_BYTES)

WAVE_SIZE = 64  #: lanes per wavefront
LOAD_BYTES = 16  #: bytes per buffer_load / ds_read lane (128-bit)
#: num_k_mmas * quadrant_m * quadrant_n below this gives max_globals 0 (too few
#: MMAs per block to hide a global load's async LDS write).
MIN_MMAS_FOR_GLOBALS = 8


@attrs.frozen
class WarpLayout:
    """How a kernel's warps tile the block: the loaders and the WM x WN warp grid."""

    name: str
    loading_warps: int  #: warps issuing global loads (rows_per_iter = warps*64/loads_per_row)
    warp_rows: int  #: WM = BM / warp_rows
    warp_cols: int  #: WN = BN / warp_cols

    @property
    def bk_bound(self) -> Bound:
        """The range of BK on this layout: at most one 16-byte load per lane of the loading
        warps per row (BK = lanes x the 16 elements of the narrowest type), the ``-p BK``
        bound its schedule declares and :func:`tile_launch_defaults` checks."""
        widest = LOAD_BYTES // min(ELEM_BYTES.values())
        return Bound(low=TILE_SIZE.low, high=self.loading_warps * WAVE_SIZE * widest)


@attrs.frozen
class TileShape:
    """The user-facing shape: input type, block tile and MMA instruction shape."""

    dtype: str
    BM: int
    BN: int
    BK: int
    MMA_M: int
    MMA_N: int
    MMA_K: int


@attrs.frozen
class LaunchDefaults:
    """Everything a production kernel derives from its tile before building the schedule."""

    geometry: KernelGeometry
    WM: int
    WN: int
    num_m_mmas: int
    num_n_mmas: int
    num_k_mmas: int
    quadrant_m: int
    quadrant_n: int
    max_globals: int

    @property
    def vm_per_load_a(self) -> int:
        return self.geometry.vm_per_load_a

    @property
    def vm_per_load_b(self) -> int:
        return self.geometry.vm_per_load_b

    @property
    def lgkm_per_load_a(self) -> int:
        return self.geometry.lgkm_per_load_a

    @property
    def lgkm_per_load_b(self) -> int:
        return self.geometry.lgkm_per_load_b

    def as_params(self) -> dict:
        """Flat dict in the shape of the goldens' ``params`` (for reports and debugging)."""
        g = self.geometry
        return {"BM": g.BM, "BN": g.BN, "BK": g.BK, "WM": self.WM, "WN": self.WN,
                "MMA_M": g.MMA_M, "MMA_N": g.MMA_N, "MMA_K": g.MMA_K,
                "elem_bytes": g.elem_bytes, "is_fp8": g.is_fp8,
                "num_m_mmas": self.num_m_mmas, "num_n_mmas": self.num_n_mmas,
                "num_k_mmas": self.num_k_mmas, "quadrant_m_mmas": self.quadrant_m,
                "quadrant_n_mmas": self.quadrant_n,
                "vm_per_load_a": g.vm_per_load_a, "vm_per_load_b": g.vm_per_load_b,
                "lgkm_per_load_a": g.lgkm_per_load_a, "lgkm_per_load_b": g.lgkm_per_load_b,
                "max_globals": self.max_globals}


def _exact(owner: str, field: str, value: int, num: int, den: int, why: str) -> int:
    """num / den, which must be a positive whole number, else a ConfigError naming ``field``."""
    if den <= 0 or num % den or num // den < 1:
        raise ConfigError(owner, field, value, why)
    return num // den


def tile_launch_defaults(owner: str, shape: TileShape, layout: WarpLayout) -> LaunchDefaults:
    """KernelGeometry, MMA counts and max_globals of ``shape`` on ``layout``.

    ``owner`` names the schedule in error messages (``schedule pingpong``).
    Raises ConfigError naming the offending parameter when the dtype is
    unknown, a size is not positive, or a division the kernel relies on is
    uneven (the tile is not a multiple of the MMA shape or the warp layout, or
    too small for two quadrants per warp, or for one full load per thread).
    """
    if shape.dtype not in ELEM_BYTES:
        raise ConfigError(owner, "dtype", shape.dtype, f"one of {', '.join(DTYPES)}")
    for name in ("BM", "BN", "BK", "MMA_M", "MMA_N", "MMA_K"):
        value = getattr(shape, name)
        bound = layout.bk_bound if name == "BK" else TILE_SIZE
        if not bound.contains(value):
            raise ConfigError(owner, name, value, bound.allowed())
    BM, BN, BK = shape.BM, shape.BN, shape.BK
    MMA_M, MMA_N, MMA_K = shape.MMA_M, shape.MMA_N, shape.MMA_K
    elem_bytes = ELEM_BYTES[shape.dtype]
    is_fp8 = shape.dtype == "fp8"
    simd_width = LOAD_BYTES // elem_bytes
    grid = f"{layout.warp_rows}x{layout.warp_cols} warp grid of {layout.name}"

    # MMA grid per warp, split into 2x2 quadrants.
    quad_m_rows = layout.warp_rows * MMA_M * 2
    quad_n_cols = layout.warp_cols * MMA_N * 2
    _exact(owner, "BM", BM, BM, quad_m_rows,
           f"a multiple of {quad_m_rows} (= {layout.warp_rows} warp rows x 2 quadrants x "
           f"MMA_M {MMA_M}) for the {grid}")
    _exact(owner, "BN", BN, BN, quad_n_cols,
           f"a multiple of {quad_n_cols} (= {layout.warp_cols} warp columns x 2 quadrants x "
           f"MMA_N {MMA_N}) for the {grid}")
    WM, WN = BM // layout.warp_rows, BN // layout.warp_cols
    num_m_mmas, num_n_mmas = WM // MMA_M, WN // MMA_N
    quadrant_m, quadrant_n = num_m_mmas // 2, num_n_mmas // 2
    num_k_mmas = _exact(owner, "BK", BK, BK, MMA_K, f"a multiple of MMA_K ({MMA_K})")

    # Global loads: 16-byte lanes along K, all loading warps sweep rows together.
    loads_per_row = _exact(owner, "BK", BK, BK, simd_width,
                           f"a multiple of {simd_width} ({shape.dtype} elements per 16-byte load)")
    lanes = layout.loading_warps * WAVE_SIZE
    rows_per_iter = _exact(owner, "BK", BK, lanes, loads_per_row,
                           f"such that BK/{simd_width} ({simd_width} elements of dtype "
                           f"{shape.dtype} per 16-byte load) = {loads_per_row} loads per row divides the "
                           f"{lanes} lanes of {layout.loading_warps} loading warps")
    fill = (f"the {rows_per_iter} rows that {layout.loading_warps} loading warps fill per "
            f"iteration at BK={BK} {shape.dtype} (every lane issues whole 16-byte loads)")
    vm_a = _exact(owner, "BM", BM, BM // 2, rows_per_iter,
                  f"such that BM/2 = {BM // 2} is a multiple of {fill}")
    vm_b = _exact(owner, "BN", BN, BN // 2, rows_per_iter,
                  f"such that BN/2 = {BN // 2} is a multiple of {fill}")

    # Fragment loads (LDS -> registers): factors from MMA_M and MMA_K only
    # (docs/guide/reference-behaviours.md, "Geometry factors").
    frag_w = _exact(owner, "MMA_K", MMA_K, MMA_M * MMA_K, WAVE_SIZE,
                    f"such that MMA_M x MMA_K is a multiple of {WAVE_SIZE} (one fragment per lane)")
    split_lds = is_fp8 and MMA_M == 16 and MMA_K == 128
    lds_frag_w = 16 if split_lds else frag_w
    k_loads_per_mma = _exact(owner, "MMA_K", MMA_K, frag_w, lds_frag_w,
                             "a fragment width that splits into 16-element LDS reads")
    ds_reads_per_frag = -(-(lds_frag_w * elem_bytes) // LOAD_BYTES)
    lgkm_a = quadrant_m * num_k_mmas * k_loads_per_mma * ds_reads_per_frag
    lgkm_b = quadrant_n * num_k_mmas * k_loads_per_mma * ds_reads_per_frag

    for counter, value, bound in (("vm_per_load_a", vm_a, GLOBAL_LOAD_TICKS),
                                  ("vm_per_load_b", vm_b, GLOBAL_LOAD_TICKS),
                                  ("lgkm_per_load_a", lgkm_a, COUNTER_TICKS),
                                  ("lgkm_per_load_b", lgkm_b, COUNTER_TICKS)):
        if not bound.contains(value):
            shape_text = (f"BM={BM} BN={BN} BK={BK} MMA_M={MMA_M} MMA_N={MMA_N} MMA_K={MMA_K} "
                          f"{shape.dtype}")
            raise ConfigError(owner, "tile shape", shape_text,
                              f"a shape whose derived {counter} ({value}) is {bound.allowed()}")

    if num_k_mmas * quadrant_m * quadrant_n < MIN_MMAS_FOR_GLOBALS:
        max_globals = 0
    else:
        max_globals = derive_safe_max_globals(num_k_mmas)

    geometry = KernelGeometry(BM=BM, BN=BN, BK=BK, MMA_M=MMA_M, MMA_N=MMA_N, MMA_K=MMA_K,
                              elem_bytes=elem_bytes, simd_width=simd_width, is_fp8=is_fp8,
                              vm_per_load_a=vm_a, vm_per_load_b=vm_b,
                              lgkm_per_load_a=lgkm_a, lgkm_per_load_b=lgkm_b)
    return LaunchDefaults(geometry=geometry, WM=WM, WN=WN, num_m_mmas=num_m_mmas,
                          num_n_mmas=num_n_mmas, num_k_mmas=num_k_mmas, quadrant_m=quadrant_m,
                          quadrant_n=quadrant_n, max_globals=max_globals)


#: The ping-pong kernel: 8 warps, 2 warp groups, every warp loads; warps tile 2x4.
PINGPONG_LAYOUT = WarpLayout("ping-pong", loading_warps=8, warp_rows=2, warp_cols=4)
#: The 4-wave kernel: 4 warps, all loading; warps tile 2x2.
FOUR_WAVE_LAYOUT = WarpLayout("4-wave", loading_warps=4, warp_rows=2, warp_cols=2)


def pingpong_launch_defaults(shape: TileShape, owner: str = "schedule pingpong") -> LaunchDefaults:
    """What the production ping-pong kernel derives from its tile
    (docs/guide/reference-behaviours.md, "Geometry factors")."""
    return tile_launch_defaults(owner, shape, PINGPONG_LAYOUT)


def four_wave_launch_defaults(shape: TileShape, owner: str = "schedule 4wave") -> LaunchDefaults:
    """The 4-wave KernelGeometry factory (docs/guide/reference-behaviours.md,
    "Geometry factors")."""
    return tile_launch_defaults(owner, shape, FOUR_WAVE_LAYOUT)
