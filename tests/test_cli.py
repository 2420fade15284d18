"""The CLI contract: run writes a trace; user mistakes are one clear line and an exit status that says
their kind (2 bad input, 3 something missing); bench prints a table or JSON."""

import dataclasses
import json
import subprocess
import sys

import pytest

from specviz.cli import main
from specviz.analysis.trace import load_json
from specviz.common import EXIT_BAD_INPUT, EXIT_MISSING, EXIT_OUT_OF_MEMORY

BAD = [
    (["--target", "no-such-org/no-such-model"], "could not load model"),
    (["--target", "/definitely/missing/dir"], "model not found"),
    (["--draft", "/definitely/missing/model.gguf"], "model file not found"),
    (["--batch-size", "0"], "batch size must be at least 1"),
    (["--batch-size", "-3"], "batch size must be at least 1"),
    (["--draft-length", "-1"], "draft length must be 0 or more"),
    (["--max-new-tokens", "0"], "max new tokens must be at least 1"),
    (["--temperature", "-0.5"], "temperature must be 0"),
    (["--top-p", "0"], "top-p must be in (0, 1]"),
    (["--top-p", "1.01"], "top-p must be in (0, 1]"),
    (["--draft-confidence", "1.5"], "draft confidence must be in [0, 1)"),
    (["--device", "cuda"], "CUDA is not available"),
    (["--device", "cuda:1"], "device 'cuda:1' was asked for but CUDA is not available"),  # the device as given
    (["--policy", "nope"], "unknown policy"),
    (["--out", ""], "--out is empty"),
    (["--draft", "ngram", "--policy", "analytic", "--policy-arg", "prior_alpa=0.5"], "has no option 'prior_alpa'"),
    (["--draft", "ngram", "--policy", "goodput", "--policy-arg", "cost_ratio=nan"], "cost_ratio must be a number"),
    (["--mode", "regular", "--tree-width", "2"], "--mode regular drafts nothing"),
    (["--draft", "ngram", "--draft-confidence", "0.5"], "has no confidence to stop on"),
    (["--static"], "give --requests N as well"),
    (["--draft", "ngram", "--draft-length", "100000"], "lower --draft-length"),
]

# bench and sweep race speculative decoding against regular decoding: what would leave nothing to race
RACE_BAD = [
    (["bench", "--draft", "none"], "bench compares speculative with regular decoding"),
    (["sweep", "--draft", "none", "--batch-sizes", "1", "--draft-lengths", "1"], "a sweep compares speculative"),
    (["bench", "--draft", "ngram", "--mode", "regular"], "unrecognized arguments: --mode regular"),  # not offered
]


@pytest.mark.parametrize("args,message", RACE_BAD)
def test_a_race_with_nothing_to_race_is_refused_before_the_model_loads(args, message, capsys, tmp_path):
    code = main([*args, "--prompt", "hello", "--max-new-tokens", "2"]
                + (["--out-dir", str(tmp_path / "s")] if args[0] == "sweep" else []))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("specviz: error: ") and message in err[-1], err


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("args,message", BAD)
def test_bad_input_is_one_clear_line(args, message, capsys):
    import torch

    if any(x.startswith("cuda") for x in args) and torch.cuda.is_available():
        pytest.skip("CUDA is present")
    code = main(["run", "--prompt", "hello", "--max-new-tokens", "2", *args])
    err = capsys.readouterr().err.strip().splitlines()
    missing = ("could not load model", "not found", "CUDA is not available")
    assert code == (EXIT_MISSING if any(m in message for m in missing) else EXIT_BAD_INPUT), (code, err)
    assert err[-1].startswith("specviz: error: ") and message in err[-1]
    assert not any("Traceback" in line for line in err)


def test_empty_prompts(tmp_path, capsys):
    assert main(["run"]) == 2
    assert "no prompts given" in capsys.readouterr().err
    assert main(["run", "--prompt", "  "]) == 2
    assert "prompt 1 is empty" in capsys.readouterr().err
    empty = tmp_path / "p.txt"
    empty.write_text("\n\n")
    assert main(["run", "--prompts", str(empty)]) == 2
    assert "has no prompts" in capsys.readouterr().err


