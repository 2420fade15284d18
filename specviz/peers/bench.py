"""``python -m specviz bench --peer vllm``: our engine and a real vLLM server on the same prompts.

One vLLM server (specviz.peers.server) runs for the whole bench with the speculative config that
matches ours (``--draft none``: regular decoding on both sides; ``--draft ngram[:N]``: prompt lookup
on both, the same k). Rounds interleave the two arms (the order swaps every round, and each arm
starts once the machine is idle: ``settle``), each running every request once with the same
concurrency: ours through ``--batch-size`` lanes (``--requests N``: N requests, a finished request's
lane refilled), vLLM with as many client threads and ``max_num_seqs`` lanes.
Both decode greedily from the same prompt token ids (ours after the chat template; vLLM gets the
ids, not the text). Per arm: output tokens/s over the round's wall time, TTFT and time per output
token per request (TTFT from the start of service, ours: the request's prefill start, vLLM: a free
client thread sending it, so waiting behind other requests is in neither); for vLLM the spec-decode counters as deltas over its rounds (specviz.peers.metrics).
Greedy outputs are compared request by request, with the first differing position.
"""

from __future__ import annotations

import dataclasses
import json
import queue
import statistics
import threading
import time
import urllib.request

import psutil

from specviz.analysis import acceptance
from specviz.analysis.trace import percentile, tokens_per_s
from specviz.common import SpecvizError
from specviz.measure.bench import warm_up
from specviz.models.loading import encode_prompts
from specviz.peers import metrics
from specviz.peers.server import ServeConfig, VllmServer, is_ngram, served_name
from specviz.runconfig import RunConfig
from specviz.run import load_pair, run


@dataclasses.dataclass
class Request:
    """One vLLM completion, timed at the client."""

    output_token_ids: list[int]
    ttft_s: float  # request sent -> first token received
    latency_s: float  # request sent -> last token received
    tpot_s: float | None  # (latency - ttft) / (tokens - 1)


def _post_stream(url: str, body: dict, timeout: float):
    """Yield the JSON events of an OpenAI-style server-sent event stream."""
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                yield json.loads(line[6:])


def vllm_request(url: str, model: str, prompt_ids: list[int], max_tokens: int, timeout: float = 600) -> Request:
    """One greedy streamed completion from prompt token ids; its output ids and client-side timings."""
    body = {"model": model, "prompt": prompt_ids, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
            "return_token_ids": True, "skip_special_tokens": False}
    t0 = time.perf_counter()
    ids, first = [], None
    for event in _post_stream(url + "/v1/completions", body, timeout):
        for choice in event.get("choices", []):
            new = choice.get("token_ids") or []
            if new and first is None:
                first = time.perf_counter()
            ids += new
    end = time.perf_counter()
    if first is None:
        raise SpecvizError(f"vLLM at {url} streamed no token ids (does this vLLM take return_token_ids?)")
    return Request(ids, first - t0, end - t0, (end - first) / (len(ids) - 1) if len(ids) > 1 else None)


def vllm_round(url: str, model: str, prompts: list[list[int]], max_tokens: int, concurrency: int):
    """Every request once through ``concurrency`` client threads: (wall seconds, [Request] in order)."""
    todo: queue.Queue = queue.Queue()
    for i, ids in enumerate(prompts):
        todo.put((i, ids))
    done: list = [None] * len(prompts)
    errors: list = []

    def client():
        while not errors:
            try:
                i, ids = todo.get_nowait()
            except queue.Empty:
                return
            try:
                done[i] = vllm_request(url, model, ids, max_tokens)
            except Exception as e:  # surfaced below, one line
                errors.append(e)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise SpecvizError(f"a vLLM request failed: {errors[0]}")
    return wall, done


