"""A vLLM server the Server page starts for someone who has none: ``python -m specviz vllm serve`` on the
packaged default model with n-gram drafts, as a child process of the Streamlit server. The vLLM server it
starts listens on loopback only (specviz.peers.server.HOST); its progress is the child's output and vLLM's
own log, whose last lines the page shows; Stop ends it. No Streamlit, and no torch in this process: the
child imports what it needs.

One per Streamlit process (a port belongs to the machine, not to a session). The child is forked from one
thread that lives as long as the process, so PR_SET_PDEATHSIG (which follows the forking thread) sends it
SIGTERM only when the Streamlit server ends; it runs in its own process group, which Stop signals (the CLI
stops its vLLM server on SIGTERM, specviz.cli.cmd_vllm), then kills after STOP_GRACE_S.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import dataclasses
import os
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

from specviz.childproc import SAFE_ENV, python_argv
from specviz.common import MissingResource
from specviz.peers import server as vllm_server

try:  # loaded here, not in the forked child: a dlopen between fork and exec can deadlock a threaded server
    _LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:  # not glibc Linux: Stop still ends the server, the end of this process may not
    _LIBC = None

DRAFT, DRAFT_LENGTH = "ngram", 4  # model-free drafts vLLM serves as prompt lookup: no second model to load
STOP_GRACE_S = 30.0  # the CLI gives vLLM 20 s to stop (VllmServer.stop) before its own SIGKILL
LOG_LINES = 12
INSTALL = "bash setup.sh --vllm"
READY = "vLLM serving"  # how specviz.peers.server.serve's line starts once the server is healthy
LOOPBACK_NAMES = ("127.0.0.1", "localhost")  # where the server binds (vllm_server.HOST) and what reaches it


def serve_args(port: int) -> list[str]:
    """``python -m specviz`` arguments: the packaged model, n-gram drafts of DRAFT_LENGTH, eager PyTorch
    (--no-compile: up in under a minute on a small CPU instead of several)."""
    return ["vllm", "serve", "--target", "default", "--draft", DRAFT, "--draft-length", str(DRAFT_LENGTH),
            "--port", str(port), "--no-compile"]


def command_text(port: int) -> str:
    """The same command, for a terminal in the repository."""
    return ".venv/bin/python -m specviz " + " ".join(serve_args(port))


def serve_argv(port: int) -> list[str]:
    """The child's command line (this interpreter, the working directory off its import path)."""
    return python_argv("-m", "specviz", *serve_args(port))


def installed() -> bool:
    """Whether vLLM's environment is there (.venv-vllm, or $SPECVIZ_VLLM_PYTHON)."""
    try:
        vllm_server.vllm_python()
    except MissingResource:
        return False
    return True


def loopback_port(metrics_url: str) -> int | None:
    """The port of a loopback ``http://host:port/metrics`` address where a server started here would answer
    (an unprivileged port); None for any other address."""
    parts = urllib.parse.urlsplit(metrics_url)
    try:
        port = parts.port or 80
    except ValueError:
        return None
    ok = parts.scheme == "http" and parts.hostname in LOOPBACK_NAMES and parts.path == "/metrics"
    return port if ok and 1024 <= port <= 65535 else None


def _tail(path: Path, n: int) -> list[str]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [ln.rstrip() for ln in lines if ln.strip()][-n:]


@dataclasses.dataclass
class Local:
    """One started server: its child (the specviz CLI, which runs vLLM), its folder and when it started."""

    port: int
    proc: subprocess.Popen
    folder: Path  # the child's TMPDIR: its own output (specviz.log) and vLLM's log (specviz-vllm-*.log)
    started: float  # time.monotonic()
    stopping: bool = False

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        return self.proc.poll()

    @property
    def ready(self) -> bool:
        """The CLI said the server is up (its "vLLM serving ... at" line, printed once /health answers)."""
        return any(ln.startswith(READY) for ln in _tail(self.folder / "specviz.log", 50))

    def seconds(self) -> float:
        return time.monotonic() - self.started

    def log_tail(self, n: int = LOG_LINES) -> list[str]:
        """The last lines of the child's output, then of vLLM's own log once it writes one."""
        lines = _tail(self.folder / "specviz.log", n)
        for log in sorted(self.folder.glob("specviz-vllm-*.log")):
            lines += [f"[vLLM] {ln}" for ln in _tail(log, n)]
        return lines[-n:]

    def stop(self) -> None:
        """SIGTERM to the child's group now, SIGKILL after STOP_GRACE_S (from a thread: the page does not wait)."""
        if not self.running:
            return
        self.stopping = True
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        threading.Thread(target=self._reap, name="specviz-local-vllm-reaper", daemon=True).start()

    def _reap(self) -> None:
        try:
            self.proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # vLLM itself then gets its own PDEATHSIG
            except ProcessLookupError:
                pass
            self.proc.wait()


_lock = threading.Lock()
_current: Local | None = None
_spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="specviz-local-vllm")  # lives with the process


def current() -> Local | None:
    """The server this process started last (running, stopping or ended), or None."""
    return _current


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the thread that forked it (the spawner, which lives as long as
    this process) ends."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1


def _spawn(port: int) -> Local:
    folder = Path(tempfile.mkdtemp(prefix="specviz-page-vllm-"))
    root = str(vllm_server.ROOT)  # holds specviz/: the child imports this checkout, as the device worker does
    env = {**os.environ, **SAFE_ENV, "TMPDIR": str(folder), "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    with open(folder / "specviz.log", "ab") as log:
        proc = subprocess.Popen(serve_argv(port), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=root, start_new_session=True, preexec_fn=_die_with_parent)
    return Local(port=port, proc=proc, folder=folder, started=time.monotonic())


def start(port: int) -> Local:
    """Start a server on ``port`` unless one started here still runs (that one is returned)."""
    global _current
    with _lock:
        if _current is not None and _current.running:
            return _current
        _current = _spawner.submit(_spawn, port).result()
        return _current
