/*
 * The cuda backend's dense config chooser (src/backends/cuda/config/dense_config.c), host-only:
 *   - its default equals, for every recorded point, the config the backend chose before the choice
 *     became a table (tests/dense_recorded_choices.h: every dense and TP8-sharded GEMM shape of the
 *     embedded models, NVFP4 and MXFP4, bf16/f16/f32/FP4 activations, M = 1..8192, on the facts of
 *     A100, L40S, H200, H200 without sm_90a code, B200 and RTX PRO 6000);
 *     "-" marks a problem the backend refused, which the rules must refuse too; one range changed
 *     since, by design: where an architecture's table lets the register-A tiles lead (from
 *     wgra_from_m tokens: batched decode up to wgra_lead_to_m, every grid above, dense_sm90.h) the
 *     default there is a register-A tile, and the recorded choice is what it replaced;
 *   - the tuner's first candidate is the default, and every candidate passes its own check;
 *   - names, families, refusals and workspace sizes behave as documented.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/config/dense_config.h"
#include "backends/cuda/config/dense_rules.h"
#include "backends/cuda/cuda_kernels.h"
#include "dense_recorded_choices.h"
#include "fp4kit.h"
#include "testing.h"

static fp4_dense_arch arch_of(int i) {
  fp4_dense_arch a;
  memset(&a, 0, sizeof a);
  a.major = recorded_archs[i].major;
  a.minor = recorded_archs[i].minor;
  a.sms = recorded_archs[i].sms;
  a.smem_optin = recorded_archs[i].smem_optin;
  a.sm90a = recorded_archs[i].sm90a;
  if (!a.sm90a) snprintf(a.sm90a_why, sizeof a.sm90a_why, "no sm_90a code");
  return a;
}

static const int acts[] = {FP4_CUDA_ACT_BF16, FP4_CUDA_ACT_F16, FP4_CUDA_ACT_F32, FP4_CUDA_ACT_FP4};

static void test_recorded(void) {
  const int n = (int)(sizeof recorded / sizeof *recorded);
  int64_t points = 0, wrong = 0, batched = 0, ksplit = 0, shortk = 0;
  for (int i = 0; i < n; i++) {
    const fp4_dense_arch a = arch_of(recorded[i].arch);
    for (int64_t m = recorded[i].from; m <= recorded[i].to; m++) {
      /* every M up to 1024 and at each range's ends, every 13th above (the ranges' ends are where a
       * rule could be off by one) */
      if (m > 1024 && m != recorded[i].to && (m - recorded[i].from) % 13) continue;
      const fp4_dense_shape s = {m, recorded[i].n, recorded[i].k, acts[recorded[i].act], recorded[i].format};
      char why[400];
      points++;
      const char *want = recorded_names[recorded[i].config];
      if (!strcmp(want, "-")) {
        const int refused = fp4_dense_small_m_rule(&s, why, sizeof why) &&
                            fp4_dense_check(FP4_DENSE_LARGE_M_MMA, &s, &a, NULL, why, sizeof why) == 0;
        if (!refused && wrong++ < 10)
          fprintf(stderr, "%s %lldx%lld fmt %d act %d M=%lld: recorded refused, the rules take it\n",
                  recorded_archs[recorded[i].arch].name, (long long)s.n, (long long)s.k, s.format, recorded[i].act,
                  (long long)m);
        continue;
      }
      const char *got = fp4_dense_default(&s, &a);
      const fp4_dense_rules *r = fp4_dense_rules_for(a.major, a.minor);
      /* Where the 16-row CTAs fill at most 3/4 of the SMs, M <= ksplit_max_m with bf16/f16 rows on
       * SM90+, K >= 4096 and 2^ksplit_min_log2_weights weights, the cluster K split (newer than the
       * record) leads. */
      if (r->ksplit_max_m && m <= r->ksplit_max_m && (s.act == FP4_CUDA_ACT_BF16 || s.act == FP4_CUDA_ACT_F16) &&
          4 * ((s.n + 15) / 16) <= 3 * a.sms && s.k >= 4096 && s.n * s.k >= ((int64_t)1 << r->ksplit_min_log2_weights)) {
        ksplit++;
        if ((!got || strcmp(got, "small-m.w4.k4") || fp4_dense_check(FP4_DENSE_SMALL_M, &s, &a, got, why, sizeof why) != 1) &&
            wrong++ < 10)
          fprintf(stderr, "%s %lldx%lld fmt %d act %d M=%lld: chooser %s, not a cluster K split that runs\n",
                  recorded_archs[recorded[i].arch].name, (long long)s.n, (long long)s.k, s.format, recorded[i].act,
                  (long long)m, got ? got : "(none)");
        continue;
      }
      /* Short K with one to two 32-row CTAs per SM, up to 16 tokens of bf16/f16 rows, where the
       * table enables it (newer than the record): small-m.r32.w8 leads. */
      const int64_t ctas32 = (s.n + 31) / 32, slabs = s.k / 128;
      if (r->short_k_r32_max_slabs && m <= 16 && (s.act == FP4_CUDA_ACT_BF16 || s.act == FP4_CUDA_ACT_F16) &&
          slabs >= 4 && slabs <= r->short_k_r32_max_slabs && 16 * ctas32 >= 15 * (int64_t)a.sms &&
          ctas32 <= 2 * (int64_t)a.sms) {
        shortk++;
        if ((!got || strcmp(got, "small-m.r32.w8")) && wrong++ < 10)
          fprintf(stderr, "%s %lldx%lld fmt %d act %d M=%lld: chooser %s, not small-m.r32.w8 (short K)\n",
                  recorded_archs[recorded[i].arch].name, (long long)s.n, (long long)s.k, s.format, recorded[i].act,
                  (long long)m, got ? got : "(none)");
        continue;
      }
      const int narrow_out = m <= r->wgra_narrow_to_m && s.n < r->wgra_narrow_min_n &&
                             s.n * s.k < ((int64_t)1 << r->wgra_narrow_min_log2_weights);
      if (r->wgra_from_m && m >= r->wgra_from_m && (m > r->wgra_lead_to_m || !narrow_out) && got && a.sm90a &&
          s.act != FP4_CUDA_ACT_F32 && !(s.format == FP4_FORMAT_MXFP4 && s.act == FP4_CUDA_ACT_F16)) {
        batched++;
        if (strncmp(got, "large-m.wgra.", 13) && wrong++ < 10)
          fprintf(stderr, "%s %lldx%lld fmt %d act %d M=%lld: chooser %s, not a register-A tile\n",
                  recorded_archs[recorded[i].arch].name, (long long)s.n, (long long)s.k, s.format, recorded[i].act,
                  (long long)m, got);
        continue;
      }
      if ((!got || strcmp(got, want)) && wrong++ < 10)
        fprintf(stderr, "%s %lldx%lld fmt %d act %d M=%lld: chooser %s, recorded %s\n",
                recorded_archs[recorded[i].arch].name, (long long)s.n, (long long)s.k, s.format, recorded[i].act,
                (long long)m, got ? got : "(none)", want);
    }
  }
  printf("recorded default configs: %lld points (%lld of them register-A batched decode, %lld cluster K split, %lld "
         "short-K small-m.r32.w8), %lld differ\n",
         (long long)points, (long long)batched, (long long)ksplit, (long long)shortk, (long long)wrong);
  CHECK(shortk > 50, "%lld short-K points", (long long)shortk);
  CHECK(batched > 10000, "%lld batched-decode points", (long long)batched);
  CHECK(ksplit > 100, "%lld cluster K split points", (long long)ksplit);
  CHECK(points > 1000000 && wrong == 0, "%lld of %lld recorded choices differ", (long long)wrong, (long long)points);
}

