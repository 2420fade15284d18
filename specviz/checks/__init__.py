"""The CLI's one validation pass: every flag and file of every subcommand, before any model loads.

``check_args(cmd, args)`` raises SpecvizError (one sentence) for the first problem: files that
are missing, a directory, unreadable, not UTF-8, empty or bad JSONL (with the line); output paths
whose folder is missing or read-only, or that name a directory (or a file, for an output folder);
numbers out of range; and combinations that cannot work, including a prompt + --max-new-tokens
(+ --draft-length) past the model's context, which is refused, not clamped (prompts/fit.py).
Reading a model's config.json and tokenizer for that is cheap and loads no weights; where they
are not on disk yet (a hub id not cached, a .gguf), run.make_decoder makes the same check once
the model is loaded, still before any generation.

``CHECKED`` names what each flag is checked for and ``NEEDS_NO_CHECK`` why the rest need none:
tests/checks/test_checks.py walks the argparse definitions so that a new flag in neither fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from specviz.bounds import FLOATS, INT_LISTS, INTS, MAX_ROWS, check_numbers, draft_reach, hybrid_parts, int_list  # noqa: F401 (the pass's API)
from specviz.checks.peerflags import PEER_CHECKED, PEER_NO_CHECK, check_peer_args
from specviz.checks.tuneflags import TUNE_CHECKED, TUNE_NO_CHECK, check_tune_args
from specviz.common import EXIT_BAD_INPUT, MissingResource, SpecvizError

CHECKED = {
    **{d: "integer range" for d in INTS}, **{d: "finite number in range" for d in FLOATS},
    **{d: "comma-separated integers in range" for d in INT_LISTS},
    "target": "model SPEC: path exists and is a model; its context fits the run",
    "draft": "draft SPEC: default, none, ngram[:N], suffix, MODEL+suffix or a model SPEC",
    "suffix_corpus": "only with --draft suffix or MODEL+suffix; a file in a writable folder, not a directory",
    **PEER_CHECKED,
    "prompt": "some text; fits the context",
    "prompts": "a readable UTF-8 file of prompts (or JSONL), not a directory, not empty; fits the context",
    "policy": "a known policy, built once with its --policy-arg options; tree: a tree draft, --tree-width >= 2",
    "policy_arg": "KEY=VALUE, accepted by the policy",
    "device": "auto, cpu or cuda[:N] where CUDA is present",
    "device_map": "none or auto (choices=); auto spreads over every GPU, so only with --device auto or cuda",
    "out": "run: a file in a writable folder, not a directory; distill: a writable folder",
    "out_dir": "a writable folder (made if missing), not a file",
    "data": "a folder (made if missing), not a file",
    "init_layers": "first, random (feature drafts) or --layers ids below the target's layer count",
    "text": "existing files or folders of written text",
    "extra_data": "a distill data folder (meta.json); its settings are matched when distill reads it",
    "vocab_from": "a distilled draft's folder (its draft file is there)",
    "init_from": "a distilled draft's folder (its draft file is there)",
    "json": "bench: a switch, refused with --peer vllm (whose table is vLLM's own)",
    **TUNE_CHECKED,
}
NEEDS_NO_CHECK = {
    "help": "argparse prints the help",
    "raw_prompt": "a switch: both values are valid",
    "static": "a switch: both values are valid",
    "cuda_graphs": "a switch: both values are valid (without CUDA the static cache runs eagerly)",
    "compile": "a switch: both values are valid (without a C++ compiler the forward runs eagerly, said in one line)",
    "no_peer": "a switch: both values are valid",
    "recalibrate": "a switch: both values are valid",
    "no_freeform": "a switch: both values are valid",
    "no_compile": "a switch: both values are valid",
    "mode": "choices=: argparse refuses anything else in one line (OneLineParser)",
    "prompt_set": "choices=: argparse refuses a name that is not a built-in set in one line (OneLineParser)",
    "dtype": "choices=: argparse refuses anything else in one line (OneLineParser)",
    "kind": "choices=: argparse refuses anything else in one line (OneLineParser)",
    "train_precision": "choices=: argparse refuses anything else in one line (OneLineParser)",
    "vllm_action": "choices=: argparse refuses anything else in one line (OneLineParser)",
    **PEER_NO_CHECK,
    **TUNE_NO_CHECK,
}
RUN_COMMANDS = ("run", "bench", "calibrate", "sweep")
DEFAULT_CONTEXT = 8192  # SmolLM2-135M-Instruct (the packaged GGUF's llama.context_length) before its first conversion


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (and the exit status 2) like every other mistake, and a
    flag means only itself: no abbreviations (sweep's --batch-size would otherwise be its --batch-sizes)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        print(f"specviz: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


# ---- paths -------------------------------------------------------------------------------

def _probe_writable(folder: Path, flag: str) -> None:
    """Create and remove a file: os.access says yes to root even on a folder it cannot write."""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".specviz-probe-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise SpecvizError(f"cannot write to folder {folder} ({flag}): {e.strerror or e}") from None


def check_out_file(path: str, flag: str) -> None:
    p = Path(path).expanduser()
    if p.is_dir():
        raise SpecvizError(f"{flag} {path} is a directory: give a file name, e.g. {p / 'trace.json'}")
    parent = p.parent
    if not parent.exists():
        raise SpecvizError(f"the folder of {flag} {path} does not exist: {parent} (create it first)")
    if not parent.is_dir():
        raise SpecvizError(f"the folder of {flag} {path} is not a folder: {parent}")
    _probe_writable(parent, flag)
    if p.exists() and not p.is_file():
        raise SpecvizError(f"{flag} {path} exists and is not a regular file")


def check_out_dir(path: str, flag: str) -> None:
    """A folder that exists and takes files, or one that can be made (its nearest existing parent takes files)."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise SpecvizError(f"{flag} {path} is a file, not a folder")
    q = p
    while not q.exists():
        q = q.parent
    if not q.is_dir():
        raise SpecvizError(f"{flag} {path} cannot be made: {q} is a file, not a folder")
    _probe_writable(q, flag)


