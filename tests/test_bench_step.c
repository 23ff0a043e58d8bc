/*
 * The decode-step benchmark (tools/bench_step.c, `fp4kit bench --step`): what holds without a GPU:
 * the rank's layer types, shapes and FP4 bytes per model and TP/EP against hand-computed values of
 * the model shape tables (bytes = N*K/2 codes + the 128x4 E4M3 block scales), the routing, option
 * errors, and that without a GPU the command says so in one line and exits non-zero; these call
 * bench_step_main in-process. With a GPU, and once `fp4kit bench` routes --step to it, the fp4kit
 * command runs a two-layer step per model kind and mode end to end and the record is checked (no
 * timing asserted); each part that cannot run says so.
 *
 * This executable links libfp4kit twice (the static library, and the shared one through the tools'
 * libraries): the library calls the plan makes are also made here first (fp4_shape_set,
 * fp4_scales_size), so that they and fp4_last_error() resolve to the same copy.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_step.h"
#include "step_trace.h"
#include "cli_testing.h"
#include "fp4kit.h"
#include "step_comm.h"
#include "step_exchange.h"
#include "step_report.h"
#include "testing.h"

static char g_out[1 << 16], g_err[1 << 16];

static void slurp(const char *path, char *buf, size_t size) {
  buf[0] = '\0';
  FILE *f = fopen(path, "rb");
  if (!f) return;
  size_t n = fread(buf, 1, size - 1, f);
  buf[n] = '\0';
  fclose(f);
}

/* Runs bench_step_main on "bench" + the words of args, stdout and stderr into g_out / g_err. */
static int run(const char *args) {
  char copy[512], *argv[40];
  int argc = 0;
  snprintf(copy, sizeof copy, "%s", args);
  argv[argc++] = "bench";
  for (char *save = NULL, *w = strtok_r(copy, " ", &save); w && argc < 39; w = strtok_r(NULL, " ", &save)) argv[argc++] = w;
  argv[argc] = NULL;
  char out_path[96], err_path[96];
  snprintf(out_path, sizeof out_path, "%s/out", dir);
  snprintf(err_path, sizeof err_path, "%s/err", dir);
  fflush(stdout);
  fflush(stderr);
  int saved_out = dup(1), saved_err = dup(2);
  int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600), fe = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(fo, 1);
  dup2(fe, 2);
  const int rc = bench_step_main(argc, argv);
  fflush(stdout);
  fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  close(fo);
  close(fe);
  close(saved_out);
  close(saved_err);
  slurp(out_path, g_out, sizeof g_out);
  slurp(err_path, g_err, sizeof g_err);
  return rc;
}

static int lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

typedef struct want_dense {
  const char *name;
  int64_t n, k, bytes;
} want_dense;

/* N*K/2 code bytes + the 128x4 scale bytes, from the library's own size rule. */
static int64_t weight_bytes(int64_t n, int64_t k) {
  size_t sb = 0;
  CHECK(fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, n, k, &sb) == FP4_OK, "scales of %lld x %lld", (long long)n,
        (long long)k);
  return n * k / 2 + (int64_t)sb;
}

static void check_dense(const char *model, int tp, int64_t layers, const want_dense *w, int count, int64_t layer_bytes) {
  step_plan p;
  fp4_status st = step_plan_make(model, tp, 1, &p);
  CHECK(st == FP4_OK, "%s tp %d: %s", model, tp, fp4_last_error());
  if (st) return;
  CHECK(p.layers == layers, "%s tp %d: %lld layers, want %lld", model, tp, (long long)p.layers, (long long)layers);
  CHECK(p.ntypes == count, "%s tp %d: %d types, want %d", model, tp, p.ntypes, count);
  for (int i = 0; i < count && i < p.ntypes; i++) {
    const step_type *t = &p.types[i];
    CHECK(t->kind == STEP_DENSE && !strcmp(t->name, w[i].name) && t->n == w[i].n && t->k == w[i].k &&
              t->weight_bytes == w[i].bytes,
          "%s tp %d type %d: %s %lld x %lld %lld bytes, want %s %lld x %lld %lld bytes", model, tp, i, t->name,
          (long long)t->n, (long long)t->k, (long long)t->weight_bytes, w[i].name, (long long)w[i].n, (long long)w[i].k,
          (long long)w[i].bytes);
  }
  CHECK(step_layer_bytes(&p, 0) == layer_bytes, "%s tp %d: a layer reads %lld bytes, want %lld", model, tp,
        (long long)step_layer_bytes(&p, 0), (long long)layer_bytes);
  CHECK(p.hidden == w[0].k, "%s tp %d: hidden %lld", model, tp, (long long)p.hidden);
  /* The types are the NVFP4 linears of the library's shape set, sharded by it. */
  fp4_gemm_shape shapes[32];
  int count_all = 0, nvfp4 = 0;
  CHECK(fp4_shape_set(model, tp, 1, shapes, 32, &count_all) == FP4_OK, "%s: %s", model, fp4_last_error());
  for (int i = 0; i < count_all && i < 32; i++) {
    if (strcmp(shapes[i].storage, "nvfp4")) continue;
    CHECK(nvfp4 < p.ntypes && shapes[i].n == p.types[nvfp4].n && shapes[i].k == p.types[nvfp4].k &&
              weight_bytes(shapes[i].n, shapes[i].k) == p.types[nvfp4].weight_bytes,
          "%s tp %d: shape %s differs from type %d", model, tp, shapes[i].name, nvfp4);
    nvfp4++;
  }
  CHECK(nvfp4 == count, "%s tp %d: %d NVFP4 linears in the shape set", model, tp, nvfp4);
}

static void test_dense_plans(void) {
  /* Llama-3.1-8B TP1: qkv 6144x4096, o 4096x4096, gate_up 28672x4096, down 4096x14336; 32 layers.
   * Bytes: N*K/2 + N*(K/16) (no 128x4 padding at these sizes). */
  const want_dense l8[] = {{"self_attn.qkv_proj", 6144, 4096, 12582912 + 1572864},
                           {"self_attn.o_proj", 4096, 4096, 8388608 + 1048576},
                           {"mlp.gate_up_proj", 28672, 4096, 58720256 + 7340032},
                           {"mlp.down_proj", 4096, 14336, 29360128 + 3670016}};
  check_dense("llama-3.1-8b", 1, 32, l8, 4, 122683392); /* 218,103,808 weights x 0.5625 */
  /* TP8: 768x4096 (512 q + one KV head each of k and v), 4096x512, 3584x4096, 4096x1792. */
  const want_dense l8t8[] = {{"self_attn.qkv_proj", 768, 4096, 1572864 + 196608},
                             {"self_attn.o_proj", 4096, 512, 1048576 + 131072},
                             {"mlp.gate_up_proj", 3584, 4096, 7340032 + 917504},
                             {"mlp.down_proj", 4096, 1792, 3670016 + 458752}};
  check_dense("llama-3.1-8b", 8, 32, l8t8, 4, 122683392 / 8);
  /* Llama-3.3-70B TP8: 1280x8192, 8192x1024, 7168x8192, 8192x3584; 80 layers. */
  const want_dense l70[] = {{"self_attn.qkv_proj", 1280, 8192, 5242880 + 655360},
                            {"self_attn.o_proj", 8192, 1024, 4194304 + 524288},
                            {"mlp.gate_up_proj", 7168, 8192, 29360128 + 3670016},
                            {"mlp.down_proj", 8192, 3584, 14680064 + 1835008}};
  check_dense("llama-3.3-70b", 8, 80, l70, 4, 60162048); /* 106,954,752 weights x 0.5625 */
}

static void check_moe(const char *model, int tp, int ep, int64_t E, int64_t top_k, int64_t I, int64_t S,
                      int64_t expert_bytes, int64_t shared_bytes) {
  step_plan p;
  fp4_status st = step_plan_make(model, tp, ep, &p);
  CHECK(st == FP4_OK, "%s tp %d ep %d: %s", model, tp, ep, fp4_last_error());
  if (st) return;
  CHECK(p.layers == 60 && p.ntypes == 1 && p.hidden == 4096, "%s tp %d ep %d: %lld layers, %d types, hidden %lld", model,
        tp, ep, (long long)p.layers, p.ntypes, (long long)p.hidden);
  const step_type *t = &p.types[0];
  CHECK(t->kind == STEP_MOE && !strcmp(t->name, "mlp.experts+shared_expert"), "%s: type %s", model, t->name);
  CHECK(t->experts == E && t->top_k == top_k && t->active == 10 && t->hidden == 4096 && t->inter == I &&
            t->shared_inter == S && t->n == 2 * I && t->k == 4096,
        "%s tp %d ep %d: E %lld top-%lld of %lld, H %lld, I %lld, shared %lld", model, tp, ep, (long long)t->experts,
        (long long)t->top_k, (long long)t->active, (long long)t->hidden, (long long)t->inter, (long long)t->shared_inter);
  CHECK(t->weight_bytes == expert_bytes && t->shared_bytes == shared_bytes,
        "%s tp %d ep %d: expert %lld bytes (want %lld), shared %lld (want %lld)", model, tp, ep, (long long)t->weight_bytes,
        (long long)expert_bytes, (long long)t->shared_bytes, (long long)shared_bytes);
  CHECK(step_layer_bytes(&p, 3) == shared_bytes + 3 * expert_bytes, "%s: layer bytes at 3 experts %lld", model,
        (long long)step_layer_bytes(&p, 3));
}

