"""Whether the Triton kernels run under Triton's CPU interpreter (TRITON_INTERPRET=1), where they
take CPU tensors: the tests' way to run them without a GPU. Beside the kernels, so they never
import the module that chooses them (specviz.engine.kernels)."""

from __future__ import annotations

import os


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
