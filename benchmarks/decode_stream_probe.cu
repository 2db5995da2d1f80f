// What a decode step's K/V stream reaches alone, by how it is read (issue 38's last 6%).
//
// The decode kernel's no-math probe (attention_decode.py --variant no_math) reads 0.94 of
// cuDNN's bandwidth: the load stream itself is the gap.  This probe times the stream alone,
// outside the framework, in the shapes a decode step reads (a row-major cache [B, S, Hkv, 128]
// bf16, one CTA a (sequence, KV head, split) unit walking its 128-key blocks), read in
// different ways:
//
//   tma   : the decode kernel's copies: a 4-D map (D, Hkv, S, B), 64-column boxes of `rows`
//           rows, 128-byte swizzle, `stages` ring stages of K and V, one issuing thread, the
//           consumer warp group waiting on each stage and releasing it; L2 promotion `promo`.
//   tma256: the same with 128-column (256-byte) boxes, no swizzle (one box a block a tensor).
//   paged : the 64-column boxes of 16 rows, each from a page of 16 rows the producer looks up in a
//           page table in global memory first (as the decode kernel's pages of 16: a map over
//           [pages, 16, Hkv, D], the table a random permutation or the identity).
//   bulk  : 1-D bulk copies (cp.async.bulk, no map) of each key's 256-byte row, issued by the
//           producer warp's 32 lanes.
//   ldg   : no shared memory: every warp of `warps` reads 16 bytes a lane with `unroll` loads in
//           flight and folds them into a register (the plain-read reference).
//
// Build here: nvcc -O3 -arch=sm_90a -std=c++17 -o decode_stream_probe decode_stream_probe.cu
// Run: ./decode_stream_probe  (prints one JSON line a (shape, variant): median microseconds of
// 20 timed launches after 5 warm-ups, and TB/s of K and V read).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

typedef uint32_t u32;
typedef uint64_t u64;

struct Unit { int tiles, splits, blocks_per_tile; };

__device__ __forceinline__ u32 smem_u32(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 phase) {
    asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra W;\n}" :: "r"(bar), "r"(phase) : "memory");
}
__device__ __forceinline__ void tma4(u32 dst, const CUtensorMap* map, u32 bar, int c0, int c1,
                                     int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5, %6}], [%2];"
                 :: "r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
