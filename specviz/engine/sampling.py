"""Logits processing and the speculative acceptance rule (torch reference).

Vocabulary (SPECDEC.md): for each row the draft proposes ``n <= k`` tokens x_1..x_n.
Position i is **accepted** with probability min(1, p_i(x_i) / q_i(x_i)) (Leviathan et al. 2022,
arXiv 2211.17192; Chen et al. 2023, arXiv 2302.01318). At the first rejection a **recovered**
token is drawn from norm(max(0, p_i - q_i)); if all n are accepted a **bonus** token is drawn
from p_{n+1}. The **output** (emitted) tokens of a step are accepted + recovered/bonus, >= 1.

p and q are the *processed* distributions (same temperature and top-p for both); a
deterministic proposer (n-gram) has q = one-hot(x), passed as ``draft_probs=None``.
Greedy (temperature 0) is the special case: accept iff x_i == argmax p_i.

All randomness comes in as uniforms so the kernels in kernels/ can be checked against this
reference draw for draw: ``uniforms[:, i]`` decides position i, ``uniforms[:, n]`` samples the
final (recovered or bonus) token by inverse CDF.
"""

from __future__ import annotations

import dataclasses

import torch

from specviz.models import bf16linear, packed


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


ARGMAX_CHUNK = 256  # vocabulary slice per partial maximum in argmax_last (~sqrt(V): both passes small)


