// H100 (sm_90a) microbenchmarks for the cost model of pipeline-core's h100 target.
//
// Measures, in SM clock cycles (clock64 inside the kernels) and in wall time (CUDA events
// and %globaltimer), the costs a schedule's timing model needs:
//   1. cp.async.cg 16 B global->shared: latency from L2 and from DRAM, and the time to land
//      N bytes per CTA (4 KB .. 192 KB) for one CTA and for one CTA on every SM, and the
//      sustained rate of an S-stage cp.async ring on every SM (a GEMM main loop without math);
//   2. ldmatrix (.x1/.x2/.x4/.x4.trans): dependent-chain latency and stream throughput;
//   3. mma.sync m16n8k16 bf16 -> f32: dependent-chain latency and throughput per warp, per SM
//      and per GPU, also after ~3 s of full load (the clock a long GEMM runs at);
//   4. bar.sync for 128..1024 threads, cp.async.wait_group / commit_group with nothing pending.
//
// Every result register is consumed (xor-ed into a global sink), so the compiler cannot drop
// the work; run_microbench.py counts LDGSTS / LDSM / HMMA in the SASS to prove it.
// Output: one line per measurement, "@@ {json}", parsed by run_microbench.py; what each field
// means is in benchmarks/h100/README.md.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(call)                                                                          \
  do {                                                                                    \
    cudaError_t err_ = (call);                                                            \
    if (err_ != cudaSuccess) {                                                            \
      fprintf(stderr, "CUDA error %s (%s) at %s:%d: %s\n", cudaGetErrorName(err_),        \
              cudaGetErrorString(err_), __FILE__, __LINE__, #call);                       \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

// After every launch: the launch itself, then the kernel's own execution.
#define CK_LAUNCH()                    \
  do {                                 \
    CK(cudaGetLastError());            \
    CK(cudaDeviceSynchronize());       \
  } while (0)

typedef unsigned long long u64;

// Per-block timing record written by thread 0 of each block.
struct Rec {
  u64 clk;      // SM cycles of the timed region (clock64)
  u64 aux;      // a second cycle count (e.g. issue-only time), kernel specific
  u64 gt_ns;    // %globaltimer nanoseconds of the same region
  u64 smid;     // SM the block ran on
};

// ---------------------------------------------------------------------------------------------
// Device helpers: thin wrappers over single PTX instructions.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ u64 clk64() {
  u64 t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t) : : "memory");
  return t;
}

__device__ __forceinline__ u64 gtimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : : "memory");
  return t;
}

__device__ __forceinline__ unsigned sm_id() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Pins a value in a register at this point of the program: a volatile asm that reads and
// writes it, so address arithmetic is finished before the next clock read.
__device__ __forceinline__ void pin(const char*& p) { asm volatile("" : "+l"(p)); }

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" : : "r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" : : : "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" : : "n"(N) : "memory");
}

// ldmatrix variants. V: 0 = .x4, 1 = .x2, 2 = .x4.trans, 3 = .x1. Every variant returns 4
// registers (unused ones zero) so the kernels below are written once.
template <int V>
__device__ __forceinline__ void ldsm(uint32_t (&r)[4], uint32_t addr) {
  if constexpr (V == 0) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
  } else if constexpr (V == 1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr) : "memory");
    r[2] = 0u; r[3] = 0u;
  } else if constexpr (V == 2) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
                 : "=r"(r[0]) : "r"(addr) : "memory");
    r[1] = 0u; r[2] = 0u; r[3] = 0u;
  }
}
template <int V> __host__ __device__ constexpr int ldsm_matrices() { return V == 1 ? 2 : (V == 3 ? 1 : 4); }
static const char* ldsm_name(int v) {
  return v == 0 ? "x4" : v == 1 ? "x2" : v == 2 ? "x4.trans" : "x1";
}

// D = A * B + D, m16n8k16, A row-major bf16 (4 regs), B col-major bf16 (2 regs), f32 accum.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4],
                                               const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void write_rec(Rec* rec, u64 c0, u64 c1, u64 aux, u64 g0, u64 g1) {
  Rec r;
  r.clk = c1 - c0;
  r.aux = aux;
  r.gt_ns = g1 - g0;
  r.smid = sm_id();
  rec[blockIdx.x] = r;
}

// ---------------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------------

// One warp spins for `target` cycles: the SM clock with the GPU lightly loaded.
__global__ void k_clock_probe(u64 target, Rec* rec, unsigned* sink) {
  const u64 g0 = gtimer();
  const u64 c0 = clk64();
  u64 c = c0;
  unsigned spins = 0;
  while (c - c0 < target) {
    c = clk64();
    ++spins;
  }
  const u64 g1 = gtimer();
  if (threadIdx.x == 0) write_rec(rec, c0, c, 0, g0, g1);
  atomicXor(sink, spins);
}

// Cost of two back-to-back clock reads (subtracted from the short latencies by the reader).
__global__ void k_clock_overhead(int n, u64* cycles, unsigned* sink) {
  unsigned acc = 0;
  for (int i = 0; i < n; ++i) {
    const u64 t0 = clk64();
    const u64 t1 = clk64();
    acc += static_cast<unsigned>(t1 - t0);
    if (threadIdx.x == 0) cycles[i] = t1 - t0;
  }
  atomicXor(sink, acc);
}

// Writes a large buffer so the next kernel's data is no longer in L2.
__global__ void k_flush(uint4* buf, size_t n16, unsigned v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16;
       i += (size_t)gridDim.x * blockDim.x)
    buf[i] = make_uint4(v, v ^ 1u, v ^ 2u, v ^ 3u);
}

