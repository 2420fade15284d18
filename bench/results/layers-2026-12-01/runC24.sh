#!/bin/bash
# issue 19: a 24,576-token head against runC2.sh's 8,192, the same data and seed as B (runB.sh), code of 35e7cd8 (/tmp/arch2: --vocab-from), idle machine, 2 threads
cd /tmp/arch2
export PYTHONPATH=/tmp/arch2
date
/work/main/.venv/bin/python -m specviz distill --target default --out /tmp/h8/C24 --data /tmp/h8/data \
  --samples 128 --val-samples 32 --max-new-tokens 128 --gen-batch-size 32 --gen-workers 2 --topk 32 --steps 200 \
  --batch-size 16 --lr 0.003 --weight-decay 0.05 --vocab 24576 --vocab-from /work/main/specviz/assets/draft-SmolLM2-135M-Instruct --kind token --layers 2 --init-layers first --seed 0 \
  --eval-every 50 --eval-prompts 16 --eval-max-new-tokens 64 --eval-ks 1 --cost-rounds 1 --cost-prefix-len 128 \
  --threads 2 --device cpu --dtype bfloat16 --text /usr/share/doc/python3.11/html/tutorial --text /usr/share/doc/python3.11/html/faq --text /usr/share/doc/python3.11/html/howto --text /usr/share/debian-reference/debian-reference.en.txt.gz --text-tokens 60000 --text-chunk-tokens 256 --text-batch-size 8
date
