"""An interrupted calibration keeps the timing points it measured, marked partial, and the same command
measures only the rest; nothing takes the partial record for a cost model."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import specviz.measure.calibrate as cal_mod
from specviz.analysis.costs import calibration_path, partial_note, read_calibration
from specviz.cli import main
from specviz.common import cache_dir
import locations

ROOT = locations.ROOT
PAIR = ("SmolLM2-135M-Instruct", "ngram", "cpu", "torch.float32")
ARGS = ["calibrate", "--draft", "ngram", "--device", "cpu", "--dtype", "float32"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A scratch cache that sees the converted packaged model (no second conversion) and nothing else."""
    real = cache_dir() / PAIR[0]
    if real.is_dir():
        (tmp_path / PAIR[0]).symlink_to(real)
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    return tmp_path


def _partial(cache: Path) -> Path:
    return cache / "calibration" / "partial" / calibration_path(*PAIR).name


def test_ctrl_c_mid_calibration_keeps_the_measured_points_marked_partial(cache):
    env = dict(os.environ, SPECVIZ_PROGRESS="1", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    # 45 forwards and 5 short runs: seconds of work still ahead when the first point is done
    proc = subprocess.Popen([sys.executable, "-m", "specviz", *ARGS, "--batch-sizes", "1,2,4,8,16", "--k-max", "8",
                             "--prefix-len", "64"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        os.set_blocking(proc.stderr.fileno(), False)
        seen, t0 = b"", time.monotonic()
        while not re.search(rb"calibrate: +\d+%\|[^|]*\| *[1-9]\d*/45", seen):  # the bar shows a point done
            assert proc.poll() is None and time.monotonic() - t0 < 120, seen.decode(errors="replace")
            seen += proc.stderr.read() or b""
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=60)
    finally:
        proc.kill()
    err = (seen + rest).decode(errors="replace")
    assert proc.returncode == 130 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    m = re.fullmatch(r"specviz: interrupted \(SIGINT\) after (\d+) of 50 timing points: they are in (\S+), marked "
                     r"partial \(no cost model is fitted on them\); the same command again measures only the (\d+) left",
                     last)
    assert m and Path(m.group(2)) == _partial(cache), last
    kept = int(m.group(1))
    rec = json.loads(_partial(cache).read_text())
    assert rec["partial"] is True and rec["target_cost"] is None and rec["draft_cost"] is None
    assert (rec["target"], rec["draft"], rec["device"], rec["dtype"]) == ("SmolLM2-135M-Instruct", "ngram", "cpu", "float32")
    done = [(b, n) for b, n, _ in rec["samples"]["target"]]
    assert 1 <= len(done) == kept and all(t > 0 for *_, t in rec["samples"]["target"])
    assert done + [tuple(p) for p in rec["missing"]["target"]] == [(b, n) for b in (1, 2, 4, 8, 16) for n in range(1, 10)]
    assert rec["missing"]["overhead"] == [1, 2, 4, 8, 16] and int(m.group(3)) == 50 - kept
    assert not calibration_path(*PAIR).exists()  # no whole record was made up from part of the grid
    assert read_calibration(_partial(cache)) is None  # and the partial one is no cost model to anyone reading it
    assert not list(_partial(cache).parent.glob(".*.tmp"))


def test_the_same_command_again_measures_only_the_points_left_and_drops_the_partial_record(cache, monkeypatch, capsys):
    args = [*ARGS, "--batch-sizes", "1,2", "--k-max", "1", "--prefix-len", "8"]
    real_forward, timed = cal_mod.time_forward, []

    def forward(loaded, b, n, *rest):
        if len(timed) == stop_at:  # a real Ctrl-C as the third point starts
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        timed.append((b, n))
        return real_forward(loaded, b, n, *rest)

    monkeypatch.setattr(cal_mod, "time_forward", forward)
    stop_at = 2
    assert main(args) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "specviz: interrupted (SIGINT) after 2 of 6 timing points: they are in ")
    rec = json.loads(_partial(cache).read_text())
    assert rec["missing"] == {"target": [[2, 1], [2, 2]], "draft": [], "overhead": [1, 2]}

    class Pair:  # what run.make_decoder warns about for a cost-aware policy with no calibration
        name, device, dtype = "SmolLM2-135M-Instruct", "cpu", "torch.float32"

    proposer = type("P", (), {"name": "ngram"})()
    assert "kept 2 timing point(s)" in partial_note(Pair, proposer) and "4 still missing" in partial_note(Pair, proposer)

    timed.clear()
    stop_at = None
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert f"resuming an interrupted calibration: 2 timing point(s) kept from {_partial(cache)}" in err
    assert timed == [(2, 1), (2, 2)]  # only the points not measured before
    whole = read_calibration(calibration_path(*PAIR))
    assert whole is not None and whole.samples["target"][:2] == rec["samples"]["target"]
    assert [(b, n) for b, n, _ in whole.samples["target"]] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert set(whole.overhead) == {"1", "2"} and f"written to {calibration_path(*PAIR)}" in out
    assert set(whole.regular_overhead) == set(whole.draft_overhead) == {"1", "2"}  # each step's parts, per b
    assert "engine overhead per regular step: B=1: " in out
    assert not _partial(cache).exists() and partial_note(Pair, proposer) == ""  # done: the next one measures afresh


def test_ctrl_c_in_a_sweeps_calibration_says_its_points_are_kept(cache, monkeypatch, capsys):
    real_forward, timed = cal_mod.time_forward, []

    def forward(loaded, b, n, *rest):
        if len(timed) == 1:  # a real Ctrl-C as the second point starts, before any cell
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        timed.append((b, n))
        return real_forward(loaded, b, n, *rest)

    monkeypatch.setattr(cal_mod, "time_forward", forward)
    assert main(["sweep", "--prompt", "a b c a b c", "--draft", "ngram", "--batch-sizes", "1", "--draft-lengths", "1",
                 "--max-new-tokens", "4", "--device", "cpu", "--dtype", "float32", "--recalibrate",
                 "--out-dir", str(cache / "sw")]) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (f"specviz: interrupted (SIGINT) in the sweep's calibration after 1 of 3 timing points: they are in "
                    f"{_partial(cache)}, marked partial (no cost model is fitted on them); the same command again "
                    "measures only the 2 left")
    assert [(b, n) for b, n, _ in json.loads(_partial(cache).read_text())["samples"]["target"]] == [(1, 1)]