// 1a. cp.async latency, one warp: issue (lanes_active lanes x 16 B), commit, wait_group 0.
// Access i reads src + (i*stride mod window); with warm=1 the loop runs twice and only the
// second pass is recorded (data in L2), with warm=0 once, right after a flush (DRAM).
__global__ void k_cp_async_latency(const char* __restrict__ src, size_t stride, size_t window,
                                   int n_iter, int lanes_active, int warm, u64* cycles,
                                   unsigned* sink) {
  __shared__ __align__(128) uint4 buf[32];
  const int lane = threadIdx.x & 31;
  const uint32_t dst = smem_addr(&buf[lane]);
  buf[lane] = make_uint4(0u, 0u, 0u, 0u);
  __syncwarp();
  unsigned acc = 0;
  for (int pass = warm ? 0 : 1; pass < 2; ++pass) {
    for (int i = 0; i < n_iter; ++i) {
      const char* g = src + ((size_t)i * stride) % window + (size_t)lane * 16;
      pin(g);
      __syncwarp();
      const u64 t0 = clk64();
      if (lane < lanes_active) cp_async_16(dst, g);
      cp_async_commit();
      cp_async_wait<0>();
      const u64 t1 = clk64();
      acc += buf[lane].x + buf[lane].w;  // the thread's own copy: visible after its wait
      if (pass == 1 && lane == 0) cycles[i] = t1 - t0;
    }
  }
  atomicXor(sink, acc);
}

// 1b. Bytes in flight per CTA: every thread issues its share of `bytes` (16 B per cp.async,
// coalesced), one commit, wait_group 0, bar.sync. rec.clk = barrier-to-barrier cycles,
// rec.aux = thread 0's issue-only cycles.
__global__ void k_cp_async_bytes(const char* __restrict__ src, size_t cta_stride, int bytes,
                                 Rec* rec, unsigned* sink) {
  extern __shared__ __align__(128) uint4 dyn[];
  const char* g = src + blockIdx.x * cta_stride;
  pin(g);
  const uint32_t s0 = smem_addr(dyn);
  const int chunks = bytes >> 4;
  __syncthreads();
  const u64 g0 = gtimer();
  const u64 t0 = clk64();
  for (int c = threadIdx.x; c < chunks; c += blockDim.x)
    cp_async_16(s0 + (uint32_t)c * 16u, g + (size_t)c * 16);
  const u64 ti = clk64();
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  const u64 t1 = clk64();
  const u64 g1 = gtimer();
  unsigned acc = 0;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) acc += dyn[c].x ^ dyn[c].z;
  if (threadIdx.x == 0) write_rec(rec, t0, t1, ti - t0, g0, g1);
  atomicXor(sink, acc);
}

// 1c. Sustained cp.async stream: the main loop of an S-stage multistage GEMM without the math.
// Per round: wait_group S-2, bar.sync, read one word of the landed stage, issue the stage S-1
// rounds ahead into the slot read last round, commit (an empty group near the end).
// CTA b reads src + (b % cta_mod) * cta_stride + (round * stage_bytes & window_mask).
template <int S>
__global__ void k_cp_async_stream(const char* __restrict__ src, size_t cta_stride, int cta_mod,
                                  size_t window_mask, int stage_bytes, int rounds, Rec* rec,
                                  unsigned* sink) {
  extern __shared__ __align__(128) uint4 dyn[];
  const char* g = src + (size_t)(blockIdx.x % cta_mod) * cta_stride;
  pin(g);
  const uint32_t s0 = smem_addr(dyn);
  const int chunks = stage_bytes >> 4;
  unsigned acc = 0;
  __syncthreads();
  const u64 g0 = gtimer();
  const u64 t0 = clk64();
#pragma unroll 1
  for (int k = 0; k < S - 1; ++k) {
    const char* gk = g + ((size_t)k * stage_bytes & window_mask);
    const uint32_t sk = s0 + (uint32_t)(k % S) * (uint32_t)stage_bytes;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x)
      cp_async_16(sk + (uint32_t)c * 16u, gk + (size_t)c * 16);
    cp_async_commit();
  }
#pragma unroll 1
  for (int r = 0; r < rounds; ++r) {
    cp_async_wait<S - 2>();
    __syncthreads();
    acc += dyn[(r % S) * chunks + (threadIdx.x % chunks)].y;
    const int k = r + S - 1;
    if (k < rounds) {
      const char* gk = g + ((size_t)k * stage_bytes & window_mask);
      const uint32_t sk = s0 + (uint32_t)(k % S) * (uint32_t)stage_bytes;
      for (int c = threadIdx.x; c < chunks; c += blockDim.x)
        cp_async_16(sk + (uint32_t)c * 16u, gk + (size_t)c * 16);
    }
    cp_async_commit();
  }
  cp_async_wait<0>();
  __syncthreads();
  const u64 t1 = clk64();
  const u64 g1 = gtimer();
  if (threadIdx.x == 0) write_rec(rec, t0, t1, 0, g0, g1);
  atomicXor(sink, acc);
}

// 2a. ldmatrix latency: a chain where each address depends on the previous result (the
// shared memory is zero, so the address never moves). One IADD3 sits in the chain.
template <int V>
__global__ void k_ldsm_latency(int n_iter, Rec* rec, unsigned* sink, uint32_t zero) {
  __shared__ __align__(128) uint32_t sm[2048];
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) sm[i] = zero;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  uint32_t addr = smem_addr(sm) + (uint32_t)lane * 16u;
  const u64 g0 = gtimer();
  const u64 t0 = clk64();
