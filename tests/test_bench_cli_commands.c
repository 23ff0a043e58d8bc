#define _POSIX_C_SOURCE 200809L
/* The options of every fp4kit command (getopt_long: --opt value and --opt=value, --help and -h,
 * refused options and values named with exit status 2 and nothing on stdout, decimal integers
 * within their range, lists within their length) and what check, probe, bench and tune say when the
 * CUDA device asked for cannot be used: one line naming the device and the runtime's reason, then
 * the host backends (check, probe) or nothing (bench, tune); a check that runs nothing exits 3; the
 * environment (FP4KIT_DEVICE, FP4KIT_LOG) is checked like an option; probe --json keeps a device
 * that could not be probed inside the JSON. Device 99 is unusable on every machine (no driver, no
 * GPU, a build without CUDA, or no such ordinal). No timing is asserted. */
#include <cjson/cJSON.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_testing.h"
#include "probe_devices.h"
#include "testing.h"

/* Exit status of `ENV fp4kit ARGS`; out and err receive its stdout and stderr (caller frees). */
static int fp4kit_env(const char *env, const char *args, char **out, char **err) {
  static int n;
  char name[32], errname[40];
  snprintf(name, sizeof name, "run%d", n++);
  int rc = cli_run(env, args, name);
  snprintf(errname, sizeof errname, "%s.err", name);
  *out = cli_slurp(name);
  *err = cli_slurp(errname);
  return rc;
}

static int fp4kit(const char *args, char **out, char **err) { return fp4kit_env("", args, out, err); }

/* Lines of s that contain needle. */
static int lines_with(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = s; s && (p = strstr(p, needle)); n++) {
    p = strchr(p, '\n');
    if (!p) break;
  }
  return n;
}

