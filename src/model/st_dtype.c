/* The safetensors dtypes: their names in a file's header and their bit widths, for the reader
 * (safetensors.c) and the writer (st_writer.c). */
#include <string.h>

#include "core/error.h"
#include "fp4kit_model.h"

static const struct {
  const char *name;
  int bits;
} st_dtypes[FP4_ST_DTYPE_COUNT] = {
    {"BOOL", 8},     {"U8", 8},       {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8},
    {"I16", 16},     {"U16", 16},     {"F16", 16}, {"BF16", 16},   {"I32", 32},    {"U32", 32},
    {"F32", 32},     {"F64", 64},     {"I64", 64}, {"U64", 64},    {"F4", 4},
};

const char *fp4_st_dtype_name(fp4_st_dtype dtype) {
  return (unsigned)dtype < FP4_ST_DTYPE_COUNT ? st_dtypes[dtype].name : NULL;
}
int fp4_st_dtype_bits(fp4_st_dtype dtype) { return (unsigned)dtype < FP4_ST_DTYPE_COUNT ? st_dtypes[dtype].bits : 0; }

fp4_status fp4_st_dtype_parse(const char *name, fp4_st_dtype *dtype) {
  if (!dtype) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_st_dtype_parse: dtype is NULL");
  for (int i = 0; i < FP4_ST_DTYPE_COUNT; i++)
    if (name && name[0] == st_dtypes[i].name[0] && !strcmp(name, st_dtypes[i].name)) {
      *dtype = (fp4_st_dtype)i;
      return FP4_OK;
    }
  return FP4_ERR_NOT_FOUND;
}
