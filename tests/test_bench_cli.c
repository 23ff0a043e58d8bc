#define _POSIX_C_SOURCE 200809L
/* `fp4kit bench` end to end on the host with the reference backend: option errors give exit status
 * 2, a tiny run writes valid JSON (checked by a small parser), CSV with one row per point and a
 * self-contained HTML page with one chart point per GEMM; report paths that cannot be written fail
 * before any timing, and one that fails part-way leaves the file already there whole; records name
 * the commit and write counts as integers. No timing is asserted. */
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_testing.h"
#include "testing.h"

/* `ENV fp4kit bench ARGS`, output to DIR/OUT_NAME. */
static int run_env(const char *env, const char *args, const char *out_name) {
  char a[1536];
  snprintf(a, sizeof a, "bench %s", args);
  return cli_run(env, a, out_name);
}

static int run(const char *args, const char *out_name) { return run_env("", args, out_name); }

/* The value text of "key": in a JSON record ("" when absent). */
static const char *value_of(const char *json, const char *key, char *buf, size_t size) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = json ? strstr(json, pat) : NULL;
  buf[0] = '\0';
  if (p) snprintf(buf, size, "%.*s", (int)strcspn(p + strlen(pat), ",}"), p + strlen(pat));
  return buf;
}

/* Report paths that cannot be written fail before anything is timed, naming the path; a report
 * file already there is left as it was by the check. */
static void unwritable_outputs(void) {
  char args[1024];
  const char *base = "--device -1 --backend ref --shapes 128x256 --m 1 --op w4a16 --runs 50 --warmup 0 --no-peers";
  snprintf(args, sizeof args, "%s --csv %s/keep.csv --json %s/no/such/dir/out.json", base, dir, dir);
  char path[128];
  snprintf(path, sizeof path, "%s/keep.csv", dir);
  FILE *f = fopen(path, "w");
  if (f) {
    fputs("old contents\n", f);
    fclose(f);
  }
  int rc = run(args, "unwritable");
  char *err = cli_slurp("unwritable.err"), *kept = cli_slurp("keep.csv");
  char want[160];
  snprintf(want, sizeof want, "'%s/no/such/dir/out.json'", dir);
  CHECK(rc == 3 && err && strstr(err, want) && strstr(err, "--json"), "an unwritable --json fails naming it (rc %d): %s", rc,
        err ? err : "");
  CHECK(err && !strstr(err, "[1/") && !strstr(err, "peers"), "nothing was timed before the failure: %s", err ? err : "");
  CHECK(kept && !strcmp(kept, "old contents\n"), "the --csv file already there is untouched");
  free(err);
  free(kept);
  snprintf(args, sizeof args, "%s --html %s", base, dir);
  rc = run(args, "html_dir");
  err = cli_slurp("html_dir.err");
  snprintf(want, sizeof want, "--html file '%s'", dir);
  CHECK(rc == 3 && err && strstr(err, want) && !strstr(err, "[1/"), "a directory as --html fails first (rc %d): %s", rc,
        err ? err : "");
  free(err);
  snprintf(args, sizeof args, "%s --csv %s/fresh.csv --html %s/fresh.html --json %s/no/x.json", base, dir, dir, dir);
  run(args, "fresh");
  char *fresh = cli_slurp("fresh.csv"), *fresh_html = cli_slurp("fresh.html");
  CHECK(!fresh && !fresh_html, "the check leaves no empty report file behind");
  free(fresh);
  free(fresh_html);
}

static void put(const char *name, const char *text, mode_t mode) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
  chmod(path, mode);
}

static mode_t mode_of(const char *name) {
  char path[128];
  struct stat sb;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return stat(path, &sb) == 0 ? sb.st_mode & 07777 : (mode_t)-1;
}

static int links_to(const char *name, const char *target) {
  char path[128], to[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  const ssize_t n = readlink(path, to, sizeof to - 1);
  return n >= 0 && (to[n] = '\0', !strcmp(to, target));
}

/* Names in the test's directory that hold "tmp": what a report left beside its file. */
static int temporaries(void) {
  int n = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, "tmp") != NULL;
  if (d) closedir(d);
  return n;
}

