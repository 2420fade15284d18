for r in 1 2 3 4 5 6; do for c in 3757cd2 e8975a0; do
    (cd /tmp/q_$c && .venv/bin/python -m specviz run --draft ngram --mode speculative --draft-length 4 --batch-size 8 --requests 32 \
       --max-new-tokens 32 --prompts /tmp/p4.txt --out /tmp/vres/u_${c}_$r.json > /dev/null 2>&1)
done; done
python3 - <<'PY'  # (as first run: t["wall_s"]; the summary in out2.log uses t["summary"]["tokens_per_s"])
import json, statistics
rows = {}
for c in ("3757cd2", "e8975a0"):
    for r in range(1, 7):
        t = json.load(open(f"/tmp/vres/u_{c}_{r}.json"))
        toks = sum(len(q["output_token_ids"]) for q in t["sequences"])
        rows.setdefault(c, []).append((toks / t["wall_s"], statistics.median(x["t_verify"] for x in t["steps"]),
                                       [q["output_token_ids"] for q in t["sequences"]]))
for c, v in rows.items():
    print(c, "tok/s", [round(x[0], 1) for x in v], "verify ms", [round(1e3 * x[1], 1) for x in v])
ratios = [a[0] / b[0] for a, b in zip(rows["e8975a0"], rows["3757cd2"])]
print("after/before tok/s per round", [round(x, 3) for x in ratios], "median", round(statistics.median(ratios), 3))
print("greedy identical:", all(a[2] == b[2] for a, b in zip(rows["e8975a0"], rows["3757cd2"])))
PY
