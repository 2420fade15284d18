# After run.sh: the wide-map draft (/work/fd10/draft) against the draft it continued (feature-draft-2l, 8k map) and
# the token draft (`default`), on the 24 hand-written free-form prompts none of them saw, interleaved in one
# process at B = 1 and B = 8; the free-form coverage of both maps (all 24 prompts x 128 tokens, and the two other
# sets of bench/vocab_coverage.py); the wide draft's fp32 exactness; then chains and token trees of all three
# against regular decoding (bench/trees.py --drafts, B = 1). From the checkout, on an idle machine.
set -e
D=/work/fd10/draft R=bench/results/feature-draft-wide-2026-12-03
P=bench/results/continued-draft-2026-12-01/freeform.jsonl
TOKEN=specviz/assets/draft-SmolLM2-135M-Instruct OLD=specviz/assets/feature-draft-2l-SmolLM2-135M-Instruct
cp $D/report.json $R/report.json
.venv/bin/python bench/drafts.py --prompts $P --batch-size 1 --rounds 3 \
  --arms token:$TOKEN:2,old:$OLD:1,old:$OLD:2,wide:$D:1,wide:$D:2 2>/dev/null | tee $R/drafts-b1.log
.venv/bin/python bench/drafts.py --prompts $P --batch-size 8 --rounds 3 \
  --arms token:$TOKEN:1,old:$OLD:1,wide:$D:1 2>/dev/null | tee $R/drafts-b8.log
.venv/bin/python bench/vocab_coverage.py --no-cost --sizes 8192,24576 --cache /tmp/fd10-answers.json --threads 2 \
  --drafts $OLD,$D 2>/dev/null | tee $R/coverage.log
.venv/bin/python bench/exactness.py --max-new-tokens 32 --batch-sizes 1,8 --draft-lengths 1,4 --trees 1:1,2:6,4:12 --drafts $D 2>/dev/null | tee $R/exactness.log
.venv/bin/python bench/trees.py --prompts $P --batch-size 1 --rounds 3 --drafts token:$TOKEN,old:$OLD,wide:$D \
  --chains 2 --trees 3:2:6,3:4:12 2>/dev/null | tee $R/trees-b1.log
