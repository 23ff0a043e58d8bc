/* The SM120 GEMM with the real block-scaled MMA: device code for sm_120a / sm_121a / sm_120f. */
#include "backends/sm120/sm120_gemm.cuh"

extern "C" int fp4_sm120_config_smem(int config) {
  using namespace fp4_sm120_native_impl;
  switch (config) {
  case FP4_SM120_CONFIG_M16N64: return tile<16, 64, 16, 16, FP4_SM120_NVF4>::kSmem;
  case FP4_SM120_CONFIG_M64N128: return tile<64, 128, 32, 32, FP4_SM120_NVF4>::kSmem;
  case FP4_SM120_CONFIG_M128N128: return tile<128, 128, 64, 32, FP4_SM120_NVF4>::kSmem;
  default: return 0;
  }
}
