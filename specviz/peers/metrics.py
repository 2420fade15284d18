"""A vLLM server's Prometheus ``/metrics``: read one scrape, and derive what speculative decoding did
between two scrapes (acceptance rate, mean acceptance length, acceptance per draft position, alpha,
throughput). Nothing heavy: stdlib + prometheus_client's text parser, no torch.

vLLM (v1 engine) counts one *draft* per request per step that had draft tokens, and exports:

  vllm:spec_decode_num_drafts                    drafts proposed
  vllm:spec_decode_num_draft_tokens              draft tokens proposed (<= k per draft)
  vllm:spec_decode_num_accepted_tokens           draft tokens accepted
  vllm:spec_decode_num_accepted_tokens_per_pos   accepted at draft position j (label position="j")
  vllm:generation_tokens, vllm:prompt_tokens     output / prompt tokens processed
  vllm:num_requests_running, _waiting            gauges: the batch now and the queue behind it

Counters carry a ``_total`` suffix in the text (prometheus_client adds it, and a ``_created``
sample we ignore); samples carry ``model_name`` and ``engine`` labels (one per data-parallel
engine): we sum over engines and keep the model names. A server started without a speculative
config exports no spec_decode counters at all; older vLLMs lack some (per-position first).

Derived (as vLLM's own logger does; SPECDEC.md vocabulary: accepted / recovered / bonus / output), each by
its one definition in specviz.analysis.acceptance:
  acceptance rate         = accepted / draft tokens
  mean acceptance length  = 1 + accepted / drafts    (output tokens per draft: accepted + the
                                                      recovered or bonus token)
  acceptance at pos j     = accepted_at_j / drafts   (P(A >= j + 1), not conditional on reaching j)
  alpha (per position)    = successes / trials, trials = drafts + accepted_at_0..k-2 (a draft is
                            tried at position j >= 1 only if it accepted j tokens before it), the
                            i.i.d. per-position acceptance the analytic model assumes
"""

from __future__ import annotations

import dataclasses
import http
import json
import time
import urllib.parse

from prometheus_client.parser import text_string_to_metric_families

from specviz.analysis import acceptance
from specviz.common import SpecvizError
from specviz.peers import fetch

