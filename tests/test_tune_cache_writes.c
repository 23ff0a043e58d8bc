/* How the tuning cache is written: never through a link planted at a temporary name or at the lock
 * file, with no temporary file left behind; a link at the target is written through to a cache and
 * refused when it leads to another file or nowhere; a file that is not recognisably a cache is never
 * replaced, and a replaced file keeps its permissions; concurrent writers in 8 processes keep every
 * entry (load, set, save merge under the lock); an entry set here wins over the file's, and the
 * file's other entries survive a save of an older copy; a long file is judged whole, not by its first
 * bytes. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fp4kit.h"
#include "testing.h"

static char dir[64];

static void path_of(char *buf, size_t size, const char *name) { snprintf(buf, size, "%s/%s", dir, name); }

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *t = calloc(1, 1 << 20);
  size_t n = fread(t, 1, (1 << 20) - 1, f);
  t[n] = 0;
  fclose(f);
  return t;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  fputs(text, f);
  fclose(f);
}

static fp4_tune_key key_of(int writer, int j) {
  return (fp4_tune_key){FP4_TUNE_MM_W4A16, FP4_FORMAT_NVFP4, FP4_DTYPE_BF16, FP4_DTYPE_BF16, 16, 64 * (writer + 1), 64 * (j + 1)};
}

static fp4_tuning_cache *new_cache(void) {
  fp4_tuning_cache *c = NULL;
  CHECK(fp4_tuning_cache_create(NULL, &c) == FP4_OK, "create: %s", fp4_last_error());
  return c;
}

static int is_symlink_to(const char *link, const char *target) {
  char buf[512];
  ssize_t n = readlink(link, buf, sizeof buf - 1);
  if (n < 0) return 0;
  buf[n] = 0;
  return !strcmp(buf, target);
}

/* Files in dir whose names start with prefix. */
static int count_files(const char *prefix) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, prefix, strlen(prefix));
  if (d) closedir(d);
  return n;
}

/* Links planted at the temporary name earlier versions used (<path>.tmp.<pid>), at names of the form
 * temporaries take and at the target: the files they point at are never written, except a cache
 * that a link at the target leads to. */
static void test_no_write_through_links(void) {
  static const char secret[] = "precious contents\n";
  char victim[256], path[256], link[300];
  path_of(victim, sizeof victim, "victim.txt");
  path_of(path, sizeof path, "linked.json");
  write_text(victim, secret);
  snprintf(link, sizeof link, "%s.tmp.%ld", path, (long)getpid());
  CHECK(symlink(victim, link) == 0, "symlink %s: %s", link, strerror(errno));
  static const char *const guesses[] = {"aaaaaaaaaaaa", "000000000000", "tmp", "1", "XXXXXX"};
  for (size_t i = 0; i < sizeof guesses / sizeof *guesses; i++) {
    snprintf(link, sizeof link, "%s.tmp.%s", path, guesses[i]);
    CHECK(symlink(victim, link) == 0, "symlink %s", link);
  }
  fp4_tuning_cache *c = new_cache();
  fp4_tune_key k = key_of(0, 0);
  CHECK(fp4_tuning_cache_set(c, &k, "cpu", NULL, 3.0) == FP4_OK, "set");
  CHECK(fp4_tuning_cache_save(c, path) == FP4_OK, "save beside planted links: %s", fp4_last_error());
  char *v = read_text(victim);
  CHECK(v && !strcmp(v, secret), "the linked file is untouched: '%s'", v ? v : "(gone)");
  free(v);
  struct stat sb;
  CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode), "the target is a regular file");
  const mode_t um = umask(0);
  umask(um);
  CHECK((sb.st_mode & 0777) == (0666 & ~um), "mode %o: a new file's, 0666 less the umask", (unsigned)(sb.st_mode & 0777));
  /* A link at the target to a file that is not a cache: refused, the link and the file kept. */
  char lpath[256];
  path_of(lpath, sizeof lpath, "to-victim.json");
  CHECK(symlink(victim, lpath) == 0, "symlink at the target");
  CHECK_ERROR(fp4_tuning_cache_save(c, lpath), FP4_ERR_INVALID_ARGUMENT, "not an fp4kit tuning cache");
  v = read_text(victim);
  CHECK(v && !strcmp(v, secret), "the file a link leads to is untouched: '%s'", v ? v : "(gone)");
  free(v);
  CHECK(is_symlink_to(lpath, victim), "the link is left as it is");
  fp4_tuning_cache *d = new_cache();
  CHECK(fp4_tuning_cache_load(d, path) == FP4_OK && fp4_tuning_cache_count(d) == 1, "the cache was written: %s",
        fp4_last_error());
  fp4_tuning_cache_destroy(d);
  /* the planted temporaries are still the links they were, and no new temporary is left */
  snprintf(link, sizeof link, "%s.tmp.%ld", path, (long)getpid());
  CHECK(is_symlink_to(link, victim), "the link at the old temporary name is left alone");
  CHECK(count_files("linked.json.tmp.") == 1 + (int)(sizeof guesses / sizeof *guesses), "%d temporaries",
        count_files("linked.json.tmp."));

  /* A link at the lock file: the save fails cleanly and writes nothing through it. */
  char lock[300];
  path_of(lpath, sizeof lpath, "locklinked.json");
  snprintf(lock, sizeof lock, "%s.lock", lpath);
  CHECK(symlink(victim, lock) == 0, "symlink at the lock");
  CHECK_ERROR(fp4_tuning_cache_save(c, lpath), FP4_ERR_IO, "lock");
  v = read_text(victim);
  CHECK(v && !strcmp(v, secret), "the linked file is untouched by the lock: '%s'", v ? v : "(gone)");
  free(v);
  CHECK(access(lpath, F_OK) != 0, "nothing was written");
  fp4_tuning_cache_destroy(c);
}

