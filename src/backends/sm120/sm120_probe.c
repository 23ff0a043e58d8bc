/*
 * The cuda-sm120 backend's probe callback. On a real device the answers come from available() and
 * supports() (fp4_probe_generic). For an architecture that is not present (`fp4kit probe --arch`)
 * they come from the architecture table and the build's targets: the kernel needs the SM120
 * block-scaled FP4 mma.sync (SM120 / SM121, code for exactly that target), and SM90 runs an emulated
 * copy for verification only. It computes W4A4 (NVFP4 and MXFP4) and nothing else.
 */
#include <stdio.h>

#include "backends/sm120/sm120_launch.h"
#include "backends/sm120/sm120_probe.h"
#include "core/error.h"
#include "dispatch/arch.h"
#include "dispatch/probe.h"

extern const fp4_backend fp4_backend_cuda_sm120;

fp4_status fp4_sm120_probe(fp4_context *ctx, const fp4_arch_info *arch, fp4_backend_probe *out) {
  if (ctx) {
    fp4_probe_generic(ctx, &fp4_backend_cuda_sm120, arch->cc ? arch : NULL, out);
    return FP4_OK;
  }
  char code[160], why[400];
  out->device_memory = 1;
  const int sm120 = arch->cc == 120 || arch->cc == 121, emulated = arch->cc == 90;
  if (!sm120 && !emulated) {
    snprintf(why, sizeof why, "needs SM120/SM121 (the block-scaled FP4 mma.sync); %s has %s", arch->name,
             arch->fp4_mma ? arch->fp4_mma_insn : "no FP4 MMA");
    fp4_probe_unavailable(out, FP4_EVIDENCE_TABLE, why);
    if (!arch->pdl) fp4_probe_no_pdl(out, arch);
    return FP4_OK;
  }
  if (!fp4_probe_arch_code(arch, code, sizeof code)) {
    fp4_probe_unavailable(out, FP4_EVIDENCE_TABLE, code);
    return FP4_OK;
  }
  out->available = FP4_SUPPORT_YES;
  if (sm120)
    fp4_reason(out->reason, sizeof out->reason, "%s (%s)", FP4_SM120_STATUS, code);
  else
    snprintf(out->reason, sizeof out->reason,
             "emulated on SM90 for verification: the SM120 MMA computed on CUDA cores (exact, not fast; never picked by auto)");
  snprintf(why, sizeof why, "%s", sm120 ? FP4_SM120_STATUS : "emulated on SM90 (verification only)");
  for (int c = FP4_CAP_NVFP4_W4A4; c <= FP4_CAP_MXFP4_W4A4; c++) fp4_probe_set(out, (fp4_cap)c, FP4_SUPPORT_YES, FP4_EVIDENCE_TABLE, why);
  fp4_probe_set(out, FP4_CAP_W4A16, FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, "cuda-sm120 runs the W4A4 GEMM (fp4_mm) only");
  fp4_probe_set(out, FP4_CAP_GROUPED, FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, "this backend does not implement grouped GEMM / the MoE layer");
  snprintf(why, sizeof why, "%s has PDL and the kernel waits (griddepcontrol.wait) before reading", arch->name);
  fp4_probe_set(out, FP4_CAP_PDL, FP4_SUPPORT_YES, FP4_EVIDENCE_TABLE, why);
  return FP4_OK;
}