/* Reports are written whole or not at all: one that fails part-way (here the file size limit, which
 * binds root too, stops the page) leaves the file already there as it was and nothing beside it; one
 * that succeeds replaces its file (a hard link to the old file keeps the old text), keeping that
 * file's permissions, and through a link replaces the file the link leads to, the link staying, even
 * where that file is new (0666 less the umask). */
static void reports_whole(void) {
  const char *base = "--device -1 --backend ref --shapes 128x256 --m 1 --op w4a16 --runs 50 --warmup 0 --no-peers";
  char args[1024], want[192];
  put("kept.html", "old contents\n", 0644);
  snprintf(args, sizeof args, "%s --html %s/kept.html", base, dir);
  struct rlimit usual, limit;
  getrlimit(RLIMIT_FSIZE, &usual);
  limit = usual;
  limit.rlim_cur = 2048; /* the page is over 3 KB; the table and the progress lines are under 1 KB */
  void (*was)(int) = signal(SIGXFSZ, SIG_IGN); /* a write past the limit then fails instead of ending the command */
  setrlimit(RLIMIT_FSIZE, &limit);
  int rc = run(args, "limited");
  setrlimit(RLIMIT_FSIZE, &usual);
  signal(SIGXFSZ, was);
  char *err = cli_slurp("limited.err"), *kept = cli_slurp("kept.html");
  snprintf(want, sizeof want, "writing the --html output '%s/kept.html' failed: ", dir);
  CHECK(rc == 3 && err && strstr(err, want) && strstr(err, "; the file there is left as it was"),
        "a page cut short fails saying so (rc %d): %s", rc, err ? err : "");
  CHECK(kept && !strcmp(kept, "old contents\n"), "the file already there is left whole: '%.40s'", kept ? kept : "");
  CHECK(temporaries() == 0, "no temporary file is left beside it");
  free(err);
  free(kept);

  char path[128], other[128];
  put("held.csv", "old contents\n", 0604);
  snprintf(path, sizeof path, "%s/held.csv", dir);
  snprintf(other, sizeof other, "%s/held.old", dir);
  CHECK(link(path, other) == 0, "link %s", other);
  put("page.html", "old contents\n", 0600);
  snprintf(path, sizeof path, "%s/via.html", dir);
  CHECK(symlink("page.html", path) == 0, "symlink %s", path);
  snprintf(path, sizeof path, "%s/new.json", dir);
  CHECK(symlink("made.json", path) == 0, "symlink %s", path);
  snprintf(args, sizeof args, "%s --csv %s/held.csv --html %s/via.html --json %s/new.json", base, dir, dir, dir);
  const mode_t mask = umask(027);
  rc = run(args, "replaced");
  umask(mask);
  char *csv = cli_slurp("held.csv"), *old = cli_slurp("held.old"), *page = cli_slurp("page.html"),
       *made = cli_slurp("made.json");
  err = cli_slurp("replaced.err");
  CHECK(rc == 0, "the reports are written (rc %d): %s", rc, err ? err : "");
  CHECK(csv && !strncmp(csv, "backend,", 8) && mode_of("held.csv") == 0604, "the --csv file holds the records, mode %o",
        (unsigned)mode_of("held.csv"));
  CHECK(old && !strcmp(old, "old contents\n"), "the file was replaced, not rewritten: its other name keeps the old");
  CHECK(links_to("via.html", "page.html") && page && !strncmp(page, "<!DOCTYPE html>", 15) &&
            mode_of("page.html") == 0600,
        "through a link the file it leads to is replaced, mode %o, and the link stays", (unsigned)mode_of("page.html"));
  CHECK(links_to("new.json", "made.json") && made && made[0] == '[' && mode_of("made.json") == 0640,
        "through a link to no file yet that file is made, mode %o: 0666 less the umask 027",
        (unsigned)mode_of("made.json"));
  CHECK(temporaries() == 0, "no temporary file is left");
  free(csv);
  free(old);
  free(page);
  free(made);
  free(err);

  /* a folder that takes no new file (root writes anyway, so only checked as another user) */
  if (geteuid() != 0) {
    char ro[128];
    snprintf(ro, sizeof ro, "%s/locked", dir);
    mkdir(ro, 0755);
    put("locked/out.json", "old contents\n", 0644);
    chmod(ro, 0555);
    snprintf(args, sizeof args, "%s --json %s/out.json", base, ro);
    rc = run(args, "locked_run");
    chmod(ro, 0755);
    err = cli_slurp("locked_run.err");
    kept = cli_slurp("locked/out.json");
    CHECK(rc == 3 && err && strstr(err, "no temporary file can be made beside it") && strstr(err, "nothing was timed"),
          "a read-only folder fails before anything is timed (rc %d): %s", rc, err ? err : "");
    CHECK(kept && !strcmp(kept, "old contents\n"), "the file in the read-only folder is untouched");
    free(err);
    free(kept);
  } else {
    printf("note: running as root; the read-only folder case did not run\n");
  }
}

