# The stacked draft (shipped as specviz/assets/feature-draft-2l-SmolLM2-135M-Instruct): the two-layer draft of run.sh
# continued on natural prompts. From a git archive of 97e8fc1 with .venv linked in, after run.sh wrote /work/fd5/draft.
cd "${SRC:?a git archive of 97e8fc1}"
exec .venv/bin/python -m specviz distill --target default --out /work/fd5/draftC --data /work/fd5/dataB \
  --prompts natural --samples 2718 --val-samples 64 --max-new-tokens 128 --gen-batch-size 32 --gen-workers 2 --topk 32 \
  --kind feature --layers 2 --init-layers 29,29 --vocab 8192 \
  --vocab-from /work/fd5/draft --init-from /work/fd5/draft \
  --steps 500 --batch-size 16 --lr 0.001 --weight-decay 0.05 --seed 6 \
  --eval-every 100 --eval-prompts 16 --eval-max-new-tokens 64 --eval-ks 1,2 --cost-rounds 3 --cost-prefix-len 128 \
  --threads 2 --device cpu --dtype bfloat16
