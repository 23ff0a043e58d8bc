/*
 * fp4kit model files: safetensors checkpoints (read through mmap, written atomically), the
 * quantized weights inside them, model inspection and checkpoint quantization.
 *
 * Include after (or instead of) fp4kit.h; link -lfp4kit. Every call returns an fp4_status and
 * fp4_last_error() names the file, the tensor and the byte offset of a malformed input.
 */
#ifndef FP4KIT_MODEL_H
#define FP4KIT_MODEL_H

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/* safetensors                                                                                 */
/* ------------------------------------------------------------------------------------------ */

typedef enum fp4_st_dtype {
  FP4_ST_BOOL = 0, FP4_ST_U8, FP4_ST_I8, FP4_ST_F8_E5M2, FP4_ST_F8_E4M3, FP4_ST_F8_E8M0, FP4_ST_I16,
  FP4_ST_U16, FP4_ST_F16, FP4_ST_BF16, FP4_ST_I32, FP4_ST_U32, FP4_ST_F32, FP4_ST_F64, FP4_ST_I64,
  FP4_ST_U64, FP4_ST_F4,
  FP4_ST_DTYPE_COUNT
} fp4_st_dtype;

/* The safetensors spelling ("BF16", "F8_E4M3"); NULL for an unknown value. */
FP4_API const char *fp4_st_dtype_name(fp4_st_dtype dtype);
/* Bits per element (F4: 4); 0 for an unknown value. */
FP4_API int fp4_st_dtype_bits(fp4_st_dtype dtype);
/* Parses a safetensors dtype name; FP4_ERR_NOT_FOUND when unknown. */
FP4_API fp4_status fp4_st_dtype_parse(const char *name, fp4_st_dtype *dtype);

#define FP4_ST_MAX_DIMS 8

typedef struct fp4_st_tensor {
  const char *name;
  fp4_st_dtype dtype;
  int ndim;
  int64_t shape[FP4_ST_MAX_DIMS];
  uint64_t offset;     /* byte offset of the data in its file (header included)               */
  uint64_t bytes;
  const void *data;    /* memory-mapped, read-only; NULL when opened with HEADERS_ONLY        */
  int file;            /* index of the shard holding it (fp4_safetensors_file)                */
} fp4_st_tensor;

/* A checkpoint: one .safetensors file or every shard of a sharded one. */
typedef struct fp4_safetensors fp4_safetensors;

enum {
  FP4_SAFETENSORS_HEADERS_ONLY = 1 /* read headers with pread, map no data: fast inspection */
};

/* Opens path: a .safetensors file, a model.safetensors.index.json, or a directory (its index when
 * present, else every *.safetensors in it). Every header is validated as hostile input: header
 * length beyond the file, invalid JSON, unknown dtype, a shape whose byte count overflows or
 * differs from its data_offsets, offsets out of range, overlapping or leaving holes, duplicate
 * names (also across shards), names or other strings that are not UTF-8 (or hold a NUL), index
 * entries naming a missing tensor or a file outside the directory: FP4_ERR_FORMAT naming the file,
 * the tensor and the byte offset. A shard that is not a regular file (a FIFO, a device) is refused
 * with FP4_ERR_IO saying what it is, without waiting on it. */
FP4_API fp4_status fp4_safetensors_open(const char *path, unsigned flags, fp4_safetensors **st);
/* Parses one safetensors image held in memory (the caller keeps it alive until close). */
FP4_API fp4_status fp4_safetensors_open_memory(const void *image, size_t size, fp4_safetensors **st);
FP4_API void fp4_safetensors_close(fp4_safetensors *st);

FP4_API int64_t fp4_safetensors_count(const fp4_safetensors *st);
/* Tensors in name order; NULL past the end. */
FP4_API const fp4_st_tensor *fp4_safetensors_at(const fp4_safetensors *st, int64_t index);
/* The tensor of that exact name, NULL if absent (binary search). */
FP4_API const fp4_st_tensor *fp4_safetensors_find(const fp4_safetensors *st, const char *name);
FP4_API int fp4_safetensors_file_count(const fp4_safetensors *st);
/* Path of shard i as opened; NULL past the end. */
FP4_API const char *fp4_safetensors_file(const fp4_safetensors *st, int index);
/* A "__metadata__" value of shard file, NULL if absent. */
FP4_API const char *fp4_safetensors_metadata(const fp4_safetensors *st, int file, const char *key);

