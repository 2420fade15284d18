"""Every user mistake on every subcommand is one line on stderr, a non-zero exit that says what kind
of mistake (bad input, or something missing) and no traceback, before any model loads
(specviz.checks); and no flag exists without a case here or a stated reason it needs no check."""

import argparse
import os

import pytest

from specviz import checks
from specviz.cli import build_parser, main
from specviz.common import EXIT_BAD_INPUT, EXIT_MISSING

RUN_COMMANDS = ("run", "bench", "calibrate", "sweep")
LONG_PROMPT = "word " * 9000  # ~9,000 tokens: past SmolLM2's 8192
# A "../../.." path that climbs from wherever the checkout sits to /etc, a folder that is not a model
# (a fixed "../../etc" only reaches /etc from a checkout two levels deep).
TRAVERSAL_TO_ETC = os.path.relpath("/etc")

# Cases for the flags every run-like subcommand shares: (args, what the line says). "{d}" is a
# folder of bad files (made below). Each runs under run, bench, calibrate and sweep.
SHARED = [
    (["--target", "/definitely/missing/dir"], "model not found: no folder or file /definitely/missing/dir"),
    (["--target", "no/such/hub/id"], "unknown model"),
    (["--target", TRAVERSAL_TO_ETC], "is not a model"),
    (["--target", "{d}/notes.txt"], "is not a model"),
    (["--target", "{d}/missing.gguf"], "model file not found"),
    (["--draft", "/definitely/missing/model.gguf"], "model file not found"),
    (["--draft", "ngram:x"], "ngram:N wants N from 1 to 64"),
    (["--draft", "ngram:0"], "ngram:N wants N from 1 to 64"),
    (["--prompts", "{d}/missing.txt"], "prompts file not found"),
    (["--prompts", "{d}"], "is a directory"),
    (["--prompts", "/proc/self/mem"], "cannot read prompts file"),  # unreadable even for root
    (["--prompts", "/dev/null"], "is not a regular file"),
    (["--prompts", "{d}/huge.txt"], "is 65 MiB: more than the 64 MiB a prompts file may hold"),
    (["--prompts", "{d}/latin1.txt"], "is not UTF-8 text (byte 0xe9 on line 2)"),
    (["--prompts", "{d}/nul.txt"], "holds NUL bytes (line 2): it is not a text file"),
    (["--prompts", "{d}/empty.txt"], "has no prompts"),
    (["--prompts", "{d}/bad.jsonl"], "bad.jsonl:2: invalid JSON"),
    (["--prompts", "{d}/nokey.jsonl"], "nokey.jsonl:1: JSONL lines need a \"prompt\" key"),
    (["--prompts", "{d}/number.jsonl"], "number.jsonl:1: \"prompt\" must be a string (got int)"),
    (["--prompt", "  "], "prompt 2 is empty"),  # after the base "hi"
    (["--prompt", "two", "words"], "unrecognized arguments: words"),  # one prompt per flag: quote it
    (["--batch-size", "0"], "batch size must be at least 1 (got 0)"),
    (["--batch-size", "1000000000"], "batch size must be at most 65536"),
    (["--batch-size", "two"], "argument --batch-size: invalid int value"),
    (["--draft-length", "-1"], "draft length must be 0 or more"),
    (["--max-new-tokens", "0"], "max new tokens must be at least 1"),
    (["--temperature", "-0.5"], "temperature must be 0 (greedy) or positive"),
    (["--temperature", "nan"], "temperature must be 0 (greedy) or positive (got nan)"),
    (["--temperature", "inf"], "temperature must be 0 (greedy) or positive (got inf)"),
    (["--top-p", "0"], "top-p must be in (0, 1]"),
    (["--top-p", "1.01"], "top-p must be in (0, 1]"),
    (["--seed", "-1"], "seed must be 0 or more"),
    (["--policy", "nope"], "unknown policy"),
    (["--policy", "table"], "policy 'table' needs a k table"),
    (["--policy-arg", "k_max"], "--policy-arg wants KEY=VALUE"),
    (["--controller", "nope"], "unknown policy"),  # the flags' former names are checked the same way
    (["--controller-arg", "k_max"], "--policy-arg wants KEY=VALUE"),
    (["--policy", "heuristic", "--policy-arg", "k_max=0"], "k_max must be >= 1"),
    (["--device", "tpu"], "unknown device 'tpu'"),
    (["--device-map", "auto", "--device", "cpu"], "--device-map auto spreads the target over every GPU"),
    (["--device-map", "auto", "--device", "cuda:1"], "give --device auto or cuda, not cuda:1"),
    (["--device-map", "balanced"], "invalid choice: 'balanced'"),
    (["--device", "cuda:x"], "unknown device 'cuda:x'"),
    (["--dtype", "float8"], "argument --dtype: invalid choice"),
    (["--mode", "fast"], "argument --mode: invalid choice"),
    (["--draft-confidence", "1.5"], "draft confidence must be in [0, 1)"),
    (["--tree-width", "0"], "tree width must be at least 1 (got 0)"),
    (["--tree-nodes", "0"], "tree nodes must be at least 1 (got 0)"),
    (["--draft", "none", "--tree-width", "2"], "--tree-width 2 needs a draft that grows trees"),
    (["--policy", "tree"], "--policy tree picks each step's width up to --tree-width: give --tree-width 2"),
    (["--policy", "tree", "--tree-width", "3", "--draft", "none"], "--policy tree needs a draft that grows"),
    (["--policy", "tree", "--tree-width", "3", "--draft-length", "0"], "policy 'tree' needs --draft-length 1"),
    (["--policy", "tree", "--tree-width", "3", "--policy-arg", "knee=0"], "needs knee > 0 tokens"),
    (["--policy", "tree", "--tree-width", "3", "--policy-arg", "w_max=0"], "w_max must be >= 1"),
    (["--suffix-corpus", "{d}/corpus.json"], "--suffix-corpus holds the suffix draft's global structure: give --draft"),
    (["--draft", "suffix", "--suffix-corpus", "{d}"], "is a directory"),
    (["--draft", "suffix", "--suffix-corpus", "/sys/corpus.json"], "cannot write to folder /sys"),
    (["--draft", "suffix", "--draft-confidence", "0.5"], "the suffix draft has no confidence to stop on"),
    (["--prompt-set", "poems"], "argument --prompt-set: invalid choice: 'poems'"),
    (["--synthetic-acceptance", "1.5"], "synthetic acceptance must be in [0, 1] (got 1.5)"),
    (["--synthetic-acceptance", "nan"], "synthetic acceptance must be in [0, 1]"),
    (["--synthetic-acceptance", "0.5", "--draft", "none"], "regular decoding drafts none"),
    (["--synthetic-acceptance", "0.5", "--tree-width", "2"], "token trees (--tree-width > 1, --policy tree)"),
]
# calibrate replaces the prompts with its own and checks its own context, so these skip it
PROMPTED = [
    (["--max-new-tokens", "100000"], "leaves no room for a prompt in the 8192-token context"),
    (["--batch-size", "2", "--prompt", LONG_PROMPT], "past the 8192-token context of SmolLM2-135M-Instruct"),
]
# continuous batching (issue 17): run and bench serve --requests through --batch-size lanes
QUEUED = [
    (["--requests", "0"], "requests must be at least 1"),
    (["--requests", "2", "--batch-size", "4"], "2 requests cannot fill 4 lanes"),
    (["--arrival-rate", "-1"], "arrival rate must be 0"),
    (["--arrival-rate", "nan"], "arrival rate must be 0"),
]
BASE = {"run": ["--prompt", "hi"], "bench": ["--prompt", "hi"], "calibrate": [],
        "sweep": ["--prompt", "hi", "--out-dir", "{d}/sweep"], "distill": ["--out", "{d}/draft"], "vllm": ["serve", "--port", "0"],
        "tune": []}
