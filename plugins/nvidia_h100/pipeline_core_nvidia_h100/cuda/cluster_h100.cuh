// pipeline-core h100 building blocks, 2-CTA clusters: the CTA's rank, the cluster barrier, an
// arrival on a peer CTA's mbarrier and the multicast TMA copy.  Written from the PTX ISA's
// "mapa", "mbarrier.arrive", "barrier.cluster" and "cp.async.bulk.tensor" sections (the
// plugin's README.md, "Sync model, wgmma family"; docs/guide/agents.md, "Clusters").  Paste
// after wgmma_h100.cuh, only into a kernel launched with __cluster_dims__.
#pragma once

namespace pcwg {

__device__ __forceinline__ u32 cluster_ctarank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

// Every thread of every CTA of the cluster: the start barrier (after the mbarriers'
// initialisation and fence.mbarrier_init.release.cluster) and the end barrier (no CTA exits
// while a peer may still copy into it or arrive on its barriers).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\n"
                 "barrier.cluster.wait.acquire;\n" ::: "memory");
}

// One arrival on the mbarrier at the same offset in CTA `cta` of the cluster, released at
// cluster scope: this thread's earlier accesses (its warp's retired wgmma reads) are ordered
// before whatever the peer's waiter does next (its producer's next multicast into this CTA).
__device__ __forceinline__ void mbar_arrive_peer(u32 bar, u32 cta) {
    asm volatile("{\n .reg .b32 remote;\n"
                 " mapa.shared::cluster.u32 remote, %0, %1;\n"
                 " mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n"
                 :: "r"(bar), "r"(cta) : "memory");
}

// The same arrival at CTA scope: it counts towards the peer's phase but releases nothing to
// the peer (NVIDIA/cutlass#3324).  Emitted only for a plan whose proof refused it
// (--allow-unsafe), to reproduce the race.
__device__ __forceinline__ void mbar_arrive_peer_cta(u32 bar, u32 cta) {
    asm volatile("{\n .reg .b32 remote;\n"
                 " mapa.shared::cluster.u32 remote, %0, %1;\n"
                 " mbarrier.arrive.release.cta.shared::cluster.b64 _, [remote];\n}\n"
                 :: "r"(bar), "r"(cta) : "memory");
}

// The wait on a phase a peer CTA's arrival completes, acquiring at cluster scope (the other
// half of NVIDIA/cutlass#3324's fix): the peer's reads released at cluster scope are ordered
// before what this thread does next.  `limit` > 0: trap after that many polls (-O watchdog).
__device__ __forceinline__ void mbar_wait_cluster(u32 bar, u32 parity,
                                                  unsigned long long limit = 0) {
    u32 done;
    unsigned long long polls = 0;
    do {
        asm volatile("{\n .reg .pred p;\n"
                     " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
        if (limit && ++polls > limit) __trap();
    } while (!done);
}

// A 2D tile of `map` at (c0 innermost, c1) into shared memory offset `dst` of every CTA in
// `mask`; its bytes complete on the mbarrier at offset `bar` of each of those CTAs.
__device__ __forceinline__ void tma_load_2d_multicast(u32 dst, const TensorMap* map, u32 bar,
                                                      int c0, int c1, unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;\n"
        :: "r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
        : "memory");
}

}  // namespace pcwg
