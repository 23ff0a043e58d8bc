/* fp4kit quantize: a BF16/F16/F32 safetensors checkpoint -> NVFP4 (Model Optimizer recipe) or MXFP4. */
#define _GNU_SOURCE
#include <float.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
          "writes hf_quant_config.json and config.json's quantization_config. An input that is already\n"
          "quantized (hf_quant_config.json, a quantization_config, FP4/FP8 tensors or scales) is refused.\n"
          "\n"
          "IN_DIR is the checkpoint's directory. Its other files (tokenizer, ...) are copied, any size;\n"
          "subdirectories, hidden entries and shards the index does not list are not, each named in a\n"
          "warning. Weights FP4 cannot hold (3-D fused experts, empty, K not a multiple of the block)\n"
          "stay as they are, each named in a warning; every weight left unquantized is in the config's\n"
          "ignore list. The last line counts the tensors quantized and those kept, by reason. A run\n"
          "that would quantize nothing is refused, as are unreadable files and an output larger than\n"
          "the free disk space: all checked before any work.\n"
          "The output is written into a temporary directory beside OUT_DIR (.OUT_DIR.fp4kit-tmp.PID.*)\n"
          "that becomes OUT_DIR only once complete: a failed run leaves no partial model, and a later\n"
          "run removes the temporary directories of runs that were killed.\n"
          "\n"
          "  --format nvfp4|mxfp4     element format (default nvfp4)\n"
          "  --compressed-tensors     NVFP4 with compressed-tensors names (weight_packed,\n"
          "                           weight_global_scale; format nvfp4-pack-quantized)\n"
          "  --include PATTERN        quantize only modules matching (repeatable; fnmatch(3) globs:\n"
          "                           '*' any characters, dots included, '?' one, [...] a set)\n"
          "  --exclude PATTERN        never quantize modules matching (repeatable)\n"
          "  --no-default-excludes    drop the default excludes:\n"
          "                          ");
  for (const char *const *p = fp4_model_default_excludes(); *p; p++) fprintf(f, " %s", *p);
  fprintf(f,
          "\n"
          "                           and MoE routers named gate (a 2-D 'gate' weight, or one under\n"
          "                           such a module like gate.wg, with one row per expert) and\n"
          "                           DeepSeek-style MTP layers (index >= num_hidden_layers)\n"
          "  --input-amax A           NVFP4: write input_scale = A/(6*448) for every layer, a static\n"
          "                           activation range (no calibration is done), quant_algo NVFP4;\n"
          "                           without it: weight-only, quant_algo W4A16_NVFP4. A is from\n"
          "                           %.3g (the scale stays a normal float) to 3e38\n"
          "  --recipe NAME            NVFP4 scales of the Model Optimizer release to match: modelopt\n"
          "                           (default; 0.45 and later clamp block scales to >= 2^-9) or\n"
          "                           modelopt-0.44 (0.44 and earlier: block scales <= 2^-10 are 0)\n"
          "  --force                  OUT_DIR may be a non-empty directory: it is replaced, with all it\n"
          "                           holds, when (and only when) the new output is complete; without\n"
          "                           --force a non-empty OUT_DIR is refused before any work\n"
          "  --quiet                  no progress lines (warnings and errors still print)\n"
          "\n"
          "Progress goes to stderr: one updating line on a terminal; otherwise (a log, a pipe) a line\n"
          "at the start, every %d seconds and at the end.\n"
          "\n"
          "Exit status: 0 OUT_DIR was written, 2 a usage error (an unknown option, a bad value, options\n"
          "that exclude each other, IN_DIR or OUT_DIR missing), 3 nothing was written: the input cannot be\n"
          "read or quantized, or OUT_DIR cannot be (re)placed (the message says which).\n",
          (double)(6.0f * 448.0f * FLT_MIN), 10);
}