static mode_t mode_of(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? sb.st_mode & 0777 : 0;
}

/* What a save may replace: a file that is not recognisably a cache is refused and left whole (a
 * mistyped path must not destroy it; no lock file appears beside it), as is a folder; an empty
 * file and a damaged or stale cache are replaced; a replaced file keeps its permissions; a link
 * to a cache is written through (the link stays, the lock is the cache's) and a dangling one is
 * refused, creating nothing. */
static void test_what_a_save_replaces(void) {
  fp4_tuning_cache *c = new_cache();
  const fp4_tune_key x = key_of(3, 0);
  CHECK(fp4_tuning_cache_set(c, &x, "cpu", NULL, 2.0) == FP4_OK, "set");
  static const char *const others[] = {"notes\n", "[1, 2, 3]\n", "{\"format\": \"another-tool\"}\n",
                                       "not json {\"format\": \"fp4kit-tuning-cache\"}"};
  char path[256], lock[300];
  path_of(path, sizeof path, "notes.txt");
  snprintf(lock, sizeof lock, "%s.lock", path);
  for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
    write_text(path, others[i]);
    CHECK_ERROR(fp4_tuning_cache_save(c, path), FP4_ERR_INVALID_ARGUMENT, "not an fp4kit tuning cache");
    char *t = read_text(path);
    CHECK(t && !strcmp(t, others[i]), "'%s' is left as it is: '%s'", others[i], t ? t : "(gone)");
    free(t);
  }
  CHECK(access(lock, F_OK) != 0, "no lock file beside a refused file");
  path_of(path, sizeof path, "folder.json");
  CHECK(mkdir(path, 0700) == 0, "mkdir");
  CHECK_ERROR(fp4_tuning_cache_save(c, path), FP4_ERR_INVALID_ARGUMENT, "not a regular file");

  /* Replaced, keeping the permissions the file had. */
  static const char *const replaced[] = {"", "\n", "{\n\t\"format\":\t\"fp4kit-tuning-cache\",\n\t\"format_v",
                                         "{\"format\": \"fp4kit-tuning-cache\", \"format_version\": 7}"};
  path_of(path, sizeof path, "kept-mode.json");
  for (size_t i = 0; i < sizeof replaced / sizeof *replaced; i++) {
    write_text(path, replaced[i]);
    chmod(path, 0640);
    CHECK(fp4_tuning_cache_save(c, path) == FP4_OK, "'%s' is replaced: %s", replaced[i], fp4_last_error());
    fp4_tuning_cache *r = new_cache();
    CHECK(fp4_tuning_cache_load(r, path) == FP4_OK && fp4_tuning_cache_count(r) == 1, "'%s': the new cache is there",
          replaced[i]);
    fp4_tuning_cache_destroy(r);
    CHECK(mode_of(path) == 0640, "'%s': mode %o, expected 0640 kept", replaced[i], (unsigned)mode_of(path));
  }
  chmod(path, 0604);
  CHECK(fp4_tuning_cache_save(c, path) == FP4_OK && mode_of(path) == 0604, "a usable cache keeps mode 0604: %o",
        (unsigned)mode_of(path));

  /* A link to that cache: written through, and the link stays a link. */
  char link[256], target_lock[300];
  path_of(link, sizeof link, "link-to-cache.json");
  CHECK(symlink(path, link) == 0, "symlink");
  const fp4_tune_key y = key_of(4, 0);
  CHECK(fp4_tuning_cache_set(c, &y, "cpu", NULL, 2.0) == FP4_OK, "set");
  CHECK(fp4_tuning_cache_save(c, link) == FP4_OK, "save through a link: %s", fp4_last_error());
  CHECK(is_symlink_to(link, path), "the link is still a link to the cache");
  fp4_tuning_cache *r = new_cache();
  CHECK(fp4_tuning_cache_load(r, path) == FP4_OK && fp4_tuning_cache_count(r) == 2, "the cache the link leads to "
        "has both entries: %d", fp4_tuning_cache_count(r));
  fp4_tuning_cache_destroy(r);
  CHECK(mode_of(path) == 0604, "mode kept through the link: %o", (unsigned)mode_of(path));
  snprintf(lock, sizeof lock, "%s.lock", link);
  snprintf(target_lock, sizeof target_lock, "%s.lock", path);
  CHECK(access(lock, F_OK) != 0 && access(target_lock, F_OK) == 0, "the lock is the cache's, not the link's");

  /* A dangling link: refused, nothing created where it points. */
  char nowhere[256];
  path_of(link, sizeof link, "dangling.json");
  path_of(nowhere, sizeof nowhere, "nowhere.json");
  CHECK(symlink(nowhere, link) == 0, "symlink");
  CHECK_ERROR(fp4_tuning_cache_save(c, link), FP4_ERR_INVALID_ARGUMENT, "does not exist");
  CHECK(access(nowhere, F_OK) != 0 && is_symlink_to(link, nowhere), "nothing created through the dangling link");
  fp4_tuning_cache_destroy(c);
}

