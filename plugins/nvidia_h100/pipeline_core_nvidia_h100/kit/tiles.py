"""The device tile loop: how a CTA of a persistent warp-specialized kernel walks its output
tiles, as a family's tile scheduler gives it to the frame (:mod:`.frame`).  A step toward the
kit's ``TileScheduler`` (issue 34's sketch: trip rule + device loop + grid rule): this is its
device loop, one record per kernel, so the frame writes every family's roles around the same
slot, and the GEMM's grouped raster (with cluster pairs and split consumers) is one scheduler
and attention's causal-ordered query tiles another."""
from __future__ import annotations

import attrs


@attrs.frozen(kw_only=True)
class TileLoop:
    """One role's loop over the CTA's output tiles, as CUDA lines without their indentation:
    ``head`` opens it (the ring counters ``rb`` (and ``o``), then the ``for`` line, whose body the
    frame closes), ``tile`` starts each tile's body (the tile's coordinates, its trip count ``KT``
    where it varies).  ``nested``: the body one level under the head (False: at its level, as
    the GEMM's consumer code is written)."""

    head: tuple[str, ...]
    tile: tuple[str, ...] = ()
    nested: bool = True


@attrs.frozen(kw_only=True)
class DeviceTileLoop:
    """The device side of a family's tile scheduler: ``counts`` (lines, unindented, before the
    roles: the CTA's tile count ``TILES`` and the K tiles per output tile ``KT``), the loop the
    producer (and a relay agent) runs and the one the consumers run.  ``empty_tiles``: an output
    tile may have no K tile (``KT == 0``: attention's causal rows past the keys, or no keys at
    all); the frame then runs each program's once steps alone on such a tile (docs/guide/
    agents.md, "Loads issued once"), so the once rings stay in step."""

    counts: tuple[str, ...]
    producer: TileLoop
    consumers: TileLoop
    empty_tiles: bool = False


def grouped_tile_loop(cluster: int = 1, split: int = 0) -> DeviceTileLoop:
    """The GEMM's tile scheduler: this CTA runs output tiles ``blockIdx.x``, ``+ gridDim.x``, ...
    in grouped raster order (``GROUP_M`` M tiles per group) with its rings' stages and phases
    running on across them (``rb``).  In a cluster (``cluster`` CTAs; docs/guide/matmul.md,
    "Clusters") the CTAs of one cluster walk the same tile pairs, as many as each other: pair
    ``blockIdx.x / CLUSTER``, ``+ gridDim.x / CLUSTER``, ..., each CTA the pair's M tile of its
    rank (past M on a pair's odd end: it still loads and multicasts its half of B and releases
    every stage; its loads of A are zero-filled and its stores clipped).  ``split`` > 0: a tile
    split's consumers (docs/guide/agents.md, "Tile splits"): consumer c of ``split`` runs the
    CTA's output tiles at positions c, c + split, ...; its ring positions (``rb``) count the K
    tiles of every earlier output tile of the CTA, the other consumers' too, and ``tile``
    outlives the loop (the steps after it read where it ended)."""
    rb = "int rb = 0;  // K tiles this CTA's ring has served before this output tile"
    grouped = ("int tile_m, tile_n;",
               "pch100::grouped_tile(tile, M / BM, N / BN, GROUP_M, tile_m, tile_n);")
    counts: tuple[str, ...]
    if cluster > 1:
        counts = (f"constexpr int CLUSTER = {cluster};",
                  "const u32 crank = cluster_ctarank();  // this CTA's rank in its cluster",
                  "const int KT = K / BK, MP = (M / BM + CLUSTER - 1) / CLUSTER, "
                  "TILES = MP * (N / BN);  // the cluster's tile pairs")
        every = TileLoop(head=(rb, "for (int tile = blockIdx.x / CLUSTER; tile < TILES; "
                                   "tile += gridDim.x / CLUSTER, rb += KT) {"),
                         tile=("int tile_m, tile_n;",
                               "pch100::grouped_tile(tile, MP, N / BN, GROUP_M, tile_m, tile_n);",
                               "tile_m = tile_m * CLUSTER + (int)crank;  // the pair's adjacent "
                               "M tiles"))
    else:
        counts = ("const int KT = K / BK, TILES = (M / BM) * (N / BN);",)
        every = TileLoop(head=(rb, "for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x, "
                                   "rb += KT) {"),
                         tile=grouped)
    consumers = attrs.evolve(every, nested=False)
    if split:
        consumers = TileLoop(
            head=("int rb = consumer * KT;  // ring positions count every earlier output tile "
                  "of the CTA, whoever ran it",
                  "int tile = blockIdx.x + consumer * (int)gridDim.x;",
                  f"for (; tile < TILES; tile += {split} * (int)gridDim.x, rb += {split} * KT) {{"),
            tile=grouped, nested=False)
    return DeviceTileLoop(counts=counts, producer=every, consumers=consumers)


def linear_tile_loop(counts: tuple[str, ...]) -> DeviceTileLoop:
    """The plainest tile scheduler: this CTA runs output tiles ``blockIdx.x``, ``+ gridDim.x``,
    ... in index order, every role alike, each visiting ``KT`` K tiles; ``counts`` set
    ``TILES`` and ``KT`` (a family whose output tiles are a GEMV's rows, a row reduction's)."""
    loop = TileLoop(head=("int rb = 0;  // K tiles this CTA's ring has served before this output "
                          "tile",
                          "for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x, "
                          "rb += KT) {"))
    return DeviceTileLoop(counts=counts, producer=loop, consumers=loop)


