"""A run's configuration: what the CLI's flags and the pages' controls make, checked once
against the one table of bounds (specviz.bounds) before any model loads. No torch: the Streamlit
server builds these and hands them to the device process."""

from __future__ import annotations

import dataclasses
import re

from specviz.bounds import check_numbers
from specviz.common import SpecvizError

DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclasses.dataclass
class RunConfig:
    target: str = "default"
    draft: str = "default"
    prompts: list[str] = dataclasses.field(default_factory=list)
    batch_size: int = 1
    draft_length: int = 2
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    policy: str = "fixed"
    mode: str = "speculative"
    device: str = "auto"
    dtype: str = "auto"
    device_map: str = "none"  # "auto": the target spread over every GPU (then CPU, disk) by accelerate
    raw_prompt: bool = False
    policy_args: dict = dataclasses.field(default_factory=dict)
    draft_confidence: float = 0.0  # model drafts: a row stops drafting after a token with draft probability below this
    # The request queue (issue 17): batch_size is the number of concurrent rows (lanes); requests
    # (None = batch_size: one static batch, as before) run through them, a finished request's lane
    # going to the next request; static=True runs them as consecutive static batches instead.
    requests: int | None = None
    arrival_rate: float = 0.0  # requests per second, Poisson (seeded by seed); 0 = all queued at t = 0
    static: bool = False
    # Token trees (issue 16): every row drafts a tree of depth draft_length, expanding the top
    # tree_width children of the tree_width best frontier nodes per depth, tree_nodes nodes kept.
    # tree_width 1 = chains (today's code path and output).
    tree_width: int = 1
    tree_nodes: int = 16
    # CUDA graphs (issue 18): the target's and a model draft's forwards over a static KV cache,
    # replayed as graphs where the model is on CUDA (specviz.models.statickv; eager elsewhere).
    cuda_graphs: bool = False
    # The compiled forward: the target's and a model draft's decoder layers compiled by torch.compile over
    # the static KV cache (specviz.models.compiled; eager, said in one line, where compiling fails).
    compile: bool = False
    # The suffix draft's global structure (specviz.engine.suffix): loaded from this file at the start when it
    # exists; a run (not bench or sweep) writes it back at the end. None: it lives for the process only.
    suffix_corpus: str | None = None
    # Synthetic acceptance (teaching, benchmarks; vLLM's synthetic rejection sampling): each drafted
    # position is accepted with this probability from the row's seeded stream, whatever the models say.
    # The output is then NOT the target's text; None: the exact acceptance rule.
    synthetic_acceptance: float | None = None

    def validate(self) -> None:
        """Reject bad input with one clear sentence (checked before anything loads)."""
        check_numbers(self)  # the one table of bounds (specviz.bounds), as the CLI's flags
        if self.device_map not in ("none", "auto"):
            raise SpecvizError(f"device map must be none or auto (got {self.device_map!r})")
        if self.mode not in ("speculative", "regular"):
            raise SpecvizError(f"mode must be speculative or regular (got {self.mode!r})")
        if not self.prompts:
            raise SpecvizError("no prompts given: pass --prompt TEXT or --prompts FILE")
        empty = [i for i, p in enumerate(self.prompts) if not p.strip()]
        if empty:
            raise SpecvizError(f"prompt {empty[0] + 1} is empty: every prompt needs some text")
        if not DEVICE.fullmatch(self.device):
            raise SpecvizError(f"unknown device {self.device!r}: use auto, cpu or cuda")
        if self.dtype not in DTYPES:
            raise SpecvizError(f"unknown dtype {self.dtype!r}: use auto, float32, bfloat16 or float16")

    def batch_prompts(self) -> list[str]:
        """B prompts: cycled when B exceeds the number given."""
        return [self.prompts[i % len(self.prompts)] for i in range(self.batch_size)]

    @property
    def num_requests(self) -> int:
        return self.batch_size if self.requests is None else self.requests

    def request_prompts(self) -> list[str]:
        """One prompt per request: cycled when there are more requests than prompts."""
        return [self.prompts[i % len(self.prompts)] for i in range(self.num_requests)]

    def arrivals(self) -> list[float] | None:
        """Seconds after the start at which each request arrives (Poisson at arrival_rate, seeded), or
        None: all queued at t = 0."""
        if not self.arrival_rate:
            return None
        import numpy as np

        gaps = np.random.default_rng(self.seed).exponential(1.0 / self.arrival_rate, self.num_requests)
        return np.cumsum(gaps).tolist()

    def every_prompt(self) -> list["RunConfig"]:
        """One config per batch so that every prompt runs once at batch size B (the last batch
        cycles prompts to stay full): what bench and sweep measure, so B = 1 is not one prompt.
        A run with a request queue (requests > batch size) is one config already."""
        P, B = len(self.prompts), self.batch_size
        if B >= P or self.num_requests > B:
            return [self]
        return [dataclasses.replace(self, prompts=[self.prompts[(i + j) % P] for j in range(B)]) for i in range(0, P, B)]

    def to_trace_config(self) -> dict:
        """The trace's "config": this run's settings, without the prompts (the sequences carry
        them) and without fields at their defaults that older traces did not have. What the
        loaded models add (names, sizes, the resolved device and dtype) is specviz.run's."""
        d = dataclasses.asdict(self)
        d.pop("prompts")
        d.pop("policy_args")
        if self.tree_width == 1 and self.policy != "tree":  # chains: the trace's config reads as before trees
            d.pop("tree_width"), d.pop("tree_nodes")
        if not self.cuda_graphs:  # the trace's config reads as before graphs
            d.pop("cuda_graphs")
        if not self.compile:  # the trace's config reads as before the compiled forward
            d.pop("compile")
        if self.device_map == "none":  # one device: the config reads as before device maps
            d.pop("device_map")
        if self.suffix_corpus is None:  # the config reads as before the suffix draft
            d.pop("suffix_corpus")
        if self.synthetic_acceptance is None:  # the exact rule: the config reads as before synthetic acceptance
            d.pop("synthetic_acceptance")
        return d
