"""What every layer shares and nothing else: the user-facing error, the cache folder, files written whole
and torch files read without running code. No torch at import (load_tensors imports it when called)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from pathlib import Path


class SpecvizError(Exception):
    """A user-facing error: the CLI prints it as one line, the app shows it in the page."""


class MissingResource(SpecvizError):
    """Something the command names or needs is not on this machine: a model or file, CUDA, the vLLM environment."""


class OutOfMemory(SpecvizError):
    """The weights or the run do not fit in the memory there is."""


# The command line's exit status, one per way a command can end (docs/cli.md lists them; specviz.cli maps
# the exceptions above onto them).
EXIT_OK = 0
EXIT_BAD_INPUT = 2  # a flag, a value, a combination or a file's contents that cannot work (argparse's own code)
EXIT_MISSING = 3  # a model, a file, CUDA or the vLLM environment that is not there
EXIT_OUT_OF_MEMORY = 4  # refused before loading (the weights would not fit) or ran out while running
EXIT_SIGNAL_BASE = 128  # interrupted: 128 + the signal's number (130 Ctrl-C, 143 SIGTERM), the shell's convention


def cache_dir() -> Path:
    """Where converted models, calibrations and peak figures live: $SPECVIZ_CACHE, else ~/.cache/specviz."""
    root = os.environ.get("SPECVIZ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "specviz")
    return Path(root)


@contextlib.contextmanager
def atomic_open(path):
    """A binary file that appears at ``path`` whole or not at all: written to a temporary file in the
    same folder, flushed to disk, then renamed over ``path`` (the folder's entry flushed too), so a
    crash, a Ctrl-C or a power cut leaves the old file or the complete new one. An exception inside
    the block removes the temporary file and leaves ``path`` as it was; a Ctrl-C that lands while the
    temporary file is being made, renamed or removed acts once that is done (no temp file left)."""
    path = Path(path)
    # os.open with 0o666 (not mkstemp's 0o600): the file gets the umask's permissions, as open() gives
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}-{os.urandom(4).hex()}.tmp")
    with deferred_signals() as let_through:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as f:
                with let_through():
                    yield f
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    fsync_dir(path.parent)


def write_atomic(path, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` through :func:`atomic_open`: the old file or the whole new one, never half."""
    with atomic_open(path) as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return Path(path)


_DEFERRED = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def deferred_signals():
    """Run the block with Ctrl-C (SIGINT) and SIGTERM deferred: one that arrives meanwhile acts as the
    block ends (re-raised through the handler that was there), so a commit or a clean-up of temporary
    files runs whole. Yields ``let_through``, a context manager for a part of the block (the caller's
    own work) where they act at once. Swaps the Python handlers rather than masking the signal: torch's
    threads would take a masked process signal and the main thread still raise. Outside the main thread,
    where Python delivers no signal, both are no-ops."""
    held = threading.current_thread() is threading.main_thread()
    caught: list[int] = []
    before = {s: signal.getsignal(s) for s in _DEFERRED} if held else {}
    before = {s: h for s, h in before.items() if h is not None}  # None: a handler set outside Python, left alone

    def hold():
        for s in before:
            signal.signal(s, lambda signum, frame: caught.append(signum))

    def release():
        for s, h in before.items():
            signal.signal(s, h)
        pending = list(dict.fromkeys(caught))
        caught.clear()
        for s in pending:
            signal.raise_signal(s)

    @contextlib.contextmanager
    def let_through():
        release()
        try:
            yield
        finally:
            hold()

    hold()
    try:
        yield let_through
    finally:
        release()


def fsync_dir(folder) -> None:
    """Flush a folder's entries (a rename into it) to disk; a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a folder: the rename is still atomic
    finally:
        os.close(fd)


def fsync_tree(folder) -> None:
    """Flush every file under ``folder`` and the folder itself to disk: before a rename publishes them."""
    for p in Path(folder).rglob("*"):
        if p.is_file() and not p.is_symlink():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    fsync_dir(folder)


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs (on this machine; one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# what atomic_open names its temporary files: .<name>.<pid>-<thread>-<random>.tmp
ATOMIC_TEMP = re.compile(r"^\..+\.(?P<pid>\d+)-\d+-[0-9a-f]{8}\.tmp$")


def remove_dead_temps(folder, pattern: re.Pattern) -> list[Path]:
    """Remove the entries of ``folder`` that ``pattern`` matches (its group ``pid`` the process that
    made them) whose process is gone: what a killed writer left. A live process's are kept (it may
    be writing them now). Returns what was removed."""
    import shutil

    gone = []
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return gone
    for p in entries:
        m = pattern.match(p.name)
        if m and not pid_alive(int(m.group("pid"))):
            try:
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
                gone.append(p)
            except OSError:
                pass  # another process removed it first, or it is not ours to remove: left as it is
    return gone


def load_tensors(path, what: str = "file"):
    """``torch.load`` of a file specviz wrote (tensors, plain containers, numbers, strings), refusing
    anything else: unpickling an arbitrary object can run code, so a crafted or foreign ``.pt`` is a
    one-line SpecvizError and nothing in it runs."""
    import pickle

    import torch

    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:
        raise SpecvizError(f"{what} {path} was not loaded: it holds more than tensors, numbers and plain containers, "
                           f"and loading it could run code ({_first_line(e)})") from None
    except (RuntimeError, EOFError, ValueError) as e:  # torn or not a torch file: torch's zip reader says so
        raise SpecvizError(f"{what} {path} is not a readable torch file: {_first_line(e)}") from None


def _first_line(e: Exception, limit: int = 200) -> str:
    """The line of torch's error that names the cause (it wraps it in paragraphs of advice)."""
    advice = ("Weights only load failed", "Please file an issue", "Check the documentation")
    lines = [x.strip() for x in str(e).splitlines() if x.strip() and not x.strip().startswith(advice)]
    return (lines[0] if lines else type(e).__name__)[:limit]


def exit_with_parent(parent: int, poll_s: float = 0.5) -> None:
    """End this process soon after ``parent`` (the pid of the process that started it) is gone: a killed
    distill leaves no worker writing its shards, a killed app server no decode worker holding the model.
    The parent passes its pid, so one that died before this call is noticed too."""

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(3)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()
