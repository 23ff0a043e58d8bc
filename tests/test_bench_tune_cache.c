#define _POSIX_C_SOURCE 200809L
/* `fp4kit tune` and its cache file, end to end on the host: 8 tune processes on distinct shapes
 * into one cache keep all 8 entries; an invalid entry in the cache costs only itself (the valid
 * ones and the new one are written back, never as null); a cache path that cannot be written fails
 * before any tuning, saying which path, and one naming a file that is not a cache is refused (exit
 * 2) and left whole; M values that share a bucket are tuned once; an M, N or K out of range is a
 * usage error found before the cache is written (as is an FP4KIT_DEVICE that is not a device, read
 * when no --device is given); repeated --model options merge their shape sets, each sharded by its
 * own --tp. No timing is asserted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fp4kit.h"
#include "testing.h"

#ifndef FP4KIT_CLI
int main(void) {
  printf("skip: the fp4kit command is not built (FP4KIT_BUILD_TOOLS=OFF)\n");
  return 77;
}
#else

#include "cli_testing.h"

static int tune(const char *cache, const char *args, const char *name) {
  char env[300], all[600];
  snprintf(env, sizeof env, "FP4KIT_TUNING_CACHE='%s'", cache);
  snprintf(all, sizeof all, "tune --device -1 --op w4a16 --m 1 --runs 1 %s", args);
  return cli_run(env, all, name);
}

static int count_entries(const char *cache_path, int *count) {
  fp4_tuning_cache *c = NULL;
  fp4_tuning_cache_create(NULL, &c);
  fp4_status st = fp4_tuning_cache_load(c, cache_path);
  *count = fp4_tuning_cache_count(c);
  fp4_tuning_cache_destroy(c);
  return st;
}

/* Writes text to DIR/name; path receives the file's path. */
static void write_in_dir(const char *name, const char *text, char *path, size_t path_size) {
  snprintf(path, path_size, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

static void eight_tune_processes(void) {
  char cache[128];
  snprintf(cache, sizeof cache, "%s/shared.json", dir);
  pid_t pids[8];
  for (int i = 0; i < 8; i++) {
    if ((pids[i] = fork()) == 0) {
      char args[64], name[32];
      snprintf(args, sizeof args, "--shape %dx128", 64 * (i + 1));
      snprintf(name, sizeof name, "tune%d", i);
      _exit(tune(cache, args, name));
    }
  }
  for (int i = 0; i < 8; i++) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    char name[32];
    snprintf(name, sizeof name, "tune%d.err", i);
    char *err = cli_slurp(name);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "tune %d exit %d:\n%s", i, WEXITSTATUS(status), err ? err : "");
    free(err);
  }
  int n = 0;
  CHECK(count_entries(cache, &n) == FP4_OK && n == 8, "%d of 8 entries survived 8 concurrent tune runs (%s)", n,
        fp4_last_error());
}

static void invalid_entry_costs_only_itself(void) {
  char cache[128];
  snprintf(cache, sizeof cache, "%s/three.json", dir);
  CHECK(tune(cache, "--shapes 64x128,128x128,192x128", "three") == 0, "tune three shapes");
  char *text = cli_slurp("three.json");
  char *hit = text ? strstr(text, "\"median_us\":") : NULL;
  CHECK(hit != NULL, "a saved time");
  if (!hit) {
    free(text);
    return;
  }
  /* the first entry's time becomes 1e999 (infinite when read) */
  char *end = strpbrk(hit + 12, ",\n}");
  FILE *f = fopen(cache, "wb");
  fwrite(text, 1, (size_t)(hit - text), f);
  fputs("\"median_us\": 1e999", f);
  fputs(end, f);
  fclose(f);
  free(text);
  int rc = tune(cache, "--shape 256x128", "fourth");
  char *err = cli_slurp("fourth.err");
  CHECK(rc == 0, "tune exit %d:\n%s", rc, err ? err : "");
  CHECK(err && strstr(err, "1 invalid entry skipped") && strstr(err, "median_us"), "the skipped entry is named:\n%s",
        err ? err : "");
  free(err);
  int n = 0;
  CHECK(count_entries(cache, &n) == FP4_OK && n == 3, "2 valid + 1 new entries, got %d (%s)", n, fp4_last_error());
  text = cli_slurp("three.json");
  CHECK(text && !strstr(text, "null") && !strstr(text, "inf"), "no non-finite number is written:\n%s", text ? text : "");
  free(text);
}

