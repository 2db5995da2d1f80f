// The attention family's device math: what a consumer warp group does with Q, a K block and a
// V block (S = Q.K^T, the online softmax, the rescale of O, O += P.V) and how an output tile's
// rows leave.  The kit's frame calls these, one call per op step of the compiled plan
// (emit_attention.py writes the calls and picks each variant's template arguments); they hold
// no synchronization but the warp's shuffles: every wait, arrival and wgmma group fence is the
// plan's, written by the kit.  Pasted after the kit's headers (pcwg, pcgc's descriptors and
// element conversions) and the per-N wgmma wrappers (kit/wgmma.py), which the S and PV steps
// take as template arguments: a wrapper is written per N (its asm lists N / 2 registers).
//
// A consumer owns ROWS query rows; thread (warp w, lane) holds rows w * 16 + lane / 4 (its
// "row 0") and that row + 8 (its "row 1") of S and O, at columns 8 c + 2 (lane % 4) + {0, 1}
// (wgmma's m64 accumulator fragment: registers 4 c, 4 c + 1 in row 0, 4 c + 2, 4 c + 3 in row 1).
#pragma once

namespace pcat {

using pcwg::u32;
using pcwg::u64;

// A 4D tile of `map` at (c0 innermost, c1, c2, c3) into shared memory; its bytes complete on
// `bar`.  The attention kernels' Q, K, V (and dO) maps are rank 4 over (D, S, H, B) with the
// tensors' own strides (layout.py), read at (d, s, h, b): a box past S reads zeros.
__device__ __forceinline__ void tma_load_4d(u32 dst, const pcwg::TensorMap* map, u32 bar, int c0,
                                            int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
        :: "r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2),
           "r"(c3) : "memory");
}

// The query rows of one consumer warp group: wgmma's M (the emitter refuses other geometries).
constexpr int ROWS = 64;

// 2^x on the MUFU alone (FA3's softmax): exp2f's accurate path adds a compare and two multiplies
// around each MUFU.EX2 on the FP32 pipe the softmax shares with the rescale.  ftz: an input that
// underflows gives 0, which a probability past the row max's range is anyway.
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// The element type of Q, K, V and O (-O dtype): two fp32 values as one 16-bit pair, `lo` at the
// lower address (P for the PV wgmma's A fragment, O for the store).
struct Bf16 {
    static __device__ __forceinline__ u32 pack(float lo, float hi) {
        return pch100::pack_bf16x2(lo, hi);
    }
    static __device__ __forceinline__ unsigned short one(float x) { return pcgc::f32_to_bf16(x); }
};
struct Fp16 {
    static __device__ __forceinline__ u32 pack(float lo, float hi) {
        return pcgc::pack_f16x2(lo, hi);
    }
    static __device__ __forceinline__ unsigned short one(float x) { return pcgc::f32_to_f16(x); }
};

// Where P is packed to 16 bits.  `now`: in the softmax (no PV in flight reads the packed P).
// `later` (the plan's intra_overlap: PV_{t-1} still reads P_{t-1} while the softmax of t runs):
// the softmax leaves P_t in fp32 in S's own registers and the rescale, which runs after the
// plan's wait_group 0, packs it, so no register an in-flight wgmma reads is written (ptxas
// serializes the wgmmas otherwise: C7520).
enum class PackP { now, later };

// The mask of a masked KV block (the softmax's Mask): which keys a row keeps, the others -inf.
// `last(row)` is the row's last key (what `keeps` compares against), asked for each of a
// thread's two rows (decode's rows are not one key apart: attention_decode.cuh).
// Not causal: the keys past the sequence's end (the key tail's block).
struct KeyTail {
    int sk;
    __device__ __forceinline__ int last(int) const { return 0; }
    __device__ __forceinline__ bool keeps(int key, int) const { return key < sk; }
};
// Causal: also the keys past the row's last one, row + offset (the plan's LoopBounds.offset:
// 0 top-left, Sk - Sq bottom-right; docs/guide/attention.md, "Causal bounds and tails").
struct Causal {
    int sk, offset;
    __device__ __forceinline__ int last(int row) const { return row + offset; }
    __device__ __forceinline__ bool keeps(int key, int last) const {
        return key < sk && key <= last;
    }
};