/* 8 processes, each loading, adding its own keys one at a time and saving into one file. */
enum { WRITERS = 8, KEYS_PER_WRITER = 6 };

static int writer(const char *path, int id, int start_fd) {
  char go;
  if (read(start_fd, &go, 1) < 0) return 2; /* all start together (EOF when the parent closes) */
  for (int j = 0; j < KEYS_PER_WRITER; j++) {
    fp4_tuning_cache *c = NULL;
    if (fp4_tuning_cache_create(NULL, &c)) return 3;
    fp4_status st = fp4_tuning_cache_load(c, path); /* missing at first */
    if (st && st != FP4_ERR_NOT_FOUND) fprintf(stderr, "writer %d: load: %s\n", id, fp4_last_error());
    fp4_tune_key k = key_of(id, j);
    if (fp4_tuning_cache_set(c, &k, "cpu", NULL, 1.0 + id) || fp4_tuning_cache_save(c, path)) {
      fprintf(stderr, "writer %d: %s\n", id, fp4_last_error());
      return 4;
    }
    fp4_tuning_cache_destroy(c);
  }
  return 0;
}

static void test_concurrent_writers_keep_every_entry(void) {
  char path[256];
  path_of(path, sizeof path, "shared.json");
  int pipefd[2];
  CHECK(pipe(pipefd) == 0, "pipe");
  pid_t pids[WRITERS];
  for (int i = 0; i < WRITERS; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      close(pipefd[1]);
      _exit(writer(path, i, pipefd[0]));
    }
  }
  close(pipefd[0]);
  close(pipefd[1]); /* go */
  for (int i = 0; i < WRITERS; i++) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer %d exit %d", i, WEXITSTATUS(status));
  }
  fp4_tuning_cache *c = new_cache();
  CHECK(fp4_tuning_cache_load(c, path) == FP4_OK, "load: %s", fp4_last_error());
  CHECK(fp4_tuning_cache_count(c) == WRITERS * KEYS_PER_WRITER, "%d of %d entries survived", fp4_tuning_cache_count(c),
        WRITERS * KEYS_PER_WRITER);
  int missing = 0;
  for (int i = 0; i < WRITERS; i++)
    for (int j = 0; j < KEYS_PER_WRITER; j++) {
      fp4_tune_key k = key_of(i, j);
      char be[32], cfg[64];
      missing += fp4_tuning_cache_lookup(c, &k, be, sizeof be, cfg, sizeof cfg) != FP4_OK;
    }
  CHECK(missing == 0, "%d keys missing", missing);
  CHECK(count_files("shared.json.tmp.") == 0, "no temporary file is left");
  fp4_tuning_cache_destroy(c);
}

