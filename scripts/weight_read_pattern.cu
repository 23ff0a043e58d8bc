/*
 * How fast can a kernel read an FP4 weight matrix [N][K/2] with a given access pattern, doing no
 * math? Separates the memory side of the small-M GEMMs from their instruction stream.
 *
 *   nvcc -O3 -arch=sm_90a -o /tmp/wrp scripts/weight_read_pattern.cu && /tmp/wrp [N] [K]
 *
 * K: a multiple of 1024 (512-byte rows or more). Each time is the median of 50 single launches
 * timed with CUDA events, as fp4kit bench times a GEMM, over copies that rotate past the L2; so
 * the launch and the ramp up and down of the grid are in it, as they are in a GEMM's time.
 *
 * Patterns (each reads every byte once, XOR-folds it into one word per thread, 16-byte loads that
 * bypass L1 as the GEMMs' loads do):
 *  - tile:  the lean kernels' pattern: a 4-warp CTA owns 32 rows; per step a lane loads 16 bytes of
 *           rows g, g+8, g+16, g+24 (g = lane / 4) at byte 16 * (lane % 4) of the warp's 64-byte
 *           slab; warp w takes slabs w, w + 4, ... (the CTA reads 256 contiguous bytes per row).
 *  - tile-contig: the same, but warp w takes a contiguous quarter of K.
 *  - row:   a warp reads 512 contiguous bytes of one row per step (the layout a GEMV kernel reading
 *           row-major weights uses), 4 rows per warp in turn.
 *  - flat:  the matrix as one contiguous array, 16 bytes per lane, grid-stride.
 */
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

__device__ __forceinline__ uint4 ld_stream(const uint8_t *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

template <bool CONTIG>
__global__ void __launch_bounds__(128, 6) tile_kernel(const uint8_t *w, int64_t n, int64_t kb, uint32_t *sink) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t row0 = (int64_t)blockIdx.x * 32;
  const int nslabs = (int)(kb / 64);
  const uint8_t *p[4];
  for (int r = 0; r < 4; r++) p[r] = w + min(row0 + g + 8 * r, n - 1) * kb + 16 * t;
  uint32_t acc = 0;
  int s0 = warp, s1 = nslabs, step = 4;
  if (CONTIG) { s0 = warp * nslabs / 4; s1 = (warp + 1) * nslabs / 4; step = 1; }
  for (int s = s0; s < s1; s += step) {
    uint4 v[4];
#pragma unroll
    for (int r = 0; r < 4; r++) v[r] = ld_stream(p[r] + (int64_t)s * 64);
#pragma unroll
    for (int r = 0; r < 4; r++) acc ^= fold(v[r]);
  }
  sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

__global__ void __launch_bounds__(128, 6) row_kernel(const uint8_t *w, int64_t n, int64_t kb, uint32_t *sink) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row0 = (int64_t)blockIdx.x * 16 + warp * 4; /* 4 rows per warp, 16 per CTA */
  uint32_t acc = 0;
  for (int r = 0; r < 4; r++) {
    const int64_t row = min(row0 + r, n - 1);
    const uint8_t *p = w + row * kb + 16 * lane;
    int64_t c = 0;
    for (; c + 1024 <= kb; c += 1024) {
      const uint4 a = ld_stream(p + c), b = ld_stream(p + c + 512);
      acc ^= fold(a) ^ fold(b);
    }
    if (c + 512 <= kb) acc ^= fold(ld_stream(p + c));
  }
  sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

__global__ void __launch_bounds__(256) flat_kernel(const uint8_t *w, int64_t bytes, uint32_t *sink) {
  uint32_t acc = 0;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x * 16;
  for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 16; i < bytes; i += stride) acc ^= fold(ld_stream(w + i));
  sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

int main(int argc, char **argv) {
  const int64_t n = argc > 1 ? atoll(argv[1]) : 57344, k = argc > 2 ? atoll(argv[2]) : 8192, kb = k / 2;
  if (n < 1 || n > (1 << 22) || k < 1024 || k % 1024) { /* the sink holds one word per thread of up to 2^22 rows */
    fprintf(stderr, "weight_read_pattern: 1 <= N <= 4194304 and K a multiple of 1024 (N = %lld, K = %lld)\n", (long long)n,
            (long long)k);
    return 2;
  }
  const int64_t bytes = n * kb;
  const int copies = (int)std::max<int64_t>(2, (3LL << 27) / bytes + 1); /* rotate past the 60 MB L2 */
  auto check = [](cudaError_t e, const char *what) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "weight_read_pattern: %s: %s\n", what, cudaGetErrorString(e));
    exit(1);
  };
  std::vector<uint8_t *> w(copies);
  for (auto &p : w) {
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    check(cudaMemset(p, 0x5A, bytes), "cudaMemset");
  }
  uint32_t *sink;
  check(cudaMalloc(&sink, (size_t)64 << 20), "cudaMalloc");
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  auto time = [&](const char *name, auto launch) {
    std::vector<float> t;
    for (int i = 0; i < 60; i++) {
      cudaEventRecord(e0);
      launch(w[i % copies]);
      check(cudaGetLastError(), name);
      cudaEventRecord(e1);
      check(cudaEventSynchronize(e1), name);
      float ms;
      check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
      if (i >= 10) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    const double us = t[t.size() / 2] * 1e3;
    printf("%-12s N=%lld K=%lld  %8.1f us  %7.1f GB/s\n", name, (long long)n, (long long)k, us, bytes / us / 1e3);
  };
  time("tile", [&](const uint8_t *p) { tile_kernel<false><<<(unsigned)((n + 31) / 32), 128>>>(p, n, kb, sink); });
  time("tile-contig", [&](const uint8_t *p) { tile_kernel<true><<<(unsigned)((n + 31) / 32), 128>>>(p, n, kb, sink); });
  time("row", [&](const uint8_t *p) { row_kernel<<<(unsigned)((n + 15) / 16), 128>>>(p, n, kb, sink); });
  time("flat", [&](const uint8_t *p) { flat_kernel<<<sms * 8, 256>>>(p, bytes, sink); });
  return 0;
}
