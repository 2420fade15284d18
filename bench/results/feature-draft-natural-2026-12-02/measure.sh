# After run.sh: the new draft's stored head rows dropped (they are the target's), then it against the
# shipped drafts on the 24 hand-written free-form prompts, interleaved in one process at B = 1 and
# B = 8, and its fp32 exactness. From the checkout (/work/main), on an idle machine. (Rounds and
# exactness cases sized to the session's end: a B = 1 round of five arms takes 6.5 minutes here.)
set -e
D=/work/fd6/draft R=bench/results/feature-draft-natural-2026-12-02
P=bench/results/continued-draft-2026-12-01/freeform.jsonl
TOKEN=specviz/assets/draft-SmolLM2-135M-Instruct FEAT=specviz/assets/feature-draft-SmolLM2-135M-Instruct
cp $D/report.json $R/report.json
.venv/bin/python bench/head_from_target.py $D 2>/dev/null | tee $R/head.log
.venv/bin/python bench/drafts.py --prompts $P --batch-size 1 --rounds 4 \
  --arms token:$TOKEN:2,feature:$FEAT:1,natural2:$D:1,natural2-k2:$D:2 2>/dev/null | tee $R/drafts-b1.log
.venv/bin/python bench/drafts.py --prompts $P --batch-size 8 --rounds 3 \
  --arms token:$TOKEN:1,feature:$FEAT:1,natural2:$D:1,natural2-k2:$D:2 2>/dev/null | tee $R/drafts-b8.log
.venv/bin/python bench/exactness.py --max-new-tokens 32 --batch-sizes 1,8 --draft-lengths 1,4 --drafts $D 2>/dev/null | tee $R/exactness.log
