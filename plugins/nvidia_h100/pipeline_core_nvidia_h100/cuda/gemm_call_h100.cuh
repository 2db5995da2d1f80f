// pipeline-core h100 building blocks, the general wgmma GEMM (the kernel matmul() launches):
// shared-memory descriptors of MN-major tiles, element conversions, the fused epilogue's bias
// loads, activations and clipped stores.  Paste after wgmma_h100.cuh.  No #include: builds under
// nvcc and NVRTC alike.  docs/guide/matmul.md says what each choice means.
#pragma once

namespace pcgc {

using pch100::u32;
using pch100::u64;

// Descriptor of an MN-major tile in 128-byte swizzled rows (wgmma's transpose mode): each row
// holds 64 consecutive M (or N) elements of one k, 8 rows (k .. k+7) form one 1024-byte swizzle
// atom.  Leading byte offset: from one 64-element MN chunk to the next (CHUNK bytes, one TMA box
// of 64 x BK); stride byte offset: from one group of 8 k to the next (SBO: 1024 where the
// groups are packed, so a k16 step starts 16 rows = 2048 bytes further; decoding's grouped V
// stages more).
template <u32 CHUNK, u32 SBO = 1024>
__device__ __forceinline__ u64 smem_desc_sw128_mn(u32 addr) {
    return (static_cast<u64>((addr & 0x3FFFF) >> 4))
         | (static_cast<u64>(CHUNK >> 4) << 16)
         | (static_cast<u64>(SBO >> 4) << 32)
         | (static_cast<u64>(1) << 62);
}

// ---- element conversions ----------------------------------------------------------------------

__device__ __forceinline__ unsigned short f32_to_bf16(float x) {
    unsigned short r;
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ unsigned short f32_to_f16(float x) {
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ u32 pack_f16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ float bf16_to_f32(unsigned short h) {
    return __uint_as_float(static_cast<u32>(h) << 16);
}

__device__ __forceinline__ float f16_to_f32(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
    return f;
}

// ---- the fused epilogue: bias (per column), activation, output type ---------------------------

struct BiasNone {
    static __device__ __forceinline__ float at(const void*, int) { return 0.f; }
};
struct BiasBf16 {
    static __device__ __forceinline__ float at(const void* p, int col) {
        return bf16_to_f32(static_cast<const unsigned short*>(p)[col]);
    }
};
struct BiasF16 {
    static __device__ __forceinline__ float at(const void* p, int col) {
        return f16_to_f32(static_cast<const unsigned short*>(p)[col]);
    }
};
struct BiasF32 {
    static __device__ __forceinline__ float at(const void* p, int col) {
        return static_cast<const float*>(p)[col];
    }
};

struct ActNone {
    static __device__ __forceinline__ float f(float x) { return x; }
};
struct ActRelu {
    static __device__ __forceinline__ float f(float x) { return fmaxf(x, 0.f); }
};
// torch.nn.functional.gelu(x, approximate="tanh"): 0.5 x (1 + tanh(z)), z = sqrt(2 / pi) (x +
// 0.044715 x^3), written as x sigmoid(2 z) = x / (1 + e^(-2 z)), the same function: one exp and
// one fast divide, no branch.  Why: tanhf's range reduction and branches held enough
// temporaries beside 192 accumulators that the 128x192 ping-pong kernel with a bias spilled
// 68 bytes, and its epilogue was about twice the code; 1 + tanh(z) also cancels where z is
// very negative, which the sigmoid form does not (its error stays a few ulp there).
// __fdividef returns 0 where the divisor passes 2^126, as the quotient underflows anyway.
struct ActGelu {
    static __device__ __forceinline__ float f(float x) {
        return __fdividef(x, 1.f + __expf(-1.5957691216057308f * (x + 0.044715f * x * x * x)));
    }
};
// x sigmoid(x), with the fast divide for gelu's reason: the IEEE one's slow path (a call,
// branches, temporaries) ran the bias + silu epilogue at 0.72-0.86 of cuBLASLt's bias epilogue
// followed by torch's silu (session 26, benchmarks/gemm_epilogues.py).
struct ActSilu {
    static __device__ __forceinline__ float f(float x) { return __fdividef(x, 1.f + __expf(-x)); }
};

// A st.shared of one 32-bit word / two floats (the TMA-store epilogue's staging writes).
__device__ __forceinline__ void st_shared_u32(u32 addr, u32 v) {
    asm volatile("st.shared.u32 [%0], %1;\n" :: "r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void st_shared_f32x2(u32 addr, float v0, float v1) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" :: "r"(addr), "f"(v0), "f"(v1) : "memory");
}

// One output element, or two neighbouring columns in one store when `pair` (both in bounds and
// the address aligned to the pair).
struct OutBf16 {
    static __device__ __forceinline__ void stage(u32 a, float v0, float v1) {
        st_shared_u32(a, pch100::pack_bf16x2(v0, v1));
    }
    static __device__ __forceinline__ void one(void* c, size_t i, float v) {
        static_cast<unsigned short*>(c)[i] = f32_to_bf16(v);
    }
    static __device__ __forceinline__ void two(void* c, size_t i, float v0, float v1) {
        *reinterpret_cast<u32*>(static_cast<unsigned short*>(c) + i) = pch100::pack_bf16x2(v0, v1);
    }
};
struct OutF16 {
    static __device__ __forceinline__ void stage(u32 a, float v0, float v1) {
        st_shared_u32(a, pack_f16x2(v0, v1));
    }
    static __device__ __forceinline__ void one(void* c, size_t i, float v) {
        static_cast<unsigned short*>(c)[i] = f32_to_f16(v);
    }
    static __device__ __forceinline__ void two(void* c, size_t i, float v0, float v1) {
        *reinterpret_cast<u32*>(static_cast<unsigned short*>(c) + i) = pack_f16x2(v0, v1);
    }
};
struct alignas(8) F2 {
    float x, y;
};
struct OutF32 {
    static __device__ __forceinline__ void stage(u32 a, float v0, float v1) {
        st_shared_f32x2(a, v0, v1);
    }
    static __device__ __forceinline__ void one(void* c, size_t i, float v) {
        static_cast<float*>(c)[i] = v;
    }
    static __device__ __forceinline__ void two(void* c, size_t i, float v0, float v1) {
        *reinterpret_cast<F2*>(static_cast<float*>(c) + i) = F2{v0, v1};
    }
};

// Row `row`, columns col and col + 1 of C (row stride ldc), clipped to m x n; `vec`: the pair
// may go out as one store whenever both columns are in bounds.
template <class Out>
__device__ __forceinline__ void store_pair(void* c, long long ldc, int row, int col, int m, int n,
                                           bool vec, float v0, float v1) {
    if (row >= m || col >= n) return;
    const size_t i = static_cast<size_t>(row) * ldc + col;
    if (col + 1 < n) {
        if (vec) {
            Out::two(c, i, v0, v1);
        } else {
            Out::one(c, i, v0);
            Out::one(c, i + 1, v1);
        }
    } else {
        Out::one(c, i, v0);
    }
}

// ---- the TMA-store epilogue (docs/guide/matmul.md, "The TMA-store epilogue") ------------------
// PTX ISA: cp.async.bulk.tensor (the store form), cp.async.bulk.commit_group,
// cp.async.bulk.wait_group(.read), fence.proxy.async; the plugin's README.md, "Sync model".

// Byte `byte` of row `row` of a staging buffer: 64 rows of ROW bytes (128 or 64), swizzled as
// the C tensor map's box (CU_TENSOR_MAP_SWIZZLE_128B / _64B: address bits 4.. take the XOR of
// bits 7..; 128-byte rows: 16-byte chunk c of row r lies at chunk c ^ (r % 8), so a warp's
// eight rows of one column chunk land in eight different bank groups; 64-byte rows: chunk c
// of row r at c ^ (r / 2 % 4)).
template <int ROW = 128>
__device__ __forceinline__ u32 staged(u32 buf, int row, int byte) {
    static_assert(ROW == 128 || ROW == 64, "staging rows are one 128- or 64-byte swizzled row");
    return buf + row * ROW + ((((byte >> 4) ^ ((row * ROW >> 7) & (ROW / 16 - 1))) << 4)
                              | (byte & 15));
}

// This thread's generic-proxy writes of shared memory, ordered before async-proxy reads.
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The box at (c0 innermost, c1) of the map's array, from a staging buffer; clipped to the array.
__device__ __forceinline__ void tma_store_2d(const pcwg::TensorMap* map, u32 src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
                 :: "l"(reinterpret_cast<u64>(map)), "r"(src), "r"(c0), "r"(c1) : "memory");
}

__device__ __forceinline__ void bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// At most N of this thread's bulk groups still read their source (their buffers are free).
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory");
}

// At most N of this thread's bulk groups not complete (writes included).
template <int N>
__device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" :: "n"(N) : "memory");
}

}  // namespace pcgc
