// pipeline-core h100 building blocks, wgmma family: mbarrier phases, TMA tile copies, wgmma
// groups and their shared-memory descriptors, setmaxnreg.  Written from the PTX ISA's semantics
// (the plugin's README.md, "Sync model, wgmma family").  Paste after pipeline_h100.cuh (it uses
// pch100::u32 / u64 / smem_addr).  No #include: builds under nvcc and NVRTC alike.
#pragma once

namespace pcwg {

using pch100::u32;
using pch100::u64;

// A CUtensorMap as the driver encodes it (cuTensorMapEncodeTiled): 128 opaque bytes, 64-aligned,
// passed to the kernel by value as a __grid_constant__ parameter.
struct alignas(64) TensorMap {
    u64 opaque[16];
};

// ---- mbarrier (a phase channel) ----------------------------------------------------------------

__device__ __forceinline__ void mbar_init(u32 bar, u32 arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(arrivals) : "memory");
}

// Makes the initialised barriers visible to the async proxy (TMA completes bytes on them).
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also announces `bytes` the current phase waits for.
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 :: "r"(bar), "r"(bytes) : "memory");
}

// One arrival (release semantics: this thread's earlier accesses are published to waiters).
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}

// Returns once the phase of parity `parity` has completed (acquire).  Only the current and the
// preceding phase can be told apart, which is why a waiter may lag its barrier by one phase.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile("{\n .reg .pred p;\n"
                     " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// The same wait that gives up after `limit` polls and traps: a debugging aid that turns a
// deadlock (a phase that never completes) into a launch error (emitter option -O watchdog=N).
__device__ __forceinline__ void mbar_wait_bounded(u32 bar, u32 parity, unsigned long long limit) {
    u32 done;
    unsigned long long polls = 0;
    do {
        asm volatile("{\n .reg .pred p;\n"
                     " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
        if (++polls > limit) __trap();
    } while (!done);
}

// ---- TMA ---------------------------------------------------------------------------------------

// A 2D tile of `map` at (c0 innermost, c1) into shared memory; its bytes complete on `bar`.
__device__ __forceinline__ void tma_load_2d(u32 dst, const TensorMap* map, u32 bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];\n"
        :: "r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1) : "memory");
}

// ---- wgmma (an in-order group counter per warp group) ------------------------------------------

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void wgmma_wait() {
    static_assert(N >= 0 && N <= 7, "wgmma.wait_group: 0..7 groups left pending");
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}

// Keeps the compiler from moving accesses of `r` across an async wgmma boundary.
__device__ __forceinline__ void fence_operand(float& r) {
    asm volatile("" : "+f"(r) :: "memory");
}

// Shared-memory matrix descriptor of a K-major tile stored in 128-byte swizzled rows: start
// address >> 4, leading byte offset 16 (unused by swizzled K-major layouts), stride byte offset
// SBO from one 8-row swizzle atom to the next (1024: the atoms packed; more where other data
// lies between them, as decoding's grouped K stages), swizzle mode 1 = 128 B.  The tile must
// start 1024-aligned; the k-th 16-element step of a row starts 32 * k bytes further.
template <u32 SBO = 1024>
__device__ __forceinline__ u64 smem_desc_sw128(u32 addr) {
    return (static_cast<u64>((addr & 0x3FFFF) >> 4))
         | (static_cast<u64>(16 >> 4) << 16)
         | (static_cast<u64>(SBO >> 4) << 32)
         | (static_cast<u64>(1) << 62);
}

// The descriptor of the matrix `bytes` further into the tile `desc` describes: the start
// address field (bits 0-13, 16-byte units) plus bytes / 16, exact for any shared::cta address
// (all below 2^18 bytes, so the field never carries).  A k loop builds its operands'
// descriptors once and steps them by constants: built per step, the mask and shift of each
// address ran on the vector pipe and moved to uniform registers (R2UR) between every two
// wgmmas, about ten instructions a 64 x 64 x 16 product (the backward's issue bound).
__device__ __forceinline__ u64 desc_step(u64 desc, u32 bytes) {
    return desc + static_cast<u64>(bytes >> 4);
}

// ---- registers per role --------------------------------------------------------------------------

template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(REGS));
}

template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(REGS));
}

}  // namespace pcwg