static void test_moe_plans(void) {
  /* Qwen3.5-397B-A17B: 512 experts, top-10, w13 2048x4096 and w2 4096x1024 per expert, a shared
   * expert of the same shape, 60 layers. One expert: 2048*2048 + 2048*256 + 4096*512 + 4096*64 bytes
   * = 7,077,888 (12,582,912 weights x 0.5625). */
  const int64_t full = 4194304 + 524288 + 2097152 + 262144;
  check_moe("qwen3.5-397b-a17b", 1, 1, 512, 10, 1024, 1024, full, full);
  /* EP8: 64 experts per rank, whole experts, ceil(10/8) = 2 touched per token on the rank. */
  check_moe("qwen3.5-397b-a17b", 1, 8, 64, 2, 1024, 1024, full, full);
  /* TP8 without EP: every expert split 8 ways (w13 256x4096, w2 4096x128: 256*2048 + 256*256 +
   * 4096*64 + 4096*8 = 884,736 bytes), the shared expert likewise. */
  const int64_t eighth = 524288 + 65536 + 262144 + 32768;
  check_moe("qwen3.5-397b-a17b", 8, 1, 512, 10, 128, 128, eighth, eighth);
  /* TP8 x EP8: whole experts over EP, the shared expert over TP. */
  check_moe("qwen3.5-397b-a17b", 8, 8, 64, 2, 1024, 128, full, eighth);
  /* A dense + MoE model chains qkv -> o (its q part) -> MoE. */
  step_plan p;
  CHECK(step_plan_make("qwen3-30b-a3b", 1, 1, &p) == FP4_OK, "qwen3-30b-a3b: %s", fp4_last_error());
  CHECK(p.ntypes == 3 && p.types[0].kind == STEP_DENSE && p.types[2].kind == STEP_MOE && p.types[2].shared_inter == 0 &&
            !strcmp(p.types[2].name, "mlp.experts") && p.layers == 48 && p.types[2].top_k == 8,
        "qwen3-30b-a3b plan: %d types", p.ntypes);
}

/* Which types' outputs are partial sums over the ranks (all-reduced with --gpus), and the ranks of a
 * shard. */
static void check_reduced(const char *model, int tp, int ep, const char *want) {
  step_plan p;
  CHECK(step_plan_make(model, tp, ep, &p) == FP4_OK, "%s tp %d ep %d: %s", model, tp, ep, fp4_last_error());
  char got[64] = "";
  for (int i = 0; i < p.ntypes; i++) strcat(got, step_type_reduced(&p, &p.types[i]) ? "1" : "0");
  CHECK(!strcmp(got, want), "%s tp %d ep %d: reduced types %s, want %s", model, tp, ep, got, want);
}

static void test_collectives(void) {
  check_reduced("llama-3.1-8b", 8, 1, "0101");      /* o_proj and down_proj are row-parallel */
  check_reduced("llama-3.1-8b", 1, 1, "0000");      /* the whole model on each rank: nothing to sum */
  check_reduced("qwen3-30b-a3b", 8, 1, "011");      /* o_proj, and the MoE-TP8 experts */
  check_reduced("qwen3-30b-a3b", 1, 8, "001");      /* o_proj replicated (its width is the hidden size) */
  check_reduced("qwen3.5-397b-a17b", 1, 1, "0");    /* every expert on each rank */
  check_reduced("qwen3.5-397b-a17b", 1, 8, "1");
  check_reduced("qwen3.5-397b-a17b", 8, 8, "1");
  CHECK(step_ranks(8, 8) == 8 && step_ranks(8, 2) == 8 && step_ranks(1, 8) == 8 && step_ranks(8, 1) == 8 &&
            step_ranks(1, 1) == 1 && step_ranks(2, 8) == 0,
        "ranks of tp x ep: 8x8 %d, 8x2 %d, 1x8 %d, 8x1 %d, 1x1 %d, 2x8 %d", step_ranks(8, 8), step_ranks(8, 2),
        step_ranks(1, 8), step_ranks(8, 1), step_ranks(1, 1), step_ranks(2, 8));
}

/* The step's output check counts bf16 infinities and NaNs, and nothing else. */
static void test_nonfinite(void) {
  const uint16_t v[] = {0x3F80u /* 1 */, 0x7F80u /* inf */, 0xFF80u /* -inf */, 0x7FC0u /* NaN */, 0xFFFFu /* NaN */,
                        0x7F7Fu /* largest finite */, 0x0001u /* smallest subnormal */, 0x8000u /* -0 */};
  CHECK(step_bf16_nonfinite(v, 8) == 4 && step_bf16_nonfinite(v, 1) == 0 && step_bf16_nonfinite(v + 5, 3) == 0,
        "non-finite bf16 values: %lld of 8", (long long)step_bf16_nonfinite(v, 8));
}

static void test_plan_errors(void) {
  step_plan p;
  CHECK_ERROR(step_plan_make("qwen3.5-397b-a17b", 1, 3, &p), FP4_ERR_INVALID_ARGUMENT, "does not split evenly");
  CHECK_ERROR(step_plan_make("llama-3.1-8b", 3, 1, &p), FP4_ERR_INVALID_ARGUMENT, "does not split evenly");
  CHECK_ERROR(step_plan_make("llama-3.1-8b", 8, 3, &p), FP4_ERR_INVALID_ARGUMENT, "ep 3 does not divide tp 8");
  CHECK_ERROR(step_plan_make("no-such-model", 1, 1, &p), FP4_ERR_NOT_FOUND, "no embedded shape set");
  /* DeepSeek-R1: dense MLP in layers 0-2, MoE in 3-60: not one repeated layer. */
  CHECK_ERROR(step_plan_make("deepseek-r1", 1, 1, &p), FP4_ERR_UNSUPPORTED, "not one repeated layer");
  /* Shards whose K is no whole number of NVFP4 blocks have no FP4 bytes: Llama-3.1-8B TP256 leaves
   * down_proj K = 14336 / 256 = 56, Qwen3-30B-A3B MoE-TP64 the experts' w2 K = 768 / 64 = 12. */
  CHECK_ERROR(step_plan_make("llama-3.1-8b", 256, 1, &p), FP4_ERR_UNSUPPORTED, "mlp.down_proj: 4096 x 56");
  CHECK(strstr(fp4_last_error(), "block size 16") != NULL, "K 56: '%s' names no block size", fp4_last_error());
  CHECK_ERROR(step_plan_make("qwen3-30b-a3b", 64, 1, &p), FP4_ERR_UNSUPPORTED, "mlp.experts.down_proj: 2048 x 12");
}

static void test_routing(void) {
  enum { T = 64, K = 10, E = 512 };
  int32_t ids[T * K], ids2[T * K], ids_small[3 * K];
  float w[T * K], w2[T * K], w_small[3 * K];
  step_routing(7, 5, T, K, E, ids, w);
  int ok = 1;
  for (int t = 0; t < T; t++) {
    double sum = 0;
    for (int j = 0; j < K; j++) {
      ok &= ids[t * K + j] >= 0 && ids[t * K + j] < E && w[t * K + j] > 0;
      for (int i = 0; i < j; i++) ok &= ids[t * K + i] != ids[t * K + j];
      sum += w[t * K + j];
    }
    ok &= fabs(sum - 1.0) < 1e-5;
  }
  CHECK(ok, "routing: ids out of range, repeated within a token, or weights not positive summing to 1");
  step_routing(7, 5, 3, K, E, ids_small, w_small);
  CHECK(!memcmp(ids, ids_small, sizeof ids_small) && !memcmp(w, w_small, sizeof w_small),
        "the routing of 3 tokens is not the first 3 rows of that of 64");
  step_routing(7, 6, T, K, E, ids2, w2);
  CHECK(memcmp(ids, ids2, sizeof ids), "two layers got the same routing");
  step_routing(7, 5, T, K, E, ids2, w2);
  CHECK(!memcmp(ids, ids2, sizeof ids), "the same seed and layer routed differently");
  const int32_t few[] = {3, 5, 3, 0, 5, 63};
  CHECK(step_touched(few, 6, 64) == 4, "distinct experts of {3,5,3,0,5,63}: %lld", (long long)step_touched(few, 6, 64));
  /* Every expert of a rank: E/ep = 64, 2 per token, 64 tokens touch most of them. */
  step_routing(1, 0, T, 2, 64, ids, w);
  const int64_t touched = step_touched(ids, T * 2, 64);
  CHECK(touched > 40 && touched <= 64, "64 tokens x 2 of 64 experts touched %lld", (long long)touched);
}