SERVER = ["--metrics-url", "127.0.0.1:9"]  # tune: its checks never fetch; with entered costs:
ENTERED = SERVER + ["--target-step-ms", "20", "--draft-cost-ratio", "0.1"]
OWN = {
    "run": [
        (["--out", "{d}/no-such-folder/t.json"], "does not exist"),
        (["--out", "{d}"], "is a directory: give a file name"),
        (["--out", "{d}/notes.txt/t.json"], "is not a folder"),
        (["--out", "/sys/t.json"], "cannot write to folder /sys"),  # read-only even for root
        (["--prompts", "{d}/ok.txt", "--out", "{d}/ok.txt"], "is the prompts file"),
        (["--show", "-1"], "show must be 0 or more"),
    ],
    "bench": [
        (["--repeats", "0"], "repeats must be at least 1"),
        (["--peer-draft", "ngram:x"], "--peer-draft ngram:N wants N"),
        (["--peer-draft", "/definitely/missing/model.gguf"], "model file not found"),
        (["--peer", "nope"], "argument --peer: invalid choice"),
        (["--peer", "vllm"], "compare it with vLLM's regular decoding (--peer-draft none)"),  # the default draft
        (["--peer", "vllm", "--peer-draft", "default"], "vLLM's side of the peer bench runs ngram or regular"),
        (["--peer", "vllm", "--draft", "ngram", "--temperature", "0.7"], "compares greedy outputs"),
        (["--json", "--peer", "vllm", "--draft", "ngram", "--peer-draft", "ngram"], "drop one of them"),
        (["--peer", "llamacpp", "--peer-modes", "regular,beam"], "--peer-modes takes a comma-separated list"),
        (["--peer", "llamacpp", "--peer-weights", "int8"], "--peer-weights takes a comma-separated list"),
        (["--peer", "llamacpp", "--batch-size", "4", "--peer-modes", "lookup"], "speculates in one lane only"),
    ],
    "calibrate": [
        (["--batch-sizes", "0,2"], "--batch-sizes must be comma-separated integers from 1"),
        (["--batch-sizes", "a,b"], "--batch-sizes must be comma-separated integers"),
        (["--k-max", "0"], "k max must be at least 1"),
        (["--prefix-len", "0"], "prefix len must be at least 1"),
        (["--prefix-len", "9000"], "--prefix-len 9000 + --k-max 8 + 1 positions pass the 8192-token context"),
    ],
    "sweep": [
        (["--batch-sizes", ""], "--batch-sizes must be comma-separated integers"),
        (["--draft-lengths", "0,1"], "--draft-lengths must be comma-separated integers from 1"),
        (["--draft-lengths", "1,9000"], "leaves no room for a prompt"),
        (["--repeats", "0"], "repeats must be at least 1"),
        (["--out-dir", "{d}/notes.txt"], "is a file, not a folder"),
        (["--out-dir", "{d}/notes.txt/sub"], "cannot be made"),
        (["--out-dir", "/sys/sweep"], "cannot write to folder /sys"),
        (["--draft", "none"], "a sweep compares speculative with regular decoding"),
    ],
    "distill": [
        (["--target", "/definitely/missing/dir"], "model not found"),
        (["--out", "{d}/notes.txt"], "is a file, not a folder"),
        (["--out", "/sys/draft"], "cannot write to folder /sys"),
        (["--data", "{d}/notes.txt"], "is a file, not a folder"),
        (["--samples", "0"], "samples must be at least 1"),
        (["--val-samples", "-1"], "val samples must be 0 or more"),
        (["--max-new-tokens", "0"], "max new tokens must be at least 1"),
        (["--max-new-tokens", "9000"], "leaves no room for a prompt"),
        (["--gen-batch-size", "0"], "gen batch size must be at least 1"),
        (["--gen-budget-min", "0"], "gen budget min must be positive minutes"),
        (["--gen-workers", "-1"], "gen workers must be 0 or more"),
        (["--topk", "0"], "topk must be at least 1"),
        (["--topk", "100000"], "--topk 100000 exceeds the target's vocabulary"),
        (["--steps", "-1"], "steps must be 0 or more"),
        (["--batch-size", "0"], "batch size must be at least 1"),
        (["--lr", "0"], "lr must be positive"),
        (["--lr", "nan"], "lr must be positive"),
        (["--weight-decay", "-1"], "weight decay must be 0 or more"),
        (["--vocab", "0"], "vocab must be at least 1"),
        (["--vocab", "100000"], "--vocab 100000 exceeds the target's vocabulary"),
        (["--kind", "huge"], "argument --kind: invalid choice"),
        (["--layers", "0"], "layers must be at least 1"),
        (["--layers", "99"], "--layers 99 is more than the target's 30 layers"),
        (["--init-layers", "x"], "--init-layers must be comma-separated integers"),
        (["--init-layers", "random"], "--init-layers random is for --kind feature"),
        (["--init-layers", "0,99"], "--init-layers needs 2 comma-separated layer ids in 0..29"),
        (["--kind", "feature", "--init-layers", "3,4"], "--init-layers needs 1 comma-separated layer ids"),
        (["--kind", "feature", "--layers", "2", "--init-layers", "29"], "--init-layers needs 2 comma-separated"),
        (["--kind", "feature", "--layers", "31"], "--layers 31 is more than the target's 30 layers"),
        (["--seed", "-1"], "seed must be 0 or more"),
        (["--time-budget-min", "-5"], "time budget min must be positive minutes"),
        (["--eval-every", "0"], "eval every must be at least 1"),
        (["--eval-prompts", "0"], "eval prompts must be at least 1"),
        (["--eval-max-new-tokens", "0"], "eval max new tokens must be at least 1"),
        (["--eval-ks", "0"], "--eval-ks must be comma-separated integers from 1"),
        (["--cost-rounds", "0"], "cost rounds must be at least 1"),
        (["--cost-prefix-len", "0"], "cost prefix len must be at least 1"),
        (["--threads", "-1"], "threads must be 0 or more"),
        (["--text", "{d}/missing-text"], "missing-text': no such file or folder"),
        (["--extra-data", "{d}"], "is not a distill data folder (no meta.json)"),
        (["--text-tokens", "0"], "text tokens must be at least 1"),
        (["--text-chunk-tokens", "1"], "text chunk tokens must be at least 2"),
        (["--text-batch-size", "0"], "text batch size must be at least 1"),
        (["--vocab-from", "{d}"], "is not a distilled draft (no "),
        (["--init-from", "{d}"], "is not a distilled draft (no "),
        (["--prompts", "free"], "argument --prompts: invalid choice"),
        (["--device", "tpu"], "unknown device"),
        (["--dtype", "int4"], "argument --dtype: invalid choice"),
    ],
    "vllm": [  # vLLM's own server, refused before it starts
        (["--target", "/definitely/missing/dir"], "model not found"),
        (["--target", "{d}/missing.gguf"], "model file not found"),
        (["--target", "{d}/notes.txt"], "is not a model"),
        (["--draft", "default"], "vLLM cannot serve specviz's distilled draft"),
        (["--draft", "ngram:x"], "ngram:N wants N from 1 to 64"),
        (["--draft", "ngram", "--draft-length", "0"], "--draft ngram needs --draft-length 1 or more"),
        (["--speculative-config", "ngram"], "--speculative-config is not JSON"),
        (["--draft-length", "-1"], "draft length must be 0 or more"),
        (["--port", "70000"], "port must be at most 65535"),
        (["--port", "-1"], "port must be 0 or more"),
        (["--dtype", "int4"], "argument --dtype: invalid choice"),
        (["--max-model-len", "0"], "max model len must be at least 16"),
        (["--max-model-len", "100000"], "--max-model-len 100000 is past the 8192-token context"),
        (["--max-num-seqs", "0"], "max num seqs must be at least 1"),
        (["--startup-timeout", "0"], "startup timeout must be positive seconds"),
        (["--startup-timeout", "nan"], "startup timeout must be positive seconds"),
        (["stop"], "unrecognized arguments: stop"),
    ],
    "tune": [  # no model: where the acceptance and the costs come from, and the names it writes
        ([], "give one of --trace TRACE.json, --sweep DIR or --metrics-url URL"),
        (["--trace", "{d}/missing.json"], "missing.json: no such file or folder"),
        (["--trace", "{d}"], "is a directory: give a trace file"),
        (["--trace", "{d}/notes.txt", "--sweep", "{d}"], "give only one of --trace, --sweep and --metrics-url"),
        (["--sweep", "{d}"], "is not a sweep folder (no sweep.csv"),
        (["--metrics-url", "ftp://host/metrics"], "not an http(s) address"),
        (SERVER, "no costs for this pair: give --calibration FILE"),
        (ENTERED + ["--window", "0"], "window must be positive seconds"),
        (SERVER + ["--calibration", "{d}/notes.txt"], "is not a calibration record"),
        (ENTERED + ["--calibration", "{d}/notes.txt"], "give --calibration or entered costs"),
        (SERVER + ["--target-step-ms", "20"], "--target-step-ms and --draft-cost-ratio go together"),
        (SERVER + ["--target-step-ms", "0", "--draft-cost-ratio", "0.1"], "target step ms must be positive"),
        (SERVER + ["--target-step-ms", "20", "--draft-cost-ratio", "-1"], "draft cost ratio must be 0 or more"),
        (ENTERED + ["--knee-tokens", "nan"], "knee tokens must be positive tokens"),
        (ENTERED + ["--batch-sizes", "0,4"], "--batch-sizes must be comma-separated integers from 1"),
        (ENTERED + ["--serve-batch", "0"], "serve batch must be at least 1"),
        (ENTERED + ["--k-max", "0"], "k max must be at least 1"),
        (ENTERED + ["--k-max", "99"], "tune considers drafts of at most 32 tokens"),
        (ENTERED + ["--vllm-version", "latest"], "is not a version number"),
        (ENTERED + ["--engine", "tgi"], "argument --engine: invalid choice"),
        (ENTERED + ["--draft", "none"], "--draft names the draft the settings are for"),
        (ENTERED + ["--draft", "ngram:0"], "--draft ngram:N wants N from 1 to 64"),
    ],
}


