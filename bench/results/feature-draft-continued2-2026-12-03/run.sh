# The shipped two-layer natural feature draft (feature-draft-2l) continued on fresh natural answers (seed 8)
# and 300k teacher-forced tokens of Python docs (library, faq, howto), issue 19. From a git archive of 8aee1e8
# with .venv linked in; sized to finish inside one 180-minute session on a 2-core EPYC (ran 2026-12-03
# 13:44 UTC on; distill.log is its log).
cd "${SRC:?a git archive of 8aee1e8}"
exec .venv/bin/python -m specviz distill --target default --out /work/fd7/draft --data /work/fd7/data \
  --prompts natural --samples 3000 --val-samples 64 --max-new-tokens 128 --gen-batch-size 32 --gen-workers 2 --topk 32 \
  --text /usr/share/doc/python3.11/html/library --text /usr/share/doc/python3.11/html/faq \
  --text /usr/share/doc/python3.11/html/howto --text-tokens 300000 --text-chunk-tokens 256 --text-batch-size 8 \
  --kind feature --layers 2 --init-layers 29,29 --vocab 8192 \
  --vocab-from specviz/assets/feature-draft-2l-SmolLM2-135M-Instruct --init-from specviz/assets/feature-draft-2l-SmolLM2-135M-Instruct \
  --steps 1200 --batch-size 16 --lr 0.001 --weight-decay 0.05 --seed 8 \
  --eval-every 300 --eval-prompts 16 --eval-max-new-tokens 64 --eval-ks 1,2 --cost-rounds 3 --cost-prefix-len 128 \
  --threads 2 --device cpu --dtype bfloat16
