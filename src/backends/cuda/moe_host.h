/* Host side of the cuda backend's grouped GEMM and MoE layer (moe_host.c), called from
 * cuda_backend.c for FP4_OP_GROUPED_MM, FP4_OP_GROUPED_MM_W4A16 and FP4_OP_MOE. Kernel variants are
 * named configs (config/moe_config.h). */
#ifndef FP4_BACKENDS_CUDA_MOE_HOST_H
#define FP4_BACKENDS_CUDA_MOE_HOST_H

#include "dispatch/backend.h"

/* FP4_OK, or FP4_ERR_UNSUPPORTED with the rule the kernels need that p breaks. */
fp4_status fp4_cuda_moe_supports(const fp4_problem *p, char *reason, size_t reason_size);
/* The configs that can run p on ctx's device, the default first ("moe.default" for the layer, the
 * chooser's variant for a grouped GEMM); returns how many were written (at most max). */
int fp4_cuda_moe_configs(fp4_context *ctx, const fp4_problem *p, const char **names, int max);
/* The backend's check_config for these ops: FP4_ERR_NOT_FOUND for a name that is no grouped/MoE
 * config, FP4_ERR_UNSUPPORTED for a variant that cannot run p (rows > 0), with the reason. */
fp4_status fp4_cuda_moe_check_config(fp4_context *ctx, const fp4_problem *p, const char *config, char *reason,
                                     size_t reason_size);
/* Runs p with config (NULL or "moe.default": the chooser's variant of every GEMM) on p->stream,
 * pdl: with programmatic dependent launch. Fills info (backend, config, pdl, the layer's per-GEMM
 * variants in note). Never allocates: the layer uses the caller's workspace, a grouped GEMM the
 * context workspace (fp4_cuda_moe_context_workspace bytes of it). */
fp4_status fp4_cuda_moe_run(fp4_context *ctx, const fp4_problem *p, const char *config, int pdl, fp4_run_info *info);
/* The workspace fp4_moe_forward needs on this backend: the common layout plus the routing scratch
 * (it also holds the bf16 activations of W4A4 on the register-A prefill tiles). */
size_t fp4_cuda_moe_workspace_size(const fp4_moe_layer *layer, int64_t tokens, int64_t top_k);
/* Context workspace (fp4_context_workspace) a grouped GEMM takes with config: the bf16 activations
 * of W4A4 on the register-A prefill tiles, else 0 (the layer takes none: its workspace is the
 * caller's). */
size_t fp4_cuda_moe_context_workspace(fp4_context *ctx, const fp4_problem *p, const char *config);

/* From cuda_backend.c, for a layer's shared expert on the dense kernels (fp4_moe_shared_dense): the
 * dense chooser's default config of the GEMM a on ctx's device and the context workspace it takes
 * (0, or -1 with the rule a breaks in why; sets a->sms), and its launch (a cudaError_t). */
struct fp4_cuda_gemm_args;
struct fp4_dense_config;
int fp4_cuda_dense_default(fp4_context *ctx, struct fp4_cuda_gemm_args *a, const struct fp4_dense_config **config,
                           size_t *workspace, char *why, size_t why_size);
int fp4_cuda_dense_launch(const struct fp4_cuda_gemm_args *a, const struct fp4_dense_config *c, void *stream, int pdl);

#endif