// A thread's two rows across an output tile: the running max (log2 units), the row sums, the
// last correction 2^(old max - new max); the output tile's first query row and the consumer's
// index, from which row() gives the thread's row 0 where the mask and the store need it (a row
// index kept across the KV loop instead costs the non-causal kernels a division more).
struct Rows {
    float m0, m1, l0, l1, c0, c1;
    int tile_row, consumer;
    __device__ __forceinline__ int row() const {
        const int wtid = threadIdx.x % 128, lane = threadIdx.x % 32;
        return tile_row + consumer * ROWS + wtid / 32 * 16 + lane / 4;
    }
};

// An output tile's start: O cleared, the statistics empty, for consumer `consumer` of the tile
// whose first query row is `tile_row`.
template <int HD>
__device__ __forceinline__ Rows start(float (&o)[HD / 2], int tile_row, int consumer) {
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) o[i] = 0.f;
    return Rows{-INFINITY, -INFINITY, 0.f, 0.f, 0.f, 0.f, tile_row, consumer};
}

// S = Q.K^T (wgmma SS, MMA = the kit's wgmma_m64n{BN}k16): the consumer's ROWS rows of Q (a
// stage of BM rows in boxes of 64 columns, 128-byte swizzled) against a K block (BN rows, boxes
// alike), 16 columns of the head per k step, HD / 16 steps (HD the head dim: D=96 stops in its
// second box's first half); the first step overwrites S.  K's layout: its 64-column parts PS
// bytes apart and, within a part, its 8-row groups GS bytes apart (the parts' rows packed:
// BN * 128 and 1024; decoding's grouped stages interleave them, attention_decode.cuh).
template <int BM, int BN, int HD, void (*MMA)(float (&)[BN / 2], u64, u64, int),
          int PS = BN * 128, int GS = 1024>
__device__ __forceinline__ void qk(float (&s)[BN / 2], u32 q, u32 k, int consumer) {
    const u64 dq = pcwg::smem_desc_sw128(q + consumer * ROWS * 128),
              dk = pcwg::smem_desc_sw128<GS>(k);
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk)
        MMA(s, pcwg::desc_step(dq, (kk / 4) * BM * 128 + (kk % 4) * 32),
            pcwg::desc_step(dk, (kk / 4) * PS + (kk % 4) * 32), kk > 0);
}

// The raw scores' row maxes of a KV block, every key kept (a block before the first masked one:
// no compare) ...
template <int BN>
__device__ __forceinline__ void row_max(const float (&s)[BN / 2], float& x0, float& x1) {
#pragma unroll
    for (int c = 0; c < BN / 8; ++c) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            x0 = fmaxf(x0, s[4 * c + e]);
            x1 = fmaxf(x1, s[4 * c + 2 + e]);
        }
    }
}

// ... or of KV block j after the keys `mask` drops are set to -inf.
template <int BN, class Mask>
__device__ __forceinline__ void masked_row_max(float (&s)[BN / 2], float& x0, float& x1,
                                               const Mask& mask, int j, int row) {
    const int lane = threadIdx.x % 32, q = lane % 4;
    const int lim0 = mask.last(row), lim1 = mask.last(row + 8);
#pragma unroll
    for (int c = 0; c < BN / 8; ++c) {
        const int key = j * BN + c * 8 + 2 * q;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const bool in0 = mask.keeps(key + e, lim0), in1 = mask.keeps(key + e, lim1);
            s[4 * c + e] = in0 ? s[4 * c + e] : -INFINITY;
            s[4 * c + 2 + e] = in1 ? s[4 * c + 2 + e] : -INFINITY;
            x0 = fmaxf(x0, s[4 * c + e]);
            x1 = fmaxf(x1, s[4 * c + 2 + e]);
        }
    }
}

