cd /tmp/fd/src
exec .venv/bin/python -m specviz distill --target default --out /tmp/fd/draft --data /tmp/fd/data \
  --prompts mixed --samples 9216 --val-samples 64 --max-new-tokens 128 --gen-batch-size 32 --gen-workers 2 --topk 32 \
  --text /usr/share/doc/python3.11/html/tutorial --text /usr/share/doc/python3.11/html/faq \
  --text /usr/share/doc/python3.11/html/howto --text /usr/share/debian-reference/debian-reference.en.txt.gz \
  --text-tokens 300000 --text-chunk-tokens 256 --text-batch-size 8 \
  --kind feature --layers 1 --init-layers random --vocab 8192 \
  --steps 2500 --batch-size 16 --lr 0.003 --weight-decay 0.05 --seed 3 \
  --eval-every 250 --eval-prompts 16 --eval-max-new-tokens 64 --eval-ks 1,2 --cost-rounds 3 --cost-prefix-len 128 \
  --threads 2 --device cpu --dtype bfloat16
