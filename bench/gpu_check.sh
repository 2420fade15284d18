#!/usr/bin/env bash
# One prepared GPU check (< 5 minutes on one card): greedy exactness on CUDA (fp32 must be exact;
# bf16 divergences are reported with their logit margins), spec-vs-regular bench in bf16 with the
# default pair at B = 1 and 8, the kernel tests on full-size shapes, and the kernel benchmark.
# Usage on a GPU box: bash setup.sh && bash bench/gpu_check.sh 2>&1 | tee gpu_check.log
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "== exactness fp32 (must be exact or near-tie)"
$PY bench/exactness.py --device cuda --dtype float32 --max-new-tokens 32
echo "== exactness bf16 (divergences reported with margins)"
$PY bench/exactness.py --device cuda --dtype bfloat16 --max-new-tokens 32 --draft-lengths 4 || true
P="--prompts bench/prompts.txt --device cuda --dtype bfloat16 --max-new-tokens 96 --repeats 3"
for d in default ngram; do for b in 1 8; do
  echo "== bench draft=$d B=$b"
  $PY -m specviz bench $P --draft $d --batch-size $b --draft-length 4
done; done
if [ -f tests/test_kernels.py ]; then echo "== kernel tests (CUDA)"; TRITON_INTERPRET=0 $PY -m pytest -q tests/test_kernels.py; fi
if [ -f bench/bench_kernels.py ]; then echo "== kernel benchmark"; $PY bench/bench_kernels.py; fi