# What names something not on this machine exits EXIT_MISSING; every other mistake EXIT_BAD_INPUT.
MISSING = ("model not found", "model file not found", "prompts file not found", "no such file or folder",
           "no costs for this pair")


def cases():
    """The shared cases under each run-like subcommand that has all their flags (calibrate and sweep
    offer only the run flags they read), then each subcommand's own."""
    out = []
    subcommands = _subparsers()
    for cmd in RUN_COMMANDS:
        flags = {s for act in subcommands[cmd]._actions for s in act.option_strings}
        out += [(cmd, args, msg) for args, msg in SHARED + PROMPTED + QUEUED
                if {a for a in args if a.startswith("--")} <= flags]
    out += [(cmd, args, msg) for cmd, own in OWN.items() for args, msg in own]
    return out


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "notes.txt").write_text("not a model")
    (d / "ok.txt").write_text("hello\n")
    (d / "latin1.txt").write_bytes("first line\ncaf\xe9\n".encode("latin-1"))
    (d / "nul.txt").write_bytes(b"first line\n\x00\x00\x00\n")
    (d / "empty.txt").write_text("\n  \n\n")
    (d / "bad.jsonl").write_text('{"prompt": "fine"}\n{"prompt": "cut off\n')
    (d / "nokey.jsonl").write_text('{"text": "hello"}\n')
    (d / "number.jsonl").write_text('{"prompt": 5}\n')
    with open(d / "huge.txt", "wb") as f:  # sparse: no disk, and refused before it is read
        f.truncate(65 * 2**20)
    return d


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _argv(cmd, args, d):
    return [cmd, *[a.replace("{d}", str(d)) for a in BASE[cmd] + args]]


