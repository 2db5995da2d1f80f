// Decoding's device code (-p decode; decode_tiles.py says what the kernel computes): the page
// gather of a KV block, the mask of rows that pack a GQA group's heads with a few tokens, the
// clearing of V's rows past the sequence's end, the store of rows to their (token, head), and
// split-KV's partials and their combine.  Pasted after attention.cuh, only into the decode
// kernels.
//
// A tile's row r (0..63) is token t0 + (r >> HB_SHIFT) of query head h0 + (r & (HB - 1)): HB
// heads of one GQA group per token, token-major, as the Q map's box (64 columns, HB heads, TB
// tokens) lands them.
#pragma once

namespace pcat {

// Causal decode: row r sees keys up to sk - sq + its token (the diagonal bottom-right); `offset`
// is sk - sq + t0.  Not causal, the kernels take KeyTail.
struct DecodeMask {
    int sk, offset, hb_shift;
    __device__ __forceinline__ int last(int row) const { return offset + (row >> hb_shift); }
    __device__ __forceinline__ bool keeps(int key, int last) const {
        return key < sk && key <= last;
    }
};

// Where a K or V stage's rows lie (the kernel's -p kv_grouped): row r of 64-column part d at
// (r / 8) * GS + d * PS + (r % 8) * 128.  Parts packed (not GROUPED): each part's BN rows
// together (PS = BN * 128, GS = 1024), one copy a part a page chunk, as the forward's stages.
// GROUPED: each 8-row group holds its rows' HD / 64 parts side by side (PS = 1024, GS = parts
// x 1024), so one copy of a rank-5 map brings every part of a page chunk.  Why: the producer is
// one thread, and ptxas wraps each copy in a loop that moves its operands to uniform registers
// (about 18 instructions a copy); with pages of 16 a block is 32 copies, and the thread's issue
// bounded the stream (pages of 16 read 0.91x the contiguous cache, 73% of DRAM's peak under
// Nsight's base clock against 93%).  Grouped, it is 16.  wgmma reads either: the descriptors
// take GS as the stride between 8-row groups, PS between parts (qk, pv).
template <int BN, int HD, bool GROUPED>
struct KvLayout {
    static constexpr int PARTS = HD / 64;
    static constexpr int PS = GROUPED ? 1024 : BN * 128;
    static constexpr int GS = GROUPED ? PARTS * 1024 : 1024;
};

// A 5D tile of `map` at (c0 innermost, .., c4) into shared memory; its bytes complete on `bar`.
__device__ __forceinline__ void tma_load_5d(u32 dst, const pcwg::TensorMap* map, u32 bar, int c0,
                                            int c1, int c2, int c3, int c4) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n"
        :: "r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2),
           "r"(c3), "r"(c4) : "memory");
}

// The page and row of each copy of one KV block (its table entries, read ahead): `block` the
// block they are for, `pg[c]` copy c's page (-1: wholly past the end, no entry read, a page
// outside the map) and `at[c]` its first row in that page.
template <int CHUNKS>
struct Pages {
    int block;
    int pg[CHUNKS];
    int at[CHUNKS];
};

// Read block `block`'s CHUNKS entries into `p` (the loads only issued: their registers are
// waited for where a copy first uses them), the issuing warp `pw`'s own chunks only (chunk c
// is warp c % ISSUERS's: decode_kv_load).  One division per block: the copies step through
// the pages R rows at a time (R <= page, so a step crosses at most one page's end).  A
// contiguous cache (`table` null) reads nothing: the page is the sequence.
template <int BN, int CHUNKS, int ISSUERS = 1>
__device__ __forceinline__ void decode_pages(Pages<CHUNKS>& p, int b, int block, int sk,
                                             const int* __restrict__ table,
                                             long long table_stride, int page, int pw = 0) {
    constexpr int R = BN / CHUNKS;
    const int key0 = block * BN;
    p.block = block;
    if (table == nullptr) {
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
            p.pg[c] = key0 + c * R < sk ? b : -1;
            p.at[c] = key0 + c * R;
        }
        return;
    }
    const int* __restrict__ row = table + (long long)b * table_stride;
    int entry = key0 / page, off = key0 - entry * page;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
        p.pg[c] = key0 + c * R < sk && c % ISSUERS == pw ? __ldg(row + entry) : -1;
        p.at[c] = off;
        off += R;
        if (off >= page) {
            off -= page;
            ++entry;
        }
    }
}