#pragma unroll 1
  for (int i = 0; i < n_iter; ++i) {
#pragma unroll
    for (int u = 0; u < 16; ++u) {
      uint32_t r[4];
      ldsm<V>(r, addr);
      addr = addr + (r[0] + r[ldsm_matrices<V>() - 1]);
    }
  }
  const u64 t1 = clk64();
  const u64 g1 = gtimer();
  if (threadIdx.x == 0) write_rec(rec, t0, t1, 0, g0, g1);
  atomicXor(sink, addr);
}

// 2b. ldmatrix stream: each warp issues 2 x U independent ldmatrix per iteration from
// conflict-free rows (lane i -> 16 B row i of a 512 B block), and reduces the results only
// in the last iteration. A reduction after every load would be placed by ptxas right behind
// that load, putting the load latency back into the stream; behind a branch it cannot be.
// Every load of an iteration reads a different block, and the blocks move by 16 KB from one
// iteration to the next: ptxas merges ldmatrix of equal addresses (seen in the SASS).
// Instructions issued per warp: 2 * U * n_iter.
template <int V, int U>
__global__ void __launch_bounds__(512) k_ldsm_throughput(int n_iter, Rec* rec, unsigned* sink) {
  static_assert(2 * U + 7 <= 32, "a warp's blocks must fit in 16 KB");
  __shared__ __align__(128) uint32_t sm[8192];  // 32 KB = 64 blocks of 512 B
  for (int i = threadIdx.x; i < 8192; i += blockDim.x) sm[i] = (uint32_t)i * 2654435761u;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const uint32_t base = smem_addr(sm) + (uint32_t)((warp * 5) % 8) * 512u + (uint32_t)lane * 16u;
  uint32_t x = 0;
  __syncthreads();
  const u64 g0 = gtimer();
  const u64 t0 = clk64();
#pragma unroll 1
  for (int i = 0; i < n_iter; ++i) {
    const uint32_t it = base + ((uint32_t)i & 1u) * 16384u;
    uint32_t r[2 * U][4];
#pragma unroll
    for (int u = 0; u < 2 * U; ++u) ldsm<V>(r[u], it + (uint32_t)u * 512u);
    if (i == n_iter - 1) {
#pragma unroll
      for (int u = 0; u < 2 * U; ++u) x ^= r[u][0] ^ r[u][1] ^ r[u][2] ^ r[u][3];
    }
  }
  __syncthreads();
  const u64 t1 = clk64();
  const u64 g1 = gtimer();
  if (threadIdx.x == 0) write_rec(rec, t0, t1, 0, g0, g1);
  atomicXor(sink, x);
}

// 3. mma.sync m16n8k16 bf16: MI x NI independent accumulators per warp (the register reuse of
// a MI x NI warp tile: MI A fragments, NI B fragments). MI = NI = 1 is the latency chain.
template <int MI, int NI>
__global__ void k_mma(const uint32_t* __restrict__ in, int n_iter, Rec* rec, unsigned* sink) {
  const int lane = threadIdx.x & 31;
  uint32_t a[MI][4], b[NI][2];
#pragma unroll
  for (int m = 0; m < MI; ++m)
#pragma unroll
    for (int k = 0; k < 4; ++k) a[m][k] = in[(m * 4 + k) * 32 + lane];
#pragma unroll
  for (int n = 0; n < NI; ++n)
#pragma unroll
    for (int k = 0; k < 2; ++k) b[n][k] = in[512 + (n * 2 + k) * 32 + lane];
  float d[MI][NI][4];
#pragma unroll
  for (int m = 0; m < MI; ++m)
#pragma unroll
    for (int n = 0; n < NI; ++n)
#pragma unroll
      for (int k = 0; k < 4; ++k) d[m][n][k] = 0.f;
  __syncthreads();
  const u64 g0 = gtimer();
  const u64 t0 = clk64();
#pragma unroll 2
  for (int i = 0; i < n_iter; ++i) {
#pragma unroll
    for (int m = 0; m < MI; ++m)
#pragma unroll
      for (int n = 0; n < NI; ++n) mma_bf16_16816(d[m][n], a[m], b[n]);
  }
  __syncthreads();
  const u64 t1 = clk64();
  const u64 g1 = gtimer();
  float s = 0.f;
#pragma unroll
  for (int m = 0; m < MI; ++m)
#pragma unroll
    for (int n = 0; n < NI; ++n)
#pragma unroll
      for (int k = 0; k < 4; ++k) s += d[m][n][k];
  if (threadIdx.x == 0) write_rec(rec, t0, t1, 0, g0, g1);
  atomicXor(sink, __float_as_uint(s));
}

// 4a. bar.sync 0 back to back, the whole CTA.
__global__ void k_bar_sync(int n_iter, Rec* rec, unsigned* sink) {
  __syncthreads();
  const u64 g0 = gtimer();
  const u64 t0 = clk64();
#pragma unroll 1
  for (int i = 0; i < n_iter; ++i) {
#pragma unroll
    for (int u = 0; u < 16; ++u) asm volatile("bar.sync 0;" : : : "memory");
  }
  const u64 t1 = clk64();
  const u64 g1 = gtimer();
  if (threadIdx.x == 0) write_rec(rec, t0, t1, 0, g0, g1);
  atomicXor(sink, static_cast<unsigned>(t1 - t0));
}

