// pipeline-core h100: the general wgmma GEMM's device math (the kernel matmul() launches), as
// device functions the emitted frame calls: the operands' TMA loads and their descriptors of
// either major mode, the fused epilogue on a consumer's m64nN fragments (its direct store and
// its TMA-store staging writes), split-K's partial-sum slices.  The variant is a choice of
// template arguments (the traits of gemm_call_h100.cuh and gemm_scale_batch_h100.cuh), not of
// text.  Every synchronization stays in the emitted kernel, where sync_skeleton reads it.  Paste
// after gemm_scale_batch_h100.cuh and cluster_h100.cuh.  No #include: builds under nvcc and
// NVRTC alike.
#pragma once

namespace pcgc {

// One operand's tile of a ring stage by TMA, the producer's op step (docs/guide/matmul.md): the
// ROWS rows from `row` of K tile t into `dst`, its bytes completing on `bar`.  K-major: one box
// of BK x ROWS; MN-major: one 64 x BK box per 64 rows (CHUNK bytes each: a 128-byte swizzled
// row holds 64 elements).  SPLIT (split-K): the CTA's K tiles start at blockIdx.y * kt (its
// split's; kt: one split's tile count).  BATCHED: the map is 3D, its third coordinate the batch
// blockIdx.z.  CLUSTER > 1: this CTA's 1 / CLUSTER of the rows (its rank crank's), into the
// same stage of every CTA of the cluster (the map's box is that share).
template <bool MN, int ROWS, int BK, u32 CHUNK, bool SPLIT, bool BATCHED, int CLUSTER>
struct Operand {
    static __device__ __forceinline__ void load(u32 dst, const pcwg::TensorMap* map, u32 bar,
                                                int t, int kt, int row, u32 crank = 0) {
        int k = t * BK;
        if constexpr (SPLIT) k = (blockIdx.y * kt + t) * BK;
        if constexpr (CLUSTER > 1) {
            constexpr unsigned short mask = (1u << CLUSTER) - 1u;
            if constexpr (MN) {
                for (int i = crank * (ROWS / 64 / CLUSTER); i < (crank + 1) * (ROWS / 64 / CLUSTER);
                     ++i)
                    pcwg::tma_load_2d_multicast(dst + i * CHUNK, map, bar, row + i * 64, k, mask);
            } else {
                pcwg::tma_load_2d_multicast(dst + crank * (ROWS / CLUSTER) * 128, map, bar, k,
                                            row + crank * (ROWS / CLUSTER), mask);
            }
        } else if constexpr (MN) {
            for (int i = 0; i < ROWS / 64; ++i) {
                if constexpr (BATCHED)
                    tma_load_3d(dst + i * CHUNK, map, bar, row + i * 64, k, blockIdx.z);
                else
                    pcwg::tma_load_2d(dst + i * CHUNK, map, bar, row + i * 64, k);
            }
        } else if constexpr (BATCHED) {
            tma_load_3d(dst, map, bar, k, row, blockIdx.z);
        } else {
            pcwg::tma_load_2d(dst, map, bar, k, row);
        }
    }
};

// The shared-memory descriptor of an operand's rows row .. row + 63 (A: the M block; B: 0) at k
// step kk of a ring stage: K-major, 128-byte rows of one M (N) index; MN-major, 64-element
// chunks of CHUNK bytes (smem_desc_sw128_mn).
template <bool MN, u32 CHUNK>
__device__ __forceinline__ u64 operand_desc(u32 stage, int row, int kk) {
    return MN ? smem_desc_sw128_mn<CHUNK>(stage + row / 64 * CHUNK + kk * 2048)
              : pcwg::smem_desc_sw128(stage + row * 128 + kk * 32);
}

// An output element's bytes (the TMA store's staging offsets, the direct store's pair alignment).
template <class Out>
struct OutBytes {
    static constexpr int value = 2;  // OutBf16, OutF16
};
template <>
struct OutBytes<OutF32> {
    static constexpr int value = 4;
};

// The fused epilogue (docs/guide/matmul.md): each accumulator scaled (Scale), + bias[col]
// (Bias, 0 past n), activated (Act), cast and stored (Out).  A thread of warp w holds, per 8
// columns j, the fragment quad acc[4j .. 4j+3]: rows w*16 + g and + 8 by columns 2q, 2q + 1.
template <class Out, class Bias, class Act, class Scale>
struct Epilogue {
    const void* bias;
    const float* scale_a;
    const float* scale_b;
    int m, n, w, g, q;

    __device__ __forceinline__ Epilogue(const void* bias_, const float* scale_a_,
                                        const float* scale_b_, int m_, int n_, int wtid, int lane)
        : bias(bias_), scale_a(scale_a_), scale_b(scale_b_), m(m_), n(n_), w(wtid / 32),
          g(lane / 4), q(lane % 4) {}

    // Quad j of `frag` (its row's scales sa0, sa8; its columns col, col + 1), epilogue applied.
    template <int ACC>
    __device__ __forceinline__ void quad(float (&v)[4], const float (&frag)[ACC], int j, int col,
                                         float sa0, float sa8) const {
        quad_biased(v, frag, j, col, sa0, sa8, col < n ? Bias::at(bias, col) : 0.f,
                    col + 1 < n ? Bias::at(bias, col + 1) : 0.f);
    }

