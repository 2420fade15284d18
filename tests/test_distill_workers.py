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

ROOT = str(Path(__file__).resolve().parents[1])


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
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import time; from specviz.distill.data import exit_with_parent; exit_with_parent(0.1); time.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
"""


def test_a_worker_exits_soon_after_its_distill_is_killed():
    env = {**os.environ, "PYTHONPATH": ROOT}
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env)
    child = int(parent.stdout.readline())
    time.sleep(2)  # the child has imported specviz and started its watch
    os.kill(child, 0)  # alive while its parent is
    parent.send_signal(signal.SIGKILL)  # no finally, no cleanup in the parent: only the child's own watch
    parent.wait()
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the worker outlived its parent by 20 s")