// KV block `block` of sequence b at KV head h into a ring stage: CHUNKS copies of R = BN /
// CHUNKS rows per 64-column box, or, GROUPED (KvLayout), one copy of every part's R rows
// through the rank-5 map (64 columns, 8 rows, the row's Hkv x HD / 64 parts, 8-row groups,
// pages) at (0, 0, h * parts, row / 8, page).  The chunks are the kernel's page chunks,
// compiled in: a fixed, unrolled count keeps the single issuing thread's instructions per
// block few.  Each copy reads the page its table entry names (a contiguous cache: the
// sequence's own rows).  A copy wholly past the end takes page -1, outside the map: TMA writes
// zeros and counts the bytes, so the stage's transaction count is the block's whatever the
// length.  The entries come from `p` when it holds this block's (read ahead), else they are
// read now; with `ahead` (V's copy, the block's last) the next block's are read after the
// copies, so their latency passes while the producer waits for the next free stage.  Whatever
// order the copies come in, each uses its own block's entries (the check of p.block), so
// reading ahead is never wrong, only early.
// ISSUERS (the kernel's -p kv_issuers) producer warps share the copies: warp pw's first lane
// issues chunk c where c % ISSUERS == pw, after its own wait for the stage to be free (the
// plan's wait, which every issuer runs); warp 0 alone expects the stage's bytes, so the full
// barrier still takes one arrival, and a copy that lands before that arrival only runs its
// transaction count below zero, which no phase completes on.  Why: with pages of 16 a block is
// 16 copies of 4 KB, and one issuing thread bounded the stream (two CTAs a SM, two issuers,
// read pages of 16 at 0.93-0.98 of the contiguous cache where one read 0.81-0.94).
template <int BN, int HD, int CHUNKS, bool GROUPED, int ISSUERS = 1>
__device__ __forceinline__ void decode_kv_load(u32 dst, const pcwg::TensorMap* map, u32 bar,
                                               int h, int b, int block, int sk,
                                               Pages<CHUNKS>& p, bool ahead,
                                               const int* __restrict__ table,
                                               long long table_stride, int page, int pw = 0) {
    constexpr int R = BN / CHUNKS;
    if (p.block != block)
        decode_pages<BN, CHUNKS, ISSUERS>(p, b, block, sk, table, table_stride, page, pw);
    using L = KvLayout<BN, HD, GROUPED>;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
        if (c % ISSUERS != pw) continue;  // another issuing warp's chunk
        if constexpr (GROUPED) {
            tma_load_5d(dst + c * (R / 8) * L::GS, map, bar, 0, 0, h * L::PARTS, p.at[c] / 8,
                        p.pg[c]);
        } else {
#pragma unroll
            for (int d = 0; d < L::PARTS; ++d)
                tma_load_4d(dst + d * L::PS + c * R * 128, map, bar, d * 64, h, p.at[c],
                            p.pg[c]);
        }
    }
    if (ahead)
        decode_pages<BN, CHUNKS, ISSUERS>(p, b, block + 1, sk, table, table_stride, page, pw);
}

// On the block holding the sequence's end, its V rows past the end are the page's own bits (any,
// NaN among them: 0 x NaN is NaN), so PV clears them first: whole 128-byte rows (whatever the
// swizzle), every thread its fixed 16-byte units, each store predicated in PTX, then made
// visible to the async proxy the wgmma reads by, and the warp group meets (named barrier BAR,
// the consumer's 128 threads) before any thread's wgmma reads the stage.  Every block runs the
// fence and the barrier, and no branch or loop: control flow between the plan's wgmma.fence and
// the wgmma makes ptxas re-fence the accumulators (C7519).  The plan holds the stage for this
// consumer alone from its full wait to its release, so the writes race no copy and no other
// reader.
template <int BN, int HD, bool GROUPED, int BAR>
__device__ __forceinline__ void decode_clear_tail(u32 v, int block, int sk) {
    using L = KvLayout<BN, HD, GROUPED>;
    const int from = max(0, min(BN, sk - block * BN)) * 8;  // the first 16-byte unit past the end
    const int wtid = threadIdx.x % 128;
#pragma unroll
    for (int d = 0; d < L::PARTS; ++d)
#pragma unroll
        for (int k = 0; k < BN * 8 / 128; ++k) {  // 16-byte units, 8 a row: unit u of row u / 8
            const int u = k * 128 + wtid, row = u / 8;
            const u32 at = GROUPED ? (row / 8) * L::GS + d * L::PS + (row % 8) * 128 + u % 8 * 16
                                   : d * L::PS + u * 16;  // the parts' rows packed
            asm volatile("{\n.reg .pred p;\nsetp.ge.s32 p, %1, %2;\n"
                         "@p st.shared.v4.u32 [%0], {%3, %3, %3, %3};\n}\n"
                         :: "r"(v + at), "r"(u), "r"(from), "r"(0u) : "memory");
        }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("bar.sync %0, 128;\n" :: "n"(BAR) : "memory");
}

