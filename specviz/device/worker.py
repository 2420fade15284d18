"""The decode worker: the app's decoding in a process of its own.

In the Streamlit server's process, decoding shared the GIL with the server's script reruns,
figure building and websocket pushes, and torch's OpenMP threads spun against them for the
two cores: the page made 0.14x the CLI's tokens/s (issue 13). Here one child process per server
(`python -m specviz.device.worker`: a fresh interpreter, no forked locks or OpenMP state, and not
multiprocessing's "spawn", which re-runs the parent's __main__ — under Streamlit that is app.py)
loads the model pair once and reuses it across runs, and streams each run back over a
multiprocessing.connection (a Unix socket with an auth key) as it goes:

    parent -> child   ("job", Job) | ("stop", job id) | ("quit",)
    child -> parent   (job id, kind, payload...): what the job sends as it goes (a run: status,
                      tokenizer, start, step, trace, regular_trace; a measurement: say, item),
                      then (job id, "end", "done" | "stopped" | "error", error line, notes, result)

Jobs are named (specviz.device.devicejobs.JOBS: run, facts, device, pair_problem, sweep, exactness,
divergence, distribution, peaks, calibrate): the Streamlit server asks for one by name with plain-data
parameters and never imports torch, transformers or a model itself. $SPECVIZ_WORKER_JOBS names
modules the child imports after devicejobs, which may add or replace jobs (tests' stand-ins).

The child checks for "stop" between a job's units of work (a run's steps). It ignores SIGINT (Ctrl-C on the server ends the
server, whose exit closes the pipe) and exits when the pipe closes. Nothing here imports torch
at module level: the child sets its OpenMP environment before torch is first imported.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Callable

from specviz.childproc import SAFE_ENV, python_argv
from specviz.common import SpecvizError

# How the child's idle torch (OpenMP) threads wait, $SPECVIZ_WORKER_WAIT (bench/browser_speed.py
# measures the choices): "spin" is libgomp's default (spin a while, then sleep); "passive" sleeps at
# once, leaving the core to the server and the browser; a number is that many spins (GOMP_SPINCOUNT).
# Spin: on a 2-core Xeon, passive threads ran the page at 0.69 of the CLI and spinning ones at 1.19
# (interleaved); on the EPYC the two were level (BENCHMARKS.md, "The Live page in a real browser").
WORKER_WAIT = "spin"


def child_env() -> dict:
    wait = os.environ.get("SPECVIZ_WORKER_WAIT", WORKER_WAIT)
    if wait == "passive":
        return {"OMP_WAIT_POLICY": "PASSIVE"}
    if wait.isdigit():
        return {"GOMP_SPINCOUNT": wait}
    return {}


# The server's drawing steps back for the decoder (bench/browser_speed.py measures it): the Live
# page's script thread (figures, serialisation) runs this much nicer than the server, so while
# the worker decodes it draws in the worker's gaps instead of taking a core from one of its torch
# threads (every op then waits for that thread). $SPECVIZ_SERVER_NICE overrides; 0: off.
SERVER_NICE = 10


def server_nice() -> int:
    n = os.environ.get("SPECVIZ_SERVER_NICE", "")
    return int(n) if n.isdigit() else SERVER_NICE


def yield_cores() -> None:
    """Lower the calling thread's priority by server_nice() below the process's own (Linux nice
    is per thread). Only ever lowers it: raising needs privileges, so a thread stays nicer once it
    is. Decode workers are started from a thread of their own (see shared()), at full priority."""
    n = server_nice()
    if n <= 0 or not hasattr(os, "setpriority"):
        return
    tid = threading.get_native_id()
    try:
        want = min(19, os.getpriority(os.PRIO_PROCESS, os.getpid()) + n)
        if os.getpriority(os.PRIO_PROCESS, tid) < want:
            os.setpriority(os.PRIO_PROCESS, tid, want)
    except OSError:
        pass


def worker_threads() -> int:
    """torch threads for the child: $SPECVIZ_WORKER_THREADS, else every core."""
    n = os.environ.get("SPECVIZ_WORKER_THREADS", "")
    return int(n) if n.isdigit() and int(n) > 0 else (os.cpu_count() or 1)


# ---- failures as one line ----------------------------------------------------------------------------

def oom_message(b: int, k: int) -> str:
    return (f"out of memory at batch size {b}, draft length {k}: memory was freed; "
            "try a smaller batch size or draft length (or fewer max new tokens)")


def free_device_memory() -> None:
    """Collect garbage and give CUDA's cached blocks back, where torch is loaded (the device
    process; the Streamlit server never imports it)."""
    import gc

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def error_message(e: BaseException, cfg=None) -> str:
    """One clear sentence for a failure of a job (``cfg``: the run's RunConfig, if it was a run)."""
    if isinstance(e, SpecvizError):
        return str(e)
    if type(e).__name__ == "OutOfMemoryError" or "out of memory" in str(e).lower():
        free_device_memory()
        if cfg is None:
            return "out of memory: memory was freed; try a smaller batch size, draft length or fewer tokens"
        return oom_message(cfg.batch_size, cfg.draft_length)
    return f"{type(e).__name__}: {e}"


# ---- the child ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Job:
    """One named job: ``specviz.device.devicejobs.JOBS[name](ctx, **params)`` in the child."""

    id: int
    name: str
    params: dict


def _jobs() -> dict:
    """The child's job table: devicejobs, then the modules of $SPECVIZ_WORKER_JOBS (comma-separated)."""
    import importlib

    from specviz.device import devicejobs

    for name in filter(None, os.environ.get("SPECVIZ_WORKER_JOBS", "").split(",")):
        try:
            importlib.import_module(name.strip())
        except ImportError as e:
            raise SpecvizError(f"$SPECVIZ_WORKER_JOBS names {name.strip()!r}, which does not import here: {e}") from e
    return devicejobs.JOBS


def _serve(conn) -> None:
    """The child's main loop: one job at a time, until the connection closes or "quit"."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C on the server: the server's exit ends us
    import torch

    torch.set_num_threads(worker_threads())
    pending: list = []  # messages a job read while it ran (a newer run: its parent gave up on it)
    while True:
        try:
            msg = pending.pop(0) if pending else conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "quit":
            return
        if msg[0] == "path":  # the parent's import path (tests' stand-ins travel by module name)
            sys.path.extend(p for p in msg[1] if p not in sys.path)
        if msg[0] == "job":
            try:
                _Context(conn, msg[1], pending).work(_jobs())
            except (EOFError, BrokenPipeError, OSError):
                return  # the server went away


def child_main(address: str) -> None:
    """`python -m specviz.device.worker ADDRESS`, the auth key (hex) on stdin: listen, serve one parent."""
    from multiprocessing.connection import Listener

    from specviz.common import exit_with_parent

    if os.environ.get("SPECVIZ_WORKER_PARENT", "").isdigit():  # a server killed mid-step leaves no worker behind
        exit_with_parent(int(os.environ["SPECVIZ_WORKER_PARENT"]))
    authkey = bytes.fromhex(sys.stdin.readline().strip())
    listener = Listener(address, family="AF_UNIX", authkey=authkey)
    try:
        conn = listener.accept()
    finally:
        try:
            listener.close()  # unlinks the socket, which the connected parent may have removed already
        except OSError:
            pass
    _serve(conn)


class _Context:
    """What a job in the child reports through, and how it learns it should stop."""

    def __init__(self, conn, job: Job, pending: list):
        self.conn, self.job, self.pending = conn, job, pending
        self._stopped = False
        self.notes: list[str] = []

    def send(self, kind: str, *payload) -> None:
        self.conn.send((self.job.id, kind, *payload))

    def report(self, item) -> None:
        self.send("item", item)

    def say(self, note: str) -> None:
        self.send("say", note)

    def stopped(self) -> bool:
        while self.conn.poll():
            msg = self.conn.recv()  # EOFError when the server went away: the caller returns
            if msg[0] == "stop" and msg[1] == self.job.id:
                self._stopped = True
            elif msg[0] in ("job", "quit"):  # only sent while no job of the parent's runs: this one is orphaned
                self.pending.append(msg)
                self._stopped = True
        return self._stopped

    def work(self, jobs: dict) -> None:
        job = self.job
        try:
            if job.name not in jobs:
                raise SpecvizError(f"the device process has no job named {job.name!r}")
            result = jobs[job.name](self, **job.params)
            self.send("end", "stopped" if self._stopped else "done", None, self.notes, result)
        except (EOFError, BrokenPipeError):
            raise
        except BaseException as e:  # shown in the page; the worker keeps serving
            if not isinstance(e, SpecvizError):
                self.notes.append(traceback.format_exc(limit=3))
            self.send("end", "error", error_message(e, job.params.get("cfg")), self.notes, None)


# ---- the parent's handle -----------------------------------------------------------------------------

class WorkerDied(RuntimeError):
    pass


class Worker:
    """The parent's end of one decode child. One user at a time (see :func:`shared`)."""

    CONNECT_TIMEOUT_S = 120.0  # a fresh interpreter importing torch on a loaded machine

    def __init__(self, threads: int | None = None):
        from multiprocessing.connection import Client

        self.threads = threads or worker_threads()
        authkey = os.urandom(32)
        self._dir = tempfile.mkdtemp(prefix="specviz-worker-")
        address = os.path.join(self._dir, "sock")
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds specviz/
        env = {**os.environ, **child_env(), "SPECVIZ_WORKER_THREADS": str(self.threads), "SPECVIZ_WORKER_PARENT": str(os.getpid()),
               "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        self.proc = subprocess.Popen(python_argv("-m", "specviz.device.worker", address), stdin=subprocess.PIPE,
                                     env={**env, **SAFE_ENV}, cwd=os.getcwd())
        self.proc.stdin.write(authkey.hex().encode() + b"\n")
        self.proc.stdin.close()
        deadline = time.monotonic() + self.CONNECT_TIMEOUT_S
        while True:
            try:
                self.conn = Client(address, family="AF_UNIX", authkey=authkey)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()
                    raise WorkerDied(f"the decode worker process did not start (exit code {self.proc.poll()})")
                time.sleep(0.05)
        shutil.rmtree(self._dir, ignore_errors=True)  # connected: the socket's name is no longer needed
        self.tokenizers: dict = {}  # a model's name -> its tokenizer as the page decodes with it (or None)
        self.use = threading.Lock()  # held by the LiveRun whose job runs now
        self._send = threading.Lock()
        self.send("path", list(sys.path))

    def send(self, *msg) -> None:
        with self._send:
            self.conn.send(msg)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def recv(self, timeout: float):
        """The next message, or None after ``timeout`` s; WorkerDied when the child has ended."""
        try:
            if self.conn.poll(timeout):
                return self.conn.recv()
        except (EOFError, OSError):
            pass
        else:
            if self.alive():
                return None
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        raise WorkerDied(f"the decode worker process ended unexpectedly (exit code {self.proc.returncode}); "
                         "memory was freed; the next run starts a new one (a smaller batch size needs less memory)")

    def close(self) -> None:
        try:
            self.send("quit")
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.conn.close()


_shared: Worker | None = None
_shared_lock = threading.Lock()
# Workers start from one thread of their own, made by the first shared() call (warm_up(), before
# the page lowers its thread's priority with yield_cores()): a child process inherits the nice
# value of the thread that starts it, so a worker replaced later keeps full priority too.
_spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="specviz-worker-spawner")


def shared() -> Worker:
    """The process's decode worker, started on first use and again after it died."""
    global _shared
    with _shared_lock:
        if _shared is None or not _shared.alive():
            _shared = _spawner.submit(Worker).result()
        return _shared


def forget(w: Worker) -> None:
    """Drop a worker that died (the next shared() starts a new one)."""
    global _shared
    with _shared_lock:
        if _shared is w:
            _shared = None


if __name__ == "__main__":
    from specviz.device import worker as _module  # the one copy of this module that pickled jobs name

    _module.child_main(sys.argv[1])
