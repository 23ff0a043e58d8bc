/* What `fp4kit probe` says about each CUDA device, as text and as JSON, from one probe result: a
 * device that could not be probed stays a record of the JSON (its error), never stray text. */
#ifndef FP4_TOOLS_PROBE_DEVICES_H
#define FP4_TOOLS_PROBE_DEVICES_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "fp4kit.h"

/* Device d: info when fp4_probe_device answered, else NULL with error, the runtime's message.
 * probe_device_json: {"device": d, "name": ..., ...} or {"device": d, "error": "..."}.
 * probe_device_print: the device's lines of the text report ("<- probed below" when probed). */
cJSON *probe_device_json(int d, const fp4_device_probe *info, const char *error);
void probe_device_print(FILE *f, int d, const fp4_device_probe *info, const char *error, int probed);

#endif
