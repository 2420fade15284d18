"""What llama.cpp reads: its environment (.venv-llamacpp, made by ``bash setup.sh --llamacpp``) and the GGUF
files of a target, written once from our own safetensors with llama.cpp's converter.

The converter is the ``convert_hf_to_gguf.py`` vendored in the llama-cpp-python source package that
setup.sh built (it keeps that script, its ``conversion`` package and the matching ``gguf-py`` in
.venv-llamacpp/convert). It imports torch and transformers, so it runs in our interpreter, with the
vendored gguf-py first on its path. The GGUF is cached beside our converted default model, so it is
written once:

    bf16  the same bits as our bfloat16 run (our weights rounded to bf16 the same way; 2 bytes a weight)
    f32   the same bits as our float32 run (the exactness check)
    q4_1  the packaged file itself (4-bit weights: a lower bandwidth floor than either, not the same model)
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from specviz.common import MissingResource, SpecvizError, cache_dir
from specviz.models.loading import DEFAULT_NAME, default_gguf_path

ROOT = Path(__file__).resolve().parents[2]
WEIGHTS = ("bf16", "f32", "q4_1")  # --peer-weights
SETUP = "bash setup.sh --llamacpp"
CONVERT_TIMEOUT_S = 1800


def env_dir() -> Path:
    """$SPECVIZ_LLAMACPP_ENV, else .venv-llamacpp in the checkout."""
    env = os.environ.get("SPECVIZ_LLAMACPP_ENV")
    return Path(env).expanduser() if env else ROOT / ".venv-llamacpp"


def llamacpp_python() -> Path:
    """The interpreter that has llama_cpp, or a MissingResource that says the setup command."""
    py = env_dir() / "bin" / "python"
    if not py.is_file():
        raise MissingResource(f"llama.cpp is not installed ({env_dir()} has no bin/python): run `{SETUP}`")
    return py


def converter() -> Path:
    """llama.cpp's convert_hf_to_gguf.py as setup.sh kept it."""
    script = env_dir() / "convert" / "convert_hf_to_gguf.py"
    if not script.is_file():
        raise MissingResource(f"llama.cpp's converter is missing ({script}): run `{SETUP}`")
    return script


def gguf_file(source: str, weights: str) -> Path:
    """Where the GGUF of a Hugging Face folder at ``weights`` lives: beside our converted default model,
    or, for another folder, under a name that carries a hash of its path."""
    if weights not in WEIGHTS:
        raise SpecvizError(f"unknown llama.cpp weights {weights!r}: use {', '.join(WEIGHTS)}")
    src = Path(source)
    if src == cache_dir() / DEFAULT_NAME:
        return cache_dir() / f"{DEFAULT_NAME}.{weights}.gguf"
    tag = hashlib.sha1(str(src.resolve()).encode()).hexdigest()[:10]
    return cache_dir() / "gguf" / f"{src.name}-{tag}.{weights}.gguf"


def convert_command(source: str, weights: str, out: Path) -> tuple[list[str], dict]:
    """The converter's command line and environment (our interpreter; the vendored gguf-py first)."""
    script = converter()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(script.parent / "gguf-py"), str(script.parent),
                                         *filter(None, [env.get("PYTHONPATH")])])
    return [sys.executable, str(script), source, "--outtype", weights, "--outfile", str(out)], env


def target_gguf(spec: str, source: str, weights: str, say=print) -> Path:
    """The target's GGUF at ``weights``, written now if it is not cached. ``source``: the folder our
    engine loaded it from (its name_or_path); ``q4_1`` is the packaged default's own file."""
    if weights == "q4_1":
        if spec != "default":
            raise SpecvizError("--peer-weights q4_1 is the packaged default's own 4-bit file: only with --target default")
        return default_gguf_path()
    out = gguf_file(source, weights)
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    cmd, env = convert_command(source, weights, tmp)
    say(f"writing {out.name} with llama.cpp's converter (once) ...")
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S)
        if done.returncode != 0 or not tmp.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise SpecvizError(f"llama.cpp's converter failed on {source} (exit {done.returncode}): {tail[0]}")
        tmp.rename(out)  # whole or absent: an interrupted conversion never looks cached
    finally:
        tmp.unlink(missing_ok=True)
    return out
