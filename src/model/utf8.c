/* UTF-8 validation of text read from checkpoints: the safetensors format and JSON require UTF-8, and
 * a name that is not would be echoed into invalid JSON reports. Text from elsewhere (a path given on
 * the command line) is repaired instead before it goes into JSON. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

size_t fp4_model_utf8_span(const char *text, size_t len) {
  const unsigned char *s = (const unsigned char *)text;
  size_t i = 0;
  while (i < len) {
    const unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;      /* no overlong forms */
      else if (c == 0xED) hi = 0x9F; /* no UTF-16 surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      else if (c == 0xF4) hi = 0x8F; /* at most U+10FFFF */
    } else {
      return i; /* a continuation byte first, an overlong lead (C0, C1) or F5..FF */
    }
    if (len - i <= need || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k <= need; k++)
      if ((s[i + k] & 0xC0) != 0x80) return i;
    i += need + 1;
  }
  return len;
}

char *fp4_model_utf8_repair(const char *text) {
  const size_t len = strlen(text);
  size_t bad = 0;
  for (size_t i = fp4_model_utf8_span(text, len); i < len; i += 1 + fp4_model_utf8_span(text + i + 1, len - i - 1))
    bad++;
  char *out = malloc(len + 2 * bad + 1); /* each invalid byte becomes the 3 bytes of U+FFFD */
  if (!out) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < len;) {
    const size_t valid = fp4_model_utf8_span(text + i, len - i);
    memcpy(out + o, text + i, valid);
    o += valid;
    i += valid;
    if (i < len) {
      memcpy(out + o, "\xEF\xBF\xBD", 3);
      o += 3;
      i++;
    }
  }
  out[o] = 0;
  return out;
}
