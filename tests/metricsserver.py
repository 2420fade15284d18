"""A real local HTTP server (python's http.server in a thread) that serves chosen text at chosen
paths, for the Server page and the /metrics reader: the transport is real, the content is the
metrics text captured from a real vLLM server (tests/data/vllm/)."""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "vllm"


def captured_versions() -> list[str]:
    """The vLLM versions whose before/after /metrics captures are in tests/data/vllm."""
    return sorted(m.group(1) for p in DATA.glob("metrics-*-after.txt")
                  if (m := re.fullmatch(r"metrics-(.+)-after\.txt", p.name)) and (DATA / f"metrics-{m.group(1)}-before.txt").is_file())


def captured(version: str, which: str) -> str:
    return (DATA / f"metrics-{version}-{which}.txt").read_text()


def without(text: str, *names: str) -> str:
    """The text minus every line (samples, HELP, TYPE) of the metrics whose name starts with one of
    ``names``: what a server that does not export them sends."""
    def keep(line: str) -> bool:
        parts = line.split()
        name = (parts[2] if len(parts) > 2 else "") if line.startswith("#") else line
        return not any(name.startswith(n) for n in names)
    return "".join(ln for ln in text.splitlines(keepends=True) if keep(ln))


class MetricsServer:
    """Serves ``routes[path] = (status, content type, body[, {header: value}])``; change ``routes``
    between requests. ``requests`` lists the path of every request it got, in order (a proxy's request
    line carries the full URL)."""

    def __init__(self, routes: dict | None = None):
        self.routes = dict(routes or {})
        self.requests: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                owner.requests.append(self.path)
                status, ctype, body, *extra = owner.routes.get(self.path, (404, "text/plain", "not found"))
                data = body.encode() if isinstance(body, str) else body
                self.send_response(status)
                for name, value in (extra[0] if extra else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep pytest's output clean
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def metrics(self, text: str) -> None:
        self.routes["/metrics"] = (200, "text/plain; version=0.0.4; charset=utf-8", text)

    def __enter__(self) -> "MetricsServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
