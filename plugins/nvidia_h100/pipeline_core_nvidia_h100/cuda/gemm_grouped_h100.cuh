// pipeline-core h100: the grouped GEMM's device tile scheduler (grouped_mm, a mixture of experts'
// GEMMs in one persistent launch).  The group sizes are known only on the device (torch's `offs`:
// each group's end along the jagged dimension, cumulative, int32), so every CTA reads them once,
// derives each group's output tiles and their prefix into shared memory, and maps each of its
// linear tile indices to (group, M tile, N tile): the producer and the consumers the same way, so
// the rings' stages and phases run on across tiles as in every persistent kernel here.  Pasted
// after gemm_wgmma_h100.cuh, only into a grouped kernel (-p batch=grouped / grouped_n).  No
// synchronization here: the table is written before the kernel's start barrier.  No #include:
// builds under nvcc and NVRTC alike.
#pragma once

namespace pcgc {

// The groups' table, written by warp 0 of every CTA before the start barrier: ends[g], group g's
// end along the jagged dimension (offs[g] clamped to [0, extent]: a group never reaches past the
// tensor; an end below the previous group's makes an empty group); first[g], the group's first
// output tile in the linear order, first[groups] every group's tiles.  A group of `rows` along
// the jagged dimension has ceil(rows / BLOCK) x `across` tiles (`across`: the other dimension's
// tiles).  Each lane takes a run of groups; one warp scan joins the runs.
template <int BLOCK>
__device__ __forceinline__ void group_table(int* first, int* ends, const int* offs, int groups,
                                            int extent, int across) {
    if (threadIdx.x >= 32) return;
    const int lane = threadIdx.x, per = (groups + 31) / 32;
    const int lo = min(lane * per, groups), hi = min(lo + per, groups);
    auto end_of = [&](int g) { return g < 0 ? 0 : min(max(offs[g], 0), extent); };
    auto tiles_of = [&](int begin, int end) {
        return (max(end - begin, 0) + BLOCK - 1) / BLOCK * across;
    };
    int run = 0;
    for (int g = lo, begin = end_of(lo - 1); g < hi; ++g) {
        const int end = end_of(g);
        ends[g] = end;
        run += tiles_of(begin, end);
        begin = end;
    }
    int scan = run;  // the runs' inclusive prefix over the lanes
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
        const int v = __shfl_up_sync(0xffffffffu, scan, d);
        if (lane >= d) scan += v;
    }
    for (int g = lo, at = scan - run; g < hi; ++g) {
        first[g] = at;
        at += tiles_of(end_of(g - 1), ends[g]);
    }
    if (lane == 31) first[groups] = scan;
}

// Output tile `tile` (below first[groups]) of the grouped loop: its group, found from `group`
// on (the caller's cursor: a CTA's tiles only grow, so the search only moves forward), and its
// place: the tile's first row (`row`, of A and C) and column (`col`, of B and C), and where the
// stores stop (`m_end`, `n_end`).  ALONG_N: the groups split the columns (B [K, sum N_g], A and
// the scales one per group), else the rows (A [sum M_g, K], B one per group).  Within a group the
// tiles run in the grouped raster of GROUP_M M tiles (pch100::grouped_tile).
template <bool ALONG_N, int BM, int BN>
__device__ __forceinline__ void group_tile(int tile, const int* first, const int* ends, int across,
                                           int group_m, int m, int n, int& group, int& row,
                                           int& col, int& m_end, int& n_end) {
    while (first[group + 1] <= tile) ++group;
    const int local = tile - first[group], count = (first[group + 1] - first[group]) / across;
    const int begin = group == 0 ? 0 : ends[group - 1];
    int tile_m, tile_n;
    if constexpr (ALONG_N) {
        pch100::grouped_tile(local, across, count, group_m, tile_m, tile_n);
        row = tile_m * BM, col = begin + tile_n * BN, m_end = m, n_end = ends[group];
    } else {
        pch100::grouped_tile(local, count, across, group_m, tile_m, tile_n);
        row = begin + tile_m * BM, col = tile_n * BN, m_end = ends[group], n_end = n;
    }
}

// An operand's tile of a grouped kernel by TMA (the producer's op step): the ROWS rows from `row`
// of K tile t into `dst`, completing on `bar`; BATCHED: the operand has one matrix per group, read
// through its 3-D map at batch `group` (a grouped kernel's batch is its tile's group, not grid z);
// else the 2-D load of the plain kernel.
template <bool MN, int ROWS, int BK, u32 CHUNK, bool BATCHED>
struct GroupOperand {
    static __device__ __forceinline__ void load(u32 dst, const pcwg::TensorMap* map, u32 bar,
                                                int t, int row, int group) {
        if constexpr (!BATCHED) {
            Operand<MN, ROWS, BK, CHUNK, false, false, 1>::load(dst, map, bar, t, 0, row);
        } else if constexpr (MN) {
            for (int i = 0; i < ROWS / 64; ++i)
                tma_load_3d(dst + i * CHUNK, map, bar, row + i * 64, t * BK, group);
        } else {
            tma_load_3d(dst, map, bar, t * BK, row, group);
        }
    }
};

}  // namespace pcgc
