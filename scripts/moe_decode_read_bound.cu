/*
 * A lower bound for a MoE decode layer at B = 1: how long do plain reads of the touched experts'
 * bytes (codes and scales of gate_up and down) take, with no math, in the launch structures a layer
 * could use? The decode target is <= 1.4x (touched bytes / copy bandwidth); a layer cannot be faster
 * than the structure it is built on.
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/mdrb scripts/moe_decode_read_bound.cu && /tmp/mdrb [H I E k [same]]
 *
 * Default shape: Qwen3.5-397B-A17B (H = 4096, I = 1024, 512 experts, top-10); DeepSeek-R1 is
 * 7168 2048 256 8. NVFP4 bytes per expert: codes N * K / 2 plus one scale byte per 16 codes; an
 * expert's gate_up and down are each one contiguous blob here (the library keeps codes and scales
 * apart: two streams instead of one, the same bytes).
 *
 * Each launch reads k distinct experts drawn at random (the next launch draws others, so the reads
 * come from DRAM, not from the 50 MB L2), launched back to back with an event pair around each, as
 * fp4kit bench times a layer; the median of 60 after 10 warm-up launches. With "same", every launch
 * reads the same k experts, as fp4kit bench's layer calls do (whatever of them the L2 keeps).
 *
 * Structures:
 *  - two-launch:   gate_up's blobs in one launch, then down's (a layer's two GEMMs, no small kernels);
 *  - one-launch:   both in one grid-stride launch (no dependency between them: the floor of any
 *                  layer that reads each byte once);
 *  - fused-smem:   one CTA per SM (cooperative launch): each CTA starts a bulk copy of its share of
 *                  down's bytes into shared memory, streams its share of gate_up's, waits for its
 *                  copy, passes a grid barrier (down needs all of gate_up's output) and reads its
 *                  down share from shared memory. Only where the shares fit in shared memory;
 *  - fused-l2:     the same with an L2 prefetch of the down share instead of the copy, and down's
 *                  reads after the barrier from L2;
 *  - fused-after:  the same without any prefetch: down's reads start after the barrier.
 * The fused forms are the structure of a one-kernel layer; their time less one-launch's is what the
 * gate_up -> down dependency costs at the least.
 */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <cuda_runtime.h>