/* A zero-copy view of the quantized weight of a linear module ("model.layers.0.mlp.down_proj"):
 * Model Optimizer NVFP4 (weight U8, weight_scale F8_E4M3, weight_scale_2 F32), compressed-tensors
 * nvfp4-pack-quantized (weight_packed, weight_scale, weight_global_scale: multiplier = 1/global)
 * or MXFP4 (weight U8, weight_scale U8/F8_E8M0 per 32). Scales are linear; memory is host. */
FP4_API fp4_status fp4_safetensors_qmatrix(const fp4_safetensors *st, const char *module, fp4_qmatrix *q);

/* Writer: declare every tensor, then write each one (any order), then finish. The file appears
 * under its name only when finish succeeds (temporary file + fsync + rename); abort or a failure
 * removes the temporary file. Memory held: the header only. */
typedef struct fp4_st_writer fp4_st_writer;
FP4_API fp4_status fp4_st_writer_create(const char *path, fp4_st_writer **w);
FP4_API fp4_status fp4_st_writer_metadata(fp4_st_writer *w, const char *key, const char *value);
FP4_API fp4_status fp4_st_writer_declare(fp4_st_writer *w, const char *name, fp4_st_dtype dtype, int ndim,
                                         const int64_t *shape);
FP4_API fp4_status fp4_st_writer_write(fp4_st_writer *w, const char *name, const void *data, size_t bytes);
/* Bytes of data declared so far (for an index's total_size). */
FP4_API uint64_t fp4_st_writer_data_bytes(const fp4_st_writer *w);
/* Checks every tensor was written, renames into place and frees w (also on failure). */
FP4_API fp4_status fp4_st_writer_finish(fp4_st_writer *w);
FP4_API void fp4_st_writer_abort(fp4_st_writer *w);

/* ------------------------------------------------------------------------------------------ */
/* Model inspection                                                                            */
/* ------------------------------------------------------------------------------------------ */

typedef struct fp4_inspect_options {
  int tp;    /* tensor parallelism for the GEMM list (1 = none) */
  int ep;    /* expert parallelism (1 = none)                   */
  int json;  /* 1: a JSON document; 0: text for people          */
} fp4_inspect_options;

/* Inspects a model (a directory, one .safetensors file or a model.safetensors.index.json; the
 * config files are read from the directory holding it) from config.json, hf_quant_config.json and
 * the tensor headers only:
 * architecture, quantization scheme, census of modules by storage type, excluded modules, every
 * tensor by kind (unclassified ones listed), MTP heads, GEMM list sharded for tp/ep (one row per name
 * with numeric indices collapsed, MTP layers apart). JSON reports are valid UTF-8 (a path's invalid
 * bytes become U+FFFD). *report is malloc'ed; free it with fp4_model_free. */
FP4_API fp4_status fp4_model_inspect(const char *dir, const fp4_inspect_options *options, char **report);
FP4_API void fp4_model_free(void *p);

/* ------------------------------------------------------------------------------------------ */
/* Checkpoint quantization                                                                     */
/* ------------------------------------------------------------------------------------------ */

typedef enum fp4_ckpt_layout {
  FP4_CKPT_MODELOPT = 0,          /* weight, weight_scale, weight_scale_2 (+ hf_quant_config.json)  */
  FP4_CKPT_COMPRESSED_TENSORS = 1 /* weight_packed, weight_scale, weight_global_scale            */
} fp4_ckpt_layout;

typedef void (*fp4_progress_fn)(void *user, const char *tensor, int64_t done, int64_t total);
/* One line for the user, without a trailing newline. */
typedef void (*fp4_warning_fn)(void *user, const char *message);

/* What fp4_model_quantize does with the input. A "weight" here is a 2-D floating-point (BF16/F16/F32)
 * ".weight" tensor, or a floating-point tensor of 3 or more dimensions under an "experts" module
 * (fused expert weights such as experts.gate_up_proj); every weight is quantized or kept, and every
 * kept one is named in the output config's ignore list (by module). */
