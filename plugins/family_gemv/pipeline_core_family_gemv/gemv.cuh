// The gemv family's device math, called by the kit's frame; no synchronization but the warp's.
// Pasted after the kit's headers (pcwg::u32, pcgc's element conversions).

namespace pcgv {

using pcwg::u32;

template <bool BF16>
__device__ __forceinline__ float elem(u32 w, int hi) {
    const auto h = static_cast<unsigned short>(hi ? w >> 16 : w & 0xffffu);
    return BF16 ? pcgc::bf16_to_f32(h) : pcgc::f16_to_f32(h);
}

// One K tile of thread (row r, part p): A's row r over the part's boxes of 64 columns times
// x's same columns, into acc.  A stage holds BK / 64 boxes of BM rows x 128 bytes in TMA's
// 128-byte swizzle (16-byte chunk j of row r at j ^ (r % 8)), then x's chunk, unswizzled.  A
// quarter warp reads 8 consecutive rows' same chunk (8 distinct bank groups) and one x
// address (a broadcast).
template <int BM, int BK, int PARTS, bool BF16>
__device__ __forceinline__ void dot_tile(float& acc, u32 a_stage, u32 x_stage, int r, int p) {
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int box = p * BK / 64 / PARTS; box < (p + 1) * BK / 64 / PARTS; ++box) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            u32 a[4], x[4];
            asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                         : "r"(a_stage + box * (BM * 128) + r * 128 + ((j ^ (r & 7)) << 4)));
            asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3])
                         : "r"(x_stage + box * 128 + (j << 4)));
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s0 = fmaf(elem<BF16>(a[e], 0), elem<BF16>(x[e], 0), s0);
                s1 = fmaf(elem<BF16>(a[e], 1), elem<BF16>(x[e], 1), s1);
            }
        }
    }
    acc += s0 + s1;
    __syncwarp();  // every lane's reads of the stage done before lane 0 releases it
}

// Row r's sum: its parts' sums (32 / PARTS lanes apart in one warp) added, written by part 0.
template <int PARTS, bool BF16>
__device__ __forceinline__ void store_row(float acc, unsigned short* y, int row, int m, int p) {
#pragma unroll
    for (int d = 32 / PARTS; d < 32; d *= 2) acc += __shfl_xor_sync(0xffffffffu, acc, d);
    if (p == 0 && row < m) y[row] = BF16 ? pcgc::f32_to_bf16(acc) : pcgc::f32_to_f16(acc);
}

}  // namespace pcgv
