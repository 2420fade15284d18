# Issue 19: the two-layer feature draft (feature-draft-2l, sha256 88190db7...) continued with a 24,576-token map
# (its 8,192 tokens plus the data's most emitted ones; the feature draft's head rows are the target's own, frozen,
# so the new rows need no training, but the body has only ever been trained to rank the 8k rows) on both natural
# sets' answers and the first run's text: /work/fd9/data (natural2, seed 10) plus --extra-data /work/fd8/data
# (natural, seed 9, and its teacher-forced Python-docs text). Coverage >= 97% of free-form tokens is the aim of
# the width; whether training at that width lifts free-form acceptance to 0.5 is the question. 700 steps at
# lr 7e-4 because the wide head makes a step ~5 s here (1.8 s at 8k). From a git archive
# of the commit that added --extra-data, with .venv linked in; distill.log is its log.
cd "${SRC:?a git archive of the checkout}"
exec .venv/bin/python -m specviz distill --target default --out /work/fd10/draft --data /work/fd9/data \
  --extra-data /work/fd8/data \
  --prompts natural2 --samples 4000 --val-samples 64 --max-new-tokens 128 --gen-batch-size 32 --gen-workers 2 --topk 32 \
  --kind feature --layers 2 --init-layers 29,29 --vocab 24576 \
  --vocab-from specviz/assets/feature-draft-2l-SmolLM2-135M-Instruct --init-from specviz/assets/feature-draft-2l-SmolLM2-135M-Instruct \
  --steps 700 --batch-size 16 --lr 0.0007 --weight-decay 0.05 --seed 10 \
  --eval-every 175 --eval-prompts 16 --eval-max-new-tokens 64 --eval-ks 1,2 --cost-rounds 3 --cost-prefix-len 128 \
  --threads 2 --device cpu --dtype bfloat16
