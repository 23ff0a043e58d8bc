/*
 * The cuda backend's probe callback. On a real device the answers come from available() and
 * supports() (fp4_probe_generic). For an architecture that is not present (`fp4kit probe --arch`)
 * they come from the architecture table and the build's targets: the kernels are mma.sync (SM80+)
 * for every operation, so the backend runs wherever the binary holds code for the architecture.
 */
#include <stdio.h>

#include "backends/cuda/cuda_probe.h"
#include "core/error.h"
#include "dispatch/arch.h"
#include "dispatch/probe.h"

extern const fp4_backend fp4_backend_cuda;

fp4_status fp4_cuda_probe(fp4_context *ctx, const fp4_arch_info *arch, fp4_backend_probe *out) {
  if (ctx) {
    fp4_probe_generic(ctx, &fp4_backend_cuda, arch->cc ? arch : NULL, out);
    return FP4_OK;
  }
  char code[160], why[400];
  out->device_memory = 1;
  if (arch->cc < 80 || !fp4_probe_arch_code(arch, code, sizeof code)) {
    if (arch->cc < 80)
      snprintf(why, sizeof why, "the cuda kernels need compute capability 8.0+ (mma.sync bf16); %s is below", arch->name);
    fp4_probe_unavailable(out, FP4_EVIDENCE_TABLE, arch->cc < 80 ? why : code);
    if (!arch->pdl) fp4_probe_no_pdl(out, arch);
    return FP4_OK;
  }
  out->available = FP4_SUPPORT_YES;
  fp4_reason(out->reason, sizeof out->reason, "%s", code);
  /* The large-M W4A16 kernels of SM90 use wgmma, which only sm_90a code holds. */
  const int wgmma = arch->cc == 90 && fp4_arch_build_has_target("sm_90a");
  snprintf(why, sizeof why, "mma.sync kernels (small-M, large-M%s); %s", wgmma ? ", wgmma large-M on sm_90a" : "", code);
  for (int c = FP4_CAP_NVFP4_W4A4; c <= FP4_CAP_W4A16; c++) fp4_probe_set(out, (fp4_cap)c, FP4_SUPPORT_YES, FP4_EVIDENCE_TABLE, why);
  snprintf(why, sizeof why, "grouped GEMM and the MoE layer (mma.sync); %s", code);
  fp4_probe_set(out, FP4_CAP_GROUPED, FP4_SUPPORT_YES, FP4_EVIDENCE_TABLE, why);
  snprintf(why, sizeof why, "%s has PDL and every kernel of this backend waits (griddepcontrol.wait) before reading", arch->name);
  fp4_probe_set(out, FP4_CAP_PDL, FP4_SUPPORT_YES, FP4_EVIDENCE_TABLE, why);
  if (!arch->pdl) fp4_probe_no_pdl(out, arch);
  return FP4_OK;
}
