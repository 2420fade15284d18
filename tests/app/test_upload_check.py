"""The upload check (specviz.app.upload.read_trace_upload) on text and token ids: a finish_reason
the engine never writes, an id outside the vocabulary of the tokenizer that would decode it, text
where a number goes or a number where text goes is refused in one sentence naming the field; real
engine traces (a tree run through a request queue, on a tiny pair) pass."""

from __future__ import annotations

import copy
import json

import pytest

from specviz.analysis.trace import build_trace, sequence_record
from specviz.app.upload import FINISH_REASONS, read_trace_upload

from fakes import perturbed_copy, ragged_prompts, tiny_llama

V = 64
PAYLOAD = "<img src=x id=pwned onerror=alert(1)><b id=pwnedb>x</b>"


@pytest.fixture(scope="module")
def engine_trace() -> dict:
    """A real tree run of a tiny pair through a queue (5 requests, 2 lanes), with telemetry samples."""
    from specviz.engine.proposers import ModelDraft
    from specviz.engine.step import TreeShape
    from specviz.run import decoder_for_ids

    target = tiny_llama(V)
    dec = decoder_for_ids(target, ModelDraft(perturbed_copy(target, 0.3)), ragged_prompts(5, V, seed=3), 3, 8,
                          lanes=2, tree=TreeShape(3, 8))
    steps = [s.to_json() if hasattr(s, "to_json") else s for s in dec.steps()]
    seqs = [dict(sequence_record(r, target.tokenizer), prompt=f"prompt {r.index}") for r in dec.rows]
    cfg = {"target": "tiny", "draft": "tiny-draft", "batch_size": 2, "requests": 5, "draft_length": 3, "tree_width": 3,
           "tree_nodes": 8, "policy": "fixed", "mode": "speculative", "dtype": "float32", "device": "cpu",
           "temperature": 0.0, "target_name": target.name, "draft_name": "tiny-draft", "draft_params": 1000}
    samples = [{"t": 0.01 * i, "util_pct": 50.0, "mem_bytes": 2**30, "proc_cpu_pct": 80.0, "source": "psutil"}
               for i in range(3)]
    trace = build_trace(cfg, {"device": "cpu"}, seqs, steps, samples, steps[-1]["t_start"] + 0.1, dec.prefill_s)
    assert any(r.get("tree") for s in trace["steps"] for r in s["rows"])
    return trace


def upload(trace: dict, vocab: int | None = V, target_name: str | None = None, name: str = "t.json") -> dict:
    return read_trace_upload(name, json.dumps(trace).encode(), vocab_size=vocab,
                             target_name=target_name or trace["config"].get("target_name"))


