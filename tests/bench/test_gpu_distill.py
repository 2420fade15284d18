"""bench/gpu_distill.sh: issue 19's GPU route runs end to end (here on tiny sizes on the CPU), and the
draft it sends back in parts joins into a loadable draft with the recorded, seeded command."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import locations

pytestmark = pytest.mark.slow  # the GPU distill smoke on the CPU: ~50 s

ROOT = locations.ROOT
SCRIPT = ROOT / "bench" / "gpu_distill.sh"


def test_the_cpu_smoke_sends_a_draft_back_in_parts_that_join_into_a_loadable_draft(tmp_path):
    from specviz.models.loading import default_gguf_path

    try:
        default_gguf_path()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no packaged model: {e}")
    out = tmp_path / "out"
    env = dict(os.environ, SPECVIZ_CACHE=os.environ.get("SPECVIZ_CACHE", str(Path.home() / ".cache" / "specviz")))
    r = subprocess.run(["bash", str(SCRIPT), "--cpu-smoke", "--out", str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    files = sorted(out.iterdir())
    # what a device call may send back: at most 8 files of at most 16 MiB each, 64 MiB together
    assert len(files) <= 8
    assert all(f.stat().st_size <= 16 * 2**20 for f in files)
    assert sum(f.stat().st_size for f in files) <= 64 * 2**20
    command = json.loads((out / "report.json").read_text())["command"]
    for flag in ("--kind feature", "--init-from specviz/assets/feature-draft-2l-SmolLM2-135M-Instruct", "--seed 2",
                 "--layers 2",
                 "--prompts mixed"):
        assert flag in command

    dest = tmp_path / "draft"
    j = subprocess.run(["bash", str(SCRIPT), "--join", str(out)], cwd=ROOT, env=dict(env, DEST=str(dest)),
                       capture_output=True, text=True, timeout=120)
    assert j.returncode == 0, j.stderr
    from specviz.models.distilled import load_distilled_draft
    from specviz.run import get_model

    draft = load_distilled_draft(dest, get_model("default", "cpu", "float32"))
    assert draft.kind == "feature" and draft.model.lm_head.weight.shape[0] == 24576  # the asset it continues: its map, no wider

    # a part cut short on the way is refused in one line, not unpacked half
    part = sorted(out.glob("draft.tgz.part-*"))[-1]
    part.write_bytes(part.read_bytes()[:-1])
    j = subprocess.run(["bash", str(SCRIPT), "--join", str(out)], cwd=ROOT, env=dict(env, DEST=str(tmp_path / "d2")),
                       capture_output=True, text=True, timeout=120)
    assert j.returncode == 2 and "do not join" in j.stderr


def test_kind_token_continues_the_token_draft_with_the_wider_head_and_other_kinds_are_refused():
    r = subprocess.run(["bash", str(SCRIPT), "--print-command"], cwd=ROOT, env=dict(os.environ, KIND="token"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for flag in ("--kind token", "--init-from specviz/assets/draft-SmolLM2-135M-Instruct", "--vocab 24576",
                 "--device cuda", "--gen-budget-min 4", "--seed 2"):
        assert flag in r.stdout
    bad = subprocess.run(["bash", str(SCRIPT), "--print-command"], cwd=ROOT, env=dict(os.environ, KIND="tree"),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "KIND must be feature or token" in bad.stderr
