#!/usr/bin/env bash
# GPU lease, call 1 of 2 (see bench/lease_part2.sh). The packaged GGUF (94 MB) is larger than
# what one call may carry (64 MiB), so call 1 carries its first half and the wheels, and does the
# checks that need no model: environment, kernel tests on CUDA, quick kernel benchmark, and a
# probe that sizes call 2's data generation and training.
#   run: mkdir -p /tmp/m; cp .devmodel1/p1 /tmp/m/; pip install --target /tmp/site .whl/*.whl;
#        bash bench/lease_part1.sh 2>&1 | tee $OUT/part1.log
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site TRITON_INTERPRET=0
if ! python3 -c "import transformers" 2>/dev/null; then
  rm -rf /tmp/site/transformers*; echo "!! carried transformers does not import here: using the image's"
fi
python3 -c "import sys, torch, transformers, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'triton', triton.__version__)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
echo "== probe (random SmolLM2-shaped model: generation and training step timings)"
timeout 60 python3 bench/gpu_probe.py --batch-sizes 128,512,1024 --new-tokens 32 --json /tmp/m/probe.json
cp /tmp/m/probe.json "${OUT:-/tmp}/" 2>/dev/null
echo "== kernel + sampling tests on CUDA"
timeout 90 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernels.py tests/test_sampling.py
echo "== kernel benchmark (quick: V = 128256)"
timeout 60 python3 bench/bench_kernels.py --quick
echo "== part 1 done"