@pytest.mark.parametrize("cmd,args,message", cases(), ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None)
def test_every_mistake_is_one_line_and_a_nonzero_exit(cmd, args, message, bad_files, capsys):
    code = main(_argv(cmd, args, bad_files))
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert code == (EXIT_MISSING if any(m in message for m in MISSING) else EXIT_BAD_INPUT), (code, captured.err)
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("specviz: error: ") and message in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out


def test_the_checks_pass_a_good_command_line_of_every_subcommand(bad_files):
    """Not over-strict: the defaults with a prompt and writable outputs pass the whole pass."""
    good = {"run": ["--out", "{d}/t.json", "--prompts", "{d}/ok.txt"], "bench": [], "calibrate": [], "sweep": [],
            "distill": ["--data", "{d}/data", "--kind", "feature", "--init-layers", "random"],
            "vllm": ["--draft", "ngram", "--draft-length", "3"]}
    for cmd, extra in good.items():
        a = build_parser().parse_args(_argv(cmd, extra, bad_files))
        checks.check_args(cmd, a)  # raises on a problem
    assert not (bad_files / "t.json").exists() and not (bad_files / "sweep").exists()  # checking writes nothing


def test_every_flag_of_every_subcommand_has_a_case_or_a_reason():
    """Walk the argparse definitions: a new flag without a validation case (or a stated reason
    it needs none, in specviz.checks.NEEDS_NO_CHECK) fails here."""
    covered = {(cmd, a) for cmd, args, _ in cases() for a in args if a.startswith("--")}
    missing, unchecked = [], []
    for cmd, sub in _subparsers().items():
        for act in sub._actions:
            if act.dest in checks.NEEDS_NO_CHECK:
                continue
            if act.dest not in checks.CHECKED:
                unchecked.append(f"{cmd} {act.option_strings[0]}")
            elif not any((cmd, s) in covered for s in act.option_strings):
                missing.append(f"{cmd} {act.option_strings[0]}")
    assert not unchecked, f"flags specviz.checks neither checks nor explains: {unchecked}"
    assert not missing, f"flags without a case in tests/checks/test_checks.py: {missing}"