/* A save merges: the file's entries that this cache lacks are kept, and a stale copy of an entry
 * (loaded earlier, not set since) does not undo a newer one another writer saved. */
static void test_merge_rules(void) {
  char path[256], be[32], cfg[64];
  path_of(path, sizeof path, "merge.json");
  const fp4_tune_key x = key_of(0, 0), y = key_of(1, 0), z = key_of(2, 0);
  fp4_tuning_cache *a = new_cache(), *b = new_cache();
  CHECK(fp4_tuning_cache_set(a, &x, "cpu", NULL, 5.0) == FP4_OK && fp4_tuning_cache_save(a, path) == FP4_OK, "first save");
  CHECK(fp4_tuning_cache_load(a, path) == FP4_OK && fp4_tuning_cache_load(b, path) == FP4_OK, "both load x");
  CHECK(fp4_tuning_cache_set(b, &x, "ref", NULL, 4.0) == FP4_OK && fp4_tuning_cache_set(b, &z, "cpu", NULL, 2.0) == FP4_OK,
        "b retunes x, adds z");
  CHECK(fp4_tuning_cache_save(b, path) == FP4_OK, "b saves");
  CHECK(fp4_tuning_cache_set(a, &y, "cpu", NULL, 3.0) == FP4_OK && fp4_tuning_cache_save(a, path) == FP4_OK, "a adds y, saves");
  fp4_tuning_cache *r = new_cache();
  CHECK(fp4_tuning_cache_load(r, path) == FP4_OK && fp4_tuning_cache_count(r) == 3, "x, y and z: %d entries",
        fp4_tuning_cache_count(r));
  CHECK(fp4_tuning_cache_lookup(r, &x, be, sizeof be, cfg, sizeof cfg) == FP4_OK && !strcmp(be, "ref"),
        "b's newer x survives a's stale copy: %s", be);
  /* An entry set again in this process wins over the file's. */
  CHECK(fp4_tuning_cache_set(a, &x, "cpu", NULL, 1.0) == FP4_OK && fp4_tuning_cache_save(a, path) == FP4_OK, "a retunes x");
  CHECK(fp4_tuning_cache_load(r, path) == FP4_OK && fp4_tuning_cache_count(r) == 3 &&
            fp4_tuning_cache_lookup(r, &x, be, sizeof be, cfg, sizeof cfg) == FP4_OK && !strcmp(be, "cpu"),
        "a's newer x wins: %s", be);
  /* A file that is not a usable cache is replaced. */
  write_text(path, "{\"format\": \"fp4kit-tuning-cache\", \"format_version\": 1, \"library_version\": \"0.0.0\"}");
  CHECK(fp4_tuning_cache_save(b, path) == FP4_OK && fp4_tuning_cache_load(r, path) == FP4_OK &&
            fp4_tuning_cache_count(r) == 2,
        "another version's file is replaced: %d entries (%s)", fp4_tuning_cache_count(r), fp4_last_error());
  fp4_tuning_cache_destroy(a);
  fp4_tuning_cache_destroy(b);
  fp4_tuning_cache_destroy(r);
}

