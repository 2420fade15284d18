# The two-layer feature draft (not shipped): run from a git archive of 018ddc2 with .venv linked in,
# after data-run.sh made /work/fd5/data (the same data flags; --steps 0 evaluated the shipped draft).
cd "${SRC:?a git archive of 018ddc2}"
exec .venv/bin/python -m specviz distill --target default --out /work/fd5/draft --data /work/fd5/data \
  --prompts mixed --samples 6144 --val-samples 64 --max-new-tokens 128 --gen-batch-size 32 --gen-workers 2 --topk 32 \
  --text /usr/share/doc/python3.11/html/library --text /usr/share/doc/python3.11/html/reference \
  --text /usr/share/doc/python3.11/html/using \
  --text-tokens 600000 --text-chunk-tokens 256 --text-batch-size 8 \
  --kind feature --layers 2 --init-layers 29,29 --vocab 8192 \
  --vocab-from specviz/assets/feature-draft-SmolLM2-135M-Instruct \
  --init-from specviz/assets/feature-draft-SmolLM2-135M-Instruct \
  --steps 1500 --batch-size 16 --lr 0.002 --weight-decay 0.05 --seed 5 \
  --eval-every 200 --eval-prompts 16 --eval-max-new-tokens 64 --eval-ks 1,2 --cost-rounds 3 --cost-prefix-len 128 \
  --threads 2 --device cpu --dtype bfloat16