static void options(void) {
  static const char *const commands[] = {"check", "bench", "probe", "tune", "inspect", "quantize", "version"};
  char args[256];
  char *out, *err;
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
    for (int shortform = 0; shortform < 2; shortform++) {
      snprintf(args, sizeof args, "%s %s", commands[i], shortform ? "-h" : "--help");
      int rc = fp4kit(args, &out, &err);
      char want[64];
      snprintf(want, sizeof want, "usage: fp4kit %s", commands[i]);
      CHECK(rc == 0 && out && strstr(out, want), "fp4kit %s exits 0 (got %d) and prints '%s'", args, rc, want);
      CHECK(!strcmp(commands[i], "version") || (out && strstr(out, "Exit status: 0")), "fp4kit %s states the exit statuses",
            args);
      free(out);
      free(err);
    }
    snprintf(args, sizeof args, "%s --no-such-option", commands[i]);
    int rc = fp4kit(args, &out, &err);
    CHECK(rc == 2 && err && strstr(err, "'--no-such-option'"), "fp4kit %s: exit 2 naming the option (got %d): %s", args, rc,
          err ? err : "");
    free(out);
    free(err);
  }
  CHECK(fp4kit("--help", &out, &err) == 0 && out && strstr(out, "commands:"), "fp4kit --help lists the commands");
  free(out);
  free(err);
  CHECK(fp4kit("help", &out, &err) == 0 && out && strstr(out, "commands:"), "fp4kit help lists the commands");
  free(out);
  free(err);
  CHECK(fp4kit("--version", &out, &err) == 0 && out && !strncmp(out, "fp4kit ", 7), "fp4kit --version");
  free(out);
  free(err);
  CHECK(fp4kit("nosuch", &out, &err) == 2 && err && strstr(err, "unknown command 'nosuch'"), "an unknown command: exit 2");
  free(out);
  free(err);

  /* Options may follow operands (the command's scan permutes, whatever the top level's does). */
  int rc = fp4kit("inspect /nonexistent/model.safetensors --json", &out, &err);
  CHECK(rc == 3 && err && !strstr(err, "unexpected argument"), "inspect PATH --json takes --json as an option (rc %d): %s", rc,
        err ? err : "");
  free(out);
  free(err);

  /* --opt=value as well as --opt value. */
  rc = fp4kit("tune --shape=128x256 --tp=2 --list-shapes", &out, &err);
  CHECK(rc == 0 && out && strstr(out, "128 256"), "tune --shape=128x256 --list-shapes (rc %d): %s", rc, err ? err : "");
  free(out);
  free(err);
  rc = fp4kit("bench --shapes=128x256,64x512 --list-shapes", &out, &err);
  CHECK(rc == 0 && out && strstr(out, "128 256") && strstr(out, "64 512"), "bench --shapes=... --list-shapes (rc %d): %s", rc,
        err ? err : "");
  free(out);
  free(err);
  rc = fp4kit("probe --device=-1 --json", &out, &err);
  cJSON *probe = out ? cJSON_Parse(out) : NULL;
  CHECK(rc == 0 && probe && cJSON_GetNumberValue(cJSON_GetObjectItem(probe, "probed_device")) == -1,
        "probe --device=-1 --json is valid JSON for the host (rc %d)", rc);
  cJSON_Delete(probe);
  free(out);
  free(err);
  rc = fp4kit("check --backend=ref --seed=7 --device=-1", &out, &err);
  CHECK(rc == 0 && out && strstr(out, "seed 7") && lines_with(out, " pass ") > 0 && !lines_with(out, "FAIL"),
        "check --backend=ref --seed=7 --device=-1 passes (rc %d): %s", rc, err ? err : "");
  free(out);
  free(err);

  /* Missing values, values that are not numbers, stray arguments. */
  static const struct {
    const char *args, *says;
  } bad[] = {
      {"check --seed", "'--seed' needs a value"},
      {"check --seed twelve", "'twelve'"},
      {"check --device gpu0", "'gpu0'"},
      {"check --device -2", "'-2'"},
      {"check stray", "unexpected argument 'stray'"},
      {"probe --arch", "'--arch' needs a value"},
      {"probe --device 1x", "'1x'"},
      {"probe --json=yes", "'--json'"},
      {"probe stray", "unexpected argument 'stray'"},
      {"tune --shape 128x256 --runs 0", "--runs"},
      {"tune --shape 128x256 --tp two --list-shapes", "'two'"},
      {"tune --shape 12y3", "--shape '12y3'"},
      {"tune --shape 128x256,64x64", "--shape '128x256,64x64': give one NxK"},
      {"tune --shapes 128x256,0x64", "('0x64' is not NxK with positive N and K)"},
      {"bench --shapes 128x256,,64x64", "--shapes: '' is not NxK"},
      {"bench --shapes 128x+256", "'128x+256' is not NxK"},
      {"tune --shape 128x256 stray", "unexpected argument 'stray'"},
      {"tune --shape 128x256 --device", "'--device' needs a value"},
      {"bench --runs=10", "--runs needs an integer from 50 to 1000000, not '10'"},
      {"bench --runs 1000001", "--runs needs an integer from 50 to 1000000, not '1000001'"},
      {"bench --m 1,0", "'0' is not an integer from 1 to 16777216"},
      {"bench --model qwen --list-shapes", "'qwen' is ambiguous: 2 shape sets start with it: qwen3.5-397b-a17b qwen3-30b-a3b"},
      {"bench --html - --json - --shapes 128x256", "only one of --json, --csv and --html can write to stdout"},
      {"check --seed 99999999999999999999", "--seed needs an integer from 0 to 9223372036854775807"},
      {"check --device 0x1", "'0x1'"},
      {"check --device ' 1'", "' 1'"},
      {"check --backend nope", "no backend named 'nope'; registered: ref"},
      {"bench --moe --device abc", "--device needs an integer from 0 to 1024, not 'abc'"},
      {"bench --moe --device -1", "--device needs an integer from 0 to 1024, not '-1'"},
      {"bench --moe --runs 10abc", "--runs needs an integer from 10 to 1000000, not '10abc'"},
      {"bench --moe --runs 9", "--runs needs an integer from 10 to 1000000, not '9'"},
      {"bench --moe --m 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", "--m takes at most 16 values, not 17"},
      {"bench --moe --m 1,x", "'x' is not an integer from 1 to 65536"},
      {"bench --moe --budget 2s", "--budget needs a number of seconds > 0, not '2s'"},
      {"bench --moe --json - --csv -", "only one of --json and --csv can write to stdout"},
      {"bench --moe --nope", "unknown option '--nope'"},
      {"bench --m", "'--m' needs a value"},
      {"bench --shapes 128x256 stray", "unexpected argument 'stray'"},
      {"version stray", "unexpected argument 'stray'"},
      {"inspect /nonexistent --tp 5000", "--tp needs an integer from 1 to 4096, not '5000'"},
      {"inspect /nonexistent --ep ' 2'", "--ep needs an integer from 1 to 4096, not ' 2'"},
      {"inspect /nonexistent --tp", "option '--tp' needs a value"},
      {"inspect", "give PATH"},
      {"quantize /nonexistent out --format", "option '--format' needs a value"},
      {"quantize /nonexistent", "give OUT_DIR after IN_DIR '/nonexistent'"},
      {"quantize /nonexistent out --input-amax 1e-40", "--input-amax needs a number from"},
      {"quantize /nonexistent out --format mxfp4 --input-amax 5", "--input-amax is NVFP4 only"},
      {"bench --model llama-3.1-8b --model deepseek-r1 --list-shapes", "--model given twice ('llama-3.1-8b' and 'deepseek-r1')"},
      {"bench --shapes 64x64 --shapes 128x128 --list-shapes", "--shapes given twice"},
      {"bench --shapes 64x64 --json a.json --json b.json --list-shapes", "--json given twice ('a.json' and 'b.json')"},
      {"tune --shapes / --list-shapes", "cannot read /: Is a directory"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    rc = fp4kit(bad[i].args, &out, &err);
    CHECK(rc == 2 && err && strstr(err, bad[i].says), "fp4kit %s: exit 2 (got %d) saying %s; said: %s", bad[i].args, rc,
          bad[i].says, err ? err : "");
    CHECK(out && !out[0], "fp4kit %s prints nothing on stdout before its usage error: %s", bad[i].args, out ? out : "");
    free(out);
    free(err);
  }

  /* More values than a list takes: the limit is said. */
  char ms[512] = "bench --shapes 128x256 --m 1";
  for (int m = 2; m <= 65; m++) snprintf(ms + strlen(ms), sizeof ms - strlen(ms), ",%d", m);
  rc = fp4kit(ms, &out, &err);
  CHECK(rc == 2 && err && strstr(err, "--m takes at most 64 values, not 65"), "bench --m with 65 values names the limit (rc %d): %s",
        rc, err ? err : "");
  free(out);
  free(err);
  /* Decimal, whatever the leading zeros: 010 is device 10 and 08 is device 8 (not octal). */
  rc = fp4kit("check --device 010 --backend ref", &out, &err);
  CHECK(rc == 3 && lines_with(err, "no usable CUDA device 10 (") == 1, "check --device 010 is device 10 (rc %d): %s", rc,
        err ? err : "");
  free(out);
  free(err);
  rc = fp4kit("probe --device 08 --json", &out, &err);
  cJSON *j = out ? cJSON_Parse(out) : NULL;
  CHECK(rc == 0 && j && cJSON_GetNumberValue(cJSON_GetObjectItem(j, "device_asked")) == 8, "probe --device 08 is device 8 (rc %d): %s",
        rc, err ? err : "");
  cJSON_Delete(j);
  free(out);
  free(err);
  /* The help of bench --moe states the limits of --runs and --m. */
  rc = fp4kit("bench --moe --help", &out, &err);
  CHECK(rc == 0 && out && strstr(out, "--runs (10 to 1000000") && strstr(out, "at most 16 values"),
        "bench --moe --help states the --runs and --m limits:\n%s", out ? out : "");
  free(out);
  free(err);
}

