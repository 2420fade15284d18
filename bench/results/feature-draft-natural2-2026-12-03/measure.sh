# After run.sh: the draft continued on the second natural set against the token draft (`default`) and the draft it
# continued (the shipped feature-draft-2l), on the 24 hand-written free-form prompts none of them saw, interleaved
# in one process at B = 1 and B = 8; its fp32 exactness; then chains and token trees of the token draft and of the
# new draft against regular decoding (bench/trees.py --drafts, B = 1). From the checkout, on an idle machine.
set -e
D=/work/fd9/draft R=bench/results/feature-draft-natural2-2026-12-03
P=bench/results/continued-draft-2026-12-01/freeform.jsonl
TOKEN=specviz/assets/draft-SmolLM2-135M-Instruct OLD=specviz/assets/feature-draft-2l-SmolLM2-135M-Instruct
cp $D/report.json $R/report.json
.venv/bin/python bench/drafts.py --prompts $P --batch-size 1 --rounds 3 \
  --arms token:$TOKEN:2,old:$OLD:1,old:$OLD:2,new:$D:1,new:$D:2 2>/dev/null | tee $R/drafts-b1.log
.venv/bin/python bench/drafts.py --prompts $P --batch-size 8 --rounds 3 \
  --arms token:$TOKEN:1,old:$OLD:1,new:$D:1 2>/dev/null | tee $R/drafts-b8.log
.venv/bin/python bench/exactness.py --max-new-tokens 32 --batch-sizes 1,8 --draft-lengths 1,4 --trees 1:1,2:6,4:12 --drafts $D 2>/dev/null | tee $R/exactness.log
.venv/bin/python bench/trees.py --prompts $P --batch-size 1 --rounds 3 --drafts token:$TOKEN,new:$D \
  --chains 2 --trees 3:2:6,3:4:12 2>/dev/null | tee $R/trees-b1.log
