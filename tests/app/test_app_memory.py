"""Consecutive runs through the app's device process must not grow memory, in the server process
or in the device process, by more than 5% from the second run to the last (old runs, traces and
caches are released; the first run loads the model and warms allocators)."""

import gc
import threading

import psutil
import pytest

from specviz.device import worker
from specviz.app.state import start_run
from specviz.runconfig import RunConfig

RUNS = 20


@pytest.mark.slow
def test_twenty_runs_grow_neither_the_server_nor_the_device_process():
    lock = threading.Lock()
    cfg = RunConfig(prompts=["Repeat: red green blue red green blue", "Name three fruits."], batch_size=4,
                    draft="ngram", draft_length=3, max_new_tokens=8)
    server = psutil.Process()
    rss = {"server": [], "device": []}
    for i in range(RUNS):
        run = start_run(cfg, lock)
        run.join(120)
        assert run.status == "done", run.error
        assert len(run.trace["sequences"]) == 4
        del run
        gc.collect()
        rss["server"].append(server.memory_info().rss)
        rss["device"].append(psutil.Process(worker.shared().proc.pid).memory_info().rss)
    for name, seen in rss.items():
        growth = (seen[-1] - seen[1]) / seen[1]
        assert growth <= 0.05, f"{name} RSS grew {growth:.1%} from run 2 to run {RUNS} ({seen[1] >> 20} -> {seen[-1] >> 20} MiB)"
