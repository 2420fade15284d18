# 2026-12-01 18:40-18:45 UTC, from a `git archive` of e1b3c8e in /tmp/arch (.venv and .venv-vllm linked), idle
# 2-core machine, vmstat 5 beside it (vmstat.log: 0% steal in every sample it wrote).
.venv/bin/python bench/vllm_peer.py --modes "default/1>none,default/2>none" --slots 1,8 --rounds 3 --num-prompts 4 --max-new-tokens 32 > peer.log 2>&1