// A KV block's raw max x of a row (narrow: of a column) folded into its running max m, in log2
// units (scale_log2 = scale * log2 e > 0), c the old max's correction, and the max the
// exponentials subtract returned; advance does a thread's two rows.  GUARD (bottom-right
// causal): a row that has seen no key keeps a max of -inf, and 2^(-inf - -inf) would be NaN;
// its exponentials are taken against 0 instead, so P, the row sum and O stay 0.
template <bool GUARD>
__device__ __forceinline__ float advance_one(float& m, float& c, float x, float scale_log2) {
    x = fmaxf(m, x * scale_log2);
    const float z = GUARD && x == -INFINITY ? 0.f : x;
    c = ex2_approx(m - z);
    m = x;
    return z;
}
template <bool GUARD>
__device__ __forceinline__ void advance(Rows& r, float x0, float x1, float scale_log2, float& z0,
                                        float& z1) {
    z0 = advance_one<GUARD>(r.m0, r.c0, x0, scale_log2);
    z1 = advance_one<GUARD>(r.m1, r.c1, x1, scale_log2);
}

// The online softmax of KV block j (FA3's): the mask on the blocks from the plan's first masked
// one (`first_masked`, LoopBounds.first_masked) on, the row max over the quad's four lanes, in
// log2 units (scale_log2 = scale * log2 e > 0), the correction of the old max, P = 2^(S *
// scale_log2 - max) with one FFMA and one MUFU each, the row sums; P packed or kept per `P`.
// GUARD (bottom-right causal): the rows before Sq - Sk see no key, so their max stays -inf and
// 2^(-inf - -inf) would be NaN; their exponentials are taken against 0 instead, so P, the row
// sum and O stay 0 and the finish stores 0 (FlashAttention's output for a row with no key;
// docs/guide/attention.md, "Bottom-right causal").  Top-left and unmasked rows see key 0.
template <int BN, class Elem, PackP P, bool GUARD, class Mask>
__device__ __forceinline__ void softmax(float (&s)[BN / 2], u32 (&pk)[BN / 4], Rows& r,
                                        const Mask& mask, int j, int first_masked,
                                        float scale_log2) {
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) pcwg::fence_operand(s[i]);
    float x0 = -INFINITY, x1 = -INFINITY;  // the block's row max of the raw scores
    if (j >= first_masked)
        masked_row_max<BN>(s, x0, x1, mask, j, r.row());
    else
        row_max<BN>(s, x0, x1);
    x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
    x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
    x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
    x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
    float z0, z1;
    advance<GUARD>(r, x0, x1, scale_log2, z0, z1);
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int c = 0; c < BN / 8; ++c) {
        const float p0 = ex2_approx(fmaf(s[4 * c], scale_log2, -z0));
        const float p1 = ex2_approx(fmaf(s[4 * c + 1], scale_log2, -z0));
        const float p2 = ex2_approx(fmaf(s[4 * c + 2], scale_log2, -z1));
        const float p3 = ex2_approx(fmaf(s[4 * c + 3], scale_log2, -z1));
        s0 += p0 + p1;
        s1 += p2 + p3;
        if constexpr (P == PackP::now) {
            pk[2 * c] = Elem::pack(p0, p1);
            pk[2 * c + 1] = Elem::pack(p2, p3);
        } else {
            s[4 * c] = p0; s[4 * c + 1] = p1;
            s[4 * c + 2] = p2; s[4 * c + 3] = p3;
        }
    }
    r.l0 = r.l0 * r.c0 + s0;
    r.l1 = r.l1 * r.c1 + s1;
}

