"""Streamlit's post-rerun gc.collect(2) is off: it took 74% of the server's CPU during a Live run
(issue 13, BENCHMARKS.md), cores the decode worker needs."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import locations

ROOT = locations.ROOT
READ = "import streamlit.config as c; c.get_config_options(force_reparse=True); print(c.get_option('runner.postScriptGC'))"


def option_seen_from(cwd) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    return subprocess.run([sys.executable, "-c", READ], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_server_started_from_the_checkout_reads_post_script_gc_off():
    assert option_seen_from(ROOT) == "False"


def test_started_elsewhere_the_option_is_on_until_the_app_turns_it_off():
    with tempfile.TemporaryDirectory() as d:
        assert option_seen_from(d) == "True"  # so the file in the checkout is what turns it off


@pytest.mark.usefixtures("navigation_owns_the_pages")
def test_the_app_turns_post_script_gc_off_when_the_config_file_was_missed():
    from streamlit import config
    from streamlit.testing.v1 import AppTest

    before = config.get_option("runner.postScriptGC")
    config.set_option("runner.postScriptGC", True)
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
        at.run()
        assert not at.exception
        assert config.get_option("runner.postScriptGC") is False
    finally:
        config.set_option("runner.postScriptGC", before)


# ---- who can reach the server (README.md "Sharing the app") ----------------------------------------

OPTIONS = ("import streamlit.config as c; c.get_config_options(force_reparse=True); "
           "print(repr([c.get_option(o) for o in ('server.address', 'server.allowedHosts', 'server.enableCORS', "
           "'server.enableXsrfProtection', 'server.maxUploadSize')]))")


def test_the_checkout_binds_loopback_with_its_host_names_and_streamlits_protections_on():
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    out = subprocess.run([sys.executable, "-c", OPTIONS], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    address, hosts, cors, xsrf, _ = eval(out.stdout)  # noqa: S307 - our own repr of a list
    assert address == "127.0.0.1" and set(hosts) == {"localhost", "127.0.0.1", "::1"} and cors and xsrf


def test_streamlits_upload_limit_is_the_apps_trace_limit():
    from specviz.app.upload import MAX_TRACE_BYTES

    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    out = subprocess.run([sys.executable, "-c", OPTIONS], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert eval(out.stdout)[-1] * 2**20 == MAX_TRACE_BYTES  # noqa: S307 - Streamlit's MB are 2**20 bytes


def listening(port: int) -> set[str]:
    """The local addresses with a TCP socket in LISTEN state on ``port`` (from /proc/net/tcp and tcp6)."""
    import ipaddress

    found = set()
    for name, width in (("tcp", 4), ("tcp6", 16)):
        path = Path("/proc/net") / name
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.split(":")
            if state != "0A" or int(hexport, 16) != port:  # 0A: TCP_LISTEN
                continue
            raw = bytes.fromhex(addr)  # the kernel prints each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, width, 4))
            found.add(str(ipaddress.ip_address(raw)))
    return found


def websocket_status(port: int, host: str) -> int:
    """The status of a WebSocket handshake on Streamlit's stream with this Host header."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/_stcore/stream", headers={
            "Host": host, "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's /proc/net/tcp")
def test_a_real_server_from_the_checkout_listens_on_loopback_only_and_refuses_other_host_names():
    from browser import free_port, http_ok, stop_process, wait_for

    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")},
           "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                                 "--server.port", str(port)], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: proc.poll() is not None or http_ok(f"http://127.0.0.1:{port}/_stcore/health"), 60,
                     "the streamlit server")
            assert proc.poll() is None, "streamlit exited early"
            assert listening(port) == {"127.0.0.1"}
            # DNS rebinding: a page whose own name points at 127.0.0.1 gets no WebSocket (server.allowedHosts)
            assert websocket_status(port, "rebound.example") == 403
            assert websocket_status(port, f"localhost:{port}") == 101
        finally:
            stop_process(proc)
            log.seek(0)
            print(log.read().decode(errors="replace")[-2000:])


def test_the_checkout_hides_deploy_and_the_developer_menu():
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    read = ("import streamlit.config as c; c.get_config_options(force_reparse=True); "
            "print(c.get_option('client.toolbarMode'))")
    out = subprocess.run([sys.executable, "-c", read], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "minimal"