// 4b. cp.async.wait_group with nothing pending. MODE 0: wait_group 0 alone; MODE 1:
// commit_group (an empty group) then wait_group 0; MODE 2: wait_group 1 alone.
template <int MODE>
__global__ void k_wait_empty(int n_iter, Rec* rec, unsigned* sink) {
  __syncthreads();
  const u64 g0 = gtimer();
  const u64 t0 = clk64();
#pragma unroll 1
  for (int i = 0; i < n_iter; ++i) {
#pragma unroll
    for (int u = 0; u < 16; ++u) {
      if constexpr (MODE == 1) cp_async_commit();
      if constexpr (MODE == 2) cp_async_wait<1>(); else cp_async_wait<0>();
    }
  }
  const u64 t1 = clk64();
  const u64 g1 = gtimer();
  if (threadIdx.x == 0) write_rec(rec, t0, t1, 0, g0, g1);
  atomicXor(sink, static_cast<unsigned>(t1 - t0));
}

// ---------------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------------
namespace {

struct Ctx {
  cudaDeviceProp prop;
  int sms = 0;
  int clock_khz = 0;
  unsigned* sink = nullptr;
  Rec* rec = nullptr;       // device, one per block (max 4096 blocks)
  u64* samples = nullptr;   // device, per-iteration samples
  char* big = nullptr;      // DRAM-sized source buffer
  size_t big_bytes = 0;
  uint4* flush = nullptr;   // flush buffer
  size_t flush_bytes = 0;
  uint32_t* frag = nullptr; // mma operands
  cudaEvent_t e0, e1;
};

const int kMaxBlocks = 4096;
const int kMaxSamples = 4096;

std::string jnum(double v) {
  char b[64];
  snprintf(b, sizeof b, "%.6g", v);
  return b;
}

struct Stats {
  double min = 0, p10 = 0, median = 0, mean = 0, p90 = 0, max = 0;
  size_t n = 0;
};

Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = v.size();
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  s.p10 = v[(v.size() - 1) / 10];
  s.p90 = v[(v.size() - 1) * 9 / 10];
  double t = 0;
  for (double x : v) t += x;
  s.mean = t / v.size();
  return s;
}

std::string jstats(const Stats& s) {
  return "{\"n\": " + std::to_string(s.n) + ", \"min\": " + jnum(s.min) + ", \"p10\": " +
         jnum(s.p10) + ", \"median\": " + jnum(s.median) + ", \"mean\": " + jnum(s.mean) +
         ", \"p90\": " + jnum(s.p90) + ", \"max\": " + jnum(s.max) + "}";
}

// One measurement line: "@@ {json}". `fields` is a json fragment without braces.
void emit(const std::string& fields) { printf("@@ {%s}\n", fields.c_str()); fflush(stdout); }

std::vector<Rec> fetch_recs(const Ctx& c, int n) {
  std::vector<Rec> r(n);
  CK(cudaMemcpy(r.data(), c.rec, n * sizeof(Rec), cudaMemcpyDeviceToHost));
  return r;
}

std::vector<u64> fetch_samples(const Ctx& c, int n) {
  std::vector<u64> r(n);
  CK(cudaMemcpy(r.data(), c.samples, n * sizeof(u64), cudaMemcpyDeviceToHost));
  return r;
}

void flush_l2(const Ctx& c) {
  static unsigned v = 1;
  k_flush<<<c.sms * 4, 512>>>(c.flush, c.flush_bytes / 16, v++);
  CK_LAUNCH();
}

int distinct_sms(const std::vector<Rec>& r) {
  std::vector<u64> ids;
  for (const Rec& x : r) ids.push_back(x.smid);
  std::sort(ids.begin(), ids.end());
  return static_cast<int>(std::unique(ids.begin(), ids.end()) - ids.begin());
}

// --- clock -----------------------------------------------------------------------------------
void run_clock(Ctx& c) {
  const u64 target = 20000000ull;  // ~10 ms
  k_clock_probe<<<1, 32>>>(target, c.rec, c.sink);
  CK_LAUNCH();
  k_clock_probe<<<1, 32>>>(target, c.rec, c.sink);
  CK_LAUNCH();
  Rec r = fetch_recs(c, 1)[0];
  emit("\"name\": \"clock_probe\", \"params\": {\"warps\": 1, \"ctas\": 1}, \"elapsed_clk\": " +
       std::to_string(r.clk) + ", \"elapsed_gt_ns\": " + std::to_string(r.gt_ns));

  const int n = 1024;
  k_clock_overhead<<<1, 32>>>(n, c.samples, c.sink);
  CK_LAUNCH();
  std::vector<u64> s = fetch_samples(c, n);
  std::vector<double> v(s.begin() + 16, s.end());
  Stats st = stats_of(v);
  emit("\"name\": \"clock64_overhead\", \"params\": {}, \"cycles\": " + jnum(st.median) +
       ", \"cycles_stats\": " + jstats(st));
}

