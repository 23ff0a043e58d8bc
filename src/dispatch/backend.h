/*
 * The backend interface. A backend is a static const table of function pointers; adding one is a
 * folder under src/backends/ plus one line in src/dispatch/registry.c (docs/adding-a-backend.md).
 * "Not supported" is a normal answer with a human-readable reason, never a crash.
 */
#ifndef FP4_DISPATCH_BACKEND_H
#define FP4_DISPATCH_BACKEND_H

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fp4_op {
  FP4_OP_QUANTIZE = 0, /* a (dense) -> q_out, runtime recipe with global_scale */
  FP4_OP_MM = 1,       /* W4A4:  out = alpha * dq(a_q) * dq(b)^T              */
  FP4_OP_MM_W4A16 = 2, /* W4A16: out = alpha * a * dq(b)^T                    */
  FP4_OP_GROUPED_MM = 3,       /* W4A4 grouped: a_q rows grouped by offsets over gb's experts */
  FP4_OP_GROUPED_MM_W4A16 = 4, /* W4A16 grouped: a rows grouped by offsets                    */
  FP4_OP_MOE = 5               /* MoE layer: a = hidden, moe, routing, workspace -> out       */
} fp4_op;

/* The bit of an op in fp4_backend.extra_ops. */
#define FP4_OP_BIT(op) (1u << (unsigned)(op))

/* A validated request. Backends may assume every check of the public entry points passed
 * (src/format/matrix_check.c, src/dispatch/validate_moe.c). */
typedef struct fp4_problem {
  fp4_op op;
  const fp4_qmatrix *a_q; /* FP4_OP_MM: activations [M, K]                         */
  const fp4_matrix *a;    /* FP4_OP_MM_W4A16 activations; FP4_OP_QUANTIZE input    */
  const fp4_qmatrix *b;   /* weights [N, K]                                         */
  float alpha;
  const float *alpha_device; /* NULL, or a device f32 multiplying alpha (fp4_options)  */
  fp4_matrix *out;        /* [M, N]                                                 */
  float global_scale;     /* FP4_OP_QUANTIZE: NVFP4 encode scale                    */
  const float *global_scale_device; /* FP4_OP_QUANTIZE: NULL, or the device encode scale */
  int exact_order;        /* FP4_OP_QUANTIZE: NVFP4 scales in FP4_ORDER_EXACT           */
  fp4_qmatrix *q_out;     /* FP4_OP_QUANTIZE output                                 */
  fp4_memory memory;      /* where every operand lives                              */
  int enable_pdl;
  void *stream;
  /* Grouped GEMM and MoE operands (FP4_OP_GROUPED_MM, FP4_OP_GROUPED_MM_W4A16, FP4_OP_MOE). */
  const fp4_grouped_qmatrix *gb;    /* grouped weights [E, N, K]                              */
  const int64_t *offsets;           /* [E+1] row groups of a_q / a                            */
  const fp4_moe_layer *moe;         /* FP4_OP_MOE: the layer; a = hidden [T, H], out [T, H]   */
  const fp4_moe_routing *routing;   /* FP4_OP_MOE: topk ids and weights                       */
  void *workspace;                  /* FP4_OP_MOE: caller-owned, workspace_bytes long         */
  size_t workspace_bytes;
} fp4_problem;

/* Problem dimensions, for messages and tables. */
static inline int64_t fp4_problem_m(const fp4_problem *p) {
  return (p->op == FP4_OP_MM || p->op == FP4_OP_GROUPED_MM) ? p->a_q->rows : p->a->rows;
}
static inline int64_t fp4_problem_n(const fp4_problem *p) {
  if (p->op == FP4_OP_QUANTIZE) return 0;
  if (p->op == FP4_OP_MOE) return p->moe->routed.down.rows; /* H */
  return (p->op == FP4_OP_GROUPED_MM || p->op == FP4_OP_GROUPED_MM_W4A16) ? p->gb->rows : p->b->rows;
}
/* Elements of a dense GEMM's weight (N x K); 0 for the other ops. */
static inline int64_t fp4_problem_weights(const fp4_problem *p) {
  return (p->op == FP4_OP_MM || p->op == FP4_OP_MM_W4A16) ? p->b->rows * p->b->cols : 0;
}
static inline int64_t fp4_problem_k(const fp4_problem *p) {
  return (p->op == FP4_OP_MM || p->op == FP4_OP_GROUPED_MM) ? p->a_q->cols : p->a->cols;
}

