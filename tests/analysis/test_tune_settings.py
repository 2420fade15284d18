"""Golden outputs of each engine's settings writer (specviz.analysis.engineconfig): the exact text a user
pastes, for a prompt-lookup plan, a model-draft plan with a tree, a plan that says off, and drafts an engine
cannot serve; and, opt-in where .venv-vllm exists, that vLLM's own argument parser takes the JSON."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from specviz.analysis import engineconfig as ec
import locations

ROOT = locations.ROOT
NGRAM = ec.Plan(k_by_batch=(3, 3, 3, 2, 2, 2, 2, 1), serve_batch=4, draft=ec.draft_of("ngram"), draft_min=1)
MODEL = ec.Plan(k_by_batch=(4, 4, 2, 2), serve_batch=2, draft=ec.draft_of("HuggingFaceTB/SmolLM2-135M-Instruct", 0.4),
                draft_min=2, tree=(3, 2, 6))
OFF = ec.Plan(k_by_batch=(0, 0, 0), serve_batch=2, draft=ec.draft_of("ngram:4"))


def test_vllm_writes_a_per_batch_size_schedule_from_0_24_0():
    s = ec.settings_for("vllm", NGRAM, "0.32.0")
    assert s.text == ('{"method": "ngram", "prompt_lookup_max": 3, "prompt_lookup_min": 1, "num_speculative_tokens": 3, '
                      '"num_speculative_tokens_per_batch_size": [[1, 3, 3], [4, 7, 2], [8, 8, 1]]}')
    assert json.loads(s.text) == s.value
    assert s.explanation == ("specviz tune: vLLM 0.32.0 takes a per-batch-size schedule: k by concurrency 1-3: 3, "
                             "4-7: 2, 8-8: 1 (up to 3, the startup maximum)")
    m = ec.settings_for("vllm", MODEL, "v0.24.0")
    assert m.text == ('{"method": "draft_model", "model": "HuggingFaceTB/SmolLM2-135M-Instruct", "num_speculative_tokens": 4, '
                      '"num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 4, 2]]}')


@pytest.mark.parametrize("version,reason", [("0.23.1", "vLLM 0.23.1 predates per-batch-size schedules (0.24.0)"),
                                            (None, "vLLM version unknown (give --vllm-version for a per-batch-size "
                                                   "schedule)")])
def test_vllm_before_schedules_writes_the_k_of_the_serving_batch(version, reason):
    s = ec.settings_for("vllm", NGRAM, version)
    assert s.text == '{"method": "ngram", "prompt_lookup_max": 3, "prompt_lookup_min": 1, "num_speculative_tokens": 2}'
    assert s.explanation == f"specviz tune: k = 2 at batch 4; {reason}"


def test_vllm_suffix_decoding_gets_one_k_even_where_schedules_exist():
    plan = ec.Plan(k_by_batch=(8, 6, 4), serve_batch=3, draft=ec.draft_of("suffix"))
    s = ec.settings_for("vllm", plan, "0.32.0")
    assert s.text == '{"method": "suffix", "suffix_decoding_max_spec_factor": 4.0, "num_speculative_tokens": 4}'
    assert "suffix decoding sizes its own drafts" in s.explanation


def test_sglang_writes_steps_topk_and_draft_tokens_with_the_root_counted():
    s = ec.settings_for("sglang", NGRAM)
    assert s.text == ("--speculative-algorithm NGRAM --speculative-num-steps 2 --speculative-eagle-topk 1 "
                      "--speculative-num-draft-tokens 3")
    t = ec.settings_for("sglang", MODEL)
    assert t.text == ("--speculative-algorithm STANDALONE --speculative-draft-model-path HuggingFaceTB/SmolLM2-135M-Instruct "
                      "--speculative-num-steps 3 --speculative-eagle-topk 2 --speculative-num-draft-tokens 7")
    assert t.explanation.startswith("specviz tune: a tree of depth 3, 2 children per node, 6 nodes at batch 2")


def test_llamacpp_writes_draft_max_min_and_p_min():
    assert ec.settings_for("llamacpp", NGRAM).text == "--draft-max 2 --draft-min 1 --draft-p-min 0.0"
    m = ec.settings_for("llamacpp", MODEL)
    assert m.text == "--draft-max 4 --draft-min 2 --draft-p-min 0.4"
    assert m.explanation == ("specviz tune: k = 4 at 2 lane(s); drafts of 2+ tokens are predicted to pay (shorter ones "
                             "are skipped); drafts stop below probability 0.4 as measured")


def test_transformers_writes_batch_one_generation_settings():
    assert ec.settings_for("transformers", NGRAM).text == '{"prompt_lookup_num_tokens": 3, "max_matching_ngram_size": 3}'
    m = ec.settings_for("transformers", MODEL)
    assert m.text == ('{"num_assistant_tokens": 4, "num_assistant_tokens_schedule": "constant", '
                      '"assistant_confidence_threshold": 0.4}')
    assert m.explanation.endswith("pass assistant_model=HuggingFaceTB/SmolLM2-135M-Instruct")


@pytest.mark.parametrize("engine,advice", [("vllm", "leave --speculative-config out"),
                                           ("sglang", "leave --speculative-algorithm out"),
                                           ("llamacpp", "start llama-server without a draft"),
                                           ("transformers", "call generate without assistant_model")])
def test_off_everywhere_writes_nothing_and_says_to_leave_speculation_out(engine, advice):
    s = ec.settings_for(engine, OFF, "0.32.0")
    assert s.text == "" and s.value == {} and s.explanation.startswith(advice)


@pytest.mark.parametrize("engine", ec.ENGINES)
def test_a_distilled_draft_is_not_written_into_another_engines_config(engine):
    plan = ec.Plan(k_by_batch=(2,), serve_batch=1, draft=ec.draft_of("default"))
    s = ec.settings_for(engine, plan, "0.32.0")
    assert s.text == "" and "distilled draft" in s.explanation and "k = 2 at batch 1" in s.explanation


@pytest.mark.parametrize("plan", [NGRAM, MODEL, OFF])
@pytest.mark.parametrize("engine", ec.ENGINES)
def test_every_explanation_is_one_line(engine, plan):
    assert "\n" not in ec.settings_for(engine, plan, "0.32.0").explanation


def test_versions_parse_as_vllm_writes_them():
    assert ec.parse_version("0.32.0") == (0, 32, 0) and ec.parse_version("v0.24") == (0, 24, 0)
    assert ec.parse_version("0.11.1rc2.dev12+gabc") == (0, 11, 1) and ec.parse_version("0.32.0+cpu") == (0, 32, 0)
    assert ec.parse_version("latest") is None and ec.parse_version(None) is None


def test_draft_specs_map_to_what_the_engines_can_serve(tmp_path):
    from specviz.engine.suffix import FACTOR
    from specviz.models.distilled import DRAFT_FILE

    assert ec.DISTILLED_FILE == DRAFT_FILE and ec.SUFFIX_FACTOR == FACTOR  # the torch-free copies
    (tmp_path / DRAFT_FILE).write_text("{}")
    assert ec.draft_of(str(tmp_path)).kind == "distilled"
    assert ec.draft_of("ngram:5") == ec.Draft("ngram", "ngram:5", 5)
    assert ec.draft_of("org/some-model").kind == "model" and ec.draft_of("suffix").kind == "suffix"


VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
PARSE = """
import json, sys
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
from vllm.engine.arg_utils import EngineArgs
args = EngineArgs.add_cli_args(FlexibleArgumentParser()).parse_args(["--model", "m", "--speculative-config", sys.argv[1]])
config = vars(args)["speculative_config"]
schedule = config.get("num_speculative_tokens_per_batch_size")
try:  # the schedule's own validation, where this vLLM has it (it raises ValueError for a bad schedule)
    from vllm.v1.spec_decode.dynamic import utils
except ImportError:
    utils = None
if schedule and hasattr(utils, "validate_and_normalize_dynamic_sd_schedule"):
    utils.validate_and_normalize_dynamic_sd_schedule(schedule)
print(json.dumps(config))
"""


@pytest.mark.vllm
@pytest.mark.skipif(not os.environ.get("SPECVIZ_VLLM_TESTS") or not VLLM_PY.is_file(),
                    reason="opt-in: needs vLLM in .venv-vllm (bash setup.sh --vllm) and SPECVIZ_VLLM_TESTS=1; without "
                           "it the JSON is checked against the golden strings above only")
def test_vllms_own_argument_parser_takes_the_config():
    for plan in (NGRAM, MODEL):
        text = ec.settings_for("vllm", plan, "0.32.0").text
        out = subprocess.run([str(VLLM_PY), "-c", PARSE, text], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert json.loads(out.stdout.strip().splitlines()[-1]) == json.loads(text)
