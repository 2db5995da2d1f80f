// pipeline-core h100: stream-K's tile scheduler and fixup (docs/guide/matmul.md, "Stream-K"), the
// hybrid: the persistent grid's G CTAs share the last SK output tiles of the raster by K tiles,
// then run the other tiles whole.  The stream-K tiles' SK * KT K tiles, tile-major, are cut into
// G contiguous ranges, CTA c's [c * SK * KT / G, (c + 1) * SK * KT / G); each piece of a range
// within one tile is a work unit.  gemm_tiles.StreamKTrips computes the same on the host, where
// the core proves its ranges, counts and fixup order (agents/prove_fixup.py): keep them one.
// Every synchronization stays in the emitted kernel.  Paste after gemm_wgmma_h100.cuh.  No
// #include: builds under nvcc and NVRTC alike.
#pragma once

namespace pcsk {

// A work unit: its output tile, first K tile and K tiles, the CTAs sharing its tile (1: a whole
// tile, no hand-off) and its workspace slot (2c: the CTA's first stream-K tile, 2c + 1: its last).
struct Unit {
    int tile, k0, kt, parts, slot;
};

struct StreamK {
    int tiles, kt, ctas, sk;
    long long iters;  // the stream-K tiles' K tiles

    __host__ __device__ StreamK(int tiles_, int kt_, int ctas_, int sk_)
        : tiles(tiles_), kt(kt_), ctas(ctas_), sk(sk_), iters((long long)sk_ * kt_) {}

    // CTA c's first stream-K K tile (its range ends where c + 1's begins).
    __host__ __device__ long long begin(int c) const { return c * iters / ctas; }

    // The CTA whose range holds stream-K K tile i.
    __host__ __device__ int cta_of(long long i) const {
        return (int)(((i + 1) * ctas - 1) / iters);
    }

    // CTA c's stream-K units: one per tile its range touches.
    __host__ __device__ int sk_units(int c) const {
        const long long b = begin(c), e = begin(c + 1);
        return e > b ? (int)((e - 1) / kt - b / kt + 1) : 0;
    }

    // CTA c's units: its stream-K pieces first, then its whole tiles c, c + G, ...
    __host__ __device__ int units(int c) const {
        const int dp = tiles - sk;
        return sk_units(c) + (dp > c ? (dp - c + ctas - 1) / ctas : 0);
    }

    __host__ __device__ Unit unit(int c, int u) const {
        const int s = sk_units(c);
        if (u >= s) return Unit{c + (u - s) * ctas, 0, kt, 1, 0};
        const long long b = begin(c), e = begin(c + 1);
        const long long t = b / kt + u, lo = b > t * kt ? b : t * kt;
        const long long hi = e < (t + 1) * kt ? e : (t + 1) * kt;
        return Unit{tiles - sk + (int)t, (int)(lo - t * kt), (int)(hi - lo),
                    cta_of((t + 1) * kt - 1) - cta_of(t * kt) + 1, 2 * c + (u > 0)};
    }

    // The workspace slot of CTA c's piece of stream-K tile t (counted from the first one).
    __host__ __device__ int slot(int c, long long t) const { return 2 * c + (begin(c) < t * kt); }
};

// The fixup's reads of stream-K tile t's pieces (`part`: the thread's first float of slot 0,
// slots `slice` floats apart): every CTA's of the tile's K range in K order, first .. last CTA,
// whichever arrived last (deterministic: the same sum every run), this CTA's own too.
template <int MBLOCKS, int ACC, int THREADS, int CHUNK>
__device__ __forceinline__ void fixup_read(float (&acc)[MBLOCKS][ACC], const float* part,
                                           size_t slice, const StreamK& s, int t) {
    const int first = s.cta_of((long long)t * s.kt), last = s.cta_of((long long)(t + 1) * s.kt - 1);
#pragma unroll
    for (int mb = 0; mb < MBLOCKS; ++mb)
#pragma unroll
        for (int c = 0; c < ACC; c += CHUNK)
#pragma unroll 1
            for (int y = first; y <= last; ++y) {
                const float* p = part + s.slot(y, t) * slice;
#pragma unroll
                for (int i = c; i < c + CHUNK; ++i) {
                    const float v = __ldcg(p + (mb * ACC + i) * THREADS);
                    acc[mb][i] = y == first ? v : acc[mb][i] + v;
                }
            }
}

}  // namespace pcsk
