"""``python -m specviz bench --peer llamacpp``: our engine and llama.cpp (llama-cpp-python) on the same prompts.

llama.cpp runs in its own environment's interpreter (.venv-llamacpp, ``bash setup.sh --llamacpp``) as
one child process for the whole bench (specviz/peers/llamacpp_worker.py, JSON lines over a pipe), its
models loaded once. Every round runs every arm once, the order rotating each round
(specviz.measure.bench.interleaved): our regular decoding, our speculative decoding (the run's draft),
and llama.cpp's arms, one per (weights, mode):

    weights  bf16 (our bf16 weights, the same bits), f32, q4_1 (the packaged 4-bit file: a lower floor)
    modes    regular; lookup (the binding's prompt lookup, k = --draft-length); draft (a draft GGUF, by
             default the packaged target at 4 bits, since llama.cpp cannot read our distilled draft)

One lane (--batch-size 1) runs the binding's Llama.generate; several lanes (--batch-size B) run one llama.cpp
context with a sequence per lane, regular decoding only (the binding speculates in one lane). Both sides get the
same prompt token ids (ours after the chat template), the same max tokens, greedy, the same threads.
Per arm: tokens/s end to end (output tokens over the round's wall time) and decode tokens/s (the same
tokens over the wall time less prefill, ours as our trace summary counts it), the ratio to our regular
decoding in the same round, and greedy outputs compared request by request with ours.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
from pathlib import Path

from specviz.analysis.acceptance import acceptance_rate
from specviz.common import SpecvizError
from specviz.peers.bench import first_difference, strip_eos
from specviz.peers.ggufs import WEIGHTS, llamacpp_python, target_gguf
from specviz.runconfig import RunConfig

WORKER = Path(__file__).with_name("llamacpp_worker.py")
MODES = ("regular", "lookup", "draft")
DEFAULT_NGRAM = 2  # the binding's LlamaPromptLookupDecoding default (longest n-gram matched)
CTX_MARGIN = 64  # context beyond prompt + max tokens: a draft's k tokens past the end


def _list(text: str, known: tuple[str, ...], flag: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in known]
    if not items or bad:
        raise SpecvizError(f"{flag} takes a comma-separated list of {', '.join(known)}"
                           + (f", not {', '.join(bad)}" if bad else ""))
    return list(dict.fromkeys(items))


def check_llamacpp(c, modes: str | None, weights: str, peer_draft: str | None) -> tuple[list, list]:
    """What a llama.cpp bench can run, from the flags alone (before anything loads): (modes, weights).
    ``c``: the parsed flags or the RunConfig made of them (the same names)."""
    if c.temperature != 0:
        raise SpecvizError("the llama.cpp peer bench compares greedy outputs: use --temperature 0")
    if (getattr(c, "tree_width", 1) > 1 or getattr(c, "policy", "fixed") != "fixed"
            or getattr(c, "arrival_rate", 0.0) or getattr(c, "static", False)):
        raise SpecvizError("the llama.cpp peer bench runs fixed-k chains with every request queued at the start: drop "
                           "--tree-width, --policy, --arrival-rate and --static")
    w = _list(weights, WEIGHTS, "--peer-weights")
    if "q4_1" in w and c.target != "default":
        raise SpecvizError("--peer-weights q4_1 is the packaged default's own 4-bit file: only with --target default")
    if modes is None:
        m = list(MODES) if c.batch_size == 1 else ["regular"]
    else:
        m = _list(modes, MODES, "--peer-modes")
    if c.batch_size > 1 and m != ["regular"]:
        raise SpecvizError(f"llama-cpp-python speculates in one lane only: at --batch-size {c.batch_size} give "
                           "--peer-modes regular (or --batch-size 1 for lookup and draft)")
    if peer_draft is not None and not (peer_draft == "q4_1" or peer_draft.endswith(".gguf")):
        raise SpecvizError(f"with --peer llamacpp, --peer-draft is llama.cpp's draft model: q4_1 (the packaged target "
                           f"at 4 bits) or a .gguf file, not {peer_draft}")
    if peer_draft is not None and peer_draft != "q4_1" and not Path(peer_draft).expanduser().is_file():
        raise SpecvizError(f"--peer-draft {peer_draft}: no such file")
    if peer_draft in (None, "q4_1") and c.target != "default" and "draft" in m:
        raise SpecvizError("--peer-draft q4_1 is the packaged default at 4 bits: give a .gguf draft for another target")
    llamacpp_python()  # the environment is there, or the setup command is said now, before a model loads
    return m, w


def arm_name(weights: str, mode: str, k: int) -> str:
    return f"llama.cpp {weights} {mode}" + ("" if mode == "regular" else f" k={k}")


# ---- the child process ---------------------------------------------------------------------------

class LlamaCppPeer:
    """The worker in .venv-llamacpp: ``ask(request) -> answer``, one JSON line each way."""

    def __init__(self, python: Path | None = None):
        self.python = python or llamacpp_python()
        self.proc: subprocess.Popen | None = None

    def __enter__(self):
        self.proc = subprocess.Popen([str(self.python), str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)
        return self

    def ask(self, req: dict) -> dict:
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # said below, with its log
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            tail = (self.proc.stderr.read() or "").strip().splitlines()[-3:]
            raise SpecvizError(f"llama.cpp's worker exited ({self.proc.returncode}): " + (" / ".join(tail) or "no output"))
        ans = json.loads(line)
        if not ans.get("ok"):
            raise SpecvizError(f"llama.cpp: {ans.get('error')}")
        return ans

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        return False


def run_request(mode: str, model: str, draft: str | None, k: int, ngram: int, lanes: int,
                prompts: list[list[int]], max_tokens: int, eos: int | None) -> dict:
    """One arm's request to the worker: every prompt once, greedy."""
    return {"op": "run", "mode": mode, "model": model, "draft": draft, "k": k, "ngram": ngram, "lanes": lanes,
            "prompts": prompts, "max_tokens": max_tokens, "eos": eos}


