"""The repo's kernels/ folder never shadows the Hugging Face `kernels` package that transformers
imports (with the repo root first on the import path, as `python -m specviz` and pytest put it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
import locations

ROOT = locations.ROOT

PROBE = """
import kernels, sys
from specviz.engine import kernels as ours
from specviz.engine.kernels.spec_verify import accept_triton
from specviz.engine.kernels.tree_verify import accept_tree_triton
print(kernels.__file__)
print(ours.get_accept_fn("triton").__module__, ours.get_accept_tree_fn("triton").__module__)
import transformers.integrations.hub_kernels  # what failed to import when our folder shadowed the package
"""


def test_import_kernels_from_the_repo_root_gets_the_hub_package_and_specviz_still_finds_its_own():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    hub, impls = out.stdout.split("\n")[:2]
    assert "site-packages" in hub and not hub.startswith(str(ROOT / "kernels"))
    assert impls == "specviz.engine.kernels.spec_verify specviz.engine.kernels.tree_verify"


def test_the_packaged_model_loads_with_the_repo_root_first_on_the_path():
    code = "from specviz.models.loading import load_model; print(load_model('default', 'cpu', 'float32').num_params)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip().endswith("134515008"), out.stderr[-2000:]
