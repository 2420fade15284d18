"""One GET of an address somebody typed (the Server page's vLLM /metrics and /version), safe to make
on behalf of whoever can reach the app:

- no redirects: a 3xx comes back as it is, so a server cannot send specviz on to another address
  (e.g. an admin page on this machine);
- no proxies: the *_PROXY environment variables are not read; the request goes to the address given;
- never a link-local or cloud-metadata address (169.254.0.0/16, fe80::/10, 169.254.169.254,
  fd00:ec2::254, metadata.google.internal): checked on every address the name resolves to, before any
  connection, and the connection goes to an address that was checked (a name that resolves again
  differently cannot slip past);
- with ``allow`` (an exposed app, specviz.app.exposure), only those hosts (``host`` or ``host:port``);
- at most ``max_bytes`` read, within ``timeout`` seconds in all.

Errors are one line (SpecvizError) and carry nothing of what the server sent.
"""

from __future__ import annotations

import dataclasses
import http.client
import ipaddress
import re
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

from specviz.common import SpecvizError

METADATA_NAMES = frozenset({"metadata.google.internal", "metadata.goog", "metadata"})
METADATA_IPS = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "fd00:ec2::254", "100.100.100.200"))  # AWS/GCP/Azure/OpenStack, AWS IPv6, Alibaba
CHUNK = 1 << 16


class Refused(SpecvizError):
    """A request specviz will not make; nothing was sent."""


@dataclasses.dataclass(frozen=True)
class Response:
    status: int
    content_type: str  # the media type only, or "unrecognized" (see media_type)
    body: bytes  # empty unless the status is 2xx


def media_type(header: str | None) -> str:
    """The media type of a Content-Type header (``text/html``), or "unrecognized": safe to print."""
    mt = (header or "").split(";")[0].strip().lower()
    return mt if len(mt) <= 64 and re.fullmatch(r"[a-z0-9.+-]+/[a-z0-9.+-]+", mt) else "unrecognized"


def forbidden_ip(ip: str) -> bool:
    """A link-local or cloud-metadata address (an IPv4-mapped IPv6 one too)."""
    addr = ipaddress.ip_address(ip.split("%")[0])  # fe80::1%eth0: the zone is not part of the address
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_link_local or addr in METADATA_IPS


def host_allowed(host: str, port: int, allow) -> bool:
    """Whether ``allow`` (``host`` or ``host:port`` entries; ``[v6]:port`` or a bare v6 address) holds host:port."""
    host = host.lower().rstrip(".")
    for entry in allow:
        entry = entry.strip().lower()
        if entry.count(":") > 1 and not entry.startswith("["):  # a bare IPv6 address: any port
            h, p = entry, None
        else:
            parts = urllib.parse.urlsplit("//" + entry)
            try:
                h, p = parts.hostname, parts.port
            except ValueError:
                continue
        if h is not None and h.rstrip(".") == host and p in (None, port):
            return True
    return False


def _checked_connection(address, *args, **kwargs):
    """socket.create_connection (its arguments) to an address of ``host``, once every address the name
    resolves to passed forbidden_ip."""
    host, port = address
    if host.lower().rstrip(".") in METADATA_NAMES:
        raise Refused(f"{host} is a cloud metadata service: specviz does not fetch it")
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    ips = [info[4][0] for info in infos]
    if any(forbidden_ip(ip) for ip in ips):
        raise Refused(f"{host} is a link-local or cloud-metadata address: specviz does not fetch it")
    error = OSError(f"no address for {host}")
    for ip in dict.fromkeys(ips):
        try:
            return socket.create_connection((ip, port), *args, **kwargs)
        except OSError as e:
            error = e
    raise error


class _HTTPConnection(http.client.HTTPConnection):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._create_connection = _checked_connection


class _HTTPSConnection(http.client.HTTPSConnection):  # TLS still checks the certificate against the name typed
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._create_connection = _checked_connection


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_HTTPConnection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        return self.do_open(_HTTPSConnection, req, context=self._context)


def opener() -> urllib.request.OpenerDirector:
    """http(s) only; no redirect handler and no error processor, so every status comes back as it is;
    ProxyHandler({}) so that no proxy from the environment is used."""
    director = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler({}), _HTTPHandler(), _HTTPSHandler(), urllib.request.UnknownHandler()):
        director.add_handler(handler)
    return director


def get(url: str, timeout: float, max_bytes: int, allow=None) -> Response:
    """GET ``url`` (http or https) as the module docstring says. The body is read only for a 2xx
    status, at most ``max_bytes + 1`` bytes (more than ``max_bytes`` means the page was too long)."""
    parts = urllib.parse.urlsplit(url)
    try:
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise SpecvizError(f"not a valid port in {url!r}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise SpecvizError(f"not an http(s) address: {url!r}")
    if allow is not None and not host_allowed(host, port, allow):
        raise Refused(f"{host}:{port} is not in SPECVIZ_SERVER_ALLOW: this app listens beyond this machine, "
                      "so the Server page fetches only the hosts listed there")
    deadline = time.monotonic() + timeout
    try:
        with opener().open(urllib.request.Request(url, headers={"Accept": "text/plain"}), timeout=timeout) as r:
            status, ctype, chunks, n = r.status, media_type(r.headers.get("Content-Type")), [], 0
            while 200 <= status < 300 and n <= max_bytes:
                if time.monotonic() > deadline:  # a server trickling bytes resets the socket timeout at each one
                    raise TimeoutError
                chunk = r.read1(min(CHUNK, max_bytes + 1 - n))
                if not chunk:
                    break
                chunks.append(chunk)
                n += len(chunk)
    except (socket.timeout, TimeoutError):
        raise SpecvizError(f"{url} did not answer within {timeout:g} s") from None
    except urllib.error.URLError as e:
        if isinstance(e.reason, (socket.timeout, TimeoutError)):
            raise SpecvizError(f"{url} did not answer within {timeout:g} s") from None
        reason = e.reason.strerror if isinstance(e.reason, OSError) and e.reason.strerror else e.reason
        if isinstance(e.reason, ssl.SSLError):  # its text may quote the server's certificate
            reason = f"TLS failed ({type(e.reason).__name__})"
        raise SpecvizError(f"cannot reach {url}: {reason} (is the server running at that address?)") from None
    except http.client.HTTPException as e:  # its message may quote what the server sent: name the kind only
        raise SpecvizError(f"{url} did not answer in HTTP ({type(e).__name__})") from None
    except ssl.SSLError as e:
        raise SpecvizError(f"cannot read {url}: TLS failed ({type(e).__name__})") from None
    except (OSError, ValueError) as e:  # a reset connection, a URL with control characters: local text
        raise SpecvizError(f"cannot read {url}: {e}") from None
    return Response(status=status, content_type=ctype, body=b"".join(chunks))