/* FP4KIT_DEVICE is checked where a command reads it (no --device given): a usage error naming the
 * variable and what it takes; FP4KIT_LOG with an unknown level is named once and logs nothing. */
static void environment(void) {
  static const char *const cases[][2] = {
      {"FP4KIT_DEVICE=cpu", "bench --backend cpu --shapes 128x256 --m 1 --op w4a16 --runs 50"},
      {"FP4KIT_DEVICE=-5", "check"},
      {"FP4KIT_DEVICE=99999999999", "probe --json"},
      {"FP4KIT_DEVICE=0x1", "check --backend ref"},
      {"FP4KIT_DEVICE=cpu", "bench --moe"},
  };
  char *out, *err;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int rc = fp4kit_env(cases[i][0], cases[i][1], &out, &err);
    char want[64];
    snprintf(want, sizeof want, "FP4KIT_DEVICE='%s' is not a device", cases[i][0] + strlen("FP4KIT_DEVICE="));
    CHECK(rc == 2 && err && strstr(err, want) && strstr(err, "CUDA ordinal from 0 to 1024, or -1 for the host only") &&
              cli_count(err, "\n") == 1 && out && !out[0],
          "%s fp4kit %s: exit 2 (got %d) with one line naming the variable and its values:\n%s", cases[i][0], cases[i][1], rc,
          err ? err : "");
    free(out);
    free(err);
  }
  /* --device wins: the variable is not read. */
  int rc = fp4kit_env("FP4KIT_DEVICE=cpu", "check --backend ref --device -1", &out, &err);
  CHECK(rc == 0 && err && !strstr(err, "FP4KIT_DEVICE"), "check --device -1 does not read FP4KIT_DEVICE (rc %d): %s", rc,
        err ? err : "");
  free(out);
  free(err);
  rc = fp4kit_env("FP4KIT_DEVICE=-1", "check --backend ref", &out, &err);
  CHECK(rc == 0 && out && strstr(out, "device -1"), "FP4KIT_DEVICE=-1 checks the host (rc %d)", rc);
  free(out);
  free(err);

  /* A library failure (a missing checkpoint) logs through FP4KIT_LOG. */
  rc = fp4kit_env("FP4KIT_LOG=warning", "inspect /nonexistent/model.safetensors", &out, &err);
  CHECK(rc == 3 && cli_count(err, "FP4KIT_LOG='warning' is not a log level: use error, warn, info or debug") == 1 &&
            !strstr(err, "fp4kit debug:"),
        "an unknown FP4KIT_LOG is named once with the levels, and nothing is logged (rc %d):\n%s", rc, err ? err : "");
  free(out);
  free(err);
  rc = fp4kit_env("FP4KIT_LOG=debug", "inspect /nonexistent/model.safetensors", &out, &err);
  CHECK(rc == 3 && err && strstr(err, "fp4kit debug:") && !strstr(err, "FP4KIT_LOG"), "FP4KIT_LOG=debug logs (rc %d):\n%s", rc,
        err ? err : "");
  free(out);
  free(err);
}

