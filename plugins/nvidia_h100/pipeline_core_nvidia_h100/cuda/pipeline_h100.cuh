// pipeline-core h100 building blocks: the device helpers a CUDA kernel that follows a compiled
// schedule is pasted together from.  Written from the PTX ISA's semantics (cp.async groups,
// ldmatrix, mma.sync, bar.sync / barrier.sync); see the plugin's README.md, "CUDA building blocks".
//
// No #include: the header compiles under nvcc and under NVRTC without include paths.
// Every helper is asm volatile with a "memory" clobber where it touches memory, so the front end
// keeps program order; ptxas may still reorder independent instructions (the README says why the
// tests assert on SASS counts and wait values, never on order).
#pragma once

namespace pch100 {

typedef unsigned int u32;
typedef unsigned long long u64;

// ---- addresses -------------------------------------------------------------------------------

// A shared-memory pointer as the 32-bit address cp.async and ldmatrix take.
__device__ __forceinline__ u32 smem_addr(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

// The 16-byte-chunk XOR swizzle.  A tile row of ROW_CHUNKS 16-byte chunks (4 or 8: 64- or 128-byte
// rows) stores logical chunk `chunk` of row `row` at physical chunk chunk ^ f(row), where f(row)
// runs over 0..ROW_CHUNKS-1 across the rows that share one 128-byte bank line.  For 128-byte rows
// f(row) = row % 8; for 64-byte rows two rows fill a bank line and f(row) = (row / 2) % 4.  Eight
// consecutive rows of one logical chunk then land in eight different 16-byte bank groups, so
// neither the cp.async writes nor an ldmatrix phase (8 rows x 16 B) conflict.
template <int ROW_CHUNKS>
__host__ __device__ __forceinline__ constexpr int swizzle_chunk(int row, int chunk) {
    static_assert(ROW_CHUNKS == 4 || ROW_CHUNKS == 8, "swizzle_chunk: rows of 64 or 128 bytes");
    return chunk ^ ((row / (8 / ROW_CHUNKS)) % ROW_CHUNKS);
}

// Byte offset of (row, logical chunk) inside a swizzled tile of ROW_CHUNKS-chunk rows.
template <int ROW_CHUNKS>
__host__ __device__ __forceinline__ constexpr int swizzled_offset(int row, int chunk) {
    return row * ROW_CHUNKS * 16 + swizzle_chunk<ROW_CHUNKS>(row, chunk) * 16;
}

// ---- cp.async (global -> shared, counted in per-thread commit groups) -------------------------

// One 16-byte copy, L1-bypassing (.cg).  Joins the thread's open (uncommitted) group.
__device__ __forceinline__ void cp_async_16(u32 dst_smem, const void* src_global) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
                 :: "r"(dst_smem), "l"(src_global) : "memory");
}

// The same copy with a predicate: when `valid` is false it reads 0 bytes and zero-fills the 16
// (src-size 0), so a thread can skip a copy without skipping the commit that follows.
__device__ __forceinline__ void cp_async_16_zfill(u32 dst_smem, const void* src_global, bool valid) {
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst_smem), "l"(src_global), "r"(src_bytes) : "memory");
}

// Close the open group (an empty group when nothing is open).  Every thread must execute every
// commit: group counts are per thread.
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// The largest wait value the hardware encodes: DEPBAR.LE SB0 takes 6 bits; ptxas silently clamps
// larger N to 63 (and N = 256 wraps to 0), so a schedule must never ask for more.
#define PCH100_MAX_WAIT_GROUP 63

// Return once at most N of this thread's most recent groups are pending (all older ones complete).
// Their writes are then visible to this thread only; other warps need a barrier after it.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
    static_assert(N >= 0 && N <= PCH100_MAX_WAIT_GROUP, "cp.async.wait_group N must be in [0, 63]");
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

// ---- ldmatrix (shared -> registers, synchronous for the warp) ---------------------------------

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, and register i of a
// lane holds row lane/4, elements 2*(lane%4) and +1, of matrix i.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// ---- mma.sync (registers, synchronous for the warp) -------------------------------------------

// D = A * B + D, m16n8k16, A row-major bf16 (4 regs), B column-major bf16 (2 regs), D fp32 (4).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two fp32 values as one bf16x2 word, round to nearest even; `lo` goes to the lower address.
__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// ---- barriers ---------------------------------------------------------------------------------

// bar.sync ID (= barrier.sync.aligned): every thread of the CTA executes this same instruction.
// Orders this thread's earlier shared-memory accesses before every participant's later ones.
template <int ID>
__device__ __forceinline__ void bar_sync_aligned() {
    static_assert(ID >= 0 && ID < 16, "16 named barriers per CTA");
    asm volatile("bar.sync %0;\n" :: "n"(ID) : "memory");
}

// barrier.sync ID (non-aligned): warps may arrive at different barrier instructions with the same
// ID, as staggered warp groups do.
template <int ID>
__device__ __forceinline__ void barrier_sync() {
    static_assert(ID >= 0 && ID < 16, "16 named barriers per CTA");
    asm volatile("barrier.sync %0;\n" :: "n"(ID) : "memory");
}

// barrier.sync ID, THREADS: only THREADS threads (a multiple of 32) take part.
template <int ID, int THREADS>
__device__ __forceinline__ void barrier_sync_count() {
    static_assert(ID >= 0 && ID < 16, "16 named barriers per CTA");
    static_assert(THREADS > 0 && THREADS % 32 == 0, "barrier thread count: a multiple of 32");
    asm volatile("barrier.sync %0, %1;\n" :: "n"(ID), "n"(THREADS) : "memory");
}

// ---- grid raster -----------------------------------------------------------------------------

// Grouped raster: CTA `pid` computes tile (tile_m, tile_n); GROUP_M consecutive tile rows run
// together so the B tiles they share stay in L2.
__device__ __forceinline__ void grouped_tile(int pid, int tiles_m, int tiles_n, int group_m,
                                             int& tile_m, int& tile_n) {
    const int width = group_m * tiles_n;
    const int first_m = (pid / width) * group_m;
    const int gsize = min(tiles_m - first_m, group_m);
    tile_m = first_m + (pid % width) % gsize;
    tile_n = (pid % width) / gsize;
}

}  // namespace pch100