def rates(answer: dict) -> tuple[float, float]:
    """(end-to-end tokens/s, decode tokens/s) of a worker's answer: output tokens over the wall time,
    and over the wall time less prefill (as our trace summary counts decode_tokens_per_s)."""
    tokens = sum(len(r["output_ids"]) for r in answer["requests"])
    return tokens / answer["wall_s"], tokens / (answer["wall_s"] - answer["prefill_s"])


# ---- results -----------------------------------------------------------------------------------

@dataclasses.dataclass
class ArmRecord:
    """One arm over the rounds (one entry a round) and its last round's outputs."""
    tok_s: list[float] = dataclasses.field(default_factory=list)  # end to end
    decode_tok_s: list[float] = dataclasses.field(default_factory=list)
    ratio: list[float] = dataclasses.field(default_factory=list)  # to our regular decoding, same round
    drafted: int = 0
    accepted: int = 0
    outputs: list[list[int]] | None = None

    @property
    def acceptance(self) -> float | None:
        """The arm's acceptance rate (None for an arm that drafted nothing)."""
        return acceptance_rate(self.accepted, self.drafted)


@dataclasses.dataclass
class LlamaCppResult:
    cfg: RunConfig
    rounds: int
    threads: int
    version: str
    system: str
    dtype: str  # ours
    arms: dict[str, ArmRecord]
    ggufs: dict[str, str]  # weights -> file
    eos: int | None = None
    extra_buffers: bool = True  # llama.cpp's weight repacking (off on an AMX CPU, where it crashes)

    def differences(self, arm: str) -> list[tuple[int, int]]:
        """(request, first differing position) of an arm's last-round outputs against our regular decoding's."""
        ours = self.arms["ours regular"].outputs or []
        theirs = self.arms[arm].outputs or []
        eos = self.eos
        pairs = [(i, first_difference(strip_eos(a, eos), strip_eos(b, eos))) for i, (a, b) in enumerate(zip(ours, theirs))]
        return [(i, j) for i, j in pairs if j is not None]


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def format_result(res: LlamaCppResult) -> str:
    c = res.cfg
    lines = [f"llama.cpp (llama-cpp-python {res.version}) vs ours: target {c.target}, ours {res.dtype}, "
             f"{c.num_requests if c.batch_size > 1 else len(c.prompts)} requests through {c.batch_size} lane(s), "
             f"max_new_tokens={c.max_new_tokens}, greedy, {res.threads} threads, {res.rounds} interleaved rounds",
             *([] if res.extra_buffers else ["llama.cpp's weight repacking (AMX) off: on this CPU it crashes the process; "
                                             "4-bit weights run on its AVX-512 kernels, bf16 and f32 never repack"]),
             f"{'arm':<30}{'tokens/s':>10}{'decode tok/s':>14}{'vs ours regular':>17}{'spread':>12}{'acceptance rate':>17}"]
    for name, a in res.arms.items():
        acc = a.acceptance
        lines.append(f"{name:<30}{statistics.median(a.tok_s):>10.1f}{statistics.median(a.decode_tok_s):>14.1f}"
                     f"{statistics.median(a.ratio):>16.2f}x{spread(a.ratio):>12}{'-' if acc is None else f'{acc:.3f}':>17}")
    for name in res.arms:
        if name.startswith("llama.cpp"):
            diffs = res.differences(name)
            n = len(res.arms[name].outputs or [])
            lines.append(f"{name}: greedy outputs " + ("identical to ours regular in all " f"{n} requests" if not diffs else
                         f"differ from ours regular in {len(diffs)}/{n} requests (request: first differing position): "
                         + ", ".join(f"{i}: {j}" for i, j in diffs)))
    return "\n".join(lines)