/* The tuner's list starts with the default; each name in it passes its family's check. */
static void test_candidates(void) {
  static const int64_t ms[] = {1, 3, 8, 17, 32, 64, 65, 200, 1024, 4096};
  static const int64_t shapes[][2] = {{57344, 8192}, {4096, 1024}, {128, 4096}, {20480, 4096}, {2048, 512}};
  int64_t bad = 0, lists = 0;
  for (int ai = 0; ai < (int)(sizeof recorded_archs / sizeof *recorded_archs); ai++) {
    const fp4_dense_arch a = arch_of(ai);
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
      for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
        for (int f = 0; f < 2; f++)
          for (int ac = 0; ac < 4; ac++) {
            const fp4_dense_shape s = {ms[mi], shapes[si][0], shapes[si][1], acts[ac], f};
            const char *names[64];
            const int n = fp4_dense_candidates(&s, &a, names, 64);
            const char *def = fp4_dense_default(&s, &a);
            char why[400];
            if (n < 1) continue;
            lists++;
            if (!def || strcmp(def, names[0])) bad++;
            for (int i = 0; i < n; i++)
              if (fp4_dense_check(fp4_dense_family_of(names[i]), &s, &a, names[i], why, sizeof why) != 1) {
                if (bad++ < 10) fprintf(stderr, "candidate %s refused: %s\n", names[i], why);
              }
          }
  }
  CHECK(lists > 100 && bad == 0, "%lld of %lld candidate lists wrong", (long long)bad, (long long)lists);
}

