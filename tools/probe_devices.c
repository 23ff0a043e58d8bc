/* The device part of `fp4kit probe` (probe_devices.h), shared by the command and the C tests. */
#include "probe_devices.h"

static void version_text(char *buf, size_t size, int v, int cudnn_style) {
  if (!v) snprintf(buf, size, "-");
  else if (cudnn_style) snprintf(buf, size, "%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
  else snprintf(buf, size, "%d.%d", v / 1000, (v % 1000) / 10);
}

cJSON *probe_device_json(int d, const fp4_device_probe *info, const char *error) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "device", d);
  if (!info) {
    cJSON_AddStringToObject(o, "error", error && error[0] ? error : "the device could not be probed");
    return o;
  }
  cJSON_AddStringToObject(o, "name", info->name);
  cJSON_AddStringToObject(o, "arch", info->arch);
  cJSON_AddNumberToObject(o, "cc", info->cc);
  cJSON_AddNumberToObject(o, "sm_count", info->sm_count);
  cJSON_AddNumberToObject(o, "memory_bytes", (double)info->memory_bytes);
  cJSON_AddNumberToObject(o, "driver_version", info->driver_version);
  cJSON_AddNumberToObject(o, "runtime_version", info->runtime_version);
  cJSON_AddNumberToObject(o, "cublaslt_version", info->cublaslt_version);
  cJSON_AddNumberToObject(o, "cudnn_version", info->cudnn_version);
  cJSON_AddBoolToObject(o, "binary_has_code", info->binary_has_code);
  return o;
}

void probe_device_print(FILE *f, int d, const fp4_device_probe *info, const char *error, int probed) {
  if (!info) {
    fprintf(f, "  %d: could not be probed: %s\n", d, error && error[0] ? error : "no reason given");
    return;
  }
  char drv[16], rt[16], lt[16], dnn[16];
  version_text(drv, sizeof drv, info->driver_version, 0);
  version_text(rt, sizeof rt, info->runtime_version, 0);
  version_text(lt, sizeof lt, info->cublaslt_version, 1);
  version_text(dnn, sizeof dnn, info->cudnn_version, 1);
  fprintf(f,
          "  %d: %s, %s (cc %d.%d), %d SMs, %.1f GiB; driver CUDA %s, runtime %s, cuBLASLt %s, cuDNN %s;\n"
          "     this binary has code for it: %s%s\n",
          d, info->name, info->arch, info->cc / 10, info->cc % 10, info->sm_count,
          (double)info->memory_bytes / (1u << 30), drv, rt, lt, dnn, info->binary_has_code ? "yes" : "NO",
          probed ? "   <- probed below" : "");
}