// O += P.V for KV block `block`, V's rows past the end cleared first (decode_clear_tail).
template <int BN, int HD, bool GROUPED, int BAR,
          void (*MMA)(float (&)[HD / 2], u32, u32, u32, u32, u64)>
__device__ __forceinline__ void decode_pv(float (&o)[HD / 2], const u32 (&pk)[BN / 4], u32 v,
                                          int block, int sk) {
    using L = KvLayout<BN, HD, GROUPED>;
    decode_clear_tail<BN, HD, GROUPED, BAR>(v, block, sk);
    pv<BN, HD, MMA, L::PS, L::GS>(o, pk, v);
}

// The thread's place in wgmma's m64 fragment: its row 0 (row 1 is 8 below) and its quad lane
// (its columns 8 c + 2 q, + 1), as attention.cuh's Rows reads them.
struct Frag {
    int r0, q;
};
__device__ __forceinline__ Frag frag() {
    const int lane = threadIdx.x % 32;
    return Frag{(int)(threadIdx.x % 128) / 32 * 16 + lane / 4, lane % 4};
}

// Where a tile's rows go: the thread's row 0 and row 1 (r and r + 8), each stored when its
// token is below sq and its head within the group.
struct DecodeRows {
    int t0, hb_shift, heads, sq;  // heads: the group's heads this chunk holds (<= HB)
    __device__ __forceinline__ bool stored(int r) const {
        return t0 + (r >> hb_shift) < sq && (r & ((1 << hb_shift) - 1)) < heads;
    }
    __device__ __forceinline__ int token(int r) const { return t0 + (r >> hb_shift); }
    __device__ __forceinline__ int head(int r) const { return r & ((1 << hb_shift) - 1); }
};

// The thread's two rows' final values (already divided by the row sums) and log-sum-exps to
// O[b, token, h0 + head, :] (O's own strides: q's layout) and, where asked, LSE[b, h, token]
// ([B, Hq, Sq] fp32).
template <int HD, class Elem>
__device__ __forceinline__ void decode_store(const float (&o)[HD / 2], const float (&scale)[2],
                                             const float (&lse)[2], const DecodeRows& dr,
                                             unsigned short* out, long long o_ss, long long o_sh,
                                             float* LSE, int sq) {
    const Frag f = frag();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = f.r0 + 8 * half;
        if (!dr.stored(r)) continue;
        unsigned short* row = out + dr.token(r) * o_ss + dr.head(r) * o_sh;
#pragma unroll
        for (int c = 0; c < HD / 8; ++c)
            *reinterpret_cast<u32*>(row + c * 8 + 2 * f.q) =
                Elem::pack(o[4 * c + 2 * half] * scale[half], o[4 * c + 2 * half + 1] * scale[half]);
        if (LSE != nullptr && f.q == 0)
            LSE[(long long)dr.head(r) * sq + dr.token(r)] = lse[half];
    }
}