/* The situations the auto heuristic ranks backends in; the heuristic ranking in src/dispatch/dispatch.c
 * says which one a problem is in (the M crossovers and the architecture families), each backend how it
 * ranks there. */
typedef enum fp4_regime {
  FP4_REGIME_HOST = 0,      /* operands in host memory                                             */
  FP4_REGIME_QUANTIZE,      /* FP4_OP_QUANTIZE on the device                                       */
  FP4_REGIME_SM80_SMALL_M,  /* SM80-SM90, no FP4 tensor cores: M below the dequantize crossover    */
  FP4_REGIME_SM80_LARGE_M,  /* SM80-SM90: M from the dequantize crossover on                       */
  FP4_REGIME_SM100_SMALL_M, /* SM100/103, block-scaled FP4 MMA (tcgen05): M up to the native crossover */
  FP4_REGIME_SM100_LARGE_M, /* SM100/103: M past it                                                */
  FP4_REGIME_SM120_SMALL_M, /* SM120/121, block-scaled FP4 mma.sync: M up to twice that crossover  */
  FP4_REGIME_SM120_LARGE_M, /* SM120/121: M past it                                                */
  FP4_REGIME_COUNT
} fp4_regime;

/* Ranks, lower preferred. From FP4_RANK_CHECK_ONLY up a backend exists to check others (the
 * reference oracle: correct everywhere, fast nowhere): auto takes it only when nothing else can run
 * and never follows a tuning cache entry that names it, and the tuner times it only when it alone
 * runs. FP4_RANK_VERIFICATION_ONLY: a build that runs only to verify a kernel (the emulated SM120
 * kernel on SM90). FP4_RANK_UNKNOWN: a backend in a regime it has no rank for (a host backend asked
 * about device memory, a device backend about host memory, a backend without ranks). */
#define FP4_RANK_UNKNOWN 50
#define FP4_RANK_CHECK_ONLY 90
#define FP4_RANK_VERIFICATION_ONLY 99

/* How a backend ranks in each regime. */
typedef struct fp4_backend_ranks {
  int in[FP4_REGIME_COUNT];
  /* The device ops `in` ranks, as FP4_OP_BIT(op) bits (0: every op); any other op on device
   * operands ranks other_device_ops. */
  unsigned device_ops;
  int other_device_ops;
} fp4_backend_ranks;

/* The ranks of a backend that computes on the host: rank there, FP4_RANK_UNKNOWN on the device. */
#define FP4_HOST_RANKS(rank)                                                                               \
  {.in = {[FP4_REGIME_HOST] = (rank), [FP4_REGIME_QUANTIZE] = FP4_RANK_UNKNOWN,                          \
          [FP4_REGIME_SM80_SMALL_M] = FP4_RANK_UNKNOWN, [FP4_REGIME_SM80_LARGE_M] = FP4_RANK_UNKNOWN,       \
          [FP4_REGIME_SM100_SMALL_M] = FP4_RANK_UNKNOWN, [FP4_REGIME_SM100_LARGE_M] = FP4_RANK_UNKNOWN,     \
          [FP4_REGIME_SM120_SMALL_M] = FP4_RANK_UNKNOWN, [FP4_REGIME_SM120_LARGE_M] = FP4_RANK_UNKNOWN}}
/* The ranks of a device backend (FP4_RANK_UNKNOWN on the host): quantize, then small and large M on
 * SM80-SM90, SM100/103 and SM120/121. */
#define FP4_DEVICE_RANKS(quantize, sm80_small, sm80_large, sm100_small, sm100_large, sm120_small, sm120_large) \
  {.in = {[FP4_REGIME_HOST] = FP4_RANK_UNKNOWN, [FP4_REGIME_QUANTIZE] = (quantize),                        \
          [FP4_REGIME_SM80_SMALL_M] = (sm80_small), [FP4_REGIME_SM80_LARGE_M] = (sm80_large),             \
          [FP4_REGIME_SM100_SMALL_M] = (sm100_small), [FP4_REGIME_SM100_LARGE_M] = (sm100_large),         \
          [FP4_REGIME_SM120_SMALL_M] = (sm120_small), [FP4_REGIME_SM120_LARGE_M] = (sm120_large)}}

