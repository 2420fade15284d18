cd /tmp/ft/src
exec .venv/bin/python -m specviz distill --target default --out /tmp/ft/draft --data /tmp/ft/data \
  --prompts mixed --samples 3072 --val-samples 64 --max-new-tokens 128 --gen-batch-size 32 --gen-workers 2 --topk 32 \
  --text /usr/share/doc/python3.11/html/tutorial --text /usr/share/doc/python3.11/html/faq \
  --text /usr/share/doc/python3.11/html/howto --text /usr/share/debian-reference/debian-reference.en.txt.gz \
  --text-tokens 400000 --text-chunk-tokens 256 --text-batch-size 8 \
  --init-from specviz/assets/draft-SmolLM2-135M-Instruct --vocab 8192 --vocab-from specviz/assets/draft-SmolLM2-135M-Instruct \
  --layers 2 --init-layers first --steps 800 --batch-size 32 --lr 0.001 --weight-decay 0.05 --seed 1 \
  --eval-every 100 --eval-prompts 16 --eval-max-new-tokens 64 --eval-ks 1,2 --cost-rounds 3 --cost-prefix-len 128 \
  --threads 2 --device cpu --dtype bfloat16
