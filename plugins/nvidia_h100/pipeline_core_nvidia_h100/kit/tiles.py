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
