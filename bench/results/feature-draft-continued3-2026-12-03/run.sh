# The shipped two-layer natural feature draft (feature-draft-2l, sha256 4f3e8682...) continued once more, issue 19:
# fresh natural answers (seed 9, 4000 prompts) and 200k teacher-forced tokens of Python docs it has not seen
# (tutorial, reference, using, extending), 1500 steps. From a git archive of 3b18985 with .venv linked in; sized to
# finish inside one 180-minute session on a 2-core EPYC (ran 2026-12-03 from 16:20 UTC; distill.log is its log).
cd "${SRC:?a git archive of 3b18985}"
exec .venv/bin/python -m specviz distill --target default --out /work/fd8/draft --data /work/fd8/data \
  --prompts natural --samples 4000 --val-samples 64 --max-new-tokens 128 --gen-batch-size 32 --gen-workers 2 --topk 32 \
  --text /usr/share/doc/python3.11/html/tutorial --text /usr/share/doc/python3.11/html/reference \
  --text /usr/share/doc/python3.11/html/using --text /usr/share/doc/python3.11/html/extending \
  --text-tokens 200000 --text-chunk-tokens 256 --text-batch-size 8 \
  --kind feature --layers 2 --init-layers 29,29 --vocab 8192 \
  --vocab-from specviz/assets/feature-draft-2l-SmolLM2-135M-Instruct --init-from specviz/assets/feature-draft-2l-SmolLM2-135M-Instruct \
  --steps 1500 --batch-size 16 --lr 0.001 --weight-decay 0.05 --seed 9 \
  --eval-every 300 --eval-prompts 16 --eval-max-new-tokens 64 --eval-ks 1,2 --cost-rounds 3 --cost-prefix-len 128 \
  --threads 2 --device cpu --dtype bfloat16