class Load:
    """``with Load(url, model, prompts, max_tokens, concurrency) as load:`` client threads send every
    request to a vLLM server again and again (:func:`vllm_round`) until the block ends: traffic for a
    /metrics window (``specviz tune --metrics-url``). ``load.rounds`` counts the finished rounds;
    ``load.errors`` holds the error that stopped it, if one did."""

    def __init__(self, url: str, model: str, ids: list[list[int]], max_tokens: int, concurrency: int):
        self.args = (url, model, ids, max_tokens, concurrency)
        self.stop, self.rounds, self.errors = threading.Event(), 0, []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            try:
                vllm_round(*self.args)
                self.rounds += 1
            except Exception as e:  # the caller reads load.errors
                self.errors.append(e)
                return

    def __enter__(self) -> "Load":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def settle(idle_pct: float = 15.0, quiet_s: float = 0.5, max_s: float = 5.0, sample_s: float = 0.1) -> float:
    """Wait until the whole machine has been idle (CPU below ``idle_pct``) for ``quiet_s``, at most
    ``max_s``; returns the seconds waited. Between arms: vLLM's engine and worker processes spin on
    their cores for a while after the last request returns, and an arm started under them paid for it
    (our 8-lane TTFT was 0.72-0.91 s in the bench against 0.25-0.35 s alone, 2026-12-01)."""
    t0 = time.perf_counter()
    quiet = 0.0
    psutil.cpu_percent(None)  # the next call measures from here
    while time.perf_counter() - t0 < max_s:
        time.sleep(sample_s)
        quiet = quiet + sample_s if psutil.cpu_percent(None) < idle_pct else 0.0
        if quiet >= quiet_s:
            break
    return time.perf_counter() - t0


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two outputs differ (a length difference counts), None if equal."""
    for j, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return j
    return None if len(a) == len(b) else min(len(a), len(b))


def strip_eos(ids: list[int], eos: int | None) -> list[int]:
    return ids[:-1] if ids and eos is not None and ids[-1] == eos else ids


@dataclasses.dataclass
class PeerResult:
    cfg: RunConfig
    rounds: int
    ours_tok_s: list[float]  # per round
    vllm_tok_s: list[float]
    ours_ttft: list[float]  # per request, every round
    vllm_ttft: list[float]
    ours_tpot: list[float]
    vllm_tpot: list[float]
    ours_acceptance: dict  # drafted/accepted/rate/mean length/per position over our rounds (None entries: regular)
    vllm_delta: metrics.Delta | None  # vLLM's counters over its rounds
    differences: list[tuple[int, int | None]]  # (request, first differing position) from the last round
    startup_s: float
    version: str | None
    vllm_draft: tuple[str, int] = ("none", 0)  # what the server ran: (draft, num_speculative_tokens)

    @property
    def ratio(self) -> float:
        return statistics.median(o / v for o, v in zip(self.ours_tok_s, self.vllm_tok_s))


def _ours_acceptance(traces: list[dict]) -> dict:
    """Our rounds' counts, and their acceptance rate, mean acceptance length and acceptance per position as
    vLLM counts them (specviz.analysis.acceptance): a draft is an active row-step that drafted."""
    drafted = sum(t["summary"]["drafted"] for t in traces)
    accepted = sum(t["summary"]["accepted"] for t in traces)
    steps = sum(sum(1 for s in t["steps"] for r in s["rows"] if r["active"] and r["drafted"]) for t in traces)
    k = traces[-1]["config"]["draft_length"]
    per_pos = [sum(1 for t in traces for s in t["steps"] for r in s["rows"] if r["active"] and r["drafted"]
                   and r["accepted"] > j) for j in range(k)] if drafted else []
    return {"drafted": drafted, "accepted": accepted, "drafts": steps,
            "rate": acceptance.acceptance_rate(accepted, drafted),
            "mean_length": acceptance.mean_acceptance_length(accepted, steps),
            "per_position": acceptance.acceptance_per_position(per_pos, steps) if steps else None}


def is_regular(cfg: RunConfig) -> bool:
    return cfg.mode == "regular" or cfg.draft == "none" or cfg.draft_length == 0


def check_peer(cfg: RunConfig, peer_draft: str | None = None) -> None:
    """What a vLLM peer bench can compare, from the flags alone (before anything loads). ``peer_draft``
    (none or ngram[:N]) is vLLM's side when ours runs a draft vLLM cannot serve, e.g. the default pair
    against vLLM's regular decoding."""
    if cfg.temperature != 0:
        raise SpecvizError("the vLLM peer bench compares greedy outputs: use --temperature 0")
    if peer_draft is not None and not (peer_draft == "none" or is_ngram(peer_draft)):
        raise SpecvizError(f"vLLM's side of the peer bench runs ngram or regular decoding: --peer-draft ngram or "
                           f"--peer-draft none, not {peer_draft}")
    if peer_draft is None and not is_regular(cfg) and not is_ngram(cfg.draft):
        raise SpecvizError(f"vLLM cannot serve specviz's {cfg.draft} draft: compare it with vLLM's regular decoding "
                           f"(--peer-draft none) or its n-grams (--peer-draft ngram), or run --draft ngram on both")
    if cfg.tree_width > 1 or cfg.policy != "fixed" or cfg.arrival_rate or cfg.static:
        raise SpecvizError("the vLLM peer bench runs fixed-k chains with every request queued at the start: drop "
                           "--tree-width, --policy, --arrival-rate and --static")


