// The attention backward's device math: what a consumer warp group does with a query block
// (Q_i with LSE_i, dO_i with delta_i) and its keys of the output tile's K and V block, and how
// the dQ writer reduces a consumer's dQ block into global memory.  The kit's frame calls these,
// one call per op step of the compiled flash-attention-bwd plan (emit_attention_bwd.py writes
// the calls); they hold no synchronization of the plan's: every ring wait, arrival, wgmma group
// fence / commit / wait, named barrier of the dQ hand-off and its proxy fence and bulk wait is
// the plan's, written by the kit and the emitter.  The one sync here is inside the gradient
// step: the consumer's own dS, written by all its threads, is fenced to the async proxy and
// gathered on the consumer's named barrier before its dQ wgmma reads it (one agent's write and
// read: the plan's chained groups order the rest).  Pasted after the forward's attention.cuh
// (pcat's element types and ex2_approx) and the per-N wgmma wrappers (kit/wgmma.py).
//
// A consumer owns KEYS keys (rows of K, V, dK, dV): S^T = K_c.Q^T and dP^T = V_c.dO^T put a key
// on each accumulator row, so thread (warp w, lane) holds keys w * 16 + lane / 4 (its "key 0")
// and that + 8 at query columns 8 c + 2 (lane % 4) + {0, 1}: exactly the A fragment of the RS
// wgmma dV += P^T.dO once packed (as the forward's P for P.V).
#pragma once

namespace pcab {

using pcwg::u32;
using pcwg::u64;

// Keys per consumer warp group: wgmma's M of S^T (the schedule refuses other splits).
constexpr int KEYS = 64;
constexpr float LOG2E = 1.4426950408889634f;

// What a masked query block drops: keys past Sk, rows past Sq (the tensor maps read both as
// zeros) and, causal, keys past the row's last one (row + offset: 0 top-left, Sk - Sq
// bottom-right; bwd_tiles.py).
struct Mask {
    int sq, sk, offset;
    bool causal;
    __device__ __forceinline__ bool keeps(int row, int key) const {
        return row < sq && key < sk && (!causal || key <= row + offset);
    }
};

// S^T (or dP^T) = A_c.B^T (wgmma SS, MMA = the kit's wgmma_m64n{BM}k16): the consumer's KEYS
// rows of a [BN x HD] block (HD / 64 boxes of BN rows, 128-byte swizzled) against a query
// block's stage (HD / 64 boxes of BM rows); 16 columns of the head per k step, the first
// overwriting.  The forward's k loop (pcat::qk) with the two blocks' roles swapped.
template <int BM, int BN, int HD, void (*MMA)(float (&)[BM / 2], u64, u64, int)>
__device__ __forceinline__ void st(float (&s)[BM / 2], u32 a, u32 b, int consumer) {
    static_assert(KEYS == pcat::ROWS, "a consumer's keys are the forward's consumer rows");
    // cleared, though the first k step overwrites: the wrapper's asm reads its accumulators,
    // which would keep the last query block's S live across the loop (ptxas then runs out of
    // registers and serializes the wgmmas, C7512)
#pragma unroll
    for (int i = 0; i < BM / 2; ++i) s[i] = 0.f;
    pcat::qk<BN, BM, HD, MMA>(s, a, b, consumer);
}

// dS[query][key] by stmatrix .trans, one block of 8 query columns c at a time: its two 8 x 8
// matrices are this warp's (c, keys 0-7) and (c, keys 8-15), each the fragment of a thread's
// packed pair (key k0 + 8 kh, queries col, col + 1), stored transposed, so matrix kh's row j is
// query 8 c + j holding 8 keys: one 16-byte chunk of the swizzled box, whose address thread
// 8 kh + j gives (ds_address; 2 stores where 4 b16 ones were; pairing two c's into one .x4
// store spills a register at D 128 causal).
__device__ __forceinline__ u32 ds_address(u32 ds) {
    const int wtid = threadIdx.x % 128, lane = threadIdx.x % 32;
    const int mk = (lane / 8) % 2, mj = lane % 8;
    return ds + mj * 128 + ((((wtid / 32) * 2 + mk) ^ mj) << 4);
}

__device__ __forceinline__ void store_ds(u32 at, int c, u32 lo, u32 hi) {
    asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n"
                 :: "r"(at + c * 1024), "r"(lo), "r"(hi) : "memory");
}