static void unwritable_cache_fails_first(void) {
  char file[128], cache[200];
  write_in_dir("plain-file", "x", file, sizeof file);
  snprintf(cache, sizeof cache, "%s/sub/tuning.json", file);
  /* many keys: were they tuned first, the progress lines would show it */
  int rc = tune(cache, "--shapes 64x128,128x128,192x128,256x128 --m 1,2,4,8", "unwritable");
  char *out = cli_slurp("unwritable"), *err = cli_slurp("unwritable.err");
  CHECK(rc == 3, "exit %d (expected 3):\n%s", rc, err ? err : "");
  CHECK(err && strstr(err, "cannot write the tuning cache") && strstr(err, cache) && strstr(err, "nothing was tuned"),
        "the message names the path:\n%s", err ? err : "");
  CHECK(err && cli_count(err, "fp4kit tune: [") == 0, "no key was tuned:\n%s", err ? err : "");
  free(out);
  free(err);
  /* a read-only folder (root writes anyway, so only checked as another user) */
  if (geteuid() != 0) {
    char ro[128];
    snprintf(ro, sizeof ro, "%s/readonly", dir);
    mkdir(ro, 0500);
    snprintf(cache, sizeof cache, "%s/tuning.json", ro);
    rc = tune(cache, "--shapes 64x128,128x128 --m 1,2", "readonly");
    err = cli_slurp("readonly.err");
    CHECK(rc == 3 && err && strstr(err, "nothing was tuned") && !cli_count(err, "fp4kit tune: ["),
          "read-only folder: exit %d:\n%s", rc, err ? err : "");
    free(err);
    chmod(ro, 0700);
  } else {
    printf("note: running as root; the read-only folder case did not run\n");
  }
}

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

static void m_values_sharing_a_bucket(void) {
  char cache[128];
  snprintf(cache, sizeof cache, "%s/bucket.json", dir);
  int rc = tune(cache, "--shape 128x256 --m 100,128,1", "bucket");
  char *out = cli_slurp("bucket"), *err = cli_slurp("bucket.err");
  CHECK(rc == 0, "exit %d:\n%s", rc, err ? err : "");
  CHECK(cli_count(err, "fp4kit tune: [") == 2 && cli_count(err, "M=128 N=128") == 1,
        "M buckets 128 and 1 tuned once each:\n%s", err ? err : "");
  CHECK(err && strstr(err, "M=128 shares M bucket 128 with M=100"), "the shared bucket is said:\n%s", err ? err : "");
  CHECK(cli_count(out, "\nw4a16 ") == 2 && out && strstr(out, "2 M buckets") && strstr(out, "wrote 2 entries"),
        "one table row per bucket:\n%s", out ? out : "");
  free(out);
  free(err);
}

static void non_cache_file_is_kept(void) {
  static const char notes[] = "notes that --cache names by mistake\n";
  char path[128];
  write_in_dir("notes.txt", notes, path, sizeof path);
  int rc = tune(path, "--shape 128x256", "notes");
  char *err = cli_slurp("notes.err"), *text = cli_slurp("notes.txt");
  CHECK(rc == 2, "exit %d (expected 2):\n%s", rc, err ? err : "");
  CHECK(err && strstr(err, "is not an fp4kit tuning cache") && strstr(err, path) && strstr(err, "nothing was tuned") &&
            !cli_count(err, "fp4kit tune: ["),
        "the refusal names the file, nothing tuned:\n%s", err ? err : "");
  CHECK(text && !strcmp(text, notes), "the file is left whole: '%s'", text ? text : "(gone)");
  free(err);
  free(text);
}

