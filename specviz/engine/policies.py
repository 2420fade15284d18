"""Draft-length policies: each step the engine asks ``next_k()`` and then reports the outcome.

A policy sees only what a real server would: the batch size and, after each step, the drafted
and accepted counts of every active row. Policies are small stateful objects; build one by
name with :func:`make_policy`.

Interface (every policy):
  - ``name``: the CLI name;
  - ``next_k(batch_size) -> int``: the draft length for the coming step (0 = regular decoding);
  - ``observe(drafted, accepted, rows=None, remaining=None)``: one entry per active row of the
    step just run; the engine also passes each row's index and the tokens it has left
    (0 = finished), which ``analytic`` uses for the batch's ragged completion.
"""

from __future__ import annotations

import dataclasses
import math

from specviz.analysis import acceptance, analytic, steady
from specviz.common import SpecvizError
from specviz.engine import treepolicy

K_MAX = 16  # default cap on the draft length for the adaptive policies


def _all_accepted(drafted: list[int], accepted: list[int]) -> bool | None:
    """True if every row that drafted accepted all of it; None if no row drafted."""
    rows = [(d, a) for d, a in zip(drafted, accepted) if d > 0]
    if not rows:
        return None
    return all(a >= d for d, a in rows)


# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Fixed:
    """The same draft length every step (k = 0 is regular decoding)."""

    k: int
    name: str = "fixed"

    def next_k(self, batch_size: int) -> int:
        return self.k

    def observe(self, drafted: list[int], accepted: list[int], rows=None, remaining=None) -> None:
        pass


@dataclasses.dataclass
class Heuristic:
    """transformers' "heuristic" schedule: k += 2 if all draft tokens were accepted, else k - 1.

    transformers (``num_assistant_tokens_schedule="heuristic"``) runs batch 1 only. Our batch
    rule: a step counts as "all accepted" when *every* active row that drafted accepted all
    its draft tokens; otherwise k = max(1, k - 1). A step in which no row drafted changes
    nothing. transformers has no upper bound; we clamp to ``k_max``.
    """

    k: int
    k_max: int = K_MAX
    name: str = "heuristic"

    def __post_init__(self):
        self.k = min(max(1, self.k), self.k_max)

    def next_k(self, batch_size: int) -> int:
        return self.k

    def observe(self, drafted: list[int], accepted: list[int], rows=None, remaining=None) -> None:
        all_accepted = _all_accepted(drafted, accepted)
        if all_accepted is None:
            return
        self.k = min(self.k + 2, self.k_max) if all_accepted else max(1, self.k - 1)


@dataclasses.dataclass
class Bass:
    """BASS dynamic draft length (Qian et al. 2024, arXiv 2404.15778, Algorithm 1).

    A *transcription, unverified* (from a third-party reimplementation, see SPECDEC.md). After
    each step with accepted counts x_1..x_b:
      if max x == l_draft: l_draft = min(l_draft + l_incre, l_limit); s = 0
      else:                l_draft = max(1, max x, l_draft - ceil(l_draft / l_mod) - s); s = 1
    The paper's l_limit is 32; we clamp it to ``k_max`` too.
    """

    l_draft: int = 7
    l_incre: int = 2
    l_mod: int = 10
    l_limit: int = 32
    k_max: int = K_MAX
    s: int = 0  # 1 after a step that fell short: the next shrink is one larger
    name: str = "bass"

    def __post_init__(self):
        self.l_limit = min(self.l_limit, self.k_max)
        self.l_draft = min(max(1, self.l_draft), self.l_limit)

    def next_k(self, batch_size: int) -> int:
        return self.l_draft

    def observe(self, drafted: list[int], accepted: list[int], rows=None, remaining=None) -> None:
        if not accepted:
            return
        x_max = max(accepted)
        if x_max >= self.l_draft:
            self.l_draft = min(self.l_draft + self.l_incre, self.l_limit)
            self.s = 0
        else:
            self.l_draft = max(1, x_max, self.l_draft - math.ceil(self.l_draft / self.l_mod) - self.s)
            self.s = 1


