/* The output directory of a checkpoint writer: everything is written into a temporary sibling
 * directory, which replaces the output only when complete, so a failed or killed run never leaves a
 * directory that looks like a model. The temporary name says whose it is: ".OUT.fp4kit-tmp.PID.XXXXXX";
 * a later run removes those whose process is gone. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "model/model_internal.h"

static const char temp_tag[] = ".fp4kit-tmp.";

/* Removes the entry `name` of directory parent and, for a directory, what it holds; never follows a
 * symbolic link (a link is removed, not its target). Best effort: returns 0 when all went. */
static int remove_tree_at(int parent, const char *name, int depth) {
  struct stat sb;
  if (fstatat(parent, name, &sb, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : -1;
  if (!S_ISDIR(sb.st_mode)) return unlinkat(parent, name, 0);
  if (depth > 32) return -1;
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    if (fd >= 0) close(fd);
    return -1;
  }
  int rc = 0;
  for (struct dirent *de; (de = readdir(d));)
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && remove_tree_at(dirfd(d), de->d_name, depth + 1))
      rc = -1;
  closedir(d);
  if (unlinkat(parent, name, AT_REMOVEDIR) != 0) rc = -1;
  return rc;
}

/* Whether `name` is a temporary directory of some run writing `base`; its process id in *pid. */
static int temp_of(const char *name, const char *base, long *pid) {
  const size_t bl = strlen(base);
  if (name[0] != '.' || strncmp(name + 1, base, bl) || strncmp(name + 1 + bl, temp_tag, sizeof temp_tag - 1)) return 0;
  const char *p = name + 1 + bl + sizeof temp_tag - 1;
  char *end = NULL;
  *pid = strtol(p, &end, 10);
  return end != p && *end == '.' && strlen(end + 1) == 6 && *pid > 0;
}

/* Removes the temporaries of runs writing `base` in `parent` whose process no longer exists. */
static void remove_stale(const char *parent, const char *base) {
  DIR *d = opendir(parent);
  if (!d) return;
  for (struct dirent *de; (de = readdir(d));) {
    long pid;
    if (temp_of(de->d_name, base, &pid) && (pid == (long)getpid() || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)))
      remove_tree_at(dirfd(d), de->d_name, 0);
  }
  closedir(d);
}

/* The first entry of directory path other than . and .., copied to first; 0 when empty, -1 when it
 * cannot be listed. */
static int first_entry(const char *path, char *first, size_t size) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int found = 0;
  for (struct dirent *de; !found && (de = readdir(d));)
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
      snprintf(first, size, "%s", de->d_name);
      found = 1;
    }
  closedir(d);
  return found;
}

