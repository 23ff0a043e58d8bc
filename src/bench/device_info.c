#define _GNU_SOURCE
/* fp4_device_info_get: the facts a benchmark record states about the machine (name, cache size for
 * rotating inputs past it, driver and runtime versions). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fp4kit_bench.h"
#if FP4KIT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

/* "32768K" / "1M" / "512" (sysfs cache sizes) -> bytes. */
static int64_t parse_size(const char *s) {
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  if (end && (*end == 'K' || *end == 'k')) v *= 1024;
  else if (end && (*end == 'M' || *end == 'm')) v *= 1024 * 1024;
  return v > 0 ? (int64_t)v : 0;
}

/* The largest cache of cpu0 (the last level on every CPU we know); 0 when sysfs is absent. */
static int64_t host_cache_bytes(void) {
  int64_t best = 0;
  for (int i = 0; i < 16; i++) {
    char path[96], line[64];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(line, sizeof line, f)) {
      int64_t b = parse_size(line);
      if (b > best) best = b;
    }
    fclose(f);
  }
  return best;
}

static void host_cpu_name(char *name, size_t size) {
  snprintf(name, size, "host CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    const char *v = strchr(line, ':');
    if (!v) break;
    v++;
    while (*v == ' ' || *v == '\t') v++;
    snprintf(name, size, "%s", v);
    name[strcspn(name, "\n")] = '\0';
    break;
  }
  fclose(f);
}

fp4_status fp4_device_info_get(fp4_context *ctx, fp4_device_info *info) {
  fp4_set_error(FP4_OK, NULL);
  if (!info) return fp4_set_error(FP4_ERR_INVALID_ARGUMENT, "fp4_device_info_get: info is NULL");
  memset(info, 0, sizeof *info);
  int device = fp4_context_device(ctx);
  info->device = device;
  if (device < 0) {
    host_cpu_name(info->name, sizeof info->name);
    info->processors = fp4_cpu_threads();
    info->cache_bytes = host_cache_bytes();
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) info->memory_bytes = (int64_t)pages * (int64_t)page;
#if FP4KIT_HAVE_CUDA
    cudaRuntimeGetVersion(&info->runtime_version);
#endif
    return FP4_OK;
  }
#if FP4KIT_HAVE_CUDA
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess)
    return fp4_set_error(FP4_ERR_CUDA, "fp4_device_info_get: cudaGetDeviceProperties(%d): %s", device, cudaGetErrorString(e));
  memcpy(info->name, prop.name, sizeof info->name - 1); /* prop.name is 256 bytes, NUL-terminated */
  info->name[sizeof info->name - 1] = '\0';
  info->cc_major = prop.major;
  info->cc_minor = prop.minor;
  info->processors = prop.multiProcessorCount;
  info->cache_bytes = prop.l2CacheSize;
  info->memory_bytes = (int64_t)prop.totalGlobalMem;
  cudaDriverGetVersion(&info->driver_version);
  cudaRuntimeGetVersion(&info->runtime_version);
  return FP4_OK;
#else
  return fp4_set_error(FP4_ERR_UNSUPPORTED, "fp4_device_info_get: device %d asked for, but this fp4kit was built without CUDA",
                  device);
#endif
}
