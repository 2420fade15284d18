"""What every layer shares and nothing else: the user-facing error and the cache folder. No torch."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path


class SpecvizError(Exception):
    """A user-facing error: the CLI prints it as one line, the app shows it in the page."""


def cache_dir() -> Path:
    """Where converted models, calibrations and peak figures live: $SPECVIZ_CACHE, else ~/.cache/specviz."""
    root = os.environ.get("SPECVIZ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "specviz")
    return Path(root)


def write_atomic(path, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename, so a
    crash or Ctrl-C never leaves half a file behind."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def exit_with_parent(parent: int, poll_s: float = 0.5) -> None:
    """End this process soon after ``parent`` (the pid of the process that started it) is gone: a killed
    distill leaves no worker writing its shards, a killed app server no decode worker holding the model.
    The parent passes its pid, so one that died before this call is noticed too."""

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(3)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()
