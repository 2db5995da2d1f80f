// pipeline-core h100 building blocks of the general wgmma GEMM's scaled (-p scale, scaled_mm) and
// batched (-p batch) variants: the epilogue's scale factors and the 3D tile copy.  Paste after
// gemm_call_h100.cuh, into every general kernel (an unscaled one's epilogue takes ScaleNone).
// No #include: builds under nvcc and NVRTC alike.  docs/guide/matmul.md says what each choice means.
#pragma once

namespace pcgc {

// A 3D tile of `map` at (c0 innermost, c1, batch c2) into shared memory, its bytes completing on
// `bar`: a batched operand, one [rows, K] matrix per batch, the box one batch deep.
__device__ __forceinline__ void tma_load_3d(u32 dst, const pcwg::TensorMap* map, u32 bar, int c0,
                                            int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5}], [%2];\n"
        :: "r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}

// The scaled epilogue's factors: the accumulator of row `row` and column `col` is multiplied by
// a(scale_a, row) * b(scale_b, col) before the bias, as torch._scaled_mm (`apply`).  Per tensor:
// one fp32 each; row-wise: scale_a [m], scale_b [n] (rows and columns past them read none);
// none: no factor (and no load).
struct ScaleNone {
    static __device__ __forceinline__ float a(const float*, int, int) { return 1.f; }
    static __device__ __forceinline__ float b(const float*, int, int) { return 1.f; }
    static __device__ __forceinline__ float apply(float x, float) { return x; }
};
struct ScaleTensor {
    static __device__ __forceinline__ float a(const float* s, int, int) { return s[0]; }
    static __device__ __forceinline__ float b(const float* s, int, int) { return s[0]; }
    static __device__ __forceinline__ float apply(float x, float f) { return x * f; }
};
struct ScaleRow {
    static __device__ __forceinline__ float a(const float* s, int row, int m) {
        return row < m ? s[row] : 0.f;
    }
    static __device__ __forceinline__ float b(const float* s, int col, int n) {
        return col < n ? s[col] : 0.f;
    }
    static __device__ __forceinline__ float apply(float x, float f) { return x * f; }
};

}  // namespace pcgc