@dataclasses.dataclass
class BassCapped:
    """BASS's rule with its cap, l_limit, taken each step from the calibrated cost model.

    The paper's rule has no cost term: it lengthens the draft whenever the best row of the batch
    accepted all of it, which pays where a (k+1)-token verify costs about what a 1-token step
    costs (a GPU below its knee). Its one hardware knob is l_limit (32 in the paper). On hardware
    whose verify grows with k (this project's CPU: a 3-token verify at B = 8 costs 1.2x a 1-token
    step) a fixed l_limit lets the rule draft far past what pays. Here l_limit is, every step,
    the k that :class:`Analytic` would pick (k*(b) from the calibrated costs at the running
    acceptance estimate), and the BASS rule moves below it unchanged. k*(b) = 0 turns speculation
    off, as it does for ``analytic``. Not in the paper: our adaptation, named apart from ``bass``.
    """

    rule: Bass
    cap: Analytic
    name: str = "bass-capped"

    def next_k(self, batch_size: int) -> int:
        cap = self.cap.next_k(batch_size)
        if cap == 0:
            return 0  # the rule's state waits for the cap to reopen
        self.rule.l_limit = cap
        self.rule.l_draft = min(self.rule.l_draft, cap)
        return self.rule.l_draft

    def observe(self, drafted: list[int], accepted: list[int], rows=None, remaining=None) -> None:
        if not any(d > 0 for d in drafted):
            return  # a step with speculation off says nothing about the draft
        self.cap.observe(drafted, accepted, rows=rows, remaining=remaining)
        self.rule.observe(drafted, accepted)