/* probe: a device that could not be probed is a record with its error in the JSON, and a line in the
 * text, never text inside the JSON. */
static void probe_failed_device(void) {
  cJSON *devs = cJSON_CreateArray();
  cJSON_AddItemToArray(devs, probe_device_json(2, NULL, "cudaGetDeviceProperties: unknown error"));
  char *text = cJSON_Print(devs);
  cJSON *back = text ? cJSON_Parse(text) : NULL;
  cJSON *d = cJSON_GetArrayItem(back, 0);
  CHECK(back && cJSON_GetNumberValue(cJSON_GetObjectItem(d, "device")) == 2 &&
            !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(d, "error")) ? cJSON_GetStringValue(cJSON_GetObjectItem(d, "error")) : "",
                    "cudaGetDeviceProperties: unknown error") &&
            !cJSON_GetObjectItem(d, "name"),
        "a device that failed to probe is {device, error} in valid JSON: %s", text ? text : "(none)");
  cJSON_Delete(back);
  free(text);
  cJSON_Delete(devs);
  char path[128];
  snprintf(path, sizeof path, "%s/probe_text", dir);
  FILE *f = fopen(path, "w");
  if (f) {
    probe_device_print(f, 2, NULL, "cudaGetDeviceProperties: unknown error", 0);
    fclose(f);
  }
  char *line = cli_slurp("probe_text");
  CHECK(line && !strcmp(line, "  2: could not be probed: cudaGetDeviceProperties: unknown error\n"), "the text says it: %s",
        line ? line : "");
  free(line);
}