// The quad's row sums added; each row's 1 / sum (0 for a row with no key) and natural
// log-sum-exp (+inf for a row with no key, as the forward's finish).
__device__ __forceinline__ void decode_stats(Rows& r, float (&inv)[2], float (&lse)[2]) {
    constexpr float LN2 = 0.6931471805599453f;
    r.l0 += __shfl_xor_sync(0xffffffffu, r.l0, 1);
    r.l0 += __shfl_xor_sync(0xffffffffu, r.l0, 2);
    r.l1 += __shfl_xor_sync(0xffffffffu, r.l1, 1);
    r.l1 += __shfl_xor_sync(0xffffffffu, r.l1, 2);
    inv[0] = r.l0 > 0.f ? 1.f / r.l0 : 0.f;
    inv[1] = r.l1 > 0.f ? 1.f / r.l1 : 0.f;
    lse[0] = r.l0 > 0.f ? LN2 * (r.m0 + log2f(r.l0)) : INFINITY;
    lse[1] = r.l1 > 0.f ? LN2 * (r.m1 + log2f(r.l1)) : INFINITY;
}

// An unsplit tile's end: O / row sum into its rows.
template <int HD, class Elem>
__device__ __forceinline__ void decode_finish(float (&o)[HD / 2], Rows& r, const DecodeRows& dr,
                                              unsigned short* out, long long o_ss, long long o_sh,
                                              float* LSE, int sq) {
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) pcwg::fence_operand(o[i]);
    float inv[2], lse[2];
    decode_stats(r, inv, lse);
    decode_store<HD, Elem>(o, inv, lse, dr, out, o_ss, o_sh, LSE, sq);
}

// Split-KV's workspace slot of one (output tile, split): the tile's ROWS rows of HD fp32 (the
// split's O, its row sums divided out) and their log-sum-exps after them (-inf: the split saw
// no key).
template <int HD, int ROWS = 64>
constexpr int DECODE_SLOT = ROWS * (HD + 1);

// This split's partial out to its slot: only the rows that are stored (the combine reads
// those alone), each thread its own fragment's columns.
template <int HD>
__device__ __forceinline__ void decode_slice_store(float (&o)[HD / 2], Rows& r,
                                                   const DecodeRows& dr, float* slot) {
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) pcwg::fence_operand(o[i]);
    float inv[2], lse[2];
    decode_stats(r, inv, lse);
    const Frag f = frag();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = f.r0 + 8 * half;
        if (!dr.stored(row)) continue;
#pragma unroll
        for (int c = 0; c < HD / 8; ++c)
            __stcg(reinterpret_cast<float2*>(slot + row * HD + c * 8 + 2 * f.q),
                   make_float2(o[4 * c + 2 * half] * inv[half],
                               o[4 * c + 2 * half + 1] * inv[half]));
        if (f.q == 0) __stcg(slot + 64 * HD + row, inv[half] > 0.f ? lse[half] : -INFINITY);
    }
}

// The last split's combine: O = sum_s e^(lse_s - M) O_s / sum_s e^(lse_s - M) with M the largest
// lse, and the log-sum-exp M + ln(sum), online over the splits in split order 0, 1, ... (the
// same bits whichever split arrived last); a row no split saw (M = -inf) stores 0 and +inf.
// Its latency is the kernel's tail (the last split's CTA runs it after everything else), so it
// reads as wide as it can: warp w takes rows w, w + 4, ... (stored ones only: a row's check is
// the warp's), each lane 4 columns (a float4) of the row, so a split's row is one coalesced
// 512-byte read (D 128); one pass, its loads unrolled 8 splits deep, none waiting on another.
// (The first cut ran two passes over the splits, 16 threads each a row's quarter of float2s,
// each split's loads behind the last one's use: unrolling its loops alone took 1.6 us off a
// 17 us step at batch 1 x 8k.)
template <int HD, class Elem, int ROWS = 64>
__device__ __forceinline__ void decode_combine(const float* slots, int splits,
                                               const DecodeRows& dr, unsigned short* out,
                                               long long o_ss, long long o_sh, float* LSE,
                                               int sq) {
    constexpr int CH = (HD / 4 + 31) / 32;  // a lane's float4 chunks of a row
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    for (int row = warp; row < ROWS && dr.token(row) < sq; row += 4) {
        if (!dr.stored(row)) continue;
        float m = -INFINITY, sum = 0.f;
        float4 o[CH];
#pragma unroll
        for (int k = 0; k < CH; ++k) o[k] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
        for (int s = 0; s < splits; ++s) {
            const float* slot = slots + (long long)s * DECODE_SLOT<HD, ROWS>;
            const float l = __ldcg(slot + ROWS * HD + row);
            float4 x[CH];
#pragma unroll
            for (int k = 0; k < CH; ++k)
                x[k] = lane + 32 * k < HD / 4
                           ? __ldcg(reinterpret_cast<const float4*>(slot + row * HD) + lane
                                    + 32 * k)
                           : make_float4(0.f, 0.f, 0.f, 0.f);
            // selects, no branch (a branch would hold each split's loads behind its own lse):
            // a split that saw no key of this row (lse -inf, its slot 0) weighs 0
            const float mn = fmaxf(m, l);
            const float a = m == -INFINITY ? 0.f : __expf(m - mn);
            const float w = l == -INFINITY ? 0.f : __expf(l - mn);
            sum = sum * a + w;
            m = mn;
#pragma unroll
            for (int k = 0; k < CH; ++k) {
                o[k].x = o[k].x * a + w * x[k].x;
                o[k].y = o[k].y * a + w * x[k].y;
                o[k].z = o[k].z * a + w * x[k].z;
                o[k].w = o[k].w * a + w * x[k].w;
            }
        }
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        unsigned short* const dst = out + dr.token(row) * o_ss + dr.head(row) * o_sh;
#pragma unroll
        for (int k = 0; k < CH; ++k)
            if (lane + 32 * k < HD / 4)
                *reinterpret_cast<uint2*>(dst + 4 * (lane + 32 * k)) =
                    make_uint2(Elem::pack(o[k].x * inv, o[k].y * inv),
                               Elem::pack(o[k].z * inv, o[k].w * inv));
        if (LSE != nullptr && lane == 0)
            LSE[(long long)dr.head(row) * sq + dr.token(row)] =
                sum > 0.f ? m + __logf(sum) : INFINITY;
    }
}

