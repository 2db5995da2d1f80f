// The attention backward's two small kernels around its main one (FlashAttention-3's cut:
// docs/guide/attention.md, "Backward and training"): the preprocess, delta = rowsum(dO * O) in
// fp32 and the main kernel's fp32 dQ accumulator zeroed, and the postprocess, that accumulator
// (which holds dQ itself: the main kernel applied the scale) cast to Q's element type.  Pasted
// after the kit's headers (pch100's and pcgc's element conversions).  Memory-bound: each thread
// moves 16 bytes of 16-bit elements per access (8 of a row), no shared memory, no barrier but
// the warp's shuffles.
#pragma once

namespace pcap {

using pch100::u32;

// The element type of O, dO and dQ: a 16-bit pair as two fp32 values, and two fp32 values as a
// pair (`lo` at the lower address).
struct Bf16 {
    static __device__ __forceinline__ float lo(u32 x) { return pcgc::bf16_to_f32(x & 0xffffu); }
    static __device__ __forceinline__ float hi(u32 x) { return pcgc::bf16_to_f32(x >> 16); }
    static __device__ __forceinline__ u32 pack(float lo, float hi) {
        return pch100::pack_bf16x2(lo, hi);
    }
};
struct Fp16 {
    static __device__ __forceinline__ float lo(u32 x) { return pcgc::f16_to_f32(x & 0xffffu); }
    static __device__ __forceinline__ float hi(u32 x) { return pcgc::f16_to_f32(x >> 16); }
    static __device__ __forceinline__ u32 pack(float lo, float hi) {
        return pcgc::pack_f16x2(lo, hi);
    }
};

// Threads per block of both kernels.
constexpr int THREADS = 256;

// Where row `row` of a [B, H, S, HD] tensor's B * H * S rows starts: the tensor's own strides in
// elements (batch, head, position; its head dim unit-strided, every stride a multiple of 8
// elements and the base 16-byte aligned, so 16-byte accesses: layout.py's rule), `heads` = H.
struct Rows {
    long long sb, sh, ss;
    __device__ __forceinline__ long long at(long long row, int s, int heads) const {
        const long long bh = row / s;
        return bh / heads * sb + bh % heads * sh + row % s * ss;
    }
};

// Preprocess.  Row r of the [rows, HD] matrices O and dO (rows = B * H * Sq, at their own
// strides `o_at` and `do_at`) is read by HD / 8 consecutive lanes, 8 elements each; their fp32
// products are summed over the lanes (shuffles within the row's lanes) and the row's first
// lane stores delta at the row's padded place (bh * sq_rows + i: each head's rows padded to
// sq_rows, so the main kernel's TMA boxes start on 16 bytes) and copies the forward's LSE there too.  Then the whole grid zeroes
// dq_accum's `zero4` float4s (grid-stride), which the main kernel adds dQ into, and writes the
// pad rows: LSE +inf (P = 0 there) and delta 0.
template <int HD, class Elem>
__device__ __forceinline__ void preprocess(const unsigned short* __restrict__ O,
                                           const unsigned short* __restrict__ dO,
                                           const float* __restrict__ lse,
                                           float* __restrict__ lse_pad,
                                           float* __restrict__ delta,
                                           float* __restrict__ dq_accum, long long rows,
                                           int sq, int sq_rows, long long zero4, int heads,
                                           Rows o_at, Rows do_at) {
    constexpr int LANES = HD / 8;  // lanes per row: a power of two up to 32 (HD 64: 8; 128: 16)
    static_assert(LANES >= 1 && LANES <= 32 && (LANES & (LANES - 1)) == 0, "head dim");
    const long long t = (long long)blockIdx.x * THREADS + threadIdx.x;
    const long long row = t / LANES;
    const int part = threadIdx.x % LANES;
    float acc = 0.f;
    if (row < rows) {
        const uint4 o = *reinterpret_cast<const uint4*>(O + o_at.at(row, sq, heads) + part * 8);
        const uint4 g =
            *reinterpret_cast<const uint4*>(dO + do_at.at(row, sq, heads) + part * 8);
        const u32 ow[4] = {o.x, o.y, o.z, o.w}, gw[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
        for (int i = 0; i < 4; ++i)
            acc += Elem::lo(ow[i]) * Elem::lo(gw[i]) + Elem::hi(ow[i]) * Elem::hi(gw[i]);
    }
#pragma unroll
    for (int step = LANES / 2; step > 0; step /= 2)
        acc += __shfl_xor_sync(0xffffffffu, acc, step);
    if (row < rows && part == 0) {
        const long long at = row / sq * sq_rows + row % sq;
        delta[at] = acc;
        lse_pad[at] = lse[row];
    }
    const long long stride = (long long)gridDim.x * THREADS;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    for (long long i = t; i < zero4; i += stride)
        reinterpret_cast<float4*>(dq_accum)[i] = zero;
    const int pad = sq_rows - sq;
    for (long long i = t; i < rows / sq * pad; i += stride) {
        const long long at = i / pad * sq_rows + sq + i % pad;
        delta[at] = 0.f;
        lse_pad[at] = __int_as_float(0x7f800000);  // +inf
    }
}

// Postprocess.  dQ[bh, i, :] = dq_accum[bh, i, :] for i < Sq (dq_accum has `sq_rows` >= Sq rows
// per (batch, head): the main kernel's row blocks, in dq_layout.cuh's order), rounded to
// nearest; dQ at its own strides `dq_at` (q's layout).  A thread takes 8 columns of one row:
// four lanes' column pairs, 32 consecutive bytes of the accumulator (two 16-byte loads) and
// 16 of dQ (one store).  A warp takes 8 rows (a lane group's, each lane's `row8`) by 4 column
// blocks: it reads four whole 256-byte runs and writes 64 consecutive bytes of each row.  Row by
// row (one thread a row's 8 columns, a warp two rows), its loads were 32 sectors 1 KB apart at
// D 128 and the kernel moved 2.1-2.5 TB/s; in the accumulator's order (contiguous reads, each
// row's 16-byte pieces written by 16 warps) 1.85 at D 64; a copy moves 4.0
// (benchmarks/attention_bwd_parts.py, session 19).
template <int HD, class Elem>
__device__ __forceinline__ void postprocess(const float* __restrict__ dq_accum,
                                            unsigned short* __restrict__ dQ, long long rows,
                                            int sq, int sq_rows, int heads, Rows dq_at) {
    constexpr int PARTS = HD / 64, PER_BLOCK = pcdq::ROWS * HD / 8;  // 8-column pieces
    const long long per_head = (long long)sq_rows * (HD / 8);
    const long long t = (long long)blockIdx.x * THREADS + threadIdx.x;
    if (t >= rows / sq * per_head) return;
    const long long bh = t / per_head, piece = t % per_head;
    const int s = (int)(piece % PER_BLOCK), group = s / 64, g = s % 64;
    const int row8 = g % 8, c = g / 8;  // 8 rows (lanes 4 row8 ..) by the 8 column blocks
    const int part = group % PARTS, half = group / PARTS % 2, warp = group / PARTS / 2;
    const long long i = piece / PER_BLOCK * pcdq::ROWS + warp * 16 + half * 8 + row8;
    if (i >= sq) return;
    const float4* at = reinterpret_cast<const float4*>(
        dq_accum + bh * sq_rows * HD + pcdq::block_start<HD>(piece / PER_BLOCK)
        + pcdq::fragment_offset<HD>(warp, row8 * 4, c, half, part));
    const float4 a = at[0], b = at[1];
    *reinterpret_cast<uint4*>(dQ + dq_at.at(bh * sq + i, sq, heads) + part * 64 + c * 8) =
        make_uint4(Elem::pack(a.x, a.y), Elem::pack(a.z, a.w), Elem::pack(b.x, b.y),
                   Elem::pack(b.z, b.w));
}

}  // namespace pcap