def jagged_tile_loop(max_groups: int, along_n: bool = False) -> DeviceTileLoop:
    """grouped_mm's tile scheduler (the grouped GEMM, ``-p batch=grouped``; not the raster's
    ``GROUP_M`` groups of M tiles): the groups' sizes are on the device only (``offs``, their
    cumulative ends along the jagged dimension: M, or N when ``along_n``), so every CTA's warp 0
    writes the groups' table (each group's first output tile and end, at most ``max_groups``
    groups, in static shared memory) before the start barrier, and every role maps its linear
    tile index ``blockIdx.x``, ``+ gridDim.x``, ... to (group, M tile, N tile) through it the
    same way (``pcgc::group_tile``, the grouped raster within a group), its rings running on
    across tiles (``rb``).  The tile count ``TILES`` is the table's last entry, read after the
    barrier: the loop ends when the index passes it.  Each tile's body has its group
    (``group``), its first row and column (``row0``, ``col0``: A's or B's row of the loads, C's
    corner) and where its stores stop (``m_end``, ``n_end``: the group's end, or the matrix's)."""
    block, extent, across = ("BN", "n", "M / BM") if along_n else ("BM", "m", "N / BN")
    counts = (f"__shared__ int group_first[{max_groups} + 1], group_ends[{max_groups}];  "
              "// the groups' table",
              f"pcgc::group_table<{block}>(group_first, group_ends, offs, groups, {extent}, "
              f"{across});  // warp 0, before the start barrier",
              "const int KT = K / BK;")
    loop = TileLoop(
        head=("int rb = 0;  // K tiles this CTA's ring has served before this output tile",
              "int group = 0;  // the tile's group: a cursor, as the CTA's tile indices only grow",
              "const int TILES = group_first[groups];  // every group's output tiles",
              "for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x, rb += KT) {"),
        tile=("int row0, col0, m_end, n_end;  // the tile's corner; where its stores stop",
              f"pcgc::group_tile<{str(along_n).lower()}, BM, BN>(tile, group_first, group_ends, "
              f"{across}, GROUP_M, m, n, group, row0, col0, m_end, n_end);"))
    return DeviceTileLoop(counts=counts, producer=loop, consumers=attrs.evolve(loop, nested=False))


def k_group_tile_loop() -> DeviceTileLoop:
    """grouped_mm's 2-D x 2-D tile scheduler (``-p batch=grouped_k``: the groups split K): every
    group has the same ``(M / BM) x (N / BN)`` output tiles, group by group, so ``TILES`` is known
    from the sizes; each tile's K tiles ``KT`` are its group's own (``pcgk::tile_of`` reads
    ``offs``), possibly none (an empty group: the tile runs no step and stores zeros), and the
    rings run on by each tile's own ``KT`` (``rb``), producer and consumers alike.  Each tile's
    body has its ``group``, ``tile_m``, ``tile_n``."""
    loop = TileLoop(
        head=("int rb = 0;  // K tiles this CTA's ring has served before this output tile",
              "for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x, rb += KT) {"),
        tile=("int group, tile_m, tile_n;  // the tile's group and place in it; KT its K tiles",
              "pcgk::tile_of(tile, offs, k, M / BM, N / BN, GROUP_M, BK, group, tile_m, tile_n, "
              "KT);"))
    counts = ("const int TILES = groups * ((M / BM) * (N / BN));  // every group's output tiles",
              "int KT = 0;  // the current output tile's K tiles (its group's)")
    return DeviceTileLoop(counts=counts, producer=loop, consumers=attrs.evolve(loop, nested=False),
                          empty_tiles=True)


def stream_k_tile_loop() -> DeviceTileLoop:
    """The GEMM's stream-K tile scheduler (``-p stream_k=true``; docs/guide/matmul.md,
    "Stream-K"): this CTA runs its work units ``pcsk::StreamK::unit(blockIdx.x, u)`` in order
    (its pieces of the stream-K tiles, the last ``sk_tiles`` of the raster, then its whole tiles
    ``blockIdx.x``, ``+ gridDim.x``, ...), producer and consumers alike, its rings running on by
    each unit's own ``KT`` (``rb``).  Each unit's body has its ``tile`` (in the grouped raster:
    ``tile_m``, ``tile_n``), its first K tile ``k0``, ``KT`` and the unit ``w`` (its tile's CTAs
    and workspace slot, which the fixup reads: ``gemm_tiles.StreamKTrips`` is its host twin)."""
    loop = TileLoop(
        head=("int rb = 0;  // K tiles this CTA's ring has served before this unit",
              "for (int u = 0, units = sk.units(blockIdx.x); u < units; ++u, rb += KT) {"),
        tile=("const pcsk::Unit w = sk.unit(blockIdx.x, u);  // the unit's tile and K range",
              "const int tile = w.tile;",
              "KT = w.kt, k0 = w.k0;",
              "int tile_m, tile_n;",
              "pch100::grouped_tile(tile, M / BM, N / BN, GROUP_M, tile_m, tile_n);"))
    counts = ("const int TILES = (M / BM) * (N / BN);",
              "const pcsk::StreamK sk(TILES, K / BK, (int)gridDim.x, sk_tiles);  // the split",
              "int KT = 0, k0 = 0;  // the current unit's K tiles and first K tile")
    return DeviceTileLoop(counts=counts, producer=loop, consumers=attrs.evolve(loop, nested=False))
