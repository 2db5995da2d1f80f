// Where dQ's element (row, col) lives in the backward's fp32 accumulator: the one home of the
// layout the main kernel's consumers stage dQ in (attention_bwd.cuh's `stage`) and the
// postprocess reads back (bwd_prepost.cuh).  The accumulator is an internal workspace, so its
// layout is chosen for the writer: each block of 64 rows is laid out in wgmma's accumulator
// order, so that a warp's 8-byte stores of one column pair (32 threads) cover 256 consecutive
// bytes.  A row-major block put a warp's eight rows on the same banks (measured with Nsight
// Compute on the H200, D 128, S 4k: the staging stores made 268M of the kernel's 621M
// shared-memory wavefronts, 4x their ideal); this order has no conflict.  Blocks follow each
// other, so BM rows of the accumulator (BM a multiple of 64, starting on a multiple of 64) are
// one contiguous span: the bulk reduce adds it unchanged.
#pragma once

namespace pcdq {

// A block's rows: wgmma's M for one warp group.
constexpr int ROWS = 64;

// Where wgmma's accumulator fragment puts a thread's column pair within its block, as a float
// offset: warp w's lane's pair of column block c (columns 64 part + 8 c + 2 (lane % 4) +
// {0, 1}) in row 16 w + lane / 4 (half 0) or 8 rows lower (half 1).  This order is the layout;
// `offset` maps (row, col) into it.  The 64-column parts are interleaved innermost but for the
// lanes: with a part's pairs 16 KB apart instead, ptxas spilled a register of the frame's at
// D 128 causal (as it did with one 16-byte store of both halves, whose four values must sit in
// an aligned register quad).
template <int HD>
__device__ __forceinline__ int fragment_offset(int warp, int lane, int c, int half, int part) {
    static_assert(HD % 64 == 0, "head dim a multiple of 64");
    return ((((warp * 8 + c) * 2 + half) * (HD / 64) + part) * 32 + lane) * 2;
}

// The float offset of row block `rb`'s first element.
template <int HD>
__device__ __forceinline__ long long block_start(long long rb) {
    return rb * ROWS * HD;
}

}  // namespace pcdq