def argmax_last(x: torch.Tensor) -> torch.Tensor:
    """``x.argmax(-1)``, the same indices (the first maximum, NaN counted as the maximum), faster on the CPU.

    torch's CPU argmax over a 49,152-token vocabulary runs ~5x slower than its max (amax); at B = 64
    and k = 2 it was most of the engine's host time per step (bench/host_overhead.py). Here: the
    maximum of every slice of ARGMAX_CHUNK tokens (one vectorised pass over x), the first slice
    holding the row's maximum, then argmax within that slice only. bf16 logits where our bf16 kernel
    runs: one pass per row in C++ (bf16linear.argmax_rows, ~5x faster than the slices above at B = 1). Other
    devices: torch's argmax.
    """
    V = x.shape[-1]
    if x.device.type != "cpu" or V < 4 * ARGMAX_CHUNK or x.numel() == 0:
        return x.argmax(dim=-1)
    flat = x.reshape(-1, V)  # [N, V] (a view when x is contiguous)
    if x.dtype == torch.bfloat16 and not packed.cpu_packs_bf16() and bf16linear.available():
        return bf16linear.argmax_rows(flat).view(x.shape[:-1])  # one pass per row (bf16_argmax.cpp)
    M = V // ARGMAX_CHUNK * ARGMAX_CHUNK
    part = flat[:, :M].unflatten(-1, (M // ARGMAX_CHUNK, ARGMAX_CHUNK)).amax(dim=-1)  # [N, M / chunk]
    if M < V:  # the vocabulary's tail past the last whole slice is one more slice
        part = torch.cat([part, flat[:, M:].amax(dim=-1, keepdim=True)], dim=1)
    start = part.argmax(dim=-1) * ARGMAX_CHUNK  # [N] first slice holding the maximum
    idx = (start.unsqueeze(1) + torch.arange(ARGMAX_CHUNK, device=x.device)).clamp(max=V - 1)  # [N, chunk]
    return (start + flat.gather(1, idx).argmax(dim=-1)).view(x.shape[:-1])


def process_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """(..., V) logits -> (..., V) float32 probabilities after temperature and top-p.

    Exactly the temperature and top-p given; no hidden top-k. Top-p keeps the smallest set of
    most likely tokens whose mass reaches top_p (at least one token).
    """
    assert not params.greedy, "greedy decoding uses argmax, not probabilities"
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_p.cumsum(dim=-1) - sorted_p  # mass of strictly more likely tokens
        sorted_p = sorted_p.masked_fill(mass_before >= params.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample_inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Draw one token per row of (N, V) probs (need not be normalised) with uniforms u (N,).

    Returns the smallest j with cdf[j] > u * total, so zero-probability tokens are never drawn.
    """
    cdf = probs.float().cumsum(dim=-1)  # (N, V)
    target = (u.float() * cdf[:, -1]).unsqueeze(-1)  # (N, 1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)  # (N,)
    # u * total can round up to total: fall back to the last token with positive mass.
    last_nz = (probs > 0).int().cumsum(-1).argmax(-1)
    return torch.minimum(idx, last_nz)


@dataclasses.dataclass
class Verdict:
    """Result of the acceptance rule for a batch of rows."""

    num_accepted: torch.Tensor  # [B] accepted draft tokens per row, 0..n_b
    emitted: torch.Tensor  # [B, k+1] output tokens, padded with -1 after num_accepted+1


HOST_SLOTS = 256  # greedy on the CPU up to B x (k + 1) verified slots: the verdict in Python (below)


def _greedy_on_host(best: torch.Tensor, draft_tokens: torch.Tensor, num_drafted: torch.Tensor) -> Verdict:
    """``accept_reference``'s greedy verdict from the target's argmax ``best`` [B, k+1], worked out in Python
    lists: on the CPU a dozen small tensor ops cost ~0.2 ms of a decode step at B = 1, the lists a few
    microseconds (the engine reads the verdict to the host next anyway)."""
    B, k1 = best.shape
    rows = torch.cat([num_drafted.view(B, 1), best, draft_tokens], dim=1).tolist()  # [B, 1 + k+1 + k]: one read
    accepted, emitted = [], []
    for r in rows:
        n, b, x = r[0], r[1:1 + k1], r[1 + k1:]
        a = 0
        while a < n and x[a] == b[a]:
            a += 1
        accepted.append(a)
        emitted.append(x[:a] + [b[a]] + [-1] * (k1 - 1 - a))
    return Verdict(num_accepted=torch.tensor(accepted, dtype=torch.long),
                   emitted=torch.tensor(emitted, dtype=torch.long).view(B, k1))  # [B], [B, k+1]


def accept_reference(
    target_logits: torch.Tensor,  # [B, k+1, V] target logits at each verified position
    draft_tokens: torch.Tensor,  # [B, k] proposed ids (values past num_drafted are ignored)
    num_drafted: torch.Tensor,  # [B] n_b <= k proposals per row
    uniforms: torch.Tensor,  # [B, k+1] in [0, 1)
    params: SamplingParams,
    draft_probs: torch.Tensor | None = None,  # [B, k, V] processed q; None = one-hot proposals
) -> Verdict:
    B, k1, V = target_logits.shape
    k = k1 - 1
    device = target_logits.device
    pos = torch.arange(k, device=device)  # [k]
    in_draft = pos.unsqueeze(0) < num_drafted.unsqueeze(1)  # [B, k]
    x = draft_tokens.clamp(min=0)  # [B, k]

    if params.greedy:
        best = argmax_last(target_logits)  # [B, k+1]
        if device.type == "cpu" and B * k1 <= HOST_SLOTS:
            return _greedy_on_host(best, draft_tokens, num_drafted)
        ok = (x == best[:, :k]) & in_draft  # [B, k]
    else:
        p = process_logits(target_logits, params)  # [B, k+1, V]
        p_x = p[:, :k].gather(-1, x.unsqueeze(-1)).squeeze(-1)  # [B, k]
        q_x = torch.ones_like(p_x) if draft_probs is None else draft_probs.gather(-1, x.unsqueeze(-1)).squeeze(-1).float()
        # accept iff u < p/q, written as u*q < p to avoid dividing by q (q_x > 0: x was drawn from q)
        ok = (uniforms[:, :k] * q_x < p_x) & in_draft

    # accepted prefix length: index of the first failure, or n if none failed
    num_accepted = (ok.int().cumprod(dim=-1)).sum(dim=-1)  # [B]
    rows = torch.arange(B, device=device)

    if params.greedy:
        final = best[rows, num_accepted]  # argmax p at the first rejected / bonus position
    else:
        p_final = p[rows, num_accepted]  # [B, V]
        rejected = num_accepted < num_drafted  # [B]
        if rejected.any():
            p_final = final_distribution(p_final, draft_q_at(x, draft_probs, num_accepted, p_final), rejected)
        final = sample_inverse_cdf(p_final, uniforms[rows, num_drafted])

    emitted = torch.full((B, k + 1), -1, dtype=torch.long, device=device)
    keep = pos.unsqueeze(0) < num_accepted.unsqueeze(1)  # [B, k]
    emitted[:, :k] = torch.where(keep, x, emitted[:, :k])
    emitted[rows, num_accepted] = final
    return Verdict(num_accepted=num_accepted, emitted=emitted)


def accept_synthetic(
    alpha: float,  # the probability that each drafted position is accepted, in [0, 1]
    target_logits: torch.Tensor,  # [B, k+1, V]
    draft_tokens: torch.Tensor,  # [B, k]
    num_drafted: torch.Tensor,  # [B]
    uniforms: torch.Tensor,  # [B, k+1] in [0, 1)
    params: SamplingParams,
    draft_probs: torch.Tensor | None = None,  # unused: the draws decide, not p and q
) -> Verdict:
    """Synthetic acceptance, for teaching and benchmarks (vLLM's ``synthetic`` rejection sampling):
    position i is accepted iff ``uniforms[:, i] < alpha``, whatever p and q say, so the accepted
    length follows the analytic model's i.i.d. alpha exactly. The final token is the target's own
    at the first rejected (or bonus) position: argmax p when greedy, else drawn from p with
    ``uniforms[:, n]``. The output is NOT the target's text (an accepted draft token may be one
    the target would never emit): never an exactness or distribution check."""
    B, k1, V = target_logits.shape
    k = k1 - 1
    device = target_logits.device
    pos = torch.arange(k, device=device)  # [k]
    x = draft_tokens.clamp(min=0)  # [B, k]
    ok = (uniforms[:, :k] < alpha) & (pos.unsqueeze(0) < num_drafted.unsqueeze(1))  # [B, k]; u <= 1 - 2^-24: alpha = 1 accepts all
    num_accepted = ok.int().cumprod(dim=-1).sum(dim=-1)  # [B]
    rows = torch.arange(B, device=device)
    logits_final = target_logits[rows, num_accepted]  # [B, V]
    if params.greedy:
        final = argmax_last(logits_final)
    else:
        final = sample_inverse_cdf(process_logits(logits_final, params), uniforms[rows, num_drafted])
    emitted = torch.full((B, k + 1), -1, dtype=torch.long, device=device)
    emitted[:, :k] = torch.where(pos.unsqueeze(0) < num_accepted.unsqueeze(1), x, emitted[:, :k])
    emitted[rows, num_accepted] = final
    return Verdict(num_accepted=num_accepted, emitted=emitted)


def draft_q_at(x: torch.Tensor, draft_probs: torch.Tensor | None, pos: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """q at each row's position ``pos`` [B] as [B, V]: one-hot of the proposal when draft_probs is None."""
    rows = torch.arange(x.shape[0], device=x.device)
    j = pos.clamp(max=max(x.shape[1] - 1, 0))
    if draft_probs is None:
        return torch.zeros_like(like).scatter_(-1, x[rows, j].unsqueeze(-1), 1.0)
    return draft_probs[rows, j].float()


def final_distribution(p: torch.Tensor, q: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """What the final token is drawn from: norm(max(0, p - q)) where the row rejected, else p.

    p, q: [B, V] at the row's final position; rejected: [B]. The residual is left unnormalised
    (inverse-CDF sampling scales by its total).
    """
    residual = (p - q).clamp(min=0.0)
    # p == q everywhere leaves no residual mass; rejection then has probability 0 in exact
    # arithmetic and only rounding got us here: fall back to p.
    empty = residual.sum(-1, keepdim=True) <= 0
    return torch.where(rejected.unsqueeze(-1) & ~empty, residual, p)


def sample_tokens(logits: torch.Tensor, params: SamplingParams, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Draw one token per row from (B, V) logits. Returns (tokens [B], probs [B, V] or None if greedy)."""
    if params.greedy:
        return argmax_last(logits), None
    probs = process_logits(logits, params)
    return sample_inverse_cdf(probs, u), probs