__device__ __forceinline__ void bulk1(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// One unit u: tile = u / splits (b = tile / H, h = tile % H), split = u % splits, its blocks
// [split * per, ...).
template <int MODE, int ROWS, int STAGES>
__global__ void __launch_bounds__(256, 1)
stream(const __grid_constant__ CUtensorMap tmK, const __grid_constant__ CUtensorMap tmV,
       const char* __restrict__ K, const char* __restrict__ V, int H, int S, int splits,
       int units, float* sink, const int* __restrict__ table) {
    extern __shared__ __align__(1024) char smem[];
    constexpr int BN = 128;
    constexpr u32 TILE = BN * 256;  // one tensor's bytes a block
    __shared__ __align__(8) u64 full[STAGES], empty[STAGES];
    const u32 base = (smem_u32(smem) + 1023) & ~1023u;
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(smem_u32(&full[s]), 1);
            mbar_init(smem_u32(&empty[s]), 1);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    const int nb = S / BN, per = (nb + splits - 1) / splits;
    if (wg == 0) {
        if (warp != 0) return;
        int it = 0;
        for (int u = blockIdx.x; u < units; u += gridDim.x) {
            const int tile = u / splits, split = u % splits, b = tile / H, h = tile % H;
            const int first = split * per, count = max(0, min(per, nb - first));
            for (int t = 0; t < count; ++t, ++it) {
                const int s = it % STAGES, blk = first + t;
                if (lane == 0) mbar_wait(smem_u32(&empty[s]), ((it / STAGES) & 1) ^ 1);
                __syncwarp();
                const u32 fb = smem_u32(&full[s]);
                const u32 dk = base + s * 2 * TILE, dv = dk + TILE;
                if (MODE == 0) {  // 64-column boxes of ROWS rows, swizzled
                    if (lane == 0) {
                        mbar_expect_tx(fb, 2 * TILE);
                        for (int r = 0; r < BN; r += ROWS)
                            for (int d = 0; d < 2; ++d)
                                tma4(dk + d * BN * 128 + r * 128, &tmK, fb, d * 64, h, blk * BN + r, b);
                        for (int r = 0; r < BN; r += ROWS)
                            for (int d = 0; d < 2; ++d)
                                tma4(dv + d * BN * 128 + r * 128, &tmV, fb, d * 64, h, blk * BN + r, b);
                    }
                } else if (MODE == 1) {  // 128-column boxes, no swizzle
                    if (lane == 0) {
                        mbar_expect_tx(fb, 2 * TILE);
                        for (int r = 0; r < BN; r += ROWS)
                            tma4(dk + r * 256, &tmK, fb, 0, h, blk * BN + r, b);
                        for (int r = 0; r < BN; r += ROWS)
                            tma4(dv + r * 256, &tmV, fb, 0, h, blk * BN + r, b);
                    }
                } else if (MODE == 3) {  // pages of 16 rows through the table
                    if (lane == 0) {
                        mbar_expect_tx(fb, 2 * TILE);
                        const int p0 = (b * S + blk * BN) / 16;
                        int pg[BN / 16];
#pragma unroll
                        for (int c = 0; c < BN / 16; ++c) pg[c] = __ldg(table + p0 + c);
#pragma unroll
                        for (int c = 0; c < BN / 16; ++c)
                            for (int d = 0; d < 2; ++d)
                                tma4(dk + d * BN * 128 + c * 16 * 128, &tmK, fb, d * 64, h, 0, pg[c]);
#pragma unroll
                        for (int c = 0; c < BN / 16; ++c)
                            for (int d = 0; d < 2; ++d)
                                tma4(dv + d * BN * 128 + c * 16 * 128, &tmV, fb, d * 64, h, 0, pg[c]);
                    }
                } else {  // 1-D bulk copies of each key's 256-byte row, 32 lanes
                    if (lane == 0) mbar_expect_tx(fb, 2 * TILE);
                    __syncwarp();
                    const size_t row0 = ((size_t)b * S + (size_t)blk * BN) * H + h;
                    for (int r = lane; r < BN; r += 32) {
                        bulk1(dk + r * 256, K + (row0 + (size_t)r * H) * 256, 256, fb);
                        bulk1(dv + r * 256, V + (row0 + (size_t)r * H) * 256, 256, fb);
                    }
                }
            }
        }
    } else {  // the consumer warp group: wait, touch one word, release
        int it = 0;
        float acc = 0.f;
        for (int u = blockIdx.x; u < units; u += gridDim.x) {
            const int split = u % splits;
            const int first = split * per, count = max(0, min(per, nb - first));
            for (int t = 0; t < count; ++t, ++it) {
                const int s = it % STAGES;
                mbar_wait(smem_u32(&full[s]), (it / STAGES) & 1);
                acc += reinterpret_cast<const float*>(smem + (base - smem_u32(smem)) + s * 2 * TILE)[threadIdx.x % 128];
                asm volatile("bar.sync 1, 128;" ::: "memory");
                if (threadIdx.x == 128) mbar_arrive(smem_u32(&empty[s]));
            }
        }
        if (acc == 12345.f) sink[threadIdx.x] = acc;
    }
}

// The plain-read reference: warp w of CTA c reads unit rows with 16-byte loads, UNROLL in
// flight a lane.
template <int UNROLL>
__global__ void __launch_bounds__(512)
ldg(const uint4* __restrict__ K, const uint4* __restrict__ V, int H, int S, int splits, int units,
    float* sink) {
    const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const int gw = blockIdx.x * warps + threadIdx.x / 32, nw = gridDim.x * warps;
    const int nb = S / 128, per = (nb + splits - 1) / splits;
    u32 acc = 0;
    // a warp's work item: one block of one unit (128 rows x 256 bytes x 2 tensors)
    const long long items = (long long)units * per;
    for (long long i = gw; i < items; i += nw) {
        const int u = (int)(i / per), t = (int)(i % per);
        const int tile = u / splits, split = u % splits, b = tile / H, h = tile % H;
        const int blk = split * per + t;
        if (blk >= nb) continue;
        const size_t row0 = ((size_t)b * S + (size_t)blk * 128) * H + h;
        // 128 rows x 16 uint4 a row: lane l reads uint4 (l % 16) of rows 2j + l / 16
#pragma unroll 1
        for (int j = 0; j < 64; j += UNROLL) {
            uint4 x[UNROLL], y[UNROLL];
#pragma unroll
            for (int q = 0; q < UNROLL; ++q) {
                const size_t row = row0 + (size_t)(2 * (j + q) + lane / 16) * H;
                x[q] = __ldg(K + row * 16 + lane % 16);
                y[q] = __ldg(V + row * 16 + lane % 16);
            }
#pragma unroll
            for (int q = 0; q < UNROLL; ++q) acc ^= x[q].x ^ x[q].w ^ y[q].y ^ y[q].z;
        }
    }
    if (acc == 0x12345u) sink[threadIdx.x] = (float)acc;
}

static PFN_cuTensorMapEncodeTiled_v12000 encode;

static CUtensorMap make_map(void* p, int B, int S, int H, int box_cols, int rows, bool swz,
                            CUtensorMapL2promotion promo) {
    CUtensorMap m;
    cuuint64_t dims[4] = {128, (cuuint64_t)H, (cuuint64_t)S, (cuuint64_t)B};
    cuuint64_t strides[3] = {256, (cuuint64_t)H * 256, (cuuint64_t)S * H * 256};
    cuuint32_t box[4] = {(cuuint32_t)box_cols, 1, (cuuint32_t)rows, 1};
    cuuint32_t es[4] = {1, 1, 1, 1};
    CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, p, dims, strides, box, es,
                        CU_TENSOR_MAP_INTERLEAVE_NONE,
                        swz ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE, promo,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) { fprintf(stderr, "encode %d\n", (int)r); exit(1); }
    return m;
}

