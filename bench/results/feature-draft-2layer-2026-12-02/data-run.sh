# The data for run.sh, and the shipped feature draft evaluated on it (--steps 0): from a git archive
# of f7ba976 with .venv linked in.
cd "${SRC:?a git archive of f7ba976}"
exec .venv/bin/python -m specviz distill --target default --out /work/fd5/draft0 --data /work/fd5/data \
  --prompts mixed --samples 6144 --val-samples 64 --max-new-tokens 128 --gen-batch-size 32 --gen-workers 2 --topk 32 \
  --text /usr/share/doc/python3.11/html/library --text /usr/share/doc/python3.11/html/reference \
  --text /usr/share/doc/python3.11/html/using \
  --text-tokens 600000 --text-chunk-tokens 256 --text-batch-size 8 \
  --kind feature --layers 1 --init-layers random --vocab 8192 \
  --vocab-from specviz/assets/feature-draft-SmolLM2-135M-Instruct \
  --init-from specviz/assets/feature-draft-SmolLM2-135M-Instruct \
  --steps 0 --batch-size 16 --lr 0.0015 --weight-decay 0.05 --seed 5 \
  --eval-every 200 --eval-prompts 16 --eval-max-new-tokens 64 --eval-ks 1,2 --cost-rounds 3 --cost-prefix-len 128 \
  --threads 2 --device cpu --dtype bfloat16
