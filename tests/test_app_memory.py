"""Fifty consecutive runs through the app's run worker must not grow the process's memory by
more than 5% after the first (old runs, traces and caches are released)."""

import gc
import threading

import psutil
import pytest

from specviz.app.state import start_run
from specviz.runconfig import RunConfig


@pytest.mark.slow
def test_fifty_runs_do_not_grow_memory():
    lock = threading.Lock()
    cfg = RunConfig(prompts=["Repeat: red green blue red green blue", "Name three fruits."], batch_size=4,
                    draft="ngram", draft_length=3, max_new_tokens=8)
    proc = psutil.Process()
    rss = []
    for i in range(50):
        run = start_run(cfg, lock)
        run.join(120)
        assert run.status == "done", run.error
        assert len(run.trace["sequences"]) == 4
        del run
        gc.collect()
        rss.append(proc.memory_info().rss)
    growth = (rss[-1] - rss[0]) / rss[0]
    assert growth <= 0.05, f"RSS grew {growth:.1%} from run 1 to run 50 ({rss[0] >> 20} -> {rss[-1] >> 20} MiB)"