def test_needs_no_check_gives_a_reason_for_each_flag():
    assert all(isinstance(r, str) and len(r) > 10 for r in checks.NEEDS_NO_CHECK.values())
    assert not set(checks.NEEDS_NO_CHECK) & set(checks.CHECKED)


def test_a_readonly_folder_is_refused_for_a_user_who_cannot_write(tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere chmod says no; the /sys cases cover a folder root cannot write")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    assert main(["run", "--prompt", "hi", "--out", str(ro / "t.json")]) == 2
    assert "cannot write to folder" in capsys.readouterr().err


def test_prompts_files_from_other_editors_read_as_written(tmp_path):
    from specviz.prompts.files import read_prompts

    f = tmp_path / "win.txt"
    f.write_bytes("\ufefffirst prompt\r\n\r\nsecond \u00e9t\u00e9\r\n".encode("utf-8"))  # BOM, CRLF, accents
    assert read_prompts(str(f)) == ["first prompt", "second \u00e9t\u00e9"]
    j = tmp_path / "p.jsonl"
    j.write_text('{"prompt": "a { brace"}\nplain line\n  {"prompt": "indented"}\n')
    assert read_prompts(str(j)) == ["a { brace", "plain line", "indented"]


def test_every_policy_has_its_list_of_accepted_options():
    from specviz.checks import POLICY_OPTIONS
    from specviz.engine.policies import POLICIES

    assert set(POLICY_OPTIONS) == set(POLICIES)  # a new policy must say which --policy-arg keys it reads


def test_the_former_names_of_the_policy_flags_still_parse_and_are_not_in_help():
    p = build_parser()
    a = p.parse_args(["run", "--prompt", "x", "--controller", "table", "--controller-arg", "table=1:4"])
    assert a.policy == "table" and a.policy_arg == ["table=1:4"]
    assert p.parse_args(["run", "--prompt", "x"]).policy == "fixed"
    run_help = next(c for c in p._subparsers._group_actions[0].choices.values() if c.prog.endswith(" run")).format_help()
    assert "--policy" in run_help and "--controller" not in run_help
