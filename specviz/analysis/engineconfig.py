"""The recommended draft length written in each serving engine's own form, with one line a user can keep
beside it in their repository. Names as each engine's documentation gives them (SPECDEC.md, "The same
setting in each engine"); where a name depends on the version, the version is an argument.

  vLLM          --speculative-config JSON: num_speculative_tokens (the startup maximum), and from 0.24.0 on
                num_speculative_tokens_per_batch_size, a list of inclusive [first batch size, last batch
                size, k] ranges starting at 1 ("Dynamic Speculative Decoding" in vLLM 0.24.0's docs; k is
                clamped to num_speculative_tokens, batch sizes past the last range keep its k). Earlier
                versions: the single k for the batch size the server runs at.
  SGLang        --speculative-num-steps (depth), --speculative-eagle-topk (branching), --speculative-num-
                draft-tokens (tokens verified per request, the root included: SGLang sets it to steps + 1 for
                a chain); --speculative-algorithm NGRAM (prompt lookup) or STANDALONE (a draft model).
  llama.cpp     llama-server --draft-max, --draft-min (drafts shorter than it are not verified), --draft-p-min
                (a model draft stops below this probability).
  transformers  generate(..., assistant_model=...) with num_assistant_tokens, num_assistant_tokens_schedule
                ("constant": k stays as set) and assistant_confidence_threshold; prompt lookup:
                prompt_lookup_num_tokens and max_matching_ngram_size. Assisted generation runs batch 1 only.

Pure functions: no torch (the app's Streamlit process writes these too).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

ENGINES = ("vllm", "sglang", "llamacpp", "transformers")
SCHEDULE_SINCE = (0, 24, 0)  # vLLM's num_speculative_tokens_per_batch_size: documented from 0.24.0
NGRAM_MAX = 3  # our ngram proposer's default n (specviz.peers.server.NGRAM_MAX: vllm serve writes the same)
DISTILLED_FILE = "specviz_draft.json"  # specviz.models.distilled.DRAFT_FILE (that module imports torch)
SUFFIX_FACTOR = 4.0  # the suffix draft's depth rule (specviz.engine.suffix.FACTOR: that module imports torch)
VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclasses.dataclass(frozen=True)
class Draft:
    """What the settings name as the draft."""

    kind: str  # "ngram" (prompt lookup), "suffix", "model", or "distilled" (specviz's own reduced-vocabulary draft)
    name: str  # the SPEC: a hub id or folder for a model
    ngram_max: int = NGRAM_MAX  # ngram: the longest n-gram matched
    confidence: float = 0.0  # a model draft stops below this draft probability (0: always drafts k)


def draft_of(spec: str, confidence: float = 0.0) -> Draft:
    """The Draft for a specviz draft SPEC (ngram[:N], suffix, default, a distilled folder, a model)."""
    if spec == "ngram" or spec.startswith("ngram:"):
        return Draft("ngram", spec, int(spec.partition(":")[2] or NGRAM_MAX))
    if spec == "suffix":
        return Draft("suffix", spec)
    if spec.startswith("default") or (Path(spec).expanduser() / DISTILLED_FILE).is_file():
        return Draft("distilled", spec, confidence=confidence)
    return Draft("model", spec, confidence=confidence)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What every writer reads: the recommendation, engine-agnostic."""

    k_by_batch: tuple[int, ...]  # [max_b] k for batch sizes 1..max_b (0 = off)
    serve_batch: int  # the batch size a single-k setting is for (the server's median running requests)
    draft: Draft
    draft_min: int | None = None  # the shortest draft worth verifying at serve_batch (None: none is)
    tree: tuple[int, int, int] | None = None  # (depth, width, nodes) at serve_batch where a tree beats the chain

    @property
    def serve_k(self) -> int:
        return self.k_by_batch[min(self.serve_batch, len(self.k_by_batch)) - 1]