    // The bias of the thread's columns of one fragment's width (its P = ACC / 4 quads from
    // col0), read at once.  Why: the TMA-store epilogue meets its warp group around every sub-tile,
    // and a bias read inside each waited for its load there, one latency a sub-tile (a bias
    // cost the 128x256 kernel 1.7-4.1 K tiles of its mainloop on an H200, session 26).
    template <int P>
    __device__ __forceinline__ void bias_of(float (&b)[P][2], int col0) const {
#pragma unroll
        for (int j = 0; j < P; ++j) {
            const int col = col0 + j * 8 + 2 * q;
            b[j][0] = col < n ? Bias::at(bias, col) : 0.f;
            b[j][1] = col + 1 < n ? Bias::at(bias, col + 1) : 0.f;
        }
    }

    // quad's work with the columns' bias b0, b1 given.
    template <int ACC>
    __device__ __forceinline__ void quad_biased(float (&v)[4], const float (&frag)[ACC], int j,
                                                int col, float sa0, float sa8, float b0,
                                                float b1) const {
        const float sb0 = Scale::b(scale_b, col, n), sb1 = Scale::b(scale_b, col + 1, n);
        v[0] = Act::f(Scale::apply(frag[4 * j], sa0 * sb0) + b0);
        v[1] = Act::f(Scale::apply(frag[4 * j + 1], sa0 * sb1) + b1);
        v[2] = Act::f(Scale::apply(frag[4 * j + 2], sa8 * sb0) + b0);
        v[3] = Act::f(Scale::apply(frag[4 * j + 3], sa8 * sb1) + b1);
    }

    // The direct store: every fragment to C (row stride ldc) from the tile's corner (row0, col0),
    // two columns per store where aligned, clipped to m x n.  A pair's column has col0's parity:
    // a corner at an odd column (a grouped GEMM's group starting there) stores one at a time.
    template <int MBLOCKS, int ACC, int WGMMA_M>
    __device__ __forceinline__ void store(const float (&acc)[MBLOCKS][ACC], void* c,
                                          long long ldc, int row0, int col0) const {
        constexpr int pair = 2 * OutBytes<Out>::value;
        const bool vec = (ldc % 2 == 0) && (col0 % 2 == 0) &&
                         (reinterpret_cast<size_t>(c) % pair == 0);
#pragma unroll
        for (int mb = 0; mb < MBLOCKS; ++mb) {
            const int row = row0 + mb * WGMMA_M + w * 16 + g;
            const float sa0 = Scale::a(scale_a, row, m), sa8 = Scale::a(scale_a, row + 8, m);
#pragma unroll
            for (int j = 0; j < ACC / 4; ++j) {
                const int col = col0 + j * 8 + 2 * q;
                float v[4];
                quad(v, acc[mb], j, col, sa0, sa8);
                store_pair<Out>(c, ldc, row, col, m, n, vec, v[0], v[1]);
                store_pair<Out>(c, ldc, row + 8, col, m, n, vec, v[2], v[3]);
            }
        }
    }

    // The TMA store's staging write: sub-tile s (SCOLS columns from col0 + s * SCOLS) of one
    // 64-row block's fragment (its first row row0), into the swizzled buffer buf (rows of
    // SCOLS outputs: 128 or 64 bytes).
    // EARLY: the bias comes from `pre` (bias_of over the fragment's columns from col0, P its
    // quads), else it is read here.
    template <int SCOLS, bool EARLY, int ACC, int P>
    __device__ __forceinline__ void stage(const float (&frag)[ACC], u32 buf, int s, int row0,
                                          int col0, const float (&pre)[P][2]) const {
        constexpr int ROW = SCOLS * OutBytes<Out>::value;
        const int row = row0 + w * 16 + g;
        const float sa0 = Scale::a(scale_a, row, m), sa8 = Scale::a(scale_a, row + 8, m);
#pragma unroll
        for (int jj = 0; jj < SCOLS / 8; ++jj) {
            const int j = s * (SCOLS / 8) + jj;
            const int col = col0 + j * 8 + 2 * q;
            const int at = (jj * 8 + 2 * q) * OutBytes<Out>::value;
            float v[4];
            if constexpr (EARLY)
                quad_biased(v, frag, j, col, sa0, sa8, pre[j][0], pre[j][1]);
            else
                quad(v, frag, j, col, sa0, sa8);
            Out::stage(staged<ROW>(buf, w * 16 + g, at), v[0], v[1]);
            Out::stage(staged<ROW>(buf, w * 16 + g + 8, at), v[2], v[3]);
        }
    }
};

// split-K's partial sums (docs/guide/matmul.md, "Speed"): this CTA's accumulators to its
// workspace slice (`part`: the thread's first; THREADS apart, so each store is one coalesced
// row), and back: every slice's sums in split order 0, 1, ... (deterministic whichever CTA
// reduces), CHUNK loads in flight per slice.
template <int MBLOCKS, int ACC, int THREADS>
__device__ __forceinline__ void slice_store(const float (&acc)[MBLOCKS][ACC], float* part) {
#pragma unroll
    for (int mb = 0; mb < MBLOCKS; ++mb)
#pragma unroll
        for (int i = 0; i < ACC; ++i) __stcg(part + (mb * ACC + i) * THREADS, acc[mb][i]);
}

template <int MBLOCKS, int ACC, int THREADS, int CHUNK>
__device__ __forceinline__ void slice_read(float (&acc)[MBLOCKS][ACC], const float* part,
                                           size_t slice, int slices) {
#pragma unroll
    for (int mb = 0; mb < MBLOCKS; ++mb)
#pragma unroll
        for (int c = 0; c < ACC; c += CHUNK)
#pragma unroll 1
            for (int y = 0; y < slices; ++y)  // every slice, this CTA's own too
#pragma unroll
                for (int i = c; i < c + CHUNK; ++i) {
                    const float v = __ldcg(part + y * slice + (mb * ACC + i) * THREADS);
                    acc[mb][i] = y == 0 ? v : acc[mb][i] + v;
                }
}

}  // namespace pcgc
