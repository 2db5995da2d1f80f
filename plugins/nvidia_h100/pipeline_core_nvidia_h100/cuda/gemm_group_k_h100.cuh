// pipeline-core h100: grouped_mm's 2-D x 2-D (-p batch=grouped_k, the weight gradient): `offs`
// (int32 [G], cumulative, on the device) split K, and group g's output [M, N] is
// A[:, k0:k1] . B[k0:k1, :].  A TMA copy through a map of the whole operand would read the next
// group's K in a group's last K tile, so each group reads through tensor maps of its own (A's and
// B's), written into global memory by the pre-pass kernel pc_ws_group_maps: the host-encoded map
// copied, its global address moved to k0 and its K extent cut to k1 - k0 (tensormap.replace), so
// TMA zero-fills the tail.  The writer releases the maps to the tensormap proxy
// (fence.proxy.tensormap::generic.release.gpu); the GEMM's producer acquires each tile's maps
// before its copies read them (the plan's descriptor_acquire step, wgmma_sync.DEVICE_MAPS_SYNC).
// PTX ISA, "tensormap.replace", "fence.proxy.tensormap".  Needs pcwg::TensorMap (wgmma_h100.cuh).
// No #include: builds under nvcc and NVRTC alike.
#pragma once

namespace pcgk {

// Group g's K range [k0, k1): offs clamped to [0, k]; an end below its start makes an empty group.
__device__ __forceinline__ void k_range(const int* offs, int g, int k, int& k0, int& k1) {
    k0 = g == 0 ? 0 : min(max(offs[g - 1], 0), k);
    k1 = max(min(max(offs[g], 0), k), k0);
}

// Output tile `tile` of the grouped loop: every group has tiles_m x tiles_n output tiles, group by
// group, in the grouped raster within a group; its K tiles `kt` are its group's own.
__device__ __forceinline__ void tile_of(int tile, const int* offs, int k, int tiles_m, int tiles_n,
                                        int group_m, int bk, int& group, int& tile_m, int& tile_n,
                                        int& kt) {
    const int per = tiles_m * tiles_n;
    group = tile / per;
    pch100::grouped_tile(tile - group * per, tiles_m, tiles_n, group_m, tile_m, tile_n);
    int k0, k1;
    k_range(offs, group, k, k0, k1);
    kt = (k1 - k0 + bk - 1) / bk;
}

// The producer's acquire of a group's two maps (A's, B's) before its copies read them: the
// tensormap proxy may hold what the same address held at an earlier launch.
__device__ __forceinline__ void acquire_maps(const pcwg::TensorMap* maps) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" :: "l"(maps) : "memory");
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" :: "l"(maps + 1)
                 : "memory");
}

// One operand's map of group g: `src` copied to `dst` (global, 128-byte aligned), its global
// address moved to the group's first K (`step` bytes per K element) and its K dimension (`dim`: 0
// K-major, 1 MN-major) cut to the group's extent (at least 1: TMA takes no empty dimension; an
// empty group's tiles issue no copy).  A K-major group must start 16-byte aligned, as TMA's global
// address (torch requires offs multiples of 16 bytes): the kernel traps on one that does not.
__device__ __forceinline__ void write_map(pcwg::TensorMap* dst, const pcwg::TensorMap& src,
                                          unsigned long long base, long long step, int dim,
                                          int k0, int k1) {
    const unsigned long long address = base + (unsigned long long)((long long)k0 * step);
    if (address % 16) __trap();
#pragma unroll
    for (int i = 0; i < 16; ++i) dst->opaque[i] = src.opaque[i];
    asm volatile("tensormap.replace.tile.global_address.global.b1024.b64 [%0], %1;\n"
                 :: "l"(dst), "l"(address) : "memory");
    const int extent = max(k1 - k0, 1);
    if (dim == 0)
        asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 0, %1;\n"
                     :: "l"(dst), "r"(extent) : "memory");
    else
        asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 1, %1;\n"
                     :: "l"(dst), "r"(extent) : "memory");
    asm volatile("fence.proxy.tensormap::generic.release.gpu;\n" ::: "memory");
}

// The TMA-store epilogue's store of groups along K (-p store=tma; pcgc::tma_store_2d's 3-D form):
// the box at (c0 innermost, c1, group) of C [G, M, N] from a staging buffer, clipped to the
// group's [M, N] (the map's extents), so every tile of every group is stored so.
__device__ __forceinline__ void tma_store_3d(const pcwg::TensorMap* map, pch100::u32 src, int c0,
                                             int c1, int group) {
    asm volatile(
        "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n"
        :: "l"(reinterpret_cast<pch100::u64>(map)), "r"(src), "r"(c0), "r"(c1), "r"(group)
        : "memory");
}

}  // namespace pcgk