namespace {

constexpr int kMaxK = 16;
struct blobs {
  const uint8_t *p[kMaxK];
  int n;
  int64_t bytes; /* per blob; a multiple of 16 */
};

__device__ __forceinline__ uint4 ld_stream(const uint8_t *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

/* Bytes [b0, b1) of every blob, 16 per thread per step, four loads in flight. */
__device__ __forceinline__ uint32_t read_share(const blobs &b, int64_t b0, int64_t b1, int64_t tid, int64_t nthreads) {
  uint32_t acc = 0;
  for (int j = 0; j < b.n; j++) {
    const uint8_t *base = b.p[j];
    int64_t i = b0 + tid * 16;
    for (; i + 3 * nthreads * 16 < b1; i += 4 * nthreads * 16) {
      const uint4 v0 = ld_stream(base + i), v1 = ld_stream(base + i + nthreads * 16),
                  v2 = ld_stream(base + i + 2 * nthreads * 16), v3 = ld_stream(base + i + 3 * nthreads * 16);
      acc ^= fold(v0) ^ fold(v1) ^ fold(v2) ^ fold(v3);
    }
    for (; i < b1; i += nthreads * 16) acc ^= fold(ld_stream(base + i));
  }
  return acc;
}

__global__ void __launch_bounds__(256) flat_kernel(blobs a, blobs b, uint32_t *sink) {
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, nt = (int64_t)gridDim.x * blockDim.x;
  uint32_t acc = read_share(a, 0, a.bytes, tid, nt);
  if (b.n) acc ^= read_share(b, 0, b.bytes, tid, nt);
  sink[tid] = acc;
}

/* A CTA's share of a blob: 16-byte aligned pieces, the last CTA takes the rest. */
__device__ __forceinline__ void share(int64_t bytes, int c, int g, int64_t *b0, int64_t *b1) {
  const int64_t per = (bytes / g + 15) / 16 * 16;
  *b0 = min(bytes, per * c);
  *b1 = min(bytes, per * (c + 1));
}

enum { PREFETCH_SMEM = 0, PREFETCH_L2 = 1, PREFETCH_NONE = 2 };

template <int MODE>
__global__ void __launch_bounds__(512, 1) fused_kernel(blobs up, blobs down, unsigned *counter, unsigned target,
                                                      uint32_t *sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bar;
  const int c = blockIdx.x, g = gridDim.x, t = threadIdx.x, nt = blockDim.x;
  int64_t d0, d1;
  share(down.bytes, c, g, &d0, &d1);
  const unsigned bar_addr = (unsigned)__cvta_generic_to_shared(&bar);
  if (t == 0 && MODE != PREFETCH_NONE) {
    if (MODE == PREFETCH_SMEM) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_addr));
      asm volatile("fence.mbarrier_init.release.cluster;");
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_addr),
                   "r"((unsigned)((d1 - d0) * down.n)));
    }
    for (int j = 0; j < down.n; j++) {
      if (d1 <= d0) break;
      if (MODE == PREFETCH_SMEM) {
        const unsigned dst = (unsigned)__cvta_generic_to_shared(smem + (d1 - d0) * j);
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                     "l"(down.p[j] + d0), "r"((unsigned)(d1 - d0)), "r"(bar_addr)
                     : "memory");
      } else {
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(down.p[j] + d0), "r"((unsigned)(d1 - d0))
                     : "memory");
      }
    }
  }
  int64_t u0, u1;
  share(up.bytes, c, g, &u0, &u1);
  uint32_t acc = read_share(up, u0, u1, t, nt);
  if (MODE == PREFETCH_SMEM) {
    __syncthreads(); /* the barrier's init is visible */
    if (d1 > d0) {
      uint32_t done = 0;
      while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(bar_addr)
                     : "memory");
    }
  }
  /* Grid barrier: gate_up's output would now be complete everywhere. */
  __syncthreads();
  if (t == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
    unsigned seen = 0;
    do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    while (seen < target);
  }
  __syncthreads();
  if (MODE == PREFETCH_SMEM) {
    const int64_t bytes = (d1 - d0) * down.n;
    for (int64_t i = (int64_t)t * 16; i < bytes; i += (int64_t)nt * 16) acc ^= fold(*(const uint4 *)(smem + i));
  } else {
    acc ^= read_share(down, d0, d1, t, nt);
  }
  sink[(int64_t)c * nt + t] = acc;
}

void check(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "moe_decode_read_bound: %s: %s\n", what, cudaGetErrorString(e));
  exit(1);
}

} // namespace

