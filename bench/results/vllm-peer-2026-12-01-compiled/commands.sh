# 2026-12-01, the 2-core CPU, idle (vmstat: no steal), each from a `git archive` copy of the named commit
.venv/bin/python bench/vllm_peer.py --modes ngram,regular --slots 1,8,8:32 --rounds 3 --num-prompts 4 --max-new-tokens 32   # peer-*.log
.venv/bin/python bench/packed_weights.py --forwards                         # packed-forwards-a2f4e1e.txt
.venv/bin/python bench/packed_weights.py --batch-size 8 --rounds 4          # packed-B8-7717621.txt
.venv/bin/python bench/packed_weights.py --batch-size 1 --rounds 4          # packed-B1-7717621.txt