/* Progress on stderr: one line rewritten in place on a terminal, else whole lines now and then. */
typedef struct progress_state {
  int tty;
  double last; /* monotonic seconds of the last line written; < 0 before the first */
} progress_state;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void progress(void *user, const char *tensor, int64_t done, int64_t total) {
  progress_state *p = user;
  if (p->tty) {
    fprintf(stderr, "\r[%lld/%lld] %-70.70s", (long long)done, (long long)total, tensor);
    if (done == total) fprintf(stderr, "\n");
  } else {
    const double t = now_s();
    if (p->last >= 0 && t - p->last < 10.0 && done != total) return;
    p->last = t;
    if (done == total) fprintf(stderr, "fp4kit quantize: [%lld/%lld] tensors done\n", (long long)done, (long long)total);
    else fprintf(stderr, "fp4kit quantize: [%lld/%lld] %s\n", (long long)done, (long long)total, tensor);
  }
  fflush(stderr);
}

/* Warnings on stderr: the first ones in full, then only how many more (all kept weights are in the
 * output's ignore list anyway). */
enum { WARNINGS_SHOWN = 20 };
static void warning(void *user, const char *message) {
  long *count = user;
  if (++*count <= WARNINGS_SHOWN) fprintf(stderr, "fp4kit quantize: warning: %s\n", message);
}

static const char *plural(int64_t n) { return n == 1 ? "" : "s"; }