int main(int argc, char **argv) {
  const int64_t H = argc > 1 ? atoll(argv[1]) : 4096, I = argc > 2 ? atoll(argv[2]) : 1024;
  const int E = argc > 3 ? atoi(argv[3]) : 512, k = argc > 4 ? atoi(argv[4]) : 10;
  const bool same = argc > 5 && std::string(argv[5]) == "same";
  if (H < 256 || I < 256 || H % 256 || I % 256 || k < 1 || k > kMaxK || E < 2 * k) {
    fprintf(stderr, "moe_decode_read_bound: H, I multiples of 256, 1 <= k <= %d, E >= 2k\n", kMaxK);
    return 2;
  }
  const int64_t up_bytes = 2 * I * H / 2 + 2 * I * H / 16, down_bytes = H * I / 2 + H * I / 16;
  const double touched = (double)k * (double)(up_bytes + down_bytes);
  std::vector<uint8_t *> up(E), down(E);
  for (int e = 0; e < E; e++) {
    check(cudaMalloc(&up[e], up_bytes), "cudaMalloc");
    check(cudaMalloc(&down[e], down_bytes), "cudaMalloc");
    check(cudaMemset(up[e], 0x5A, up_bytes), "cudaMemset");
    check(cudaMemset(down[e], 0xA5, down_bytes), "cudaMemset");
  }
  uint32_t *sink;
  unsigned *counter;
  check(cudaMalloc(&sink, (size_t)64 << 20), "cudaMalloc");
  check(cudaMalloc(&counter, sizeof(unsigned)), "cudaMalloc");
  int sms = 0, smem_max = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  printf("H = %lld, I = %lld, %d experts, top-%d: %.1f MB touched (gate_up %.2f MB + down %.2f MB per expert), %d SMs, %s\n",
         (long long)H, (long long)I, E, k, touched / 1e6, up_bytes / 1e6, down_bytes / 1e6, sms,
         same ? "the same experts every launch" : "other experts every launch");

  uint64_t rng = 0x9E3779B97F4A7C15ull;
  auto draw = [&](blobs *u, blobs *d) { /* k distinct experts */
    if (same) rng = 0x9E3779B97F4A7C15ull;
    std::vector<int> ids;
    while ((int)ids.size() < k) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      const int e = (int)((rng >> 33) % (uint64_t)E);
      if (std::find(ids.begin(), ids.end(), e) == ids.end()) ids.push_back(e);
    }
    u->n = d->n = k;
    u->bytes = up_bytes;
    d->bytes = down_bytes;
    for (int j = 0; j < k; j++) u->p[j] = up[ids[j]], d->p[j] = down[ids[j]];
  };
  const int warm = 10, runs = 60;
  std::vector<cudaEvent_t> ev(2 * (warm + runs));
  for (auto &x : ev) check(cudaEventCreate(&x), "cudaEventCreate");
  auto time = [&](const char *name, auto launch) {
    check(cudaMemset(counter, 0, sizeof(unsigned)), "cudaMemset");
    check(cudaDeviceSynchronize(), "sync");
    for (int i = 0; i < warm + runs; i++) {
      blobs u, d;
      draw(&u, &d);
      cudaEventRecord(ev[2 * i]);
      launch(u, d, (unsigned)(i + 1));
      check(cudaGetLastError(), name);
      cudaEventRecord(ev[2 * i + 1]);
    }
    check(cudaDeviceSynchronize(), name);
    std::vector<float> t;
    for (int i = warm; i < warm + runs; i++) {
      float ms;
      check(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime");
      t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    const double us = t[t.size() / 2] * 1e3;
    printf("%-12s %8.1f us (min %.1f, max %.1f)  %7.1f GB/s over the touched bytes\n", name, us, t.front() * 1e3,
           t.back() * 1e3, touched / us / 1e3);
  };
  const blobs none = {{}, 0, 0};
  time("two-launch", [&](blobs u, blobs d, unsigned) {
    flat_kernel<<<sms * 8, 256>>>(u, none, sink);
    flat_kernel<<<sms * 8, 256>>>(d, none, sink);
  });
  time("one-launch", [&](blobs u, blobs d, unsigned) { flat_kernel<<<sms * 8, 256>>>(u, d, sink); });
  auto fused = [&](const char *name, auto kernel, size_t smem) {
    if (smem > (size_t)smem_max) {
      printf("%-12s skipped: a CTA's down share is %zu bytes of shared memory, the limit %d\n", name, smem, smem_max);
      return;
    }
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), name);
    time(name, [&](blobs u, blobs d, unsigned launch) {
      unsigned target = launch * (unsigned)sms;
      void *args[] = {&u, &d, &counter, &target, &sink};
      check(cudaLaunchCooperativeKernel((void *)kernel, sms, 512, args, smem, 0), name);
    });
  };
  const size_t down_share = (size_t)((down_bytes / sms + 15) / 16 * 16) * (size_t)k;
  fused("fused-smem", fused_kernel<PREFETCH_SMEM>, down_share);
  fused("fused-l2", fused_kernel<PREFETCH_L2>, 0);
  fused("fused-after", fused_kernel<PREFETCH_NONE>, 0);
  return 0;
}
