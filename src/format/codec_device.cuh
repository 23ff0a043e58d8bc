/*
 * Device codecs shared by kernels of more than one backend (the cuda backend's small-M and grouped
 * decode GEMMs, cublas-dequant's dequantize kernel): e2m1 codes to exact bf16 / f16 pairs with byte
 * permutes, the 16-bit pair multiply, and E4M3 / UE8M0 block scales as 16-bit pairs. The scalar
 * definitions they must agree with are codec.h's. Everything sits in an unnamed namespace: each
 * kernel file gets its own copy, so moving code here changes no instruction.
 */
#ifndef FP4_FORMAT_CODEC_DEVICE_CUH
#define FP4_FORMAT_CODEC_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "format/codec.h"

namespace {

/* Eight e2m1 codes (element i in nibble i) -> four pairs p[i] = (elem i, elem i+4) as bf16x2 or
 * f16x2 bits, exact, without scale. Byte permutes look the magnitudes up in register tables; the
 * sign bits of elements i and i+4 sit 16 bits apart, so one shift puts both in place. */
template <bool F16>
__device__ __forceinline__ void decode8(uint32_t w, uint32_t p[4]) {
  const uint32_t mag = w & 0x77777777u;
  if (F16) { /* f16 values of e2m1 have a zero low byte */
    const uint32_t h0 = __byte_perm(0x3E3C3800u, 0x46444240u, mag);
    const uint32_t h1 = __byte_perm(0x3E3C3800u, 0x46444240u, mag >> 16);
    const uint32_t b01 = __byte_perm(h0, h1, 0x5140), b23 = __byte_perm(h0, h1, 0x7362);
    p[0] = __byte_perm(b01, 0u, 0x1404);
    p[1] = __byte_perm(b01, 0u, 0x3424);
    p[2] = __byte_perm(b23, 0u, 0x1404);
    p[3] = __byte_perm(b23, 0u, 0x3424);
  } else {
    const uint32_t h0 = __byte_perm(0x3F3F3F00u, 0x40404040u, mag);
    const uint32_t h1 = __byte_perm(0x3F3F3F00u, 0x40404040u, mag >> 16);
    const uint32_t l0 = __byte_perm(0xC0800000u, 0xC0804000u, mag);
    const uint32_t l1 = __byte_perm(0xC0800000u, 0xC0804000u, mag >> 16);
    const uint32_t a01 = __byte_perm(l0, l1, 0x5140), a23 = __byte_perm(l0, l1, 0x7362);
    const uint32_t b01 = __byte_perm(h0, h1, 0x5140), b23 = __byte_perm(h0, h1, 0x7362);
    p[0] = __byte_perm(a01, b01, 0x5140);
    p[1] = __byte_perm(a01, b01, 0x7362);
    p[2] = __byte_perm(a23, b23, 0x5140);
    p[3] = __byte_perm(a23, b23, 0x7362);
  }
  p[0] |= (w << 12) & 0x80008000u;
  p[1] |= (w << 8) & 0x80008000u;
  p[2] |= (w << 4) & 0x80008000u;
  p[3] |= w & 0x80008000u;
}

template <bool F16>
__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
  uint32_t r;
  if (F16) {
    __half2 x = *reinterpret_cast<__half2 *>(&a), y = *reinterpret_cast<__half2 *>(&b);
    __half2 z = __hmul2(x, y);
    r = *reinterpret_cast<uint32_t *>(&z);
  } else {
    __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162 *>(&a), y = *reinterpret_cast<__nv_bfloat162 *>(&b);
    __nv_bfloat162 z = __hmul2(x, y);
    r = *reinterpret_cast<uint32_t *>(&z);
  }
  return r;
}

/* An E4M3 scale byte as a 16-bit pair (exact in bf16 and f16): W4A4 activation scales. */
template <bool F16>
__device__ __forceinline__ uint32_t e4m3_pair(uint32_t byte) {
  const float s = fp4_e4m3_decode_inline((uint8_t)byte);
  const uint32_t h = F16 ? fp4_f16_from_f32_inline(s) : fp4_bf16_from_f32_inline(s);
  return h | (h << 16);
}

/* A UE8M0 activation scale 2^(e-127) as a bf16 pair (W4A4 stages FP4 activations as bf16). */
__device__ __forceinline__ uint32_t ue8m0_bf16_pair(uint32_t e) {
  const uint32_t h = e == 0xFF ? 0x7FC0u : e == 0 ? 0x0040u : e << 7;
  return h | (h << 16);
}

}  // namespace

#endif