// O *= the softmax's correction, row by row; under PackP::later, then P_t (fp32 in S's
// registers) packed for PV_t.
template <int HD, int BN, class Elem, PackP P>
__device__ __forceinline__ void rescale(float (&o)[HD / 2], const float (&s)[BN / 2],
                                        u32 (&pk)[BN / 4], const Rows& r) {
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) pcwg::fence_operand(o[i]);
#pragma unroll
    for (int c = 0; c < HD / 8; ++c) {
        o[4 * c] *= r.c0; o[4 * c + 1] *= r.c0;
        o[4 * c + 2] *= r.c1; o[4 * c + 3] *= r.c1;
    }
    if constexpr (P == PackP::later) {
#pragma unroll
        for (int c = 0; c < BN / 8; ++c) {
            pk[2 * c] = Elem::pack(s[4 * c], s[4 * c + 1]);
            pk[2 * c + 1] = Elem::pack(s[4 * c + 2], s[4 * c + 3]);
        }
    }
}

// O += P.V (wgmma RS, MMA = the kit's wgmma_rs_m64n{HD}k16): P from registers, 16 keys per k
// step (four registers of the packed P), V's block MN-major (HD / 64 boxes of BN rows, a k
// step 16 rows = 2048 bytes further).  V's layout as qk's K: its parts PS bytes apart, its
// 8-row groups GS (a k step two groups further).
template <int BN, int HD, void (*MMA)(float (&)[HD / 2], u32, u32, u32, u32, u64),
          int PS = BN * 128, int GS = 1024>
__device__ __forceinline__ void pv(float (&o)[HD / 2], const u32 (&pk)[BN / 4], u32 v) {
    const u64 dv = pcgc::smem_desc_sw128_mn<PS, GS>(v);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
        MMA(o, pk[4 * kk], pk[4 * kk + 1], pk[4 * kk + 2], pk[4 * kk + 3],
            pcwg::desc_step(dv, kk * 2 * GS));
}

// The bytes of O one store writes (pcat::store_row) for rows of COLS columns: 4, a thread's
// own pair of columns; 8, a pair's two neighbours swapped across the quad first (one shuffle per
// pair of column blocks), so a row's 32 bytes of two blocks leave in one full sector per row.
// Measured on an H200 (benchmarks/attention_tiles.py, results/attention_o_store_s23_h200.jsonl),
// 8 over 4: D 128 1.081 / 1.067 causal at S 1k, 1.037 at S 4k, 1.003 causal at 16k; D 64
// 0.989-1.012.  So 8 from 128 columns up, 4 below (a benchmark's probe may set
// PCAT_O_STORE_BYTES).  A 16-byte quad transpose (four shuffles) measured 0.925-1.04 and was
// not kept.
template <int COLS>
__device__ __forceinline__ constexpr int o_store_bytes() {
#ifdef PCAT_O_STORE_BYTES
    return PCAT_O_STORE_BYTES;
#else
    return COLS >= 128 ? 8 : 4;
#endif
}

// One row of an output tile's fragment: the quad's four threads hold its 16-bit pairs, thread
// q columns 8c + 2q, 8c + 2q + 1 of every 8-column block c (`p`, packed), stored at `dst`
// (the row's first column) where `keep`.  BYTES 4: each pair where it lies.  BYTES 8: blocks
// c and c + 1 (c even) exchanged with the quad neighbour q ^ 1, so an even thread holds
// columns 8c + 2q .. + 3 of block c and an odd one 8(c + 1) + 2(q - 1) .. + 3 of block c + 1:
// eight aligned bytes each (every row of a tile starts on a 16-byte boundary: the output's
// strides are multiples of its head dim), half the stores, each row's sector written whole.
// Every thread of the quad takes part in the shuffle whatever `keep` says.
template <int COLS, int BYTES>
__device__ __forceinline__ void store_row(unsigned short* dst, const u32 (&p)[COLS / 8], int q,
                                          bool keep) {
    static_assert(BYTES == 4 || BYTES == 8, "an O store is 4 or 8 bytes");
    if constexpr (BYTES == 4) {
#pragma unroll
        for (int c = 0; c < COLS / 8; ++c)
            if (keep) *reinterpret_cast<u32*>(dst + c * 8 + 2 * q) = p[c];
    } else {
        static_assert(COLS % 16 == 0, "8-byte O stores pair the column blocks");
        const bool odd = q & 1;
#pragma unroll
        for (int c = 0; c < COLS / 8; c += 2) {
            const u32 got = __shfl_xor_sync(0xffffffffu, odd ? p[c] : p[c + 1], 1);
            const uint2 v = odd ? make_uint2(got, p[c + 1]) : make_uint2(p[c], got);
            const int col = odd ? 8 * (c + 1) + 2 * (q - 1) : 8 * c + 2 * q;
            if (keep) *reinterpret_cast<uint2*>(dst + col) = v;
        }
    }
}