def vllm_draft(cfg: RunConfig, peer_draft: str | None = None) -> tuple[str, int]:
    """vLLM's (draft, num_speculative_tokens) for a bench: ours unless ``peer_draft`` says otherwise."""
    draft = peer_draft if peer_draft is not None else ("none" if is_regular(cfg) else cfg.draft)
    return draft, (0 if draft == "none" else cfg.draft_length)


def _setup(cfg: RunConfig, serve: ServeConfig | None, peer_draft: str | None = None):
    """Our pair and the matching vLLM server config (not started) for a bench configuration."""
    check_peer(cfg, peer_draft)
    regular = is_regular(cfg)
    ours_cfg = dataclasses.replace(cfg, mode="regular" if regular else "speculative",
                                   requests=cfg.requests or max(cfg.batch_size, len(cfg.prompts)))
    ours_cfg.validate()
    target, proposer = load_pair(ours_cfg)
    draft, k = vllm_draft(cfg, peer_draft)
    serve = dataclasses.replace(serve or ServeConfig(), target=cfg.target, draft=draft, draft_length=k,
                                dtype=str(target.dtype).removeprefix("torch."))
    return ours_cfg, target, proposer, serve


def peer_bench(cfg: RunConfig, settings: list[tuple[int, int | None]] | None = None, rounds: int = 3,
               serve: ServeConfig | None = None, on_round=None, peer_draft: str | None = None):
    """Ours vs one vLLM server started here, interleaved over ``rounds``, for each (lanes, requests)
    setting (default: cfg's own; requests None = every prompt once, at least one per lane). Greedy only.
    ``peer_draft``: vLLM's draft (none or ngram[:N]) when it is not ours. Yields a PeerResult per
    setting as soon as it is measured."""
    settings = settings or [(cfg.batch_size, cfg.requests)]
    ours_cfg, target, proposer, serve = _setup(cfg, serve, peer_draft)
    serve = dataclasses.replace(serve, max_num_seqs=max(b for b, _ in settings))
    with VllmServer(serve) as server:
        version = metrics.server_version(server.url)
        vllm_round(server.url, served_name(cfg.target), [[1, 2, 3]], 4, 1)  # its first request pays for allocation
        for b, n in settings:
            one = dataclasses.replace(ours_cfg, batch_size=b, requests=n or max(b, len(cfg.prompts)))
            res = _measure(one, target, proposer, server, rounds, on_round)
            res.version = version
            res.vllm_draft = (serve.draft, serve.draft_length)
            yield res


