#!/usr/bin/env bash
# session 10 run 1: branch next-moe-wgra driver, then the refactored dense register-A tile at two points
set -u
bash bench/results/h200/2026-11-30-session9/scripts/next-moe-wgra.sh
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
mkdir -p /tmp/r1x && cd /tmp/r1x && tar -xzf $OUT/run.tar.gz && cd - >/dev/null
R=/tmp/r1x/run
timeout 150 build-gpu/tools/fp4kit bench --backend cuda --config large-m.wgra.128x256 --op w4a16 --m 256,4096 --shapes 8192x8192,8192x28672 --json $R/dense-wgra.json > $R/dense-wgra.log 2>&1
tail -n 8 $R/dense-wgra.log
tar -czf $OUT/run.tar.gz -C /tmp/r1x run