# ---- models and prompts ------------------------------------------------------------------

def model_dir(spec: str, flag: str) -> Path | None:
    """Check a model SPEC without loading it; the folder holding its config.json when it is on disk."""
    from specviz.models.distilled import is_distilled_draft

    if spec == "default":
        from specviz.common import cache_dir

        d = cache_dir() / "SmolLM2-135M-Instruct"
        return d if (d / "config.json").is_file() else None
    p = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not p.exists():
            raise MissingResource(f"model file not found: {spec} ({flag})")
        if not p.is_file():
            raise SpecvizError(f"{spec} ({flag}) is not a .gguf file")
        return None
    if p.exists():
        if is_distilled_draft(spec) or (p.is_dir() and (p / "config.json").is_file()):
            return p
        raise SpecvizError(f"{spec} ({flag}) is not a model: expected a directory in Hugging Face layout "
                           "(config.json) or a .gguf file")
    if spec.startswith(("/", ".", "~")):  # a path, not a hub id: the folder or file is not there
        raise MissingResource(f"model not found: no folder or file {spec} ({flag})")
    name, _, revision = spec.partition("@")
    if name.count("/") != 1 or ".." in name.split("/"):
        raise SpecvizError(f"unknown model {spec!r} ({flag}): not 'default', a local path, a .gguf file or a hub id (org/name)")
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name, "config.json", revision=revision or None)
    except Exception:  # a malformed id or revision: loading says what the hub says
        return None
    return Path(cached).parent if isinstance(cached, str) else None


def check_draft(spec: str, flag: str) -> Path | None:
    if spec in ("default", "none", "ngram", "suffix", "default@bf16"):
        return None
    if parts := hybrid_parts(spec, flag):  # the hybrid (specviz.engine.hybrid)
        if (model := parts[0]) in ("", "none", "suffix") or model.startswith("ngram") or "+" in model:
            raise SpecvizError(f"{flag} MODEL+suffix wants a model draft before '+suffix' (default, a distilled "
                               f"draft folder or a model SPEC), not {model or 'nothing'!r} (got {spec!r})")
        return check_draft(model, flag)
    if spec.startswith("ngram:"):
        n = spec.partition(":")[2]
        if not n.isdigit() or not 1 <= int(n) <= 64:
            raise SpecvizError(f"{flag} ngram:N wants N from 1 to 64 (got {spec!r})")
        return None
    return model_dir(spec, flag)


