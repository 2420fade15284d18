"""Distillation data is written by one process per shard, and no worker outlives its distill."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specviz.common import SpecvizError
from specviz.distill.data import open_shard
import locations

ROOT = str(locations.ROOT)


def test_a_second_writer_of_a_shard_is_refused_and_the_first_keeps_writing(tmp_path):
    shard = tmp_path / "train-0.jsonl"
    with open_shard(shard) as f:
        f.write('{"sample": 0}\n')
        with pytest.raises(SpecvizError, match="being written by another process"):
            with open_shard(shard):
                pass
        f.write('{"sample": 1}\n')
    assert shard.read_text().splitlines() == ['{"sample": 0}', '{"sample": 1}']
    with open_shard(shard) as f:  # free again once the first writer is done
        f.write('{"sample": 2}\n')
    assert len(shard.read_text().splitlines()) == 3


PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import sys, time; from specviz.common import exit_with_parent; "
                          f"exit_with_parent({os.getpid()}, 0.1); time.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
"""


def running(pid: int) -> bool:
    """Whether pid is a live process (an exited one waiting to be reaped, a zombie, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")
@pytest.mark.parametrize("kill_after_s", [0.0, 3.0], ids=["while-it-starts", "once-it-runs"])
def test_a_worker_exits_soon_after_its_distill_is_killed(kill_after_s):
    """Killed while the worker still imports (the parent gone before its watch starts) or after."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env)
    child = int(parent.stdout.readline())
    time.sleep(kill_after_s)
    assert running(child)  # alive while its parent is
    parent.send_signal(signal.SIGKILL)  # no finally, no cleanup in the parent: only the child's own watch
    parent.wait()
    deadline = time.time() + 30
    while time.time() < deadline:
        if not running(child):
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the worker outlived its parent by 30 s")
