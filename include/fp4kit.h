/*
 * fp4kit: 4-bit floating-point (NVFP4, MXFP4) matrix multiplication.
 *
 * One header, C11, usable from C++ and from CUDA host code. Every call returns an fp4_status;
 * fp4_last_error() says which argument, file offset or library call was wrong. The library never
 * aborts and never prints unless FP4KIT_LOG asks it to.
 *
 * Conventions (FlashInfer's, so tensors move between the two untouched):
 *   - a quantized matrix [rows, cols] stores rows x cols/2 bytes, row-major (K-major), element 2j in
 *     the low nibble of byte j;
 *   - block scales run along cols: E4M3 per 16 elements (NVFP4) or UE8M0 per 32 (MXFP4), in one of
 *     three layouts (linear, 128x4 swizzled, 8x4 swizzled);
 *   - dequantized value = e2m1(code) * block_scale * multiplier, where multiplier is the per-tensor
 *     decode multiplier (Model Optimizer's weight_scale_2 / input_scale, or 1/global_scale);
 *   - GEMM: out[M, N] = alpha * A[M, K] * B[N, K]^T, FP32 (or wider) accumulation;
 *   - every array of typed elements (dense f32/bf16/f16 matrices, offsets, ids, routing weights,
 *     multipliers, device scalars) starts aligned to its element size, on every backend: a call
 *     given one that is not is refused with FP4_ERR_INVALID_ARGUMENT naming the argument. FP4 codes
 *     and block scales are bytes and need no alignment; a backend that needs more (the cuda
 *     backend's 16-byte loads) refuses the problem with FP4_ERR_UNSUPPORTED and the reason.
 */
#ifndef FP4KIT_H
#define FP4KIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(FP4KIT_BUILDING_SHARED)
#define FP4_API __declspec(dllexport)
#elif defined(__GNUC__)
#define FP4_API __attribute__((visibility("default")))
#else
#define FP4_API
#endif

#define FP4KIT_VERSION_MAJOR 0
#define FP4KIT_VERSION_MINOR 1
#define FP4KIT_VERSION_PATCH 0
#define FP4KIT_VERSION_STRING "0.1.0"

/* The library's version string ("0.1.0"); compare with FP4KIT_VERSION_STRING to detect a header
 * and library mismatch. */
FP4_API const char *fp4_version(void);

/* sizeof of a public struct named without its typedef suffix ("fp4_options", "fp4_tune_result",
 * ...), or 0 for a name it does not know: bindings that mirror the structs (the Python package)
 * check their layout against the library they load instead of reading past an entry. */
FP4_API size_t fp4_struct_size(const char *name);

/* ------------------------------------------------------------------------------------------ */
/* Status and errors                                                                            */
/* ------------------------------------------------------------------------------------------ */

typedef enum fp4_status {
  FP4_OK = 0,
  FP4_ERR_INVALID_ARGUMENT = -1, /* null pointer, bad shape, misaligned K, wrong dtype/layout  */
  FP4_ERR_UNSUPPORTED = -2,      /* a valid request this backend, device or build cannot run    */
  FP4_ERR_OUT_OF_MEMORY = -3,    /* host or device allocation failed                            */
  FP4_ERR_CUDA = -4,             /* CUDA runtime, driver or vendor-library call failed          */
  FP4_ERR_IO = -5,               /* a file could not be opened, read or written                 */
  FP4_ERR_FORMAT = -6,           /* a file (checkpoint, tuning cache) is malformed              */
  FP4_ERR_NOT_FOUND = -7,        /* a named backend, tensor, config or file does not exist      */
  FP4_ERR_INTERNAL = -8          /* a bug in fp4kit: please report the fp4_last_error() text    */
} fp4_status;

/* Short name of a status ("FP4_ERR_INVALID_ARGUMENT"); never NULL. */
FP4_API const char *fp4_status_str(fp4_status status);

/* Detail of the last failing call on this thread ("fp4_mm: b->cols (100) is not a multiple of
 * the NVFP4 block size 16"); "" when the last call succeeded or nothing failed yet. */
FP4_API const char *fp4_last_error(void);
/* Records the detail fp4_last_error() returns on this thread (printf-style; fmt NULL clears it) and
 * returns status: for code layered on fp4kit (the fp4kit_bench library, bindings) so that one
 * channel carries every detail. */