def _config_json(folder: Path | None) -> dict | None:
    if folder is None or not (folder / "config.json").is_file():
        return None
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise SpecvizError(f"{folder / 'config.json'} cannot be read as JSON: {e}") from None


def prompts_of(a) -> list[str]:
    from specviz.prompts.files import read_prompts
    from specviz.prompts.sets import prompt_set

    prompts = list(a.prompt or [])
    for i, p in enumerate(prompts):
        if not p.strip():
            raise SpecvizError(f"prompt {i + 1} is empty: every prompt needs some text")
    if a.prompts:
        prompts += read_prompts(a.prompts)
    return prompts + (prompt_set(a.prompt_set) if getattr(a, "prompt_set", None) else [])


def _token_lengths(folder: Path, prompts: list[str], raw: bool) -> list[int] | None:
    """Prompt lengths as the model will see them, from the tokenizer on disk (no weights); None if it is not there."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(folder))
    except Exception:  # no tokenizer files beside the config: run.make_decoder checks once the model is loaded
        return None
    from specviz.models.loading import encode_prompts

    return [len(ids) for ids in encode_prompts(tok, prompts, raw)]


def _model_name(spec: str) -> str:
    return "SmolLM2-135M-Instruct" if spec == "default" else spec


def check_room(max_new_tokens: int, k: int, context: int | None, model: str) -> None:
    """Refuse new tokens that leave no room for even a one-token prompt (no tokenizer needed)."""
    if context is not None and max_new_tokens + k >= context:
        lower = "--draft-length" if k >= max_new_tokens else "--max-new-tokens"
        raise SpecvizError(f"--max-new-tokens {max_new_tokens} (+ draft length {k}) leaves no room for a prompt in the "
                           f"{context}-token context of {model}: lower {lower}")


def check_context(a, cmd: str, prompts: list[str], target_dir: Path | None, draft_dir: Path | None) -> None:
    from specviz.prompts.fit import check_fits, context_length

    contexts = []  # (context, whose): the shorter one limits the run, and the message names it
    for folder, default, whose in ((target_dir, DEFAULT_CONTEXT if a.target == "default" else None, _model_name(a.target)),
                                   (draft_dir, None, f"the draft {a.draft}")):
        cfg = _config_json(folder)
        c = context_length(cfg) if cfg else default
        if c is not None:
            contexts.append((c, whose))
    if not contexts:
        return
    context, model = min(contexts)
    if cmd == "calibrate":  # a cached prefix, then up to k_max + 1 tokens per forward
        if a.prefix_len + a.k_max + 1 > context:
            raise SpecvizError(f"--prefix-len {a.prefix_len} + --k-max {a.k_max} + 1 positions pass the {context}-token "
                               f"context of {model}")
        return
    k = draft_reach(a.draft, max(int_list(a.draft_lengths, "--draft-lengths")) if cmd == "sweep" else a.draft_length)
    check_room(a.max_new_tokens, k, context, model)
    # run: the first B (or --requests, cycled); bench/sweep: every prompt
    used = prompts[: max(a.batch_size, getattr(a, "requests", None) or 0)] if cmd == "run" else prompts
    lengths = _token_lengths(target_dir, used, a.raw_prompt) if target_dir is not None else None
    if lengths:
        check_fits(lengths, a.max_new_tokens, k, context, model)


# The --policy-arg keys each policy reads (run.make_decoder passes costs itself, and w_max, n_max from the tree flags).
_ANALYTIC_OPTIONS = ("cost_ratio", "verify_ratio", "prior_alpha", "decay", "k_max")
POLICY_OPTIONS = {"fixed": (), "heuristic": ("k_max",), "bass": ("k_max",), "bass-capped": _ANALYTIC_OPTIONS,
                      "table": ("table",), "analytic": _ANALYTIC_OPTIONS, "goodput": _ANALYTIC_OPTIONS,
                      "tree": ("w_max", "n_max", "knee", "cost_ratio", "verify_ratio", "prior_alpha", "decay")}


def check_policy(a) -> None:
    from specviz.engine.policies import make_policy

    cargs = {}
    for kv in a.policy_arg:
        key, sep, val = kv.partition("=")
        if not sep or not key:
            raise SpecvizError(f"--policy-arg wants KEY=VALUE (got {kv!r})")
        known = POLICY_OPTIONS.get(a.policy)
        if known is not None and key not in known:  # a misspelt key would be ignored without a word
            raise SpecvizError(f"--policy {a.policy} has no option {key!r}"
                               + (f": its options are {', '.join(known)}" if known else ": it takes none"))
        cargs[key] = val
    try:
        make_policy(a.policy, max(a.draft_length, 0), **cargs)
    except SpecvizError:
        raise
    except (TypeError, ValueError) as e:
        raise SpecvizError(f"--policy {a.policy} with {a.policy_arg}: {e}") from None


def check_device(device: str) -> None:
    from specviz.models.loading import resolve_device

    if device.startswith("cuda:"):
        n = device.partition(":")[2]
        if not n.isdigit():
            raise SpecvizError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N")
        import torch

        if torch.cuda.is_available() and int(n) >= torch.cuda.device_count():
            raise SpecvizError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    resolve_device(device)


# ---- the pass ----------------------------------------------------------------------------

def check_run_args(cmd: str, a) -> None:
    if a.device_map == "auto" and a.device not in ("auto", "cuda"):
        raise SpecvizError(f"--device-map auto spreads the target over every GPU: give --device auto or cuda, not {a.device}")
    check_device(a.device)
    target_dir = model_dir(a.target, "--target")
    draft_dir = check_draft(a.draft, "--draft")
    check_peer_args(a, check_draft)
    shapes = a.policy == "tree"  # it picks (k, W, N) per step, up to --draft-length, --tree-width, --tree-nodes
    if (getattr(a, "tree_width", 1) > 1 or shapes) and a.draft == "none":
        flag = "--policy tree" if shapes else f"--tree-width {a.tree_width}"
        raise SpecvizError(f"{flag} needs a draft that grows trees: a model draft or ngram")
    if shapes and a.tree_width < 2:
        raise SpecvizError("--policy tree picks each step's width up to --tree-width: give --tree-width 2 or more "
                           "(with --tree-width 1, chains, use --policy analytic)")
    if cmd in ("sweep", "bench"):  # both race speculative decoding against regular decoding
        what = "a sweep" if cmd == "sweep" else "bench"
        if a.draft == "none":  # (neither offers --mode: each runs regular decoding beside speculative itself)
            raise SpecvizError(f"{what} compares speculative with regular decoding: give a --draft other than none")
    if cmd == "bench" and a.json and a.peer == "vllm":
        raise SpecvizError("--json prints bench's own summary; --peer vllm prints vLLM's table: drop one of them")
    if cmd == "run" and a.out is not None and not a.out.strip():
        raise SpecvizError("--out is empty: give the trace's file name, or leave --out out to write no trace")
    if a.mode == "regular" and (getattr(a, "tree_width", 1) > 1 or a.policy != "fixed"):
        raise SpecvizError("--mode regular drafts nothing, so --tree-width and --policy do not apply: drop them "
                           "or drop --mode regular")
    if getattr(a, "draft_confidence", 0) and (a.draft.startswith("ngram") or a.draft in ("none", "suffix")):
        raise SpecvizError(f"--draft-confidence stops a model draft early; the {a.draft} draft has no confidence to "
                           "stop on: drop it, or use a model draft")
    if getattr(a, "static", False) and not getattr(a, "requests", None):
        raise SpecvizError("--static runs --requests as consecutive static batches: give --requests N as well")
    if getattr(a, "suffix_corpus", None):
        if not a.draft.endswith("suffix"):
            raise SpecvizError("--suffix-corpus holds the suffix draft's global structure: give --draft suffix too")
        check_out_file(a.suffix_corpus, "--suffix-corpus")
    check_policy(a)
    prompts = prompts_of(a)
    if cmd != "calibrate" and not prompts:
        raise SpecvizError("no prompts given: pass --prompt TEXT, --prompts FILE or --prompt-set NAME")
    if cmd == "run" and a.out:
        check_out_file(a.out, "--out")
        if a.prompts and Path(a.out).expanduser().resolve() == Path(a.prompts).expanduser().resolve():
            raise SpecvizError(f"--out {a.out} is the prompts file: the trace would overwrite it")
    if cmd == "sweep":
        check_out_dir(a.out_dir, "--out-dir")
    check_context(a, cmd, prompts, target_dir, draft_dir if a.mode == "speculative" or cmd != "run" else None)


def check_distill_args(a) -> None:
    check_device(a.device)
    target_dir = model_dir(a.target, "--target")
    check_out_dir(a.out, "--out")
    if a.data:
        check_out_dir(a.data, "--data")
    feature = a.kind == "feature"
    if a.init_layers == "random" and not feature:
        raise SpecvizError("--init-layers random is for --kind feature; a token draft starts from target layers")
    for path in a.text or []:
        if not Path(path).expanduser().exists():
            raise MissingResource(f"--text {path!r}: no such file or folder")
    for path in a.extra_data or []:
        if not (Path(path).expanduser() / "meta.json").is_file():
            raise SpecvizError(f"--extra-data {path!r} is not a distill data folder (no meta.json)")
    from specviz.models.distilled import DRAFT_FILE, draft_depth

    layers = draft_depth(a.kind, a.layers)
    for flag, path in (("--vocab-from", a.vocab_from), ("--init-from", a.init_from)):
        if path and not (Path(path).expanduser() / DRAFT_FILE).is_file():
            raise SpecvizError(f"{flag} {path!r} is not a distilled draft (no {DRAFT_FILE})")
    cfg = _config_json(target_dir) or {}
    n_target, vocab = cfg.get("num_hidden_layers"), cfg.get("vocab_size")
    if a.init_layers not in ("first", "random"):
        ids = int_list(a.init_layers, "--init-layers", 0)
        if len(ids) != layers or (n_target and max(ids) >= n_target):
            raise SpecvizError(f"--init-layers needs {layers} comma-separated layer ids"
                               + (f" in 0..{n_target - 1}" if n_target else "") + f" (got {a.init_layers!r})")
    elif a.init_layers == "first" and n_target and layers > n_target:
        raise SpecvizError(f"--layers {layers} is more than the target's {n_target} layers to start from")
    if vocab and a.vocab > vocab:
        raise SpecvizError(f"--vocab {a.vocab} exceeds the target's vocabulary ({vocab})")
    if vocab and a.topk > vocab:
        raise SpecvizError(f"--topk {a.topk} exceeds the target's vocabulary ({vocab})")
    from specviz.prompts.fit import context_length

    context = context_length(cfg) if cfg else (DEFAULT_CONTEXT if a.target == "default" else None)
    check_room(max(a.max_new_tokens, a.eval_max_new_tokens), max(int_list(a.eval_ks, "--eval-ks")), context,
               _model_name(a.target))


def check_args(cmd: str, a) -> None:
    """The whole pass for one parsed command line; raises SpecvizError at the first problem."""
    check_numbers(a)
    if cmd in RUN_COMMANDS:
        check_run_args(cmd, a)
    elif cmd == "distill":
        check_distill_args(a)
    elif cmd == "vllm":  # target and draft as everywhere, then what vLLM can serve (specviz.peers.server)
        from specviz.peers.server import check_serve

        check_serve(a, model_dir(a.target, "--target"), check_draft(a.draft, "--draft"))
    elif cmd == "tune":  # no model: the acceptance source, the costs, the names it writes
        check_tune_args(a)
