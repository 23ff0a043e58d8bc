#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then builds and runs a consumer through
# find_package(fp4kit) (shared and static) and through pkg-config.
set -euo pipefail
build_dir=$1
src_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$src_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix;${CMAKE_PREFIX_PATH:-}" >/dev/null
cmake --build "$work/build" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib64:${LD_LIBRARY_PATH:-}" "$work/build/consumer"
"$work/build/consumer_static"
pc_dir=$(dirname "$(find "$work/prefix" -name fp4kit.pc | head -n1)")
cc "$src_dir/consumer.c" -o "$work/consumer_pc" $(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs fp4kit)
LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib64:${LD_LIBRARY_PATH:-}" "$work/consumer_pc"
echo "1 passed, 0 failed"