def result_json(res: LlamaCppResult, busy: str | None = None) -> dict:
    c = res.cfg
    return {"peer": "llamacpp", "llama_cpp_python": res.version, "target": c.target, "dtype": res.dtype,
            "lanes": c.batch_size, "max_new_tokens": c.max_new_tokens, "draft": c.draft, "draft_length": c.draft_length,
            "threads": res.threads, "rounds": res.rounds, "ggufs": res.ggufs, "extra_buffers": res.extra_buffers,
            "arms": {name: {"tokens_per_s": statistics.median(a.tok_s),
                            "decode_tokens_per_s": statistics.median(a.decode_tok_s),
                            "ratio_to_ours_regular": statistics.median(a.ratio),
                            "rounds_tokens_per_s": a.tok_s, "rounds_decode_tokens_per_s": a.decode_tok_s,
                            "rounds_ratio": a.ratio, "acceptance_rate": a.acceptance,
                            "first_differences": None if name == "ours regular" else res.differences(name)}
                     for name, a in res.arms.items()},
            "machine_busy": busy}


# ---- the bench ---------------------------------------------------------------------------------

def _ours(records: ArmRecord, traces: list[list[dict]]) -> None:
    """Our arm's decode tokens/s per round, the last round's outputs and the drafts, from its traces."""
    for round_traces in traces:
        tokens = sum(t["summary"]["tokens"] for t in round_traces)
        records.decode_tok_s.append(tokens / sum(t["summary"]["wall_s"] - t["summary"]["prefill_s"] for t in round_traces))
    records.outputs = [s["output_token_ids"] for t in traces[-1] for s in t["sequences"]]
    records.drafted = sum(t["summary"]["drafted"] for t in traces[-1])
    records.accepted = sum(t["summary"]["accepted"] for t in traces[-1])


