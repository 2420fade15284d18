#!/usr/bin/env bash
# Issue 19's GPU route in one device call: the default draft distilled on the GPU host with an order
# of magnitude more target-generated chat data than this CPU makes in a session, within one call's
# 10 minutes, its weights sent back in parts. The packaged model must be carried first
# (bench/gpu_carry.sh pack, then its receive calls); this runs in the call that carries the last part:
#
#   run(command='bash bench/gpu_carry.sh receive 3 && bash bench/gpu_distill.sh --out "$OUT"', carry=['.gpucarry/p3'], timeout_s=590)
#   bash bench/gpu_distill.sh --join DIR   # here, on what came back (DIR = the call's files_at): the draft
#                                          #   in DIR/draft, then exactness and bench/drafts.py against the
#                                          #   shipped draft decide whether it replaces `default`
#   bash bench/gpu_distill.sh --cpu-smoke --out DIR   # the whole pipeline on tiny sizes on a CPU (~1 min)
#
#   bash bench/gpu_distill.sh --print-command   # the distill command it would run, and nothing else
#
# One seeded distill command (recorded in the draft's report.json): --prompts mixed chat answers,
# continued from a shipped draft's weights, generation and training each under a time budget so the
# call ends in time. KIND=feature (the default) continues the best feature draft so far, the two-layer
# feature draft (specviz/assets/feature-draft-2l-...): feature drafts' held-out agreement was still rising
# with more data, where the token draft's stalled near 0.48 (BENCHMARKS.md). KIND=token continues
# the token draft (the `default`) with its head widened to 24,576 tokens (~97% of free-form target tokens; the new
# rows start as the target's own). The generation budget decides how many
# samples there are (one worker takes the seeded prompts in order, so report.json's sample count N
# and `--samples N` without the budget give the same data); 3,000 training steps should end well
# inside theirs (report.json says if the budget ended training, which would tie the weights to the
# clock). Env: PY (default python3, or .venv's), KIND (feature or token),
# GEN_MIN, TRAIN_MIN (the two budgets, minutes; defaults 4 and 2.5).
set -uo pipefail
cd "$(dirname "$0")/.."
SMOKE=0 OUT="" JOIN="" PRINT=0
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --print-command) PRINT=1; shift ;;
    --cpu-smoke) SMOKE=1; shift ;;
    --join) JOIN=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_distill: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
SHIPPED=specviz/assets/draft-SmolLM2-135M-Instruct  # the default draft: what a new one must beat
FEATURE=specviz/assets/feature-draft-2l-SmolLM2-135M-Instruct  # the best feature draft so far
KIND=${KIND:-feature}
case $KIND in
  feature) DRAFT_ARGS="--kind feature --layers 2 --init-layers 29,29 --init-from $FEATURE --vocab 24576 --vocab-from $FEATURE" ;;
  token) DRAFT_ARGS="--kind token --layers 2 --init-layers first --init-from $SHIPPED --vocab 24576 --vocab-from $SHIPPED" ;;
  *) echo "gpu_distill: KIND must be feature or token (got $KIND)" >&2; exit 2 ;;
esac
PART_BYTES=15000000  # a returned file may be 16 MiB, 8 files and 64 MiB in all

