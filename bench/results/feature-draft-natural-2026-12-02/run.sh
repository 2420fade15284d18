# The two-layer feature draft trained on natural prompts alone, three answers each (issue 19): the shipped
# one-layer feature draft with a second layer on top that starts as an identity. From a git archive of
# 6e702e8 with .venv linked in. (Sized to finish inside one 180-minute session on a 2-core Xeon; an
# earlier launch at 6,795 samples and 2,000 steps, and a first launch of this one, were lost with
# their machines. This one ran 2026-12-03 06:19-08:00 UTC; distill.log is its log.)
cd "${SRC:?a git archive of 6e702e8}"
exec .venv/bin/python -m specviz distill --target default --out /work/fd6/draft --data /work/fd6/data \
  --prompts natural --samples 4077 --val-samples 64 --max-new-tokens 128 --gen-batch-size 32 --gen-workers 2 --topk 32 \
  --kind feature --layers 2 --init-layers 29,29 --vocab 8192 \
  --vocab-from specviz/assets/feature-draft-SmolLM2-135M-Instruct --init-from specviz/assets/feature-draft-SmolLM2-135M-Instruct \
  --steps 1500 --batch-size 16 --lr 0.0015 --weight-decay 0.05 --seed 7 \
  --eval-every 250 --eval-prompts 16 --eval-max-new-tokens 64 --eval-ks 1,2 --cost-rounds 3 --cost-prefix-len 128 \
  --threads 2 --device cpu --dtype bfloat16
