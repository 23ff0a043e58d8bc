#!/usr/bin/env bash
# Sets up a fresh machine, builds fp4kit and runs the main job: `fp4kit check`, every available
# backend against the reference, then `fp4kit probe`, what runs on this machine and why not.
# Arguments are passed to `fp4kit check` (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
"${BUILD_DIR:-build}/tools/fp4kit" check "$@"
exec "${BUILD_DIR:-build}/tools/fp4kit" probe