def refused(trace: dict, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as e:
        upload(trace, *args, **kwargs)
    msg = str(e.value)
    assert msg.startswith("t.json: not a specviz trace: ") and "\n" not in msg, msg
    return msg


def edited(trace: dict, fn) -> dict:
    t = copy.deepcopy(trace)
    fn(t)
    return t


def first_tree(t: dict) -> dict:
    return next(r["tree"] for s in t["steps"] for r in s["rows"] if r.get("tree"))


def test_a_real_tree_and_queue_trace_passes(engine_trace):
    assert upload(engine_trace)["steps"] == engine_trace["steps"]


@pytest.mark.parametrize("reason", [*FINISH_REASONS, None])
def test_every_finish_reason_the_engine_writes_passes(engine_trace, reason):
    upload(edited(engine_trace, lambda t: t["sequences"][0].update(finish_reason=reason)))


@pytest.mark.parametrize("reason", [PAYLOAD, "done", "", 3, ["eos"]])
def test_a_finish_reason_the_engine_never_writes_is_refused(engine_trace, reason):
    msg = refused(edited(engine_trace, lambda t: t["sequences"][1].update(finish_reason=reason)))
    assert "sequences[1].finish_reason must be one of eos, length, stopped" in msg


ID_LISTS = {
    "sequences[0].prompt_token_ids": lambda t: t["sequences"][0]["prompt_token_ids"],
    "sequences[0].output_token_ids": lambda t: t["sequences"][0]["output_token_ids"],
    "steps[0].rows[0].emitted": lambda t: t["steps"][0]["rows"][0]["emitted"],
    "draft_tokens": lambda t: next(r["draft_tokens"] for s in t["steps"] for r in s["rows"] if r.get("draft_tokens")),
    "tree.token": lambda t: first_tree(t)["token"],
}


@pytest.mark.parametrize("bad", [-1, V, 2**40], ids=["minus-one", "vocab", "huge"])
@pytest.mark.parametrize("where", list(ID_LISTS))
def test_a_token_id_outside_the_vocabulary_is_refused_wherever_it_is(engine_trace, where, bad):
    msg = refused(edited(engine_trace, lambda t: ID_LISTS[where](t).append(bad)))
    assert where in msg and f"token ids in [0, {V})" in msg


def test_the_last_id_of_the_vocabulary_passes(engine_trace):
    upload(edited(engine_trace, lambda t: t["sequences"][0]["output_token_ids"].append(V - 1)))


def test_another_targets_trace_needs_only_non_negative_ids(engine_trace):
    """The page decodes only a trace of its own target (or one naming none) with its tokenizer;
    another target's ids show as numbers, so its larger vocabulary is no reason to refuse it."""
    big = edited(engine_trace, lambda t: t["sequences"][0]["output_token_ids"].append(10 * V))
    upload(big, target_name="another-model")
    refused(big, target_name=engine_trace["config"]["target_name"])
    unnamed = edited(big, lambda t: t["config"].pop("target_name"))
    refused(unnamed, target_name="another-model")
    refused(edited(engine_trace, lambda t: t["sequences"][0]["output_token_ids"].append(-1)), target_name="another")


def test_without_a_tokenizer_ids_still_need_to_be_non_negative_and_below_2_to_the_31(engine_trace):
    upload(edited(engine_trace, lambda t: t["sequences"][0]["output_token_ids"].append(10**6)), vocab=None)
    refused(edited(engine_trace, lambda t: t["sequences"][0]["output_token_ids"].append(-1)), vocab=None)
    refused(edited(engine_trace, lambda t: t["sequences"][0]["output_token_ids"].append(2**31)), vocab=None)


def every_text_replaced(o, keep=()):
    """What a reviewer did: every string value of the trace replaced by an HTML payload."""
    if isinstance(o, dict):
        return {k: o[k] if k in keep else every_text_replaced(v, keep) for k, v in o.items()}
    if isinstance(o, list):
        return [every_text_replaced(v, keep) for v in o]
    return PAYLOAD if isinstance(o, str) else o


def test_html_in_every_text_field_is_refused_in_one_line_by_its_finish_reason(engine_trace):
    msg = refused(every_text_replaced(engine_trace))
    assert "finish_reason" in msg and "<img" not in msg  # names the field, does not repeat the payload


def test_html_in_every_text_field_but_the_finish_reasons_passes_as_text_the_pages_escape(engine_trace):
    t = upload(every_text_replaced(engine_trace, keep=("finish_reason",)))
    assert t["config"]["policy"] == PAYLOAD and t["sequences"][0]["prompt"] == PAYLOAD


@pytest.mark.parametrize("field,fn", [
    ("config.target_name", lambda t: t["config"].update(target_name={"a": 1})),
    ("config.dtype", lambda t: t["config"].update(dtype=["bfloat16"])),
    ("config.draft_params", lambda t: t["config"].update(draft_params=PAYLOAD)),
    ("config.temperature", lambda t: t["config"].update(temperature=True)),
    ("config.synthetic_acceptance", lambda t: t["config"].update(synthetic_acceptance=PAYLOAD)),
    ("sequences[0].prompt", lambda t: t["sequences"][0].update(prompt=5)),
    ("sequences[0].ttft_s", lambda t: t["sequences"][0].update(ttft_s=PAYLOAD)),
    ("steps[0].queue_length", lambda t: t["steps"][0].update(queue_length=PAYLOAD)),
    ("steps[0].rows[0].lane", lambda t: t["steps"][0]["rows"][0].update(lane=PAYLOAD)),
    ("summary.tokens_per_s", lambda t: t["summary"].update(tokens_per_s=PAYLOAD)),
    ("summary.per_position_acceptance", lambda t: t["summary"].update(per_position_acceptance=[PAYLOAD])),
    ("telemetry[1].mem_bytes", lambda t: t["telemetry"][1].update(mem_bytes=PAYLOAD)),
    ("telemetry[0]", lambda t: t["telemetry"][0].update(source=["psutil"])),
    ("tree", lambda t: first_tree(t).update(path=[99])),
    ("tree", lambda t: first_tree(t)["parent"].append(0)),
    (".prob", lambda t: first_tree(t).update(prob=[PAYLOAD] * len(first_tree(t)["token"]))),
])
def test_text_where_a_number_goes_or_the_reverse_is_refused_naming_the_field(engine_trace, field, fn):
    assert field in refused(edited(engine_trace, fn))