typedef struct fp4_model_quantize_summary {
  int64_t quantized;        /* weights written in FP4                                                  */
  int64_t kept_by_default;  /* weights kept by the default rules (lm_head, embeddings, norms, MoE
                               routers, MTP layers, vision towers)                                     */
  int64_t kept_by_pattern;  /* weights kept by the caller's patterns (not included, or excluded)       */
  int64_t kept_for_shape;   /* weights kept because FP4 [N, K] cannot hold them: 3-D and larger (fused
                               experts), empty, K not a multiple of the block; each one is warned about */
  int64_t other_tensors;    /* other tensors, copied unchanged (norms, biases, convolutions, ...)      */
  int64_t files_copied;     /* other files of in_dir copied unchanged (tokenizer, generation config)   */
  int64_t entries_skipped;  /* entries of in_dir not copied (subdirectories, hidden entries, shards the
                               index does not list, links to nothing); each one is warned about         */
} fp4_model_quantize_summary;

typedef struct fp4_model_quantize_options {
  fp4_format format;          /* NVFP4 (Model Optimizer recipe) or MXFP4                              */
  fp4_ckpt_layout layout;     /* NVFP4 only: Model Optimizer or compressed-tensors names                */
  const char *const *include; /* glob patterns of linear modules to quantize; NULL: every 2-D .weight */
  int include_count;
  const char *const *exclude; /* patterns never quantized, added to the defaults                       */
  int exclude_count;
  int no_default_excludes;    /* 1: drop the defaults (lm_head, embeddings, norms, MoE routers, MTP)   */
  fp4_modelopt_version modelopt_version; /* NVFP4: the Model Optimizer release whose weight bits to
                                            reproduce; 0 = FP4_MODELOPT_CURRENT (0.45 and later)    */
  float input_amax;           /* NVFP4: > 0 writes input_scale = input_amax/(6*448) (a static activation
                                 range; there is no calibration here) and quant_algo NVFP4 (W4A4);
                                 0 writes no input scale and quant_algo W4A16_NVFP4 (weight-only)    */
  fp4_progress_fn progress;   /* optional, called before each tensor and at the end                    */
  void *progress_user;
  int force;                  /* 1: a non-empty out_dir is replaced (once the new output is complete);
                                 0: a non-empty out_dir is refused                                      */
  fp4_warning_fn warning;     /* optional: one call per weight kept for its shape and per entry of in_dir
                                 not copied, all made before any output is written                      */
  void *warning_user;
  fp4_model_quantize_summary *summary; /* optional: the counts, filled in once the input is planned
                                          (before any output is written, so also when the run fails) */
} fp4_model_quantize_options;

/* Quantizes the BF16/F16/F32 linear weights of in_dir (a directory) into out_dir, shard by shard with
 * the input's shard names, copying every other tensor and the other files of in_dir (streamed, holes
 * kept); writes hf_quant_config.json and config.json's quantization_config. Memory: about the largest
 * tensor's quantized size. Before any output is written the whole input is planned and checked: a
 * run that would quantize no weight is refused (FP4_ERR_NOT_FOUND, naming what kept them), as is an
 * unreadable file to copy or an output larger than the free space beside out_dir.
 * Everything is written into a temporary sibling directory ".OUT.fp4kit-tmp.PID.XXXXXX" that takes
 * out_dir's place only when every shard, the index and the configs are complete; a failure removes
 * it, and a later run removes those left by runs that were killed. out_dir must not exist, be empty,
 * or options->force must be set. An input that is already quantized (an hf_quant_config.json, a
 * quantization_config, or any tensor in an FP4/FP8 quantized layout) is refused, naming what was
 * found. */
FP4_API fp4_status fp4_model_quantize(const char *in_dir, const char *out_dir,
                                      const fp4_model_quantize_options *options);
/* The default exclude patterns, NULL-terminated ("*router*" among them). The default rules also keep
 * MoE routers named gate (a 2-D weight of a module named gate, or of one directly under it as in
 * gate.wg, with one output row per expert of the model) and DeepSeek-style MTP layers. */
FP4_API const char *const *fp4_model_default_excludes(void);
/* Glob match used by the patterns and by inspect's exclude lists: '*' any run of characters (dots
 * included), '?' one, [...] one of a set (ranges, '!' or '^' negation), anything else itself (no
 * backslash escapes, no character classes), in time linear in the lengths. 0 when either argument is
 * NULL. */
FP4_API int fp4_model_pattern_match(const char *pattern, const char *name);

#ifdef __cplusplus
}
#endif

#endif /* FP4KIT_MODEL_H */
