"""Child Python processes whose import path does not start with the working directory.

``python -m mod`` puts the working directory first on ``sys.path`` and ``python -c`` puts ``''``
(the same directory), so a ``torch.py`` or ``vllm/`` left in whatever folder specviz was started
from (or in /tmp, where the vLLM server starts) would be imported by the child in place of the
real package. Python 3.11's ``-P`` (and ``PYTHONSAFEPATH``, which the child's own children inherit)
leaves that entry out; on 3.10, which has neither, a one-line bootstrap removes it.
"""

from __future__ import annotations

import sys

SAFE_ENV = {"PYTHONSAFEPATH": "1"}  # for an interpreter of unknown version (3.10 ignores it)


def python_argv(*args: str) -> list[str]:
    """argv for this interpreter running ``args`` (``-m MODULE ...`` or ``-c CODE ...``) without the
    working directory on its import path."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", *args]
    flag, target, *rest = args
    if flag == "-m":
        code = f"import runpy; runpy.run_module({target!r}, run_name='__main__', alter_sys=True)"
    elif flag == "-c":
        code = target
    else:
        raise ValueError(f"python_argv takes -m MODULE or -c CODE, not {flag!r}")
    return [sys.executable, "-c", "import sys; del sys.path[0]; " + code, *rest]