def llamacpp_bench(cfg: RunConfig, rounds: int, modes: list[str], weights: list[str], peer_draft: str | None = None,
                   say=print, on_round=None) -> LlamaCppResult:
    """Ours (regular and cfg's draft) and llama.cpp's arms, interleaved over ``rounds`` in one process
    beside one worker; ``on_round(i, {arm: tokens/s})`` after each round."""
    import torch

    from specviz.measure.bench import engine_arm, interleaved, warm_up
    from specviz.models.loading import default_gguf_path, encode_prompts
    from specviz.run import load_pair

    spec_cfg, reg_cfg = dataclasses.replace(cfg, mode="speculative"), dataclasses.replace(cfg, mode="regular")
    target, proposer = load_pair(spec_cfg)
    ggufs = {w: str(target_gguf(cfg.target, target.model.name_or_path, w, say)) for w in weights}
    models = dict(ggufs)
    if "draft" in modes:
        models["draft"] = str(default_gguf_path() if peer_draft in (None, "q4_1") else Path(peer_draft).expanduser())
    prompt_ids = encode_prompts(target.tokenizer, [p for c in cfg.every_prompt() for p in c.request_prompts()],
                                cfg.raw_prompt)  # the requests our arms run, in their order
    eos, k, threads = target.tokenizer.eos_token_id, cfg.draft_length, torch.get_num_threads()
    ngram = int(cfg.draft.partition(":")[2] or DEFAULT_NGRAM) if cfg.draft.startswith("ngram") else DEFAULT_NGRAM
    n_ctx = -(-(max(map(len, prompt_ids)) + cfg.max_new_tokens + CTX_MARGIN) // 256) * 256
    ours_spec = f"ours {cfg.draft} k={k}"
    records = {"ours regular": ArmRecord(), ours_spec: ArmRecord()}
    with LlamaCppPeer() as peer:
        info = peer.ask({"op": "load", "models": models, "threads": threads, "n_ctx": n_ctx})

        def llama_arm(name: str, w: str, mode: str, ids: list[list[int]], max_tokens: int, record: bool = True):
            def arm():
                ans = peer.ask(run_request(mode, w, "draft" if mode == "draft" else None, k, ngram, cfg.batch_size,
                                           ids, max_tokens, eos))
                e2e, decode = rates(ans)
                if record:
                    r = records[name]
                    r.decode_tok_s.append(decode)
                    r.outputs = [q["output_ids"] for q in ans["requests"]]
                    r.drafted, r.accepted = ans.get("drafted", 0), ans.get("accepted", 0)
                return e2e, None
            return arm

        arms = {"ours regular": engine_arm(reg_cfg, target, None), ours_spec: engine_arm(spec_cfg, target, proposer)}
        for w in weights:
            for mode in modes:
                name = arm_name(w, mode, k)
                records[name] = ArmRecord()
                arms[name] = llama_arm(name, w, mode, prompt_ids, cfg.max_new_tokens)
                llama_arm(name, w, mode, prompt_ids[: cfg.batch_size], 8, record=False)()  # allocation, first use
        warm_up(spec_cfg, target, proposer)
        warm_up(reg_cfg, target, None)
        res = interleaved(arms, rounds, reference="ours regular", on_round=on_round)
    for name, arm in res.items():
        records[name].tok_s, records[name].ratio = arm.tok_s, arm.ratio
    _ours(records["ours regular"], res["ours regular"].traces)
    _ours(records[ours_spec], res[ours_spec].traces)
    return LlamaCppResult(cfg, len(res["ours regular"].tok_s), threads, info["version"], info["system"],
                          str(target.dtype).removeprefix("torch."), records, ggufs, eos, info.get("extra_buffers", True))


def run_llamacpp(a, cfg: RunConfig) -> int:
    """``bench --peer llamacpp``: the table (or --json) on stdout, progress on stderr."""
    import sys

    from specviz.measure.hostload import OtherLoad

    modes, weights = check_llamacpp(cfg, a.peer_modes, a.peer_weights, a.peer_draft)
    load = OtherLoad("the benchmark")
    with load:
        res = llamacpp_bench(cfg, a.repeats, modes, weights, a.peer_draft,
                             say=lambda m: print(m, file=sys.stderr, flush=True),
                             on_round=lambda i, tok: print(f"round {i + 1}: " + ", ".join(
                                 f"{n} {v:.1f}" for n, v in tok.items()), file=sys.stderr, flush=True))
    busy = load.warning()
    if a.json:
        print(json.dumps(result_json(res, busy), indent=1))
    else:
        print(format_result(res))
        if busy:
            print(f"warning: {busy}", file=sys.stderr)
    return 0