if [ -n "$JOIN" ]; then  # here: reassemble the draft from the parts that came back
  ls "$JOIN"/draft.tgz.part-* >/dev/null 2>&1 || { echo "gpu_distill: no draft.tgz.part-* in $JOIN" >&2; exit 2; }
  want=$(cat "$JOIN/draft.tgz.sha256" 2>/dev/null) || { echo "gpu_distill: $JOIN/draft.tgz.sha256 is missing" >&2; exit 2; }
  got=$(cat "$JOIN"/draft.tgz.part-* | sha256sum | cut -d' ' -f1)
  [ "$want" = "$got" ] || { echo "gpu_distill: the parts do not join to the draft that was sent (sha256 $got, want $want)" >&2; exit 2; }
  dest=${DEST:-$JOIN/draft}
  rm -rf "$dest" && mkdir -p "$dest" && cat "$JOIN"/draft.tgz.part-* | tar -C "$dest" -xzf - || exit 2
  echo "gpu_distill: the draft is in $dest; next, on this CPU:"
  echo "  .venv/bin/python bench/exactness.py --drafts $dest"
  arms="token:$SHIPPED:1,token:$SHIPPED:2,feature2:$FEATURE:1,feature2:$FEATURE:2,new:$dest:1,new:$dest:2"
  echo "  .venv/bin/python bench/drafts.py --batch-size 8 --rounds 3 --prompts bench/results/continued-draft-2026-12-01/freeform.jsonl --arms $arms"
  echo "  .venv/bin/python bench/drafts.py --batch-size 1 --rounds 3 --prompts bench/results/continued-draft-2026-12-01/freeform.jsonl --arms $arms"
  exit 0
fi

. bench/gpu_env.sh  # PY, carried, use_carried
if [ "$SMOKE" = 1 ]; then
  DEV=cpu SIZES="--samples 4 --val-samples 2 --max-new-tokens 8 --gen-batch-size 4 --gen-workers 1 --steps 2 --batch-size 4
    --eval-every 1 --eval-prompts 1 --eval-max-new-tokens 8 --eval-ks 1 --cost-rounds 1 --cost-prefix-len 16 --threads 2"
  GEN_MIN=${GEN_MIN:-1} TRAIN_MIN=${TRAIN_MIN:-1}
else
  # sizes for an H200 (not measured there yet): the budgets, not --samples or --steps, end each phase
  DEV=cuda SIZES="--samples 65536 --val-samples 256 --max-new-tokens 192 --gen-batch-size 256 --gen-workers 1
    --steps 3000 --batch-size 64 --eval-every 500 --eval-prompts 24 --eval-max-new-tokens 64 --eval-ks 1,2,3
    --cost-rounds 3 --cost-prefix-len 128"
  GEN_MIN=${GEN_MIN:-4} TRAIN_MIN=${TRAIN_MIN:-2.5}
fi
[ "$PRINT" = 1 ] && WORK=WORK || WORK=$(mktemp -d "${TMPDIR:-/tmp}/specviz-gpu-distill.XXXXXX")
CMD="$PY -m specviz distill --target default --device $DEV --dtype bfloat16 --out $WORK/draft --data $WORK/data
  --prompts mixed --topk 32 --gen-budget-min $GEN_MIN --time-budget-min $TRAIN_MIN $SIZES $DRAFT_ARGS
  --lr 0.001 --weight-decay 0.05 --seed 2"
CMD=$(echo $CMD)  # one line, as report.json records it
if [ "$PRINT" = 1 ]; then echo "$CMD"; exit 0; fi

[ -n "$OUT" ] || { echo "gpu_distill: --out DIR is required" >&2; exit 2; }
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1
LOG=$OUT/distill.log
if [ "$SMOKE" = 0 ] && carried; then use_carried "$LOG"; fi
{ echo "# gpu_distill $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# card: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "\$ $CMD"; } >> "$LOG"
$CMD >> "$LOG" 2>&1
rc=$?
echo "# distill exit $rc" >> "$LOG"
if [ -f "$WORK/draft/model.safetensors" ]; then
  tar -C "$WORK/draft" -czf "$WORK/draft.tgz" --exclude=data --exclude=train-state.pt .
  sha256sum < "$WORK/draft.tgz" | cut -d' ' -f1 > "$OUT/draft.tgz.sha256"
  split -b "$PART_BYTES" -d -a 1 "$WORK/draft.tgz" "$OUT/draft.tgz.part-"
  cp "$WORK/draft/report.json" "$OUT/report.json" 2>/dev/null
  echo "# sent: $(ls "$OUT" | tr '\n' ' ')" >> "$LOG"
fi
rm -rf "$WORK"
tail -5 "$LOG"
exit $rc
