#!/bin/sh
# Builds and runs the fuzz targets (fuzz/fuzz_<name>.c) with clang's libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer (float-cast-overflow included), each for a bounded time.
#   fuzz/build.sh [seconds] [name...]   (default 60 s per target, every target; 0: build only;
#                                        needs clang and libcjson-dev)
# A target's seeds are fuzz/corpus (safetensors) or fuzz/corpus_<name>; what it finds beyond them
# stays in $FUZZ_OUT/corpus_<name>.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out=${FUZZ_OUT:-$root/build-fuzz}
seconds=${1:-60}
[ $# -gt 0 ] && shift
names=${*:-$(for f in "$here"/fuzz_*.c; do basename "$f" .c | sed 's/^fuzz_//'; done)}
for name in $names; do
  # The library sources each target links (the smallest set that resolves; see each target's stubs).
  case $name in
  safetensors)
    sources="src/model/safetensors.c src/model/st_writer.c src/model/st_dtype.c src/model/utf8.c src/core/error.c src/backends/cpu/cpu_threads.c"
    seeds=$here/corpus max_len=4096 ;;
  model_config)
    sources="src/model/inspect.c src/model/config.c src/model/shapes.c src/model/safetensors.c src/model/st_writer.c src/model/st_dtype.c
             src/model/utf8.c src/model/pattern.c src/core/error.c src/backends/cpu/cpu_threads.c"
    seeds=$here/corpus_model_config max_len=8192 ;;
  tuning_cache)
    sources="src/tune/tuning_cache.c src/core/error.c src/format/codec.c src/format/matrix_check.c"
    seeds=$here/corpus_tuning_cache max_len=8192 ;;
  *)
    echo "fuzz/build.sh: no source list for target '$name' (add it here)" >&2
    exit 2 ;;
  esac
  mkdir -p "$out/corpus_$name"
  src=""
  for s in $sources; do src="$src $root/$s"; done
  # shellcheck disable=SC2086
  clang -g -O1 -std=c11 -D_GNU_SOURCE= -fsanitize=fuzzer,address,undefined,float-cast-overflow \
    -fno-sanitize-recover=undefined,float-cast-overflow -I"$root/include" -I"$root/src" \
    "$here/fuzz_$name.c" $src -lcjson -lm -lpthread -o "$out/fuzz_$name"
  [ "$seconds" -gt 0 ] || continue
  "$out/fuzz_$name" -max_total_time="$seconds" -max_len="$max_len" "$out/corpus_$name" "$seeds"
done
