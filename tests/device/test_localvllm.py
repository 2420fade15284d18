"""specviz.device.localvllm: the vLLM server the Server page starts. The real command (`python -m specviz vllm
serve` on the packaged model) runs against a stand-in for vLLM's interpreter (tests/fakevllm.py), so the CLI,
its checks and its signal handling are the real ones; only vLLM is not."""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.request

import pytest
import locations

from specviz.device import localvllm

FAKE = locations.ROOT / "tests" / "fakevllm.py"


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """SPECVIZ_VLLM_PYTHON -> a script that runs tests/fakevllm.py; returns the file it records its argv in."""
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\nshift 2\nexec {sys.executable} {FAKE} \"$@\"\n")  # drops "-m vllm.entrypoints..."
    exe.chmod(0o755)
    monkeypatch.setenv("SPECVIZ_VLLM_PYTHON", str(exe))
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(tmp_path / "record.json"))
    monkeypatch.setattr(localvllm, "_current", None)
    return tmp_path / "record.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gone(pid: int, s: float = 10.0) -> bool:
    end = time.monotonic() + s
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ")[1][0] == "Z":  # a zombie waiting for its parent has ended
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_the_page_command_serves_the_packaged_model_on_loopback_and_stop_ends_vllm_too(fake_vllm):
    port = free_port()
    local = localvllm.start(port)
    try:
        assert localvllm.start(port) is local  # a second click while it runs starts nothing
        deadline = time.monotonic() + 240  # the packaged model is converted once, on first use
        while local.running and not local.ready and time.monotonic() < deadline:
            time.sleep(0.2)
        assert local.ready, local.log_tail()
        argv = json.loads(fake_vllm.read_text())["argv"]
        assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == str(port)
        assert json.loads(argv[argv.index("--speculative-config") + 1])["num_speculative_tokens"] == localvllm.DRAFT_LENGTH
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert b"vllm:spec_decode_num_drafts" in r.read()
        assert any(line.startswith(localvllm.READY) for line in local.log_tail())
    finally:
        local.stop()
    assert local.proc.wait(localvllm.STOP_GRACE_S + 5) != 0 and not local.running
    assert gone(int(fake_vllm.with_name("record.json.child").read_text()))  # vLLM's engine process too
    assert any("SIGTERM" in line for line in local.log_tail())  # the CLI stopped its server on the signal


def test_only_an_unprivileged_loopback_metrics_address_can_get_a_local_server():
    assert localvllm.loopback_port("http://127.0.0.1:8000/metrics") == 8000
    assert localvllm.loopback_port("http://localhost:8123/metrics") == 8123
    assert localvllm.loopback_port("http://gpu-node:8000/metrics") is None  # another machine's address
    assert localvllm.loopback_port("http://127.0.0.1:80/metrics") is None  # a privileged port
    assert localvllm.loopback_port("https://127.0.0.1:8000/metrics") is None  # vLLM serves plain HTTP here
    assert localvllm.loopback_port("http://127.0.0.1:8000/v1/metrics") is None  # behind a prefix: not ours
    argv = localvllm.serve_args(8000)
    assert argv[argv.index("--target") + 1] == "default" and argv[argv.index("--port") + 1] == "8000"
    assert "--host" not in argv  # `vllm serve` binds 127.0.0.1 itself (specviz.peers.server.HOST)
