"""specviz.device.deviceclient: every device job of the server goes to the one device process by name,
waits its turn in the one line, and comes back as notes, items and a result (or one line of error).

The jobs are stand-ins registered in the real worker process (tests/workerfakes.py)."""

from __future__ import annotations

import sys
import threading

from specviz.device import deviceclient
from specviz.device.deviceclient import DeviceJob, ask, start_job
from specviz.common import SpecvizError
import locations


def test_a_job_waits_for_the_device_then_reports_items_a_note_and_its_result():
    lock = threading.Lock()
    lock.acquire()
    job = DeviceJob(name="count", params={"n": 3}, lock=lock).start()
    job.join(0.5)
    assert job.status == "queued" and job.items == [] and job.queue_position == 1
    lock.release()
    job.join(60)
    assert (job.status, job.items, job.result, job.note) == ("done", [0, 1, 2], "result", "done counting")
    assert lock.acquire(timeout=1)  # released when the job ended


def test_a_job_stopped_while_queued_never_reaches_the_device():
    lock = threading.Lock()
    lock.acquire()
    job = DeviceJob(name="count", lock=lock).start()
    job.stop()
    job.join(10)
    lock.release()
    assert job.status == "stopped" and job.items == [] and job.result is None


def test_a_user_mistake_is_one_line_and_a_bug_keeps_its_traceback_aside():
    lock = threading.Lock()
    a, b = DeviceJob(name="mistake", lock=lock).start(), DeviceJob(name="bug", lock=lock).start()
    a.join(60)
    b.join(60)
    assert (a.status, a.error, a.details) == ("error", "choose a draft", None)
    assert b.status == "error" and b.error == "KeyError: 'x'" and "KeyError" in b.details
    assert lock.acquire(timeout=1)


def test_an_unknown_job_name_is_refused_in_one_line():
    with_name = DeviceJob(name="no-such-job", lock=threading.Lock()).start()
    with_name.join(60)
    assert with_name.status == "error" and with_name.error == "the device process has no job named 'no-such-job'"


def test_a_job_no_page_polls_stops_at_its_next_unit_of_work():
    """A closed tab must not keep the device for a whole sweep."""
    job = start_job("until-stopped", threading.Lock(), "a Sweep")
    assert job.heartbeat_timeout == deviceclient.HEARTBEAT_TIMEOUT_S  # a page's job: abandoned when not polled
    job.heartbeat_timeout = 0.3
    job.join(60)
    assert job.status == "stopped" and job.abandoned and job.result == "stopped early" and job.items


def test_stop_ends_a_running_job_after_its_current_unit_and_keeps_what_it_reported():
    job = DeviceJob(name="until-stopped", lock=threading.Lock()).start()
    while len(job.items) < 3 and job.running:
        job.join(0.02)
    job.stop()
    job.join(60)
    assert job.status == "stopped" and job.result == "stopped early" and job.items[:3] == [0, 1, 2]


def test_ask_returns_a_short_jobs_result_and_raises_its_error_line():
    lock = threading.Lock()
    assert ask("count", lock, "counting", n=2) == "result"
    try:
        ask("mistake", lock, "a mistake")
    except SpecvizError as e:
        assert str(e) == "choose a draft"
    else:
        raise AssertionError("ask did not raise the job's error")


def test_jobs_run_where_torch_is_and_this_process_need_not_import_it():
    lock = threading.Lock()
    assert ask("torch-here", lock, "a look") is True  # the device process holds torch...
    import subprocess

    code = ("import sys; import specviz.device.deviceclient, specviz.app.state, specviz.device.devicequeue; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m == 'transformers'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"  # ...and the server's side of it imports neither


def test_nothing_the_app_and_its_pages_import_brings_torch_or_transformers():
    """Every import written anywhere in app.py and pages/ (at module level or inside a function),
    imported together in a fresh interpreter: no torch, no transformers."""
    import ast
    import subprocess

    root = locations.ROOT
    names = set()
    for path in [root / "app.py", *sorted((root / "pages").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
    code = ("import importlib, sys\n"
            f"for n in {sorted(names)!r}:\n"
            "    try:\n        importlib.import_module(n)\n    except ImportError:\n        pass  # a name, not a module\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def modules_named_by(data) -> set[str]:
    """The modules whose classes unpickling ``data`` would import."""
    import pickle
    import pickletools

    found, strings = set(), []
    for op, arg, _ in pickletools.genops(pickle.dumps(data)):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            found.add(strings[-2].split(".")[0])
        elif op.name == "GLOBAL":
            found.add(arg.split(" ")[0].split(".")[0])
    return found


def test_the_pages_facts_jobs_answer_in_plain_data_that_unpickles_without_torch():
    from specviz.device import devicejobs

    class Quiet:
        def say(self, *a): pass

    answers = [devicejobs.JOBS["facts"](Quiet(), target="default", device="cpu", dtype="float32"),
               devicejobs.JOBS["device"](Quiet(), device="cpu", dtype="float32"),
               devicejobs.JOBS["pair_problem"](Quiet(), target="default", draft="ngram", device="cpu", dtype="float32")]
    assert answers[0]["name"] and answers[1]["device"] == "cpu" and answers[2] is None
    for answer in answers:
        assert not modules_named_by(answer) & {"torch", "transformers", "numpy"}, answer
