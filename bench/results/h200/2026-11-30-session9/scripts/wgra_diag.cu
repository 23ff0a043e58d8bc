// Diagnostic timing of the register-A wgmma kernel variants (not part of the project).
#include WGRA_SRC
#include <cublas_v2.h>
#include <vector>
#include <algorithm>

extern "C" int fp4_cuda_large_m_check(const fp4_cuda_gemm_args *, int, const char *, char *, size_t) { return 1; }
extern "C" int fp4_cuda_gemm_via_bf16_a(const fp4_cuda_gemm_args *, int (*)(const fp4_cuda_gemm_args *, void *), void *, void *, int) { return 1; }

__global__ void fill_bytes(uint8_t *p, size_t n, uint32_t seed, uint32_t mask, uint32_t add) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = (uint8_t)((h & mask) + add);
  }
}
__global__ void fill_bf16(uint16_t *p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    float f = ((h & 0xFFFF) / 32768.0f) - 1.0f;
    p[i] = (uint16_t)(__float_as_uint(f) >> 16);
  }
}

int main(int argc, char **argv) {
  const char *label = argc > 1 ? argv[1] : "?";
  const int64_t shapes[][3] = {{4096, 8192, 8192}, {512, 20480, 4096}, {256, 20480, 4096}, {512, 8192, 8192}, {8192, 8192, 8192}};
  cublasHandle_t h; cublasCreate(&h);
  for (auto &s : shapes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    uint16_t *A; uint8_t *W, *S; float *O; uint16_t *Wb, *Ob;
    const int64_t C = K / 16, sb = fp4_layout_bytes(1, N, C);
    cudaMalloc(&A, M * K * 2); cudaMalloc(&W, N * K / 2); cudaMalloc(&S, sb); cudaMalloc(&O, M * N * 4);
    cudaMalloc(&Wb, N * K * 2); cudaMalloc(&Ob, M * N * 2);
    fill_bf16<<<1024, 256>>>(A, M * K, 1); fill_bytes<<<1024, 256>>>(W, N * K / 2, 2, 0xFF, 0);
    fill_bytes<<<1024, 256>>>(S, sb, 3, 0x0F, 0x30); fill_bf16<<<1024, 256>>>(Wb, N * K, 4);
    lm_params p = {};
    p.a = A; p.b = W; p.b_scales = S; p.out = O; p.lda = K; p.ldo = N; p.m = M; p.n = N; p.k = K; p.C = C;
    p.a_layout = 0; p.b_layout = 1; p.out_dtype = FP4_DTYPE_F32; p.scale = 1.0f;
    const double flop = 2.0 * M * N * K;
    for (int tile = 0; tile < 2; tile++) {
      std::vector<float> t;
      cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
      for (int it = 0; it < 23; it++) {
        cudaEventRecord(e0);
        cudaError_t e = wgra_launch_cfg<FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>(p, tile, 0, 0);
        cudaEventRecord(e1); cudaEventSynchronize(e1);
        if (e != cudaSuccess || cudaGetLastError() != cudaSuccess) { printf("launch error %s\n", cudaGetErrorString(e)); return 1; }
        float ms; cudaEventElapsedTime(&ms, e0, e1); if (it >= 3) t.push_back(ms);
      }
      std::sort(t.begin(), t.end());
      const double us = t[t.size() / 2] * 1e3;
      if (getenv("DIAG_DUMP") && &s == &shapes[0]) {
        std::vector<float> h(M * N);
        cudaMemcpy(h.data(), O, M * N * 4, cudaMemcpyDeviceToHost);
        char fn[512]; snprintf(fn, sizeof fn, "%s.%d", getenv("DIAG_DUMP"), tile);
        FILE *f = fopen(fn, "wb"); fwrite(h.data(), 4, h.size(), f); fclose(f);
      }
      printf("%-10s wgra.%s M=%-5lld N=%-6lld K=%-5lld %9.1f us %7.1f TFLOP/s\n", label, tile ? "128x256" : "128x128",
             (long long)M, (long long)N, (long long)K, us, flop / us * 1e-6);
    }
    if (!strcmp(label, "base")) { /* cuBLAS BF16 peer: out[M,N] = A[M,K] * Wb[N,K]^T (column-major: N x M = Wb^T... ) */
      std::vector<float> t; float one = 1.f, zero = 0.f;
      cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
      for (int it = 0; it < 23; it++) {
        cudaEventRecord(e0);
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, Wb, CUDA_R_16BF, (int)K, A, CUDA_R_16BF, (int)K,
                     &zero, Ob, CUDA_R_16BF, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cudaEventRecord(e1); cudaEventSynchronize(e1);
        float ms; cudaEventElapsedTime(&ms, e0, e1); if (it >= 3) t.push_back(ms);
      }
      std::sort(t.begin(), t.end());
      const double us = t[t.size() / 2] * 1e3;
      printf("%-10s cublas-bf16  M=%-5lld N=%-6lld K=%-5lld %9.1f us %7.1f TFLOP/s\n", label, (long long)M, (long long)N,
             (long long)K, us, flop / us * 1e-6);
    }
    cudaFree(A); cudaFree(W); cudaFree(S); cudaFree(O); cudaFree(Wb); cudaFree(Ob);
  }
  return 0;
}