def test_a_file_that_is_not_a_model(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    assert main(["run", "--prompt", "x", "--target", str(f)]) == 2
    assert "is not a model" in capsys.readouterr().err
    g = tmp_path / "fake.gguf"
    g.write_bytes(b"not a gguf")
    assert main(["run", "--prompt", "x", "--target", str(g)]) == 2
    assert "specviz: error:" in capsys.readouterr().err


def test_run_writes_a_valid_trace(tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Count: 1 2 3 1 2 3 1 2"}\n{"prompt": "Say hi."}\n')
    out = tmp_path / "trace.json"
    code = main(["run", "--prompts", str(prompts), "--batch-size", "3", "--draft", "ngram", "--draft-length", "3",
                 "--max-new-tokens", "12", "--dtype", "float32", "--device", "cpu", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "acceptance rate" in printed and "tokens/s" in printed
    trace = load_json(out)
    assert trace["config"]["batch_size"] == 3 and trace["config"]["draft_length"] == 3
    seqs = trace["sequences"]
    assert [s["prompt"] for s in seqs] == ["Count: 1 2 3 1 2 3 1 2", "Say hi.", "Count: 1 2 3 1 2 3 1 2"]  # cycled
    assert seqs[0]["output_token_ids"] == seqs[2]["output_token_ids"]  # greedy: same prompt, same output
    for s in seqs:
        assert 1 <= len(s["output_token_ids"]) <= 12 and s["finish_reason"] in ("eos", "length")
        emitted = [t for st in trace["steps"] for r in st["rows"] if r["index"] == s["index"] for t in r["emitted"]]
        assert emitted == s["output_token_ids"]
    assert trace["summary"]["tokens"] == sum(len(s["output_token_ids"]) for s in seqs)


def test_module_entry_point_has_no_traceback_on_bad_input():
    p = subprocess.run([sys.executable, "-m", "specviz", "run", "--prompt", "x", "--batch-size", "0"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip() == "specviz: error: batch size must be at least 1 (got 0)"


def test_bench_prints_both_modes_and_their_ratio(capsys):
    code = main(["bench", "--prompt", "Count: 1 2 3 1 2 3", "--prompt", "Say hi.", "--prompt", "Name a color.", "--batch-size", "2",
                 "--draft", "ngram", "--draft-length", "2", "--max-new-tokens", "4", "--repeats", "1",
                 "--dtype", "float32", "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0
    assert "regular (ours, k=0)" in out and "speculative (ours)" in out and "prompts=3" in out
    assert "greedy outputs identical to regular decoding: 4/4 rows" in out  # 2 batches of 2 (last cycles)


def test_bench_at_batch_one_runs_the_transformers_peer(capsys):
    code = main(["bench", "--prompt", "Count: 1 2 3 1 2 3", "--batch-size", "1", "--draft", "ngram",
                 "--draft-length", "2", "--max-new-tokens", "4", "--repeats", "1", "--dtype", "float32", "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0 and "transformers generate peer" in out and "ours vs peer" in out


@pytest.mark.parametrize("policy,fallback", [("analytic", "batch-1 formula"), ("bass-capped", "batch-1 formula"),
                                                 ("tree", "illustrative roofline")])
def test_cost_aware_policies_warn_without_a_calibration(policy, fallback, monkeypatch, tmp_path):
    import specviz.analysis.costs

    # run.make_decoder reads the pair's calibration through analysis.costs: none, whatever the cache holds
    monkeypatch.setattr(specviz.analysis.costs, "load_calibration", lambda target, proposer: None)
    out = tmp_path / "t.json"
    with pytest.warns(UserWarning, match=f"no calibration .* {fallback}"):
        code = main(["run", "--prompt", "Count: 1 2 3 1 2 3", "--draft", "ngram", "--policy", policy,
                     "--tree-width", "2" if policy == "tree" else "1",
                     "--max-new-tokens", "4", "--dtype", "float32", "--device", "cpu", "--out", str(out)])
    assert code == 0 and load_json(str(out))["config"]["policy"] == policy


def test_goodput_with_the_suffix_draft_sizes_each_step_by_the_targets_cost(monkeypatch):
    """A model-free draft has no pair to calibrate: a cost-aware policy gives it the target's cost and a fixed
    cap; a later run of the same draft without such a policy drafts to the cap again."""
    import specviz.analysis.costs
    from specviz.analysis.analytic import CostModel
    from specviz.engine.policies import Fixed
    from specviz.run import load_pair, make_decoder
    from specviz.runconfig import RunConfig

    cost = CostModel(0.01, 0.0, 0.001)
    monkeypatch.setattr(specviz.analysis.costs, "target_cost", lambda target: cost)
    cfg = RunConfig(prompts=["Count: 1 2 3 1 2 3"], draft="suffix", draft_length=8, policy="goodput",
                    max_new_tokens=4, dtype="float32", device="cpu")
    target, proposer = load_pair(cfg)
    dec = make_decoder(cfg, target, proposer)
    assert proposer.costs is cost and isinstance(dec.policy, Fixed) and dec.policy.k == 8
    make_decoder(dataclasses.replace(cfg, policy="fixed"), target, proposer)
    assert proposer.costs is None
    monkeypatch.setattr(specviz.analysis.costs, "target_cost", lambda target: None)
    with pytest.warns(UserWarning, match="no calibration of .* drafts to k"):
        make_decoder(cfg, target, proposer)
    assert proposer.costs is None


def test_an_unreachable_hub_is_probed_once_and_a_hub_id_then_loads_from_the_local_cache_only(monkeypatch):
    """Offline, transformers' own retries take ~50 s to fail; the probe makes it one clear line at once."""
    import socket

    from huggingface_hub import constants

    from specviz.common import SpecvizError
    from specviz.models import loading

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # read at its import, maybe under the fixture's 1
    monkeypatch.setattr(loading, "_hub_probe", None)
    probes = []

    def refuse(address, timeout=None):
        probes.append(address)
        raise OSError("no route to host")

    monkeypatch.setattr(socket, "create_connection", refuse)
    for _ in range(2):
        with pytest.raises(SpecvizError, match="not in the local Hugging Face cache, and the hub \\(huggingface.co\\) "
                                               "cannot be reached"):
            loading.load_model("no-such-org/no-such-model", "cpu", "float32")
    assert probes == [("huggingface.co", 443)]  # the second load reused the answer


def test_bench_json_prints_one_object_with_both_arms_and_their_rounds(capsys):
    code = main(["bench", "--prompt", "Count: 1 2 3 1 2 3", "--batch-size", "1", "--draft", "ngram", "--draft-length", "2",
                 "--max-new-tokens", "4", "--repeats", "2", "--dtype", "float32", "--device", "cpu", "--no-peer", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    summary = json.loads(out)  # the whole of stdout: nothing else is printed there
    assert set(summary["arms"]) == {"regular", "speculative"}
    spec = summary["arms"]["speculative"]
    assert len(spec["rounds_tokens_per_s"]) == 2 and spec["tokens_per_s"] > 0 and spec["ratio"] > 0
    assert summary["arms"]["regular"]["ratio"] == 1.0 and summary["draft_length"] == 2 and summary["repeats"] == 2
    assert summary["identical_rows"] == [1, 1] and summary["peer_vs_ours"] is None


def test_one_prompt_per_flag_so_unquoted_words_are_refused_not_split(capsys):
    assert main(["run", "--prompt", "Explain", "speculative", "decoding."]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unrecognized arguments: speculative decoding." in err[0]


def test_out_of_memory_while_running_exits_with_its_own_status(monkeypatch, capsys):
    import torch

    import specviz.cli

    def oom(a):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(specviz.cli, "cmd_run", oom)
    assert main(["run", "--prompt", "hi", "--draft", "ngram", "--max-new-tokens", "2"]) == EXIT_OUT_OF_MEMORY
    assert "out of memory" in capsys.readouterr().err


def test_weights_that_cannot_fit_are_refused_as_out_of_memory(monkeypatch, capsys):
    from specviz.models import loading

    monkeypatch.setattr(loading, "free_memory", lambda dev: (1024, "this test's 1 KiB"))
    assert main(["run", "--prompt", "hi", "--draft", "ngram", "--max-new-tokens", "2", "--device", "cpu",
                 "--dtype", "float16"]) == EXIT_OUT_OF_MEMORY
    assert "not loading" in capsys.readouterr().err


def test_every_subcommand_help_shows_defaults_and_two_examples(capsys):
    from specviz.checks.parser import build_parser

    for cmd in ("run", "bench", "calibrate", "sweep", "distill", "vllm"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([cmd, "--help"])
        text = capsys.readouterr().out
        examples = text.split("examples:\n")[1].strip().splitlines()
        assert len(examples) == 2 and all(e.strip().startswith(f"specviz {cmd} ") for e in examples), text
        assert "(default: " in text


def test_calibrate_and_sweep_offer_only_the_run_flags_they_read():
    from specviz.checks.parser import build_parser

    p = build_parser()
    for cmd, absent in (("calibrate", ["--prompt", "--temperature", "--batch-size", "--policy"]),
                        ("sweep", ["--batch-size", "--draft-length", "--mode", "--policy", "--requests"]),
                        ("bench", ["--mode"])):
        with pytest.raises(SystemExit):
            p.parse_args([cmd, absent[0], "x"])
        for flag in absent:
            assert flag not in p._subparsers._group_actions[0].choices[cmd]._option_string_actions
