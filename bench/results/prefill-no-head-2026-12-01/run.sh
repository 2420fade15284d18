# TTFT A/B: before 759bc44 (prefill computes its last logits), after 8fcbdaf (no output layer in prefills)
for r in 1 2 3 4 5 6; do for c in 759bc44 8fcbdaf; do
  d=/tmp/q_$c; [ -d $d ] || d=/tmp/h_$c
  (cd $d && .venv/bin/python -m specviz run --draft default --draft-length 1 --batch-size 1 --requests 4 --max-new-tokens 32 \
     --prompts /tmp/p4.txt --out /tmp/tres/t_${c}_$r.json > /dev/null 2>&1)
done; done
