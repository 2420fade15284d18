set -x
cd /tmp/fd/src2
S=specviz/assets/draft-SmolLM2-135M-Instruct
FF=bench/results/continued-draft-2026-12-01/freeform.jsonl
.venv/bin/python bench/wide_head.py --feature /tmp/fd/draft /tmp/fd/draft24k --size 24576
.venv/bin/python bench/vocab_coverage.py --sizes 24576 --no-cost --cache /tmp/fd/answers.json --drafts /tmp/fd/draft,/tmp/fd/draft24k
.venv/bin/python bench/drafts.py --batch-size 8 --rounds 3 --prompts $FF --arms shipped:$S:1,shipped:$S:2,feature:/tmp/fd/draft:1,feature:/tmp/fd/draft:2,feature24k:/tmp/fd/draft24k:1
.venv/bin/python bench/drafts.py --batch-size 1 --rounds 3 --arms shipped:$S:1,shipped:$S:2,feature:/tmp/fd/draft:1,feature:/tmp/fd/draft:2,feature24k:/tmp/fd/draft24k:2