// A pair of per-row floats (the LSE's or delta's) of query columns col, col + 1 from the
// shared row vector at `at`: the one load the gradient steps make of them.
__device__ __forceinline__ void row_pair(u32 at, int col, float (&v)[2]) {
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v[0]), "=f"(v[1])
                 : "r"(at + col * 4));
}

// A thread's pairs of one row vector (8 c + 2 (lane % 4), + 1 for its column blocks c <
// BM / 8), each loaded AHEAD blocks before its block uses it.  Each load is volatile and so
// stays behind the dS store (stmatrix, volatile too) of the block before it: loaded where it
// was used, every block's arithmetic waited out a shared-memory round trip (Nsight Compute,
// session 19: the FADDs of dP - delta and the FMULs of LSE log2e held 10% of the consumers'
// stall samples, short scoreboard).  Every loop over the blocks is unrolled, so the pairs in
// flight are registers: loading all of them first spilled 360 bytes in the rows cut's gradient
// step (128 query rows), two blocks ahead of both vectors 8 bytes in the keys cut's at D 128.
// So the one-step gradient (two vectors) loads one block ahead, prob and dscore (one) two.
template <int BM, int AHEAD = 2>
struct RowPairs {
    u32 at;
    float v[BM / 8][2];
    __device__ __forceinline__ explicit RowPairs(u32 vec) : at(vec) {
#pragma unroll
        for (int c = 0; c < AHEAD && c < BM / 8; ++c) load(c);
    }
    __device__ __forceinline__ void load(int c) {
        row_pair(at, c * 8 + 2 * (threadIdx.x % 4), v[c]);
    }
    // block c's pair, block c + AHEAD's load issued first
    __device__ __forceinline__ const float (&block(int c))[2] {
        if (c + AHEAD < BM / 8) load(c + AHEAD);
        return v[c];
    }
};

// The consumer's dS, written by all its threads, fenced to the async proxy (wgmma reads it)
// and gathered on its barrier `bar`.
__device__ __forceinline__ void gather_ds(int bar) {
    pcgc::fence_proxy_async_shared();
    asm volatile("bar.sync %0, 128;\n" :: "r"(bar) : "memory");
}

// The gradient step: P = 2^(S * scale log2e - LSE log2e) (the forward's probabilities from its
// saved log-sum-exp), dS = P (dP - delta) * scale (the scale of dK and dQ folded in once); P
// packed as dV's RS A fragment, dS packed the same way (`dsp`: dK's RS A fragment with
// -p dk_rs; unread otherwise, so compiled out) and stored as dS[query][key] (one 128-byte
// swizzled box of BM rows: dQ's A K-major, dK's A = dS^T MN-major without dk_rs).  GATHER
// (without dk_rs): then fenced to the async proxy and gathered on the consumer's barrier `bar`
// (ids after the plan's), since the consumer's own dK wgmma reads it next.  (With dQ cut by
// columns or rows the plan's join of the consumers publishes every consumer's dS to every dQ
// wgmma; it fences again, as the proof asks of a write another agent reads.  With dk_rs that
// join is the only one: dK reads registers.)
// `masked`: the query blocks the plan's trip rule masks (the diagonal's) and the tails; a
// dropped pair's S is -inf, so P and dS are 0.
template <int BM, class Elem, bool GATHER, bool MASKED>
__device__ __forceinline__ void grad_step(float (&s)[BM / 2], float (&dp)[BM / 2],
                                          u32 (&pp)[BM / 4], u32 (&dsp)[BM / 4], u32 lse,
                                          u32 delta, u32 ds, const Mask& mask, int row0, int key0,
                                          float scale, float scale_log2, int bar) {
    const int wtid = threadIdx.x % 128, lane = threadIdx.x % 32, q = lane % 4;
    const int k0 = wtid / 32 * 16 + lane / 4;  // the thread's key 0 within the consumer's
#pragma unroll
    for (int i = 0; i < BM / 2; ++i) {
        pcwg::fence_operand(s[i]);
        pcwg::fence_operand(dp[i]);
    }
    // dS[query][key] (ds_address's, computed inline as measured: the call of it reorders the
    // kernel's SASS)
    const int mk = (lane / 8) % 2, mj = lane % 8;
    const u32 at = ds + mj * 128 + ((((wtid / 32) * 2 + mk) ^ mj) << 4);
    RowPairs<BM, 1> ls(lse), dl(delta);  // two vectors: two loads a block ahead
#pragma unroll
    for (int c = 0; c < BM / 8; ++c) {
        const int col = c * 8 + 2 * q;
        const float(&l)[2] = ls.block(c);
        const float(&d)[2] = dl.block(c);
        float p[4], g[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = e & 1, k = e >> 1;  // column col + r, key k0 + 8 k
            // a select, not a branch: the P registers a wgmma reads are then written on no
            // divergent path (ptxas serializes the wgmmas otherwise, C7520)
            const bool keep = !MASKED || mask.keeps(row0 + col + r, key0 + k0 + 8 * k);
            const float x = keep ? s[4 * c + e] : -INFINITY;
            p[e] = pcat::ex2_approx(fmaf(x, scale_log2, -l[r] * LOG2E));
            g[e] = p[e] * (dp[4 * c + e] - d[r]) * scale;
        }
        pp[2 * c] = Elem::pack(p[0], p[1]);
        pp[2 * c + 1] = Elem::pack(p[2], p[3]);
        dsp[2 * c] = Elem::pack(g[0], g[1]);
        dsp[2 * c + 1] = Elem::pack(g[2], g[3]);
        store_ds(at, c, dsp[2 * c], dsp[2 * c + 1]);
    }
    if constexpr (GATHER) gather_ds(bar);
}

