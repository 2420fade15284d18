# The shipped two-layer feature draft (feature-draft-2l, sha256 ca030efd...) continued on answers to prompts it has
# never seen, issue 19: specviz/prompts/natural2.jsonl (the second natural set: more prompts instead of more answers
# to the first set's 1,359, which the draft has now answered about 9,000 times), no text this time, so the effect of
# prompt variety stands alone; held out: the first set's 64 held-out prompts, as in the runs before (comparable
# agreement). From a git archive of the commit that added natural2.jsonl, with .venv linked in; distill.log is its log.
cd "${SRC:?a git archive of the checkout}"
exec .venv/bin/python -m specviz distill --target default --out /work/fd9/draft --data /work/fd9/data \
  --prompts natural2 --samples 4000 --val-samples 64 --max-new-tokens 128 --gen-batch-size 32 --gen-workers 2 --topk 32 \
  --kind feature --layers 2 --init-layers 29,29 --vocab 8192 \
  --vocab-from specviz/assets/feature-draft-2l-SmolLM2-135M-Instruct --init-from specviz/assets/feature-draft-2l-SmolLM2-135M-Instruct \
  --steps 1200 --batch-size 16 --lr 0.001 --weight-decay 0.05 --seed 10 \
  --eval-every 300 --eval-prompts 16 --eval-max-new-tokens 64 --eval-ks 1,2 --cost-rounds 3 --cost-prefix-len 128 \
  --threads 2 --device cpu --dtype bfloat16
