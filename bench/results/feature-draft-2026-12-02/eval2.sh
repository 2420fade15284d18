set -x
cd /tmp/fd/src2
S=specviz/assets/draft-SmolLM2-135M-Instruct
FF=bench/results/continued-draft-2026-12-01/freeform.jsonl
.venv/bin/python bench/drafts.py --batch-size 1 --rounds 3 --prompts $FF --arms shipped:$S:1,shipped:$S:2,feature:/tmp/fd/draft:1,feature:/tmp/fd/draft:2
.venv/bin/python bench/exactness.py --max-new-tokens 32 --drafts /tmp/fd/draft