// A query block's `masked` (the trip rule's and the tails': the same for every thread of the
// consumer) read through a warp shuffle, so ptxas knows the branch between the step's two
// forms is warp-uniform: the unmasked form (every block but the diagonal's and the tails')
// then tests no pair.  Tested per pair, `!masked || keeps(..)` short-circuited into a branch
// around every score (Nsight Compute, session 19: its ISETP, BSSY / BSYNC and branch
// resolution were a quarter of the gradient step's issue).
__device__ __forceinline__ bool uniform_masked(bool masked) {
    return __shfl_sync(0xffffffffu, static_cast<int>(masked), 0) != 0;
}

template <int BM, class Elem, bool GATHER>
__device__ __forceinline__ void grad(float (&s)[BM / 2], float (&dp)[BM / 2], u32 (&pp)[BM / 4],
                                     u32 (&dsp)[BM / 4], u32 lse, u32 delta, u32 ds, bool masked,
                                     const Mask& mask, int row0, int key0, float scale,
                                     float scale_log2, int bar) {
    if (uniform_masked(masked))
        grad_step<BM, Elem, GATHER, true>(s, dp, pp, dsp, lse, delta, ds, mask, row0, key0,
                                          scale, scale_log2, bar);
    else
        grad_step<BM, Elem, GATHER, false>(s, dp, pp, dsp, lse, delta, ds, mask, row0, key0,
                                           scale, scale_log2, bar);
}

// The gradient step in two (flash-attention-bwd -p split_grad, FlashAttention-3's order), the
// same math as grad: prob turns S into P in place (fp32, for dS) and packs P as dV's A fragment
// while dP's wgmma still runs; dscore, after dV's wgmma was issued, computes dS = P (dP - delta)
// * scale from them and packs, stores (and with GATHER fences and gathers) it as grad does.
template <int BM, class Elem>
__device__ __forceinline__ void prob(float (&s)[BM / 2], u32 (&pp)[BM / 4], u32 lse,
                                     bool masked, const Mask& mask, int row0, int key0,
                                     float scale_log2) {
    const int wtid = threadIdx.x % 128, lane = threadIdx.x % 32, q = lane % 4;
    const int k0 = wtid / 32 * 16 + lane / 4;
#pragma unroll
    for (int i = 0; i < BM / 2; ++i) pcwg::fence_operand(s[i]);
    RowPairs<BM> ls(lse);
#pragma unroll
    for (int c = 0; c < BM / 8; ++c) {
        const int col = c * 8 + 2 * q;
        const float(&l)[2] = ls.block(c);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = e & 1, k = e >> 1;
            const bool keep = !masked || mask.keeps(row0 + col + r, key0 + k0 + 8 * k);
            const float x = keep ? s[4 * c + e] : -INFINITY;
            s[4 * c + e] = pcat::ex2_approx(fmaf(x, scale_log2, -l[r] * LOG2E));
        }
        pp[2 * c] = Elem::pack(s[4 * c], s[4 * c + 1]);
        pp[2 * c + 1] = Elem::pack(s[4 * c + 2], s[4 * c + 3]);
    }
}

