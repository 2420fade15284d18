#!/bin/bash
# Run from an archive of commit cd0505c (git archive cd0505c | tar -x -C SRC; ln -s <checkout>/.venv SRC/.venv),
# on an idle machine; writes into OUT. 2026-12-01 13:29-13:37 UTC, 2-core CPU, load average 1.2-2.1.
SRC=${SRC:-.}; OUT=${OUT:-/tmp/continuous-idle}; mkdir -p "$OUT"; cd "$SRC"
echo "start $(date -u +%H:%M:%S)"; uptime
.venv/bin/python -m specviz calibrate --dtype bfloat16 --device cpu --batch-sizes 1,2,4,8 --k-max 4 > "$OUT/calib.log" 2>&1
echo "calibrated $(date -u +%H:%M:%S) rc $?"; uptime
.venv/bin/python bench/continuous.py --requests 32 --batch-size 8 --max-new-tokens 64 --rounds 5 --ks 1,2 --out "$OUT/continuous.json" > "$OUT/continuous.log" 2>&1
echo "bench done $(date -u +%H:%M:%S) rc $?"; uptime