def _measure(cfg: RunConfig, target, proposer, server: VllmServer, rounds: int, on_round) -> PeerResult:
    """One setting: ``rounds`` rounds, ours and vLLM alternating first."""
    warm_up(cfg, target, proposer)
    prompt_ids = encode_prompts(target.tokenizer, cfg.request_prompts(), cfg.raw_prompt)  # as run() does
    model, url = served_name(cfg.target), server.url
    tok_s, ttft, tpot, traces, last = ([], []), ([], []), ([], []), [], [None, None]
    before = metrics.scrape(url)  # vLLM's counters over its timed rounds (ours leave them alone)
    for r in range(rounds):
        for arm in ((0, 1) if r % 2 == 0 else (1, 0)):
            settle()  # neither arm starts under the other's tail
            if arm == 0:
                trace = run(cfg, target, proposer, telemetry=False)
                assert [s["prompt_token_ids"] for s in trace["sequences"]] == prompt_ids  # the same requests
                tok_s[0].append(tokens_per_s([trace]))
                ttft[0].extend(s["first_token_s"] - s["join_s"] for s in trace["sequences"]
                               if s.get("first_token_s") is not None and s.get("join_s") is not None)
                tpot[0].extend(s["tpot_s"] for s in trace["sequences"] if s.get("tpot_s") is not None)
                traces.append(trace)
                last[0] = [s["output_token_ids"] for s in trace["sequences"]]
            else:
                wall, reqs = vllm_round(url, model, prompt_ids, cfg.max_new_tokens, cfg.batch_size)
                tok_s[1].append(sum(len(q.output_token_ids) for q in reqs) / wall)
                ttft[1].extend(q.ttft_s for q in reqs)
                tpot[1].extend(q.tpot_s for q in reqs if q.tpot_s is not None)
                last[1] = [q.output_token_ids for q in reqs]
        if on_round is not None:
            on_round(r, tok_s[0][-1], tok_s[1][-1])
    d = metrics.delta(before, metrics.scrape(url))
    eos = target.tokenizer.eos_token_id
    diffs = [(i, first_difference(strip_eos(a, eos), strip_eos(b, eos))) for i, (a, b) in enumerate(zip(*last))]
    return PeerResult(cfg, rounds, tok_s[0], tok_s[1], ttft[0], ttft[1], tpot[0], tpot[1],
                      _ours_acceptance(traces) if cfg.mode == "speculative" else {}, d if d.has_spec else None,
                      [x for x in diffs if x[1] is not None], server.startup_s, None)


def _p(values: list[float], q: float) -> str:
    v = percentile(values, q)
    return "-" if v is None else f"{1e3 * v:.0f}"


def format_result(res: PeerResult) -> str:
    c, d, a = res.cfg, res.vllm_delta, res.ours_acceptance
    n = c.num_requests
    theirs = "regular" if res.vllm_draft[0] == "none" else f"{res.vllm_draft[0]} k={res.vllm_draft[1]}"
    ours = "regular" if not a else f"{c.draft} k={c.draft_length}"
    lines = [f"vLLM {res.version} (started in {res.startup_s:.0f} s) vs ours: target {c.target}, ours {ours}, vLLM "
             f"{theirs}, {n} requests through {c.batch_size} lanes, "
             f"max_new_tokens={c.max_new_tokens}, greedy, {res.rounds} interleaved rounds",
             f"{'arm':<8}{'tokens/s':>10}{'TTFT p50/p95 ms':>18}{'TPOT p50/p95 ms':>18}{'acceptance rate':>17}"
             f"{'mean acceptance length':>24}  acceptance per position"]
    for name, tok, tt, tp, rate, ml, pp in (
            ("ours", res.ours_tok_s, res.ours_ttft, res.ours_tpot, a.get("rate"), a.get("mean_length"), a.get("per_position")),
            ("vllm", res.vllm_tok_s, res.vllm_ttft, res.vllm_tpot, d and d.acceptance_rate, d and d.mean_acceptance_length,
             d and d.acceptance_per_position)):
        lines.append(f"{name:<8}{statistics.median(tok):>10.1f}{_p(tt, 50) + ' / ' + _p(tt, 95):>18}"
                     f"{_p(tp, 50) + ' / ' + _p(tp, 95):>18}{'-' if rate is None else f'{rate:.3f}':>17}"
                     f"{'-' if ml is None else f'{ml:.2f}':>24}  " + (", ".join(f"{x:.2f}" for x in pp) if pp else "-"))
    lines.append(f"ours / vLLM tokens/s: {res.ratio:.2f}x (median of per-round ratios: "
                 + ", ".join(f"{o / v:.2f}" for o, v in zip(res.ours_tok_s, res.vllm_tok_s)) + ")")
    if res.differences:
        lines.append(f"greedy outputs differ in {len(res.differences)}/{n} requests (request: first differing "
                     "position): " + ", ".join(f"{i}: {j}" for i, j in res.differences))
    else:
        lines.append(f"greedy outputs identical in all {n} requests")
    return "\n".join(lines)
