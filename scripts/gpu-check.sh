#!/usr/bin/env bash
# The GPU run, on the GPU machine from the repository root: build for the device, run every test
# (GPU tests included), the checks, the probe, the Python GPU tests, the benchmarks and the timing
# drivers. Logs go under $LOG (default: a new /tmp/gpu-check.XXXXXX); at the end they are packed
# into one file, $OUT/gpu-check.tar.gz (default OUT: ./gpu-check-out), and a short summary ends
# stdout.
#
#   bash scripts/gpu-check.sh                         # every part (about 15 minutes)
#   FP4KIT_GPU_PARTS="build ctest check" bash scripts/gpu-check.sh
#   FP4KIT_GPU_PARTS="build timing-small" FP4KIT_TIMING_FULL=1 bash scripts/gpu-check.sh   # every small-M config
#   FP4KIT_GPU_PARTS="build moe" bash scripts/gpu-check.sh          # fp4kit bench --moe
#
# Parts: build ctest check probe python bench-small bench-large tune timing-small timing-large moe sass
# (default), and, only when named: bench-dequant (cublas-dequant on the dense shapes, M = 256-8192),
# crossover (cuda vs cublas-dequant, M = 16-128), read-pattern (scripts/weight_read_pattern.cu: the
# weights read with no math, the floor under a decode GEMM), ptxas (registers and spills per kernel; slow) and
# ncu (per-kernel breakdowns of the MoE layer, cublas-dequant and small-M, and the sections of one
# launch of each large-M tile family, when Nsight Compute is installed and can read the counters).
# FP4KIT_CTEST_ARGS adds ctest arguments (e.g. -R "cuda"). FP4KIT_STEP_TIMEOUT (seconds, default none) stops any one step that runs longer (it counts as failed).
# FP4KIT_COMMIT names the commit in bench records when the tree has no .git (a copied tree).
# cJSON: the system's when it has libcjson-dev, else the source in .deps/cjson-src, compiled into the
# library (CMake finds it there; else it tries scripts/fetch_deps.sh itself, else its configure log
# says what to install). On a machine without network, put it there before copying the tree:
# `bash scripts/fetch_deps.sh` (on a machine that reaches the apt archive; .deps/ is ignored by git,
# so a copy that takes only what git tracks must name it). FP4KIT_GPU_ARCH (default: the first
# visible GPU's, e.g. 90a) is the one architecture built.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
# A fresh directory by default: a machine that kept an earlier run's /tmp would otherwise pack its
# logs with this run's.
LOG=${LOG:-$(mktemp -d /tmp/gpu-check.XXXXXX)}
gpu_arch() { # the first visible GPU's architecture (a-suffixed from SM90 on), else 90a
  local cc
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
  case "$cc" in
    '' | *[!0-9]*) echo 90a ;;
    *) if ((cc >= 90)); then echo "${cc}a"; else echo "$cc"; fi ;;
  esac
}
ARCH=${FP4KIT_GPU_ARCH:-$(gpu_arch)}
PARTS=${FP4KIT_GPU_PARTS:-build ctest check probe python bench-small bench-large tune timing-small timing-large moe sass}
BUILD=build-gpu
F=$BUILD/tools/fp4kit
mkdir -p "$OUT" "$LOG"
export FP4KIT_COMMIT=${FP4KIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export FP4KIT_TUNING_CACHE="$LOG/tuning.json"
summary=()
want() { [[ " $PARTS " == *" $1 "* ]]; }
step() { # name, command...: runs, logs to $LOG/<name>.log, records pass/fail and seconds
  local name=$1; shift
  local t0=$SECONDS
  if timeout "${FP4KIT_STEP_TIMEOUT:-0}" "$@" >"$LOG/$name.log" 2>&1; then summary+=("PASS $name ($((SECONDS - t0)) s)")
  else summary+=("FAIL $name ($((SECONDS - t0)) s): see $name.log"); fi
  printf '%s\n' "${summary[@]}" >"$LOG/summary.txt"
  tar -czf "$OUT/gpu-check.tar.gz" -C "$LOG" . # after every step: a run stopped at its limit keeps what it did
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$LOG/device.txt" 2>&1
echo "$FP4KIT_COMMIT" >"$LOG/commit.txt"

if want build; then
  step configure cmake -S . -B $BUILD -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=${ARCH}-real
  step build cmake --build $BUILD -j "$(nproc)"
  [ -x $F ] || { printf '%s\n' "${summary[@]}"; tail -30 "$LOG/configure.log" "$LOG/build.log"; exit 1; }
fi
want ctest && step ctest bash -c "cd $BUILD && ctest --output-on-failure -j 8 --timeout ${FP4KIT_CTEST_TIMEOUT:-600} ${FP4KIT_CTEST_ARGS:-}"
want check && step fp4kit-check $F check
if want probe; then
  step probe $F probe
  step probe-check env FP4KIT_PROBE_VERBOSE=1 $F probe --check
  step probe-json $F probe --json
  step probe-arch-sm_120 $F probe --arch sm_120
  step probe-arch-all $F probe --arch all
fi
want python && step python env FP4KIT_LIB="$PWD/$BUILD/libfp4kit.so" PYTHONUNBUFFERED=1 \
  python3 -m pytest -q -rs tests/python
if want bench-small; then
  step bench-small $F bench --json "$LOG/bench-small.json" --html "$LOG/bench-small.html"
fi
if want bench-large; then
  step bench-large $F bench --m 128,256,512,1024,2048,4096,8192 --op w4a16 --runs 50 \
    --json "$LOG/bench-large.json" --html "$LOG/bench-large.html"
fi
# The dense layer shapes of Qwen3.5-397B and Llama-3.3-70B without the two vocabulary projections
# (which take most of a large-M bench's time and add nothing a 57344-row weight does not show).
DENSE=20480x4096,128x4096,4096x8192,17408x4096,512x4096,2048x4096,4096x1024,10240x8192,8192x8192,57344x8192,8192x28672
if want bench-dequant; then
  # The large-M dense shapes on the dequantize-then-cuBLAS path, with both same-run peers.
  step bench-dequant $F bench --backend cublas-dequant --shapes $DENSE --m 256,512,4096,8192 --op w4a16,w4a4 \
    --runs 50 --json "$LOG/bench-dequant.json" --csv "$LOG/bench-dequant.csv"
fi
if want crossover; then
  # Where cublas-dequant overtakes the own kernels (the heuristic's DEQUANT_WINS_M; the small-M
  # kernels run up to M = 64, the large-M tiles above).
  step crossover $F bench --backend cuda,cublas-dequant --shapes $DENSE --m 16,24,32,48,64,96,128 --op w4a16 \
    --runs 50 --no-peers --json "$LOG/crossover.json" --csv "$LOG/crossover.csv"
fi
if want tune; then
  # Tune then auto: tune the model's shapes, then bench --backend auto follows the cache
  # (its rows say which backend:config ran and whether that is the cached winner: hit/miss/none).
  # FP4KIT_TUNE_SHAPES: tune and bench these (e.g. "--shapes 20480x4096,4096x8192 --m 1,16") instead.
  TUNE_SHAPES=${FP4KIT_TUNE_SHAPES:---model qwen3.5-397b-a17b --m 1,16,128,1024,4096}
  step tune $F tune $TUNE_SHAPES --runs 20
  step bench-auto $F bench --backend auto $TUNE_SHAPES --json "$LOG/bench-auto.json" --csv "$LOG/bench-auto.csv"
fi
if want ncu && command -v ncu >/dev/null; then
  # Where the time goes, from the hardware counters (clocks left as they are). Breakdowns: every
  # kernel of a few calls with its time, DRAM traffic, grid and occupancy limits (MoE layer at B = 1
  # and 64, cublas-dequant, small-M at M = 1 and 16; `python3 scripts/ncu_breakdown.py LOG` makes a
  # table of one). Sections: one launch of each large-M tile family, of the grouped MoE kernels at
  # B = 1 and of small-M at M = 16.
  NCU="ncu --clock-control none --target-processes all"
  BRK="--csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum"
  SEC="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats --section Occupancy --section LaunchStats"
  step ncu-moe-b1 $NCU $BRK -c 60 $F bench --moe --m 1 --mode w4a16 --runs 10 --budget 0.05 --no-peers
  step ncu-moe-b64 $NCU $BRK -c 60 $F bench --moe --m 64 --mode w4a16 --runs 10 --budget 0.05 --no-peers
  step ncu-dequant $NCU $BRK -c 30 $F bench --backend cublas-dequant --shapes 8192x8192,20480x4096 --m 4096 --op w4a16 --runs 50 --no-peers
  step ncu-small-m $NCU $BRK -k regex:gemm_small_m -c 4 $F bench --backend cuda --shapes 57344x8192 --m 1,16 --op w4a16 --runs 50 --no-peers
  step ncu-large-m $NCU $SEC -k regex:gemm_large_m -s 3 -c 1 $F bench --backend cuda --config large-m.128x128.s3 --shapes 8192x8192 --m 4096 --op w4a16 --runs 50 --no-peers
  step ncu-wgra-batched $NCU $SEC --section SourceCounters -k regex:gemm_wgra -s 3 -c 1 $F bench --backend cuda --config large-m.wgra.128x64 --shapes 57344x8192 --m 64 --op w4a16 --runs 50 --no-peers
  step ncu-wgra $NCU $SEC -k regex:gemm_wgra -s 3 -c 1 $F bench --backend cuda --config large-m.wgra.128x256 --shapes 8192x8192 --m 4096 --op w4a16 --runs 50 --no-peers
  # The grouped MoE kernels at B = 1 (gate_up, then down: K = 1024 with f32 activations) and the
  # dense small-M kernel at M = 16, with the stall locations in the source (SourceCounters).
  step ncu-moe-grouped-b1 $NCU $SEC --section SourceCounters -k regex:grouped_mma -c 2 $F bench --moe --m 1 --mode w4a16 --runs 10 --budget 0.05 --no-peers
  step ncu-small-m16 $NCU $SEC --section SourceCounters -k regex:gemm_small_m -s 1 -c 1 $F bench --backend cuda --shapes 20480x4096 --m 16 --op w4a16 --runs 50 --no-peers
fi
CUDA_LIBS="$BUILD/libfp4kit_bench.a $BUILD/libfp4kit.so -Xlinker -rpath=$PWD/$BUILD -lcublas -lcublasLt"
if want timing-small && [ -f scripts/cuda_small_m_timing.cu ]; then
  step timing-small-build nvcc -O2 -std=c++17 -Iinclude -o $BUILD/cuda_small_m_timing \
    scripts/cuda_small_m_timing.cu $CUDA_LIBS
  [ -x $BUILD/cuda_small_m_timing ] && step timing-small $BUILD/cuda_small_m_timing "$LOG/cuda-small-m.csv" \
    $([ -n "${FP4KIT_TIMING_FULL:-}" ] || echo --quick)
fi
if want read-pattern && [ -f scripts/weight_read_pattern.cu ]; then
  step read-pattern-build nvcc -O3 -std=c++17 -gencode arch=compute_${ARCH},code=sm_${ARCH} -o $BUILD/weight_read_pattern \
    scripts/weight_read_pattern.cu
  [ -x $BUILD/weight_read_pattern ] && step read-pattern bash -c \
    "for s in '57344 8192' '8192 28672' '20480 4096' '8192 8192'; do $BUILD/weight_read_pattern \$s || exit 1; done"
fi
if want timing-large && [ -f scripts/cuda_large_m_timing.cu ]; then
  step timing-large-build nvcc -O2 -std=c++17 -Iinclude -o $BUILD/cuda_large_m_timing \
    scripts/cuda_large_m_timing.cu $CUDA_LIBS
  [ -x $BUILD/cuda_large_m_timing ] && step timing-large $BUILD/cuda_large_m_timing "$LOG/cuda-large-m.csv" 20
fi
if want moe && $F bench --help 2>&1 | grep -q -- --moe; then
  step bench-moe $F bench --moe --json "$LOG/bench-moe.json"
fi
if want sass; then
  # Tensor-core instructions and local-memory traffic of the device code in the built library.
  cuobjdump --dump-sass $BUILD/libfp4kit.so >"$LOG/sass.txt" 2>&1
  grep -oE "HGMMA[.A-Z0-9x]*|OMMA[.A-Z0-9]*|HMMA[.A-Z0-9]*" "$LOG/sass.txt" | sort | uniq -c >"$LOG/sass-insns.txt"
  summary+=("sass: HMMA $(grep -c HMMA "$LOG/sass.txt"), HGMMA $(grep -c HGMMA "$LOG/sass.txt"), LDL/STL $(grep -cE '\bLDL|\bSTL' "$LOG/sass.txt")")
fi
if want ptxas; then
  # Registers and spills per kernel (-Xptxas -v). Slow (every .cu file compiled again, one at a time):
  # not in the default parts; the build itself already fails on a spill (-Werror with -warn-spills).
  for f in src/backends/cuda/*.cu; do
    nvcc -std=c++17 -c -Iinclude -Isrc --fmad=false --expt-relaxed-constexpr -Xptxas -v \
      -gencode arch=compute_${ARCH},code=sm_${ARCH} "$f" -o /dev/null 2>&1
  done >"$LOG/ptxas.log"
  summary+=("ptxas: $(grep -c 'bytes spill stores' "$LOG/ptxas.log") kernels, $(grep 'bytes spill stores' "$LOG/ptxas.log" | grep -vc ' 0 bytes spill stores') with spills")
fi

echo "==== gpu-check summary (commit $FP4KIT_COMMIT) ===="
head -2 "$LOG/device.txt"
printf '%s\n' "${summary[@]}"
grep -hE "passed|failed|FAIL|Failed|\*\*\*" "$LOG/ctest.log" 2>/dev/null | grep -vE "^\s*$" | tail -25
tail -2 "$LOG/fp4kit-check.log" 2>/dev/null
grep -E "^--check|WRONG" "$LOG/probe-check.log" 2>/dev/null | head -5
tail -3 "$LOG/python.log" 2>/dev/null
tar -czf "$OUT/gpu-check.tar.gz" -C "$LOG" .