static void test_options(void) {
  static const struct {
    const char *args, *needle;
  } bad[] = {
      {"--tp 1", "--step names the model"},
      {"--step llama-3.1-8b --tp 0", "--tp needs an integer from 1 to 4096"},
      {"--step llama-3.1-8b --ep x", "--ep needs an integer from 1 to 4096"},
      {"--step llama-3.1-8b --batch 0", "--batch '0': '0' is not an integer from 1 to 4096"},
      {"--step llama-3.1-8b --batch 1,8,x", "'x' is not an integer from 1 to 4096"},
      {"--step llama-3.1-8b --batch 5000", "'5000' is not an integer from 1 to 4096"},
      {"--step llama-3.1-8b --batch ,", "--batch ',': '' is not an integer"},
      {"--step llama-3.1-8b --batch 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", "at most 16"},
      {"--step llama-3.1-8b --rounds 2", "--rounds needs an integer from 3 to 10000"},
      {"--step llama-3.1-8b --seed 99999999999999999999", "--seed needs an integer from 0 to 9223372036854775807"},
      {"--step llama-3.1-8b --layers 0", "--layers needs an integer"},
      {"--step llama-3.1-8b --layers 33", "--layers 33: llama-3.1-8b has 32 layers"},
      {"--step qwen3.5-397b-a17b --ep 8 --layers 61 --plan", "--layers 61: qwen3.5-397b-a17b has 60 layers"},
      {"--step llama-3.1-8b --mode fp8", "--mode is w4a16 or w4a4"},
      {"--step llama-3.1-8b --bogus", "unknown option '--bogus'"},
      {"--step llama-3.1-8b --json", "option '--json' needs a value"},
      {"--step llama-3.1-8b extra", "unexpected argument 'extra'"},
      {"--step llama-3.1-8b --json - --csv -", "only one of --json, --csv and --html"},
      {"--step no-such-model", "no embedded shape set named 'no-such-model'"},
      {"--step qwen3.5-397b-a17b --ep 3", "does not split evenly over 3 ranks"},
      {"--step deepseek-r1", "not one repeated layer"},
      {"--step llama-3.1-8b --gpus 0", "--gpus needs an integer from 1 to 64"},
      {"--step llama-3.3-70b --tp 8 --gpus 4", "--gpus 4 runs one rank of the shard per GPU, but --tp 8 and --ep 1 make 8 ranks"},
      {"--step qwen3.5-397b-a17b --tp 8 --ep 8 --gpus 64", "but --tp 8 and --ep 8 make 8 ranks"},
      {"--step qwen3.5-397b-a17b --tp 2 --ep 8 --gpus 16", "--tp 2 and --ep 8: --gpus runs --tp 1"},
      {"--step llama-3.1-8b --sweep small-m.w8,,small-m.w4", "--sweep 'small-m.w8,,small-m.w4': an empty config name"},
      {"--step llama-3.1-8b --sweep small-m.w8,", "ends with a comma"},
      {"--step llama-3.1-8b --sweep a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s,t,u,v,w,x,y,z,A,B,C,D,E,F,G", "at most 32 configs"},
      {"--step llama-3.1-8b --sweep 0123456789012345678901234567890123456789012345678901234567890123", "over 63 characters"},
      {"--step llama-3.3-70b --tp 8 --gpus 8 --sweep small-m.w8", "--sweep times one rank; run it without --gpus 8"},
      {"--step llama-3.3-70b --tp 8 --gpus 8 --trace", "--trace records one rank; run it without --gpus 8"},
      {"--step qwen3.5-397b-a17b --ep 8 --gpus 8 --moe-comm ring", "--moe-comm is all-reduce or all-to-all, not 'ring'"},
      {"--step qwen3.5-397b-a17b --ep 8 --moe-comm all-to-all", "--tp 1 and --gpus N with N = --ep (here --tp 1, --ep 8, --gpus 0)"},
      {"--step qwen3.5-397b-a17b --ep 8 --gpus 1 --moe-comm all-to-all", "(here --tp 1, --ep 8, --gpus 1)"},
      {"--step qwen3.5-397b-a17b --tp 2 --ep 4 --gpus 8 --moe-comm all-to-all", "(here --tp 2, --ep 4, --gpus 8)"},
      {"--step llama-3.1-8b --gpus 1 --moe-comm all-to-all", "llama-3.1-8b has no MoE layer"},
      {"--step llama-3.1-8b --device 010x", "--device needs an integer from 0 to 1024, not '010x'"},
      {"--step llama-3.1-8b --plan --csv p.csv", "--plan prints the plan as text; --json, --csv and --html record"},
      /* --plan runs nothing: the options that only shape the timed step are refused, by name */
      {"--step llama-3.1-8b --plan --rounds 5", "--plan times nothing, and it ignores --rounds"},
      {"--step qwen3.5-397b-a17b --ep 8 --plan --mode w4a4", "--plan times nothing, and it ignores --mode"},
      {"--step llama-3.1-8b --no-peers --plan", "--plan times nothing, and it ignores --no-peers"},
      {"--step llama-3.1-8b --plan --sweep small-m.w8", "--plan times nothing, and it ignores --sweep"},
      {"--step llama-3.1-8b --plan --trace", "--plan times nothing, and it ignores --trace"},
      {"--step llama-3.1-8b --plan --device 1", "--plan times nothing, and it ignores --device"},
      {"--step llama-3.1-8b --trace --plan --rounds 5 --sweep small-m.w8",
       "--plan times nothing, and it ignores --rounds, --sweep and --trace"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    const int rc = run(bad[i].args);
    CHECK(rc == 2 && strstr(g_err, bad[i].needle), "'%s': exit %d, stderr '%s'; want 2 and '%s'", bad[i].args, rc, g_err,
          bad[i].needle);
  }
  int rc = run("--step llama-3.1-8b --help");
  CHECK(rc == 0 && strstr(g_out, "usage: fp4kit bench --step MODEL") && !g_err[0], "--help: exit %d", rc);
  /* FP4KIT_DEVICE where --device is not given: a value that is not a device, or the host only */
  setenv("FP4KIT_DEVICE", "cpu", 1);
  rc = run("--step llama-3.1-8b");
  CHECK(rc == 2 && strstr(g_err, "FP4KIT_DEVICE='cpu' is not a device"), "FP4KIT_DEVICE=cpu: exit %d, '%s'", rc, g_err);
  setenv("FP4KIT_DEVICE", "-1", 1);
  rc = run("--step llama-3.1-8b");
  CHECK(rc == 2 && strstr(g_err, "FP4KIT_DEVICE=-1 asks for the host only"), "FP4KIT_DEVICE=-1: exit %d, '%s'", rc, g_err);
  rc = run("--step llama-3.1-8b --plan"); /* the plan needs no device */
  CHECK(rc == 0, "FP4KIT_DEVICE=-1 with --plan: exit %d, '%s'", rc, g_err);
  unsetenv("FP4KIT_DEVICE");
  rc = run("--step --help"); /* what the hint after a bad option says to run */
  CHECK(rc == 0 && strstr(g_out, "usage: fp4kit bench --step MODEL") && !g_err[0], "--step --help: exit %d, '%s'", rc,
        g_err);
  /* A report file that cannot be written stops the command before anything is built or timed. */
  rc = run("--step llama-3.1-8b --layers 1 --json /nonexistent-dir/step.json");
  CHECK(rc == 3 && strstr(g_err, "cannot write the --json file '/nonexistent-dir/step.json'") &&
            strstr(g_err, "nothing was timed"),
        "unwritable --json: exit %d, '%s'", rc, g_err);
  rc = run("--step qwen3.5-397b-a17b --ep 8 --plan");
  CHECK(rc == 0 && strstr(g_out, "E 64 (top-2 of 10 per token on the rank)") && strstr(g_out, "7077888 bytes per expert") &&
            strstr(g_out, "one layer reads 21233664 FP4 bytes"),
        "--plan for Qwen3.5 EP8: exit %d, '%s'", rc, g_out);
  /* Per batch: 2 experts a token on the rank at batch 1, so 60 layers of 3 experts' bytes. */
  rc = run("--step qwen3.5-397b-a17b --ep 8 --plan --batch 1,64");
  CHECK(rc == 0 && strstr(g_out, "\n       1       1             2.0              1274.0\n"),
        "--plan per batch for Qwen3.5 EP8: exit %d, '%s'", rc, g_out);
  /* All-to-all: every row sent is received somewhere, so a rank receives batch x top-k rows on
   * average: 10 at batch 1 (8 tokens a step), 640 at 64 (512). */
  rc = run("--step qwen3.5-397b-a17b --ep 8 --gpus 8 --moe-comm all-to-all --plan --batch 1,64");
  CHECK(rc == 0 && strstr(g_out, "each rank's tokens pick top-10 of all 512 experts") &&
            strstr(g_out, "\n       1       8 ") && strstr(g_out, "    10.0 (") && strstr(g_out, "\n      64     512 ") &&
            strstr(g_out, "   640.0 ("),
        "--plan for Qwen3.5 EP8 all-to-all: exit %d, '%s'", rc, g_out);
  /* Expert parallelism lies within the tensor-parallel group (fp4_shape_set's rule): TP8 x EP8 is 8 ranks. */
  rc = run("--step qwen3.5-397b-a17b --tp 8 --ep 8 --gpus 8 --plan");
  CHECK(rc == 0 && strstr(g_out, "E 64 (top-2 of 10"), "--plan for Qwen3.5 TP8 x EP8 on 8 GPUs: exit %d, '%s'", rc, g_err);
  rc = run("--step llama-3.3-70b --tp 8 --gpus 8 --plan");
  CHECK(rc == 0 && strstr(g_out, "80 layers"), "--plan with --gpus 8 for TP8: exit %d, stderr '%s'", rc, g_err);
  rc = run("--step llama-3.3-70b --tp 8 --plan");
  CHECK(rc == 0 && strstr(g_out, "80 layers") && strstr(g_out, "one layer reads 60162048 FP4 bytes"),
        "--plan for Llama-3.3-70B TP8: exit %d, '%s'", rc, g_out);
  /* --batch and --seed shape a MoE model's per-batch table; a dense model's plan says they change nothing. */
  CHECK(!strstr(g_out, "--batch"), "--plan for a dense model without --batch: '%s'", g_out);
  rc = run("--step llama-3.3-70b --tp 8 --plan --batch 1,64 --seed 3");
  CHECK(rc == 0 && strstr(g_out, "one layer reads 60162048 FP4 bytes") &&
            strstr(g_out, "--batch and --seed change nothing here: a dense layer reads the same FP4 bytes at every batch"),
        "--plan --batch for a dense model: exit %d, '%s', '%s'", rc, g_out, g_err);
}

/* Without a GPU: one line saying so, a non-zero exit. With one, a device that does not exist. */
static void test_no_gpu(int gpus) {
  const int rc = run(gpus ? "--step llama-3.1-8b --device 1000" : "--step llama-3.1-8b --tp 8");
  CHECK(rc == 3 && lines(g_err) == 1 && strstr(g_err, "fp4kit bench --step: no GPU") && !g_out[0],
        "without a GPU: exit %d, stdout '%s', stderr '%s'", rc, g_out, g_err);
}

static double num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* A two-layer step end to end through the fp4kit command: every point ok, bytes as planned. */
static void cli_step(const char *args, int64_t layer_bytes_dense, int types) {
  char full[400], path[128], csv_path[128];
  snprintf(path, sizeof path, "%s/step.json", dir);
  snprintf(csv_path, sizeof csv_path, "%s/step.csv", dir);
  snprintf(full, sizeof full, "bench %s --layers 2 --rounds 3 --json %s --csv %s", args, path, csv_path);
  const int rc = cli_run("", full, "step");
  char *err = cli_slurp("step.err"), *text = cli_slurp("step.json"), *csv = cli_slurp("step.csv");
  /* the CSV carries the read-only chain too: its column is filled on every whole-step row */
  int chain_col = -1, step_rows = 0, chain_rows = 0;
  for (char *line = csv, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    int col = 0;
    const char *field = line;
    for (const char *c = line;; c++)
      if (*c == ',' || !*c) {
        const size_t len = (size_t)(c - field);
        if (line == csv && len == strlen("read_chain_graph_us") && !strncmp(field, "read_chain_graph_us", len)) chain_col = col;
        if (line != csv && col == chain_col && strstr(line, ",step,")) step_rows++, chain_rows += len > 0 && atof(field) > 0;
        if (!*c) break;
        col++, field = c + 1;
      }
  }
  CHECK(chain_col >= 0 && step_rows == 2 && chain_rows == 2, "'%s': CSV read-chain column %d, %d step rows, %d with a time",
        full, chain_col, step_rows, chain_rows);
  free(csv);
  CHECK(rc == 0, "'fp4kit %s': exit %d, stderr '%s'", full, rc, err ? err : "");
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  CHECK(root != NULL, "'fp4kit %s': no JSON record", full);
  free(err);
  free(text);
  if (!root) return;
  CHECK(num(root, "layers_built") == 2, "'%s': layers_built %g", full, num(root, "layers_built"));
  const cJSON *pts = cJSON_GetObjectItemCaseSensitive(root, "points"), *pt;
  CHECK(cJSON_GetArraySize(pts) == 2, "'%s': %d points", full, cJSON_GetArraySize(pts));
  cJSON_ArrayForEach(pt, pts) {
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(pt, "status");
    CHECK(cJSON_IsString(status) && !strcmp(status->valuestring, "ok"), "'%s': a point is %s", full,
          cJSON_IsString(status) ? status->valuestring : "?");
    CHECK(num(pt, "graph_pdl_us") > 0 && num(pt, "graph_us") > 0 && num(pt, "eager_us") > 0, "'%s': a way has no time",
          full);
    if (layer_bytes_dense)
      CHECK(num(pt, "fp4_bytes") == 2.0 * (double)layer_bytes_dense, "'%s': fp4_bytes %g", full, num(pt, "fp4_bytes"));
    /* the read-only chain ran, dense calls and MoE layers alike (two layers may sit in L2, so no
     * bound on its fraction) */
    CHECK(num(pt, "read_chain_graph_us") > 0 && num(pt, "read_chain_frac_read_ceiling") > 0,
          "'%s': read chain %g us (%g of the ceiling)", full, num(pt, "read_chain_graph_us"),
          num(pt, "read_chain_frac_read_ceiling"));
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(pt, "per_type")) == types, "'%s': per_type", full);
  }
  cJSON_Delete(root);
}

