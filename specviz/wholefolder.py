"""A folder of several files replaced whole: at every instant its path holds the complete old
contents or the complete new ones, never new weights beside an old vocabulary map.

:func:`replaced_whole` hands out an empty folder beside the destination to fill; on leaving the
block the files are flushed to disk, the destination's other entries (a distill run's data/,
report.json...) are hard-linked in (no copy, and nothing is ever only in a temporary folder), and
the two folders are exchanged in one step (Linux renameat2 RENAME_EXCHANGE; elsewhere the old
folder is renamed aside first and restored by the next call if the process died in between). A
Ctrl-C or crash before that step leaves the old folder untouched; one that lands during the exchange
or the clean-up acts once they are done (nothing left beside the folder); what a killed process left
beside it is removed by the next call.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil
import threading
from pathlib import Path

from specviz.common import SpecvizError, deferred_signals, fsync_dir, fsync_tree, pid_alive, remove_dead_temps


def _temps(name: str, role: str) -> re.Pattern:
    return re.compile(rf"^\.{re.escape(name)}\.{role}(?P<pid>\d+)-\d+-[0-9a-f]{{8}}$")


def _beside(dest: Path, role: str) -> Path:
    return dest.with_name(f".{dest.name}.{role}{os.getpid()}-{threading.get_ident()}-{os.urandom(4).hex()}")


@contextlib.contextmanager
def replaced_whole(dest):
    """Yield an empty folder to write ``dest``'s new contents into; a clean exit puts it in place of
    ``dest`` whole (keeping the entries of ``dest`` the new folder lacks), an exception leaves
    ``dest`` as it was. ``dest`` may not exist yet; a symlink is followed (its target is replaced)."""
    dest = Path(dest).expanduser()
    if dest.is_symlink():
        dest = dest.resolve()
    if dest.exists() and not dest.is_dir():
        raise SpecvizError(f"{dest} is a file, not a folder: give a folder to write the draft into")
    dest.parent.mkdir(parents=True, exist_ok=True)
    recover(dest)
    new = _beside(dest, "new")
    aside = _beside(dest, "old")  # used only where the two folders cannot be exchanged in one step
    with deferred_signals() as let_through:  # a Ctrl-C acts in the caller's block, else once all is done
        try:
            os.mkdir(new, 0o777)  # the umask's permissions, as a plain mkdir gives (mkdtemp would give 0700)
            if dest.is_dir():
                shutil.copymode(dest, new)
            with let_through():
                yield new
                fsync_tree(new)
            if dest.is_dir():
                _link_missing(dest, new)
            if not dest.exists():
                os.rename(new, dest)
            elif not _exchange(new, dest):
                os.rename(dest, aside)
                os.rename(new, dest)
            fsync_dir(dest.parent)
        finally:
            if not dest.exists() and aside.exists():  # stopped between the two renames: the old one goes back
                os.rename(aside, dest)
            shutil.rmtree(aside, ignore_errors=True)
            shutil.rmtree(new, ignore_errors=True)  # unfinished new contents, or (after the exchange) the old ones


def recover(dest: Path) -> None:
    """Undo what a killed :func:`replaced_whole` left beside ``dest``: an old folder renamed aside
    while ``dest`` is missing goes back; the rest of a dead process's folders are removed."""
    dest = Path(dest)
    old = _temps(dest.name, "old")
    if not dest.exists():
        for aside in sorted(dest.parent.iterdir()):
            m = old.match(aside.name)
            if m and not pid_alive(int(m.group("pid"))):
                aside.rename(dest)
                break
    for role in ("new", "old"):
        remove_dead_temps(dest.parent, _temps(dest.name, role))


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (renameat2 RENAME_EXCHANGE); False where the system cannot."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_cwd, rename_exchange = -100, 2
    if fn(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _link_missing(src: Path, dst: Path) -> None:
    """Hard-link every entry of ``src`` that ``dst`` lacks into ``dst`` (folders recreated, symlinks
    copied as links; a file that cannot be linked is copied)."""
    for e in src.iterdir():
        to = dst / e.name
        if to.exists() or to.is_symlink():
            continue
        if e.is_symlink():
            os.symlink(os.readlink(e), to)
        elif e.is_dir():
            to.mkdir()
            _link_missing(e, to)
            shutil.copystat(e, to)
        else:
            try:
                os.link(e, to)
            except OSError:
                shutil.copy2(e, to)
