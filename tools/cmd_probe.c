/* fp4kit probe: devices, architecture facts and the backend x capability matrix, with a reason for
 * every "no" and the evidence behind every answer; --check runs each "yes" against the reference. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "harness.h"
#include "probe_devices.h"

static void probe_usage(FILE *f) {
  fprintf(f,
          "usage: fp4kit probe [--json] [--arch sm_XX|all] [--check] [--device N] [--seed N]\n"
          "\n"
          "Shows the CUDA devices (name, compute capability, SMs, memory, driver/runtime/cuBLASLt/cuDNN\n"
          "versions) and, for every backend, whether it can run NVFP4 W4A4, MXFP4 W4A4, W4A16, grouped/MoE\n"
          "and PDL here, with the reason for every \"no\".\n"
          "\n"
          "  --arch A   answer for an architecture that need not be present (sm_80, sm_86, sm_89, sm_90,\n"
          "             sm_100, sm_103, sm_120, sm_121) from the architecture table and this build's\n"
          "             targets; 'all' prints the table\n"
          "  --check    run a small problem per capability on every backend that says yes, against the\n"
          "             reference, and flag wrong answers (all zeros, NaN, large error); exit status 1\n"
          "             if any is wrong\n"
          "  --json     machine-readable output\n"
          "  --device N CUDA ordinal to probe, or -1 for the host (default: FP4KIT_DEVICE, else 0 when a\n"
          "             CUDA device is present, else -1); a device that cannot be used is named once with\n"
          "             the runtime's reason and the backends are probed on the host\n"
          "  --seed N   seed of the --check data (default 1)\n"
          "\n"
          "Evidence of each answer: table = architecture table and build targets only (nothing ran);\n"
          "queried = asked of the device or vendor library at run time; executed = ran on this machine\n"
          "and matched the reference; failed = ran and was wrong.\n"
          "\n"
          "Exit status: 0 probed (a device that cannot be used is said, and the host probed), 1 --check\n"
          "found a wrong answer, 2 a usage error (an unknown option, architecture or FP4KIT_DEVICE value),\n"
          "3 probing failed.\n");
}

static const char *short_evidence(fp4_evidence e) {
  switch (e) {
  case FP4_EVIDENCE_TABLE: return "tbl";
  case FP4_EVIDENCE_QUERIED: return "ask";
  case FP4_EVIDENCE_EXECUTED: return "run";
  case FP4_EVIDENCE_FAILED: return "run";
  }
  return "?";
}

static void cell(char *buf, size_t size, const fp4_capability *c) {
  if (c->evidence == FP4_EVIDENCE_FAILED) snprintf(buf, size, "%s", "WRONG");
  else if (c->support == FP4_SUPPORT_YES) snprintf(buf, size, "yes:%s", short_evidence(c->evidence));
  else if (c->support == FP4_SUPPORT_NO) snprintf(buf, size, "no");
  else snprintf(buf, size, "?");
}

static void print_matrix(const fp4_backend_probe *probes, int n) {
  printf("%-15s %-9s", "backend", "available");
  for (int c = 0; c < FP4_CAP_COUNT; c++) printf(" %-11s", fp4_cap_name((fp4_cap)c));
  printf("\n");
  for (int i = 0; i < n; i++) {
    const fp4_backend_probe *p = &probes[i];
    printf("%-15s %-9s", p->backend, p->available == FP4_SUPPORT_YES ? "yes" : p->available == FP4_SUPPORT_NO ? "no" : "?");
    for (int c = 0; c < FP4_CAP_COUNT; c++) {
      char b[16];
      cell(b, sizeof b, &p->caps[c]);
      printf(" %-11s", b);
    }
    printf("\n");
  }
  printf("\n(yes:run = executed here and matched the reference; yes:ask = asked at run time, not executed;\n"
         " yes:tbl / ? = from the architecture table and build only; WRONG = executed and wrong)\n\nreasons:\n");
  for (int i = 0; i < n; i++) {
    const fp4_backend_probe *p = &probes[i];
    if (p->available != FP4_SUPPORT_YES) {
      printf("  %-15s %-12s %s\n", p->backend, "(backend)", p->reason);
      continue;
    }
    for (int c = 0; c < FP4_CAP_COUNT; c++)
      printf("  %-15s %-12s %-3s [%s] %s\n", p->backend, fp4_cap_name((fp4_cap)c), fp4_support_name(p->caps[c].support),
             fp4_evidence_name(p->caps[c].evidence), p->caps[c].reason[0] ? p->caps[c].reason : "-");
  }
}

static void print_arch(const fp4_arch_info *a) {
  printf("%-7s %-24s FP4 MMA: %s\n", a->name, a->gpus, a->fp4_mma_insn);
  printf("        BF16 MMA: %s; PDL %s; TMA %s; smem/block %d KB; kernels need %s (in this build: %s); "
         "fp4kit GPU tests run on this arch: %s\n",
         a->bf16_mma, a->pdl ? "yes" : "no", a->tma ? "yes" : "no", a->smem_kb, a->build_target,
         a->compiled ? "yes" : "no", a->hardware_tested ? "yes" : "no (compiled only)");
}

static cJSON *probe_json(const fp4_backend_probe *p) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "backend", p->backend);
  cJSON_AddStringToObject(o, "available", fp4_support_name(p->available));
  cJSON_AddStringToObject(o, "reason", p->reason);
  cJSON_AddBoolToObject(o, "device_memory", p->device_memory);
  cJSON *caps = cJSON_AddObjectToObject(o, "capabilities");
  for (int c = 0; c < FP4_CAP_COUNT; c++) {
    cJSON *x = cJSON_AddObjectToObject(caps, fp4_cap_name((fp4_cap)c));
    cJSON_AddStringToObject(x, "support", fp4_support_name(p->caps[c].support));
    cJSON_AddStringToObject(x, "evidence", fp4_evidence_name(p->caps[c].evidence));
    cJSON_AddStringToObject(x, "reason", p->caps[c].reason);
  }
  return o;
}

static cJSON *arch_json(const fp4_arch_info *a) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", a->name);
  cJSON_AddNumberToObject(o, "cc", a->cc);
  cJSON_AddStringToObject(o, "gpus", a->gpus);
  cJSON_AddBoolToObject(o, "fp4_mma", a->fp4_mma);
  cJSON_AddStringToObject(o, "fp4_mma_insn", a->fp4_mma_insn);
  cJSON_AddStringToObject(o, "bf16_mma", a->bf16_mma);
  cJSON_AddBoolToObject(o, "pdl", a->pdl);
  cJSON_AddBoolToObject(o, "tma", a->tma);
  cJSON_AddNumberToObject(o, "smem_kb", a->smem_kb);
  cJSON_AddStringToObject(o, "build_target", a->build_target);
  cJSON_AddBoolToObject(o, "compiled", a->compiled);
  cJSON_AddBoolToObject(o, "hardware_tested", a->hardware_tested);
  return o;
}

/* The cases --check runs per capability: small, odd shapes, random and edge data. */
static int check_cases(fp4_cap cap, fp4h_case *out) {
  const fp4_scale_layout S = FP4_LAYOUT_128X4;
  switch (cap) {
  case FP4_CAP_NVFP4_W4A4:
    out[0] = (fp4h_case){"nvfp4 w4a4 33x200x512 bf16", FP4H_MM, FP4_FORMAT_NVFP4, S, S, 33, 200, 512, FP4_DTYPE_F32, FP4_DTYPE_BF16, FP4H_DATA_NORMAL, .experts = 0};
    out[1] = (fp4h_case){"nvfp4 w4a4 edges f32", FP4H_MM, FP4_FORMAT_NVFP4, S, S, 17, 64, 1024, FP4_DTYPE_F32, FP4_DTYPE_F32, FP4H_DATA_EDGES, .experts = 0};
    return 2;
  case FP4_CAP_MXFP4_W4A4:
    out[0] = (fp4h_case){"mxfp4 w4a4 65x96x384 f16", FP4H_MM, FP4_FORMAT_MXFP4, S, S, 65, 96, 384, FP4_DTYPE_F32, FP4_DTYPE_F16, FP4H_DATA_NORMAL, .experts = 0};
    out[1] = (fp4h_case){"mxfp4 w4a4 edges f32", FP4H_MM, FP4_FORMAT_MXFP4, S, S, 9, 128, 256, FP4_DTYPE_F32, FP4_DTYPE_F32, FP4H_DATA_EDGES, .experts = 0};
    return 2;
  case FP4_CAP_W4A16:
    out[0] = (fp4h_case){"w4a16 nvfp4 1x300x512 bf16", FP4H_MM_W4A16, FP4_FORMAT_NVFP4, S, S, 1, 300, 512, FP4_DTYPE_BF16, FP4_DTYPE_BF16, FP4H_DATA_NORMAL, .experts = 0};
    out[1] = (fp4h_case){"w4a16 nvfp4 edges f32", FP4H_MM_W4A16, FP4_FORMAT_NVFP4, S, S, 64, 136, 1024, FP4_DTYPE_BF16, FP4_DTYPE_F32, FP4H_DATA_EDGES, .experts = 0};
    return 2;
  default: return 0;
  }
}