/* --gpus 1: the step with its all-reduces over one rank (NCCL), or a clear refusal where NCCL is absent. */
static void cli_step_one_rank(void) {
  char full[400], path[128];
  snprintf(path, sizeof path, "%s/ranks.json", dir);
  snprintf(full, sizeof full, "bench --step llama-3.1-8b --tp 8 --gpus 1 --batch 1,5 --layers 2 --rounds 3 --no-peers --json %s",
           path);
  const int rc = cli_run("", full, "ranks");
  char *err = cli_slurp("ranks.err"), *text = cli_slurp("ranks.json");
  if (rc == 3 && err && strstr(err, "--gpus needs NCCL")) {
    printf("SKIP the one-rank NCCL step: %s", err);
    free(err);
    free(text);
    return;
  }
  CHECK(rc == 0, "'fp4kit %s': exit %d, stderr '%s'", full, rc, err ? err : "");
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  CHECK(root != NULL && num(root, "gpus") == 1 && num(root, "nccl_version") > 20000, "'%s': no gpus / nccl_version", full);
  const cJSON *pts = root ? cJSON_GetObjectItemCaseSensitive(root, "points") : NULL, *pt;
  cJSON_ArrayForEach(pt, pts) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(pt, "collectives");
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(pt, "status");
    CHECK(cJSON_IsString(status) && !strcmp(status->valuestring, "ok"), "'%s': a point is not ok", full);
    /* o_proj and down_proj of each of the 2 layers write the hidden width: 4 all-reduces, none sent over 1 rank */
    CHECK(c && num(c, "count") == 4 && num(c, "ring_bytes_per_rank") == 0 && num(c, "alone_us") > 0,
          "'%s': collectives count %g, ring bytes %g, alone %g us", full, c ? num(c, "count") : -1,
          c ? num(c, "ring_bytes_per_rank") : -1, c ? num(c, "alone_us") : -1);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(pt, "rank_graph_pdl_us")) == 1, "'%s': rank times", full);
  }
  cJSON_Delete(root);
  free(err);
  free(text);
}

/* --moe-comm all-to-all over one rank (--ep 1: every expert on the GPU): the shared expert, the
 * dispatch to itself, the routed experts on the rows received and the sum, with the BF16 peer doing
 * the same; 2 all-to-alls per layer, nothing sent to another rank; or a clear refusal without NCCL. */
static void cli_step_a2a_one_rank(void) {
  char full[400], path[128];
  snprintf(path, sizeof path, "%s/a2a.json", dir);
  snprintf(full, sizeof full,
           "bench --step qwen3.5-397b-a17b --gpus 1 --moe-comm all-to-all --batch 1,8 --layers 2 --rounds 3 --json %s", path);
  const int rc = cli_run("", full, "a2a");
  char *err = cli_slurp("a2a.err"), *text = cli_slurp("a2a.json");
  if (rc == 3 && err && strstr(err, "--gpus needs NCCL")) {
    printf("SKIP the one-rank all-to-all step: %s", err);
    free(err);
    free(text);
    return;
  }
  CHECK(rc == 0, "'fp4kit %s': exit %d, stderr '%s'", full, rc, err ? err : "");
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  const cJSON *mc = root ? cJSON_GetObjectItemCaseSensitive(root, "moe_comm") : NULL;
  CHECK(cJSON_IsString(mc) && !strcmp(mc->valuestring, "all-to-all"), "'%s': moe_comm", full);
  const cJSON *pts = root ? cJSON_GetObjectItemCaseSensitive(root, "points") : NULL, *pt;
  int n = 0;
  cJSON_ArrayForEach(pt, pts) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(pt, "collectives");
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(pt, "status");
    CHECK(cJSON_IsString(status) && !strcmp(status->valuestring, "ok"), "'%s': a point is %s (%s)", full,
          cJSON_IsString(status) ? status->valuestring : "?", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pt, "reason")));
    CHECK(num(pt, "tokens_per_step") == num(pt, "batch") && num(pt, "graph_pdl_us") > 0 && num(pt, "fp4_bytes") > 0 &&
              num(pt, "bf16_cublas_graph_us") > 0,
          "'%s': batch %g: tokens %g, graph+PDL %g us, %g bytes, BF16 %g us", full, num(pt, "batch"),
          num(pt, "tokens_per_step"), num(pt, "graph_pdl_us"), num(pt, "fp4_bytes"), num(pt, "bf16_cublas_graph_us"));
    CHECK(c && num(c, "count") == 4 && num(c, "bytes_sent_per_rank") == 0 && num(c, "alone_us") > 0,
          "'%s': all-to-alls %g, bytes sent %g, alone %g us", full, c ? num(c, "count") : -1,
          c ? num(c, "bytes_sent_per_rank") : -1, c ? num(c, "alone_us") : -1);
    n++;
  }
  CHECK(n == 2, "'%s': %d points", full, n);
  cJSON_Delete(root);
  free(err);
  free(text);
}

