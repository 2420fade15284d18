#!/bin/bash
cd /work/main
echo "start $(date -u +%H:%M:%S)"; uptime
.venv/bin/python -m specviz calibrate --dtype bfloat16 --device cpu --batch-sizes 1,2,4,8 --k-max 4 > /tmp/h6/calib.log 2>&1
echo "calibrated $(date -u +%H:%M:%S)"; uptime
.venv/bin/python bench/continuous.py --requests 32 --batch-size 8 --max-new-tokens 48 --rounds 2 --ks 1,2 --out /tmp/h6/continuous.json > /tmp/h6/continuous.log 2>&1
echo "bench done $(date -u +%H:%M:%S)"; uptime
.venv/bin/python bench/join_prefill.py --batch-size 8 --prompt-tokens 45 --k 1 --rounds 3 > /tmp/h6/join.log 2>&1
echo "join done $(date -u +%H:%M:%S)"
