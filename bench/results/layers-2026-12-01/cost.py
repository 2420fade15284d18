# c = T_draft / T_target for the drafts under /tmp/h8 named on the command line, 7 interleaved rounds:
#   python cost.py C2 C3     (3 layers against 2)
#   python cost.py C8 C24    (a 24,576-token head against 8,192)
import sys, statistics
sys.path.insert(0, '/work/main')
from specviz.measure.calibrate import time_forward
from specviz.models.distilled import load_distilled_draft
from specviz.models.loading import get_model
t = get_model("default", "cpu", "bfloat16")
d = {n: load_distilled_draft(f"/tmp/h8/{n}", t) for n in sys.argv[1:]}
times = {}
for r in range(7):
    for b in (1, 8):
        times.setdefault((b, "target"), []).append(time_forward(t, b, 1, 128))
        for n, m in d.items():
            times.setdefault((b, n), []).append(time_forward(m, b, 1, 128))
for b in (1, 8):
    tt = statistics.median(times[(b, "target")])
    print(f"B={b}: target {1e3*tt:.1f} ms; " + "; ".join(f"{n} {1e3*statistics.median(times[(b, n)]):.1f} ms, c = "
          f"{statistics.median(x / y for x, y in zip(times[(b, n)], times[(b, 'target')])):.3f}" for n in d))
