# Sourced by bench/gpu_check.sh and bench/gpu_distill.sh: the python both run, and the packaged
# model that bench/gpu_carry.sh carried to the GPU host in parts.

# PY, unless the caller set it: .venv/bin/python if it imports torch, else python3.
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch" 2>/dev/null; then PY=.venv/bin/python; else PY=python3; fi
fi

carried() { [ -f "${CARRY_KEEP:-/tmp/specviz-carry}/manifest" ]; }  # did receive calls leave parts here?

# use_carried FILE: unpack the carried parts (what unpack says goes to FILE), then import from them.
use_carried() {
  bash bench/gpu_carry.sh unpack >> "$1" 2>&1 || return 1
  export PYTHONPATH=${CARRY_SITE:-/tmp/specviz-site}${PYTHONPATH:+:$PYTHONPATH}
}
