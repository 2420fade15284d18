"""The batched speculative decoding loop over ragged rows: draft -> verify -> accept -> step.

One step, for every active row b at once (``_phases``, one body for chains and token trees: a chain
is the width-1 tree; specviz.engine.step.StepParts supplies the four parts):
  draft   the proposer proposes n_b <= k tokens (k from the draft-length policy), a line or a tree
  verify  ONE batched target forward over every row's [last token, proposals]
  accept  the acceptance rule (specviz.engine.sampling, engine.tree) -> a_b accepted + 1
          recovered/bonus token, read to the host once
  step    rejected slots become holes in both caches, the proposer commits, outputs grow by
          a_b + 1, finished rows (EOS, max tokens) leave the batch
Regular decoding is the same loop with k = 0, so every comparison is like for like.

Requests and lanes: the decoder serves ``len(prompts)`` requests through ``lanes`` concurrent
rows (default: one row per request, a static batch). A lane is one of the batch's B rows; a request
holds a lane from the step it joins until it finishes, then the lane goes to the next queued request.
With more requests than lanes, a queued request that has arrived (``arrivals``, seconds after the run starts; default all at 0) joins at
the start of the next step after a row leaves: its prompt is prefilled in a forward of its own
(target and draft) and its cache rows are appended to the running ragged caches
(RaggedCache.extend); it then steps with the others. ``refill=False`` runs the requests as
consecutive static batches instead (the next batch joins when the last row of this one is done).

``SpecDecoder.steps()`` is a generator yielding one trace step record per step; timings are
perf_counter around device-synchronised work.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Iterator

import torch

from specviz.engine import streams
from specviz.engine.kernels import get_accept_fn
from specviz.engine.ragged import RaggedCache, left_pad
from specviz.engine.sampling import SamplingParams
from specviz.engine.transfer import host_tensor
from specviz.engine.step import StepParts, default_accept_tree_fn
from specviz.models.forwardoptions import ForwardOptions
from specviz.records import RowStep, Step, TreeNodes


@dataclasses.dataclass
class RowState:
    index: int  # the row's index in the run (trace "index")
    prompt: str
    prompt_ids: list[int]  # exactly what the model saw
    output: list[int] = dataclasses.field(default_factory=list)  # generated tokens only
    finish_reason: str | None = None  # "eos" | "length" | "stopped"
    key: int = 0  # this row's random stream (specviz.engine.streams.row_key of the seed and index)
    drafted: int = 0
    accepted: int = 0
    steps: int = 0
    # the request's life, in seconds after the run started (SpecDecoder.t0) and step numbers
    arrival_s: float = 0.0
    lane: int | None = None  # which of the decoder's concurrent rows (lanes) it held
    join_step: int | None = None  # first step it took part in
    join_s: float | None = None  # when its prefill started
    first_token_s: float | None = None  # end of the step that gave its first output token
    leave_step: int | None = None  # the step it finished in
    leave_s: float | None = None  # end of that step

    @property
    def context(self) -> list[int]:
        return self.prompt_ids + self.output

    @property
    def last(self) -> int:
        """The context's last token (without building the context)."""
        return self.output[-1] if self.output else self.prompt_ids[-1]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def default_accept_fn(device: torch.device):
    """The fused Triton kernel on CUDA, the torch reference elsewhere (SPECVIZ_ACCEPT_IMPL overrides)."""
    return get_accept_fn(None if device.type == "cuda" else "torch")


def eos_token_ids(loaded) -> set[int]:
    ids = set()
    for src in (loaded.tokenizer, getattr(loaded.model, "generation_config", None)):
        e = getattr(src, "eos_token_id", None)
        if isinstance(e, int):
            ids.add(e)
        elif e:
            ids.update(int(x) for x in e)
    return ids