static void unusable_device(void) {
  char *out, *err;
  /* check: one line on stderr, the host backends checked (no FAIL), exit 3 (the device was asked for). */
  int rc = fp4kit("check --device 99", &out, &err);
  CHECK(rc == 3, "check --device 99 exits 3 (got %d)", rc);
  CHECK(lines_with(err, "no usable CUDA device 99 (") == 1 && cli_count(err, "\n") == 1,
        "check names the unusable device in one line, with the reason:\n%s", err ? err : "");
  CHECK(out && !lines_with(out, "FAIL") && lines_with(out, "ref ") > 1 && !lines_with(out, "ref              quantize nvfp4 128x4 f32       skip"),
        "check --device 99 runs the host backends' cases without FAIL lines:\n%s", out ? out : "");
  CHECK(out && strstr(out, "0 failed") && strstr(out, "device 99 was not checked"), "the summary says the device was not checked");
  free(out);
  free(err);
  rc = fp4kit("check --device 99 --backend cpu", &out, &err);
  CHECK(rc == 3 && out && lines_with(out, "cpu ") > 1 && !lines_with(out, "FAIL"), "check --device 99 --backend cpu (rc %d)", rc);
  free(out);
  free(err);
  /* A backend that does not run on the host, on the host: nothing ran, which is exit 3 with why. */
  rc = fp4kit("check --device -1 --backend cublaslt", &out, &err);
  CHECK(rc == 3 && out && strstr(out, "0 passed, 0 failed, 1 skipped") && strstr(out, "nothing could run: cublaslt cannot run here: "),
        "check --device -1 --backend cublaslt exits 3 saying why (rc %d):\n%s", rc, out ? out : "");
  free(out);
  free(err);
  /* A device backend alone: nothing can run, and the output says so. */
  rc = fp4kit("check --device 99 --backend cublaslt", &out, &err);
  CHECK(rc == 3 && out && strstr(out, "nothing could run") && !lines_with(out, "FAIL") && lines_with(out, " skip ") == 1,
        "check --device 99 --backend cublaslt: one skip line and 'nothing could run' (rc %d):\n%s", rc, out ? out : "");
  free(out);
  free(err);

  /* probe: the same line, then the backends on the host; JSON carries the reason. */
  rc = fp4kit("probe --device 99", &out, &err);
  CHECK(rc == 0 && lines_with(err, "no usable CUDA device 99 (") == 1 && out && strstr(out, "backends on the host"),
        "probe --device 99 names the device once and probes the host (rc %d):\n%s", rc, err ? err : "");
  free(out);
  free(err);
  rc = fp4kit("probe --device 99 --json", &out, &err);
  cJSON *j = out ? cJSON_Parse(out) : NULL;
  CHECK(rc == 0 && j && cJSON_GetNumberValue(cJSON_GetObjectItem(j, "device_asked")) == 99 &&
            cJSON_IsString(cJSON_GetObjectItem(j, "device_error")) &&
            cJSON_GetNumberValue(cJSON_GetObjectItem(j, "probed_device")) == -1,
        "probe --device 99 --json has device_asked, device_error and probed_device -1 (rc %d)", rc);
  cJSON_Delete(j);
  free(out);
  free(err);

  /* bench and tune: nothing timed, nothing written, one line. */
  char args[512];
  snprintf(args, sizeof args, "bench --device 99 --backend ref --shapes 128x256 --m 1 --op w4a16 --runs 50 --json %s/d.json", dir);
  rc = fp4kit(args, &out, &err);
  char *json = cli_slurp("d.json");
  CHECK(rc == 3 && cli_count(err, "\n") == 1 && lines_with(err, "no usable CUDA device 99 (") == 1 &&
            strstr(err, "nothing was timed") && !json,
        "bench --device 99: one line, nothing timed (rc %d):\n%s", rc, err ? err : "");
  free(json);
  free(out);
  free(err);
  snprintf(args, sizeof args, "tune --device 99 --shape 128x256 --m 1 --op w4a16 --runs 1 --cache %s/t.json", dir);
  rc = fp4kit(args, &out, &err);
  char *cache = cli_slurp("t.json");
  CHECK(rc == 3 && cli_count(err, "\n") == 1 && lines_with(err, "no usable CUDA device 99 (") == 1 &&
            strstr(err, "nothing was tuned") && !cache,
        "tune --device 99: one line, nothing tuned or written (rc %d):\n%s", rc, err ? err : "");
  free(cache);
  free(out);
  free(err);
  /* bench --moe: the same line; an unusable device is a runtime error (3), not a failed point. */
  rc = fp4kit("bench --moe --device 99 --m 1", &out, &err);
  CHECK(rc == 3 && cli_count(err, "\n") == 1 && lines_with(err, "no usable CUDA device 99 (") == 1 && strstr(err, "nothing was timed"),
        "bench --moe --device 99: one line, exit 3 (rc %d):\n%s", rc, err ? err : "");
  free(out);
  free(err);
}