def parse_k_table(text: str) -> dict[int, int]:
    """Parse "1:4,4:3,16:1,64:0" (batch size : draft length) into {1: 4, 4: 3, 16: 1, 64: 0}."""
    table: dict[int, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        try:
            b_text, k_text = item.split(":")
            b, k = int(b_text), int(k_text)
        except ValueError:
            raise SpecvizError(f"bad k table entry {item!r}: expected BATCH:K, e.g. '1:4,4:3,16:1,64:0'") from None
        if b < 1 or k < 0:
            raise SpecvizError(f"bad k table entry {item!r}: batch size must be >= 1 and k >= 0")
        if b in table:
            raise SpecvizError(f"k table lists batch size {b} twice")
        table[b] = k
    if not table:
        raise SpecvizError("empty k table: expected BATCH:K pairs, e.g. '1:4,4:3,16:1,64:0'")
    return table


@dataclasses.dataclass
class Table:
    """Batch size -> k, like vLLM's ``num_speculative_tokens_per_batch_size`` and Synergy's table.

    Uses the entry of the largest listed batch size <= b; below the smallest listed batch
    size, the smallest entry. Build from a string with :func:`parse_k_table`.
    """

    table: dict[int, int]
    name: str = "table"

    def next_k(self, batch_size: int) -> int:
        keys = sorted(self.table)
        chosen = max((key for key in keys if key <= batch_size), default=keys[0])
        return self.table[chosen]

    def observe(self, drafted: list[int], accepted: list[int], rows=None, remaining=None) -> None:
        pass


@dataclasses.dataclass
class Analytic:
    """The k maximising the analytic model's speedup at the current batch size and acceptance.

    Acceptance estimate: each row's step is a run of Bernoulli trials, accepted successes then
    (unless it accepted all) one failure, so alpha_hat = successes / trials is the per-position
    acceptance the model assumes (accepted / drafted would be biased low: positions after the
    first rejection are never tried). Both counts are exponentially weighted (``decay`` per
    step), starting from ``prior_alpha`` worth ``prior_weight`` trials.
    With ``costs`` (a fitted target/draft :class:`~specviz.analysis.analytic.Costs`) it maximises
    :func:`~specviz.analysis.analytic.speedup_batch`; without, the batch-1 formula with cost ratio
    ``cost_ratio`` and ``verify_ratio``. Once it picks k = 0 nothing more is observed, so the
    estimate freezes; a batch-size change can still turn speculation back on.

    With costs, once the engine has reported each active row's index and tokens left and the
    batch has had more than one row, it maximises :func:`~specviz.analysis.analytic.speedup_ragged`
    instead: each row at its own acceptance estimate (its counts, shrunk toward the batch's
    estimate by ``prior_weight`` trials) and its own remaining length, the batch running until
    its last row is done. The last row left of a batch is judged on its own estimate; a run that
    only ever had one row keeps the per-step model. Rows accept unequally (0.03 to 0.77 in one
    B = 8 run of the default pair), and a slow row keeps the whole batch stepping: the per-step
    model misses that and over-predicts (BENCHMARKS.md, the sweep), so it kept k = 1 at B = 8
    where regular decoding was faster.
    """

    costs: analytic.Costs | None = None
    cost_ratio: float = 0.1  # c = T_draft / T_target, used only without ``costs``
    verify_ratio: float = 1.0  # T_target(k+1) / T_target(1), used only without ``costs``
    prior_alpha: float = 0.6
    prior_weight: float = 4.0  # trials the prior counts for
    decay: float = 0.9  # weight kept by past steps each step (memory ~ 1 / (1 - decay) steps)
    k_max: int = K_MAX
    name: str = "analytic"
    successes: float = dataclasses.field(init=False)  # weighted accepted positions
    trials: float = dataclasses.field(init=False)  # weighted tried positions
    row_counts: dict = dataclasses.field(init=False)  # row index -> [successes, trials], unweighted
    left: dict = dataclasses.field(init=False)  # active row index -> tokens it has left

    def __post_init__(self):
        self.successes = self.prior_alpha * self.prior_weight
        self.trials = self.prior_weight
        self.row_counts, self.left = {}, {}

    def row_alpha(self, row: int) -> float:
        """A row's acceptance: its own counts plus ``prior_weight`` trials at the batch's estimate."""
        s, t = self.row_counts.get(row, (0.0, 0.0))
        return (s + self.prior_weight * self.alpha) / (t + self.prior_weight)

    @property
    def alpha(self) -> float:
        """acceptance.alpha over the weighted counts (the prior's until a step has been observed)."""
        return acceptance.alpha(self.successes, self.trials, empty=self.prior_alpha)

    def next_k(self, batch_size: int) -> int:
        if self.costs is None:
            return analytic.optimal_k_batch1(self.alpha, self.cost_ratio, self.k_max, self.verify_ratio)
        if len(self.left) == batch_size and len(self.row_counts) > 1:  # rows to tell apart (or one left of them)
            rows = sorted(self.left)
            return analytic.optimal_k_ragged([self.left[r] for r in rows], [self.row_alpha(r) for r in rows],
                                             self.costs, self.k_max)
        return analytic.optimal_k(batch_size, self.alpha, self.costs, self.k_max)

    def observe(self, drafted: list[int], accepted: list[int], rows=None, remaining=None) -> None:
        if rows is not None and remaining is not None:
            self.left = {r: n for r, n in zip(rows, remaining) if n > 0}
        tried = [(i, d, a) for i, (d, a) in enumerate(zip(drafted, accepted)) if d > 0]
        if not tried:
            return
        successes = sum(a for _, _, a in tried)
        trials = sum(acceptance.positions_tried(d, a) for _, d, a in tried)
        self.successes = self.decay * self.successes + successes
        self.trials = self.decay * self.trials + trials
        if rows is not None:
            for i, d, a in tried:
                counts = self.row_counts.setdefault(rows[i], [0.0, 0.0])
                counts[0] += a
                counts[1] += acceptance.positions_tried(d, a)


@dataclasses.dataclass
class Goodput(Analytic):
    """SmartSpec's rule (Liu et al. 2024, arXiv 2406.14066) on our cost model: each step, the k in
    0..k_max (0 = no drafting) with the highest expected output tokens per predicted second,
    sum_i E(alpha_i, k) / T_step(b, k) (:func:`specviz.analysis.steady.step_goodput`), over the b
    rows about to step. Rows that stepped before count at their own acceptance estimate (as in
    :class:`Analytic`), rows that just joined at the batch's. No ragged-completion term: in a
    refilled batch a finished request's lane goes to the next request. Without ``costs`` it falls back
    to Analytic's batch-1 formula. As in Analytic, the estimate freezes while k = 0.
    """

    name: str = "goodput"

    def next_k(self, batch_size: int) -> int:
        if self.costs is None:
            return super().next_k(batch_size)
        known = [self.row_alpha(r) for r in sorted(self.left)][:batch_size]
        alphas = known + [self.alpha] * (batch_size - len(known))
        return steady.goodput_k(alphas, self.costs, self.k_max)


# ---------------------------------------------------------------------------------------------
# Builders take the starting / fixed k and ignore options meant for other policies, so a caller
# can pass one set (k_max, table, costs, ...) whatever the name. Numbers may arrive as strings
# (``--policy-arg k_max=8``): each builder converts its own.


def _number(kind, key: str, value):
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise SpecvizError(f"policy option {key}={value!r} is not a valid {kind.__name__}") from None


def _k_max(value, key: str = "k_max") -> int:
    k_max = _number(int, key, value)
    if k_max < 1:
        raise SpecvizError(f"policy option {key} must be >= 1, got {k_max}")
    return k_max


def _heuristic(k, k_max=K_MAX, **_):
    return Heuristic(int(k), k_max=_k_max(k_max))


def _bass(k, k_max=K_MAX, **_):
    return Bass(l_draft=int(k), k_max=_k_max(k_max))


def _bass_capped(k, k_max=K_MAX, **kwargs):
    return BassCapped(_bass(k, k_max=k_max), _analytic(k, k_max=k_max, **kwargs))


def _table(k, table=None, **_):
    if table is None:
        raise SpecvizError("policy 'table' needs a k table, e.g. '1:4,4:3,16:1,64:0'")
    return Table(parse_k_table(table) if isinstance(table, str) else dict(table))


def _analytic(k, costs=None, cost_ratio=0.1, verify_ratio=1.0, prior_alpha=0.6, decay=0.9, k_max=K_MAX, **_):
    if costs is not None and not isinstance(costs, analytic.Costs):
        raise SpecvizError("policy option costs must be an analytic.Costs (fit it with analytic.fit_cost_model)")
    policy = Analytic(
        costs=costs,
        cost_ratio=_number(float, "cost_ratio", cost_ratio),
        verify_ratio=_number(float, "verify_ratio", verify_ratio),
        prior_alpha=_number(float, "prior_alpha", prior_alpha),
        decay=_number(float, "decay", decay),
        k_max=_k_max(k_max),
    )
    if not (0.0 <= policy.prior_alpha <= 1.0 and 0.0 <= policy.decay <= 1.0):
        raise SpecvizError("policy options prior_alpha and decay must be in [0, 1]")
    if not (0.0 <= policy.cost_ratio < math.inf and 0.0 < policy.verify_ratio < math.inf):  # nan fails both
        raise SpecvizError(f"policy options cost_ratio must be a number >= 0 and verify_ratio one > 0 "
                           f"(got cost_ratio={policy.cost_ratio}, verify_ratio={policy.verify_ratio})")
    return policy


def _goodput(k, **kwargs):
    return Goodput(**{f.name: getattr(_analytic(k, **kwargs), f.name) for f in dataclasses.fields(Analytic)
                      if f.init and f.name != "name"})


def _tree(k, w_max=4, n_max=32, knee=64, prior_alpha=0.4, decay=0.95, **kwargs):
    """treepolicy.TreeShapes: k (--draft-length) bounds the depth; run.make_decoder passes --tree-width and
    --tree-nodes as w_max and n_max. Without costs: treepolicy.illustrative_costs(cost_ratio, knee)."""
    if int(k) < 1:
        raise SpecvizError("policy 'tree' needs --draft-length 1 or more: the deepest tree it may draft")
    a = _analytic(k, prior_alpha=prior_alpha, decay=decay, **kwargs)  # costs, cost_ratio, prior and decay checked
    costs = a.costs or treepolicy.illustrative_costs(a.cost_ratio, _number(float, "knee", knee))
    return treepolicy.TreeShapes(costs, k_max=int(k), w_max=_k_max(w_max, "w_max"), n_max=_k_max(n_max, "n_max"),
                                 prior_alpha=a.prior_alpha, decay=a.decay)


# Policies that choose k from the calibrated cost model (runner hands them the pair's calibration).
COST_AWARE = ("analytic", "bass-capped", "goodput", "tree")

POLICIES = {
    "fixed": lambda k, **_: Fixed(k),
    "heuristic": _heuristic,
    "bass": _bass,
    "bass-capped": _bass_capped,
    "table": _table,
    "analytic": _analytic,
    "goodput": _goodput,
    "tree": _tree,  # (depth, width, nodes) per step for token trees (specviz.engine.treepolicy)
}



# What a cost-aware policy picks from while its pair has no calibration ("k": every chain policy).
UNCALIBRATED = {"k": "k from the batch-1 formula (cost ratio 0.1)",
                "tree": "(k, W, N) from an illustrative roofline (a draft forward costs 0.1 of a target forward, "
                        "both flat up to 64 tokens)"}

def make_policy(name: str, k: int, **kwargs):
    """Build a policy by CLI name; ``k`` is the starting / fixed draft length.

    Extra options: ``k_max`` (heuristic, bass, bass-capped, analytic; default 16); ``table``
    (table: a string "1:4,4:3,16:1,64:0" or a dict); ``costs`` (analytic, bass-capped: an
    ``analytic.Costs``, else ``cost_ratio`` and ``verify_ratio`` for the batch-1 formula),
    ``prior_alpha``, ``decay``.
    bass starts at ``k`` (the paper starts at 7); analytic ignores ``k`` (it starts from the prior); tree
    takes it as the depth bound, ``w_max`` and ``n_max`` as the width and node bounds, ``knee`` too.
    """
    if name not in POLICIES:
        raise SpecvizError(f"unknown policy {name!r}: choose one of {', '.join(sorted(POLICIES))}")
    return POLICIES[name](k, **kwargs)