// --- 1a cp.async latency ---------------------------------------------------------------------
void run_cp_async_latency(Ctx& c) {
  struct Case { const char* source; size_t stride; size_t window; int lanes; };
  const size_t MB = 1 << 20;
  const Case cases[] = {
      {"L2", 4096 + 512, 4 * MB, 32},
      {"L2", 4096 + 512, 4 * MB, 1},
      {"DRAM", 4096 + 512, 0, 32},
      {"DRAM", 4096 + 512, 0, 1},
      {"DRAM_page_stride", 2 * MB + 4096 + 512, 0, 32},
  };
  const int n_iter = 512;
  for (const Case& k : cases) {
    const bool warm = std::string(k.source) == "L2";
    const size_t window = warm ? k.window : c.big_bytes;
    if (!warm && (size_t)n_iter * k.stride + 512 > c.big_bytes) {
      fprintf(stderr, "cp.async latency case does not fit the buffer\n");
      exit(1);
    }
    std::vector<double> v;
    const int reps = warm ? 2 : 4;
    for (int rep = 0; rep < reps; ++rep) {
      // DRAM cases: each repetition starts at a different part of the big buffer, after a flush.
      const char* src = c.big + (warm ? 0 : (size_t)rep * 64 * MB + 8192);
      if (!warm) flush_l2(c);
      k_cp_async_latency<<<1, 32>>>(src, k.stride, window, n_iter, k.lanes, warm ? 1 : 0,
                                    c.samples, c.sink);
      CK_LAUNCH();
      std::vector<u64> s = fetch_samples(c, n_iter);
      // the first few accesses of a cold run also pay instruction-cache and TLB warm-up
      for (int i = 8; i < n_iter; ++i) v.push_back(static_cast<double>(s[i]));
    }
    Stats st = stats_of(v);
    emit(std::string("\"name\": \"cp_async_latency\", \"params\": {\"source\": \"") + k.source +
         "\", \"lanes\": " + std::to_string(k.lanes) + ", \"bytes_per_warp\": " +
         std::to_string(16 * k.lanes) + ", \"stride_bytes\": " + std::to_string(k.stride) +
         "}, \"cycles\": " + jnum(st.median) + ", \"cycles_stats\": " + jstats(st));
  }
}

// --- 1b cp.async bytes in flight per CTA -----------------------------------------------------
void run_cp_async_bytes(Ctx& c) {
  const int kb_sizes[] = {4, 8, 16, 32, 64, 128, 192};
  const int thread_counts[] = {128, 256};
  CK(cudaFuncSetAttribute(k_cp_async_bytes, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          192 * 1024));
  for (int src_dram = 0; src_dram < 2; ++src_dram) {
    for (int threads : thread_counts) {
      for (int ctas : {1, c.sms}) {
        for (int kb : kb_sizes) {
          const int bytes = kb * 1024;
          const size_t region = (size_t)ctas * bytes;
          const int trials = ctas == 1 ? 16 : 8;
          std::vector<double> cyc, issue, slowest;
          int nsm = 0;
          // L2 source: one fixed region, loaded once before the timed trials.
          if (!src_dram) {
            k_cp_async_bytes<<<ctas, threads, bytes>>>(c.big, bytes, bytes, c.rec, c.sink);
            CK_LAUNCH();
          }
          for (int t = 0; t < trials; ++t) {
            size_t off = 0;
            if (src_dram) {
              off = ((size_t)(t + 1) * region + 4096) % (c.big_bytes - region);
              off &= ~(size_t)4095;
              flush_l2(c);
            }
            k_cp_async_bytes<<<ctas, threads, bytes>>>(c.big + off, bytes, bytes, c.rec,
                                                       c.sink);
            CK_LAUNCH();
            std::vector<Rec> r = fetch_recs(c, ctas);
            nsm = std::max(nsm, distinct_sms(r));
            double worst = 0;
            for (const Rec& x : r) {
              cyc.push_back(static_cast<double>(x.clk));
              issue.push_back(static_cast<double>(x.aux));
              worst = std::max(worst, static_cast<double>(x.clk));
            }
            slowest.push_back(worst);
          }
          Stats st = stats_of(cyc), si = stats_of(issue), sw = stats_of(slowest);
          emit(std::string("\"name\": \"cp_async_bytes_in_flight\", \"params\": {\"source\": \"") +
               (src_dram ? "DRAM" : "L2") + "\", \"bytes_per_cta\": " + std::to_string(bytes) +
               ", \"threads\": " + std::to_string(threads) + ", \"ctas\": " +
               std::to_string(ctas) + ", \"cp_async_per_thread\": " +
               std::to_string(bytes / 16 / threads) + "}, \"cycles\": " + jnum(st.median) +
               ", \"cycles_stats\": " + jstats(st) + ", \"issue_cycles_thread0\": " +
               jnum(si.median) + ", \"slowest_cta_cycles_median\": " + jnum(sw.median) +
               ", \"distinct_sms\": " + std::to_string(nsm));
        }
      }
    }
  }
}