template <int BM, class Elem, bool GATHER>
__device__ __forceinline__ void dscore(float (&p)[BM / 2], float (&dp)[BM / 2],
                                       u32 (&dsp)[BM / 4], u32 delta, u32 ds, float scale,
                                       int bar) {
#pragma unroll
    for (int i = 0; i < BM / 2; ++i) {
        pcwg::fence_operand(p[i]);
        pcwg::fence_operand(dp[i]);
    }
    const u32 at = ds_address(ds);
    RowPairs<BM> dl(delta);
#pragma unroll
    for (int c = 0; c < BM / 8; ++c) {
        float g[4];
        const float(&d)[2] = dl.block(c);
#pragma unroll
        for (int e = 0; e < 4; ++e) g[e] = p[4 * c + e] * (dp[4 * c + e] - d[e & 1]) * scale;
        dsp[2 * c] = Elem::pack(g[0], g[1]);
        dsp[2 * c + 1] = Elem::pack(g[2], g[3]);
        store_ds(at, c, dsp[2 * c], dsp[2 * c + 1]);
    }
    if constexpr (GATHER) gather_ds(bar);
}

// dK_c += dS^T.Q (wgmma SS, MMA = wgmma_mn_m64n{HD}k16 reading A and B MN-major): A the
// consumer's dS box read transposed (its KEYS keys one 128-byte row, 16 queries a k step),
// B the query block's Q stage MN-major (HD / 64 boxes of BM rows, a k step 16 rows = 2048
// bytes further), as dV += P^T.dO reads dO's (pcat::pv, the forward's P.V).
template <int BM, int HD, void (*MMA)(float (&)[HD / 2], u64, u64)>
__device__ __forceinline__ void dk(float (&acc)[HD / 2], u32 ds, u32 q) {
    const u64 da = pcgc::smem_desc_sw128_mn<BM * 128>(ds);
    const u64 db = pcgc::smem_desc_sw128_mn<BM * 128>(q);
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
        MMA(acc, pcwg::desc_step(da, kk * 2048), pcwg::desc_step(db, kk * 2048));
}

// A dQ part's accumulators cleared before its wgmmas (the first k step overwrites, but the
// wrapper's asm reads them: uncleared, the last query block's dQ stays live across the loop).
template <int BM>
__device__ __forceinline__ void clear_dq(float (&acc)[BM / 64][32]) {
#pragma unroll
    for (int mi = 0; mi < BM / 64; ++mi)
#pragma unroll
        for (int i = 0; i < 32; ++i) acc[mi][i] = 0.f;
}

// One 64-column part of the consumer's dQ block, dQ_c = dS.K_c (wgmma SS, MMA =
// wgmma_kmn_m64n64k16 reading B MN-major): dS the consumer's [BM x KEYS] box, K_c its KEYS rows
// of the part's box of the K block (BN rows of 64 columns), 16 keys per k step; BM / 64 row
// blocks of 64, cleared first (as st's S: not live across the loop).
template <int BM, int BN, void (*MMA)(float (&)[32], u64, u64, int)>
__device__ __forceinline__ void dq(float (&acc)[BM / 64][32], u32 ds, u32 k, int consumer) {
    clear_dq<BM>(acc);
    const u64 da = pcwg::smem_desc_sw128(ds);
    const u64 db = pcgc::smem_desc_sw128_mn<BN * 128>(k + consumer * KEYS * 128);
#pragma unroll
    for (int mi = 0; mi < BM / 64; ++mi)
#pragma unroll
        for (int kk = 0; kk < KEYS / 16; ++kk)
            MMA(acc[mi], pcwg::desc_step(da, mi * 64 * 128 + kk * 32),
                pcwg::desc_step(db, kk * 2048), kk > 0);
}