/* Results that cannot be delivered are failures: stdout that cannot be written (exit 3, said on
 * stderr), a shape file that holds no shape (a usage error naming it), and a report path checked for
 * writing before an aborted run leaves the file system as it was, a dangling link included. */
static void undelivered(void) {
  char *out, *err, args[512];
  static const char *const printers[] = {"version", "tune --shape 64x128 --list-shapes", "probe --device -1 --json"};
  for (size_t i = 0; access("/dev/full", W_OK) == 0 && i < sizeof printers / sizeof *printers; i++) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' %s >/dev/full 2>'%s/full.err'", FP4KIT_CLI, printers[i], dir);
    int s = system(cmd), rc = WIFEXITED(s) ? WEXITSTATUS(s) : -1;
    err = cli_slurp("full.err");
    CHECK(rc == 3 && err && strstr(err, "writing to standard output failed"), "fp4kit %s >/dev/full: exit 3 saying so "
          "(got %d): %s", printers[i], rc, err ? err : "");
    free(err);
  }
  snprintf(args, sizeof args, "%s/empty.shapes", dir);
  FILE *f = fopen(args, "w");
  if (f) {
    fputs("# no shape here\n\n", f);
    fclose(f);
  }
  snprintf(args, sizeof args, "tune --shapes %s/empty.shapes --list-shapes", dir);
  int rc = fp4kit(args, &out, &err);
  CHECK(rc == 2 && err && strstr(err, "empty.shapes holds no shape") && out && !out[0],
        "a shape file of comments is a usage error naming it (rc %d): %s", rc, err ? err : "");
  free(out);
  free(err);
  char link[128], target[128];
  snprintf(link, sizeof link, "%s/link.json", dir);
  snprintf(target, sizeof target, "%s/target.json", dir);
  CHECK(symlink(target, link) == 0, "symlink %s", link);
  snprintf(args, sizeof args, "bench --device 99 --backend ref --shapes 128x256 --m 1 --op w4a16 --runs 50 --json %s", link);
  rc = fp4kit(args, &out, &err);
  struct stat sb;
  CHECK(rc == 3 && lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode) && access(target, F_OK) != 0,
        "bench --json DANGLING_LINK that times nothing keeps the link and creates nothing (rc %d)", rc);
  free(out);
  free(err);
}

int main(void) {
  cli_require();
  snprintf(dir, sizeof dir, "/tmp/fp4kit_cmds_XXXXXX");
  if (!mkdtemp(dir)) {
    printf("skip: cannot create a temporary directory\n");
    return 77;
  }
  options();
  environment();
  probe_failed_device();
  unusable_device();
  undelivered();
  char cleanup[128];
  snprintf(cleanup, sizeof cleanup, "rm -rf '%s'", dir);
  if (!test_failed && system(cleanup) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (test_failed) fprintf(stderr, "files kept in %s\n", dir);
  return TEST_SUMMARY();
}