class SpecDecoder:
    """Holds the state of one batched run; iterate ``steps()`` to drive it."""

    def __init__(
        self,
        target,  # specviz.models.loading.LoadedModel
        proposer,  # a specviz.engine.proposers proposer, or None for regular decoding
        policy,  # draft-length policy (specviz.engine.policies)
        prompts: list[str],
        prompt_ids: list[list[int]],
        params: SamplingParams,
        max_new_tokens: int,
        seed: int = 0,
        compact_threshold: float = 0.25,
        accept_fn=None,
        keep_hidden: bool = False,
        lanes: int | None = None,
        arrivals: list[float] | None = None,
        refill: bool = True,
        tree=None,  # a step.TreeShape: every row drafts a token tree (None = chains)
        options: ForwardOptions | None = None,  # how the target's cache runs its forwards (None: the environment's)
        synthetic: float | None = None,  # accept each drafted position with this probability (chains only): not the target's text
        walk_lines: bool = False,  # chains through the tree's verify and walk, not their fast forms (step.StepParts)
    ):
        self.target = target
        self.proposer = proposer
        self.policy = policy
        self.params = params
        self.max_new_tokens = max_new_tokens
        self.device = target.device
        self.eos = eos_token_ids(target)
        self.accept_fn = accept_fn or default_accept_fn(self.device)
        self.accept_tree_fn = default_accept_tree_fn(self.device)  # the tree walk (kernels/tree_verify.py on CUDA)
        self.compact_threshold = compact_threshold
        self.tree = tree
        # the step's parts: every row drafts a token tree, or a line of tokens (regular decoding: k = 0)
        self.kind = StepParts(tree, synthetic, walk_lines)
        self.options = options
        # A feature draft (drafts.FeatureDraft) reads the target's final hidden states: the
        # prefill's go to proposer.start, each verify's to proposer.commit. keep_hidden keeps them
        # without one (data generation): prefill_hidden/prefill_valid and verify_hidden.
        self.wants_features = bool(getattr(proposer, "wants_features", False))
        self.keep_hidden = keep_hidden or self.wants_features
        self.prefill_hidden = self.prefill_valid = self.verify_hidden = None
        self.rows = [
            RowState(i, p, list(ids), key=streams.row_key(seed, i))
            for i, (p, ids) in enumerate(zip(prompts, prompt_ids))
        ]
        self.lanes = len(self.rows) if lanes is None else max(1, min(int(lanes), len(self.rows)))
        self.refill = refill
        for r, a in zip(self.rows, arrivals or []):
            r.arrival_s = float(a)
        self.queue: list[RowState] = list(self.rows)  # requests not yet joined, in arrival order
        self.queue.sort(key=lambda r: r.arrival_s)
        self.continuous = self.lanes < len(self.rows) or any(r.arrival_s > 0 for r in self.rows)
        self.active: list[RowState] = []
        self.prefill_s = 0.0
        self.join_prefill_s = 0.0  # seconds of newcomers' prefills (inside steps' t_prefill)
        self.t0 = None
        self._stop = False

    # ---- control ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to end after the current step; unfinished rows end as "stopped"."""
        self._stop = True

    def _arrived(self, step: int) -> list[RowState]:
        """Queued requests that may join now: arrived, and a lane free (static batches: all free)."""
        free = self.lanes - len(self.active)
        if not self.queue or free <= 0 or (not self.refill and self.active):
            return []
        now = time.perf_counter() - self.t0
        return [r for r in self.queue[:free] if r.arrival_s <= now][:free]

    def _prefill(self) -> None:
        """Both caches take every prompt token but the last, which the first step feeds."""
        t = time.perf_counter()
        rows = self._arrived(0)
        self._take(rows, 0, t)
        self.kv = self._prefill_cache(rows)
        self.prefill_hidden, self.prefill_valid = self._hidden
        if self.proposer is not None:
            self.proposer.start([r.context for r in rows], features=self.draft_features(self._hidden))
        _sync(self.device)
        self.prefill_s = time.perf_counter() - t

    def draft_features(self, hidden):
        """What the proposer gets as ``features``: the target's hidden states for a draft that reads them
        (specviz.engine.proposers.Proposer.wants_features), None for every other draft."""
        return hidden if self.wants_features else None

    def _take(self, rows: list[RowState], step: int, t: float) -> None:
        used = {r.lane for r in self.active}
        free = iter(s for s in range(self.lanes) if s not in used)
        for r in rows:
            self.queue.remove(r)
            r.lane, r.join_step, r.join_s = next(free), step, t - self.t0
        self.active = self.active + rows

    def _prefill_cache(self, rows: list[RowState]) -> RaggedCache:
        """A cache over these rows' prompts but the last token; self._hidden = (hidden, valid) or Nones."""
        kv = RaggedCache(self.target.model, self.compact_threshold, keep_hidden=self.keep_hidden, options=self.options)
        ids, valid = left_pad([r.prompt_ids[:-1] for r in rows], 0, self.device)
        kv.empty_rows(len(rows))
        self._hidden = (None, None)
        if ids.shape[1]:
            kv.forward(ids, valid, last_only=True, counts=[len(r.prompt_ids) - 1 for r in rows], logits=False)
            self._hidden = (kv.hidden, valid)
        return kv

    def _join(self, step: int) -> list[int]:
        """Prefill the requests that may join and append them to the running caches."""
        rows = self._arrived(step)
        if not rows:
            return []
        t = time.perf_counter()
        self._take(rows, step, t)
        self.kv.extend(self._prefill_cache(rows))
        if self.proposer is not None:
            contexts = [r.context for r in rows]
            self.proposer.add_rows(contexts, features=self.draft_features(self._hidden))
        _sync(self.device)
        self.join_prefill_s += time.perf_counter() - t
        return [r.index for r in rows]

    # ---- the loop --------------------------------------------------------------------------
    @torch.inference_mode()
    def steps(self) -> Iterator[Step]:
        self.t0 = time.perf_counter()
        self._prefill()
        step = 0
        while (self.active or self.queue) and not self._stop:
            if not self.active:  # every lane idle: wait for the next arrival
                time.sleep(max(0.0, self.queue[0].arrival_s - (time.perf_counter() - self.t0)))
            yield self._step(step)
            step += 1
        for r in self.active + self.queue:  # stopped mid-run, or never joined
            r.finish_reason = r.finish_reason or "stopped"
        self.active, self.queue = [], []

    def _step(self, step: int) -> Step:
        """draft -> verify -> accept -> advance, each phase timed after a device sync."""
        clock = [time.perf_counter()]

        def lap():
            _sync(self.device)
            clock.append(time.perf_counter())

        joined = self._join(step)
        queued = sum(r.arrival_s <= clock[0] - self.t0 for r in self.queue)
        lap()
        if not joined:  # no prefill this step: the queue count's microseconds go to the draft phase
            clock[-1] = clock[0]
        B = len(self.active)
        k = self.policy.next_k(B) if self.proposer is not None else 0
        width, rows, compacted, left, shape = self._phases(step, k, lap)
        t_start, t_prefill, t_draft, t_verify, t_accept, t_end = clock
        for r in left:
            r.leave_s = t_end - self.t0
        for r in self.active + left:
            if r.first_token_s is None and r.output:
                r.first_token_s = t_end - self.t0
        return Step(step=step, k=k, verify_width=width, batch_size=B, t_start=t_start - self.t0,
                    t_prefill=t_prefill - t_start, t_draft=t_draft - t_prefill, t_verify=t_verify - t_draft,
                    t_accept=t_accept - t_verify, t_bookkeeping=t_end - t_accept, cache_slots=self.kv.slots,
                    cache_holes=self.kv.holes, kv_bytes=self.kv.kv_bytes(), compacted=compacted, rows=tuple(rows),
                    joined=tuple(joined), left=tuple(r.index for r in left), queue_length=queued,
                    tree_width=shape[0], tree_nodes=shape[1])

    def _phases(self, step: int, k: int, lap) -> tuple[int, list[RowStep], bool, list[RowState], tuple]:
        """The one step body, chains and trees alike (the parts: specviz.engine.step), lap()
        after each phase; (verify width, row records, compacted, rows that left, the tree shape drafted)."""
        drafted = self.kind.draft(self, k)
        lap()
        before = self.kv.host_lengths  # each row's cached tokens before the verify, when known on the host
        logits = self.kind.verify(self, drafted)
        self.verify_hidden = self.kv.hidden  # None unless keep_hidden
        lap()
        v = self.kind.accept(self, drafted, logits)
        lap()
        after = None if before is None else [b + 1 + a for b, a in zip(before, v.num_accepted)]
        self.kv.reject_tail(v.keep_slots, v.kept, after)  # rejected slots become holes
        compacted = self.kv.maybe_compact()
        self.kind.commit(self, drafted, v)
        rows, left = self._retire(step, v.num_accepted, v.emitted, v.proposed, v.trees)
        lap()
        return drafted.width, rows, compacted, left, drafted.shape

    def _retire(self, step: int, num_accepted: list[int], emitted: list[list[int]], proposed: list[list[int]],
                trees: dict[int, TreeNodes] | None = None) -> tuple[list[RowStep], list[RowState]]:
        """Grow outputs, observe the policy, drop finished rows from caches; (row records, rows that left).
        trees: each row's token tree by request index, in a tree step that drafted."""
        drafted = [len(p) for p in proposed]
        records, keep = {}, []
        for i, (r, e, a, p) in enumerate(zip(self.active, emitted, num_accepted, proposed)):
            out = self._append(r, e)
            r.drafted, r.accepted, r.steps = r.drafted + len(p), r.accepted + a, r.steps + 1
            records[r.index] = RowStep(r.index, True, len(p), a, tuple(out), tuple(p), r.lane,
                                       (trees or {}).get(r.index))
            if r.finish_reason is None:
                keep.append(i)
            else:
                r.leave_step = step
        self.policy.observe(drafted, num_accepted, rows=[r.index for r in self.active],
                                remaining=[0 if r.finish_reason else self.max_new_tokens - len(r.output)
                                           for r in self.active])
        left = [r for r in self.active if r.finish_reason is not None]
        if len(keep) < len(self.active):
            idx = host_tensor(keep, self.device)
            self.kv.select_rows(idx, keep)
            if self.proposer is not None:
                self.proposer.select_rows(idx)
            self.active = [self.active[i] for i in keep]
        if self.continuous:  # one record per row that stepped (a request queue may be long)
            return list(records.values()), left
        return [records.get(r.index) or RowStep.idle(r.index) for r in self.rows], left

    def _append(self, r: RowState, emitted: list[int]) -> list[int]:
        """Add a step's output to a row, cut at max_new_tokens and at the first EOS (inclusive)."""
        out = emitted[: self.max_new_tokens - len(r.output)]
        for j, t in enumerate(out):
            if t in self.eos:
                out = out[: j + 1]
                r.finish_reason = "eos"
                break
        r.output.extend(out)
        if r.finish_reason is None and len(r.output) >= self.max_new_tokens:
            r.finish_reason = "length"
        return out
