"""What every layer shares and nothing else: the user-facing error and the cache folder. No torch."""

from __future__ import annotations

import os
import tempfile
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
