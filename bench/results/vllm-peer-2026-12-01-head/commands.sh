# 2026-12-01 19:33-19:41 UTC, from a `git archive` of 35e7cd8 in /tmp/arch2 (.venv and .venv-vllm linked), idle
# 2-core machine, vmstat 5 beside it (vmstat.log: steal at most 1%).
.venv/bin/python bench/vllm_peer.py --modes "default/1>none,ngram" --slots 1,8:32 --rounds 3 --num-prompts 4 --max-new-tokens 32 > peer.log 2>&1