/* Runs the cases of every "yes" capability; returns the number of wrong results. */
static int run_checks(fp4_context *ctx, fp4_backend_probe *p, uint64_t seed, int verbose) {
  int wrong = 0;
  if (p->available != FP4_SUPPORT_YES) return 0;
  const fp4_memory mem = p->device_memory ? FP4_MEMORY_DEVICE : FP4_MEMORY_HOST;
  for (int c = 0; c < FP4_CAP_COUNT; c++) {
    fp4_capability *cap = &p->caps[c];
    fp4h_case cases[4];
    int n = check_cases((fp4_cap)c, cases);
    if (cap->support != FP4_SUPPORT_YES || n == 0) continue;
    double worst = 0.0, tol = 0.0, worst_ratio = -1.0;
    int ran = 0, bad = 0;
    char msg[400] = "";
    for (int i = 0; i < n; i++) {
      fp4h_result r;
      fp4h_run(ctx, p->backend, mem, &cases[i], seed + (uint64_t)(c * 16 + i), &r);
      if (verbose) fprintf(stderr, "  check %-15s %-28s %s\n", p->backend, cases[i].name, r.message);
      if (r.status == FP4_ERR_UNSUPPORTED) continue; /* this shape or dtype only; the capability stands */
      ran++;
      if (r.status != FP4_OK || !r.passed) {
        bad++;
        if (!msg[0]) snprintf(msg, sizeof msg, "%s: %s", cases[i].name, r.message);
      } else if (r.rel_err / r.tolerance >= worst_ratio) {
        worst_ratio = r.rel_err / r.tolerance;
        worst = r.rel_err;
        tol = r.tolerance;
      }
    }
    if (!ran) continue;
    if (bad) {
      wrong++;
      cap->evidence = FP4_EVIDENCE_FAILED;
      snprintf(cap->reason, sizeof cap->reason, "WRONG on %d of %d checks: %.120s", bad, ran, msg);
    } else {
      cap->evidence = FP4_EVIDENCE_EXECUTED;
      snprintf(cap->reason, sizeof cap->reason, "%d checks match the reference (worst rel err %.2g, tolerance %.2g)", ran, worst, tol);
    }
  }
  return wrong;
}

