// The deterministic attention backward's turns: the dQ writer's adds to a query block's dQ
// accumulator made in one fixed order (KV block ascending; with two writers, writer 0 before 1), on one int32
// counter per (batch, query head, query block), zeroed before the kernel.  The plan's turn
// steps call these on the writer's issuing lane (emit_attention_bwd.py writes the calls; the
// turns and why no wait cycle exists: pipeline_core/agents/prove_reduction.py).  Pasted after
// attention_bwd.cuh in the deterministic kernel only.
#pragma once

namespace pcab {

// TURN_WAIT: spin until the counter reaches this add's turn (ld.acquire.gpu: every earlier
// turn's release, and the completed add before it, is visible from here on), then order the
// async proxy's reduce after that acquire (the reduce reads the earlier turns' sums).
__device__ __forceinline__ void turn_wait(const int* counter, int turn) {
    int seen;
    do {
        asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(seen) : "l"(counter)
                     : "memory");
    } while (seen != turn);
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// TURN_FENCE: the completed reduce's writes (async proxy) ordered before the release.
__device__ __forceinline__ void turn_fence() {
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// TURN_RELEASE: the next turn handed on.
__device__ __forceinline__ void turn_release(int* counter) {
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" :: "l"(counter) : "memory");
}

}  // namespace pcab
