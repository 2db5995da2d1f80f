// The gemv family's device math: what one consumer thread does with a ring stage, and how a
// tile's sums leave.  The kit's frame (the rings, the roles, the tile loop) calls these; they
// hold no synchronization.  Paste after the kit's headers (uses pcwg::u32).
#pragma once

namespace pcgv {

using pcwg::u32;

// 16 bytes of shared memory (8 elements) into four 32-bit registers.
__device__ __forceinline__ void lds128(u32 addr, u32 (&v)[4]) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]) : "r"(addr) : "memory");
}

// Two packed 16-bit floats as fp32 (bf16: the high half of an fp32; fp16: a conversion).
template <bool BF16>
__device__ __forceinline__ float2 unpack(u32 w) {
    if constexpr (BF16) {
        return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
    } else {
        float2 f;
        asm("{\n .reg .f16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.f32.f16 %0, lo;\n"
            " cvt.f32.f16 %1, hi;\n}\n" : "=f"(f.x), "=f"(f.y) : "r"(w));
        return f;
    }
}

// One K tile of thread (row r, part p): the dot product of A's row r over the part's boxes of
// 64 columns with x's same columns, into acc.  A stage holds BK / 64 boxes of BM rows x 128
// bytes, each TMA's 128-byte swizzle (16-byte chunk j of row r at j ^ (r % 8)); x's chunk
// follows, unswizzled.  A quarter warp reads 8 consecutive rows' same chunk: 8 distinct bank
// groups; its x reads are one address (a broadcast).
template <int BM, int BK, int PARTS, bool BF16>
__device__ __forceinline__ void dot_tile(float& acc, u32 a_stage, u32 x_stage, int r, int p) {
    constexpr int BOXES = BK / 64 / PARTS;
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int b = 0; b < BOXES; ++b) {
        const int box = p * BOXES + b;
        const u32 row = a_stage + box * (BM * 128) + r * 128;
        const u32 xs = x_stage + box * 128;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            u32 a[4], x[4];
            lds128(row + ((j ^ (r & 7)) << 4), a);
            lds128(xs + (j << 4), x);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float2 af = unpack<BF16>(a[e]), xf = unpack<BF16>(x[e]);
                s0 = fmaf(af.x, xf.x, s0);
                s1 = fmaf(af.y, xf.y, s1);
            }
        }
    }
    acc += s0 + s1;
    // every lane's reads of the stage are done before the warp's lane 0 releases it
    __syncwarp();
}

// The tile's sum of row r: the parts' sums added across the lanes that hold them (a row's
// parts sit 32 / PARTS lanes apart in one warp), then written by part 0 if the row is inside y.
template <int PARTS, bool BF16>
__device__ __forceinline__ void store_row(float acc, unsigned short* y, int row, int m, int p) {
#pragma unroll
    for (int d = 32 / PARTS; d < 32; d *= 2) acc += __shfl_xor_sync(0xffffffffu, acc, d);
    if (p == 0 && row < m) {
        u32 h;
        if constexpr (BF16) {
            asm("cvt.rn.bf16x2.f32 %0, %1, %1;\n" : "=r"(h) : "f"(acc));
        } else {
            asm("cvt.rn.f16x2.f32 %0, %1, %1;\n" : "=r"(h) : "f"(acc));
        }
        y[row] = static_cast<unsigned short>(h & 0xffffu);
    }
}

}  // namespace pcgv
