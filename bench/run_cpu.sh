#!/usr/bin/env bash
# The CPU benchmarks recorded in BENCHMARKS.md, in one go (run on an otherwise idle machine:
# with 2 cores, any other busy process makes torch's threads wait on each other).
# Usage: bash bench/run_cpu.sh 2>&1 | tee bench/out/cpu.log
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
mkdir -p bench/out
lscpu | grep -E "Model name|^CPU\(s\)"
P="--prompts bench/prompts.txt --max-new-tokens 64 --repeats 3"
for spec in "--dtype bfloat16 --draft ngram" "--dtype float32 --draft default"; do
  for b in 1 8; do
    echo "== bench $spec B=$b"
    $PY -m specviz bench $P $spec --batch-size $b --draft-length 4
  done
done
echo "== exactness (fp32)"
$PY bench/exactness.py --max-new-tokens 32
echo "== sweep (bf16 target, ngram draft)"
$PY -m specviz sweep --prompts bench/prompts.txt --max-new-tokens 64 --dtype bfloat16 --draft ngram \
  --batch-sizes 1,2,4,8 --draft-lengths 1,2,4,6,8 --out-dir bench/out/sweep-ngram
for c in "fixed --draft-length 1" "fixed --draft-length 2" "bass --draft-length 4" "analytic --draft-length 2"; do
  echo "== policy $c, B=8 (bf16 target, ngram draft)"
  $PY -m specviz bench $P --dtype bfloat16 --draft ngram --batch-size 8 --controller $c
done