// dQ cut by columns or by rows (FlashAttention-3's cuts): 64 head columns of dQ over every key
// of the tile, dQ = dS.K[:, part] (wgmma SS, as dq), for RB blocks of 64 query rows: dS every
// consumer's [BM x KEYS] box in turn from `ds` (DS_BYTES apart, `ds` at the first row block;
// the plan's join published them), K the part's box of the K block (BN rows of 64 columns), 16
// keys per k step.  By columns a consumer takes every row block of its part; by rows, its own
// row block of every part.
template <int RB, int BN, u32 DS_BYTES, void (*MMA)(float (&)[32], u64, u64, int)>
__device__ __forceinline__ void dq_all(float (&acc)[RB][32], u32 ds, u32 k) {
    clear_dq<RB * 64>(acc);
    const u64 da = pcwg::smem_desc_sw128(ds), db = pcgc::smem_desc_sw128_mn<BN * 128>(k);
#pragma unroll
    for (int mi = 0; mi < RB; ++mi)
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
            MMA(acc[mi], pcwg::desc_step(da, (kk / (KEYS / 16)) * DS_BYTES + mi * 64 * 128
                                                + (kk % (KEYS / 16)) * 32),
                pcwg::desc_step(db, kk * 2048), kk > 0);
}

// A dQ part's registers (RB blocks of 64 rows from row block `mi0`) into the dQ buffer (`buf`),
// in the accumulator's layout (dq_layout.cuh: the part's 64-column tiles, a warp's 8-byte
// stores of a column pair 256 consecutive bytes, no bank conflict).  ADD (shared_dq: one
// buffer, one bulk reduce per query block): a later consumer's part added into what an earlier
// one staged, each thread reading back exactly the values its own fragment holds (the same
// layout); the plan's ordering puts it after the earlier consumer's staging and before the
// writer's reduce.
template <int RB, int HD, bool ADD>
__device__ __forceinline__ void stage(float (&acc)[RB][32], u32 buf, int part, int mi0 = 0) {
    const int wtid = threadIdx.x % 128, lane = threadIdx.x % 32;
#pragma unroll
    for (int mi = 0; mi < RB; ++mi) {
#pragma unroll
        for (int i = 0; i < 32; ++i) pcwg::fence_operand(acc[mi][i]);
#pragma unroll
        for (int c = 0; c < 8; ++c)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const u32 at = buf + (u32)(pcdq::block_start<HD>(mi0 + mi)
                                           + pcdq::fragment_offset<HD>(wtid / 32, lane, c, half,
                                                                       part)) * 4;
                float v0 = acc[mi][4 * c + 2 * half], v1 = acc[mi][4 * c + 2 * half + 1];
                if constexpr (ADD) {
                    float x, y;
                    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(x), "=f"(y)
                                 : "r"(at) : "memory");
                    v0 = x + v0;
                    v1 = y + v1;
                }
                pcgc::st_shared_f32x2(at, v0, v1);
            }
    }
}

// The dQ writer's reduce of a dQ buffer into the fp32 accumulator's rows (one thread;
// the plan's commit and read wait follow): cp.reduce.async.bulk adds every element in L2.
__device__ __forceinline__ void reduce_add(float* dst, u32 src, u32 bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
                 :: "l"(dst), "r"(src), "r"(bytes) : "memory");
}

// An output tile's start: dK and dV cleared.
template <int HD>
__device__ __forceinline__ void start(float (&dk)[HD / 2], float (&dv)[HD / 2]) {
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) dk[i] = dv[i] = 0.f;
}

// An output tile's end: the consumer's KEYS rows of dK and dV (from key row `key0` of the KV
// head's [Sk, HD] rows at `dK` and `dV`, rows `dk_rows` and `dv_rows` elements apart: their own
// strides, k's and v's layouts) stored as Elem, keys past Sk not stored.
template <int HD, class Elem>
__device__ __forceinline__ void finish(float (&dk)[HD / 2], float (&dv)[HD / 2],
                                       unsigned short* dK, long long dk_rows, unsigned short* dV,
                                       long long dv_rows, int key0, int sk) {
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) {
        pcwg::fence_operand(dk[i]);
        pcwg::fence_operand(dv[i]);
    }
    const int wtid = threadIdx.x % 128, lane = threadIdx.x % 32, q = lane % 4;
    const int key = key0 + wtid / 32 * 16 + lane / 4;
    const bool in0 = key < sk, in8 = key + 8 < sk;
    // the forward's row stores (pcat::store_rows: 8-byte stores from 128 columns up)
    pcat::store_rows<HD, Elem>(dk, 1.f, 1.f, dK + key * dk_rows, dK + (key + 8) * dk_rows, q,
                               in0, in8);
    pcat::store_rows<HD, Elem>(dv, 1.f, 1.f, dV + key * dv_rows, dV + (key + 8) * dv_rows, q,
                               in0, in8);
}

}  // namespace pcab
