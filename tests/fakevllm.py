"""A stand-in for ``python -m vllm.entrypoints.openai.api_server`` in unit tests of specviz.peers.server:
it records its command line, then behaves as $FAKE_VLLM_MODE says:

  serve  answer /health, /version, /metrics (tests/data/vllm's captured text, unchanging) and streamed /v1/completions (token ids: continuation(prompt), two
         per event, as a speculative step emits several) on --host:--port until SIGTERM; a child
         process of its own sleeps beside it (as vLLM's engine process does), its pid in
         $FAKE_VLLM_RECORD.child
  die    print a few log lines and exit 3 (a server that fails while starting)
  hang   never answer (a server that does not become healthy)
"""

import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


METRICS = Path(__file__).resolve().parent / "data" / "vllm" / "metrics-0.32.0-after.txt"  # a real server's text


def continuation(prompt_ids, n):
    """The fake model's greedy output: deterministic in the prompt."""
    return [(sum(prompt_ids) + 7 * i) % 97 + 3 for i in range(n)]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the stream ends when the connection closes

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ids = continuation(body["prompt"], body["max_tokens"])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for j in range(0, len(ids), 2):
            time.sleep(0.005)
            event = {"choices": [{"index": 0, "text": "", "token_ids": ids[j:j + 2]}]}
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")

    def do_GET(self):
        body = {"/health": b"", "/version": b'{"version": "0.0-fake"}', "/metrics": METRICS.read_bytes()}.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *a):
        pass


def main():
    args = sys.argv[1:]
    record = os.environ["FAKE_VLLM_RECORD"]
    with open(record, "w") as f:
        json.dump({"argv": args, "env": {k: os.environ.get(k) for k in ("VLLM_CPU_KVCACHE_SPACE", "HF_HUB_OFFLINE")}}, f)
    mode = os.environ.get("FAKE_VLLM_MODE", "serve")
    if mode == "die":
        print("INFO loading the model")
        print("RuntimeError: the fake engine failed on purpose", flush=True)
        sys.exit(3)
    if mode == "hang":
        time.sleep(3600)

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    with open(record + ".child", "w") as f:
        f.write(str(child.pid))

    def stop(signum, frame):  # leaves the child alone: only a SIGTERM to the whole group ends it
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])
    ThreadingHTTPServer((host, port), Handler).serve_forever()


if __name__ == "__main__":
    main()
