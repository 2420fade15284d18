"""Who can reach the app, and what it then serves to them.

Streamlit listens on ``server.address`` (.streamlit/config.toml: 127.0.0.1). Bound to anything else
(unset = every interface, 0.0.0.0, ::, a LAN address, a host name) the app is *exposed*: whoever
reaches the port drives the sidebar and the Server page, so

- model SPECs load only from the allowlist ``SPECVIZ_MODELS`` (comma-separated SPECs; default: the
  packaged pair and the model-free drafts: ``default``, ``ngram`` (any ``ngram:N``), ``suffix``, ``default+suffix``,
  ``none``). This is
  also what keeps hub downloads off: a hub id loads, and may download, only when whoever started the
  app listed it; nothing a visitor types reaches the hub or the local disk;
- the Server page fetches only the hosts in ``SPECVIZ_SERVER_ALLOW`` (comma-separated ``host`` or
  ``host:port``; unset = none), see specviz.peers.fetch.

On a loopback bind nothing is limited: whoever reaches the port is already on this machine.
Everything here is a pure function of its arguments except bind_address(), which reads Streamlit's option.
"""

from __future__ import annotations

import ipaddress
import os
import re

from specviz.common import SpecvizError

DEFAULT_MODELS = ("default", "ngram", "suffix", "default+suffix", "none")
_NGRAM = re.compile(r"ngram(:\d+)?")  # n-gram drafts load nothing, whatever their N


def is_exposed(address: str | None) -> bool:
    """True unless ``address`` (Streamlit's server.address) is a loopback address or ``localhost``.
    A host name other than localhost counts as exposed: it may resolve to anything."""
    a = (address or "").strip().removeprefix("[").removesuffix("]").lower()
    if a in ("localhost", "localhost."):
        return False
    try:
        return not ipaddress.ip_address(a).is_loopback  # "" (unset: every interface) fails to parse: exposed
    except ValueError:
        return True


def bind_address() -> str:
    """The address this Streamlit server listens on ("" = every interface)."""
    from streamlit import config

    return str(config.get_option("server.address") or "")


def exposed_now() -> bool:
    return is_exposed(bind_address())


def _listed(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def model_allowlist(env) -> frozenset[str]:
    """The SPECs an exposed app loads: SPECVIZ_MODELS, else DEFAULT_MODELS."""
    return frozenset(_listed(env.get("SPECVIZ_MODELS")) or DEFAULT_MODELS)


def check_model_allowed(spec: str | None, exposed: bool, env=None) -> None:
    """Raises SpecvizError (one line) when an exposed app must not load ``spec``; else returns."""
    if not exposed or not (spec or "").strip():  # "" loads nothing: the sidebar asks for a SPEC
        return  # otherwise the SPEC exactly as the loader will get it: "default " is not "default"
    allowed = model_allowlist(os.environ if env is None else env)
    if spec in allowed or ("ngram" in allowed and _NGRAM.fullmatch(spec)):
        return
    raise SpecvizError(f"{spec!r} is not in SPECVIZ_MODELS ({', '.join(sorted(allowed))}): this app listens "
                       "beyond this machine, so it loads only the models listed there")


def server_fetch_allow(exposed: bool, env=None) -> frozenset[str] | None:
    """The hosts (``host`` or ``host:port``, lower case) the Server page may fetch; None = any host."""
    if not exposed:
        return None
    return frozenset(h.lower() for h in _listed((os.environ if env is None else env).get("SPECVIZ_SERVER_ALLOW")))
