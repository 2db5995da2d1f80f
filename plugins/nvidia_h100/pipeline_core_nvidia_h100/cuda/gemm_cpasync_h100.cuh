// pipeline-core h100: the general wgmma GEMM's cp.async producer (GemmVariant.load = cp_async;
// docs/guide/matmul.md, "The cp.async producer"): the producer warp group's 128 threads copy an
// operand's K-major tile into a ring stage 16 bytes at a time, 128-byte swizzled as a TMA box
// with SWIZZLE_128B is (16-byte chunk c of tile row r at chunk c ^ (r % 8); the ring is
// 1024-byte aligned), so the consumers' wgmma descriptors read it unchanged; then each thread
// arrives on the stage's full barrier through cp.async.mbarrier.arrive.noinc.  For operands whose
// row stride is 16-byte but not 128-byte aligned, where each row of a TMA box straddles two
// 128-byte lines.  Every synchronization stays in the emitted kernel, where sync_skeleton reads
// it.  Paste after gemm_wgmma_h100.cuh, only into a cp.async kernel.  No #include.
#pragma once

namespace pcgc {

// One 16-byte copy global -> shared (L1-bypassing) of which the first `bytes` (0..16) are read
// and the rest zero-filled (cp.async's src-size): a row past the operand or K past its end reads
// nothing.  Joins none of the thread's commit groups: the thread's next cp_async_arrive tracks it.
__device__ __forceinline__ void cp_async_16_n(u32 dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(bytes) : "memory");
}

// An arrival on `bar` that the hardware makes once every cp.async this thread issued before it
// completed.  .noinc: the barrier's pending count is not raised for it, so the barrier is
// initialised with one arrival per arriving thread.
__device__ __forceinline__ void cp_async_arrive(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(bar) : "memory");
}

// One operand's ROWS x 128-byte K-major tile of K tile t by the producer's 128 threads: thread
// `wtid` copies 16-byte chunk wtid % 8 of rows wtid / 8 + 16 i, so its swizzled chunk is the same
// in every row it copies (16 i is 0 modulo 8).  `src`: the operand's first row; `ld`: its row
// stride and `k_bytes` its K, in bytes; `rows`: its rows (M or N); `row0`: the tile's first row.
// SPLIT (split-K): the CTA's K tiles start at blockIdx.y * kt, as Operand's.
template <int ROWS, bool SPLIT>
struct CpAsyncOperand {
    static __device__ __forceinline__ void load(u32 dst, const char* src, long long ld, int rows,
                                                long long k_bytes, int t, int kt, int row0,
                                                int wtid) {
        long long k = (long long)t * 128;
        if constexpr (SPLIT) k = ((long long)blockIdx.y * kt + t) * 128;
        const int chunk = wtid & 7, r = wtid >> 3;
        const long long col = k + chunk * 16;
        const int bytes = col >= k_bytes ? 0 : k_bytes - col >= 16 ? 16 : (int)(k_bytes - col);
        const u32 to = dst + r * 128 + ((chunk ^ (r & 7)) << 4);
        const char* from = src + (long long)(row0 + r) * ld + col;
#pragma unroll 4
        for (int i = 0; i < ROWS / 16; ++i) {
            const bool in = row0 + r + 16 * i < rows && bytes > 0;
            cp_async_16_n(to + i * 16 * 128, in ? from + 16 * i * ld : src, in ? bytes : 0);
        }
    }
};

}  // namespace pcgc