@dataclasses.dataclass(frozen=True)
class Settings:
    engine: str
    text: str  # what to paste ("" when the advice is to leave speculation off or the engine cannot serve it)
    value: dict  # the same, as data
    explanation: str  # one line


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a version string ("0.24.0", "v0.11.1rc2.dev3+gabc", "0.32.0+cpu"); None
    when it does not start like one."""
    m = VERSION.match((text or "").strip())
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def batch_ranges(k_by_batch) -> list[list[int]]:
    """Runs of equal k as inclusive [first batch size, last batch size, k], from batch size 1."""
    out: list[list[int]] = []
    for b, k in enumerate(k_by_batch, start=1):
        if out and out[-1][2] == k:
            out[-1][1] = b
        else:
            out.append([b, b, k])
    return out


def _cannot(engine: str, plan: Plan, what: str) -> Settings:
    return Settings(engine, "", {}, f"{what}; the k found (k = {plan.serve_k} at batch {plan.serve_batch}) is for "
                                    "specviz's engine only")


DISTILLED = "{engine} cannot load specviz's distilled draft {name} (its reduced output vocabulary maps onto the target's " \
            "through a table no {engine} draft format reads)"


# ---- vLLM ------------------------------------------------------------------------------------------------

def vllm_settings(plan: Plan, version: str | None = None) -> Settings:
    d, v = plan.draft, parse_version(version)
    if d.kind == "distilled":
        return _cannot("vllm", plan, DISTILLED.format(engine="vLLM", name=d.name))
    ranges = batch_ranges(plan.k_by_batch)
    schedule = v is not None and v >= SCHEDULE_SINCE and len(ranges) > 1 and d.kind != "suffix"
    k_max = max(plan.k_by_batch) if schedule else plan.serve_k
    if k_max == 0:
        return Settings("vllm", "", {}, "leave --speculative-config out: speculation is predicted to lose to regular "
                                        f"decoding at {'every batch size' if schedule else f'batch {plan.serve_batch}'}")
    method = {"ngram": {"method": "ngram", "prompt_lookup_max": d.ngram_max, "prompt_lookup_min": 1},
              "suffix": {"method": "suffix", "suffix_decoding_max_spec_factor": SUFFIX_FACTOR},
              "model": {"method": "draft_model", "model": d.name}}[d.kind]
    value = {**method, "num_speculative_tokens": k_max}
    if schedule:
        value["num_speculative_tokens_per_batch_size"] = ranges
        why = (f"vLLM {version} takes a per-batch-size schedule: k by concurrency "
               + ", ".join(f"{lo}-{hi}: {k}" for lo, hi, k in ranges) + f" (up to {k_max}, the startup maximum)")
    else:
        reason = ("suffix decoding sizes its own drafts (no schedule)" if d.kind == "suffix" else
                  "one k serves every batch size" if len(ranges) == 1 else
                  f"vLLM {version} predates per-batch-size schedules (0.24.0)" if v is not None else
                  "vLLM version unknown (give --vllm-version for a per-batch-size schedule)")
        why = f"k = {k_max} at batch {plan.serve_batch}; {reason}"
    return Settings("vllm", json.dumps(value), value, f"specviz tune: {why}")


# ---- SGLang ----------------------------------------------------------------------------------------------

def sglang_settings(plan: Plan) -> Settings:
    d, k = plan.draft, plan.serve_k
    if d.kind == "distilled":
        return _cannot("sglang", plan, DISTILLED.format(engine="SGLang", name=d.name))
    if d.kind == "suffix":
        return _cannot("sglang", plan, "SGLang's speculative algorithms have no suffix decoding")
    if k == 0:
        return Settings("sglang", "", {}, "leave --speculative-algorithm out: speculation is predicted to lose to "
                                          f"regular decoding at batch {plan.serve_batch}")
    depth, width, nodes = plan.tree if plan.tree and d.kind == "model" else (k, 1, k)
    value = {"speculative-algorithm": "NGRAM" if d.kind == "ngram" else "STANDALONE",
             **({} if d.kind == "ngram" else {"speculative-draft-model-path": d.name}),
             "speculative-num-steps": depth, "speculative-eagle-topk": width, "speculative-num-draft-tokens": nodes + 1}
    shape = (f"a tree of depth {depth}, {width} children per node, {nodes} nodes" if width > 1 else f"a chain of k = {k}")
    note = " (NGRAM is CUDA-only)" if d.kind == "ngram" else ""
    return Settings("sglang", " ".join(f"--{key} {v}" for key, v in value.items()), value,
                    f"specviz tune: {shape} at batch {plan.serve_batch}; SGLang takes one shape for every batch size{note}")


# ---- llama.cpp -------------------------------------------------------------------------------------------

def llamacpp_settings(plan: Plan) -> Settings:
    d, k = plan.draft, plan.serve_k
    if d.kind == "distilled":
        return _cannot("llamacpp", plan, DISTILLED.format(engine="llama.cpp", name=d.name))
    if d.kind == "suffix":
        return _cannot("llamacpp", plan, "llama-server has no suffix decoding")
    if k == 0:
        return Settings("llamacpp", "", {}, "start llama-server without a draft: speculation is predicted to lose "
                                            f"to regular decoding at {plan.serve_batch} parallel lane(s)")
    value = {"draft-max": k, "draft-min": plan.draft_min or 1, "draft-p-min": d.confidence}
    stop = (f"drafts stop below probability {d.confidence:g} as measured" if d.confidence else
            "--draft-p-min 0 drafts every position, as the measurement did")
    return Settings("llamacpp", " ".join(f"--{key} {v}" for key, v in value.items()), value,
                    f"specviz tune: k = {k} at {plan.serve_batch} lane(s); drafts of {value['draft-min']}+ tokens are "
                    f"predicted to pay (shorter ones are skipped); {stop}")


# ---- transformers ----------------------------------------------------------------------------------------

def transformers_settings(plan: Plan) -> Settings:
    d, k = plan.draft, plan.k_by_batch[0]  # assisted generation is batch 1
    if d.kind == "distilled":
        return _cannot("transformers", plan, DISTILLED.format(engine="transformers", name=d.name))
    if d.kind == "suffix":
        return _cannot("transformers", plan, "transformers' generate has no suffix decoding")
    if k == 0:
        return Settings("transformers", "", {}, "call generate without assistant_model or prompt_lookup_num_tokens: "
                                                "speculation is predicted to lose to regular decoding at batch 1")
    if d.kind == "ngram":
        value = {"prompt_lookup_num_tokens": k, "max_matching_ngram_size": d.ngram_max}
        why = f"prompt lookup of k = {k} at batch 1 (assisted generation runs one sequence)"
    else:
        value = {"num_assistant_tokens": k, "num_assistant_tokens_schedule": "constant",
                 "assistant_confidence_threshold": d.confidence}
        why = (f"k = {k} at batch 1, kept constant (the heuristic schedule moves k on acceptance alone, without "
               "the cost of a draft step); pass assistant_model=" + d.name)
    return Settings("transformers", json.dumps(value), value, f"specviz tune: {why}")


WRITERS = {"vllm": vllm_settings, "sglang": sglang_settings, "llamacpp": llamacpp_settings,
           "transformers": transformers_settings}


def settings_for(engine: str, plan: Plan, vllm_version: str | None = None) -> Settings:
    """The settings of ``engine`` (one of ENGINES) for the plan."""
    if engine not in WRITERS:
        raise ValueError(f"unknown engine {engine!r}: one of {', '.join(ENGINES)}")
    return vllm_settings(plan, vllm_version) if engine == "vllm" else WRITERS[engine](plan)