// ---- Narrow tiles (-p block_m=8 or 16): S^T = K.Q^T and O^T += V^T.P^T -----------------------
// At one token and a GQA group of 4 (a decode step's usual query), 4 of a 64-row tile's rows are
// queries and 60 padding, which the wgmmas and the softmax compute all the same; with a split
// of a few KV blocks a CTA, that math is on the step's path (batch 1 without the consumer's
// math ran 1.03-1.17x cuDNN against 0.87-0.97, attention_decode_math_s21_h200.jsonl).  A narrow
// tile of N = 8 or 16 query rows makes the keys wgmma's M and the queries its N: S^T = K.Q^T
// (a 64-key half of the K stage as A, Q's N rows as B, both K-major where they lie), O^T +=
// V^T.P^T (V's stage read MN-major as A, P^T written to shared memory as B): N / 64 of the MMA
// work and N scores a thread.  A column (query row) spans the warp group: its max meets through
// shared memory once a block (Narrow::xch, a named barrier), its sum once a tile, at the finish.
// Thread (warp w, lane) holds keys h * 64 + w * 16 + lane / 4 (+ 8) of S^T (head-dim rows alike
// of O^T) at its N / 4 columns (Cols).

// What a narrow consumer keeps in shared memory beside the rings: P^T, the B operand of O^T's
// wgmma (N rows of a block's keys in 64-key parts of N x 128 bytes, 128-byte swizzled), and the
// column exchange.  Blocks alternate P^T buffers 0 and 1 and exchange areas 0 and 1, tiles'
// finishes areas 2 and 3, so a buffer or area is written again only after a barrier that every
// reader of its last values passed.  P^T needs the two: a warp's wait for the last PV retires
// only its own share of the wgmma (the rings count an arrival a warp for that reason), so
// another warp's share may still read the buffer while this warp writes the next block's.
template <int BN, int N>
struct Narrow {
    alignas(1024) unsigned short p[2][BN * N];
    float xch[4][4][N];
};

// A narrow tile's columns as thread (lane q = lane % 4) holds them: its column j (0 .. NC) is
// the tile's column 8 (j / 2) + 2 q + j % 2, in register 4 (j / 2) + 2 half + j % 2 of row half
// `half` of an m64nN fragment; each column's running max (log2 units) and last correction, the
// same in every thread, and the thread's own keys' share of its sum until the finish adds them.
template <int N>
struct Cols {
    static_assert(N % 8 == 0, "wgmma's N: whole 8-column groups");
    static constexpr int NC = N / 4;
    float m[NC], l[NC], c[NC];
    static __device__ __forceinline__ int col(int j, int q) { return 8 * (j / 2) + 2 * q + j % 2; }
    static __device__ __forceinline__ int reg(int j, int half) {
        return 4 * (j / 2) + 2 * half + j % 2;
    }
};