/* Records name the commit: FP4KIT_COMMIT when set, else the source tree's HEAD (git rev-parse),
 * and integers are written as integers. */
static void commit_and_integers(void) {
  char src[512], cmd[700], head[64] = "";
  snprintf(src, sizeof src, "%s", __FILE__);
  char *slash = strrchr(src, '/');
  if (slash) *slash = '\0';
  else snprintf(src, sizeof src, ".");
  snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse HEAD 2>/dev/null", src);
  FILE *g = popen(cmd, "r");
  if (g) {
    if (!fgets(head, sizeof head, g)) head[0] = '\0';
    pclose(g);
  }
  head[strcspn(head, "\n")] = '\0';
  const char *args = "--device -1 --backend cpu --shapes 4096x4096 --m 1 --op w4a16 --runs 50 --warmup 0 --no-peers --json -";
  int rc = run_env("FP4KIT_COMMIT=", args, "commit.json");
  char *json = cli_slurp("commit.json"), v[128];
  value_of(json, "commit", v, sizeof v);
  if (head[0]) {
    char want[80];
    snprintf(want, sizeof want, "\"%s", head);
    CHECK(rc == 0 && !strncmp(v, want, strlen(want)) && (v[41] == '"' || !strcmp(v + 41, "-dirty\"")),
          "inside the git clone the record names HEAD %s (rc %d): %s", head, rc, v);
  } else {
    printf("the source tree is not a git clone here: the commit must be unknown\n");
    CHECK(rc == 0 && !strcmp(v, "\"unknown\""), "outside git the commit is unknown: %s", v);
  }
  /* 2 * 4096 * 4096 FLOPs and 4096 * 4096 * (1/2 + 1/16) weight bytes, exactly. */
  CHECK(!strcmp(value_of(json, "flops", v, sizeof v), "33554432"), "flops is an integer: %s", v);
  CHECK(!strcmp(value_of(json, "weight_bytes", v, sizeof v), "9437184"), "weight_bytes is an integer: %s", v);
  CHECK(!strcmp(value_of(json, "act_bytes", v, sizeof v), "8192"), "act_bytes is an integer: %s", v);
  CHECK(!strcmp(value_of(json, "m", v, sizeof v), "1") && !strcmp(value_of(json, "runs", v, sizeof v), "50"), "m and runs");
  free(json);
  rc = run_env("FP4KIT_COMMIT=feedbeef", args, "commit_env.json");
  json = cli_slurp("commit_env.json");
  CHECK(rc == 0 && !strcmp(value_of(json, "commit", v, sizeof v), "\"feedbeef\""), "FP4KIT_COMMIT overrides: %s", v);
  free(json);
}

/* ---- a strict little JSON parser: the records must be an array of flat objects ---- */
typedef struct jp {
  const char *p;
  int ok;
  /* per record */
  char status[32];
  int median_null;
  double median;
  int records, ok_records, skipped_records, keys;
} jp;

