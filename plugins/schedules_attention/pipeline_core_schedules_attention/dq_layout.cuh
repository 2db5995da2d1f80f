// Where dQ's element (row, col) of a query block lives in the backward's fp32 accumulator: the
// one home of the layout the main kernel's consumers stage dQ in (attention_bwd.cuh's `stage`)
// and the postprocess reads back (bwd_prepost.cuh).  The accumulator is an internal workspace,
// so its layout is chosen for the writer: a 64 x 64 tile of it is laid out in wgmma's
// accumulator order, so that each 8-byte store of a thread's column pair (row r or r + 8) by a
// warp's 32 threads covers 256 consecutive bytes.  A row-major tile put a warp's eight
// rows on the same banks (a 4-way conflict on every staging store, measured on the H200: the
// stores were a third of the kernel's shared-memory wavefronts); this order has none.  Tiles
// follow each other [row block of 64][column block of 64], so BM rows of the accumulator (BM a
// multiple of 64, starting on a multiple of 64) stay one contiguous span: the bulk reduce adds
// it unchanged.
#pragma once

namespace pcdq {

// The tile's side: wgmma's M for one warp group, and a 64-column part of the head dim.
constexpr int TILE = 64;

// Where wgmma's accumulator fragment puts a thread's column pair in a 64 x 64 tile, as a float
// offset: warp w's lane's pair of column block c (columns 8 c + 2 (lane % 4) + {0, 1}), in row
// 16 w + lane / 4 (half 0) or 8 rows lower (half 1).  This order is the layout; `offset` below
// maps (row, col) into it.  (One 16-byte store of both halves, 512 bytes a warp, spilled a
// register at D 128 causal: its four values must sit in an aligned register quad.)
__device__ __forceinline__ int fragment_offset(int warp, int lane, int c, int half) {
    return (((warp * 8 + c) * 2 + half) * 32 + lane) * 2;
}

// The float offset of (r, c) within its 64 x 64 tile.
__device__ __forceinline__ int tile_offset(int r, int c) {
    return fragment_offset(r / 16, (r % 8) * 4 + (c % 8) / 2, c / 8, (r % 16) / 8) + c % 2;
}

// The float offset of the first of a head's [rows, HD] accumulator tile (row block `rb` of 64,
// column part `part` of 64): tiles follow each other by row block, then column part.
template <int HD>
__device__ __forceinline__ long long tile_start(long long rb, int part) {
    static_assert(HD % TILE == 0, "head dim a multiple of 64");
    return (rb * (HD / TILE) + part) * (TILE * TILE);
}

// The float offset of (row, col) within a head's [rows, HD] accumulator (rows a multiple of
// TILE).
template <int HD>
__device__ __forceinline__ long long offset(long long row, int col) {
    return tile_start<HD>(row / TILE, col / TILE) + tile_offset((int)(row % TILE), col % TILE);
}

}  // namespace pcdq