FP4_API fp4_status fp4_set_error(fp4_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ------------------------------------------------------------------------------------------ */
/* Formats, layouts, element types                                                             */
/* ------------------------------------------------------------------------------------------ */

typedef enum fp4_format {
  FP4_FORMAT_NVFP4 = 0, /* E2M1 elements, E4M3 scale per 16, FP32 per-tensor multiplier */
  FP4_FORMAT_MXFP4 = 1  /* E2M1 elements, UE8M0 scale per 32, no per-tensor multiplier   */
} fp4_format;

typedef enum fp4_scale_layout {
  FP4_LAYOUT_LINEAR = 0, /* off = r*C + c: checkpoints' weight_scale [N, K/16]              */
  FP4_LAYOUT_128X4 = 1,  /* 128x4 swizzle of cuBLASLt, cuDNN, CUTLASS, FlashInfer (default) */
  FP4_LAYOUT_8X4 = 2     /* TensorRT-LLM small-M layout (activations only upstream)        */
} fp4_scale_layout;

typedef enum fp4_dtype {
  FP4_DTYPE_F32 = 0,    /* IEEE binary32                                         */
  FP4_DTYPE_BF16 = 1,   /* bfloat16: the upper half of an f32                    */
  FP4_DTYPE_F16 = 2,    /* IEEE binary16                                         */
  FP4_DTYPE_E2M1X2 = 3, /* two E2M1 codes per byte, element 0 in the low nibble */
  FP4_DTYPE_E4M3 = 4,   /* float8_e4m3fn                                         */
  FP4_DTYPE_UE8M0 = 5   /* float8_e8m0fnu: 2^(e-127)                             */
} fp4_dtype;

typedef enum fp4_memory {
  FP4_MEMORY_HOST = 0,  /* host memory, read and written by the CPU              */
  FP4_MEMORY_DEVICE = 1 /* CUDA device memory (or memory the device can address) */
} fp4_memory;

/* Elements per block scale: 16 (NVFP4) or 32 (MXFP4); 0 for an unknown format. */
FP4_API int fp4_format_block_size(fp4_format format);
/* Names for messages and tables: "nvfp4", "128x4", "bf16", "device". NULL for unknown values. */
FP4_API const char *fp4_format_name(fp4_format format);
FP4_API const char *fp4_layout_name(fp4_scale_layout layout);
FP4_API const char *fp4_dtype_name(fp4_dtype dtype);
FP4_API const char *fp4_memory_name(fp4_memory memory);
/* Bytes per element (E2M1X2: 1 byte per 2 elements, reported as 1); 0 for unknown. */
FP4_API size_t fp4_dtype_size(fp4_dtype dtype);

/* A quantized matrix [rows, cols]: FP4 codes plus block scales plus a per-tensor multiplier. */
typedef struct fp4_qmatrix {
  void *data;              /* rows * cols/2 bytes, row-major                                */
  void *scales;            /* fp4_scales_size(format, layout, rows, cols) bytes             */
  int64_t rows;            /* M for activations, N for weights                              */
  int64_t cols;            /* K: logical FP4 elements per row, a multiple of the block size  */
  fp4_format format;       /* NVFP4 or MXFP4: the scales' type and block size               */
  fp4_scale_layout layout; /* how scales is laid out                                        */
  float multiplier;        /* per-tensor decode multiplier; 1.0f for MXFP4                  */
  fp4_memory memory;       /* where data and scales live                                    */
} fp4_qmatrix;

/* A dense matrix of f32, bf16 or f16 elements. */
typedef struct fp4_matrix {
  void *data;              /* aligned to the element size (4 bytes for f32, 2 for bf16 / f16)  */
  int64_t rows;            /* in [1, 2^31] (0 only where a call says so: grouped GEMM, MoE)   */
  int64_t cols;            /* in [1, 2^31]                                                    */
  int64_t ld;              /* elements between the starts of two rows; 0 means cols, else in [cols, 2^31] */
  fp4_dtype dtype;         /* f32, bf16 or f16                                                */
  fp4_memory memory;       /* where data lives                                                */
} fp4_matrix;

/* ------------------------------------------------------------------------------------------ */
/* Scalar codecs: the bits every other implementation is tested against                         */
/* ------------------------------------------------------------------------------------------ */

/* float -> E2M1 code (0..15): round to nearest, ties to the even code, saturate to +-6,
 * NaN -> 0x7, the sign kept for values that round to zero. */
FP4_API uint8_t fp4_e2m1_encode(float x);
FP4_API float fp4_e2m1_decode(uint8_t code); /* low nibble only */
/* float -> E4M3: round to nearest even, saturate to +-448, NaN -> 0x7F. */
FP4_API uint8_t fp4_e4m3_encode(float x);
FP4_API float fp4_e4m3_decode(uint8_t code); /* 0x7F/0xFF -> NaN */
/* float -> UE8M0 rounding up (2^ceil(log2 x)), clamped to [2^-127, 2^127]; 0 -> 0x00, NaN -> 0xFF. */
FP4_API uint8_t fp4_ue8m0_encode(float x);
FP4_API float fp4_ue8m0_decode(uint8_t code); /* 0xFF -> NaN */
/* bf16 / f16 <-> f32, round to nearest even; NaN stays NaN. */
FP4_API uint16_t fp4_bf16_from_f32(float x);
FP4_API float fp4_bf16_to_f32(uint16_t bits);
FP4_API uint16_t fp4_f16_from_f32(float x);
FP4_API float fp4_f16_to_f32(uint16_t bits);

/* Converts n elements between host arrays with the codecs above. Supported: any of f32, bf16,
 * f16, e4m3, ue8m0 to any other, e2m1x2 -> f32 (n elements from (n+1)/2 bytes: an odd n reads the
 * low nibble of the last byte) and f32 -> e2m1x2 (n even). src and dst are each aligned to their
 * element size (FP4_ERR_INVALID_ARGUMENT otherwise); e2m1x2 with another dtype is FP4_ERR_UNSUPPORTED. */
FP4_API fp4_status fp4_convert(const void *src, fp4_dtype src_dtype, void *dst, fp4_dtype dst_dtype,
                               size_t n);

/* ------------------------------------------------------------------------------------------ */
/* Scale-factor layouts                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Bytes of the block scales of a [rows, cols] matrix in a layout (padding included). */
FP4_API fp4_status fp4_scales_size(fp4_format format, fp4_scale_layout layout, int64_t rows,
                                   int64_t cols, size_t *bytes);
/* Byte offset of scale (r, c) (c counts blocks) in a layout; -1, with the reason in fp4_last_error(),
 * for an invalid format, layout or shape or (r, c) outside [0, rows) x [0, cols/block). */
FP4_API int64_t fp4_scale_offset(fp4_format format, fp4_scale_layout layout, int64_t rows,
                                 int64_t cols, int64_t r, int64_t c);
/* Re-lays host scales; every padding byte of dst is written as zero. src and dst must not overlap. */
FP4_API fp4_status fp4_scales_convert(fp4_format format, int64_t rows, int64_t cols, const void *src,
                                      fp4_scale_layout src_layout, void *dst,
                                      fp4_scale_layout dst_layout);

/* ------------------------------------------------------------------------------------------ */
/* Context and options                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* A context owns per-device resources (vendor-library handles, workspaces, the tuning cache).
 * Host-only work may pass NULL where a context is asked for. A context is used by one thread at a
 * time. */
typedef struct fp4_context fp4_context;

/* device: CUDA device ordinal, or -1 for a host-only context (below -1: FP4_ERR_INVALID_ARGUMENT; an
 * ordinal in a build without CUDA: FP4_ERR_UNSUPPORTED). *ctx is NULL after a failure. */
FP4_API fp4_status fp4_context_create(fp4_context **ctx, int device);
/* Frees the context and what it owns (vendor handles, the workspace, an attached tuning cache);
 * NULL does nothing. */
FP4_API void fp4_context_destroy(fp4_context *ctx);
/* The context's device, -1 for host-only. */
FP4_API int fp4_context_device(const fp4_context *ctx);

/* What a call actually did; filled when fp4_options.info is set. */
typedef struct fp4_run_info {
  char backend[32];       /* the backend that ran                                        */
  char config[64];        /* its configuration (tile shape, algorithm), "" for the default */
  int pdl;                /* 1 if the kernel was launched with programmatic dependent launch */
  char note[160];         /* why an option was not honoured ("PDL needs SM90+, device is SM80") */
} fp4_run_info;

typedef struct fp4_options {
  const char *backend;    /* NULL or "auto": best supported backend; else a registered name */
  const char *config;     /* NULL: the backend's choice (tuned or heuristic); else a config name */
  int enable_pdl;         /* launch own CUDA kernels with programmatic dependent launch (SM90+) */
  void *stream;           /* cudaStream_t for device operands; NULL = legacy default stream      */
  fp4_run_info *info;     /* optional: receives what ran                                        */
  /* Device-resident scalars, as engines keep their scales (cuBLASLt's pointer mode device). NULL:
   * the by-value argument applies. Otherwise one f32 in device memory on the context's device, read
   * by the kernels on the GPU after the launch's dependencies, never copied to the host, so the call
   * neither synchronizes nor breaks a CUDA-graph capture. A host pointer, memory of another device,
   * or a pointer that is not 4-byte aligned is refused with FP4_ERR_INVALID_ARGUMENT. Device
   * backends only. */
  const float *alpha_device;        /* fp4_mm, fp4_mm_w4a16, grouped GEMMs: multiplies the alpha
                                       argument (pass alpha = 1.0f to use it alone); fp4_moe_forward,
                                       which has no alpha argument: scales the layer's whole output
                                       (routed and shared experts), applied in the combine        */
  const float *global_scale_device; /* fp4_quantize: the NVFP4 encode scale, replacing the
                                       global_scale argument; out->multiplier is then set to 1.0f
                                       (fold 1/global_scale into alpha, as FlashInfer's callers do) */
} fp4_options;

/* Memory helpers for tools and bindings that hold no CUDA runtime of their own. Host memory comes
 * from malloc; device memory from cudaMalloc on the context's device (FP4_ERR_UNSUPPORTED in a build
 * without CUDA). fp4_copy copies bytes between any two memories and waits for completion. A memory
 * value that is neither FP4_MEMORY_HOST nor FP4_MEMORY_DEVICE is FP4_ERR_INVALID_ARGUMENT. */
FP4_API fp4_status fp4_alloc(fp4_context *ctx, fp4_memory memory, size_t bytes, void **ptr);
FP4_API void fp4_free(fp4_context *ctx, fp4_memory memory, void *ptr);
FP4_API fp4_status fp4_copy(fp4_context *ctx, void *dst, fp4_memory dst_memory, const void *src,
                            fp4_memory src_memory, size_t bytes);
/* Waits for all work queued on the context's device (no-op for host-only contexts). */
FP4_API fp4_status fp4_synchronize(fp4_context *ctx);

/* The context's device workspace. Some GPU paths need temporary device memory (W4A4 through a bf16
 * prologue, split-K partial sums, vendor-library scratch). It never comes from an allocation hidden
 * in the call: it is the context's workspace, reserved ahead with fp4_context_reserve_workspace (the
 * size from fp4_mm_workspace_size / fp4_mm_w4a16_workspace_size), and grown by a call only outside
 * CUDA-graph capture, in stream order (cudaMallocAsync on the call's stream). A call that would have
 * to grow it while its stream is capturing fails with FP4_ERR_UNSUPPORTED naming the bytes to
 * reserve, and the capture is left intact. Work queued on one stream only: the workspace is shared
 * by every call on the context. A NULL or host-only context has no device workspace (host backends
 * need none): FP4_ERR_INVALID_ARGUMENT. */
FP4_API fp4_status fp4_context_reserve_workspace(fp4_context *ctx, size_t bytes);
/* Bytes the context's workspace holds now (0 for host-only contexts or before any reservation). */
FP4_API size_t fp4_context_workspace_bytes(const fp4_context *ctx);

/* ------------------------------------------------------------------------------------------ */
/* Quantization and dequantization                                                             */
/* ------------------------------------------------------------------------------------------ */

/* Runtime recipe (TensorRT-LLM / FlashInfer fp4_quantize, in the order of FlashInfer's default
 * build, FP4_ORDER_FLASHINFER below, with IEEE arithmetic): quantizes the rows
 * of x (f32/bf16/f16) into out. The caller sets out->data, out->scales, out->format, out->layout,
 * out->memory, out->rows = x->rows, out->cols = x->cols. global_scale is the NVFP4 encode scale
 * (448*6/amax; 1.0f keeps values as they are; it must be finite, positive and above about 2.9e-39,
 * so that its reciprocal is a float) and is ignored for MXFP4. On return
 * out->multiplier = 1/global_scale (NVFP4) or 1 (MXFP4); its value on entry is not read, and a call
 * that is refused leaves it (and out's data) as it was. Runs where the data lives: host data on a
 * host backend, device data on the cuda backend. */
FP4_API fp4_status fp4_quantize(fp4_context *ctx, const fp4_matrix *x, float global_scale,
                                fp4_qmatrix *out, const fp4_options *options);

/* Model Optimizer checkpoint recipe for NVFP4 weights (host): weight_scale_2 = amax(W)/(6*448),
 * E4M3 block scales of amax_block/(6*weight_scale_2) (zero -> 1, clamped to [2^-9, 448]), codes of
 * W/(block_scale*weight_scale_2) with -0 -> +0; bit-identical to Model Optimizer's NVFP4QTensor of
 * nvidia-modelopt 0.45 and later (FP4_MODELOPT_CURRENT below). out must be NVFP4; out->multiplier
 * and *weight_scale_2 receive weight_scale_2. An all-zero W gets weight_scale_2 = 0, scale bytes of 1.0 and all-zero codes. */
FP4_API fp4_status fp4_quantize_modelopt(const fp4_matrix *w, fp4_qmatrix *out,
                                         float *weight_scale_2);

/* Dequantizes host q into host out (f32, bf16 or f16), multiplier included: each element's exact
 * product e2m1 x block scale x multiplier rounded to f32, then to out's dtype (as the reference GEMM
 * rounds its results). */
FP4_API fp4_status fp4_dequantize(const fp4_qmatrix *q, fp4_matrix *out);

/* Named recipes, to reproduce another producer's bits exactly. The order of the runtime recipe's
 * NVFP4 scale: FLASHINFER sf = gsf * (vmax * f32(1/6)) (FlashInfer's default build and its test
 * reference; what fp4_quantize runs), EXACT sf = vmax * (gsf * f32(1/6)) with out_scale clamped to
 * FLT_MAX (its FLASHINFER_DISABLE_FP4_QUANT_FAST_MATH build). They differ by one E4M3 step where the
 * two float32 scales straddle a rounding boundary (94 of 114944 bf16 block maxima over 7 encode
 * scales; 4 of 512 blocks in FlashInfer's own bf16 test). */
typedef enum fp4_quantize_order {
  FP4_ORDER_FLASHINFER = 0,
  FP4_ORDER_EXACT = 1
} fp4_quantize_order;
/* fp4_quantize in a named order. FP4_ORDER_EXACT on NVFP4 runs on host data with the ref backend
 * only (FP4_ERR_UNSUPPORTED otherwise); MXFP4 has one order. */
FP4_API fp4_status fp4_quantize_ordered(fp4_context *ctx, const fp4_matrix *x, float global_scale,
                                        fp4_quantize_order order, fp4_qmatrix *out,
                                        const fp4_options *options);
/* The Model Optimizer release whose NVFP4 weight bits to reproduce: CURRENT (0.45 and later) clamps block scales to [2^-9, 448] before the E4M3 cast; 0_44 (0.44 and earlier)
 * casts plainly, so blocks whose scale is at most 2^-10 get byte 0 and codes of +-6 (zeros 0x7). */
typedef enum fp4_modelopt_version {
  FP4_MODELOPT_CURRENT = 0,
  FP4_MODELOPT_0_44 = 1
} fp4_modelopt_version;
FP4_API fp4_status fp4_quantize_modelopt_version(const fp4_matrix *w, fp4_modelopt_version version,
                                                 fp4_qmatrix *out, float *weight_scale_2);

/* ------------------------------------------------------------------------------------------ */
/* GEMM                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* W4A4: out[M, N] = alpha * a.multiplier * b.multiplier * dq(a)[M, K] * dq(b)[N, K]^T.
 * a and b share a format (NVFP4 or MXFP4) and K; out is f32, bf16 or f16; all three live in the
 * same memory. */
FP4_API fp4_status fp4_mm(fp4_context *ctx, const fp4_qmatrix *a, const fp4_qmatrix *b, float alpha,
                          fp4_matrix *out, const fp4_options *options);

/* W4A16: out[M, N] = alpha * b.multiplier * a[M, K] * dq(b)[N, K]^T with a in f32, bf16 or f16. */
FP4_API fp4_status fp4_mm_w4a16(fp4_context *ctx, const fp4_matrix *a, const fp4_qmatrix *b,
                                float alpha, fp4_matrix *out, const fp4_options *options);

/* Device workspace (fp4_context_reserve_workspace) the call with these operands and options would
 * use on the backend and config that options selects (auto: the one auto would run); 0 when it needs
 * none. The operands and the options (device scalars, backend, config) are validated as for the
 * call, which the query refuses with the call's status and reason; their data is not read. */
FP4_API fp4_status fp4_mm_workspace_size(fp4_context *ctx, const fp4_qmatrix *a, const fp4_qmatrix *b,
                                         const fp4_matrix *out, const fp4_options *options, size_t *bytes);
FP4_API fp4_status fp4_mm_w4a16_workspace_size(fp4_context *ctx, const fp4_matrix *a, const fp4_qmatrix *b,
                                               const fp4_matrix *out, const fp4_options *options,
                                               size_t *bytes);

/* ------------------------------------------------------------------------------------------ */
/* Backends                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Registered backends, in registry order: "ref", "cpu", "cuda", ... A backend that was not built
 * in is still listed; fp4_backend_available() says why it cannot run. Name and summary are NULL for
 * an index outside [0, fp4_backend_count()). */
FP4_API int fp4_backend_count(void);
FP4_API const char *fp4_backend_name(int index);
FP4_API const char *fp4_backend_summary(int index);
/* FP4_OK when the backend can run on ctx's device (or the host for ctx NULL / device -1);
 * otherwise FP4_ERR_UNSUPPORTED with the reason in reason[0..reason_size) (reason may be NULL) and,
 * as for every failure, in fp4_last_error(). name NULL is FP4_ERR_INVALID_ARGUMENT, a name no backend
 * has FP4_ERR_NOT_FOUND (reason ""). */
FP4_API fp4_status fp4_backend_available(fp4_context *ctx, const char *name, char *reason,
                                         size_t reason_size);

/* ------------------------------------------------------------------------------------------ */
/* Model shape sets (src/model/shapes.c): the GEMMs of real NVFP4 models from their configs        */
/* ------------------------------------------------------------------------------------------ */

typedef struct fp4_gemm_shape {
  char name[48];      /* "layers.*.mlp.experts.*.gate_up_proj" style or a short role name */
  int64_t n;          /* output features of one GEMM (after TP/EP sharding)                 */
  int64_t k;          /* input features                                                     */
  int64_t count;      /* GEMMs of this shape per forward pass (layers x experts touched)   */
  int experts;        /* experts per layer for MoE GEMMs (after EP), 0 for dense           */
  int active;         /* experts active per token, 0 for dense                             */
  char storage[16];   /* how the checkpoint stores the weight: "nvfp4", "bf16", "fp8"      */
} fp4_gemm_shape;

/* Names of the embedded shape sets ("qwen3.5-397b-a17b", "llama-3.3-70b", ...); NULL past the end. */
FP4_API const char *fp4_shape_set_name(int index);
/* The GEMMs of a model sharded for tensor parallelism tp and expert parallelism ep (1 = none).
 * Writes at most max shapes and the total into *count. */
FP4_API fp4_status fp4_shape_set(const char *model, int tp, int ep, fp4_gemm_shape *shapes, int max, int *count);

/* ------------------------------------------------------------------------------------------ */
/* Grouped GEMM and the mixture-of-experts layer (docs/moe.md)                                   */
/* ------------------------------------------------------------------------------------------ */

/* E experts' weights of one shape [rows, cols] = [N, K] in one allocation, as checkpoints of MoE
 * models are stacked ([E, N, K/2] uint8). Expert e's codes start at byte e * rows * cols/2; its block
 * scales are the e-th of E consecutive per-expert scale buffers, each fp4_scales_size(format, layout,
 * rows, cols) bytes (so every expert's scales are laid out as those of an ordinary [N, K] matrix,
 * padding included). multipliers, when not NULL, holds E per-expert decode multipliers (Model
 * Optimizer's weight_scale_2 of each expert, in the same memory as data); NULL means 1 for every
 * expert (MXFP4). */
typedef struct fp4_grouped_qmatrix {
  void *data;              /* experts * rows * cols/2 bytes                                    */
  void *scales;            /* experts * fp4_scales_size(format, layout, rows, cols) bytes       */
  const float *multipliers; /* [experts] decode multipliers (4-byte aligned), or NULL for 1.0     */
  int64_t experts;         /* E                                                                */
  int64_t rows;            /* N: output features of one expert                                  */
  int64_t cols;            /* K: input features, a multiple of the block size                   */
  fp4_format format;       /* NVFP4 or MXFP4, every expert alike                                 */
  fp4_scale_layout layout; /* of every expert's scales                                          */
  fp4_memory memory;       /* where data, scales and multipliers live                            */
} fp4_grouped_qmatrix;

/* Expert e of g as an ordinary fp4_qmatrix (a view: no copy), multiplier included. A device-memory
 * g with multipliers cannot be read from the host: FP4_ERR_UNSUPPORTED (apply multipliers[e]
 * yourself and view with multipliers = NULL). */
FP4_API fp4_status fp4_grouped_expert(const fp4_grouped_qmatrix *g, int64_t e, fp4_qmatrix *view);

/* Grouped W4A4 GEMM. The T rows of a are grouped by expert: rows offsets[e] .. offsets[e+1]-1 use
 * expert e, with offsets[0] = 0, offsets non-decreasing, offsets[E] = T (an expert may have no rows).
 *   out[t, :] = alpha * a.multiplier * b.multipliers[e] * dq(a)[t, :] * dq(b_e)^T      for t in group e
 * a [T, K] and b share the format and K; out is [T, N] (f32, bf16, f16). offsets ([E+1] int64,
 * 8-byte aligned) lives in the operands' memory; its contents are checked when that memory is the
 * host's. T = 0 (a->rows = 0, out->rows = 0, data may be NULL) is a valid call that does nothing;
 * everything else, the options included, is validated as for T > 0. */
FP4_API fp4_status fp4_grouped_mm(fp4_context *ctx, const fp4_qmatrix *a, const fp4_grouped_qmatrix *b,
                                  const int64_t *offsets, float alpha, fp4_matrix *out, const fp4_options *options);

/* Grouped W4A16 GEMM: as fp4_grouped_mm with dense activations a [T, K] (f32, bf16, f16):
 *   out[t, :] = alpha * b.multipliers[e] * a[t, :] * dq(b_e)^T                          for t in group e */
FP4_API fp4_status fp4_grouped_mm_w4a16(fp4_context *ctx, const fp4_matrix *a, const fp4_grouped_qmatrix *b,
                                        const int64_t *offsets, float alpha, fp4_matrix *out,
                                        const fp4_options *options);

/* Device workspace (fp4_context_reserve_workspace) the grouped GEMM with these operands and options
 * would take (0: none), as fp4_mm_workspace_size: reserve it before capturing the call in a CUDA
 * graph. The operands and options are validated as for the call; their data is not read, offsets
 * and b's per-expert multipliers excepted when they are in host memory (checked as the call checks
 * them). */
FP4_API fp4_status fp4_grouped_mm_workspace_size(fp4_context *ctx, const fp4_qmatrix *a, const fp4_grouped_qmatrix *b,
                                                 const int64_t *offsets, const fp4_matrix *out,
                                                 const fp4_options *options, size_t *bytes);
FP4_API fp4_status fp4_grouped_mm_w4a16_workspace_size(fp4_context *ctx, const fp4_matrix *a,
                                                       const fp4_grouped_qmatrix *b, const int64_t *offsets,
                                                       const fp4_matrix *out, const fp4_options *options,
                                                       size_t *bytes);

typedef enum fp4_moe_mode {
  FP4_MOE_W4A16 = 0, /* FP4 weights, activations kept in floating point                           */
  FP4_MOE_W4A4 = 1   /* activations quantized with the runtime recipe in the weights' format      */
} fp4_moe_mode;

/* One set of experts of a gated-SiLU MLP: y = down(SiLU(gate(x)) * up(x)).
 * gate_up is [E, 2I, H]: rows 0 .. I-1 are the gate projection (w1), rows I .. 2I-1 the up projection
 * (w3): the w13 order of vLLM and SGLang checkpoints loaders (FlashInfer's fused kernels want w31:
 * swap the halves before passing such weights here). down is [E, H, I] (w2). */
typedef struct fp4_moe_experts {
  fp4_grouped_qmatrix gate_up;
  fp4_grouped_qmatrix down;
  /* W4A4 with NVFP4 only: the per-layer activation encode scales (global_scale = 1/input_scale of a
   * Model Optimizer checkpoint, or input_global_scale of compressed-tensors) used to quantize the
   * input of gate_up and of down. Finite and positive; ignored for W4A16 and MXFP4. */
  float gate_up_act_scale;
  float down_act_scale;
  /* NULL, or [2] f32 in device memory: the gate_up and down encode scales above, read on the GPU in
   * their place (W4A4 NVFP4 on device backends; engines keep them as tensors). */
  const float *act_scales_device;
} fp4_moe_experts;

typedef struct fp4_moe_layer {
  fp4_moe_mode mode;               /* W4A16 or W4A4 (the activations quantized)                  */
  fp4_moe_experts routed;          /* E routed experts                                           */
  const fp4_moe_experts *shared;   /* NULL, or one shared expert (experts = 1, its own I) applied  */
                                   /* to every token with weight 1 (or routing.shared_weights)    */
} fp4_moe_layer;

/* The router's decision for T tokens (the caller routes). topk_ids [tokens, top_k] int32 row-major
 * and topk_weights [tokens, top_k] f32 live in the operands' memory (each aligned to its 4-byte
 * elements, as shared_weights). Ids must lie in [0, E); a
 * token may name the same expert more than once: each occurrence contributes (contributions add). */
typedef struct fp4_moe_routing {
  const int32_t *topk_ids;         /* [T, top_k] expert ids; may be NULL when T = 0              */
  int64_t tokens;                  /* T: must equal hidden->rows                                  */
  int64_t top_k;                   /* k >= 1                                                      */
  fp4_matrix topk_weights;         /* [T, k] f32                                                  */
  const float *shared_weights;     /* NULL (weight 1), or [T] f32: a per-token gate of the shared */
                                   /* expert (Qwen's sigmoid(shared_expert_gate(x)))            */
} fp4_moe_routing;

/* The alignment in bytes of fp4_moe_forward's workspace: its sections hold int64, int32 and f32
 * arrays (and vector loads on the device) at multiples of 256 bytes from its start. malloc on 64-bit
 * systems, cudaMalloc, NumPy and PyTorch allocations are aligned at least this much. */
#define FP4_MOE_WORKSPACE_ALIGNMENT 16

/* Bytes of workspace fp4_moe_forward needs for T = tokens and k = top_k on the backend options
 * names (or, for auto or NULL options, the most that any registered backend needs). Depends on the
 * layer's shapes, mode and formats, not on data (host-memory per-expert multipliers are checked as
 * the call checks them). 0 for tokens = 0. A workspace that does not fit size_t is
 * FP4_ERR_INVALID_ARGUMENT, as the call refuses it. */
FP4_API fp4_status fp4_moe_workspace_size(const fp4_moe_layer *layer, int64_t tokens, int64_t top_k,
                                          const fp4_options *options, size_t *bytes);

/* The MoE layer forward, out[T, H] = sum_j topk_weights[t, j] * expert_{topk_ids[t, j]}(hidden[t])
 * (+ shared_weight[t] * shared(hidden[t])), each expert e computing
 *   down_e( SiLU(gate_e(x)) * up_e(x) ).
 * Steps: permute tokens by expert -> gate_up grouped GEMM -> SiLU(gate) * up -> (W4A4: re-quantize)
 * -> down grouped GEMM -> weighted combine back to [T, H]. hidden [T, H] and out [T, H] are f32,
 * bf16 or f16; every operand, the workspace included, lives in one memory. workspace: at least
 * fp4_moe_workspace_size() bytes, FP4_MOE_WORKSPACE_ALIGNMENT-aligned (contents need not be kept
 * between calls). T = 0 does nothing and returns FP4_OK once everything else, the options included,
 * is validated as for T > 0. The numeric contract (what is rounded where) is in docs/moe.md. */
FP4_API fp4_status fp4_moe_forward(fp4_context *ctx, const fp4_moe_layer *layer, const fp4_matrix *hidden,
                                   const fp4_moe_routing *routing, void *workspace, size_t workspace_bytes,
                                   fp4_matrix *out, const fp4_options *options);

/* Device workspace (fp4_context_reserve_workspace) fp4_moe_forward with these operands and options
 * takes from the context besides the caller's workspace (0: none; on the cuda backend a shared
 * expert run on the dense GEMM kernels may take some, docs/moe.md): reserve it before capturing the
 * layer in a CUDA graph, as for fp4_mm_workspace_size. The operands and options are validated as for
 * the call, the layer workspace's size included; their data is not read (host-memory per-expert
 * multipliers excepted, checked as the call checks them): routing may be sized before the router has
 * filled its ids and weights, whose values the call checks when they are in host memory. */
FP4_API fp4_status fp4_moe_context_workspace_size(fp4_context *ctx, const fp4_moe_layer *layer,
                                                  const fp4_matrix *hidden, const fp4_moe_routing *routing,
                                                  const fp4_matrix *out, const fp4_options *options, size_t *bytes);

/* ------------------------------------------------------------------------------------------ */
/* Architectures, capability probe, auto selection and tuning (src/dispatch/arch.c, probe.c,     */
/* src/tune/tuner.c)                                                                           */
/* ------------------------------------------------------------------------------------------ */

/* One row of the architecture table: the facts every backend's capability answer starts from. */
typedef struct fp4_arch_info {
  const char *name;          /* "sm_90"                                                        */
  int cc;                    /* compute capability as major*10+minor: 90                       */
  const char *gpus;          /* example products: "H100, H200"                                */
  int fp4_mma;               /* the tensor cores have a block-scaled FP4 MMA                   */
  const char *fp4_mma_insn;  /* that instruction, or why there is none                         */
  const char *bf16_mma;      /* the best BF16 tensor-core instruction                          */
  int pdl;                   /* programmatic dependent launch (griddepcontrol)                 */
  int tma;                   /* tensor memory accelerator                                      */
  int smem_kb;               /* shared memory per block, KB                                    */
  const char *build_target;  /* the nvcc target the fast kernels need: "sm_90a"               */
  int compiled;              /* this build contains device code for the architecture           */
  int hardware_tested;       /* fp4kit's GPU tests have been run on a GPU of this architecture */
} fp4_arch_info;

/* Rows of the architecture table. */
FP4_API int fp4_arch_count(void);
/* Row index of the table; NULL past the end. */
FP4_API const fp4_arch_info *fp4_arch_get(int index);
/* Looks up "sm_120", "sm_120a", "120", "12.0" or a cc integer given as text; NULL if unknown. */
FP4_API const fp4_arch_info *fp4_arch_find(const char *name);
/* The row for a compute capability (major*10+minor); NULL if unknown. */
FP4_API const fp4_arch_info *fp4_arch_for_cc(int cc);
/* The CUDA targets this library was built for ("80-real;90a-real"), "" without CUDA. */
FP4_API const char *fp4_build_cuda_targets(void);

/* What the probe asks of every backend. */
typedef enum fp4_cap {
  FP4_CAP_NVFP4_W4A4 = 0, /* fp4_mm on NVFP4 operands                          */
  FP4_CAP_MXFP4_W4A4 = 1, /* fp4_mm on MXFP4 operands                          */
  FP4_CAP_W4A16 = 2,      /* fp4_mm_w4a16 (FP4 weights, bf16 activations)      */
  FP4_CAP_GROUPED = 3,    /* grouped / MoE GEMM                                */
  FP4_CAP_PDL = 4,        /* honours enable_pdl (programmatic dependent launch) */
  FP4_CAP_COUNT = 5       /* the number of capabilities, not one itself        */
} fp4_cap;

/* A capability's answer: UNKNOWN where it cannot be established here (a vendor library asked about
 * an architecture that is not present, a backend that does not say). */
typedef enum fp4_support { FP4_SUPPORT_NO = 0, FP4_SUPPORT_YES = 1, FP4_SUPPORT_UNKNOWN = 2 } fp4_support;

/* How an answer was obtained: the probe says plainly what ran and what was only compiled. */
typedef enum fp4_evidence {
  FP4_EVIDENCE_TABLE = 0,    /* the architecture table and the build targets (nothing ran)   */
  FP4_EVIDENCE_QUERIED = 1,  /* asked of the device, driver or vendor library at run time     */
  FP4_EVIDENCE_EXECUTED = 2, /* executed on this machine and compared with the reference       */
  FP4_EVIDENCE_FAILED = 3    /* executed and the result was wrong (see reason)                 */
} fp4_evidence;

typedef struct fp4_capability {
  fp4_support support;       /* the answer                                                     */
  fp4_evidence evidence;     /* how it was obtained                                            */
  char reason[192];          /* why not, or what answered yes ("cuBLASLt 13.1: 3 algorithms") */
} fp4_capability;

typedef struct fp4_backend_probe {
  char backend[32];
  fp4_support available;     /* can run at all here                                            */
  char reason[192];          /* why not                                                        */
  int device_memory;         /* runs on device memory (0: a host backend)                      */
  fp4_capability caps[FP4_CAP_COUNT]; /* indexed by fp4_cap                                      */
} fp4_backend_probe;

typedef struct fp4_device_probe {
  int device;                /* CUDA ordinal                                                   */
  char name[128];
  int cc;                    /* major*10+minor                                                 */
  int sm_count;
  uint64_t memory_bytes;
  int driver_version;        /* cudaDriverGetVersion: 13000 = CUDA 13.0                        */
  int runtime_version;       /* cudaRuntimeGetVersion                                          */
  int cublaslt_version;      /* cublasLtGetVersion: 130100 = 13.1.0; 0 when not built in or absent */
  int cudnn_version;         /* cudnnGetVersion: 91300 = 9.13.0; 0 when not built in or absent  */
  int binary_has_code;       /* this build contains code the device can run natively           */
  char arch[16];             /* "sm_90"                                                        */
} fp4_device_probe;

/* Name of a capability for tables ("nvfp4 w4a4"); NULL for unknown values. */
FP4_API const char *fp4_cap_name(fp4_cap cap);
/* "yes", "no", "unknown" / "table", "queried", "executed", "failed"; NULL for unknown values. */
FP4_API const char *fp4_support_name(fp4_support support);
FP4_API const char *fp4_evidence_name(fp4_evidence evidence);
/* CUDA devices visible (0 in a build without CUDA or without a driver). */
FP4_API int fp4_probe_device_count(void);
/* What CUDA device `device` is (name, cc, versions): FP4_ERR_NOT_FOUND for an ordinal outside
 * [0, fp4_probe_device_count()), FP4_ERR_UNSUPPORTED in a build without CUDA; out is cleared first. */
FP4_API fp4_status fp4_probe_device(int device, fp4_device_probe *out);
/* Asks a backend what it can do on ctx's device (or the host for NULL / device -1, which answer
 * alike): availability
 * and every capability, each with a reason. Answers are queried at run time (vendor libraries are
 * asked, not assumed). */
FP4_API fp4_status fp4_probe_backend(fp4_context *ctx, const char *backend, fp4_backend_probe *out);
/* The same question for an architecture that need not be present ("sm_120"): answered from the
 * architecture table and this build's targets; vendor-library answers are FP4_SUPPORT_UNKNOWN. */
FP4_API fp4_status fp4_probe_backend_arch(const char *arch, const char *backend, fp4_backend_probe *out);

/* Auto selection: with no tuning cache, backends that support a problem are ranked by a pure
 * heuristic per compute capability and M regime; with a tuning cache attached to the context, the
 * cached winner for (M bucket, N, K, formats, output dtype) runs. */

/* The M bucket of a run-time M, as FlashInfer's autotuner buckets it: powers of two up to 256, steps
 * of 256 to 2048, steps of 512 to 4096, then powers of two; M is rounded up (M <= 1 gives 1). M above
 * 2^62, which no int64 power of two rounds up, has no bucket: -1. The functions that take a key
 * refuse M above 2^31, the largest M a GEMM takes. */
FP4_API int64_t fp4_tune_m_bucket(int64_t m);

/* The call a tuning entry is for: fp4_mm (W4A4) or fp4_mm_w4a16. */
typedef enum fp4_tune_op { FP4_TUNE_MM = 0, FP4_TUNE_MM_W4A16 = 1 } fp4_tune_op;

/* What a tuning cache entry is keyed by (besides the cache's library version and device). */
typedef struct fp4_tune_key {
  fp4_tune_op op;      /* fp4_mm or fp4_mm_w4a16                                         */
  fp4_format format;   /* the weights' (and for W4A4 the activations') format            */
  fp4_dtype a_dtype;   /* W4A16 activation dtype (bf16, f16, f32); FP4_DTYPE_E2M1X2 for W4A4 */
  fp4_dtype out_dtype; /* bf16, f16, f32                                                 */
  int64_t m;           /* run-time M; lookups and stores use fp4_tune_m_bucket(m)        */
  int64_t n, k;        /* K a multiple of the format's block size                       */
} fp4_tune_key;
/* A key names a GEMM a call can make, or every function that takes one (fp4_tune,
 * fp4_tuning_cache_set, fp4_tuning_cache_lookup) refuses it with FP4_ERR_INVALID_ARGUMENT naming the
 * field, and a loaded file skips the entry: an unknown op or format, an a_dtype other than the op's
 * (E2M1X2 for W4A4, bf16/f16/f32 for W4A16), another out_dtype, M, N or K outside [1, 2^31], K off
 * the block size. Such an entry could never be found by auto selection. */

typedef struct fp4_tuning_cache fp4_tuning_cache;

/* An empty cache for ctx's device (or the host), stamped with the library, device and vendor-
 * library versions that a loaded file must match. */
FP4_API fp4_status fp4_tuning_cache_create(fp4_context *ctx, fp4_tuning_cache **cache);
/* Frees a cache that no context owns (fp4_context_set_tuning_cache takes ownership); NULL does
 * nothing. */
FP4_API void fp4_tuning_cache_destroy(fp4_tuning_cache *cache);
/* Replaces the entries with a file's. A missing, truncated, malformed or mismatched file (another
 * library version, device or vendor-library version) leaves the cache empty and returns
 * FP4_ERR_NOT_FOUND, FP4_ERR_FORMAT or FP4_ERR_UNSUPPORTED with the reason: callers warn and go on.
 * In a usable file, each invalid entry (a field missing or of the wrong type, an unknown op, format
 * or dtype, an M that is not a bucket, a key no call makes (fp4_tune_key), a time that is not finite
 * and positive) is skipped alone,
 * with a warning naming it (fp4_log); the others load, and on FP4_OK fp4_last_error() says how many
 * were skipped ("" when none). An entry naming a backend this build lacks loads: auto ignores it. */
FP4_API fp4_status fp4_tuning_cache_load(fp4_tuning_cache *cache, const char *path);
/* Writes the cache as JSON, merged with the file already at path: under an advisory lock on
 * <path>.lock (created beside it and kept), the file's entries are read again; entries set on this
 * cache since it was created or loaded replace the file's, the file's other entries are kept, and
 * this cache's remaining entries fill keys the file lacks. Concurrent writers therefore keep every
 * entry. An existing file is replaced only when it is recognisably a tuning cache: a usable one, one
 * of another version or device, a damaged one that still starts as a JSON object naming its format
 * ("format": "fp4kit-tuning-cache"), or a blank one. Any other file (or a folder) is left as it is and
 * the save fails with FP4_ERR_INVALID_ARGUMENT saying so; one that cannot be read, FP4_ERR_IO. The
 * text goes to a new file created exclusively (never through a link) under an unpredictable name in
 * the target's folder, which is renamed over the target: readers see the old or the new file, never
 * a mix. The file keeps the permissions of the one it replaces; a new one gets 0666 less the umask.
 * When path is a symbolic link, the target is the file it leads to (the link stays a link, and the
 * lock is <target>.lock); a link to a file that does not exist fails with FP4_ERR_INVALID_ARGUMENT.
 * Creates the folder if needed; a folder that cannot be written fails with FP4_ERR_IO naming it. */
FP4_API fp4_status fp4_tuning_cache_save(const fp4_tuning_cache *cache, const char *path);
/* Records a winner (replaces an entry with the same key). config may be NULL (backend default).
 * median_us must be a plausible time (finite, from 0.001 us to 1e10 us), else FP4_ERR_INVALID_ARGUMENT. */
FP4_API fp4_status fp4_tuning_cache_set(fp4_tuning_cache *cache, const fp4_tune_key *key, const char *backend,
                                        const char *config, double median_us);
/* The winner for a key: FP4_OK, or FP4_ERR_NOT_FOUND. backend/config receive NUL-terminated names;
 * either may be NULL (not wanted). A buffer too small for its name gives FP4_ERR_INVALID_ARGUMENT
 * and "" (never a truncated name). Auto selection does not follow an entry whose backend this
 * build lacks, whose config the backend does not offer for the problem, whose backend exists only
 * to check others (the reference), or that names a host backend for device operands: it warns once
 * per entry and uses the heuristic. */
FP4_API fp4_status fp4_tuning_cache_lookup(const fp4_tuning_cache *cache, const fp4_tune_key *key, char *backend,
                                           size_t backend_size, char *config, size_t config_size);
/* Entries the cache holds (0 for NULL). */
FP4_API int fp4_tuning_cache_count(const fp4_tuning_cache *cache);
/* The default cache file: $FP4KIT_TUNING_CACHE, else $XDG_CACHE_HOME/fp4kit/tuning.json, else
 * $HOME/.cache/fp4kit/tuning.json. Writes "" when none can be formed. */
FP4_API fp4_status fp4_tuning_cache_default_path(char *path, size_t path_size);

/* Attaches a cache to a context for auto selection; the context takes ownership (NULL detaches
 * and frees the previous one). Without this call, the first auto selection on a device context
 * loads the default file; a file that cannot be used is ignored with one warning (fp4_log) and
 * fp4_context_tuning_note() says why. */
FP4_API fp4_status fp4_context_set_tuning_cache(fp4_context *ctx, fp4_tuning_cache *cache);
/* The cache auto selection uses (NULL if none), and a note on how it was loaded or why not. */
FP4_API const fp4_tuning_cache *fp4_context_tuning_cache(fp4_context *ctx);
FP4_API const char *fp4_context_tuning_note(fp4_context *ctx);

/* One tuned point, reported to a progress callback and returned by fp4_tune. */
typedef struct fp4_tune_result {
  fp4_tune_key key;
  char backend[32];
  char config[64];
  double median_us;     /* the winner's median; 0 when nothing could run                 */
  int candidates;       /* (backend, config) pairs timed                                 */
  int rejected;         /* candidates that failed or returned NaN / all zeros            */
  int cut;              /* candidates stopped early: over 20x the best median so far      */
} fp4_tune_result;

/* Called after each candidate (done of total) so a tool can draw progress; may be NULL. */
typedef void (*fp4_tune_progress_fn)(void *user, int done, int total, const char *what);

/* Times every available (backend, config) on each key (at M = its bucket) on ctx's device (or the
 * host), on random data, rejecting candidates that fail or return NaN or all zeros, and stores each
 * winner in cache. results (optional) receives count entries. runs: timed calls per candidate.
 * Every key is checked (shape range, K a multiple of the format's block) before any is timed. Keys
 * that name one cache entry (M values in one bucket) are timed once: the later ones' results are
 * copies of the first's. */
FP4_API fp4_status fp4_tune(fp4_context *ctx, const fp4_tune_key *keys, int count, int runs, fp4_tuning_cache *cache,
                            fp4_tune_result *results, fp4_tune_progress_fn progress, void *user);

/* ------------------------------------------------------------------------------------------ */
/* CPU backend (src/backends/cpu): instruction-set level per kernel, threads                     */
/* ------------------------------------------------------------------------------------------ */

/* Names of the cpu backend's kernels ("quantize", "gemv_f32", "gemv_bf16", "gemm_f32",
 * "gemm_bf16"); NULL past the end. gemv_* run for M <= 4, gemm_* above; *_bf16 serve bf16
 * activations and W4A4 (whose dequantized activations are exact in bf16). */
FP4_API const char *fp4_cpu_kernel_name(int index);
/* The level a kernel runs with by default: "generic", "avx2", "avx512", "avx512_bf16" (or "neon"):
 * the highest this CPU and build support. The cpu backend's configs (fp4_options.config "generic",
 * "avx2", "avx512", "neon") run a lower one; a level above the CPU's is refused. NULL for an
 * unknown kernel. */
FP4_API const char *fp4_cpu_level(const char *kernel);
/* Threads the cpu backend uses: FP4KIT_NUM_THREADS, default the online CPUs. */
FP4_API int fp4_cpu_threads(void);

#ifdef __cplusplus
}
#endif

#endif /* FP4KIT_H */
