"""``python -m specviz vllm serve`` and specviz.peers.server.

Unit tests (always run) drive the command's logic against tests/fakevllm.py, a stand-in for vLLM's
API server that records its command line: the speculative config, the process group stopped on
exit and on SIGTERM/Ctrl-C, and the one-line errors. The integration tests (marker ``vllm``, opt-in
with SPECVIZ_VLLM_TESTS=1, and only where ``bash setup.sh --vllm`` made .venv-vllm) start the real
vLLM server on the packaged model with n-gram speculation on this CPU and check its counters.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from specviz.common import EXIT_MISSING, SpecvizError
from specviz.peers import server as srv
import locations

ROOT = locations.ROOT
DISTILLED = ROOT / "specviz" / "assets" / "draft-SmolLM2-135M-Instruct"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie waiting for its parent counts as gone
        return f.read().split(") ")[1][0] != "Z"


def wait_gone(pid: int, s: float = 10.0) -> bool:
    end = time.monotonic() + s
    while time.monotonic() < end and alive(pid):
        time.sleep(0.05)
    return not alive(pid)


def spec_config(argv: list[str]) -> dict | None:
    return json.loads(argv[argv.index("--speculative-config") + 1]) if "--speculative-config" in argv else None


# ---- the command line vLLM gets -----------------------------------------------------------------------

def test_ngram_draft_becomes_vllms_prompt_lookup_with_the_same_k_and_n():
    cfg = srv.ServeConfig(draft="ngram:5", draft_length=3)
    argv = srv.build_argv(cfg, "py", "/m", 8123)
    assert argv[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    assert spec_config(argv) == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 5,
                                 "prompt_lookup_min": 1}
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "8123"
    assert spec_config(srv.build_argv(srv.ServeConfig(draft="ngram"), "py", "/m", 1))["prompt_lookup_max"] == srv.NGRAM_MAX


def test_no_draft_serves_regular_decoding_and_no_compile_turns_torch_compile_off():
    argv = srv.build_argv(srv.ServeConfig(draft="none", compile=False), "py", "/m", 1)
    assert spec_config(argv) is None
    assert json.loads(argv[argv.index("--compilation-config") + 1]) == {"mode": 0}
    assert "--compilation-config" not in srv.build_argv(srv.ServeConfig(), "py", "/m", 1)


def test_a_full_vocabulary_model_draft_is_served_as_vllms_draft_model(model_dir):
    cfg = srv.speculative_config(str(model_dir), 2)
    assert cfg == {"method": "draft_model", "model": str(model_dir), "num_speculative_tokens": 2}


@pytest.mark.parametrize("draft", ["default", str(DISTILLED)])
def test_our_distilled_draft_is_refused_with_the_reason(draft):
    with pytest.raises(SpecvizError, match="reduced output vocabulary"):
        srv.speculative_config(draft, 4)


def test_serve_refusals_are_one_line_before_anything_starts(model_dir, fake, capsys):
    from specviz.cli import main

    assert main(["vllm", "serve", "--target", str(model_dir), "--draft", str(DISTILLED)]) == 2
    assert main(["vllm", "serve", "--target", str(model_dir), "--max-model-len", "5000"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "distilled draft" in err[0] and "past the 4096-token context" in err[1], err


def test_a_speculative_config_given_as_json_reaches_vllm_as_given():
    given = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3, "prompt_lookup_min": 1,
             "num_speculative_tokens_per_batch_size": [[1, 4, 2], [5, 8, 1]]}
    cfg = srv.ServeConfig(draft="ngram", draft_length=5, speculative_config=json.dumps(given))
    assert spec_config(srv.build_argv(cfg, "py", "/m", 1)) == given


@pytest.mark.parametrize("given, says", [
    ("{method: ngram}", "is not JSON"),
    ("[1, 2]", "must be a JSON object, not list"),
    ('{"num_speculative_tokens": 3}', "names neither a method nor a model"),
    ('{"method": "ngram", "num_speculative_tokens": 0}', "whole number of 1 or more, not 0"),
])
def test_a_bad_speculative_config_is_refused_in_one_line_before_anything_starts(model_dir, fake, capsys, given, says):
    from specviz.cli import main

    assert main(["vllm", "serve", "--target", str(model_dir), "--port", "0", "--speculative-config", given]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_draft_and_speculative_config_together_are_refused(model_dir, fake, capsys):
    from specviz.cli import main

    assert main(["vllm", "serve", "--target", str(model_dir), "--draft", "ngram", "--speculative-config",
                 '{"method": "ngram", "num_speculative_tokens": 3}']) == 2
    assert "not both" in capsys.readouterr().err


# ---- starting and stopping -------------------------------------------------------------------------------

def test_missing_vllm_venv_says_how_to_install_it(model_dir, monkeypatch, tmp_path, capsys):
    from specviz.cli import main

    monkeypatch.setenv("SPECVIZ_VLLM_PYTHON", str(tmp_path / "no" / "python"))
    assert main(["vllm", "serve", "--target", str(model_dir), "--port", "0"]) == EXIT_MISSING
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vLLM is not installed" in err[0] and "bash setup.sh --vllm" in err[0], err


def test_a_busy_port_is_refused_in_one_line(model_dir, fake, capsys):
    from specviz.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["vllm", "serve", "--target", str(model_dir), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"specviz: error: port {port} on 127.0.0.1 is busy (Address already in use): pick another "
                   "--port, or --port 0 for a free one"]


def test_a_server_that_dies_while_starting_shows_the_last_lines_of_its_log(model_dir, fake, capsys):
    from specviz.cli import main

    fake.mode("die")
    assert main(["vllm", "serve", "--target", str(model_dir), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the vLLM server exited (3) while starting" in err[0], err
    assert "RuntimeError: the fake engine failed on purpose" in err[0]


def test_a_server_that_never_gets_healthy_is_stopped_after_the_timeout(model_dir, fake, tmp_path):
    fake.mode("hang")
    server = srv.VllmServer(srv.ServeConfig(target=str(model_dir), startup_timeout_s=1.0))
    with pytest.raises(SpecvizError, match="not healthy after 1 s"):
        server.start()
    assert server.proc.poll() is not None  # stopped, not left behind


def test_the_server_is_healthy_inside_and_its_whole_process_group_is_stopped_after(model_dir, fake):
    fake.mode("serve")
    cfg = srv.ServeConfig(target=str(model_dir), draft="ngram", draft_length=4)
    with srv.VllmServer(cfg) as server:
        with urllib.request.urlopen(server.url + "/health", timeout=5) as r:
            assert r.status == 200
        argv, child = fake.argv(), fake.child_pid()
        assert argv[argv.index("--model") + 1] == str(model_dir) and spec_config(argv)["num_speculative_tokens"] == 4
        assert alive(child)
    assert server.proc.poll() is not None and wait_gone(child)  # the engine-like child went with the group


def test_sigterm_stops_the_server_and_exits_143(model_dir, fake):
    fake.mode("serve")
    proc = subprocess.Popen([sys.executable, "-m", "specviz", "vllm", "serve", "--target", str(model_dir), "--port", "0"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # printed once /health answers
        assert "vLLM serving" in line and "http://127.0.0.1:" in line, (line, proc.stderr.read() if proc.poll() else "")
        child = fake.child_pid()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 143
        err = proc.stderr.read()
        assert "the vLLM server was stopped" in err and "Traceback" not in err, err
        assert wait_gone(child)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_ctrl_c_stops_the_server_and_exits_130(model_dir, fake, capsys, monkeypatch):
    import threading

    from specviz.cli import main

    fake.mode("serve")
    real_serve, pids = srv.serve, []

    def serve_then_ctrl_c(cfg, out=None):  # the real serve; a Ctrl-C arrives once it is healthy
        real_healthy = srv.VllmServer.healthy

        def healthy(self):
            ok = real_healthy(self)
            if ok and not pids:
                pids.append(self.proc.pid)
                threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
            return ok

        monkeypatch.setattr(srv.VllmServer, "healthy", healthy)
        return real_serve(cfg, out)

    monkeypatch.setattr("specviz.peers.command.serve", serve_then_ctrl_c)
    assert main(["vllm", "serve", "--target", str(model_dir), "--port", "0"]) == 130
    assert "the vLLM server was stopped" in capsys.readouterr().err
    assert wait_gone(pids[0]) and wait_gone(fake.child_pid())


# ---- the peer bench's client ----------------------------------------------------------------------------

def test_concurrent_streamed_requests_come_back_in_request_order_with_their_timings(model_dir, fake):
    from fakevllm import continuation

    from specviz.peers.bench import vllm_round

    fake.mode("serve")
    prompts = [[1, 2, 3], [50], [9, 9], [4, 40, 4], [77]]
    with srv.VllmServer(srv.ServeConfig(target=str(model_dir))) as server:
        wall, reqs = vllm_round(server.url, "m", prompts, 5, concurrency=2)
    assert [q.output_token_ids for q in reqs] == [continuation(p, 5) for p in prompts]
    assert all(0 < q.ttft_s <= q.latency_s <= wall and q.tpot_s == pytest.approx((q.latency_s - q.ttft_s) / 4)
               for q in reqs)


def test_bench_peer_vllm_runs_ours_and_the_server_on_the_same_requests_and_reports_differences(fake, capsys):
    """The command end to end with the real packaged model on our side and the fake server on the other:
    the fake's outputs are not the model's, so every request differs, at position 0."""
    from specviz.cli import main

    fake.mode("serve")
    assert main(["bench", "--peer", "vllm", "--draft", "ngram", "--draft-length", "2", "--prompt", "hi", "--prompt", "there",
                 "--batch-size", "2", "--max-new-tokens", "3", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    argv = fake.argv()
    assert spec_config(argv)["num_speculative_tokens"] == 2 and argv[argv.index("--max-num-seqs") + 1] == "2"
    assert "vLLM 0.0-fake" in out and "2 requests through 2 lanes" in out and "ours / vLLM tokens/s" in out
    assert "greedy outputs differ in 2/2 requests (request: first differing position): 0: 0, 1: 0" in out, out


def test_bench_peer_vllm_runs_the_default_pair_against_the_servers_own_regular_decoding(fake, capsys):
    """--peer-draft none: ours speculates with the distilled default draft, which vLLM cannot serve,
    and the server decodes without a speculative config; the report names both sides."""
    from specviz.cli import main

    fake.mode("serve")
    assert main(["bench", "--peer", "vllm", "--draft", "default", "--peer-draft", "none", "--draft-length", "1",
                 "--prompt", "hi", "--max-new-tokens", "3", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "--speculative-config" not in fake.argv()
    assert "ours default k=1, vLLM regular" in out, out
    assert "acceptance rate" in out and "ours / vLLM tokens/s" in out


@pytest.mark.parametrize("a,b,where", [([1, 2, 3], [1, 2, 3], None), ([1, 2, 3], [1, 5, 3], 1),
                                       ([1, 2], [1, 2, 3], 2), ([], [4], 0)])
def test_first_difference_is_the_first_position_that_differs_or_where_one_output_stops(a, b, where):
    from specviz.peers.bench import first_difference

    assert first_difference(a, b) == where


# ---- the real server (opt-in) ------------------------------------------------------------------------------

real = pytest.mark.skipif(
    not os.environ.get("SPECVIZ_VLLM_TESTS") or not (ROOT / ".venv-vllm" / "bin" / "python").is_file(),
    reason="the real vLLM server test is opt-in: bash setup.sh --vllm, then SPECVIZ_VLLM_TESTS=1")


@pytest.fixture(scope="module")
def real_server():
    cfg = srv.ServeConfig(draft="ngram", draft_length=4, compile=False, max_num_seqs=4)
    with srv.VllmServer(cfg) as server:
        yield server


def complete(url: str, prompt: str, max_tokens: int) -> dict:
    body = json.dumps({"model": srv.served_name("default"), "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0.0}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


@pytest.mark.vllm
@real
def test_real_vllm_counters_move_consistently_under_ngram_speculation(real_server):
    from specviz.peers import metrics

    before = metrics.scrape(real_server.url)
    prompts = ["Repeat exactly: red, green, blue, red, green, blue, red, green, blue,",
               "Count: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"]
    made = sum(complete(real_server.url, p, 24)["usage"]["completion_tokens"] for p in prompts)
    after = metrics.scrape(real_server.url)
    d = metrics.delta(before, after)
    assert d.has_spec and d.drafts > 0 and d.k == 4
    assert 0 < d.accepted <= d.draft_tokens <= 4 * d.drafts  # copy-heavy prompts: n-gram lookup finds some
    assert sum(d.accepted_per_position) == d.accepted
    assert list(d.accepted_per_position) == sorted(d.accepted_per_position, reverse=True)  # P(A >= j) falls
    assert d.generation_tokens == made


@pytest.mark.vllm
@real
def test_the_server_page_renders_the_real_servers_counters(real_server):
    from test_server_page import ALWAYS_CHARTS, SPEC_CHARTS, drawn, server_page

    at = server_page(real_server.url)
    complete(real_server.url, "Repeat exactly: one two three, one two three, one two three,", 16)
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert SPEC_CHARTS | ALWAYS_CHARTS <= drawn(at)


def test_settle_returns_once_the_machine_has_been_idle_for_the_quiet_time(monkeypatch):
    from specviz.peers import bench as peer
    loads = [90.0, 90.0, 5.0, 80.0, 5.0, 5.0, 5.0] + [5.0] * 50  # busy, a blip of idle, busy, then idle
    calls = []

    def cpu_percent(_=None):
        calls.append(1)
        return loads[len(calls) - 2] if len(calls) > 1 else 0.0  # the first call only primes psutil

    monkeypatch.setattr(peer.psutil, "cpu_percent", cpu_percent)
    waited = peer.settle(idle_pct=15, quiet_s=0.025, max_s=5, sample_s=0.01)
    assert waited < 1.0
    assert len(calls) == 1 + 7  # the priming call, then three idle samples after the last busy one


def test_settle_gives_up_after_max_s_on_a_machine_that_stays_busy(monkeypatch):
    from specviz.peers import bench as peer
    monkeypatch.setattr(peer.psutil, "cpu_percent", lambda _=None: 100.0)
    assert 0.2 <= peer.settle(quiet_s=0.1, max_s=0.2, sample_s=0.01) < 0.5
