/* The glob patterns of include/exclude lists (fp4_model_pattern_match, fp4_model_glob): one matcher
 * for quantize's patterns and inspect's exclude lists, linear in time (the patterns of inspect come
 * from the checkpoint). */
#include <string.h>

#include "model/model_internal.h"

/* One glob character against c: '?' any, [set] with ranges and '!' or '^' negation, else itself.
 * *len is how much of the pattern it took. */
static int glob_char(const char *p, unsigned char c, size_t *len) {
  *len = 1;
  if (*p == '?') return 1;
  if (*p == '[') {
    const char *q = p + 1;
    const int negate = *q == '!' || *q == '^';
    if (negate) q++;
    const char *first = q;
    int hit = 0;
    while (*q && (*q != ']' || q == first)) {
      if (q[1] == '-' && q[2] && q[2] != ']') {
        hit |= c >= (unsigned char)q[0] && c <= (unsigned char)q[2];
        q += 3;
      } else {
        hit |= c == (unsigned char)*q++;
      }
    }
    if (*q == ']') {
      *len = (size_t)(q + 1 - p);
      return hit != negate;
    }
  } /* an unclosed '[' is itself */
  return (unsigned char)*p == c;
}

/* Glob match of the first n bytes of s: the two-pointer match that backtracks only to the last '*'. */
int fp4_model_glob(const char *p, const char *s, size_t n) {
  const char *star = NULL;
  size_t resume = 0, i = 0, len = 0;
  while (i < n) {
    if (*p == '*') {
      star = ++p;
      resume = i;
    } else if (*p && glob_char(p, (unsigned char)s[i], &len)) {
      p += len;
      i++;
    } else if (star) {
      p = star;
      i = ++resume;
    } else {
      return 0;
    }
  }
  while (*p == '*') p++;
  return !*p;
}

int fp4_model_pattern_match(const char *pattern, const char *name) {
  return pattern && name && fp4_model_glob(pattern, name, strlen(name));
}
