/* UTF-8 validation of text read from checkpoints: the safetensors format and JSON require UTF-8, and
 * a name that is not would be echoed into invalid JSON reports. */
#include <stddef.h>
#include <stdint.h>

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