static void ws(jp *j) {
  while (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r') j->p++;
}

static int str(jp *j, char *out, size_t size) {
  size_t n = 0;
  if (*j->p != '"') return j->ok = 0;
  for (j->p++; *j->p != '"'; j->p++) {
    if (!*j->p || (unsigned char)*j->p < 0x20) return j->ok = 0;
    if (*j->p == '\\') {
      j->p++;
      if (*j->p == 'u') {
        for (int i = 1; i <= 4; i++)
          if (!strchr("0123456789abcdefABCDEF", j->p[i]) || !j->p[i]) return j->ok = 0;
        j->p += 4;
      } else if (!strchr("\"\\/bfnrt", *j->p) || !*j->p) {
        return j->ok = 0;
      }
    }
    if (out && n + 1 < size) out[n++] = *j->p;
  }
  j->p++;
  if (out) out[n] = '\0';
  return 1;
}

static int number(jp *j, double *v) {
  char *end = NULL;
  if (!strchr("-0123456789", *j->p)) return j->ok = 0;
  *v = strtod(j->p, &end);
  if (end == j->p) return j->ok = 0;
  j->p = end;
  return 1;
}

/* value := string | number | null (records are flat) */
static int record(jp *j) {
  ws(j);
  if (*j->p != '{') return j->ok = 0;
  j->p++;
  j->status[0] = '\0';
  j->median_null = -1;
  j->keys = 0;
  for (;;) {
    char key[64];
    ws(j);
    if (!str(j, key, sizeof key)) return 0;
    ws(j);
    if (*j->p++ != ':') return j->ok = 0;
    ws(j);
    j->keys++;
    if (*j->p == '"') {
      char v[64];
      if (!str(j, v, sizeof v)) return 0;
      if (!strcmp(key, "status")) snprintf(j->status, sizeof j->status, "%.31s", v);
    } else if (!strncmp(j->p, "null", 4)) {
      j->p += 4;
      if (!strcmp(key, "median_us")) j->median_null = 1;
    } else {
      double v = 0;
      if (!number(j, &v)) return 0;
      if (!strcmp(key, "median_us")) {
        j->median_null = 0;
        j->median = v;
      }
    }
    ws(j);
    if (*j->p == ',') {
      j->p++;
      continue;
    }
    if (*j->p++ != '}') return j->ok = 0;
    break;
  }
  j->records++;
  if (!strcmp(j->status, "ok")) {
    j->ok_records++;
    CHECK(j->median_null == 0 && j->median > 0, "record %d is ok but median_us is missing or not positive", j->records);
  } else {
    if (!strcmp(j->status, "skipped")) j->skipped_records++;
    CHECK(j->median_null == 1, "record %d is '%s' but has a median", j->records, j->status);
  }
  return 1;
}

static void parse_records(jp *j, const char *s) {
  memset(j, 0, sizeof *j);
  j->p = s;
  j->ok = 1;
  ws(j);
  if (*j->p++ != '[') {
    j->ok = 0;
    return;
  }
  ws(j);
  if (*j->p == ']') {
    j->p++;
  } else {
    while (record(j)) {
      ws(j);
      if (*j->p == ',') {
        j->p++;
        continue;
      }
      if (*j->p++ != ']') j->ok = 0;
      break;
    }
  }
  ws(j);
  if (*j->p) j->ok = 0;
}

/* Fields of one CSV line, honouring quotes; -1 on a broken quote. */
static int csv_fields(const char *line, const char **next) {
  int n = 1, quoted = 0;
  const char *p = line;
  for (; *p && (quoted || *p != '\n'); p++) {
    if (*p == '"') quoted = !quoted;
    else if (*p == ',' && !quoted) n++;
  }
  *next = *p ? p + 1 : p;
  return quoted ? -1 : n;
}

int main(void) {
  cli_require();
  snprintf(dir, sizeof dir, "/tmp/fp4kit_bench_XXXXXX");
  if (!mkdtemp(dir)) {
    printf("skip: cannot create a temporary directory\n");
    return 77;
  }

  /* Help and usage errors. */
  CHECK(run("--help", "help") == 0, "--help exits 0");
  char *help = cli_slurp("help");
  CHECK(help && strstr(help, "usage: fp4kit bench"), "--help prints the usage");
  CHECK(help && strstr(help, "[--json FILE|-] [--csv FILE|-] [--html FILE|-]") &&
            strstr(help, "For each of --json, --csv and --html, '-' writes to stdout"),
        "--help gives '-' for each report form");
  free(help);
  CHECK(run("--runs 10", "e1") == 2, "--runs below 50 is a usage error");
  CHECK(run("--op gemm", "e2") == 2, "an unknown --op is a usage error");
  CHECK(run("--backend nosuch --shapes 128x128", "e3") == 2, "an unknown backend is a usage error");
  CHECK(run("--shapes 12y34", "e4") == 2, "a malformed shape is a usage error");
  CHECK(run("--model x --shapes 128x128", "e5") == 2, "--model and --shapes exclude each other");
  CHECK(run("--config small-m.w8 --shapes 128x128", "e6") == 2, "--config without one --backend is a usage error");
  CHECK(run("--backend auto --config small-m.w8 --shapes 128x128", "e7") == 2, "--config with auto is a usage error");
  CHECK(run("--device -1 --backend ref --config nosuch --shapes 128x256 --m 1 --op w4a16 --runs 50 --warmup 1", "e8") == 1,
        "a run whose --config the backend refuses finishes with status 1 (a point failed)");
  char *e8 = cli_slurp("e8");
  CHECK(cli_count(e8, "unknown config 'nosuch'") == 1, "the refused --config is named in its row");
  free(e8);
  char *err = cli_slurp("e1.err");
  CHECK(err && strstr(err, "--runs"), "the usage error names the option");
  free(err);
  CHECK(run("--shapes 128x128,0x4096", "e9") == 2, "a zero dimension is a usage error");
  err = cli_slurp("e9.err");
  CHECK(err && strstr(err, "'0x4096'"), "the usage error quotes the whole shape, not the part before the x");
  free(err);

  /* A tiny host run: 2 shapes that ref may run and one past its cap, 2 M values, every op. */
  char args[1024];
  snprintf(args, sizeof args,
           "--device -1 --backend ref --shapes 128x256,200x128,8192x4096 --m 1,3 --op w4a16,w4a4,quantize "
           "--runs 50 --warmup 1 --json %s/out.json --csv %s/out.csv --html %s/out.html",
           dir, dir, dir);
  int rc = run(args, "table");
  char *e = cli_slurp("table.err");
  CHECK(rc == 0, "the tiny run exits 0 (got %d): %s", rc, e ? e : "");
  free(e);
  char *table = cli_slurp("table"), *json = cli_slurp("out.json"), *csv = cli_slurp("out.csv"), *html = cli_slurp("out.html");
  CHECK(table && strstr(table, "median_us") && strstr(table, "ref is limited"), "the table has a header and the ref cap");
  /* 3 shapes x 2 M x (w4a16, w4a4) = 12 GEMM points (4 past the ref cap) + quantize per K (3) x 2 M = 6. */
  const int expect_records = 18, expect_skipped = 4, expect_gemm_ok = 8;
  if (json) {
    jp j;
    parse_records(&j, json);
    CHECK(j.ok, "out.json is valid JSON (stopped at offset %ld)", (long)(j.p - json));
    CHECK(j.records == expect_records, "out.json has %d records, expected %d", j.records, expect_records);
    CHECK(j.skipped_records == expect_skipped, "%d skipped records, expected %d", j.skipped_records, expect_skipped);
    CHECK(j.ok_records == expect_records - expect_skipped, "%d ok records", j.ok_records);
    CHECK(j.keys >= 50, "records carry the metadata (%d keys)", j.keys);
    const char *keys[] = {"\"backend\"", "\"tflops\"", "\"weight_gbps\"", "\"host_read_gbps\"", "\"host_fma_gflops\"",
                          "\"commit\"", "\"date\"", "\"command\"", "\"device\"", "\"quantize_us\"", "\"total_us\""};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) CHECK(cli_count(json, keys[i]) == expect_records, "key %s in every record", keys[i]);
    CHECK(strstr(json, "\"host_read_gbps\":null") == NULL, "the host read peer was measured");
  } else {
    CHECK(0, "out.json was not written");
  }
  if (csv) {
    const char *p = csv, *next = NULL;
    int header = csv_fields(p, &next), lines = 0;
    CHECK(header >= 50, "the CSV header has the fields (%d)", header);
    for (p = next; *p; p = next, lines++) CHECK(csv_fields(p, &next) == header, "CSV line %d has the header's field count", lines + 2);
    CHECK(lines == expect_records, "out.csv has %d rows, expected %d", lines, expect_records);
  } else {
    CHECK(0, "out.csv was not written");
  }
  if (html) {
    size_t n = strlen(html);
    CHECK(!strncmp(html, "<!DOCTYPE html>", 15) && n > 8 && !strcmp(html + n - 8, "</html>\n"), "HTML is one whole page");
    CHECK(cli_count(html, "<svg") == 1 && cli_count(html, "</svg>") == 1, "one roofline chart (host)");
    CHECK(cli_count(html, "<title>#") == expect_gemm_ok, "every measured GEMM point is in the chart, labelled (%d)",
          cli_count(html, "<title>#"));
    CHECK(!strstr(html, "<script") && !strstr(html, " src=") && !strstr(html, "<link"), "self-contained: nothing loaded");
    CHECK(strstr(html, "host read") != NULL, "the chart draws the same-run read-bandwidth roof");
    CHECK(cli_count(html, "<tr") == expect_records + 1, "the table has every point");
  } else {
    CHECK(0, "out.html was not written");
  }
  free(table);
  free(json);
  free(csv);
  free(html);

  /* JSON on stdout moves the table to stderr, and skips no record. */
  rc = run("--device -1 --backend ref --shapes 128x256 --m 2 --op w4a16 --runs 50 --warmup 0 --no-peers --json -", "stdout.json");
  char *sj = cli_slurp("stdout.json");
  if (sj) {
    jp j;
    parse_records(&j, sj);
    CHECK(rc == 0 && j.ok && j.records == 1 && j.ok_records == 1, "--json - writes one valid record to stdout (rc %d)", rc);
    CHECK(strstr(sj, "\"host_read_gbps\":null") != NULL, "--no-peers leaves the peers empty");
  } else {
    CHECK(0, "no stdout captured");
  }
  free(sj);
  char *se = cli_slurp("stdout.json.err");
  CHECK(se && strstr(se, "median_us"), "the table went to stderr");
  free(se);
  /* So does the HTML page: stdout holds the page alone; two reports on stdout are refused. */
  rc = run("--device -1 --backend ref --shapes 128x256 --m 2 --op w4a16 --runs 50 --warmup 0 --no-peers --html -", "stdout.html");
  char *sh = cli_slurp("stdout.html"), *she = cli_slurp("stdout.html.err");
  size_t shn = sh ? strlen(sh) : 0;
  CHECK(rc == 0 && sh && !strncmp(sh, "<!DOCTYPE html>", 15) && shn > 8 && !strcmp(sh + shn - 8, "</html>\n"),
        "--html - writes one whole page to stdout and nothing else (rc %d): %.80s", rc, sh ? sh : "");
  CHECK(she && strstr(she, "median_us"), "with --html - the table went to stderr");
  free(sh);
  free(she);
  static const char *const two[] = {"--html - --json -", "--html - --csv -", "--csv - --json -"};
  for (size_t i = 0; i < sizeof two / sizeof *two; i++) {
    char a[256];
    snprintf(a, sizeof a, "--device -1 --backend ref --shapes 128x256 --m 2 --op w4a16 --runs 50 %s", two[i]);
    rc = run(a, "two_stdout");
    char *te = cli_slurp("two_stdout.err"), *to = cli_slurp("two_stdout");
    CHECK(rc == 2 && te && strstr(te, "only one of --json, --csv and --html can write to stdout ('-')") && to && !to[0],
          "%s is a usage error before anything runs (rc %d): %s", two[i], rc, te ? te : "");
    free(te);
    free(to);
  }

  unwritable_outputs();
  reports_whole();
  commit_and_integers();

  char cleanup[128];
  snprintf(cleanup, sizeof cleanup, "rm -rf '%s'", dir);
  if (!test_failed && system(cleanup) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (test_failed) fprintf(stderr, "%d check(s) failed; files kept in %s\n", test_failed, dir);
  return test_failed ? 1 : 0;
}
