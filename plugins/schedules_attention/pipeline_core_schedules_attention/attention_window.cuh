// The forward's sliding-window mask and logit softcap (docs/guide/attention.md, "Sliding
// windows and softcap"): pasted after attention.cuh only into the kernels that take them
// (-p window_left / window_right, -p softcap), so every other kernel's source stays as it was.
// The window's KV blocks (the first, the count, the masked ones at both edges) are the plan's
// LoopBounds, written by emit_window.py; this header holds the mask those blocks run and the
// cap applied to S before the softmax.
#pragma once

namespace pcat {

// A window's mask (the softmax's Mask, as KeyTail and Causal): row r keeps keys r + reach -
// span .. r + reach below sk.  `last(row)` is row + reach, the row's last key; the first is
// `span` keys before it.  A window (left, right) at the diagonal's offset is reach = offset +
// right, span = left + right; with no right reach, reach = sk (past every key) and span = sk -
// offset + left (emit_window.py writes them).
struct Window {
    int sk, reach, span;
    __device__ __forceinline__ int last(int row) const { return row + reach; }
    __device__ __forceinline__ bool keeps(int key, int last) const {
        return key < sk && key <= last && key >= last - span;
    }
};

// tanh on the MUFU alone (FA3's softcap): one MUFU.TANH, max relative error about 2^-11, under
// the 16-bit P it feeds.
__device__ __forceinline__ float tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// The logit softcap on a KV block's raw scores, before the softmax: S <- tanh(S * scale /
// softcap) (`cap_scale` = scale / softcap); the softmax's scale_log2 is then softcap * log2 e,
// so the exponent is softcap * tanh(S * scale / softcap) * log2 e, FlashAttention's capped
// scores (the cap applied to the scaled scores).  The fence first, as the softmax's: S's
// registers are the S wgmma's accumulators.  A masked key is set to -inf after the cap.
template <int BN>
__device__ __forceinline__ void cap(float (&s)[BN / 2], float cap_scale) {
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) pcwg::fence_operand(s[i]);
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) s[i] = tanh_approx(s[i] * cap_scale);
}

}  // namespace pcat
