"""What the engine reports, as typed records: one row's part of a step, a step, and a token tree's
nodes. The engine yields a :class:`Step` per step; the trace (specviz.analysis.trace.TraceBuilder)
stores each as its JSON form, :meth:`Step.to_json`, which is the trace format's step object
(docs/ARCHITECTURE.md), and :meth:`Step.from_json` reads one back. Plain data: no torch.

Vocabulary (the same words on the pages): a row drafts ``drafted`` tokens, the target accepts
``accepted`` of them, and the step *emits* the accepted tokens plus one recovered or bonus token,
cut at max_new_tokens and at the first EOS (``emitted``: the output tokens the step added).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class TreeNodes:
    """A row's token tree in one step, node by node (node i's fields at position i)."""

    token: tuple[int, ...]  # [N] the drafted token
    parent: tuple[int, ...]  # [N] row-local index of the parent node; -1 = the row's last token
    depth: tuple[int, ...]  # [N] 1 for the root's children
    path: tuple[int, ...]  # the accepted nodes, root to leaf
    prob: tuple[float, ...] | None = None  # [N] the draft's probability of the node given its parent
    rank: tuple[int, ...] | None = None  # [N] sibling rank, 0 = the draft's top guess
    origin: tuple[str, ...] | None = None  # [N] the draft that proposed the node: "model", "suffix", "ngram"
    # ("both": a merged tree's model and suffix drafts both did); None in traces from before it was kept

    def to_json(self) -> dict:
        d = {"token": list(self.token), "parent": list(self.parent), "depth": list(self.depth)}
        d.update({name: list(v) for name in ("prob", "rank", "origin") if (v := getattr(self, name)) is not None})
        d["path"] = list(self.path)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "TreeNodes":
        opt = {name: tuple(d[name]) for name in ("prob", "rank", "origin") if d.get(name) is not None}
        return cls(tuple(d["token"]), tuple(d["parent"]), tuple(d["depth"]), tuple(d["path"]), **opt)


@dataclasses.dataclass(frozen=True, slots=True)
class RowStep:
    """One row in one step (a row-step)."""

    index: int  # the request's index in the run
    active: bool  # False: the row was idle this step (finished, or not yet joined)
    drafted: int  # tokens (tree: nodes) the draft proposed
    accepted: int  # of those, accepted by the target
    emitted: tuple[int, ...]  # output tokens the step added (accepted + recovered/bonus, cut at EOS/max)
    draft_tokens: tuple[int, ...]  # the proposals, in order (tree: node order)
    lane: int | None = None  # the lane (one of the batch's concurrent rows) the request held (None when idle)
    tree: TreeNodes | None = None  # the row's token tree, in a tree step that drafted

    @classmethod
    def idle(cls, index: int) -> "RowStep":
        return cls(index, False, 0, 0, (), ())

    def to_json(self) -> dict:
        d = {"index": self.index, "active": self.active, "drafted": self.drafted, "accepted": self.accepted,
             "emitted": list(self.emitted), "draft_tokens": list(self.draft_tokens)}
        if self.lane is not None:
            d["lane"] = self.lane
        if self.tree is not None:
            d["tree"] = self.tree.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict) -> "RowStep":
        tree = d.get("tree")
        return cls(d["index"], d["active"], d["drafted"], d["accepted"], tuple(d["emitted"]),
                   tuple(d.get("draft_tokens", ())), d.get("lane"), TreeNodes.from_json(tree) if tree else None)


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """One step of the whole batch: what each row did, and where the time went (seconds)."""

    step: int  # 0, 1, ...
    k: int  # the draft length the policy chose (0: a regular step)
    verify_width: int  # slots per row in the verify forward (k + 1 unless no row proposed k)
    batch_size: int  # rows that stepped
    t_start: float  # since the run started (the engine's clock)
    t_prefill: float  # prefill of requests joining at this step (0 when none joined)
    t_draft: float
    t_verify: float
    t_accept: float
    t_bookkeeping: float
    cache_slots: int  # the target cache's width after the step
    cache_holes: int  # of those slots, holes (rejected or padding)
    kv_bytes: int
    compacted: bool  # the cache was compacted this step
    rows: tuple[RowStep, ...]  # every row of a static batch; with a request queue, the rows that stepped
    joined: tuple[int, ...] = ()  # request indices whose rows joined at the start of this step
    left: tuple[int, ...] = ()  # requests that finished in this step
    queue_length: int = 0  # arrived requests waiting for a lane when the step began
    tree_width: int | None = None  # tree steps: the (W, N) drafted with (k = 0: 1 and 0)
    tree_nodes: int | None = None

    def to_json(self) -> dict:
        d = {"step": self.step, "k": self.k, "verify_width": self.verify_width}
        if self.tree_width is not None:
            d.update(tree_width=self.tree_width, tree_nodes=self.tree_nodes)
        d.update(batch_size=self.batch_size, t_start=self.t_start, t_prefill=self.t_prefill, t_draft=self.t_draft,
                 t_verify=self.t_verify, t_accept=self.t_accept, t_bookkeeping=self.t_bookkeeping,
                 cache_slots=self.cache_slots, cache_holes=self.cache_holes, kv_bytes=self.kv_bytes,
                 compacted=self.compacted, rows=[r.to_json() for r in self.rows], joined=list(self.joined),
                 left=list(self.left), queue_length=self.queue_length)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Step":
        """A step of a trace file as load_json returns it (fields an older version lacks take their defaults)."""
        return cls(d["step"], d["k"], d.get("verify_width", d["k"] + 1), d.get("batch_size", 0), d["t_start"],
                   d.get("t_prefill", 0.0), d["t_draft"], d["t_verify"], d["t_accept"], d.get("t_bookkeeping", 0.0),
                   d.get("cache_slots", 0), d.get("cache_holes", 0), d.get("kv_bytes", 0), bool(d.get("compacted")),
                   tuple(RowStep.from_json(r) for r in d["rows"]), tuple(d.get("joined", ())), tuple(d.get("left", ())),
                   d.get("queue_length", 0), d.get("tree_width"), d.get("tree_nodes"))