PREFIX = "vllm:"
SPEC_COUNTERS = {  # our name -> vLLM's metric name (without _total)
    "drafts": "vllm:spec_decode_num_drafts",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "accepted": "vllm:spec_decode_num_accepted_tokens",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
COUNTERS = {
    "generation_tokens": "vllm:generation_tokens",
    "prompt_tokens": "vllm:prompt_tokens",
    "requests_finished": "vllm:request_success",
}
GAUGES = {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting"}
MAX_BYTES = 16 << 20  # a /metrics page is ~100 kB; more is not a metrics page

NO_SPEC = ("this vLLM server reports no speculative-decoding counters (vllm:spec_decode_*): it was started "
           "without a speculative config; throughput and requests are still shown")


class NotPrometheus(SpecvizError):
    """Text the Prometheus parser rejects (the message quotes none of it: it came from another server)."""


@dataclasses.dataclass(frozen=True)
class Scrape:
    """One read of /metrics: counters summed over engines (and models unless one was chosen)."""

    t: float  # seconds (time.monotonic) when it was read
    counters: dict  # our name -> value, for SPEC_COUNTERS and COUNTERS that the server exports
    per_position: tuple | None  # [k] accepted at draft position 0..k-1; None when not exported
    gauges: dict  # our name -> value, for GAUGES that the server exports
    models: tuple  # the model_name labels seen on vllm: samples

    @property
    def has_spec(self) -> bool:
        return any(name in self.counters for name in SPEC_COUNTERS) or self.per_position is not None


def _base_name(sample_name: str) -> str | None:
    """A sample's metric name without the counter suffix; None for the ``_created`` timestamps."""
    if sample_name.endswith("_created"):
        return None
    return sample_name.removesuffix("_total")


def parse(text: str, t: float = 0.0, model: str | None = None) -> Scrape:
    """A Scrape from Prometheus text. Raises SpecvizError for text that is not Prometheus
    exposition format, or has no vllm: metric (not a vLLM server). ``model`` keeps only the
    samples of that model_name."""
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, IndexError, TypeError):  # the parser's errors for a malformed line (they quote it)
        raise NotPrometheus("not Prometheus metrics text") from None
    wanted = {v: k for k, v in {**SPEC_COUNTERS, **COUNTERS}.items()}
    gauges_wanted = {v: k for k, v in GAUGES.items()}
    counters, gauges, per_pos, models, any_vllm = {}, {}, {}, set(), False
    for fam in families:
        for s in fam.samples:
            name = _base_name(s.name)
            if name is None or not name.startswith(PREFIX):
                continue
            any_vllm = True
            if "model_name" in s.labels:
                models.add(s.labels["model_name"])
                if model is not None and s.labels["model_name"] != model:
                    continue
            if name in wanted:
                counters[wanted[name]] = counters.get(wanted[name], 0.0) + float(s.value)
            elif name in gauges_wanted:
                gauges[gauges_wanted[name]] = gauges.get(gauges_wanted[name], 0.0) + float(s.value)
            elif name == PER_POSITION:
                try:
                    j = int(s.labels["position"])
                except (KeyError, ValueError):
                    raise SpecvizError(f"{PER_POSITION} sample without an integer position label") from None
                per_pos[j] = per_pos.get(j, 0.0) + float(s.value)
    if not any_vllm:
        raise SpecvizError("no vllm: metrics in this Prometheus text: not a vLLM server")
    if per_pos and sorted(per_pos) != list(range(len(per_pos))):
        raise SpecvizError(f"{PER_POSITION} positions are not 0..k-1: {sorted(per_pos)}")
    return Scrape(t=t, counters=counters, per_position=tuple(per_pos[j] for j in range(len(per_pos))) or None,
                  gauges=gauges, models=tuple(sorted(models)))


# ---- two scrapes -> what happened between them --------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Delta:
    """What the server did between two scrapes. None = the server does not export it."""

    seconds: float  # between the two scrapes
    drafts: float | None
    draft_tokens: float | None
    accepted: float | None
    accepted_per_position: tuple | None  # [k] accepted at draft position j
    generation_tokens: float | None
    running: float | None  # gauges at the later scrape
    waiting: float | None
    has_spec: bool  # the server exports spec-decoding counters at all

    @property
    def k(self) -> int | None:
        """Draft length: vLLM's num_speculative_tokens (the per-position counters' length), else the
        mean tokens per draft rounded."""
        if self.accepted_per_position is not None:
            return len(self.accepted_per_position)
        if self.drafts and self.draft_tokens is not None:
            return max(1, round(self.draft_tokens / self.drafts))
        return None

    @property
    def acceptance_rate(self) -> float | None:
        """acceptance.acceptance_rate: accepted / draft tokens (biased low as an alpha: positions after a
        rejection count too)."""
        return acceptance.acceptance_rate(self.accepted, self.draft_tokens) if self.accepted is not None else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """acceptance.mean_acceptance_length: output tokens per draft, 1 + accepted / drafts (vLLM's definition)."""
        return acceptance.mean_acceptance_length(self.accepted, self.drafts) if self.accepted is not None else None

    @property
    def acceptance_per_position(self) -> list | None:
        """[k] acceptance.acceptance_per_position: accepted at position j / drafts = P(A >= j + 1)."""
        if self.accepted_per_position is None or not self.drafts:
            return None
        return acceptance.acceptance_per_position(self.accepted_per_position, self.drafts)

    @property
    def alpha(self) -> float | None:
        """Alpha (per-position acceptance, acceptance.alpha), the analytic model's i.i.d. alpha.

        With per-position counters, accepted / positions tried (acceptance.positions_tried_from_counts:
        drafts + accepted at positions 0..k-2, exact when every draft has k tokens; with shorter drafts
        their full accepts count as rejections, so this is a lower bound). Without them,
        acceptance.alpha_from_accepted: the alpha whose E[accepted] matches accepted / drafts at this k."""
        if not self.drafts or self.accepted is None:
            return None
        if self.accepted_per_position is not None:
            return acceptance.alpha(self.accepted,
                                    acceptance.positions_tried_from_counts(self.drafts, self.accepted_per_position))
        return acceptance.alpha_from_accepted(acceptance.mean_accepted(self.accepted, self.drafts), self.k)

    @property
    def throughput(self) -> float | None:
        """Output (generation) tokens per second between the two scrapes."""
        if self.generation_tokens is None or self.seconds <= 0:
            return None
        return self.generation_tokens / self.seconds

    def notes(self) -> list[str]:
        """What this server does not report, one sentence each (empty when everything is there)."""
        if not self.has_spec:
            return [NO_SPEC]
        out = []
        if self.accepted_per_position is None:
            out.append(f"this vLLM does not export {PER_POSITION} (an older version): acceptance per position "
                       "is not shown and alpha is inferred from the mean accepted count")
        if self.drafts is None:
            out.append("this vLLM does not export vllm:spec_decode_num_drafts (an older version): mean acceptance "
                       "length and alpha are not available, only the acceptance rate")
        k = self.k
        if self.accepted_per_position is not None and self.drafts and self.draft_tokens is not None \
                and self.draft_tokens < 0.99 * k * self.drafts:
            out.append(f"drafts had {self.draft_tokens / self.drafts:.2f} tokens on average, fewer than k = {k} "
                       "(n-gram drafts stop early): alpha is a lower bound")
        if self.generation_tokens is None:
            out.append("this vLLM does not export vllm:generation_tokens: throughput is not shown")
        return out


def counters_went_down(before: Scrape, after: Scrape) -> bool:
    """True when a counter fell: the server restarted between the scrapes (or another one answers)."""
    pairs = [(before.counters[n], after.counters[n]) for n in before.counters if n in after.counters]
    if before.per_position is not None and after.per_position is not None:
        pairs += list(zip(before.per_position, after.per_position))
        if len(after.per_position) != len(before.per_position):
            return True
    return any(b > a for b, a in pairs)


def delta(before: Scrape, after: Scrape) -> Delta:
    """The counters' differences from ``before`` to ``after`` (the later one's gauges)."""
    if counters_went_down(before, after):
        raise SpecvizError("the server's counters went down between two scrapes: it restarted")

    def diff(name):
        if name not in after.counters:
            return None
        return after.counters[name] - before.counters.get(name, 0.0)

    per_pos = None
    if after.per_position is not None:
        prev = before.per_position or (0.0,) * len(after.per_position)
        per_pos = tuple(a - b for a, b in zip(after.per_position, prev))
    return Delta(seconds=after.t - before.t, drafts=diff("drafts"), draft_tokens=diff("draft_tokens"),
                 accepted=diff("accepted"), accepted_per_position=per_pos,
                 generation_tokens=diff("generation_tokens"), running=after.gauges.get("running"),
                 waiting=after.gauges.get("waiting"), has_spec=after.has_spec)


# ---- the transport: one GET of /metrics -------------------------------------------------------------

def metrics_url(url: str) -> str:
    """The /metrics address for what a user typed: ``host:port``, ``http://host:port[/]`` or the full
    ``.../metrics`` address. Raises SpecvizError for something that is not an http(s) address."""
    url = (url or "").strip()
    if not url:
        raise SpecvizError("enter the server's address, e.g. http://127.0.0.1:8000")
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecvizError(f"not an http(s) address: {url!r} (e.g. http://127.0.0.1:8000)")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise SpecvizError(f"not a valid port in {url!r}") from None
    path = parts.path.rstrip("/")
    if not path.endswith("/metrics"):
        path += "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _get(url: str, timeout: float, allow=None) -> tuple[str, int, str]:
    """(body, status, media type) of a GET through specviz.peers.fetch (no redirects, no proxies, no
    link-local or metadata address, ``allow``'s hosts only when given), or SpecvizError in one line."""
    r = fetch.get(url, timeout, MAX_BYTES, allow)
    if 300 <= r.status < 400:
        raise SpecvizError(f"{url}: the server answered {r.status} (a redirect to another address), "
                           "which specviz does not follow")
    if not 200 <= r.status < 300:
        try:
            phrase = f" ({http.HTTPStatus(r.status).phrase})"  # ours: the server's own reason text is not shown
        except ValueError:
            phrase = ""
        raise SpecvizError(f"{url} answered HTTP {r.status}{phrase}: not a vLLM server's metrics page")
    if len(r.body) > MAX_BYTES:
        raise SpecvizError(f"{url} sent over {MAX_BYTES >> 20} MB: not a metrics page")
    try:
        return r.body.decode("utf-8"), r.status, r.content_type
    except UnicodeDecodeError:
        raise SpecvizError(f"{url} sent bytes that are not text: not a metrics page") from None


def scrape(url: str, timeout: float = 2.0, model: str | None = None, allow=None) -> Scrape:
    """Read and parse a vLLM server's /metrics (``url`` as :func:`metrics_url` takes it; ``allow``: the
    only hosts to fetch, None = any, as specviz.peers.fetch.get takes it)."""
    murl = metrics_url(url)
    text, status, ctype = _get(murl, timeout, allow)
    t = time.monotonic()
    try:
        return parse(text, t=t, model=model)
    except NotPrometheus:
        raise SpecvizError(f"{murl}: not Prometheus text (HTTP {status}, content type {ctype})") from None
    except SpecvizError as e:
        raise SpecvizError(f"{murl}: {e}") from None


def server_version(url: str, timeout: float = 2.0, allow=None) -> str | None:
    """vLLM's version from its /version endpoint (at most 64 characters), or None when it has none
    (best effort). It is the server's text: escape it before it reaches Markdown."""
    base = metrics_url(url).removesuffix("/metrics")
    try:
        text, _, _ = _get(base + "/version", timeout, allow)
        v = json.loads(text).get("version")
    except (SpecvizError, ValueError, AttributeError):
        return None
    return str(v)[:64] if v else None