// --- 1c sustained cp.async stream -------------------------------------------------------------
// Sources: "DRAM" (every CTA its own fresh region, L2 flushed before each launch),
// "L2_shared" (8 windows of 2 MB, each read by every 8th CTA in step, as the CTAs of a GEMM
// row share an A tile), "L2_private" (every CTA its own 128 KB window).
template <int S>
void run_stream_case(Ctx& c, const char* source, int stage_kb, int threads) {
  const std::string src(source);
  const int stage = stage_kb * 1024;
  const int smem = S * stage;
  CK(cudaFuncSetAttribute(k_cp_async_stream<S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          smem));
  const size_t MB = 1 << 20;
  int rounds, cta_mod;
  size_t cta_stride, window_mask;
  const bool dram = src == "DRAM";
  if (dram) {
    rounds = (int)(((size_t)1536 * MB / c.sms) / stage);
    cta_stride = (size_t)rounds * stage;
    window_mask = ~(size_t)0;
    cta_mod = c.sms;
  } else if (src == "L2_shared") {
    rounds = 512;
    cta_stride = 512 * 1024;
    window_mask = 2 * MB - 1;
    cta_mod = 8;
  } else {
    rounds = 512;
    cta_stride = 256 * 1024;
    window_mask = 128 * 1024 - 1;
    cta_mod = c.sms;
  }
  if (!dram) {  // load the windows into L2
    k_cp_async_stream<S><<<c.sms, threads, smem>>>(c.big, cta_stride, cta_mod, window_mask,
                                                   stage, rounds, c.rec, c.sink);
    CK_LAUNCH();
  }
  const int repeats = 3;
  std::vector<double> cyc, mhz, ev;
  int nsm = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    if (dram) flush_l2(c);
    CK(cudaEventRecord(c.e0));
    k_cp_async_stream<S><<<c.sms, threads, smem>>>(c.big, cta_stride, cta_mod, window_mask,
                                                   stage, rounds, c.rec, c.sink);
    CK(cudaEventRecord(c.e1));
    CK_LAUNCH();
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, c.e0, c.e1));
    ev.push_back(ms);
    std::vector<Rec> r = fetch_recs(c, c.sms);
    nsm = std::max(nsm, distinct_sms(r));
    for (const Rec& x : r) {
      cyc.push_back((double)x.clk);
      if (x.gt_ns > 0) mhz.push_back(1000.0 * (double)x.clk / (double)x.gt_ns);
    }
  }
  Stats st = stats_of(cyc), se = stats_of(ev);
  const double per_cta = (double)rounds * stage;
  emit("\"name\": \"cp_async_stream\", \"params\": {\"source\": \"" + src +
       "\", \"stages\": " + std::to_string(S) + ", \"stage_bytes\": " + std::to_string(stage) +
       ", \"threads\": " + std::to_string(threads) + ", \"ctas\": " + std::to_string(c.sms) +
       ", \"rounds\": " + std::to_string(rounds) + ", \"repeats\": " +
       std::to_string(repeats) + "}, \"cycles\": " + jnum(st.median / rounds) +
       ", \"cycles_stats_per_cta\": " + jstats(st) + ", \"bytes_per_cta\": " + jnum(per_cta) +
       ", \"elapsed_clk\": " + jnum(st.median) + ", \"mhz_in_kernel\": " +
       jnum(stats_of(mhz).median) + ", \"event_ms\": " + jnum(se.median) +
       ", \"event_ms_stats\": " + jstats(se) + ", \"distinct_sms\": " + std::to_string(nsm));
}

void run_cp_async_stream(Ctx& c) {
  for (const char* source : {"L2_shared", "L2_private", "DRAM"}) {
    for (int kb : {16, 48}) {
      run_stream_case<2>(c, source, kb, 256);
      run_stream_case<3>(c, source, kb, 256);
      run_stream_case<4>(c, source, kb, 256);
    }
  }
}

// --- 3b sustained mma.sync: the whole GPU busy for about 3 s, then one timed launch -----------
void run_mma_sustained(Ctx& c) {
  const int warps = 8, n_iter = 65536;
  CK(cudaEventRecord(c.e0));
  int launches = 0;
  float ms = 0;
  while (ms < 3000.f && launches < 2000) {
    k_mma<2, 4><<<c.sms, warps * 32>>>(c.frag, n_iter, c.rec, c.sink);
    CK(cudaGetLastError());
    ++launches;
    if (launches % 16 == 0) {
      CK(cudaEventRecord(c.e1));
      CK(cudaEventSynchronize(c.e1));
      CK(cudaEventElapsedTime(&ms, c.e0, c.e1));
    }
  }
  CK_LAUNCH();
}
// --- 2 ldmatrix ------------------------------------------------------------------------------
template <int V>
void run_ldsm_variant(Ctx& c) {
  {
    const int n_iter = 4096;
    k_ldsm_latency<V><<<1, 32>>>(8, c.rec, c.sink, 0u);  // warm-up
    CK_LAUNCH();
    k_ldsm_latency<V><<<1, 32>>>(n_iter, c.rec, c.sink, 0u);
    CK_LAUNCH();
    Rec r = fetch_recs(c, 1)[0];
    const double per = static_cast<double>(r.clk) / (n_iter * 16.0);
    emit(std::string("\"name\": \"ldmatrix_latency\", \"params\": {\"variant\": \"") +
         ldsm_name(V) + "\", \"matrices\": " + std::to_string(ldsm_matrices<V>()) +
         ", \"chain_extra\": \"1 IADD3\"}, \"cycles\": " + jnum(per) + ", \"count\": " +
         std::to_string(n_iter * 16) + ", \"elapsed_clk\": " + std::to_string(r.clk) +
         ", \"elapsed_gt_ns\": " + std::to_string(r.gt_ns));
  }
  const int U = 12;
  const int n_iter = 2048;
  for (int warps : {1, 2, 4, 8, 16}) {
    k_ldsm_throughput<V, U><<<1, warps * 32>>>(8, c.rec, c.sink);  // warm-up
    CK_LAUNCH();
    k_ldsm_throughput<V, U><<<1, warps * 32>>>(n_iter, c.rec, c.sink);
    CK_LAUNCH();
    Rec r = fetch_recs(c, 1)[0];
    const double per_warp = 2.0 * U * n_iter;
    const double total = per_warp * warps;
    emit(std::string("\"name\": \"ldmatrix_throughput\", \"params\": {\"variant\": \"") +
         ldsm_name(V) + "\", \"matrices\": " + std::to_string(ldsm_matrices<V>()) +
         ", \"warps_per_sm\": " + std::to_string(warps) + ", \"independent_per_warp\": " +
         std::to_string(2 * U) + "}, \"cycles\": " + jnum(r.clk / per_warp) +
         ", \"cycles_per_instr_per_sm\": " + jnum(r.clk / total) + ", \"count\": " +
         jnum(total) + ", \"bytes\": " + jnum(total * ldsm_matrices<V>() * 128.0) +
         ", \"elapsed_clk\": " + std::to_string(r.clk) + ", \"elapsed_gt_ns\": " +
         std::to_string(r.gt_ns));
  }
}

