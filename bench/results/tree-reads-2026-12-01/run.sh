# Tree steps before (a7b60de) and after (44e7b25) the one-read change, each from a `git archive`
# in /tmp/ab/<commit> (with .venv linked), alternating per round on the idle CPU.
for r in 1 2 3 4; do
  for c in a7b60de 44e7b25; do
    for b in 1 8; do
      echo "== round $r commit $c B=$b"
      (cd /tmp/ab/$c && .venv/bin/python -m specviz bench --draft default --draft-length 3 --tree-width 2 \
        --tree-nodes 6 --batch-size $b --max-new-tokens 32 --no-peer --repeats 1 --prompts bench/prompts.txt 2>&1 \
        | grep -E "^(regular|speculative)|per step")
    done
  done
done
