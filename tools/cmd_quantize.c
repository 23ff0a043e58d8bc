/* fp4kit quantize: a BF16/F16/F32 safetensors checkpoint -> NVFP4 (Model Optimizer recipe) or MXFP4. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "fp4kit_model.h"

static void quantize_usage(FILE *f) {
  fprintf(f,
          "usage: fp4kit quantize IN_DIR OUT_DIR [options]\n"
          "\n"
          "Quantizes the 2-D BF16/F16/F32 '.weight' tensors of a safetensors checkpoint, shard by shard,\n"
          "holding one tensor at a time, and copies everything else. NVFP4 follows NVIDIA Model\n"
          "Optimizer's recipe bit for bit (weight U8, weight_scale F8_E4M3 linear, weight_scale_2 F32);\n"
          "writes hf_quant_config.json and config.json's quantization_config.\n"
          "\n"
          "  --format nvfp4|mxfp4     element format (default nvfp4)\n"
          "  --compressed-tensors     NVFP4 with compressed-tensors names (weight_packed,\n"
          "                           weight_global_scale; format nvfp4-pack-quantized)\n"
          "  --include PATTERN        quantize only modules matching (repeatable; '*' '?' globs)\n"
          "  --exclude PATTERN        never quantize modules matching (repeatable)\n"
          "  --no-default-excludes    drop the default excludes:\n"
          "                          ");
  for (const char *const *p = fp4_model_default_excludes(); *p; p++) fprintf(f, " %s", *p);
  fprintf(f,
          "\n"
          "                           (and DeepSeek-style MTP layers, index >= num_hidden_layers)\n"
          "  --input-amax A           NVFP4: write input_scale = A/(6*448) for every layer, a static\n"
          "                           activation range (no calibration is done), quant_algo NVFP4;\n"
          "                           without it: weight-only, quant_algo W4A16_NVFP4\n"
          "  --quiet                  no progress line\n");
}

static void progress(void *user, const char *tensor, int64_t done, int64_t total) {
  (void)user;
  fprintf(stderr, "\r[%lld/%lld] %-70.70s", (long long)done, (long long)total, tensor);
  if (done == total) fprintf(stderr, "\n");
  fflush(stderr);
}

int fp4cli_quantize(int argc, char **argv) {
  fp4_model_quantize_options o;
  memset(&o, 0, sizeof o);
  o.format = FP4_FORMAT_NVFP4;
  const char *in = NULL, *out = NULL;
  const char **inc = calloc((size_t)argc, sizeof *inc), **exc = calloc((size_t)argc, sizeof *exc);
  int quiet = 0, rc = FP4CLI_OK;
  if (!inc || !exc) {
    free(inc);
    free(exc);
    fprintf(stderr, "fp4kit quantize: out of memory\n");
    return FP4CLI_ERROR;
  }
  for (int i = 1; i < argc && rc == FP4CLI_OK; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      quantize_usage(stdout);
      free(inc);
      free(exc);
      return FP4CLI_OK;
    } else if (!strcmp(a, "--format") && i + 1 < argc) {
      const char *v = argv[++i];
      if (!strcmp(v, "nvfp4")) o.format = FP4_FORMAT_NVFP4;
      else if (!strcmp(v, "mxfp4")) o.format = FP4_FORMAT_MXFP4;
      else {
        fprintf(stderr, "fp4kit quantize: --format is nvfp4 or mxfp4, not '%s'\n", v);
        rc = FP4CLI_USAGE;
      }
    } else if (!strcmp(a, "--compressed-tensors")) {
      o.layout = FP4_CKPT_COMPRESSED_TENSORS;
    } else if (!strcmp(a, "--include") && i + 1 < argc) {
      inc[o.include_count++] = argv[++i];
    } else if (!strcmp(a, "--exclude") && i + 1 < argc) {
      exc[o.exclude_count++] = argv[++i];
    } else if (!strcmp(a, "--no-default-excludes")) {
      o.no_default_excludes = 1;
    } else if (!strcmp(a, "--input-amax") && i + 1 < argc) {
      char *end = NULL;
      o.input_amax = strtof(argv[++i], &end);
      if (*end || !(o.input_amax > 0.0f)) {
        fprintf(stderr, "fp4kit quantize: --input-amax needs a positive number, got '%s'\n", argv[i]);
        rc = FP4CLI_USAGE;
      }
    } else if (!strcmp(a, "--quiet")) {
      quiet = 1;
    } else if (a[0] != '-' && !in) {
      in = a;
    } else if (a[0] != '-' && !out) {
      out = a;
    } else {
      fprintf(stderr, "fp4kit quantize: unexpected argument '%s'\n", a);
      rc = FP4CLI_USAGE;
    }
  }
  if (rc == FP4CLI_OK && (!in || !out)) rc = FP4CLI_USAGE;
  if (rc == FP4CLI_OK && o.format == FP4_FORMAT_MXFP4 && o.layout == FP4_CKPT_COMPRESSED_TENSORS) {
    fprintf(stderr, "fp4kit quantize: --compressed-tensors is NVFP4 only\n");
    rc = FP4CLI_USAGE;
  }
  if (rc == FP4CLI_USAGE) {
    quantize_usage(stderr);
  } else {
    o.include = inc;
    o.exclude = exc;
    /* Progress only on a terminal, so logs and pipes stay clean. */
    if (!quiet && isatty(STDERR_FILENO)) o.progress = progress;
    fp4_status st = fp4_model_quantize(in, out, &o);
    if (st) rc = fp4cli_report("quantize", st);
    else printf("fp4kit quantize: wrote %s (%s%s)\n", out, o.format == FP4_FORMAT_MXFP4 ? "MXFP4" : "NVFP4",
                o.layout == FP4_CKPT_COMPRESSED_TENSORS ? ", compressed-tensors" : ", Model Optimizer layout");
  }
  free(inc);
  free(exc);
  return rc;
}
