"""bench's peer flags (--peer, --peer-draft, --peer-modes, --peer-weights): what each is checked for, and the
check itself, before any model loads. --peer vllm's draft and temperature are checked where the bench starts
(specviz.peers.bench.check_peer); --peer llamacpp's here, its --peer-draft being a GGUF and not a draft SPEC."""

from __future__ import annotations

PEER_CHECKED = {
    "peer_draft": "draft SPEC (with --peer llamacpp: q4_1 or a .gguf file, check_llamacpp)",
    "peer_modes": "--peer llamacpp: regular, lookup, draft; lookup and draft at B = 1 (peers.llamacpp.check_llamacpp)",
    "peer_weights": "--peer llamacpp: bf16, f32, q4_1; q4_1 with --target default only (check_llamacpp)",
    "speculative_config": "vllm serve: one JSON object naming a method or model, not with --draft "
                          "(peers.server.parse_speculative_config)",
}
PEER_NO_CHECK = {
    "peer": "choices=; vllm's draft and temperature: peers.bench.check_peer, before any load; llamacpp's: here",
}


def check_peer_args(a, check_draft) -> None:
    """``check_draft``: the package's own draft SPEC check (it imports this module, so it hands it over)."""
    if getattr(a, "peer", None) == "llamacpp":
        from specviz.peers.llamacpp import check_llamacpp

        check_llamacpp(a, a.peer_modes, a.peer_weights, a.peer_draft)
    elif getattr(a, "peer_draft", None):
        check_draft(a.peer_draft, "--peer-draft")