// A narrow tile's start: O^T cleared, the statistics empty.
template <int MB, int N>
__device__ __forceinline__ Cols<N> start_t(float (&o)[MB][N / 2]) {
#pragma unroll
    for (int m = 0; m < MB; ++m)
#pragma unroll
        for (int i = 0; i < N / 2; ++i) o[m][i] = 0.f;
    Cols<N> r;
#pragma unroll
    for (int j = 0; j < Cols<N>::NC; ++j) {
        r.m[j] = -INFINITY;
        r.l[j] = r.c[j] = 0.f;
    }
    return r;
}

// S^T = K.Q^T: each 64-key half h of the K stage (8 of its 8-row groups, GS apart) as A against
// the tile's N query rows as B (Q's stage: 64-column parts of N rows, N x 128 bytes apart), both
// K-major, HD / 16 k steps; the first overwrites S^T.
template <int BN, int HD, int N, void (*MMA)(float (&)[N / 2], u64, u64, int), int PS, int GS>
__device__ __forceinline__ void qk_t(float (&s)[BN / 64][N / 2], u32 q, u32 k) {
    const u64 dq = pcwg::smem_desc_sw128(q);
#pragma unroll
    for (int h = 0; h < BN / 64; ++h) {
        const u64 dk = pcwg::smem_desc_sw128<GS>(k + h * 8 * GS);
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk)
            MMA(s[h], pcwg::desc_step(dk, (kk / 4) * PS + (kk % 4) * 32),
                pcwg::desc_step(dq, (kk / 4) * N * 128 + (kk % 4) * 32), kk > 0);
    }
}

// The thread's per-column values `x` met over the warp group: written by the quad's lanes to
// exchange area `x_area` (a float2 a column pair), the named barrier BAR, then every warp's read
// back in warp order and folded by `op` (max or sum: each thread folds the same four).
template <int N, int BAR, class Op>
__device__ __forceinline__ void meet(float (&x)[N / 4], float (&area)[4][N], Op op) {
    const int w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32, q = lane % 4;
    if (lane < 4)
#pragma unroll
        for (int jj = 0; jj < N / 8; ++jj)
            *reinterpret_cast<float2*>(&area[w][8 * jj + 2 * q]) =
                make_float2(x[2 * jj], x[2 * jj + 1]);
    asm volatile("bar.sync %0, 128;\n" :: "n"(BAR) : "memory");
#pragma unroll
    for (int j = 0; j < N / 4; ++j) x[j] = op.first;
#pragma unroll
    for (int v = 0; v < 4; ++v)
#pragma unroll
        for (int jj = 0; jj < N / 8; ++jj) {
            const float2 y = *reinterpret_cast<const float2*>(&area[v][8 * jj + 2 * q]);
            x[2 * jj] = op(x[2 * jj], y.x);
            x[2 * jj + 1] = op(x[2 * jj + 1], y.y);
        }
}
struct MaxOp {
    float first = -INFINITY;
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
    float first = 0.f;
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// The online softmax of KV block j on S^T (softmax's, per column): the mask from the plan's first
// masked block on (a column's token picks its last key), the thread's column maxes over its
// keys, the warp's (lanes of one q), the warp group's (meet, exchange area j % 2); P = 2^(S *
// scale_log2 - max) left in fp32 in S^T's registers (rescale_t writes it out), the thread's
// share of the sums.
template <int BN, int N, bool GUARD, int BAR, class Mask>
__device__ __forceinline__ void softmax_t(float (&s)[BN / 64][N / 2], Cols<N>& r,
                                          const Mask& mask, int j, int first_masked,
                                          float scale_log2, Narrow<BN, N>& nw) {
    using C = Cols<N>;
    const int w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32, q = lane % 4;
#pragma unroll
    for (int h = 0; h < BN / 64; ++h)
#pragma unroll
        for (int i = 0; i < N / 2; ++i) pcwg::fence_operand(s[h][i]);
    if (j >= first_masked) {
        int lim[C::NC];
#pragma unroll
        for (int c = 0; c < C::NC; ++c) lim[c] = mask.last(C::col(c, q));
#pragma unroll
        for (int h = 0; h < BN / 64; ++h)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int key = j * BN + h * 64 + w * 16 + lane / 4 + 8 * half;
#pragma unroll
                for (int c = 0; c < C::NC; ++c) {
                    float& v = s[h][C::reg(c, half)];
                    v = mask.keeps(key, lim[c]) ? v : -INFINITY;
                }
            }
    }
    float x[C::NC];  // the block's column maxes of the raw scores
#pragma unroll
    for (int c = 0; c < C::NC; ++c) x[c] = -INFINITY;
#pragma unroll
    for (int h = 0; h < BN / 64; ++h)
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
            for (int c = 0; c < C::NC; ++c) x[c] = fmaxf(x[c], s[h][C::reg(c, half)]);
#pragma unroll
    for (int d = 4; d < 32; d *= 2)
#pragma unroll
        for (int c = 0; c < C::NC; ++c) x[c] = fmaxf(x[c], __shfl_xor_sync(0xffffffffu, x[c], d));
    meet<N, BAR>(x, nw.xch[j & 1], MaxOp{});
    float z[C::NC], sum[C::NC];
#pragma unroll
    for (int c = 0; c < C::NC; ++c) {
        z[c] = advance_one<GUARD>(r.m[c], r.c[c], x[c], scale_log2);
        sum[c] = 0.f;
    }
#pragma unroll
    for (int h = 0; h < BN / 64; ++h)
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
            for (int c = 0; c < C::NC; ++c) {
                float& v = s[h][C::reg(c, half)];
                v = ex2_approx(fmaf(v, scale_log2, -z[c]));
                sum[c] += v;
            }
#pragma unroll
    for (int c = 0; c < C::NC; ++c) r.l[c] = r.l[c] * r.c[c] + sum[c];
}