template <class F>
static float median_us(F launch) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    for (int i = 0; i < 5; ++i) launch();
    CK(cudaDeviceSynchronize());
    std::vector<float> t;
    for (int i = 0; i < 20; ++i) {
        CK(cudaEventRecord(a)); launch(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
        float ms; CK(cudaEventElapsedTime(&ms, a, b)); t.push_back(ms * 1000.f);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

template <int MODE, int ROWS, int STAGES>
static void run_tma(const char* name, void* K, void* V, int B, int S, int H, int splits, int sms,
                    int ctas_per_sm, CUtensorMapL2promotion promo, float* sink, double bytes,
                    const char* shape, const int* table = nullptr) {
    const int box_cols = MODE == 1 ? 128 : 64;
    // pages of 16 rows: the cache seen as [B * S / 16 pages, 16, H, D]
    const int mb = MODE == 3 ? B * S / 16 : B, ms = MODE == 3 ? 16 : S;
    CUtensorMap mk = make_map(K, mb, ms, H, box_cols, ROWS, MODE != 1, promo);
    CUtensorMap mv = make_map(V, mb, ms, H, box_cols, ROWS, MODE != 1, promo);
    const int units = B * H * splits;
    const int smem = STAGES * 2 * 128 * 256 + 1024;
    auto k = stream<MODE, ROWS, STAGES>;
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const int grid = std::min(units, sms * ctas_per_sm);
    float us = median_us([&] {
        k<<<grid, 256, smem>>>(mk, mv, (const char*)K, (const char*)V, H, S, splits, units, sink,
                               table);
    });
    printf("{\"shape\": \"%s\", \"variant\": \"%s\", \"promo\": %d, \"us\": %.2f, \"tb_per_s\": %.3f}\n",
           shape, name, (int)promo, us, bytes / us / 1e6);
    fflush(stdout);
}

template <int UNROLL>
static void run_ldg(const char* name, void* K, void* V, int B, int S, int H, int splits, int sms,
                    int threads, int ctas_per_sm, float* sink, double bytes, const char* shape) {
    const int units = B * H * splits;
    const int grid = sms * ctas_per_sm;
    float us = median_us([&] {
        ldg<UNROLL><<<grid, threads>>>((const uint4*)K, (const uint4*)V, H, S, splits, units, sink);
    });
    printf("{\"shape\": \"%s\", \"variant\": \"%s\", \"us\": %.2f, \"tb_per_s\": %.3f}\n", shape,
           name, us, bytes / us / 1e6);
    fflush(stdout);
}

int main() {
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", (void**)&encode, cudaEnableDefault, &q));
    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    float* sink;
    CK(cudaMalloc(&sink, 4096));
    struct Shape { int B, S, H, splits; };
    // the timed decode shapes' caches (Hkv 8): splits as the call's wave model picks them
    const Shape shapes[] = {{64, 8192, 8, 1}, {8, 32768, 8, 2}, {1, 131072, 8, 16},
                            {8, 8192, 8, 2}, {64, 1024, 8, 1}};
    size_t most = 0;
    for (const Shape& s : shapes) most = std::max(most, (size_t)s.B * s.S * s.H * 256);
    void *K, *V;
    CK(cudaMalloc(&K, most)); CK(cudaMalloc(&V, most));
    CK(cudaMemset(K, 0, most)); CK(cudaMemset(V, 0, most));
    // pages of 16 rows: the identity table, and a random permutation of each shape's own pages
    // (a fixed seed; made per shape below: a page past the shape's map reads nothing)
    const int pages = (int)(most / (16 * 8 * 256));
    std::vector<int> ident(pages), perm(pages);
    for (int i = 0; i < pages; ++i) ident[i] = i;
    int *t_ident, *t_perm;
    CK(cudaMalloc(&t_ident, pages * 4)); CK(cudaMalloc(&t_perm, pages * 4));
    CK(cudaMemcpy(t_ident, ident.data(), pages * 4, cudaMemcpyHostToDevice));
    for (const Shape& s : shapes) {
        char shape[64];
        snprintf(shape, sizeof shape, "%dx%d/%d s%d", s.B, s.S, s.H, s.splits);
        const double bytes = 2.0 * s.B * s.S * s.H * 256;
        const int own = s.B * s.S / 16;
        for (int i = 0; i < own; ++i) perm[i] = i;
        uint64_t x = 88172645463325252ull;
        for (int i = own - 1; i > 0; --i) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            std::swap(perm[i], perm[x % (uint64_t)(i + 1)]);
        }
        CK(cudaMemcpy(t_perm, perm.data(), own * 4, cudaMemcpyHostToDevice));
        const auto P0 = CU_TENSOR_MAP_L2_PROMOTION_NONE, P128 = CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                   P256 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
        run_tma<0, 128, 3>("tma r128 st3", K, V, s.B, s.S, s.H, s.splits, sms, 1, P256, sink, bytes, shape);
        run_tma<0, 128, 3>("tma r128 st3", K, V, s.B, s.S, s.H, s.splits, sms, 1, P128, sink, bytes, shape);
        run_tma<0, 64, 3>("tma r64 st3", K, V, s.B, s.S, s.H, s.splits, sms, 1, P128, sink, bytes, shape);
        run_tma<0, 16, 3>("tma r16 st3", K, V, s.B, s.S, s.H, s.splits, sms, 1, P128, sink, bytes, shape);
        run_tma<3, 16, 3>("paged16 identity st3", K, V, s.B, s.S, s.H, s.splits, sms, 1, P128, sink, bytes, shape, t_ident);
        run_tma<3, 16, 3>("paged16 random st3", K, V, s.B, s.S, s.H, s.splits, sms, 1, P128, sink, bytes, shape, t_perm);
        run_tma<1, 128, 3>("tma256 r128 st3", K, V, s.B, s.S, s.H, s.splits, sms, 1, P256, sink, bytes, shape);
        run_tma<0, 128, 2>("tma r128 st2", K, V, s.B, s.S, s.H, s.splits, sms, 1, P256, sink, bytes, shape);
        run_tma<0, 128, 1>("tma r128 st1 x2cta", K, V, s.B, s.S, s.H, s.splits, sms, 2, P256, sink, bytes, shape);
        run_ldg<4>("ldg 16w u4", K, V, s.B, s.S, s.H, s.splits, sms, 512, 1, sink, bytes, shape);
        run_ldg<8>("ldg 16w u8", K, V, s.B, s.S, s.H, s.splits, sms, 512, 1, sink, bytes, shape);
        run_ldg<8>("ldg 8w u8 x2", K, V, s.B, s.S, s.H, s.splits, sms, 256, 2, sink, bytes, shape);
    }
    return 0;
}
