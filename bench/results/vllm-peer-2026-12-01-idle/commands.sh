# The peer table rerun with nothing else on the machine (2026-12-01 14:19-14:23 UTC, commit 0d49d71,
# load average ~1.5 from the benchmark itself): the same command as vllm-peer-2026-12-01, no lock needed.
timeout 1200 .venv/bin/python bench/vllm_peer.py --modes ngram,regular --slots 1,8,8:32 --rounds 2 --num-prompts 4 --max-new-tokens 32 --no-compile