static void test_rules_and_workspace(void) {
  const fp4_dense_arch h200 = {9, 0, 132, 232448, 1, ""};
  fp4_dense_arch a100 = {8, 0, 108, 166912, 0, ""};
  char why[400];
  /* every config's name finds it, and its family is the prefix's */
  int n = 0;
  const fp4_dense_config *all = fp4_dense_configs_all(&n);
  CHECK(n == 49, "%d dense configs", n);
  for (int i = 0; i < n; i++) {
    CHECK(fp4_dense_config_find(all[i].name) == &all[i] && fp4_dense_family_of(all[i].name) == all[i].family,
          "config %s: lookup or family", all[i].name);
    /* gemm_small_m_kernels.cuh compiles the 32- and 64-row classic kernels for 4 and 8 warps only */
    CHECK(all[i].family != FP4_DENSE_SMALL_M || all[i].rows < 32 || all[i].warps >= 4,
          "config %s: %d rows on %d warps has no kernel", all[i].name, all[i].rows, all[i].warps);
  }
  /* unknown names are -1 with the list; rules name themselves */
  const fp4_dense_shape w4a16 = {300, 4096, 4096, FP4_CUDA_ACT_BF16, FP4_FORMAT_NVFP4};
  CHECK(fp4_dense_check(FP4_DENSE_LARGE_M_MMA, &w4a16, &h200, "large-m.1x1.s1", why, sizeof why) == -1 &&
            strstr(why, "large-m.128x128.s4") && strstr(why, "large-m.rd.*") && strstr(why, "large-m.wgra.*"),
        "unknown large-M name: %s", why);
  CHECK(fp4_dense_check(FP4_DENSE_SMALL_M, &w4a16, &h200, "small-m.nope", why, sizeof why) == -1 &&
            strstr(why, "small-m.w8"),
        "unknown small-M name: %s", why);
  CHECK(fp4_dense_check(FP4_DENSE_SMALL_M, &w4a16, &h200, "small-m.w4", why, sizeof why) == 0 && strstr(why, "M <= 64"),
        "small-M at M = 300: %s", why);
  CHECK(fp4_dense_check(FP4_DENSE_LARGE_M_WGRA, &w4a16, &a100, "large-m.wgra.128x128", why, sizeof why) == 0 &&
            strstr(why, "SM90 only"),
        "wgra on SM80: %s", why);
  a100.major = 9; /* SM 9.0 without the sm_90a code: the probe's reason */
  snprintf(a100.sm90a_why, sizeof a100.sm90a_why, "this fp4kit binary carries no sm_90a code");
  CHECK(fp4_dense_check(FP4_DENSE_LARGE_M_WGRA, &w4a16, &a100, "large-m.wgra.128x128", why, sizeof why) == 0 &&
            strstr(why, "no sm_90a code"),
        "wgra without sm_90a code: %s", why);
  const fp4_dense_shape w4a4 = {300, 4096, 4096, FP4_CUDA_ACT_FP4, FP4_FORMAT_NVFP4};
  CHECK(fp4_dense_check(FP4_DENSE_LARGE_M_RD, &w4a4, &h200, "large-m.rd.128x128", why, sizeof why) == 0 &&
            strstr(why, "large-m.rd.pro.128x128"),
        "W4A4 on a W4A16 register-decode tile: %s", why);
  const fp4_dense_shape f32 = {300, 4096, 4096, FP4_CUDA_ACT_F32, FP4_FORMAT_NVFP4};
  CHECK(fp4_dense_check(FP4_DENSE_LARGE_M_MMA, &f32, &h200, NULL, why, sizeof why) == 0 && strstr(why, "f32"),
        "f32 large-M: %s", why);
  /* workspace: the prologue's bf16 activations (rounded to 256), the split-K partials */
  const fp4_dense_shape pro = {7, 8192, 4096, FP4_CUDA_ACT_FP4, FP4_FORMAT_NVFP4};
  CHECK(fp4_dense_workspace(&pro, &h200, fp4_dense_config_find("small-m.pro.w4")) == fp4_cuda_bf16_a_bytes(7, 4096) &&
            fp4_cuda_bf16_a_bytes(7, 4096) == 7 * 4096 * 2 && fp4_cuda_bf16_a_bytes(3, 32) == 256,
        "small-M prologue workspace");
  CHECK(fp4_dense_workspace(&pro, &h200, fp4_dense_config_find("small-m.w4")) == 0, "in-loop W4A4 takes no workspace");
  /* stream-K: 2 output tiles of 128 K tiles on 132 SMs run on 132 CTAs, two partial tiles each */
  const fp4_dense_shape split = {128, 256, 8192, FP4_CUDA_ACT_BF16, FP4_FORMAT_NVFP4};
  size_t part = 0;
  const size_t sb = fp4_dense_wgra_sched_bytes(128, 256, 8192, 128, 132, &part);
  const int64_t ctas = fp4_dense_wgra_ctas(2, 128, 132, 128);
  CHECK(ctas == 132 && part == (size_t)2 * 132 * 128 * 128 * 4 && sb == part + 2 * sizeof(unsigned),
        "stream-K of 2 tiles x 128 K tiles on 132 SMs: %lld CTAs, %zu bytes", (long long)ctas, sb);
  CHECK(fp4_dense_workspace(&split, &h200, fp4_dense_config_find("large-m.wgra.128x128")) == sb,
        "register-A stream-K workspace");
  /* whole waves keep one tile per CTA, and so do grids with fewer K tiles than slots; a sparse last
   * wave takes stream-K, except on the 256-token tile */
  CHECK(fp4_dense_wgra_ctas(264, 128, 132, 128) == 264 && fp4_dense_wgra_ctas(3, 4, 132, 32) == 3,
        "two whole waves: %lld CTAs; 12 K tiles: %lld", (long long)fp4_dense_wgra_ctas(264, 128, 132, 128),
        (long long)fp4_dense_wgra_ctas(3, 4, 132, 32));
  CHECK(fp4_dense_wgra_ctas(160, 64, 132, 128) == 132 && fp4_dense_wgra_ctas(160, 64, 132, 256) == 160 &&
            fp4_dense_wgra_ctas(448, 128, 132, 32) == 264 && fp4_dense_wgra_ctas(1002, 128, 132, 32) == 1002,
        "160 tiles: %lld (128 tokens), %lld (256); 448 and 1002 32-token tiles: %lld, %lld",
        (long long)fp4_dense_wgra_ctas(160, 64, 132, 128), (long long)fp4_dense_wgra_ctas(160, 64, 132, 256),
        (long long)fp4_dense_wgra_ctas(448, 128, 132, 32), (long long)fp4_dense_wgra_ctas(1002, 128, 132, 32));
  const fp4_dense_shape big = {4096, 8192, 8192, FP4_CUDA_ACT_FP4, FP4_FORMAT_NVFP4};
  CHECK(fp4_dense_workspace(&big, &h200, fp4_dense_config_find("large-m.wgra.pro.128x256")) ==
            fp4_cuda_bf16_a_bytes(4096, 8192),
        "register-A prologue on whole waves: the bf16 activations only");
  CHECK(fp4_dense_workspace(&w4a16, &h200, fp4_dense_config_find("large-m.128x128.s4")) == 0, "mma.sync: none");
  /* the batched-decode tiles run two CTAs per SM: 64 tiles split in 4 over 264 slots, a partial each */
  const fp4_dense_shape narrow = {64, 8192, 8192, FP4_CUDA_ACT_BF16, FP4_FORMAT_NVFP4};
  CHECK(fp4_dense_wgra_ctas(64, 128, 132, 64) == 256, "64 tiles on 264 slots: %lld CTAs",
        (long long)fp4_dense_wgra_ctas(64, 128, 132, 64));
  CHECK(fp4_dense_workspace(&narrow, &h200, fp4_dense_config_find("large-m.wgra.128x64")) ==
            (size_t)256 * 64 * 128 * 4 + 64 * sizeof(unsigned),
        "64-token tile split workspace");
  /* the W4A16 tile names its W4A4 twin of the same width, and the other way round */
  const fp4_dense_shape w4a4_64 = {64, 8192, 8192, FP4_CUDA_ACT_FP4, FP4_FORMAT_NVFP4};
  CHECK(fp4_dense_check(FP4_DENSE_LARGE_M_WGRA, &w4a4_64, &h200, "large-m.wgra.128x64", why, sizeof why) == 0 &&
            strstr(why, "large-m.wgra.pro.128x64"),
        "W4A4 on the 64-token tile: %s", why);
  CHECK(fp4_dense_check(FP4_DENSE_LARGE_M_WGRA, &narrow, &h200, "large-m.wgra.pro.128x32", why, sizeof why) == 0 &&
            strstr(why, "large-m.wgra.128x32"),
        "W4A16 on the 32-token prologue tile: %s", why);
  /* batched decode on the H200: a register-A tile from 17 tokens on wide weights and on narrower
   * ones of 2^25 weights or more, from 33 on smaller narrow ones, the small-M kernels below, a
   * register-A tile on every grid above 256 tokens; the tile that fits the tokens without an edge
   * where one does (the estimate's fitted costs) */
  fp4_dense_shape b = narrow;
  static const struct { int64_t n, k, from_m; } starts[] = {{57344, 8192, 17}, {8192, 8192, 17}, {4096, 4096, 33}};
  for (size_t i = 0; i < sizeof starts / sizeof *starts; i++) {
    b.n = starts[i].n, b.k = starts[i].k;
    for (b.m = 1; b.m <= 300; b.m++) {
      const char *d = fp4_dense_default(&b, &h200);
      const int wgra = d && !strncmp(d, "large-m.wgra.", 13);
      CHECK(wgra == (b.m >= starts[i].from_m), "H200 %lldx%lld M = %lld: %s", (long long)b.n, (long long)b.k,
            (long long)b.m, d ? d : "-");
    }
  }
  /* the tile: batched decode on 57344 x 8192, and above 256 tokens the fastest register-A tile of
   * bench/results/h200/2026-12-02-above-256-tokens/ */
  static const struct { int64_t m, n, k; const char *want; } tiles[] = {
      {17, 57344, 8192, "large-m.wgra.128x32"},   {32, 57344, 8192, "large-m.wgra.128x32"},
      {48, 57344, 8192, "large-m.wgra.128x64"},   {64, 57344, 8192, "large-m.wgra.128x64"},
      {128, 57344, 8192, "large-m.wgra.128x128"}, {256, 57344, 8192, "large-m.wgra.128x256"},
      {384, 57344, 8192, "large-m.wgra.128x256"}, {512, 57344, 8192, "large-m.wgra.128x256"},
      {2048, 57344, 8192, "large-m.wgra.128x256"}, {384, 10240, 8192, "large-m.wgra.128x128"},
      {384, 20480, 4096, "large-m.wgra.128x128"}, {512, 20480, 4096, "large-m.wgra.128x256"},
      {512, 8192, 8192, "large-m.wgra.128x256"},  {512, 8192, 28672, "large-m.wgra.128x256"},
      /* the cluster K split (bench/results/h200/2026-12-02-cluster-k-split/): the narrow projections
       * of Llama-3.3-70B and Llama-3.1-8B at TP8; not on 256 x 4096 or 2048 x 4096, nor at K 2048 */
      {1, 1280, 8192, "small-m.w4.k4"},           {16, 1280, 8192, "small-m.w4.k4"},
      {8, 768, 4096, "small-m.w4.k4"},            {17, 1280, 8192, "small-m.w8"},
      {1, 256, 4096, "small-m.w8"},               {1, 2048, 4096, "small-m.w8"},
      {1, 1536, 2048, "small-m.w8"}};
  for (size_t i = 0; i < sizeof tiles / sizeof *tiles; i++) {
    b.m = tiles[i].m, b.n = tiles[i].n, b.k = tiles[i].k;
    const char *d = fp4_dense_default(&b, &h200);
    CHECK(d && !strcmp(d, tiles[i].want), "H200 %lldx%lld M = %lld: %s, expected %s", (long long)b.n, (long long)b.k,
          (long long)b.m, d ? d : "-", tiles[i].want);
  }
  /* no clusters below SM90: the A100 keeps the classic kernel, and refuses the split by name */
  const fp4_dense_arch sm80 = {8, 0, 108, 166912, 0, ""};
  b.m = 1, b.n = 1280, b.k = 8192;
  const char *d = fp4_dense_default(&b, &sm80);
  CHECK(d && !strstr(d, ".k"), "A100 1280x8192 M = 1: %s", d ? d : "-");
  CHECK(fp4_dense_check(FP4_DENSE_SMALL_M, &b, &sm80, "small-m.w4.k4", why, sizeof why) == 0 &&
            strstr(why, "SM90 or newer") && strstr(why, "SM80"),
        "A100 small-m.w4.k4: %s", why);
  b.k = 1024;
  CHECK(fp4_dense_check(FP4_DENSE_SMALL_M, &b, &h200, "small-m.w4.k4", why, sizeof why) == 0 && strstr(why, "K >= 2048"),
        "H200 small-m.w4.k4 at K = 1024: %s", why);
  b.act = FP4_CUDA_ACT_F32, b.k = 8192;
  CHECK(fp4_dense_check(FP4_DENSE_SMALL_M, &b, &h200, "small-m.w4.k4", why, sizeof why) == 0 && strstr(why, "f32"),
        "H200 small-m.w4.k4 on f32: %s", why);
  b.act = FP4_CUDA_ACT_BF16;
}