/* --sweep: every layer type timed again with each named config; one that cannot run is refused with
 * the library's reason (naming the config), the others have a time and its ratio to the default's. */
static void cli_step_sweep(const char *step, const char *good, const char *bad, int want_types) {
  char full[400], path[128];
  snprintf(path, sizeof path, "%s/sweep.json", dir);
  snprintf(full, sizeof full, "bench %s --batch 1 --layers 2 --rounds 3 --no-peers --sweep %s,%s --json %s", step, good,
           bad, path);
  const int rc = cli_run("", full, "sweep");
  char *err = cli_slurp("sweep.err"), *text = cli_slurp("sweep.json"), *out = cli_slurp("sweep");
  char refused[96];
  snprintf(refused, sizeof refused, "%-26s refused: ", bad);
  CHECK(rc == 0, "'fp4kit %s': exit %d, stderr '%s'", full, rc, err ? err : "");
  CHECK(out && cli_count(out, "(fastest named)") == want_types && cli_count(out, refused) == want_types,
        "'%s': the table names no fastest config or no refusal per type: '%s'", full, out ? out : "");
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  const cJSON *pts = root ? cJSON_GetObjectItemCaseSensitive(root, "points") : NULL, *pt, *ty;
  int types = 0;
  cJSON_ArrayForEach(pt, pts) {
    cJSON_ArrayForEach(ty, cJSON_GetObjectItemCaseSensitive(pt, "per_type")) {
      const cJSON *sw = cJSON_GetObjectItemCaseSensitive(ty, "sweep");
      const cJSON *a = cJSON_GetArrayItem(sw, 0), *b = cJSON_GetArrayItem(sw, 1);
      const cJSON *bn = b ? cJSON_GetObjectItemCaseSensitive(b, "note") : NULL;
      CHECK(cJSON_GetArraySize(sw) == 2 && num(a, "graph_pdl_us") > 0 && num(a, "over_default") > 0 &&
                cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(b, "graph_pdl_us")) && cJSON_IsString(bn) &&
                strstr(bn->valuestring, bad),
            "'%s': a type's sweep is not [time, refusal naming %s]", full, bad);
      types++;
    }
  }
  CHECK(types == want_types, "'%s': %d types with a sweep", full, types);
  cJSON_Delete(root);
  free(err);
  free(text);
  free(out);
}

/* --trace on the device: the Qwen3.5 EP8 layer's kernels in one replay (at batch 1 gate_up with
 * the routing, down with the combine: 2 per layer), the span at least the busy time, the kernels' sum at least the busy time; or,
 * where CUPTI cannot record, the reason and no numbers. */
static void cli_step_trace(void) {
  char full[300], path[128];
  snprintf(path, sizeof path, "%s/trace.json", dir);
  snprintf(full, sizeof full, "bench --step qwen3.5-397b-a17b --ep 8 --batch 1 --layers 2 --rounds 3 --no-peers --trace --json %s",
           path);
  const int rc = cli_run("", full, "trace");
  char *err = cli_slurp("trace.err"), *text = cli_slurp("trace.json");
  CHECK(rc == 0, "'fp4kit %s': exit %d, stderr '%s'", full, rc, err ? err : "");
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  const cJSON *pt = cJSON_GetArrayItem(root ? cJSON_GetObjectItemCaseSensitive(root, "points") : NULL, 0);
  const cJSON *tr = pt ? cJSON_GetObjectItemCaseSensitive(pt, "trace") : NULL;
  const cJSON *note = tr ? cJSON_GetObjectItemCaseSensitive(tr, "note") : NULL;
  const cJSON *slots = tr ? cJSON_GetObjectItemCaseSensitive(tr, "per_layer_position") : NULL;
  if (cJSON_IsString(note) && note->valuestring[0]) {
    CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(tr, "span_us")) && cJSON_GetArraySize(slots) == 0,
          "--trace not run ('%s') but numbers reported", note->valuestring);
    printf("SKIP the --trace numbers: %s\n", note->valuestring);
  } else {
    const double span = num(tr, "span_us"), busy = num(tr, "busy_us"), sum = num(tr, "kernel_sum_us");
    const cJSON *first = cJSON_GetArrayItem(slots, 0);
    const cJSON *fname = first ? cJSON_GetObjectItemCaseSensitive(first, "kernel") : NULL;
    CHECK(num(tr, "kernels") == 4 && cJSON_GetArraySize(slots) == 2 && busy > 0 && span >= busy && sum >= busy * 0.999 &&
              cJSON_IsString(fname) && !strcmp(fname->valuestring, "grouped_lean_kernel"),
          "--trace of 2 Qwen3.5 EP8 layers: %g kernels, %d positions (first %s), span %g busy %g sum %g", num(tr, "kernels"),
          cJSON_GetArraySize(slots), cJSON_IsString(fname) ? fname->valuestring : "?", span, busy, sum);
  }
  cJSON_Delete(root);
  free(err);
  free(text);
}

static void test_device(int gpus) {
  if (!gpus) {
    printf("SKIP the end-to-end steps on the device: no CUDA device visible (the plan, options and no-GPU path ran)\n");
    return;
  }
  /* Whether the command routes --step here yet: its plan needs no device. */
  const int rc = cli_run("", "bench --step llama-3.3-70b --tp 8 --plan", "route");
  char *out = cli_slurp("route");
  const int routed = rc == 0 && strstr(out ? out : "", "one layer reads 60162048 FP4 bytes") && cli_count(out, " dense ") == 4;
  free(out);
  if (!routed) {
    printf("SKIP the end-to-end steps on the device: 'fp4kit bench' does not route --step to bench_step_main\n");
    return;
  }
  cli_step("--step llama-3.1-8b --tp 8 --batch 1,5", 122683392 / 8, 4);
  cli_step("--step llama-3.1-8b --tp 8 --batch 1,5 --mode w4a4 --no-peers", 122683392 / 8, 4);
  cli_step("--step qwen3.5-397b-a17b --ep 8 --batch 1,8", 0, 1);
  cli_step("--step qwen3.5-397b-a17b --ep 8 --batch 1,8 --mode w4a4 --no-peers", 0, 1);
  cli_step_one_rank();
  cli_step_a2a_one_rank();
  cli_step_sweep("--step llama-3.1-8b --tp 8", "small-m.w8", "no-such-config", 4);
  cli_step_sweep("--step llama-3.1-8b --tp 8 --mode w4a4", "small-m.pro.w8", "moe.streaming", 4);
  cli_step_sweep("--step qwen3.5-397b-a17b --ep 8", "moe.streaming", "small-m.w8", 1);
  cli_step_trace();
}

/* The ranks' agreement of --gpus: every thread gets each round's minimum, rounds never mix (a
 * fast thread's next value must not enter the round a slow one is still reading), for 1-8 threads. */
enum { AGREE_ROUNDS = 2000, AGREE_MAX = 8 };
typedef struct agree_job {
  step_agree *a;
  int id, n, bad;
} agree_job;

static int64_t agree_value(int round, int id) { return (int64_t)((round * 7919 + id * 104729) % 1000) - (round % 3 == 0 ? id : 0); }

static void *agree_thread(void *arg) {
  agree_job *j = arg;
  for (int r = 0; r < AGREE_ROUNDS; r++) {
    int64_t want = INT64_MAX;
    for (int k = 0; k < j->n; k++)
      if (agree_value(r, k) < want) want = agree_value(r, k);
    j->bad += step_agree_min(j->a, agree_value(r, j->id)) != want;
  }
  return NULL;
}

static void test_agreement(void) {
  for (int n = 1; n <= AGREE_MAX; n++) {
    step_agree *a = step_agree_create(n);
    CHECK(a != NULL, "step_agree_create(%d)", n);
    if (!a) return;
    pthread_t th[AGREE_MAX];
    agree_job jobs[AGREE_MAX];
    for (int k = 0; k < n; k++) {
      jobs[k] = (agree_job){a, k, n, 0};
      CHECK(!pthread_create(&th[k], NULL, agree_thread, &jobs[k]), "pthread_create");
    }
    int bad = 0;
    for (int k = 0; k < n; k++) {
      pthread_join(th[k], NULL);
      bad += jobs[k].bad;
    }
    CHECK(bad == 0, "%d threads: %d of %d agreed values were not the round's minimum", n, bad, n * AGREE_ROUNDS);
    step_agree_destroy(a);
  }
  CHECK(step_comm_ring_bytes(1000.0, 8) == 1750.0 && step_comm_ring_bytes(1000.0, 1) == 0.0,
        "ring all-reduce bytes per rank: %g over 8, %g over 1", step_comm_ring_bytes(1000.0, 8), step_comm_ring_bytes(1000.0, 1));
}

/* The all-to-all exchange of --moe-comm all-to-all, every rank simulated on the host: rank r's token
 * t holds a vector of its own, dispatch and combine move rows by the plans' counts and orders, each
 * rank's "expert" e maps a row v to weight * (v * (e + 1) + e), and every token's sum must equal the
 * same experts applied directly to its vector by the global routing. Also: each pair of ranks agrees
 * on counts, every local expert id is in range, and the plan refuses what is not an exchange. */
enum { XW = 3, XMAX_RANKS = 8 };

