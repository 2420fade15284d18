"""GPU kernels, each next to its torch reference; this module only picks the implementation.

The kernels live in the repository's top-level ``kernels/`` folder, which is this module's
package path: ``specviz.engine.kernels.spec_verify`` (the chain rule) and
``specviz.engine.kernels.tree_verify`` (the token-tree walk) are files in that folder. They are
never importable as a top-level ``kernels``, a name that belongs to the Hugging Face package
transformers imports (the folder had an ``__init__.py`` and, with the repo root on the import
path, shadowed it: every model load failed).

Importing this module never imports triton: the kernel files are loaded the first time the
Triton path is actually chosen, so CPU-only machines (and machines without triton) work.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import Callable

from pathlib import Path

import torch

from specviz.engine.sampling import Verdict, accept_reference
from specviz.engine.tree import TreeVerdict, accept_tree

__path__ = [str(Path(__file__).resolve().parents[2] / "kernels")]  # a package whose files are kernels/*.py

ENV_VAR = "SPECVIZ_ACCEPT_IMPL"  # "torch" or "triton": overrides the automatic choice
IMPLS = ("torch", "triton")

AcceptFn = Callable[..., Verdict]  # accept_reference's signature
AcceptTreeFn = Callable[..., TreeVerdict]  # accept_tree's signature


def get_accept_fn(force: str | None = None) -> AcceptFn:
    """The acceptance rule to use: ``accept_triton`` on CUDA, ``accept_reference`` elsewhere.

    Precedence: ``force`` (tests) > $SPECVIZ_ACCEPT_IMPL > CUDA available and triton installed.
    The automatic/env choice is made once per process. Both take the same arguments; the
    Triton one needs CUDA tensors (or TRITON_INTERPRET=1), so pass force="torch" for a model
    on the CPU of a CUDA machine.
    """
    def triton() -> AcceptFn:
        from specviz.engine.kernels.spec_verify import accept_triton

        return accept_triton

    return _pick(force, accept_reference, triton, "acceptance kernel")


def get_accept_tree_fn(force: str | None = None) -> AcceptTreeFn:
    """The token-tree walk to use: ``accept_tree_triton`` on CUDA, ``accept_tree`` elsewhere.

    The same choice as ``get_accept_fn`` (force > $SPECVIZ_ACCEPT_IMPL > CUDA and triton), so one
    setting switches both rules."""
    def triton() -> AcceptTreeFn:
        from specviz.engine.kernels.tree_verify import accept_tree_triton

        return accept_tree_triton

    return _pick(force, accept_tree, triton, "tree kernel")


def _pick(force: str | None, reference: Callable, triton: Callable[[], Callable], what: str) -> Callable:
    """``reference`` for "torch", else what ``triton()`` imports only now (the kernel file imports triton)."""
    impl = _checked(force) if force is not None else _default_impl()
    if impl == "torch":
        return reference
    try:
        return triton()
    except ImportError as e:  # triton missing
        raise RuntimeError(f"the triton {what} was requested but cannot be imported: {e}") from e


@functools.cache
def _default_impl() -> str:
    env = os.environ.get(ENV_VAR, "").strip().lower()
    if env:
        return _checked(env)
    has_triton = importlib.util.find_spec("triton") is not None
    return "triton" if torch.cuda.is_available() and has_triton else "torch"


def _checked(impl: str) -> str:
    if impl not in IMPLS:
        raise ValueError(f"accept implementation must be one of {IMPLS}, got {impl!r}")
    return impl
