#!/bin/sh
# Builds and runs the safetensors fuzz target with clang's libFuzzer and AddressSanitizer.
#   fuzz/build.sh [seconds]      (default 60; needs clang and libcjson-dev)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out=${FUZZ_OUT:-$root/build-fuzz}
mkdir -p "$out" "$out/corpus"
clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/include" -I"$root/src" \
  "$here/fuzz_safetensors.c" "$root/src/model/safetensors.c" "$root/src/model/st_writer.c" \
  "$root/src/core/error.c" "$root/src/backends/cpu/cpu_threads.c" -lcjson -lpthread -o "$out/fuzz_safetensors"
cp "$here"/corpus/* "$out/corpus/" 2>/dev/null || true
"$out/fuzz_safetensors" -max_total_time="${1:-60}" -max_len=4096 "$out/corpus" "$here/corpus"