/* Values that fp4_tune would refuse: exit 2, nothing tuned, the cache not created. */
static void out_of_range_values_are_usage_errors(void) {
  char shapes[128], big[300], wide[300];
  write_in_dir("huge-n.txt", "99999999999999999999 256 huge\n", shapes, sizeof shapes);
  snprintf(big, sizeof big, "--shapes %s", shapes);
  write_in_dir("wide-n.txt", "2147483649 256 wide\n", shapes, sizeof shapes);
  snprintf(wide, sizeof wide, "--shapes %s", shapes);
  const struct {
    const char *args, *said;
  } cases[] = {
      {"--shape 128x256 --m 99999999999999999999", "'99999999999999999999' is not an integer from 1 to 9223372036854775807"},
      {"--shape 128x256 --m 2147483649", "M 2147483649: m (2147483649) is outside [1, 2^31]"},
      {"--shape 128x256 --m 4,-8", "'-8'"},
      {"--shape 128x256 --m 1,,2", "'' is not an integer"},
      {"--shape 128x100", "k (100) is not a positive multiple of the nvfp4 block size 16"},
      {"--shape 128x272 --format nvfp4,mxfp4", "k (272) is not a positive multiple of the mxfp4 block size 32"},
      {big, "huge-n.txt:1: N needs an integer from 1 to 9223372036854775807, not '99999999999999999999'"},
      {wide, "shape wide (N 2147483649, K 256), w4a16 nvfp4, M 1: n (2147483649) is outside [1, 2^31]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char cache[128];
    snprintf(cache, sizeof cache, "%s/range%zu.json", dir, i);
    int rc = tune(cache, cases[i].args, "range");
    char *err = cli_slurp("range.err");
    CHECK(rc == 2 && err && strstr(err, cases[i].said) && !cli_count(err, "fp4kit tune: ["),
          "%s: exit %d (expected 2, saying %s):\n%s", cases[i].args, rc, cases[i].said, err ? err : "");
    CHECK(!file_exists(cache), "%s: the cache is not written", cases[i].args);
    free(err);
  }
}

/* FP4KIT_DEVICE, read when no --device is given, that is not a device: a usage error naming the
 * command, found before the cache is written; with --device it is not read. */
static void device_from_the_environment(void) {
  char cache[128], env[300];
  snprintf(cache, sizeof cache, "%s/env-device.json", dir);
  snprintf(env, sizeof env, "FP4KIT_DEVICE=cpu FP4KIT_TUNING_CACHE='%s'", cache);
  int rc = cli_run(env, "tune --shape 128x256 --op w4a16 --m 1 --runs 1", "envdev");
  char *err = cli_slurp("envdev.err");
  CHECK(rc == 2 && err && strstr(err, "fp4kit tune: FP4KIT_DEVICE='cpu' is not a device") &&
            !cli_count(err, "fp4kit tune: ["),
        "FP4KIT_DEVICE=cpu: exit %d (expected 2):\n%s", rc, err ? err : "");
  CHECK(!file_exists(cache), "FP4KIT_DEVICE=cpu: the cache is not written");
  free(err);
  rc = cli_run(env, "tune --device -1 --shape 128x256 --op w4a16 --m 1 --runs 1", "envdev");
  err = cli_slurp("envdev.err");
  CHECK(rc == 0 && err && !strstr(err, "FP4KIT_DEVICE"), "--device -1 does not read FP4KIT_DEVICE (exit %d):\n%s", rc,
        err ? err : "");
  free(err);
}

static void repeated_models_merge(void) {
  static const struct {
    const char *args, *expect[2];
  } cases[] = {
      /* each --model with the --tp after it; llama-3.1-8b has none: 1 */
      {"--model llama-3.3-70b --tp 2 --model llama-3.1-8b",
       {"5120 8192 llama-3.3-70b self_attn.qkv_proj", "6144 4096 llama-3.1-8b self_attn.qkv_proj"}},
      /* a --tp before any --model: every --model without its own */
      {"--tp 2 --model llama-3.3-70b --model llama-3.1-8b --tp 4",
       {"5120 8192 llama-3.3-70b self_attn.qkv_proj", "1536 4096 llama-3.1-8b self_attn.qkv_proj"}},
      {"--model llama-3.3-70b --model qwen3.5-397b",
       {"10240 8192 llama-3.3-70b self_attn.qkv_proj", "17408 4096 qwen3.5-397b-a17b self_attn.qkv_proj"}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char args[200];
    snprintf(args, sizeof args, "tune %s --list-shapes", cases[i].args);
    int rc = cli_run("", args, "models");
    char *out = cli_slurp("models"), *err = cli_slurp("models.err");
    CHECK(rc == 0, "%s: exit %d:\n%s", args, rc, err ? err : "");
    for (int j = 0; j < 2; j++)
      CHECK(out && strstr(out, cases[i].expect[j]), "%s: '%s' listed:\n%s", args, cases[i].expect[j], out ? out : "");
    free(out);
    free(err);
  }
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/fp4kit_tune_cache_XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  eight_tune_processes();
  invalid_entry_costs_only_itself();
  unwritable_cache_fails_first();
  m_values_sharing_a_bucket();
  non_cache_file_is_kept();
  out_of_range_values_are_usage_errors();
  device_from_the_environment();
  repeated_models_merge();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return TEST_SUMMARY();
}
#endif