fp4_status fp4_model_out_begin(const char *fn, const char *out_dir, const char *in_real, int force, fp4_out_dir *od) {
  memset(od, 0, sizeof *od);
  char path[PATH_MAX];
  size_t len = strlen(out_dir);
  while (len > 1 && out_dir[len - 1] == '/') len--; /* "out/" is "out" */
  if (len == 0 || len >= sizeof path) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: output path is empty or too long", fn);
  memcpy(path, out_dir, len);
  path[len] = 0;
  struct stat sb;
  if (stat(path, &sb) == 0) {
    if (!S_ISDIR(sb.st_mode))
      return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s exists and is not a directory", fn, out_dir);
    if (!realpath(path, od->out)) return fp4_fail(FP4_ERR_IO, "%s: %s: %s", fn, out_dir, strerror(errno));
    od->exists = 1;
  } else if (errno != ENOENT) {
    return fp4_fail(FP4_ERR_IO, "%s: %s: %s", fn, out_dir, strerror(errno));
  } else {
    /* A new directory: its parent must exist. */
    char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char parent[PATH_MAX], rparent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", !slash ? "." : slash == path ? "/" : path);
    if (slash && slash != path) parent[slash - path] = 0;
    if (!strcmp(base, ".") || !strcmp(base, "..") || !realpath(parent, rparent))
      return fp4_fail(FP4_ERR_NOT_FOUND, "%s: the parent directory of %s does not exist", fn, out_dir);
    if (snprintf(od->out, sizeof od->out, "%s/%s", strcmp(rparent, "/") ? rparent : "", base) >= (int)sizeof od->out)
      return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: output path too long", fn);
  }
  if (!strcmp(od->out, "/")) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: the output cannot be /", fn);
  const size_t ol = strlen(od->out);
  if (!strcmp(in_real, od->out))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: the output directory must differ from the input", fn);
  if (!strncmp(in_real, od->out, ol) && in_real[ol] == '/')
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: the input %s lies inside the output directory %s, which is "
                    "replaced", fn, in_real, od->out);
  if (od->exists) {
    char first[256];
    int r = first_entry(od->out, first, sizeof first);
    if (r < 0) return fp4_fail(FP4_ERR_IO, "%s: cannot list %s: %s", fn, od->out, strerror(errno));
    if (r > 0 && !force)
      return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: the output directory %s is not empty (it holds '%s'); choose "
                      "another or force its replacement (--force: the finished output replaces it, and only then)",
                      fn, out_dir, first);
  }
  /* The temporary directory, beside the output so that the final rename stays on one file system. */
  char *slash = strrchr(od->out, '/');
  snprintf(od->parent, sizeof od->parent, "%.*s", slash == od->out ? 1 : (int)(slash - od->out), od->out);
  const char *base = slash + 1;
  remove_stale(od->parent, base);
  if (snprintf(od->tmp, sizeof od->tmp, "%s/.%s%s%ld.XXXXXX", strcmp(od->parent, "/") ? od->parent : "", base,
               temp_tag, (long)getpid()) >= (int)sizeof od->tmp)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: output path too long", fn);
  if (!mkdtemp(od->tmp)) {
    od->tmp[0] = 0;
    return fp4_fail(FP4_ERR_IO, "%s: cannot create a temporary directory beside %s: %s", fn, od->out, strerror(errno));
  }
  chmod(od->tmp, 0755); /* mkdtemp makes it private; a model directory is not */
  return FP4_OK;
}

void fp4_model_out_abort(fp4_out_dir *od) {
  if (!od->tmp[0]) return;
  int fd = open(od->parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const char *slash = strrchr(od->tmp, '/');
  if (fd >= 0) {
    remove_tree_at(fd, slash + 1, 0);
    close(fd);
  }
  od->tmp[0] = 0;
}

static void sync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

fp4_status fp4_model_out_commit(const char *fn, fp4_out_dir *od) {
  sync_dir(od->tmp);
  if (!od->exists) {
    if (rename(od->tmp, od->out) != 0) {
      fp4_status st = fp4_fail(FP4_ERR_IO, "%s: cannot rename %s to %s: %s", fn, od->tmp, od->out, strerror(errno));
      fp4_model_out_abort(od);
      return st;
    }
    od->tmp[0] = 0;
    sync_dir(od->parent);
    return FP4_OK;
  }
  /* Swap the finished directory with the old one in one step, then remove the old contents (now under
   * the temporary name). Where the file system cannot exchange, move the old one aside first. */
  int swapped = 0;
#ifdef RENAME_EXCHANGE
  swapped = renameat2(AT_FDCWD, od->tmp, AT_FDCWD, od->out, RENAME_EXCHANGE) == 0;
#endif
  if (!swapped) {
    char old[PATH_MAX];
    snprintf(old, sizeof old, "%s", od->tmp);
    memcpy(old + strlen(old) - 6, "XXXXXX", 6);
    if (!mkdtemp(old) || rename(od->out, old) != 0) {
      fp4_status st = fp4_fail(FP4_ERR_IO, "%s: cannot move %s aside: %s", fn, od->out, strerror(errno));
      rmdir(old);
      fp4_model_out_abort(od);
      return st;
    }
    if (rename(od->tmp, od->out) != 0) {
      fp4_status st = fp4_fail(FP4_ERR_IO, "%s: cannot rename %s to %s: %s", fn, od->tmp, od->out, strerror(errno));
      if (rename(old, od->out) != 0) /* put the previous output back; failing that, say where it is */
        st = fp4_fail(FP4_ERR_IO, "%s: cannot rename %s to %s, and the previous output stays in %s: %s", fn, od->tmp,
                      od->out, old, strerror(errno));
      fp4_model_out_abort(od);
      return st;
    }
    snprintf(od->tmp, sizeof od->tmp, "%s", old);
  }
  sync_dir(od->parent);
  fp4_model_out_abort(od); /* the previous contents */
  return FP4_OK;
}