int fp4cli_quantize(int argc, char **argv) {
  fp4_model_quantize_options o;
  memset(&o, 0, sizeof o);
  o.format = FP4_FORMAT_NVFP4;
  const char **inc = calloc((size_t)argc, sizeof *inc), **exc = calloc((size_t)argc, sizeof *exc);
  int quiet = 0, hinted = 0, rc = FP4CLI_OK;
  if (!inc || !exc) {
    free(inc);
    free(exc);
    fprintf(stderr, "fp4kit quantize: out of memory\n");
    return FP4CLI_ERROR;
  }
  enum { OPT_FORMAT = 256, OPT_CT, OPT_INCLUDE, OPT_EXCLUDE, OPT_NO_DEFAULTS, OPT_AMAX, OPT_QUIET, OPT_FORCE, OPT_RECIPE };
  static const struct option longs[] = {{"help", no_argument, NULL, 'h'},
                                        {"format", required_argument, NULL, OPT_FORMAT},
                                        {"compressed-tensors", no_argument, NULL, OPT_CT},
                                        {"include", required_argument, NULL, OPT_INCLUDE},
                                        {"exclude", required_argument, NULL, OPT_EXCLUDE},
                                        {"no-default-excludes", no_argument, NULL, OPT_NO_DEFAULTS},
                                        {"input-amax", required_argument, NULL, OPT_AMAX},
                                        {"quiet", no_argument, NULL, OPT_QUIET},
                                        {"force", no_argument, NULL, OPT_FORCE},
                                        {"recipe", required_argument, NULL, OPT_RECIPE},
                                        {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0; /* our own messages, naming the command */
  for (int c; rc == FP4CLI_OK && (c = getopt_long(argc, argv, ":h", longs, NULL)) != -1;) {
    switch (c) {
      case 'h':
        quantize_usage(stdout);
        free(inc);
        free(exc);
        return FP4CLI_OK;
      case OPT_FORMAT:
        if (!strcmp(optarg, "nvfp4")) o.format = FP4_FORMAT_NVFP4;
        else if (!strcmp(optarg, "mxfp4")) o.format = FP4_FORMAT_MXFP4;
        else {
          fprintf(stderr, "fp4kit quantize: --format is nvfp4 or mxfp4, not '%s'\n", optarg);
          rc = FP4CLI_USAGE;
        }
        break;
      case OPT_CT: o.layout = FP4_CKPT_COMPRESSED_TENSORS; break;
      case OPT_INCLUDE: inc[o.include_count++] = optarg; break;
      case OPT_EXCLUDE: exc[o.exclude_count++] = optarg; break;
      case OPT_NO_DEFAULTS: o.no_default_excludes = 1; break;
      case OPT_AMAX: {
        char *end = NULL;
        o.input_amax = strtof(optarg, &end);
        /* Below the lower bound the scale A/(6*448) leaves the normal floats: it would be written as 0
         * (or its inverse, the compressed-tensors global scale, as infinity). */
        if (!*optarg || *end || !(o.input_amax >= 6.0f * 448.0f * FLT_MIN) || o.input_amax > 3.0e38f) {
          fprintf(stderr, "fp4kit quantize: --input-amax needs a number from %.3g to 3e38, not '%s'\n",
                  (double)(6.0f * 448.0f * FLT_MIN), optarg);
          rc = FP4CLI_USAGE;
        }
        break;
      }
      case OPT_QUIET: quiet = 1; break;
      case OPT_FORCE: o.force = 1; break;
      case OPT_RECIPE:
        if (!strcmp(optarg, "modelopt")) o.modelopt_version = FP4_MODELOPT_CURRENT;
        else if (!strcmp(optarg, "modelopt-0.44")) o.modelopt_version = FP4_MODELOPT_0_44;
        else {
          fprintf(stderr, "fp4kit quantize: --recipe is modelopt or modelopt-0.44, not '%s'\n", optarg);
          rc = FP4CLI_USAGE;
        }
        break;
      default:
        rc = fp4cli_bad_option("quantize", c, argv);
        hinted = 1;
    }
  }
  const char *in = NULL, *out = NULL;
  if (rc == FP4CLI_OK) {
    if (argc - optind == 2) {
      in = argv[optind];
      out = argv[optind + 1];
    } else {
      if (argc - optind > 2) fprintf(stderr, "fp4kit quantize: unexpected argument '%s'\n", argv[optind + 2]);
      else if (argc - optind == 1) fprintf(stderr, "fp4kit quantize: give OUT_DIR after IN_DIR '%s'\n", argv[optind]);
      else fprintf(stderr, "fp4kit quantize: give IN_DIR (the checkpoint) and OUT_DIR (the output directory)\n");
      rc = FP4CLI_USAGE;
    }
  }
  if (rc == FP4CLI_OK && o.format == FP4_FORMAT_MXFP4 && o.layout == FP4_CKPT_COMPRESSED_TENSORS) {
    fprintf(stderr, "fp4kit quantize: --compressed-tensors is NVFP4 only\n");
    rc = FP4CLI_USAGE;
  }
  if (rc == FP4CLI_OK && o.format == FP4_FORMAT_MXFP4 && o.input_amax > 0.0f) {
    fprintf(stderr, "fp4kit quantize: --input-amax is NVFP4 only (MXFP4 has no input scale)\n");
    rc = FP4CLI_USAGE;
  }
  if (rc == FP4CLI_USAGE) {
    if (!hinted) fprintf(stderr, "Run 'fp4kit quantize --help' for the options.\n");
  } else {
    o.include = inc;
    o.exclude = exc;
    progress_state ps = {isatty(STDERR_FILENO), -1.0};
    if (!quiet) {
      o.progress = progress;
      o.progress_user = &ps;
    }
    long warnings = 0;
    o.warning = warning;
    o.warning_user = &warnings;
    fp4_model_quantize_summary sum;
    memset(&sum, 0, sizeof sum);
    o.summary = &sum;
    fp4_status st = fp4_model_quantize(in, out, &o);
    if (warnings > WARNINGS_SHOWN)
      fprintf(stderr, "fp4kit quantize: warning: %ld more warnings not shown\n", warnings - WARNINGS_SHOWN);
    if (st) {
      rc = fp4cli_report("quantize", st);
    } else {
      const int64_t kept = sum.kept_by_default + sum.kept_by_pattern + sum.kept_for_shape;
      printf("fp4kit quantize: wrote %s (%s%s): %lld tensor%s quantized, %lld kept unquantized (%lld by the default "
             "rules, %lld by --include/--exclude, %lld for an unsupported shape); %lld other tensor%s and %lld file%s "
             "copied", out, o.format == FP4_FORMAT_MXFP4 ? "MXFP4" : "NVFP4",
             o.layout == FP4_CKPT_COMPRESSED_TENSORS ? ", compressed-tensors" : ", Model Optimizer layout",
             (long long)sum.quantized, plural(sum.quantized), (long long)kept, (long long)sum.kept_by_default,
             (long long)sum.kept_by_pattern, (long long)sum.kept_for_shape, (long long)sum.other_tensors,
             plural(sum.other_tensors), (long long)sum.files_copied, plural(sum.files_copied));
      if (sum.entries_skipped)
        printf(", %lld entr%s of IN_DIR not copied", (long long)sum.entries_skipped, sum.entries_skipped == 1 ? "y" : "ies");
      printf("\n");
    }
  }
  free(inc);
  free(exc);
  return rc;
}