static double x_value(int rank, int64_t t, int c) { return rank * 1000.0 + (double)t + 0.25 * c; }
static double x_expert(int64_t e, double v) { return v * (double)(e + 1) + (double)e; }

static void check_exchange(int ranks, int64_t tokens, int64_t stride, int64_t top_k, int64_t local) {
  step_exchange X[XMAX_RANKS];
  int made = 0, ok = 1;
  for (int r = 0; r < ranks; r++) {
    const fp4_status st = step_exchange_make(77, 5, ranks, r, tokens, stride, top_k, local, &X[r]);
    CHECK(st == FP4_OK, "exchange %d ranks, %lld tokens, top-%lld of %lld each: %s", ranks, (long long)tokens,
          (long long)top_k, (long long)local, fp4_last_error());
    if (st) break;
    made++;
  }
  if (made < ranks) goto out;
  for (int s = 0; s < ranks; s++) {
    int64_t out = 0;
    for (int d = 0; d < ranks; d++) {
      ok &= X[s].send_count[d] == X[d].recv_count[s];
      out += X[s].send_count[d];
    }
    ok &= out == tokens * top_k && X[s].sent == out;
    for (int64_t i = 0; i < X[s].received; i++) ok &= X[s].recv_expert[i] >= 0 && X[s].recv_expert[i] < local;
  }
  CHECK(ok, "exchange %d ranks, %lld tokens, top-%lld: counts do not pair up or ids out of range", ranks, (long long)tokens,
        (long long)top_k);
  if (!ok) goto out;
  /* dispatch */
  double *sendb[XMAX_RANKS], *recvb[XMAX_RANKS], *backb[XMAX_RANKS];
  for (int r = 0; r < ranks; r++) {
    sendb[r] = calloc((size_t)(tokens * top_k * XW) + 1, sizeof(double));
    recvb[r] = calloc((size_t)(X[r].received * XW) + 1, sizeof(double));
    backb[r] = calloc((size_t)(tokens * top_k * XW) + 1, sizeof(double));
    for (int64_t i = 0; i < X[r].sent; i++)
      for (int c = 0; c < XW; c++) sendb[r][i * XW + c] = x_value(r, X[r].send_token[i], c);
  }
  for (int d = 0; d < ranks; d++) { /* rank d receives each source's block for it, sources in order */
    int64_t at = 0;
    for (int s = 0; s < ranks; s++) {
      int64_t off = 0;
      for (int q = 0; q < d; q++) off += X[s].send_count[q];
      memcpy(recvb[d] + at * XW, sendb[s] + off * XW, (size_t)(X[s].send_count[d] * XW) * sizeof(double));
      at += X[s].send_count[d];
    }
    for (int64_t i = 0; i < X[d].received; i++) /* the experts of rank d, weighted */
      for (int c = 0; c < XW; c++)
        recvb[d][i * XW + c] = X[d].recv_weight[i] * x_expert((int64_t)d * local + X[d].recv_expert[i], recvb[d][i * XW + c]);
  }
  for (int s = 0; s < ranks; s++) { /* combine: rank d returns source s's block; s puts it where it sent it */
    int64_t off = 0;
    for (int d = 0; d < ranks; d++) {
      int64_t from = 0;
      for (int q = 0; q < s; q++) from += X[d].recv_count[q];
      memcpy(backb[s] + off * XW, recvb[d] + from * XW, (size_t)(X[s].send_count[d] * XW) * sizeof(double));
      off += X[s].send_count[d];
    }
  }
  const int64_t all = ranks * stride;
  int32_t *ids = malloc((size_t)(all * top_k) * sizeof *ids + 4);
  float *w = malloc((size_t)(all * top_k) * sizeof *w + 4);
  step_routing(77, 5, all, top_k, ranks * local, ids, w);
  double worst = 0;
  for (int r = 0; r < ranks; r++)
    for (int64_t t = 0; t < tokens; t++)
      for (int c = 0; c < XW; c++) {
        double got = 0, want = 0;
        for (int64_t j = 0; j < top_k; j++) {
          got += backb[r][X[r].sum_rows[t * top_k + j] * XW + c];
          const int64_t g = ((int64_t)r * stride + t) * top_k + j;
          want += w[g] * x_expert(ids[g], x_value(r, t, c));
        }
        const double rel = fabs(got - want) / (fabs(want) + 1.0);
        if (rel > worst) worst = rel;
      }
  CHECK(worst < 1e-12, "exchange %d ranks, %lld tokens, top-%lld of %lld each: combined sums off by %g relative", ranks,
        (long long)tokens, (long long)top_k, (long long)local, worst);
  int64_t out_rows = 0, back_rows = 0;
  for (int r = 0; r < ranks; r++) {
    out_rows += step_exchange_rows_out(&X[r]);
    back_rows += step_exchange_rows_back(&X[r]);
  }
  CHECK(out_rows == back_rows && (ranks > 1 || out_rows == 0), "rows leaving ranks %lld, coming back %lld",
        (long long)out_rows, (long long)back_rows);
  /* The plan's one-pass counts of the same routing agree with every rank's exchange. */
  step_exchange_count cnt[XMAX_RANKS];
  unsigned char *seen = malloc((size_t)(ranks * local));
  step_exchange_counts(ids, ranks, tokens, stride, top_k, local, seen, cnt);
  for (int r = 0; r < ranks; r++)
    CHECK(cnt[r].received == X[r].received && cnt[r].rows_out == step_exchange_rows_out(&X[r]) &&
              cnt[r].rows_back == step_exchange_rows_back(&X[r]) &&
              cnt[r].touched == step_touched(X[r].recv_expert, X[r].received, local),
          "exchange %d ranks, %lld tokens: rank %d counts %lld/%lld/%lld/%lld, exchange %lld/%lld/%lld/%lld", ranks,
          (long long)tokens, r, (long long)cnt[r].received, (long long)cnt[r].rows_out, (long long)cnt[r].rows_back,
          (long long)cnt[r].touched, (long long)X[r].received, (long long)step_exchange_rows_out(&X[r]),
          (long long)step_exchange_rows_back(&X[r]), (long long)step_touched(X[r].recv_expert, X[r].received, local));
  free(seen);
  free(ids);
  free(w);
  for (int r = 0; r < ranks; r++) {
    free(sendb[r]);
    free(recvb[r]);
    free(backb[r]);
  }
out:
  for (int r = 0; r < made; r++) step_exchange_free(&X[r]);
}

static void test_exchange(void) {
  check_exchange(1, 5, 5, 4, 16);    /* one rank: everything stays */
  check_exchange(2, 1, 1, 3, 2);     /* a token may pick every expert of a rank */
  check_exchange(2, 0, 4, 2, 4);     /* no tokens: nothing moves */
  check_exchange(3, 7, 7, 6, 2);     /* top_k = every expert of the model */
  check_exchange(8, 1, 64, 10, 64);  /* Qwen3.5 EP8 at one token per rank, of up to 64 */
  check_exchange(8, 64, 64, 10, 64); /* and at 64 */
  check_exchange(8, 33, 40, 8, 32);  /* DeepSeek-R1's top-8 of 256 over 8 ranks */
  /* A smaller batch's pairs are among a larger one's: the experts it touches too. */
  step_exchange small, large;
  CHECK(step_exchange_make(9, 2, 4, 1, 3, 16, 4, 8, &small) == FP4_OK &&
            step_exchange_make(9, 2, 4, 1, 16, 16, 4, 8, &large) == FP4_OK,
        "%s", fp4_last_error());
  int subset = 1;
  for (int64_t i = 0; i < small.received; i++) {
    int found = 0;
    for (int64_t j = 0; j < large.received && !found; j++) found = large.recv_expert[j] == small.recv_expert[i];
    subset &= found;
  }
  CHECK(subset && small.received < large.received, "batch 3's received experts are not among batch 16's");
  step_exchange_free(&small);
  step_exchange_free(&large);
  step_exchange x;
  CHECK(step_exchange_make(1, 0, 2, 0, 4, 4, 9, 4, &x) == FP4_ERR_INVALID_ARGUMENT && strstr(fp4_last_error(), "top-9"),
        "top-9 of 8 experts: not refused ('%s')", fp4_last_error());
  CHECK(step_exchange_make(1, 0, 2, 2, 4, 4, 1, 4, &x) == FP4_ERR_INVALID_ARGUMENT, "rank 2 of 2: not refused");
  CHECK(step_exchange_make(1, 0, 2, 0, 5, 4, 1, 4, &x) == FP4_ERR_INVALID_ARGUMENT, "5 tokens of 4 per rank: not refused");
  /* Rows that leave: rank 0 of 2 with one expert each, top-2 of 2: each token sends one row away. */
  CHECK(step_exchange_make(3, 1, 2, 0, 6, 6, 2, 1, &x) == FP4_OK, "%s", fp4_last_error());
  CHECK(x.sent == 12 && x.send_count[0] == 6 && x.send_count[1] == 6 && x.received == 12 && x.recv_count[0] == 6 &&
            step_exchange_rows_out(&x) == 6 && step_exchange_rows_back(&x) == 6,
        "top-2 of 2 experts on 2 ranks: sent %lld (%lld, %lld), received %lld", (long long)x.sent,
        (long long)x.send_count[0], (long long)x.send_count[1], (long long)x.received);
  step_exchange_free(&x);
}