// A thread's two rows of an accumulator fragment (`acc`: pairs 4c, 4c + 1 of its first row,
// 4c + 2, 4c + 3 of the row 8 below, columns 8c + 2q, + 1), scaled by s0 and s1, packed to Elem
// and stored by store_row at dst0 and dst8 where keep0 and keep8: the forward's O, the
// backward's dK and dV.
template <int COLS, class Elem, int N>
__device__ __forceinline__ void store_rows(const float (&acc)[N], float s0, float s1,
                                           unsigned short* dst0, unsigned short* dst8, int q,
                                           bool keep0, bool keep8) {
    u32 p0[COLS / 8], p1[COLS / 8];
#pragma unroll
    for (int c = 0; c < COLS / 8; ++c) {
        p0[c] = Elem::pack(acc[4 * c] * s0, acc[4 * c + 1] * s0);
        p1[c] = Elem::pack(acc[4 * c + 2] * s1, acc[4 * c + 3] * s1);
    }
    store_row<COLS, o_store_bytes<COLS>()>(dst0, p0, q, keep0);
    store_row<COLS, o_store_bytes<COLS>()>(dst8, p1, q, keep8);
}

// An output tile's end: O / row sum (the quad's sums added; a row with no key, sum 0, stores 0)
// into `out`, the head's [Sq, HD] rows of Elem `row_stride` elements apart (the output's own
// strides: it takes q's layout), rows past Sq not stored; and, where the call asks for it
// (LSE not null: a gradient is needed), each row's natural log-sum-exp of the scaled scores,
// ln 2 * (max + log2 sum) in the statistics' log2 units, into LSE[bh] ([Sq] fp32, one store by
// the quad's first lane): +inf for a row with no key, so the backward's P = exp(S - LSE) is 0.
// COLS: the head dim stored, where O's HD columns are whole TMA boxes past it (D=96: the last
// 32 are V's zero-filled columns, not stored).
template <int HD, class Elem, int COLS = HD>
__device__ __forceinline__ void finish(float (&o)[HD / 2], Rows& r, unsigned short* out,
                                       long long row_stride, float* LSE, int bh, int sq) {
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) pcwg::fence_operand(o[i]);
    r.l0 += __shfl_xor_sync(0xffffffffu, r.l0, 1);
    r.l0 += __shfl_xor_sync(0xffffffffu, r.l0, 2);
    r.l1 += __shfl_xor_sync(0xffffffffu, r.l1, 1);
    r.l1 += __shfl_xor_sync(0xffffffffu, r.l1, 2);
    const float r0 = r.l0 > 0.f ? 1.f / r.l0 : 0.f, r1 = r.l1 > 0.f ? 1.f / r.l1 : 0.f;
    const int row = r.row(), lane = threadIdx.x % 32, q = lane % 4;
    store_rows<COLS, Elem>(o, r0, r1, out + row * row_stride, out + (row + 8) * row_stride, q,
                           row < sq, row + 8 < sq);
    if (LSE != nullptr && q == 0) {
        constexpr float LN2 = 0.6931471805599453f;
        float* lse = LSE + (size_t)bh * sq;
        if (row < sq) lse[row] = r.l0 > 0.f ? LN2 * (r.m0 + log2f(r.l0)) : INFINITY;
        if (row + 8 < sq) lse[row + 8] = r.l1 > 0.f ? LN2 * (r.m1 + log2f(r.l1)) : INFINITY;
    }
}

}  // namespace pcat