/* A save looks at a file's first bytes before it takes the lock, and the whole file decides under
 * it: a cache whose "format" member comes after its first 4 KiB (its members in another order) is
 * merged, and a long JSON object that names no format is refused and left whole. */
static void test_long_files(void) {
  char path[256];
  path_of(path, sizeof path, "late-format.json");
  fp4_tuning_cache *c = new_cache();
  for (int j = 0; j < 40; j++) {
    const fp4_tune_key k = key_of(0, j);
    CHECK(fp4_tuning_cache_set(c, &k, "cpu", NULL, 1.0 + j) == FP4_OK, "set %d", j);
  }
  CHECK(fp4_tuning_cache_save(c, path) == FP4_OK, "save: %s", fp4_last_error());
  fp4_tuning_cache_destroy(c);
  static const char member[] = "\"format\":\t\"fp4kit-tuning-cache\",";
  char *text = read_text(path), *at = text ? strstr(text, member) : NULL, *end = text ? strrchr(text, '}') : NULL;
  CHECK(at && end && end - text > 4200, "a long cache naming its format first: %s", text ? text : "(none)");
  if (at && end && end - text > 4200) {
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, (size_t)(at - text), f);
    fwrite(at + strlen(member), 1, (size_t)(end - at) - strlen(member), f);
    fputs(",\"format\": \"fp4kit-tuning-cache\"}\n", f);
    fclose(f);
    fp4_tuning_cache *r = new_cache();
    CHECK(fp4_tuning_cache_load(r, path) == FP4_OK && fp4_tuning_cache_count(r) == 40, "the reordered cache loads: %s",
          fp4_last_error());
    c = new_cache();
    const fp4_tune_key k = key_of(1, 0);
    CHECK(fp4_tuning_cache_set(c, &k, "cpu", NULL, 2.0) == FP4_OK, "set");
    CHECK(fp4_tuning_cache_save(c, path) == FP4_OK, "a cache naming its format past 4 KiB is merged: %s", fp4_last_error());
    CHECK(fp4_tuning_cache_load(r, path) == FP4_OK && fp4_tuning_cache_count(r) == 41, "40 + 1 entries: %d",
          fp4_tuning_cache_count(r));
    fp4_tuning_cache_destroy(c);
    fp4_tuning_cache_destroy(r);
  }
  free(text);

  path_of(path, sizeof path, "long-notes.json");
  char *notes = calloc(1, 6000);
  if (!notes) return;
  strcpy(notes, "{\"notes\": \"");
  memset(notes + strlen(notes), 'x', 5000);
  strcat(notes, "\"}\n");
  write_text(path, notes);
  c = new_cache();
  CHECK_ERROR(fp4_tuning_cache_save(c, path), FP4_ERR_INVALID_ARGUMENT, "not an fp4kit tuning cache");
  text = read_text(path);
  CHECK(text && !strcmp(text, notes), "the long JSON object is left as it is");
  char lock[300];
  snprintf(lock, sizeof lock, "%s.lock", path);
  CHECK(access(lock, F_OK) != 0, "no lock file beside the refused long JSON object");
  free(text);
  free(notes);
  fp4_tuning_cache_destroy(c);
}

/* A folder that cannot hold the file: a clean error naming the path, nothing written. */
static void test_unwritable(void) {
  char file[256], path[300];
  path_of(file, sizeof file, "plain-file");
  write_text(file, "x");
  snprintf(path, sizeof path, "%s/sub/tuning.json", file);
  fp4_tuning_cache *c = new_cache();
  CHECK_ERROR(fp4_tuning_cache_save(c, path), FP4_ERR_IO, "plain-file");
  fp4_tuning_cache_destroy(c);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/fp4kit_cache_writes_XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_no_write_through_links();
  test_what_a_save_replaces();
  test_concurrent_writers_keep_every_entry();
  test_merge_rules();
  test_long_files();
  test_unwritable();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return TEST_SUMMARY();
}
