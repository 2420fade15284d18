# A second interleaved run of the shipped two-layer draft against the token draft (`default`), after measure.sh,
# to check that its lead at B = 8 and B = 1 repeats before `default` is switched. From the checkout at 26cb118, idle.
set -e
R=bench/results/feature-draft-continued3-2026-12-03 P=bench/results/continued-draft-2026-12-01/freeform.jsonl
TOKEN=specviz/assets/draft-SmolLM2-135M-Instruct NEW=specviz/assets/feature-draft-2l-SmolLM2-135M-Instruct
.venv/bin/python bench/drafts.py --prompts $P --batch-size 8 --rounds 3 \
  --arms token:$TOKEN:1,new:$NEW:1 2>/dev/null | tee $R/confirm-b8.log
.venv/bin/python bench/drafts.py --prompts $P --batch-size 1 --rounds 3 \
  --arms token:$TOKEN:2,new:$NEW:1,new:$NEW:2 2>/dev/null | tee $R/confirm-b1.log
