"""Capture a real vLLM server's /metrics before and after a few greedy requests (tests/data/vllm/).

    .venv/bin/python bench/vllm_capture.py [--draft ngram] [--draft-length 4] [--no-compile] [--out tests/data/vllm]

Starts ``python -m specviz vllm serve``'s server (specviz.peers.server) on the packaged model, saves
metrics-<vllm version>-before.txt, sends a few greedy completions (copy-heavy prompts, so n-gram
lookup has something to find), and saves metrics-<vllm version>-after.txt. The parser tests
(tests/peers/test_vllm_metrics.py) read these files; nothing in them is written by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specviz.peers.server import ServeConfig, VllmServer, served_name  # noqa: E402

PROMPTS = [
    "Repeat this list exactly, twice: apple, banana, cherry, date, elderberry, fig, grape.",
    "Copy the sentence word for word: The quick brown fox jumps over the lazy dog near the river bank.",
    "Write the numbers from one to twenty in words, separated by commas.",
    "Explain speculative decoding in two sentences.",
]


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def complete(url: str, model: str, prompt: str, max_tokens: int) -> dict:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                       "temperature": 0.0}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draft", default="ngram")
    ap.add_argument("--draft-length", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests" / "data" / "vllm"))
    a = ap.parse_args()
    cfg = ServeConfig(draft=a.draft, draft_length=a.draft_length, compile=not a.no_compile)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with VllmServer(cfg) as server:
        version = json.loads(get(server.url + "/version"))["version"]
        print(f"vLLM {version} healthy at {server.url} after {server.startup_s:.1f} s", flush=True)
        (out / f"metrics-{version}-before.txt").write_text(get(server.url + "/metrics"))
        for p in PROMPTS:
            t0 = time.perf_counter()
            r = complete(server.url, served_name(cfg.target), p, a.max_tokens)
            print(f"{time.perf_counter() - t0:6.2f} s  {r['usage']['completion_tokens']} tokens  "
                  f"{r['choices'][0]['message']['content'][:60]!r}", flush=True)
        (out / f"metrics-{version}-after.txt").write_text(get(server.url + "/metrics"))
    print(f"written to {out}/metrics-{version}-{{before,after}}.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
