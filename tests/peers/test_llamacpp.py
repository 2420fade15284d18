"""``bench --peer llamacpp`` without llama.cpp: the flags it accepts, the worker's requests and the rates
read from its answers, acceptance counted from proposals, the converter's command line, the table and
JSON, and the one-line errors (a missing environment says the setup command). The real peer is
tests/peers/test_llamacpp_real.py (opt-in)."""

from __future__ import annotations

import dataclasses
import os
import sys

import pytest

from specviz.common import MissingResource, SpecvizError, cache_dir
from specviz.models.loading import DEFAULT_NAME
from specviz.peers import ggufs
from specviz.peers.llamacpp import (ArmRecord, LlamaCppPeer, LlamaCppResult, arm_name, check_llamacpp, format_result,
                                    rates, result_json, run_request)
from specviz.peers.llamacpp_worker import accepted_tokens, extra_buffers_safe
from specviz.runconfig import RunConfig


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A stand-in .venv-llamacpp: bin/python is this interpreter (which has no llama_cpp)."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setenv("SPECVIZ_LLAMACPP_ENV", str(tmp_path))
    return tmp_path


def cfg(**kw) -> RunConfig:
    return RunConfig(prompts=["a", "b"], **kw)


def test_one_lane_runs_every_mode_by_default_and_several_lanes_regular_only(env):
    assert check_llamacpp(cfg(), None, "bf16", None) == (["regular", "lookup", "draft"], ["bf16"])
    assert check_llamacpp(cfg(batch_size=8), None, "bf16,q4_1", None) == (["regular"], ["bf16", "q4_1"])


def test_speculation_in_several_lanes_is_refused_with_the_reason(env):
    with pytest.raises(SpecvizError, match="one lane only"):
        check_llamacpp(cfg(batch_size=4), "regular,lookup", "bf16", None)


@pytest.mark.parametrize("modes, weights, draft, said", [
    ("regular,beam", "bf16", None, "not beam"),
    (None, "bf16,int8", None, "not int8"),
    (None, "", None, "comma-separated list"),
    (None, "bf16", "default", "q4_1 .* or a .gguf file, not default"),
    (None, "bf16", "/nowhere/d.gguf", "no such file"),
])
def test_bad_modes_weights_and_drafts_are_one_line_errors(env, modes, weights, draft, said):
    with pytest.raises(SpecvizError, match=said):
        check_llamacpp(cfg(), modes, weights, draft)


def test_the_packaged_4_bit_file_is_only_the_default_targets(env):
    with pytest.raises(SpecvizError, match="only with --target default"):
        check_llamacpp(cfg(target="/m"), "regular", "q4_1", None)


def test_sampling_is_refused_since_outputs_are_compared_greedily(env):
    with pytest.raises(SpecvizError, match="greedy"):
        check_llamacpp(cfg(temperature=0.7), None, "bf16", None)


