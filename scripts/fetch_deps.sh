#!/usr/bin/env bash
# Fetches the source of cJSON (the one library fp4kit needs besides libc and, optionally, CUDA) into
# DEST/cjson-src (default: .deps/cjson-src in the repository, ignored by git), so that a build on a
# machine without libcjson-dev and without network compiles it into libfp4kit. The CMake build uses
# .deps/cjson-src by itself when the system has no cJSON; a copy of the working tree that carries
# .deps (e.g. to a GPU machine) needs nothing else.
#
#   bash scripts/fetch_deps.sh [DEST]
#
# The source is Debian's source package `cjson` (the upstream release plus Debian's patches, the
# security fixes included), obtained with apt from the Debian (or Ubuntu) archive this machine's apt
# is configured for. It uses its own package lists under DEST/.apt (no root needed, the system's apt
# state is left alone) and apt's signature checks of the archive. Exit status 0 only when
# DEST/cjson-src holds cJSON.c and cJSON.h.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-$root/.deps}
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
out=$DEST/cjson-src
if [ -f "$out/cJSON.c" ] && [ -f "$out/cJSON.h" ]; then
  echo "fetch_deps: cJSON $(cat "$out/VERSION" 2>/dev/null || echo '(version unknown)') already in $out"
  exit 0
fi
fail() { echo "fetch_deps: $*" >&2; exit 1; }
command -v apt-get >/dev/null || fail "no apt-get on this machine: cannot fetch cJSON's source (install libcjson-dev, cjson-devel or conda's cjson instead)"
command -v dpkg-source >/dev/null || fail "dpkg-source not found (Debian package dpkg-dev): cannot unpack cJSON's source package"

apt=$DEST/.apt
rm -rf "$apt"
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/sources.list.d" "$apt/src"
# The machine's binary package sources, as source package sources (both the one-line and the
# deb822 formats).
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] && sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f" >>"$apt/sources.list.d/src.list"
done
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && sed 's/^Types:.*/Types: deb-src/' "$f" >"$apt/sources.list.d/$(basename "$f")"
done
[ -s "$apt/sources.list.d/src.list" ] || rm -f "$apt/sources.list.d/src.list"
ls "$apt/sources.list.d/"* >/dev/null 2>&1 || fail "apt has no package sources configured (/etc/apt/sources.list*)"
opts=(-q -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$apt/sources.list.d"
  -o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt/cache" -o Debug::NoLocking=1
  -o APT::Sandbox::User="$(id -un)")
echo "fetch_deps: reading the archive's source package lists (about 10 MB)"
# A third-party source without source packages makes `update` fail while the distribution's lists
# arrived: the `source` step below decides.
apt-get "${opts[@]}" update >"$apt/update.log" 2>&1 || true
(cd "$apt/src" && apt-get "${opts[@]}" source --download-only cjson >"$apt/source.log" 2>&1) || {
  tail -5 "$apt/update.log" "$apt/source.log" >&2
  fail "apt could not download the source package cjson (no network to the archive, or no archive that has it)"
}
dsc=$(ls "$apt/src"/cjson_*.dsc | head -n1)
(cd "$apt/src" && dpkg-source --no-check -x "$(basename "$dsc")" unpacked >"$apt/unpack.log" 2>&1) ||
  { tail -5 "$apt/unpack.log" >&2; fail "dpkg-source could not unpack $dsc"; }
src=$apt/src/unpacked
[ -f "$src/cJSON.c" ] && [ -f "$src/cJSON.h" ] || fail "the source package $dsc has no cJSON.c / cJSON.h at its top"
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
cp "$src/cJSON.c" "$src/cJSON.h" "$out.tmp/"
for f in LICENSE debian/copyright; do [ -f "$src/$f" ] && cp "$src/$f" "$out.tmp/$(basename "$f")"; done
basename "$dsc" .dsc | sed 's/^cjson_//' >"$out.tmp/VERSION"
rm -rf "$out"
mv "$out.tmp" "$out"
rm -rf "$apt"
echo "fetch_deps: cJSON $(cat "$out/VERSION") (Debian source package) in $out"