// --- 3 mma.sync ------------------------------------------------------------------------------
template <int MI, int NI>
void run_mma_case(Ctx& c, int warps, int ctas, int n_iter, const char* name) {
  k_mma<MI, NI><<<ctas, warps * 32>>>(c.frag, 4, c.rec, c.sink);  // warm-up
  CK_LAUNCH();
  CK(cudaEventRecord(c.e0));
  k_mma<MI, NI><<<ctas, warps * 32>>>(c.frag, n_iter, c.rec, c.sink);
  CK(cudaEventRecord(c.e1));
  CK_LAUNCH();
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, c.e0, c.e1));
  std::vector<Rec> r = fetch_recs(c, ctas);
  double worst = 0, worst_gt = 0;
  std::vector<double> per_cta;
  for (const Rec& x : r) {
    worst = std::max(worst, (double)x.clk);
    worst_gt = std::max(worst_gt, (double)x.gt_ns);
    per_cta.push_back((double)x.clk);
  }
  Stats st = stats_of(per_cta);
  // the SM clock inside the kernel: cycles over %globaltimer ns, median over the CTAs
  std::vector<double> mhz;
  for (const Rec& x : r)
    if (x.gt_ns > 0) mhz.push_back(1000.0 * (double)x.clk / (double)x.gt_ns);
  const double mhz_med = stats_of(mhz).median;
  const double per_warp = (double)n_iter * MI * NI;
  const double per_cta_mma = per_warp * warps;
  const double total = per_cta_mma * ctas;
  emit(std::string("\"name\": \"") + name + "\", \"params\": {\"warps_per_sm\": " +
       std::to_string(warps) + ", \"chains_per_warp\": " + std::to_string(MI * NI) +
       ", \"warp_tile_frags\": \"" + std::to_string(MI) + "x" + std::to_string(NI) +
       "\", \"ctas\": " + std::to_string(ctas) + "}, \"cycles\": " +
       jnum(st.median / per_warp) + ", \"cycles_per_mma_per_sm\": " +
       jnum(st.median / per_cta_mma) + ", \"count\": " + jnum(total) + ", \"flops\": " +
       jnum(total * 4096.0) + ", \"elapsed_clk\": " + jnum(st.median) +
       ", \"slowest_cta_clk\": " + jnum(worst) + ", \"elapsed_gt_ns\": " + jnum(worst_gt) +
       ", \"event_ms\": " + jnum(ms) + ", \"mhz_in_kernel\": " + jnum(mhz_med) +
       ", \"distinct_sms\": " + std::to_string(distinct_sms(r)));
}

void run_mma(Ctx& c) {
  // latency chain
  run_mma_case<1, 1>(c, 1, 1, 16384, "mma_latency");
  // one warp, 2..16 independent accumulators
  run_mma_case<1, 2>(c, 1, 1, 16384, "mma_throughput");
  run_mma_case<2, 2>(c, 1, 1, 8192, "mma_throughput");
  run_mma_case<2, 4>(c, 1, 1, 8192, "mma_throughput");
  run_mma_case<4, 4>(c, 1, 1, 4096, "mma_throughput");
  // one SM: 2/4/8/16 warps
  for (int w : {2, 4, 8, 16}) run_mma_case<2, 4>(c, w, 1, 8192, "mma_throughput");
  run_mma_case<4, 4>(c, 8, 1, 4096, "mma_throughput");
  // whole GPU: one CTA per SM
  for (int w : {4, 8, 16}) run_mma_case<2, 4>(c, w, c.sms, 32768, "mma_throughput");
  run_mma_case<4, 4>(c, 8, c.sms, 16384, "mma_throughput");
}

// --- 4 barriers and empty waits --------------------------------------------------------------
void run_sync(Ctx& c) {
  const int n_iter = 4096;
  for (int threads : {32, 128, 256, 512, 1024}) {
    k_bar_sync<<<1, threads>>>(8, c.rec, c.sink);
    CK_LAUNCH();
    k_bar_sync<<<1, threads>>>(n_iter, c.rec, c.sink);
    CK_LAUNCH();
    Rec r = fetch_recs(c, 1)[0];
    emit("\"name\": \"bar_sync\", \"params\": {\"threads\": " + std::to_string(threads) +
         "}, \"cycles\": " + jnum(r.clk / (n_iter * 16.0)) + ", \"count\": " +
         std::to_string(n_iter * 16) + ", \"elapsed_clk\": " + std::to_string(r.clk) +
         ", \"elapsed_gt_ns\": " + std::to_string(r.gt_ns));
  }
  const char* modes[] = {"wait_group 0", "commit_group + wait_group 0", "wait_group 1"};
  for (int mode = 0; mode < 3; ++mode) {
    for (int threads : {32, 128}) {
      for (int pass = 0; pass < 2; ++pass) {
        const int n = pass ? n_iter : 8;
        if (mode == 0) k_wait_empty<0><<<1, threads>>>(n, c.rec, c.sink);
        if (mode == 1) k_wait_empty<1><<<1, threads>>>(n, c.rec, c.sink);
        if (mode == 2) k_wait_empty<2><<<1, threads>>>(n, c.rec, c.sink);
        CK_LAUNCH();
      }
      Rec r = fetch_recs(c, 1)[0];
      emit(std::string("\"name\": \"cp_async_wait_empty\", \"params\": {\"op\": \"") +
           modes[mode] + "\", \"threads\": " + std::to_string(threads) + "}, \"cycles\": " +
           jnum(r.clk / (n_iter * 16.0)) + ", \"count\": " + std::to_string(n_iter * 16) +
           ", \"elapsed_clk\": " + std::to_string(r.clk) + ", \"elapsed_gt_ns\": " +
           std::to_string(r.gt_ns));
    }
  }
}