/* The record's forms on a made-up report (no GPU): Qwen3.5 EP8 over 8 ranks, batch 1, 480 MB at a
 * 4.8 TB/s read ceiling (a 100 us floor), the step 125 us under PDL and the collectives 20 us alone:
 * 0.8 of the ceiling, 1.04x (read floor + collectives); with all-to-all 8 tokens a step (1 per rank),
 * with all-reduce 1. */
static void test_report_forms(int a2a) {
  step_report *r = calloc(1, sizeof *r);
  step_opts o;
  memset(&o, 0, sizeof o);
  o.model = "qwen3.5-397b-a17b";
  o.tp = 1;
  o.ep = o.gpus = 8;
  o.a2a = a2a;
  o.rounds = 20;
  o.seed = 1;
  CHECK(r && step_plan_make(o.model, 1, 8, &r->plan) == FP4_OK, "plan: %s", fp4_last_error());
  if (!r) return;
  r->o = &o;
  r->gpus = 8;
  r->nccl_version = 22803;
  r->layers_built = 60;
  r->read_bps = (bv){1, 4.8e12};
  r->copy_bps = (bv){1, 8.0e12};
  snprintf(r->dev.name, sizeof r->dev.name, "made-up GPU");
  snprintf(r->origin.command, sizeof r->origin.command, "fp4kit bench --step qwen3.5-397b-a17b --ep 8 --gpus 8");
  step_point *x = &r->pts[r->npts++];
  x->batch = 1;
  x->status = "ok";
  x->calls = 60;
  x->bytes = 4.8e8;
  x->eager_us = (bv){1, 150};
  x->graph_us = (bv){1, 130};
  x->pdl_us = (bv){1, 125};
  x->coll_count = 120;
  x->coll_bytes = x->coll_sent_bytes = 8.5e6;
  x->coll_us = (bv){1, 20};
  x->types[0] = (type_result){.calls = 60, .bytes = 4.8e8, .us = {1, 125}};
  for (int k = 0; k < 8; k++) x->rank_pdl_us[k] = (bv){1, 120 + k * 0.5};
  char json[128], csv[128], html[128];
  snprintf(json, sizeof json, "%s/rec.json", dir);
  snprintf(csv, sizeof csv, "%s/rec.csv", dir);
  snprintf(html, sizeof html, "%s/rec.html", dir);
  CHECK(step_report_write(json, r, 0) && step_report_write(csv, r, 1) && step_report_write(html, r, 2),
        "writing the record's three forms");
  static char text[1 << 16];
  slurp(json, text, sizeof text);
  cJSON *root = cJSON_Parse(text);
  const cJSON *pt = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "points"), 0);
  const cJSON *c = pt ? cJSON_GetObjectItemCaseSensitive(pt, "collectives") : NULL;
  const cJSON *mc = cJSON_GetObjectItemCaseSensitive(root, "moe_comm");
  const char *comm = a2a ? "all-to-all" : "all-reduce";
  const double tokens = a2a ? 8 : 1;
  CHECK(cJSON_IsString(mc) && !strcmp(mc->valuestring, comm) && num(pt, "tokens_per_step") == tokens &&
            fabs(num(pt, "tokens_per_s_bound") - tokens * 8000.0) < 1e-6 && fabs(num(pt, "frac_read_ceiling") - 0.8) < 1e-12 &&
            fabs(num(pt, "pdl_gain") - 1.04) < 1e-12,
        "JSON: moe_comm, tokens %g, tokens/s %g, of the ceiling %g, PDL gain %g", num(pt, "tokens_per_step"),
        num(pt, "tokens_per_s_bound"), num(pt, "frac_read_ceiling"), num(pt, "pdl_gain"));
  const cJSON *ring = c ? cJSON_GetObjectItemCaseSensitive(c, "ring_bytes_per_rank") : NULL;
  CHECK(c && num(c, "bytes_sent_per_rank") == 8.5e6 && (a2a ? !ring : num(c, "ring_bytes_per_rank") == 8.5e6) &&
            num(c, "read_floor_plus_alone_us") == 120.0 && fabs(num(c, "step_over_floor_plus_alone") - 125.0 / 120.0) < 1e-12 &&
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(pt, "rank_graph_pdl_us")) == 8,
        "JSON collectives: sent %g, floor + alone %g, step over it %g", c ? num(c, "bytes_sent_per_rank") : -1,
        c ? num(c, "read_floor_plus_alone_us") : -1, c ? num(c, "step_over_floor_plus_alone") : -1);
  cJSON_Delete(root);
  slurp(csv, text, sizeof text);
  char want[160];
  /* tokens_per_step last: with all-to-all the batch column is one rank's tokens */
  snprintf(want, sizeof want, "\nqwen3.5-397b-a17b,1,8,w4a16,1,60,60,step,60,");
  char want_end[96];
  snprintf(want_end, sizeof want_end, ",8,%s,120,8500000,20.00,ok,%d\n", comm, a2a ? 8 : 1);
  CHECK(strstr(text, ",gpus,moe_comm,collectives,collective_bytes_sent_per_rank,collectives_alone_us,status,"
                     "tokens_per_step\n") &&
            strstr(text, want) && strstr(text, want_end),
        "CSV: the collectives' columns and tokens_per_step: '%s'", text);
  slurp(html, text, sizeof text);
  char want_h1[96], want_bar[96], want_h2[96];
  snprintf(want_h1, sizeof want_h1, "8 GPUs, MoE %s%s</h1>", comm, a2a ? " (batch: tokens per rank)" : "");
  snprintf(want_h2, sizeof want_h2, "<h2>batch 1%s: ok</h2>", a2a ? " per rank, 8 tokens a step" : "");
  snprintf(want_bar, sizeof want_bar, "120 %s alone (8.50 MB sent per rank)", a2a ? "all-to-alls" : "all-reduces");
  CHECK(strstr(text, want_h1) && strstr(text, want_h2) && strstr(text, "read floor + collectives 120.0 us") &&
            strstr(text, want_bar),
        "HTML (%s): the GPUs, the collectives and the step against read floor + collectives", comm);
  FILE *f = fopen(csv, "w");
  if (f) {
    step_report_print(f, r);
    fclose(f);
  }
  slurp(csv, text, sizeof text);
  snprintf(want, sizeof want, "8 GPUs: 120 %s, 8.50 MB each rank sends, alone 20.0 us; step / (read floor + alone) 1.042",
           a2a ? "all-to-alls" : "all-reduces");
  /* the batch column's header says whose tokens it counts */
  CHECK(strstr(text, want) && (strstr(text, "8 GPUs, one rank each, MoE tokens exchanged by all-to-all") != NULL) == a2a &&
            strstr(text, a2a ? "\nrank_batch  calls " : "\nbatch  calls ") &&
            strstr(text, a2a ? "\n         1     60 " : "\n    1     60 "),
        "table: '%s'", text);
  free(r);
}

/* The words of the text table's row for `batch` (its line starts with the batch), at most max. */
static int table_row(const char *text, long long batch, char words[][64], int max) {
  char key[32];
  snprintf(key, sizeof key, "\n%5lld ", batch);
  const char *at = strstr(text, key);
  int n = 0;
  if (!at) return 0;
  for (at++; *at && *at != '\n' && n < max;) {
    while (*at == ' ') at++;
    size_t len = strcspn(at, " \n");
    if (!len) break;
    snprintf(words[n++], 64, "%.*s", (int)(len < 63 ? len : 63), at);
    at += len;
  }
  return n;
}

/* Values the step did not measure, in all four forms: a made-up Llama-3.1-8B TP2 record on 2 GPUs
 * whose read and copy peers failed. Batch 1 failed after its separate launches (the graphs, the
 * collectives and the read-only chain unmeasured, the BF16 peer not run); batch 8 measured the step
 * but not its first layer type alone, which --sweep timed with one config. JSON says null and CSV
 * leaves the cell empty; the table says "-" and the prose (text and HTML) "not measured" with the
 * record's reason, never a 0 that reads as a measurement. */
