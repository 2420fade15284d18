"""bench/gpu_check.sh, the one prepared GPU command, in its CPU smoke mode: every step's real command
line on tiny random-weight models (the path a bare GPU host without the packaged model takes), one
results file with every step's section, and a step that times out does not stop the ones after it."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specviz.analysis.costs import Calibration
from specviz.analysis.trace import TRACE_VERSION
from specviz.common import cache_dir
import locations

pytestmark = pytest.mark.slow  # the whole prepared GPU command on tiny CPU models: ~75 s

ROOT = locations.ROOT
STEPS = ["synthetic-models", "exactness-real", "exactness-fp32", "exactness-bf16", "exactness-fp32-graphs",
         "exactness-bf16-graphs", "kernel-tests", "graph-tests", "host-overhead", "bench-real", "bench-B2-ngram",
         "bench-B2-ngram-graphs", "trace-nvml", "calibrate", "calibrate-synthetic-7b", "kernel-bench", "trees", "continuous"]


def statuses(md: str) -> dict:
    """step name -> its status in the summary table."""
    table = md.split("## Summary", 1)[1]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| \d+\. (\S+) \| (.*?) \| \d+ \|$", table, re.M)}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    before = set((cache_dir() / "calibration").glob("*"))
    env = {**os.environ, "PY": sys.executable, "GPU_CHECK_LIMITS": "exactness-bf16=1"}  # this step is cut at 1 s
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--cpu-smoke", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    md = (out / "gpu-check.md").read_text()
    return proc, out, md, before


def test_results_file_has_a_section_and_a_status_for_every_step(smoke):
    proc, out, md, _ = smoke
    for name in STEPS:
        assert re.search(rf"^## \d+\. {re.escape(name)}\b", md, re.M), f"no section for {name}\n{md[-3000:]}"
    assert set(statuses(md)) == set(STEPS)
    assert "SYNTHETIC" in md and "CPU SMOKE" in md
    assert "\n- commit: " in md and "real_model: " in md


def test_a_timed_out_step_is_recorded_and_the_steps_after_it_still_run(smoke):
    proc, out, md, _ = smoke
    st = statuses(md)
    assert st["exactness-bf16"].startswith("TIMED OUT after 1 s")
    for name in ["exactness-fp32", "synthetic-models", "bench-B2-ngram", "trace-nvml", "calibrate",
                 "calibrate-synthetic-7b", "kernel-tests", "exactness-fp32-graphs", "exactness-bf16-graphs",
                 "graph-tests", "bench-B2-ngram-graphs"]:
        assert st[name] == "ok", (name, st[name])
    if not torch.cuda.is_available():  # the kernel benchmark needs CUDA: it fails, and says why in one line
        assert st["kernel-bench"] == "FAILED (exit 1)" and "no CUDA device found" in md
    assert proc.returncode == 1, proc.stderr[-2000:]  # a failed step makes the whole check exit 1


def test_steps_that_need_real_weights_say_they_were_skipped(smoke):
    st = statuses(smoke[2])
    assert st["exactness-real"].startswith("skipped: no real model")
    assert st["bench-real"].startswith("skipped: no real model")


def test_the_trace_and_both_calibrations_come_back_beside_the_results(smoke):
    proc, out, md, before = smoke
    trace = json.loads((out / "trace-nvml.json").read_text())
    assert trace["version"] == TRACE_VERSION and trace["steps"] and isinstance(trace["telemetry"], list)
    cal = Calibration.from_json(json.loads((out / "calibration-synthetic-tiny.json").read_text()))
    assert cal.target == "synthetic:tiny" and cal.draft == "synthetic:tiny-draft"
    assert len(cal.samples["target"]) == 2 * 3 and all(t > 0 for _, _, t in cal.samples["target"])
    pair = Calibration.from_json(json.loads((out / "calibration-pair.json").read_text()))
    assert "synthetic-tiny" in pair.target
    assert set((cache_dir() / "calibration").glob("*")) == before  # smoke calibrations never reach the user's cache