typedef struct fp4_backend {
  const char *name;    /* "ref", "cpu", "cuda", ...                                */
  const char *summary; /* one line for tables                                      */
  /* Can this backend run at all for ctx (NULL = host)? FP4_OK, or FP4_ERR_UNSUPPORTED with the
   * reason ("built without CUDA", "needs SM100/SM120, device is SM90"). */
  fp4_status (*available)(fp4_context *ctx, char *reason, size_t reason_size);
  /* Can it run this problem? FP4_OK or FP4_ERR_UNSUPPORTED with the reason. */
  fp4_status (*supports)(fp4_context *ctx, const fp4_problem *p, char *reason, size_t reason_size);
  /* Candidate configurations for the tuner, heuristic best first; returns how many were written to
   * names (at most max). NULL means one default configuration. */
  int (*configs)(fp4_context *ctx, const fp4_problem *p, const char **names, int max);
  /* Checks a config the options name (never NULL) for p before anything runs or is sized, so that a
   * call and its workspace query refuse the same configs (asked once per selection key of a dense
   * call, and on every grouped/MoE call that names a config: those have no key, their rows change;
   * keep it as cheap as run()'s own decision, by the same functions): FP4_OK; FP4_ERR_NOT_FOUND for a name the
   * backend does not have, FP4_ERR_UNSUPPORTED for one that cannot run p, with the reason ("unknown
   * config 'x' (its configs: ...)"). At T = 0 (a grouped GEMM or MoE layer without rows) only the
   * name need be known. NULL: the backend has one config, "default". */
  fp4_status (*check_config)(fp4_context *ctx, const fp4_problem *p, const char *config, char *reason,
                             size_t reason_size);
  /* Runs the problem with a configuration (NULL: the backend's default; a named one has passed
   * check_config). Fills info if non-NULL. */
  fp4_status (*run)(fp4_context *ctx, const fp4_problem *p, const char *config, fp4_run_info *info);
  /* Frees the per-context state this backend stored with fp4_context_state (NULL: none). */
  void (*release_state)(void *state);
  /* Ops after FP4_OP_MM_W4A16 that supports() and run() understand, as FP4_OP_BIT(op) bits. The
   * dispatcher offers such a problem only to backends listing its op, so a backend written before
   * the op existed never receives one it would misread. */
  unsigned extra_ops;
  /* Total bytes of fp4_moe_forward workspace this backend needs, at least the common layout of
   * src/dispatch/moe_workspace.h (NULL: the common layout is what it uses). */
  size_t (*moe_workspace_size)(const fp4_moe_layer *layer, int64_t tokens, int64_t top_k);
  /* Optional: fills out's availability and capabilities (probe.c has filled defaults and the
   * backend name). ctx is the context asked about (a host-only one when the caller asked about the
   * host, with ctx NULL or device -1), or NULL only when arch is a hypothetical architecture
   * (`fp4kit probe --arch`) that must be answered from the table alone. NULL: probe.c derives the
   * answers from available() and supports() on representative problems. */
  fp4_status (*probe)(fp4_context *ctx, const fp4_arch_info *arch, fp4_backend_probe *out);
  /* 1 when every kernel of the backend is launched through the PDL launch helper and executes
   * griddepcontrol.wait before reading its inputs, so enable_pdl is honoured on SM90+. */
  int honours_pdl;
  /* Device workspace (fp4_context_workspace) run() takes for p with config (NULL: the default);
   * NULL: the backend needs none. */
  size_t (*workspace_size)(fp4_context *ctx, const fp4_problem *p, const char *config);
  /* 1 when run() reads fp4_problem.alpha_device / global_scale_device (and the MoE layer's
   * act_scales_device) on the GPU; the dispatcher refuses device scalars for other backends. */
  int device_scalars;
  /* 1 when run() quantizes in FP4_ORDER_EXACT when fp4_problem.exact_order asks; the dispatcher
   * offers such a problem to no other backend. */
  int exact_order;
  /* 1 when run() computes on the host (cpu, ref): auto and the tuner never give it device operands,
   * whatever its supports() says. */
  int host;
  /* Its ranks for auto selection without a tuning cache (the heuristic ranking in
   * src/dispatch/dispatch.c); NULL: FP4_RANK_UNKNOWN everywhere. */
  const fp4_backend_ranks *ranks;
} fp4_backend;

/* Registry (src/dispatch/registry.c). */
int fp4_registry_count(void);
const fp4_backend *fp4_registry_get(int index);
const fp4_backend *fp4_registry_find(const char *name);
int fp4_registry_index(const fp4_backend *backend);
/* The slot where a backend keeps its per-context state (handles, plans), freed with release_state
 * when the context is destroyed; NULL for ctx NULL or an unknown name. */
void **fp4_context_state(fp4_context *ctx, const char *backend_name);

#ifdef __cplusplus
}
#endif

#endif