def test_a_missing_environment_says_the_setup_command(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_LLAMACPP_ENV", str(tmp_path / "absent"))
    with pytest.raises(MissingResource, match=r"run `bash setup\.sh --llamacpp`"):
        check_llamacpp(cfg(), None, "bf16", None)


def test_a_worker_that_cannot_import_llama_cpp_is_a_one_line_error(env):
    with LlamaCppPeer() as peer, pytest.raises(SpecvizError, match="llama.cpp: ModuleNotFoundError.*llama_cpp"):
        peer.ask({"op": "load", "models": {}, "threads": 1, "n_ctx": 256})


def test_the_worker_request_carries_what_both_sides_share():
    req = run_request("lookup", "bf16", None, 3, 2, 1, [[1, 2], [3]], 96, 2)
    assert req == {"op": "run", "mode": "lookup", "model": "bf16", "draft": None, "k": 3, "ngram": 2, "lanes": 1,
                   "prompts": [[1, 2], [3]], "max_tokens": 96, "eos": 2}


def test_decode_rate_leaves_out_prefill_as_our_trace_does():
    ans = {"wall_s": 2.0, "prefill_s": 0.5, "requests": [{"output_ids": [1] * 90}, {"output_ids": [2] * 60}]}
    assert rates(ans) == (75.0, 100.0)


def test_acceptance_is_the_longest_matching_prefix_of_each_proposal():
    seq = [10, 11, 12, 13, 14, 15]  # prompt [10, 11], then 12..15 emitted
    proposals = [(3, [13, 99, 15]), (4, [14, 15, 16]), (6, [1])]  # 1 kept; 2 kept (16 is past the end); 0
    assert accepted_tokens(proposals, seq) == 3


def test_llama_cpps_weight_repacking_is_off_on_a_cpu_with_amx():
    amx = "CPU : SSE3 = 1 | AVX512 = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
    assert not extra_buffers_safe(amx)
    assert extra_buffers_safe(amx.replace("AMX_INT8 = 1 | ", ""))


def test_the_converter_runs_in_our_interpreter_with_its_own_gguf_first(env):
    (env / "convert").mkdir()
    (env / "convert" / "convert_hf_to_gguf.py").write_text("")
    cmd, e = ggufs.convert_command("/models/x", "bf16", env / "out.gguf")
    assert cmd == [sys.executable, str(env / "convert" / "convert_hf_to_gguf.py"), "/models/x", "--outtype", "bf16",
                   "--outfile", str(env / "out.gguf")]
    assert e["PYTHONPATH"].split(os.pathsep)[:2] == [str(env / "convert" / "gguf-py"), str(env / "convert")]


def test_the_default_targets_gguf_is_cached_beside_our_converted_model():
    assert ggufs.gguf_file(str(cache_dir() / DEFAULT_NAME), "bf16") == cache_dir() / f"{DEFAULT_NAME}.bf16.gguf"
    a, b = ggufs.gguf_file("/x/model", "f32"), ggufs.gguf_file("/y/model", "f32")
    assert a != b and a.name.startswith("model-") and a.name.endswith(".f32.gguf")


def test_a_missing_converter_says_the_setup_command(env):
    with pytest.raises(MissingResource, match="setup.sh --llamacpp"):
        ggufs.convert_command("/models/x", "bf16", env / "out.gguf")


def result() -> LlamaCppResult:
    arms = {"ours regular": ArmRecord([40.0, 44.0], [45.0, 50.0], [1.0, 1.0], outputs=[[5, 6, 2], [7, 8]]),
            arm_name("bf16", "regular", 2): ArmRecord([80.0, 88.0], [90.0, 99.0], [2.0, 2.0], outputs=[[5, 6], [7, 9]]),
            arm_name("bf16", "lookup", 2): ArmRecord([70.0, 66.0], [75.0, 70.0], [1.75, 1.5], drafted=10, accepted=4,
                                                     outputs=[[5, 6, 2], [7, 8]])}
    return LlamaCppResult(dataclasses.replace(cfg(), max_new_tokens=96), 2, 2, "0.3.36", "AVX2 = 1", "bfloat16", arms,
                          {"bf16": "/c/x.bf16.gguf"}, eos=2)


def test_the_table_gives_medians_spread_acceptance_and_first_differences():
    text = format_result(result())
    assert "llama-cpp-python 0.3.36" in text and "2 requests through 1 lane(s)" in text and "2 threads" in text
    line = next(x for x in text.splitlines() if x.startswith("llama.cpp bf16 lookup k=2 "))
    assert "68.0" in line and "72.5" in line and "1.62x" in line and "1.50-1.75" in line and "0.400" in line
    assert "llama.cpp bf16 regular: greedy outputs differ from ours regular in 1/2 requests" in text
    assert "(request: first differing position): 1: 1" in text  # an eos at the end is not a difference
    assert "llama.cpp bf16 lookup k=2: greedy outputs identical to ours regular in all 2 requests" in text
    assert "repacking" not in text


def test_the_table_and_json_say_when_llama_cpps_repacking_was_off():
    res = dataclasses.replace(result(), extra_buffers=False)
    assert "llama.cpp's weight repacking (AMX) off" in format_result(res).splitlines()[1]
    assert result_json(res)["extra_buffers"] is False and result_json(result())["extra_buffers"] is True


def test_json_has_every_arms_rounds_and_differences():
    j = result_json(result(), busy=None)
    regular = j["arms"]["llama.cpp bf16 regular"]
    assert regular["rounds_tokens_per_s"] == [80.0, 88.0] and regular["decode_tokens_per_s"] == 94.5
    assert regular["first_differences"] == [(1, 1)] and j["arms"]["ours regular"]["first_differences"] is None
    assert j["peer"] == "llamacpp" and j["threads"] == 2 and j["ggufs"] == {"bf16": "/c/x.bf16.gguf"}