// O^T *= the softmax's correction, column by column, then block j's P^T (fp32 in S^T's
// registers) to its buffer (j % 2) for PV: column n's key k of part h at h * N * 128 + n * 128,
// its 16-byte unit k % 64 / 8 swizzled by n % 8 (128-byte swizzle; 8-row atoms 1024 apart).
template <int HD, int BN, int N, class Elem>
__device__ __forceinline__ void rescale_t(float (&o)[HD / 64][N / 2],
                                          const float (&s)[BN / 64][N / 2], Narrow<BN, N>& nw,
                                          const Cols<N>& r, int j) {
    using C = Cols<N>;
    const int w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32, q = lane % 4;
#pragma unroll
    for (int m = 0; m < HD / 64; ++m) {
#pragma unroll
        for (int i = 0; i < N / 2; ++i) pcwg::fence_operand(o[m][i]);
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
            for (int c = 0; c < C::NC; ++c) o[m][C::reg(c, half)] *= r.c[c];
    }
    const u32 p = pch100::smem_addr(nw.p[j & 1]);
#pragma unroll
    for (int h = 0; h < BN / 64; ++h)
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
            for (int c = 0; c < C::NC; ++c) {
                const int k = w * 16 + lane / 4 + 8 * half, n = C::col(c, q);
                const u32 at = p + h * N * 128 + n * 128 + ((k / 8) ^ (n % 8)) * 16 + k % 8 * 2;
                asm volatile("st.shared.u16 [%0], %1;\n"
                             :: "r"(at), "h"(Elem::one(s[h][C::reg(c, half)])) : "memory");
            }
}

// O^T += V^T.P^T for KV block `block`: V's rows past the end cleared, P^T's and the clearing's
// writes fenced to the async proxy and the warp group met (decode_clear_tail), then per 64-row
// part m of the head dim V's stage as A, MN-major (wgmma's transpose), against P^T as B,
// K-major, 16 keys a k step.
template <int BN, int HD, int N, bool GROUPED, int BAR, void (*MMA)(float (&)[N / 2], u64, u64)>
__device__ __forceinline__ void decode_pv_t(float (&o)[HD / 64][N / 2], const Narrow<BN, N>& nw,
                                            u32 v, int block, int sk) {
    using L = KvLayout<BN, HD, GROUPED>;
    decode_clear_tail<BN, HD, GROUPED, BAR>(v, block, sk);
    const u64 dp = pcwg::smem_desc_sw128(pch100::smem_addr(nw.p[block & 1]));
#pragma unroll
    for (int m = 0; m < HD / 64; ++m) {
        const u64 dv = pcgc::smem_desc_sw128_mn<L::PS, L::GS>(v + m * L::PS);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
            MMA(o[m], pcwg::desc_step(dv, kk * 2 * L::GS),
                pcwg::desc_step(dp, (kk / 4) * N * 128 + (kk % 4) * 32));
    }
}

