/*
 * How far FlashInfer's fast-math NVFP4 quantizer can be from fp4kit's (FP4_ORDER_FLASHINFER): both
 * compute sf = gsf * (vmax * r6) and out_scale = 1 / (float(sf byte) * (1 / gsf)), but FlashInfer's
 * default build takes r6 and the two reciprocals from rcp.approx.ftz.f32 where fp4kit rounds them
 * correctly. This prints rcp.approx.ftz.f32(6) against f32(1/6) (if equal, the scale bytes agree for
 * every normal vmax / 6) and counts, over every float32 significand in [1, 2), how many
 * rcp.approx.ftz results differ from the correctly rounded reciprocal (those move out_scale, hence
 * possibly a code, by an ulp).
 *
 *   nvcc -O2 -o /tmp/rcp_approx_check scripts/rcp_approx_check.cu && /tmp/rcp_approx_check
 */
#include <cstdint>
#include <cstdio>
#include <cstring>

__global__ void rcp_kernel(float *out, uint32_t n, uint32_t base) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = __uint_as_float(base + i);
  float r;
  asm volatile("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  out[i] = r;
}

int main() {
  const uint32_t n = 1u << 23, base = 0x3F800000u; /* [1, 2) */
  float *d = nullptr;
  if (cudaMalloc(&d, (size_t)n * sizeof(float)) != cudaSuccess) {
    fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  rcp_kernel<<<n / 256, 256>>>(d, n, base);
  float *h = new float[n];
  cudaMemcpy(h, d, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost);
  uint64_t differ = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t u = base + i;
    float x;
    memcpy(&x, &u, 4);
    const float want = (float)(1.0 / (double)x); /* correctly rounded: 1/x never halfway in binary32 */
    differ += memcmp(&want, &h[i], 4) != 0;
  }
  float six = 6.0f, *d6 = nullptr, r6 = 0;
  cudaMalloc(&d6, sizeof(float));
  rcp_kernel<<<1, 1>>>(d6, 1, 0x40C00000u);
  cudaMemcpy(&r6, d6, sizeof(float), cudaMemcpyDeviceToHost);
  const float want6 = 1.0f / six;
  uint32_t a, b;
  memcpy(&a, &r6, 4);
  memcpy(&b, &want6, 4);
  printf("rcp.approx.ftz.f32(6) = 0x%08x, f32(1/6) = 0x%08x: %s\n", a, b, a == b ? "equal" : "DIFFERENT");
  printf("significands in [1, 2) whose rcp.approx.ftz differs from the rounded reciprocal: %llu of %u\n",
         (unsigned long long)differ, n);
  delete[] h;
  return 0;
}
