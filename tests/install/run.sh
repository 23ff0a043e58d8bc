#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then builds and runs an external consumer each way:
# find_package(fp4kit) with the shared and the static library, pkg-config with the shared library and
# (`pkg-config --static`, in a copy of the prefix without the shared library) with the static one.
# Also: the installed `fp4kit` command runs without LD_LIBRARY_PATH (its RUNPATH finds ../lib), and
# the exported CMake files name no vendor library by path.
set -euo pipefail
build_dir=$1
src_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail=0
step() { echo "== $*"; }

cmake --install "$build_dir" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name 'libfp4kit.so' | head -n1)")

step "CMake: find_package(fp4kit), fp4kit::fp4kit and fp4kit::fp4kit_static"
cmake -S "$src_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix;${CMAKE_PREFIX_PATH:-}" >/dev/null
cmake --build "$work/build" >/dev/null
LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}" "$work/build/consumer" || fail=1
"$work/build/consumer_static" || { echo "FAIL: the static CMake consumer"; fail=1; }

pc_dir=$(dirname "$(find "$prefix" -name fp4kit.pc | head -n1)")
step "pkg-config: shared"
cc "$src_dir/consumer.c" -o "$work/consumer_pc" $(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs fp4kit)
LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}" "$work/consumer_pc" || fail=1

step "pkg-config --static: static (a prefix holding only libfp4kit.a)"
cp -a "$prefix" "$work/static-prefix"
find "$work/static-prefix" -name 'libfp4kit.so*' -delete
spc=$(dirname "$(find "$work/static-prefix" -name fp4kit.pc | head -n1)")
echo "Libs.private: $(PKG_CONFIG_PATH="$spc" pkg-config --static --libs fp4kit)"
if cc "$src_dir/consumer.c" -o "$work/consumer_pc_static" $(PKG_CONFIG_PATH="$spc" pkg-config --static --cflags --libs fp4kit); then
  "$work/consumer_pc_static" || fail=1
else
  echo "FAIL: linking with pkg-config --static"; fail=1
fi

step "the installed fp4kit command"
if [ -x "$prefix/bin/fp4kit" ]; then
  readelf -d "$prefix/bin/fp4kit" | grep -E 'RUNPATH|RPATH' || true
  if ! env -u LD_LIBRARY_PATH "$prefix/bin/fp4kit" --version; then
    echo "FAIL: bin/fp4kit does not start without LD_LIBRARY_PATH (it must find libfp4kit.so.0 in ../lib)"; fail=1
  fi
else
  echo "(no command installed: built without tools)"
fi

step "exported CMake files"
if grep -l -E '/libcudnn|/libcublas|/libcudart\.so' "$prefix"/lib*/cmake/fp4kit/*.cmake; then
  echo "FAIL: the exported targets name a vendor library by path (above)"; fail=1
fi

[ $fail -eq 0 ] || exit 1
echo "install consumers: 0 failed"
