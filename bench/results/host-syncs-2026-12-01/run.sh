for r in 1 2 3 4 5 6; do for c in 197a63f 8079ba3; do
  echo "== round $r commit $c $(date -u +%H:%M:%S)"; (cd /tmp/h_$c && .venv/bin/python bench/host_overhead.py --threads 2 --draft-lengths 0,2)
done; done