static void test_report_missing(void) {
  step_report *r = calloc(1, sizeof *r);
  step_opts o;
  memset(&o, 0, sizeof o);
  o.model = "llama-3.1-8b";
  o.tp = o.gpus = 2;
  o.ep = 1;
  o.rounds = 20;
  o.seed = 1;
  o.nsweep = 1;
  snprintf(o.sweep[0], sizeof o.sweep[0], "small-m.w8");
  CHECK(r && step_plan_make(o.model, 2, 1, &r->plan) == FP4_OK, "plan: %s", fp4_last_error());
  if (!r) return;
  r->o = &o;
  r->gpus = 2;
  r->layers_built = 32;
  snprintf(r->peer_note, sizeof r->peer_note, "read peer: made-up read failure; copy peer: made-up copy failure");
  snprintf(r->dev.name, sizeof r->dev.name, "made-up GPU");
  step_point *a = &r->pts[r->npts++], *b = &r->pts[r->npts++];
  *a = (step_point){.batch = 1, .status = "error", .calls = 128, .bytes = 4.0e9, .eager_us = {1, 900}, .coll_count = 64};
  snprintf(a->reason, sizeof a->reason, "CUDA graph: made-up graph failure");
  snprintf(a->bf16_note, sizeof a->bf16_note, "not run: --no-peers");
  snprintf(a->reads_note, sizeof a->reads_note, "made-up read chain failure");
  *b = (step_point){.batch = 8, .status = "ok", .calls = 128, .bytes = 4.0e9, .eager_us = {1, 900}, .graph_us = {1, 700},
                    .pdl_us = {1, 650}, .bf16_us = {1, 1300}, .reads_us = {1, 600}, .coll_count = 64, .coll_us = {1, 50}};
  snprintf(b->types[0].note, sizeof b->types[0].note, "made-up type failure");
  b->types[0].sweep_us[0] = (bv){1, 100};
  for (int t = 0; t < r->plan.ntypes; t++) {
    a->types[t].calls = b->types[t].calls = 32;
    a->types[t].bytes = b->types[t].bytes = 1.0e9;
  }
  for (int t = 1; t < r->plan.ntypes; t++) b->types[t].us = (bv){1, 150};

  static char text[1 << 16];
  char path[128];
  snprintf(path, sizeof path, "%s/missing.txt", dir);
  FILE *f = fopen(path, "w");
  if (f) {
    step_report_print(f, r);
    fclose(f);
  }
  slurp(path, text, sizeof text);
  CHECK(strstr(text, "read not measured, copy not measured (read peer: made-up read failure; copy peer: made-up copy "
                     "failure)") != NULL,
        "table: the peers not measured, with why: '%s'", text);
  /* batch calls FP4_MB eager graph pdl gain /read /copy tok/s bf16 x_bf16 status */
  static const char *const want_a[] = {"1", "128", "4000.0", "900.0", "-", "-", "-", "-", "-", "-", "-", "-", "error:"};
  static const char *const want_b[] = {"8", "128", "4000.0", "900.0", "700.0", "650.0", "1.077", "-", "-", "12308", "1300.0",
                                       "2.00", "ok"};
  char words[16][64];
  for (int row = 0; row < 2; row++) {
    const char *const *want = row ? want_b : want_a;
    const int n = table_row(text, row ? 8 : 1, words, 16);
    int same = n >= 13;
    for (int i = 0; same && i < 13; i++) same = !strcmp(words[i], want[i]);
    CHECK(same, "table row of batch %d: %d words, '%s'", row ? 8 : 1, n, text);
  }
  CHECK(strstr(text, "  - us  floor         - us      -  ") && strstr(text, "100.0 us  the default's time not measured") &&
            strstr(text, "600.0 us, read ceiling not measured, copy floor not measured") &&
            strstr(text, "read-only chain: not measured: made-up read chain failure") &&
            strstr(text, "alone not measured; step / (read floor + alone) not measured") &&
            strstr(text, "alone 50.0 us; step / (read floor + alone) not measured") && !strstr(text, " 0.000") &&
            !strstr(text, " 0.0 ") && !strstr(text, " 0.00x"),
        "table: the types, the sweep, the read-only chain and the collectives unmeasured: '%s'", text);

  snprintf(path, sizeof path, "%s/missing.html", dir);
  CHECK(step_report_write(path, r, 2), "writing the HTML");
  slurp(path, text, sizeof text);
  CHECK(strstr(text, "read ceiling not measured (read peer: made-up read failure; copy peer: made-up copy failure)") &&
            strstr(text, "separate launches 900.0 us, graph not measured, graph + PDL not measured (PDL gain not "
                         "measured), BF16 cuBLAS graph not run: --no-peers; tokens/s bound not measured") &&
            strstr(text, "BF16 cuBLAS graph 1300.0 us (2.00x); tokens/s bound ") &&
            strstr(text, "<div class=na>not measured</div></td><td>-</td></tr>") && !strstr(text, "n/a") &&
            /* a type timed against no read floor: no ratio, not its time in the ratio's column */
            strstr(text, "150.0 us</div></td><td>-</td></tr>") && !strstr(text, "<td>150.00</td>") &&
            !strstr(text, " 0.0 us") && !strstr(text, "gain 0.000") && !strstr(text, "bound 0<"),
        "HTML: the values not measured: '%s'", text);
  /* a dense model's collectives are its tensor-parallel all-reduces, not the MoE's */
  CHECK(strstr(text, ", 2 GPUs, all-reduce</h1>") && !strstr(text, "MoE all-reduce"),
        "HTML: the dense page's title names its all-reduces plainly");
  /* a page cut short (the file size limit binds root too) leaves the page already there whole */
  static char before[sizeof text];
  memcpy(before, text, sizeof before);
  struct rlimit usual, limit;
  getrlimit(RLIMIT_FSIZE, &usual);
  limit = usual;
  limit.rlim_cur = strlen(text) / 2;
  void (*was)(int) = signal(SIGXFSZ, SIG_IGN); /* a write past the limit then fails instead of ending the test */
  setrlimit(RLIMIT_FSIZE, &limit);
  const int written = step_report_write(path, r, 2);
  setrlimit(RLIMIT_FSIZE, &usual);
  signal(SIGXFSZ, was);
  slurp(path, text, sizeof text);
  CHECK(!written && !strcmp(text, before), "a page cut short fails and leaves the page there whole (%zu of %zu bytes)",
        strlen(text), strlen(before));

  snprintf(path, sizeof path, "%s/missing.json", dir);
  CHECK(step_report_write(path, r, 0), "writing the JSON");
  slurp(path, text, sizeof text);
  cJSON *root = cJSON_Parse(text);
  const cJSON *pa = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "points"), 0);
  CHECK(pa && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(pa, "graph_us")) &&
            cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(pa, "pdl_gain")) &&
            cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(pa, "tokens_per_s_bound")) && num(pa, "eager_us") == 900.0,
        "JSON: null where the table says '-'");
  cJSON_Delete(root);
  free(r);
}

/* --trace's host side: kernel names as CUPTI gives them, and the summary of a made-up replay of two
 * layers of three kernels, given out of order: B overlaps A (PDL), C starts after a hole. */
static void test_trace_summary(void) {
  static const struct {
    const char *name, *want;
  } names[] = {
      {"_ZN12_GLOBAL__N_112route_kernelILb1EEEv17fp4_cuda_route_args", "route_kernel"},
      /* nvcc's form: the anonymous namespace names the file, longer than STEP_TRACE_NAME in all */
      {"_ZN45_GLOBAL__N__cf808b29_12_moe_layer_cu_f40123ab12route_kernelILb1EEEv17fp4_cuda_route_args", "route_kernel"},
      {"_Z14combine_kernel20fp4_cuda_combine_args", "combine_kernel"},
      {"void <unnamed>::grouped_lean_kernel<0, 0, 1, 5, 2, 4, 4096, 1, 1, 1>(<unnamed>::grouped_params)",
       "grouped_lean_kernel"},
      {"(anonymous namespace)::silu_mul_kernel(float const*, void*)", "silu_mul_kernel"},
      {"plain_kernel", "plain_kernel"},
  };
  char out[STEP_TRACE_NAME];
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    step_trace_short_name(names[i].name, out, sizeof out);
    CHECK(!strcmp(out, names[i].want), "short name of '%s': '%s', want '%s'", names[i].name, out, names[i].want);
  }
  step_trace_kernel k[] = {
      {"_Z1Cv", 7000, 7600}, {"_Z1Av", 0, 1000},    {"_Z1Bv", 900, 3000},
      {"_Z1Cv", 3500, 4000}, {"_Z1Av", 4200, 5000}, {"_Z1Bv", 4800, 7000},
  };
  step_trace_summary t;
  step_trace_summarize(k, 6, 2, &t);
  const double eps = 1e-9;
  CHECK(t.kernels == 6 && fabs(t.span_us - 7.6) < eps && fabs(t.busy_us - 6.9) < eps && fabs(t.sum_us - 7.2) < eps &&
            t.period == 3,
        "summary: %d kernels, span %.4f busy %.4f sum %.4f period %d; want 6, 7.6, 6.9, 7.2, 3", t.kernels, t.span_us,
        t.busy_us, t.sum_us, t.period);
  static const struct {
    const char *name;
    int count;
    double mean, gap;
  } want[] = {{"A", 2, 0.9, 0.2}, {"B", 2, 2.15, -0.15}, {"C", 2, 0.55, 0.25}};
  for (int s = 0; s < 3 && t.period == 3; s++)
    CHECK(!strcmp(t.slots[s].name, want[s].name) && t.slots[s].count == want[s].count &&
              fabs(t.slots[s].mean_us - want[s].mean) < eps && fabs(t.slots[s].gap_us - want[s].gap) < eps,
          "slot %d: %s x%d, %.4f us, gap %.4f; want %s x%d, %.4f, %.4f", s, t.slots[s].name, t.slots[s].count,
          t.slots[s].mean_us, t.slots[s].gap_us, want[s].name, want[s].count, want[s].mean, want[s].gap);
  step_trace_summarize(k, 5, 2, &t); /* 5 kernels over 2 layers: no repeating pattern */
  CHECK(t.kernels == 5 && t.period == 0, "5 kernels over 2 layers: period %d, want 0", t.period);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/fp4kit_step_XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_dense_plans();
  test_moe_plans();
  test_plan_errors();
  test_collectives();
  test_nonfinite();
  test_routing();
  test_exchange();
  test_report_forms(1);
  test_report_forms(0);
  test_report_missing();
  test_options();
  test_trace_summary();
  test_agreement();
  const int gpus = fp4_probe_device_count();
  test_no_gpu(gpus);
  test_device(gpus);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return TEST_SUMMARY();
}