bool want(const std::vector<std::string>& only, const char* what) {
  if (only.empty()) return true;
  return std::find(only.begin(), only.end(), what) != only.end();
}

}  // namespace

int main(int argc, char** argv) {
  // Optional arguments: the groups to run (clock, cp_async, ldmatrix, mma, sync); default all.
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a != "clock" && a != "cp_async" && a != "ldmatrix" && a != "mma" && a != "sync") {
      fprintf(stderr, "microbench: unknown group '%s' (clock, cp_async, ldmatrix, mma, sync)\n",
              argv[i]);
      return 2;
    }
    only.push_back(a);
  }

  Ctx c;
  int dev = 0;
  CK(cudaSetDevice(dev));
  CK(cudaGetDeviceProperties(&c.prop, dev));
  CK(cudaDeviceGetAttribute(&c.sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaDeviceGetAttribute(&c.clock_khz, cudaDevAttrClockRate, dev));
  int mem_khz = 0, bus_bits = 0, l2 = 0, smem_optin = 0;
  CK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev));
  CK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev));
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  CK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (c.prop.major != 9) {
    fprintf(stderr, "microbench: needs a compute capability 9.x GPU (sm_90a), found %d.%d\n",
            c.prop.major, c.prop.minor);
    return 2;
  }
  printf("@@ {\"name\": \"device\", \"params\": {\"gpu\": \"%s\", \"cc\": \"%d.%d\", \"sms\": %d, "
         "\"max_sm_clock_khz\": %d, \"mem_clock_khz\": %d, \"bus_bits\": %d, \"l2_bytes\": %d, "
         "\"smem_per_block_optin\": %d, \"global_mem_bytes\": %zu}}\n",
         c.prop.name, c.prop.major, c.prop.minor, c.sms, c.clock_khz, mem_khz, bus_bits, l2,
         smem_optin, c.prop.totalGlobalMem);
  fflush(stdout);

  CK(cudaMalloc(&c.sink, 64));
  CK(cudaMemset(c.sink, 0, 64));
  CK(cudaMalloc(&c.rec, kMaxBlocks * sizeof(Rec)));
  CK(cudaMalloc(&c.samples, kMaxSamples * sizeof(u64)));
  c.big_bytes = (size_t)2 << 30;  // 2 GiB: 40x the L2
  CK(cudaMalloc(&c.big, c.big_bytes));
  CK(cudaMemset(c.big, 0x3c, c.big_bytes));
  c.flush_bytes = (size_t)256 << 20;  // 256 MiB: 5x the L2
  CK(cudaMalloc(&c.flush, c.flush_bytes));
  // mma operands: bf16 pairs of small values from a fixed hash (never zeros, never inf).
  {
    std::vector<uint32_t> h(1024);
    uint32_t x = 12345u;
    for (auto& w : h) {
      x = x * 1664525u + 1013904223u;
      const uint32_t lo = 0x3c00u | ((x >> 8) & 0x7fu) | ((x >> 1) & 0x8000u);   // |v| ~ 2^-7
      const uint32_t hi = 0x3c00u | ((x >> 16) & 0x7fu) | ((x << 4) & 0x8000u);
      w = lo | (hi << 16);
    }
    CK(cudaMalloc(&c.frag, h.size() * sizeof(uint32_t)));
    CK(cudaMemcpy(c.frag, h.data(), h.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
  }
  CK(cudaEventCreate(&c.e0));
  CK(cudaEventCreate(&c.e1));
  CK(cudaDeviceSynchronize());

  if (want(only, "clock")) run_clock(c);
  if (want(only, "cp_async")) {
    run_cp_async_latency(c);
    run_cp_async_bytes(c);
    run_cp_async_stream(c);
  }
  if (want(only, "ldmatrix")) {
    run_ldsm_variant<0>(c);
    run_ldsm_variant<1>(c);
    run_ldsm_variant<2>(c);
    run_ldsm_variant<3>(c);
  }
  if (want(only, "mma")) {
    run_mma(c);
    // after ~3 s of full load: the clock a long GEMM runs at
    run_mma_sustained(c);
    run_mma_case<2, 4>(c, 8, c.sms, 65536, "mma_throughput_sustained");
  }
  if (want(only, "sync")) run_sync(c);
  if (want(only, "clock")) run_clock(c);  // again: the clock after the heavy kernels

  unsigned sink = 0;
  CK(cudaMemcpy(&sink, c.sink, sizeof sink, cudaMemcpyDeviceToHost));
  printf("@@ {\"name\": \"checksum\", \"params\": {}, \"sink\": %u}\n", sink);
  CK(cudaEventDestroy(c.e0));
  CK(cudaEventDestroy(c.e1));
  CK(cudaFree(c.frag));
  CK(cudaFree(c.flush));
  CK(cudaFree(c.big));
  CK(cudaFree(c.samples));
  CK(cudaFree(c.rec));
  CK(cudaFree(c.sink));
  return 0;
}
