#!/usr/bin/env bash
# Regenerates bench/results/h200/current.md and current.json from the recorded JSON files of the
# most recent measurement of each path (different runs of 2026-11-30, each section naming its
# commit), with scripts/bench_current.py. scripts/bench-h200.sh replaces both with one run of one
# commit; this script is for the page as it stands until then.
set -euo pipefail
cd "$(dirname "$0")/.."
H=bench/results/h200
python3 scripts/bench_current.py --md $H/current.md --json $H/current.json \
  --title "Current numbers on the H200" \
  --intro "These tables are the most recent measurement of each path; they come from different runs of 2026-11-30, each section naming its file, command and commit. The defaults of these paths have not changed since: the configuration tables in src/backends/cuda/config/ reproduce the recorded choices (tests/test_dense_config.c, tests/test_moe_config.c). \`scripts/bench-h200.sh\` replaces this page with one run of one commit. Not in these records, and measured by the first run of \`scripts/bench-h200.sh\`: the activation quantize alone (30.3 us for 4096 x 4096 bf16 at commit cc59a34, bench/results/h200/2026-11-30-cublas-dequant/README.md), dense M = 32-64 through the default configs (M = 32 on the shared-activation kernel: bench/results/h200/2026-11-30-small-m-decode/m8-32-shared-activation.json), M = 8192 (cublas-dequant: bench/results/h200/2026-11-30-cublas-dequant/w4a16.csv), W4A4 at M >= 128, and the MoE layer at B = 256." \
  "$H/2026-11-30-small-m-decode/classic-l2-unit-1.json=Dense decode, W4A16, cuda backend, M = 1-16" \
  "$H/2026-11-30-small-m-decode/w4a4-prologue-bench.json=Dense decode, W4A4 through the prologue configs" \
  "$H/2026-11-30-large-m-prefill/cublas-dequant-m128-4096.json=Dense prefill, W4A16, cublas-dequant (auto's choice from M = 64 on SM90)" \
  "$H/2026-11-30-large-m-prefill/wgra-128x256-split-k.json=Dense prefill, W4A16, the cuda backend's register-A tile with split-K, M = 256 and 512" \
  "$H/2026-11-30-large-m-prefill/cuda-default-m4096.json=Dense prefill, W4A16, the cuda backend's default at M = 4096" \
  "$H/2026-11-30-moe-decode/layer-1.json=MoE layer, decode (B = 1, 8, 64)" \
  "$H/2026-11-30-moe-prefill/layer-1.json=MoE layer, prefill (B = 1024, 4096)" \
  --commit "$H/2026-11-30-small-m-decode/classic-l2-unit-1.json=e498b56 (the record says unknown: a copied tree)" \
  --commit "$H/2026-11-30-large-m-prefill/cublas-dequant-m128-4096.json=2c15060 (the record carries a label instead)" \
  --commit "$H/2026-11-30-moe-decode/layer-1.json=fdcf2ef" \
  --commit "$H/2026-11-30-moe-prefill/layer-1.json=100124a" \
  --note "$H/2026-11-30-large-m-prefill/wgra-128x256-split-k.json=Measured before the branch-free E4M3 scale decode (commit 100124a), which made the register-A tiles 6-7% faster at M = 4096 (bench/results/h200/2026-11-30-large-m-prefill/README.md)." \
  --note "$H/2026-11-30-large-m-prefill/cuda-default-m4096.json=Measured before the branch-free E4M3 scale decode (commit 100124a): with it 8192 x 8192 ran 574 TFLOP/s = 0.73x cuBLAS BF16 in another run (bench/results/h200/2026-11-30-large-m-prefill/README.md)." \
  --command "$H/2026-11-30-moe-decode/layer-1.json=fp4kit bench --moe --m 1,8,64" \
  --date "$H/2026-11-30-moe-decode/layer-1.json=2026-11-30" \
  --note "$H/2026-11-30-moe-decode/layer-1.json=The first of three rounds; the other two are in the same folder." \
  --command "$H/2026-11-30-moe-prefill/layer-1.json=fp4kit bench --moe --m 1024,4096" \
  --date "$H/2026-11-30-moe-prefill/layer-1.json=2026-11-30" \
  --note "$H/2026-11-30-moe-prefill/layer-1.json=The first of two rounds; the other is in the same folder."
