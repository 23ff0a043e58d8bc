#!/usr/bin/env bash
# The page of current numbers: builds fp4kit on the GPU machine, runs the benchmark parts below on
# the current commit, and writes their JSON records plus current.md and current.json (through
# scripts/bench_current.py) into $OUT (default ./bench-out). Copy current.md and current.json to
# bench/results/h200/ (and the records to a bench/results/h200/<date>-current/ folder with a README)
# to publish them: every number the README and docs quote comes from that page.
#
#   OUT=/some/dir bash scripts/bench-h200.sh
#   FP4KIT_BENCH_PARTS="build decode moe current" bash scripts/bench-h200.sh   # some parts only
#
# Parts (FP4KIT_BENCH_PARTS, default all, in this order):
#   build    cmake for this GPU's architecture (FP4KIT_CUDA_ARCH, default 90a-real), -DFP4KIT_WERROR=ON
#   decode   dense W4A16 and W4A4 GEMMs, M = 1..64, the backends that run natively on this GPU
#            (FP4KIT_BENCH_BACKENDS, below), the default shape set (Qwen3.5-397B and Llama-3.3-70B),
#            with the same-run peers                                          -> dense-decode.json
#   prefill  the same at M = 128..8192                                       -> dense-prefill.json
#   quantize the activation quantize, M = 1..8192, on the default shapes' K   -> quantize.json
#   moe      fp4kit bench --moe: Qwen3.5-397B and DeepSeek-R1 layers, W4A16 and W4A4,
#            B = 1, 8, 64, 256, 1024, 4096, with the copy floor and the cuBLAS BF16 expert loop -> moe.json
#   current  scripts/bench_current.py over the JSON files present -> current.md, current.json
# Each part's table goes to <part>.txt and its progress to <part>.progress; a part that fails is
# named at the end and the others still run. Extra arguments are passed to every fp4kit bench call
# of the dense parts (e.g. --runs 200).
#
# FP4KIT_BENCH_BACKENDS (default: from the GPU's compute capability) lists the backends the dense
# parts time. Only native paths are timed: on SM90 the SM120 kernel runs as an exact emulation for
# verification, about 400x slower than the cuda backend (73.6 ms against 0.18 ms for 248320 x 4096
# at M = 1), and timing it took 8 s a point; with it, the decode part did 335 of its 546 points in
# 480 s on an H200. Where a command is limited to 10 minutes, run the parts one at a time
# (FP4KIT_BENCH_PARTS), each with its own OUT, then the current part over the collected records.
#
# FP4KIT_COMMIT is taken from git when not set (a copied tree without .git: set it), so every
# record names the code it measured.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/bench-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-h200}
ARCH=${FP4KIT_CUDA_ARCH:-90a-real}
PARTS=${FP4KIT_BENCH_PARTS:-build decode prefill quantize moe current}
export FP4KIT_COMMIT=${FP4KIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
F=$BUILD/tools/fp4kit
if [ -z "${FP4KIT_BENCH_BACKENDS:-}" ]; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
  case "$cc" in
    120 | 121) FP4KIT_BENCH_BACKENDS=cuda,cuda-sm120,cublas-dequant ;;
    100 | 103) FP4KIT_BENCH_BACKENDS=cuda,cublaslt,cudnn,cublas-dequant ;;
    *) FP4KIT_BENCH_BACKENDS=cuda,cublas-dequant ;;
  esac
fi
want() { [[ " $PARTS " == *" $1 "* ]]; }
failed=()
part() { # name, command...: the table to <name>.txt, progress and errors to <name>.progress
  local name=$1; shift
  echo "== $name: $*"
  if ! "$@" >"$OUT/$name.txt" 2>"$OUT/$name.progress"; then failed+=("$name"); tail -5 "$OUT/$name.progress"; fi
}

if want build || want decode || want prefill || want quantize || want moe; then # the GPU this run measures
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$OUT/nvidia-smi.csv" 2>&1 || true
fi
if want build; then
  cmake -S . -B "$BUILD" -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" >"$OUT/configure.progress" 2>&1 &&
    cmake --build "$BUILD" -j"$(nproc)" >"$OUT/build.progress" 2>&1 || { tail -40 "$OUT/build.progress"; exit 1; }
fi
if want decode || want prefill || want quantize || want moe; then
  [ -x "$F" ] || { echo "bench-h200.sh: $F is missing: run the build part first"; exit 1; }
fi

B=(--backend "$FP4KIT_BENCH_BACKENDS")
want decode && part dense-decode "$F" bench "${B[@]}" --op w4a16,w4a4 --m 1,2,4,8,16,32,64 --json "$OUT/dense-decode.json" "$@"
want prefill && part dense-prefill "$F" bench "${B[@]}" --op w4a16,w4a4 --m 128,256,512,1024,2048,4096,8192 \
  --json "$OUT/dense-prefill.json" "$@"
want quantize && part quantize "$F" bench --backend cuda --op quantize --m 1,16,64,256,1024,4096,8192 --json "$OUT/quantize.json" "$@"
want moe && part moe "$F" bench --moe --m 1,8,64,256,1024,4096 --json "$OUT/moe.json"

if want current; then
  inputs=()
  for f in dense-decode dense-prefill quantize moe; do
    [ -s "$OUT/$f.json" ] && inputs+=("$OUT/$f.json=$f")
  done
  if ((${#inputs[@]})); then
    python3 scripts/bench_current.py --md "$OUT/current.md" --json "$OUT/current.json" \
      --intro "Every table below comes from one run of \`scripts/bench-h200.sh\` on commit $FP4KIT_COMMIT." \
      "${inputs[@]}" || failed+=(current)
  else
    failed+=("current (no JSON records in $OUT)")
  fi
fi
echo "results in $OUT (commit $FP4KIT_COMMIT): current.md, current.json, the parts' .json and .txt"
((${#failed[@]} == 0)) || { echo "failed parts: ${failed[*]}"; exit 1; }