/* The parts of the register-A grids that are not one tile per CTA, walked as the kernel walks them
 * (gemm_large_m_wgra.cu: a CTA's range from fp4_dense_wgra_begin, cut at tile ends; its first part
 * to slot c, a later one to ctas + c): every tile's parts cover its K tiles once, in K order, from
 * the CTAs fp4_dense_wgra_cta_of names; the slots the tile's last CTA reads (fp4_dense_wgra_part_slot
 * for the first CTA, c after it) are the ones written; no slot is written twice; a split's parts
 * fit its workspace of `ctas` slots. */
static void test_wgra_parts(void) {
  enum { MAX_TILES = 24, MAX_KALL = 12, MAX_PARTS = MAX_TILES * MAX_KALL };
  int64_t checked = 0, bad = 0;
  for (int64_t tiles = 1; tiles <= MAX_TILES; tiles++)
    for (int64_t kall = 1; kall <= MAX_KALL; kall++)
      for (int64_t ctas = 1; ctas <= tiles * kall; ctas++) {
        if (ctas == tiles) continue; /* one tile per CTA: no parts */
        int64_t kb_of[MAX_PARTS], kts_of[MAX_PARTS], cta_of[MAX_PARTS], slot_of[MAX_PARTS], tile_of[MAX_PARTS];
        int used[2 * MAX_PARTS] = {0};
        int parts = 0, ok = 1;
        for (int64_t c = 0; c < ctas; c++) {
          const int64_t begin = fp4_dense_wgra_begin(tiles, kall, ctas, c);
          int64_t rem = fp4_dense_wgra_begin(tiles, kall, ctas, c + 1) - begin, tile = begin / kall;
          int64_t kb = begin - tile * kall;
          ok &= rem > 0;
          for (int first = 1; rem > 0; tile++, kb = 0, first = 0) {
            const int64_t kts = kall - kb < rem ? kall - kb : rem;
            tile_of[parts] = tile, kb_of[parts] = kb, kts_of[parts] = kts, cta_of[parts] = c;
            slot_of[parts] = (first ? 0 : ctas) + c;
            if (kts < kall) ok &= !used[slot_of[parts]]++; /* whole tiles are stored, not published */
            ok &= ctas % tiles || (slot_of[parts] < ctas && kts < kall); /* a split: one part per CTA */
            parts++;
            rem -= kts;
          }
        }
        for (int64_t t = 0; t < tiles; t++) {
          const int64_t c_first = fp4_dense_wgra_cta_of(tiles, kall, ctas, t * kall);
          const int64_t c_last = fp4_dense_wgra_cta_of(tiles, kall, ctas, t * kall + kall - 1);
          int64_t next = 0, c_want = c_first;
          for (int i = 0; i < parts; i++) {
            if (tile_of[i] != t) continue;
            const int64_t read = c_want == c_first ? fp4_dense_wgra_part_slot(tiles, kall, ctas, c_want, t) : c_want;
            ok &= kb_of[i] == next && cta_of[i] == c_want && (kts_of[i] == kall || slot_of[i] == read);
            next += kts_of[i], c_want++;
          }
          ok &= next == kall && c_want == c_last + 1;
        }
        checked++, bad += !ok;
        if (!ok && bad <= 3) fprintf(stderr, "wgra parts: tiles %lld kall %lld ctas %lld\n", (long long)tiles, (long long)kall, (long long)ctas);
      }
  CHECK(checked > 10000 && bad == 0, "register-A parts: %lld grids, %lld wrong", (long long)checked, (long long)bad);
}

int main(void) {
  test_wgra_parts();
  test_rules_and_workspace();
  test_candidates();
  test_recorded();
  return TEST_SUMMARY();
}
