"""The packaged default model end to end: loading, greedy exactness on ragged batches (fp32)."""

import time

import pytest

from specviz.measure.correctness import check_exactness
from specviz.engine.proposers import ModelDraft, NgramDraft
from specviz.common import SpecvizError
from specviz.models.loading import check_tokenizers_agree
from specviz.run import encode_prompts, get_model

from exact_default import prompt_ids, references, target  # noqa: E402,F401  (shared fixtures)

PROMPTS = [
    "Repeat exactly: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "List the first ten even numbers, separated by commas.",
    "Write a Python function that returns the square of a number.",
]
MAX_NEW = 24


def test_default_loads_fast_after_conversion():
    from specviz.models.loading import load_model

    get_model("default", "cpu", "float32")  # converts once if needed
    t = time.perf_counter()
    m = load_model("default", "cpu", "float32")
    assert time.perf_counter() - t < 3.0  # ~0.3 s idle; generous for a loaded 2-core CI box
    assert m.num_params > 100e6 and m.tokenizer.chat_template


def assert_exact_or_near_tie(checks):
    for c in checks:
        # a divergence is only acceptable at a near-tie of the reference's logits
        assert c.exact or c.margin < 1e-3, f"row {c.index} diverges at {c.first_divergence}, margin {c.margin}"
    assert sum(c.exact for c in checks) >= len(checks) - 1


@pytest.mark.parametrize("batch_size,k", [(1, 1), (3, 4), (8, 8)])
def test_ngram_greedy_equals_batch_one_greedy(target, prompt_ids, references, batch_size, k):
    assert_exact_or_near_tie(check_exactness(target, NgramDraft(), prompt_ids, batch_size, k, MAX_NEW, references))


def test_bf16_draft_greedy_equals_batch_one_greedy(target, prompt_ids, references):
    draft = ModelDraft(get_model("default", "cpu", "bfloat16"), vocab_size=target.model.config.vocab_size)
    assert_exact_or_near_tie(check_exactness(target, draft, prompt_ids, 3, 3, MAX_NEW, references))


@pytest.mark.parametrize("batch_size,k", [(1, 2), (8, 4)])
def test_shipped_distilled_draft_greedy_equals_batch_one_greedy(target, prompt_ids, references, batch_size, k):
    """The draft shipped in specviz/assets (the `default` draft of a bf16 target), run in fp32."""
    from specviz.run import DEFAULT_DRAFT_DIR, make_proposer

    draft = make_proposer(str(DEFAULT_DRAFT_DIR), target)
    assert_exact_or_near_tie(check_exactness(target, draft, prompt_ids, batch_size, k, MAX_NEW, references))


@pytest.mark.parametrize("name,batch_size,k", [("FEATURE_DRAFT_DIR", 1, 1), ("FEATURE_DRAFT_DIR", 8, 3),
                                                ("FEATURE2_DRAFT_DIR", 1, 2), ("FEATURE2_DRAFT_DIR", 8, 4)])
def test_shipped_feature_drafts_greedy_equals_batch_one_greedy(target, prompt_ids, references, name, batch_size, k):
    """The feature drafts in specviz/assets (not the default), run in fp32: they read the target's hidden
    states, and their output rows are rebuilt from the target's ("head": "from_target")."""
    import json

    from specviz import run
    from specviz.engine.proposers import FeatureDraft
    from specviz.run import make_proposer

    path = getattr(run, name)
    assert json.loads((path / "specviz_draft.json").read_text())["head"] == "from_target"
    draft = make_proposer(str(path), target)
    assert isinstance(draft, FeatureDraft)
    assert_exact_or_near_tie(check_exactness(target, draft, prompt_ids, batch_size, k, MAX_NEW, references))


@pytest.mark.parametrize("name,flags", [
    ("FEATURE_DRAFT_DIR", ("--kind feature", "--seed 3", "--steps 2500", "--samples 9216", "--text-tokens 300000")),
    ("FEATURE2_DRAFT_DIR", ("--kind feature", "--layers 2", "--seed 10", "--steps 700", "--vocab 24576",
                            "--extra-data /work/fd8/data", "--prompts natural2")),
])
def test_shipped_feature_drafts_are_the_files_their_readmes_describe_made_by_seeded_commands(name, flags):
    import hashlib
    import json

    from specviz import run

    path = getattr(run, name)
    report = json.loads((path / "report.json").read_text())
    assert report["training"]["stopped_by"] == "steps" and report["args"]["time_budget_min"] is None
    assert report["args"]["gen_budget_min"] is None and report["args"]["kind"] == "feature"
    readme = (path / "README.md").read_text()
    sha = hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
    assert f"sha256 `{sha}`" in readme
    one_line = " ".join(readme.replace("\\\n", " ").split())
    for flag in flags:
        assert flag in one_line and flag in report["command"]
    vocab_map = json.loads((path / "specviz_draft.json").read_text())["vocab_map"]
    assert len(vocab_map) == report["args"]["vocab"]  # the map is the size the command asked for


def test_default_draft_is_the_shipped_one_for_a_bf16_default_target():
    from specviz.models.distilled import DistilledDraft
    from specviz.run import DEFAULT_DRAFT_DIR, make_proposer, resolve_draft_spec

    bf16 = get_model("default", "cpu", "bfloat16")
    assert resolve_draft_spec("default", bf16) == str(DEFAULT_DRAFT_DIR)
    proposer = make_proposer("default", bf16)
    assert isinstance(proposer.loaded, DistilledDraft)
    ids = encode_prompts(bf16.tokenizer, PROMPTS[:2])
    vocab_map = set(proposer.model.lm_head.vocab_map.tolist())
    for row in ids:  # the draft's greedy continuation only ever uses mapped (proposable) ids
        import torch

        logits = proposer.model(torch.tensor([row])).logits[0, -1]
        assert int(logits.argmax()) in vocab_map


def test_shipped_draft_records_the_seeded_command_that_makes_it():
    """Issue 5: the shipped weights come from their recorded command, seeded and ended by --steps
    (no time budget anywhere), and the README names the exact file it describes."""
    import hashlib
    import json

    from specviz.run import DEFAULT_DRAFT_DIR

    report = json.loads((DEFAULT_DRAFT_DIR / "report.json").read_text())
    assert report["training"]["stopped_by"] == "steps" and report["training"]["reproducible"]
    assert report["args"]["time_budget_min"] is None and report["args"]["gen_budget_min"] is None
    assert report["args"]["seed"] == 0 and report["command"].startswith("python -m specviz distill ")
    readme = (DEFAULT_DRAFT_DIR / "README.md").read_text()
    one_line = " ".join(readme.replace("\\\n", " ").split())  # shell line continuations joined
    assert one_line.count(report["command"].removeprefix("python ")) == 1
    assert hashlib.sha256((DEFAULT_DRAFT_DIR / "model.safetensors").read_bytes()).hexdigest() in readme


def test_incompatible_tokenizers_are_refused(target):
    from transformers import AutoTokenizer

    other = AutoTokenizer.from_pretrained(target.name if "/" in target.name else str(_default_dir()))
    other.add_tokens(["<specviz-extra>"])
    with pytest.raises(SpecvizError, match="incompatible"):
        check_tokenizers_agree(target.tokenizer, other)


def _default_dir():
    from specviz.common import cache_dir
    from specviz.models.loading import DEFAULT_NAME

    return cache_dir() / DEFAULT_NAME

