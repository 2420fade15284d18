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
D=specviz/assets/draft-SmolLM2-135M-Instruct
for b in 1 8; do for k in 2 3; do
  echo "== bench bf16 target + distilled draft B=$b k=$k"
  $PY -m specviz bench --prompts bench/prompts.txt --max-new-tokens 64 --repeats 2 --dtype bfloat16 --draft $D \
    --batch-size $b --draft-length $k $([ $b = 8 ] && echo --no-peer)
done; done
for spec in "--dtype bfloat16 --draft ngram" "--dtype float32 --draft default"; do
  for b in 1 8; do
    echo "== bench $spec B=$b"
    $PY -m specviz bench $P $spec --batch-size $b --draft-length 4
  done
done
echo "== exactness (fp32)"
$PY bench/exactness.py --max-new-tokens 32
for d in default ngram; do
  echo "== sweep (bf16 target, draft $d; interleaved cells, ragged prediction)"
  $PY -m specviz sweep --prompts bench/prompts.txt --max-new-tokens 64 --dtype bfloat16 --draft $d \
    --batch-sizes 1,2,4,8 --draft-lengths 1,2,4,6,8 --recalibrate --out-dir bench/out/sweep-$d
done
$PY -m specviz calibrate --dtype bfloat16 --draft default
for c in "fixed --draft-length 1" "fixed --draft-length 2" "fixed --draft-length 3" "bass --draft-length 2" \
         "analytic --draft-length 2" "heuristic --draft-length 2"; do
  echo "== policy $c, B=8 (default pair)"
  $PY -m specviz bench $P --dtype bfloat16 --draft default --batch-size 8 --no-peer --policy $c
done
echo "== the Live page in a real browser vs the CLI"
$PY bench/browser_speed.py --rounds 3
for c in "fixed --draft-length 1" "fixed --draft-length 2" "bass --draft-length 4" "analytic --draft-length 2"; do
  echo "== policy $c, B=8 (bf16 target, ngram draft)"
  $PY -m specviz bench $P --dtype bfloat16 --draft ngram --batch-size 8 --policy $c
done
echo "== all policies interleaved in one process (B=8, then B=1; default pair, fresh calibration above)"
$PY bench/policies.py --batch-size 8 --rounds 5
$PY bench/policies.py --batch-size 1 --rounds 3
echo "== ours vs transformers' assisted generate at the peer's own settings (peer interleaved)"
$PY -m specviz bench $P --dtype bfloat16 --batch-size 1 --draft-length 4 --draft-confidence 0.4
echo "== lean forward vs transformers' forward"
$PY bench/lean_forward.py --rounds 2
$PY bench/profile_step.py
$PY bench/profile_step.py --lean
echo "== exactness (fp32) with the distilled draft"
$PY bench/exactness.py --max-new-tokens 32 --drafts ngram,default-bf16,$D
echo "== the shipped draft: its seeded command (~90 min on this CPU), the reproducibility check, old vs new"
CD=${CD:-/tmp/cpudraft}
$PY -m specviz distill --target default --out $CD --data ~/.cache/specviz/tokdata --samples 6144 --val-samples 64 \
  --max-new-tokens 128 --gen-batch-size 32 --gen-workers 2 --topk 32 --steps 1500 --batch-size 32 --lr 0.003 \
  --weight-decay 0.05 --vocab 8192 --kind token --layers 2 --init-layers first --seed 0 --eval-every 250 \
  --eval-prompts 16 --eval-max-new-tokens 64 --eval-ks 1,2,3 --cost-rounds 3 --cost-prefix-len 128 --threads 2 \
  --device cpu --dtype bfloat16
cmp $CD/model.safetensors $D/model.safetensors && echo "same bytes as the shipped draft"
$PY bench/reproduce_data.py --draft $D --data ~/.cache/specviz/tokdata --batches 4
$PY bench/drafts.py --batch-size 1 --rounds 4 --arms shipped:$D:1,shipped:$D:2 --peer $D:1,$D:2,$D:4
echo "== feature draft (EAGLE-style): distil on this CPU (~50 min data + ~40 min training), then drafts side by side"
FD=${FD:-/tmp/featdraft}
$PY -m specviz distill --target default --out $FD --data ~/.cache/specviz/featdata --samples 5120 --val-samples 64 \
  --max-new-tokens 128 --gen-batch-size 32 --gen-workers 2 --topk 32 --steps 2500 --batch-size 16 --lr 0.003 \
  --weight-decay 0.05 --vocab 8192 --kind feature --layers 1 --init-layers random --seed 0 --eval-every 250 \
  --eval-prompts 16 --eval-max-new-tokens 64 --eval-ks 1,2,3,4 --cost-rounds 3 --cost-prefix-len 128 --threads 2 \
  --device cpu --dtype bfloat16
$PY bench/drafts.py --batch-size 1 --rounds 3 --arms token:$D:2,feature:$FD:2,feature:$FD:3 --peer $D:4
$PY bench/drafts.py --batch-size 8 --rounds 3 --arms token:$D:1,feature:$FD:1,feature:$FD:2
$PY bench/exactness.py --max-new-tokens 32 --drafts $FD