int fp4cli_probe(int argc, char **argv) {
  int json = 0, check = 0;
  long long device = FP4CLI_DEVICE_UNSET, seed = 1;
  const char *arch = NULL;
  enum { OPT_JSON = 256, OPT_CHECK, OPT_ARCH, OPT_DEVICE, OPT_SEED };
  static const struct option longs[] = {{"help", no_argument, NULL, 'h'},
                                        {"json", no_argument, NULL, OPT_JSON},
                                        {"check", no_argument, NULL, OPT_CHECK},
                                        {"arch", required_argument, NULL, OPT_ARCH},
                                        {"device", required_argument, NULL, OPT_DEVICE},
                                        {"seed", required_argument, NULL, OPT_SEED},
                                        {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0; /* our own messages, naming the command */
  for (int c; (c = getopt_long(argc, argv, ":h", longs, NULL)) != -1;) {
    int bad = FP4CLI_OK;
    switch (c) {
      case 'h':
        probe_usage(stdout);
        return FP4CLI_OK;
      case OPT_JSON:
        json = 1;
        break;
      case OPT_CHECK:
        check = 1;
        break;
      case OPT_ARCH:
        arch = optarg;
        break;
      case OPT_DEVICE:
        bad = fp4cli_parse_int("probe", "--device", optarg, -1, FP4CLI_MAX_DEVICE, &device);
        break;
      case OPT_SEED:
        bad = fp4cli_parse_int("probe", "--seed", optarg, 0, INT64_MAX, &seed);
        break;
      default:
        return fp4cli_bad_option("probe", c, argv);
    }
    if (bad) return bad;
  }
  if (fp4cli_no_operands("probe", argc, argv)) return FP4CLI_USAGE;
  if (arch && check) {
    fprintf(stderr, "fp4kit probe: --check runs on this machine's device; it cannot be combined with --arch\n");
    return FP4CLI_USAGE;
  }
  const int nb = fp4_backend_count();
  fp4_backend_probe *probes = calloc((size_t)nb, sizeof *probes);
  if (!probes) return fp4cli_report("probe", FP4_ERR_OUT_OF_MEMORY);
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "fp4kit", fp4_version());
  cJSON_AddStringToObject(root, "cuda_targets", fp4_build_cuda_targets());
  int rc = FP4CLI_OK;

  if (arch) { /* a hypothetical architecture, from the table */
    if (!strcmp(arch, "all")) {
      cJSON *arr = cJSON_AddArrayToObject(root, "architectures");
      if (!json) printf("fp4kit %s architecture table (this build's CUDA targets: %s)\n\n", fp4_version(),
                        fp4_build_cuda_targets()[0] ? fp4_build_cuda_targets() : "none, built without CUDA");
      for (int i = 0; i < fp4_arch_count(); i++) {
        if (json) cJSON_AddItemToArray(arr, arch_json(fp4_arch_get(i)));
        else print_arch(fp4_arch_get(i));
      }
      goto out;
    }
    const fp4_arch_info *a = fp4_arch_find(arch);
    if (!a) {
      fprintf(stderr, "fp4kit probe: unknown architecture '%s' (known: sm_80 sm_86 sm_89 sm_90 sm_100 sm_103 sm_120 sm_121)\n", arch);
      rc = FP4CLI_USAGE;
      goto out;
    }
    cJSON_AddItemToObject(root, "architecture", arch_json(a));
    cJSON *arr = cJSON_AddArrayToObject(root, "backends");
    for (int i = 0; i < nb; i++) {
      fp4_status st = fp4_probe_backend_arch(a->name, fp4_backend_name(i), &probes[i]);
      if (st) {
        rc = fp4cli_report("probing a backend", st);
        goto out;
      }
      cJSON_AddItemToArray(arr, probe_json(&probes[i]));
    }
    if (!json) {
      printf("fp4kit %s probe for %s (hypothetical: answered from the architecture table and this build; nothing ran)\n"
             "build CUDA targets: %s\n\n",
             fp4_version(), a->name, fp4_build_cuda_targets()[0] ? fp4_build_cuda_targets() : "none, built without CUDA");
      print_arch(a);
      printf("\n");
      print_matrix(probes, nb);
    }
    goto out;
  }

  /* This machine. */
  int asked = (int)device;
  if (fp4cli_resolve_device("probe", &asked)) {
    rc = FP4CLI_USAGE;
    goto out;
  }
  device = asked;
  /* A device that cannot be used is named once, with the runtime's reason, and the backends are
   * probed on the host instead (a device context without a driver answers every question with the
   * driver's error). */
  char why[320] = "";
  if (device >= 0 && !fp4cli_device_usable(asked, why, sizeof why)) {
    fprintf(stderr, "fp4kit probe: no usable CUDA device %d (%s); probing the backends on the host\n", asked, why);
    cJSON_AddNumberToObject(root, "device_asked", asked);
    cJSON_AddStringToObject(root, "device_error", why);
    device = -1;
  }
  const int ndev = fp4_probe_device_count();
  cJSON *devs = cJSON_AddArrayToObject(root, "devices");
  if (!json) {
    printf("fp4kit %s probe\nbuild CUDA targets: %s\n\ndevices:\n", fp4_version(),
           fp4_build_cuda_targets()[0] ? fp4_build_cuda_targets() : "none, built without CUDA");
    if (!ndev) printf("  none visible (%s)\n", fp4_build_cuda_targets()[0] ? "no driver or no GPU" : "built without CUDA");
  }
  for (int d = 0; d < ndev; d++) {
    fp4_device_probe info;
    const int ok = fp4_probe_device(d, &info) == FP4_OK;
    cJSON_AddItemToArray(devs, probe_device_json(d, ok ? &info : NULL, fp4_last_error()));
    if (json) continue;
    probe_device_print(stdout, d, ok ? &info : NULL, fp4_last_error(), d == (int)device);
    const fp4_arch_info *a = ok ? fp4_arch_for_cc(info.cc) : NULL;
    if (a) print_arch(a);
  }
  /* The CPU backend's instruction-set level per kernel by default (its configs name lower ones). */
  cJSON *cpu = cJSON_AddObjectToObject(root, "cpu");
  cJSON_AddNumberToObject(cpu, "threads", fp4_cpu_threads());
  cJSON *levels = cJSON_AddObjectToObject(cpu, "kernels");
  if (!json)
    printf("\ncpu backend: %d threads (FP4KIT_NUM_THREADS); kernel levels (the default; config generic / avx2 / avx512 "
           "lowers them):",
           fp4_cpu_threads());
  for (int i = 0; fp4_cpu_kernel_name(i); i++) {
    const char *kernel = fp4_cpu_kernel_name(i), *level = fp4_cpu_level(kernel);
    cJSON_AddStringToObject(levels, kernel, level ? level : "unknown");
    if (!json) printf(" %s=%s", kernel, level ? level : "unknown");
  }
  if (!json) printf("\n");
  fp4_context *ctx = NULL;
  fp4_status st = fp4_context_create(&ctx, (int)device);
  if (st) {
    rc = fp4cli_report("creating a context", st);
    goto out;
  }
  cJSON_AddNumberToObject(root, "probed_device", device);
  cJSON *arr = cJSON_AddArrayToObject(root, "backends");
  int wrong = 0;
  for (int i = 0; i < nb; i++) {
    if ((st = fp4_probe_backend(ctx, fp4_backend_name(i), &probes[i]))) {
      fp4_context_destroy(ctx);
      rc = fp4cli_report("probing a backend", st);
      goto out;
    }
    if (check) wrong += run_checks(ctx, &probes[i], (uint64_t)seed, getenv("FP4KIT_PROBE_VERBOSE") != NULL);
    cJSON_AddItemToArray(arr, probe_json(&probes[i]));
  }
  cJSON_AddStringToObject(root, "tuning", fp4_context_tuning_note(ctx));
  fp4_context_destroy(ctx);
  if (!json) {
    if (device >= 0) printf("\nbackends on device %lld:\n", device);
    else if (why[0]) printf("\nbackends on the host (no usable CUDA device %d: %s):\n", asked, why);
    else printf("\nbackends on the host (no CUDA device context):\n");
    print_matrix(probes, nb);
    if (check) printf("\n--check: %s\n", wrong ? "WRONG RESULTS FOUND (see above)" : "every executed capability matched the reference");
    else printf("\nNothing was executed; run 'fp4kit probe --check' to execute every \"yes\" against the reference.\n");
  }
  if (wrong) rc = FP4CLI_FAILED;

out:
  if (json && rc != FP4CLI_USAGE) {
    char *text = cJSON_Print(root);
    if (text) printf("%s\n", text);
    free(text);
  }
  cJSON_Delete(root);
  free(probes);
  return rc;
}