// A narrow tile's end: O^T fenced, each column's sum (the threads' shares added: the warp's
// lanes of one q, then the warp group's through exchange area 2 + tile % 2, tile the CTA's tile
// count), then each stored column n's head-dim row d's value (O^T / the sum; 0 for a column with
// no key) to `value(n, d, x)` (the thread its head-dim rows of its columns) and its natural
// log-sum-exp (+inf for a column with no key) to `stats(n, lse, 1 / sum)` (one thread a column).
template <int BN, int HD, int N, int BAR, class Value, class Stats>
__device__ __forceinline__ void narrow_out(float (&o)[HD / 64][N / 2], Cols<N>& r,
                                           const DecodeRows& dr, Narrow<BN, N>& nw, int tile,
                                           Value value, Stats stats) {
    using C = Cols<N>;
    constexpr float LN2 = 0.6931471805599453f;
    const int w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32, q = lane % 4;
#pragma unroll
    for (int m = 0; m < HD / 64; ++m)
#pragma unroll
        for (int i = 0; i < N / 2; ++i) pcwg::fence_operand(o[m][i]);
#pragma unroll
    for (int d = 4; d < 32; d *= 2)
#pragma unroll
        for (int c = 0; c < C::NC; ++c) r.l[c] += __shfl_xor_sync(0xffffffffu, r.l[c], d);
    meet<N, BAR>(r.l, nw.xch[2 + (tile & 1)], SumOp{});
#pragma unroll
    for (int c = 0; c < C::NC; ++c) {
        const int n = C::col(c, q);
        if (!dr.stored(n)) continue;
        const float inv = r.l[c] > 0.f ? 1.f / r.l[c] : 0.f;
#pragma unroll
        for (int m = 0; m < HD / 64; ++m)
#pragma unroll
            for (int half = 0; half < 2; ++half)
                value(n, m * 64 + w * 16 + lane / 4 + 8 * half, o[m][C::reg(c, half)] * inv);
        if (w == 0 && lane < 4)
            stats(n, r.l[c] > 0.f ? LN2 * (r.m[c] + log2f(r.l[c])) : INFINITY, inv);
    }
}

// An unsplit narrow tile's end: its columns into their (token, head) rows of O, and the
// log-sum-exps where asked.
template <int BN, int HD, int N, class Elem, int BAR>
__device__ __forceinline__ void decode_finish_t(float (&o)[HD / 64][N / 2], Cols<N>& r,
                                                const DecodeRows& dr, unsigned short* out,
                                                long long o_ss, long long o_sh, float* LSE,
                                                int sq, Narrow<BN, N>& nw, int tile) {
    narrow_out<BN, HD, N, BAR>(
        o, r, dr, nw, tile,
        [&](int n, int d, float x) {
            out[dr.token(n) * o_ss + dr.head(n) * o_sh + d] = Elem::one(x);
        },
        [&](int n, float lse, float) {
            if (LSE != nullptr) LSE[(long long)dr.head(n) * sq + dr.token(n)] = lse;
        });
}

// This split's narrow partial out to its slot (DECODE_SLOT<HD, N>: row n of the slot is column
// n of O^T), the stored columns only.
template <int BN, int HD, int N, int BAR>
__device__ __forceinline__ void decode_slice_store_t(float (&o)[HD / 64][N / 2], Cols<N>& r,
                                                     const DecodeRows& dr, float* slot,
                                                     Narrow<BN, N>& nw, int tile) {
    narrow_out<BN, HD, N, BAR>(
        o, r, dr, nw, tile, [&](int n, int d, float x) { __stcg(slot + n * HD + d, x); },
        [&](int n, float lse, float inv) {
            __stcg(slot + N * HD + n, inv > 0.f ? lse : -INFINITY);
        });
}

}  // namespace pcat
