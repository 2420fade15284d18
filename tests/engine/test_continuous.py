"""Continuous batching (issue 17) as named claims on tiny models: a request queue through fewer
lanes, refilled rows exact against batch-1 greedy, joins mid-chain, the last request alone,
long newcomers, bounded memory, static batches, arrivals, the trace's request metrics, the
goodput policy and the steady-state model. The packaged pair's exactness is test_continuous_default.py."""

import json

import pytest
import torch

from specviz.analysis import steady
from specviz.analysis.analytic import CostModel, Costs, expected_tokens_per_step
from specviz.analysis.trace import load_json, sequence_record, summarize
from specviz.common import SpecvizError
from specviz.engine.policies import make_policy
from specviz.engine.proposers import FeatureDraft, ModelDraft, NgramDraft
from specviz.engine.sampling import SamplingParams
from specviz.runconfig import RunConfig
from specviz.run import decoder_for_ids

from fakes import ScriptedDraft, perturbed_copy, ragged_prompts, reference_greedy, tiny_llama

V = 64


@pytest.fixture(scope="module")
def target():
    return tiny_llama(V)


def serve(target, prompts, proposer=None, k=0, max_new=12, lanes=3, **kw):
    dec = decoder_for_ids(target, proposer, prompts, k, max_new, lanes=lanes, **kw)
    steps = [s.to_json() for s in dec.steps()]
    return dec, steps


@pytest.mark.parametrize("n,lanes", [(13, 3), (29, 8)])
@pytest.mark.parametrize("draft", ["model", "ngram", "regular"])
def test_every_refilled_request_equals_its_batch_one_greedy(target, n, lanes, draft):
    prompts = ragged_prompts(n, V, seed=n)
    ref = reference_greedy(target, prompts, max_new=10)
    proposer = {"model": lambda: ModelDraft(perturbed_copy(target, 0.3)), "ngram": NgramDraft,
                "regular": lambda: None}[draft]()
    dec, steps = serve(target, prompts, proposer, 0 if draft == "regular" else 3, 10, lanes)
    assert [r.output for r in dec.rows] == ref
    assert max(s["batch_size"] for s in steps) == lanes
    assert sum(len(s["joined"]) for s in steps) == n - lanes  # every request past the first batch joined
    assert sorted(i for s in steps for i in s["left"]) == list(range(n))


def test_a_request_joins_while_another_is_mid_chain(target):
    """Row 0 accepts everything and leaves early; request 2 takes its lane while row 1, which
    accepts nothing, is halfway through its output; every output stays exact."""
    prompts = ragged_prompts(3, V, seed=7)
    ref = reference_greedy(target, prompts, max_new=16)
    draft = ScriptedDraft(prompts, ref, ["all", "none", "half"], V)
    dec, steps = serve(target, prompts, draft, 4, 16, lanes=2)
    assert [r.output for r in dec.rows] == ref
    join = next(s for s in steps if s["joined"] == [2])
    assert dec.rows[0].leave_step == join["step"] - 1  # the lane is refilled at the very next step
    made_by_1 = sum(len(r["emitted"]) for s in steps if s["step"] < join["step"] for r in s["rows"] if r["index"] == 1)
    assert 0 < made_by_1 < 16  # row 1 is mid-chain when request 2 joins
    assert {r["index"] for r in join["rows"]} == {1, 2} and dec.rows[2].lane == dec.rows[0].lane == 0
    assert join["t_prefill"] > 0 and all(s["t_prefill"] == 0 for s in steps if not s["joined"])


def test_the_last_request_finishes_alone(target):
    prompts = ragged_prompts(4, V, seed=11)
    ref = reference_greedy(target, prompts, max_new=16)
    draft = ScriptedDraft(prompts, ref, ["all", "all", "all", "none"], V)
    dec, steps = serve(target, prompts, draft, 4, 16, lanes=2)
    assert [r.output for r in dec.rows] == ref
    alone = [s for s in steps if s["batch_size"] == 1]
    assert alone and alone[-1] is steps[-1] and all(r["index"] == 3 for s in alone for r in s["rows"])
    assert steps[-1]["left"] == [3] and not dec.queue and dec.rows[3].leave_s == pytest.approx(
        steps[-1]["t_start"] + sum(steps[-1][f"t_{p}"] for p in ("prefill", "draft", "verify", "accept", "bookkeeping")))


def test_requests_longer_than_the_others_join_exactly(target):
    """A 40-token prompt joins rows whose caches are shorter (they get left-padded with holes), then a
    short one joins the long cache; a request with a longer output keeps its lane past the others."""
    short = ragged_prompts(4, V, seed=13)
    long = torch.randint(1, V, (40,), generator=torch.Generator().manual_seed(3)).tolist()
    prompts = short[:2] + [long] + short[2:]
    ref = reference_greedy(target, prompts, max_new=12)
    draft = ModelDraft(perturbed_copy(target, 0.3))
    dec, steps = serve(target, prompts, draft, 2, 12, lanes=2)
    assert [r.output for r in dec.rows] == ref
    join = next(s for s in steps if 2 in s["joined"])
    assert join["cache_slots"] >= len(long)  # the running rows were padded to the newcomer (39 + its step)
    # a longer output: EOS = a token only request 1 emits, early, so the others run long
    others = {t for i, o in enumerate(ref) if i != 1 for t in o}
    eos = next(t for t in ref[1][2:] if t not in others)
    ref_eos = reference_greedy(target, prompts, max_new=12, eos=eos)
    dec = decoder_for_ids(target, NgramDraft(), prompts, 3, 12, lanes=2)
    dec.eos = {eos}
    [s.to_json() for s in dec.steps()]
    assert [r.output for r in dec.rows] == ref_eos and dec.rows[1].finish_reason == "eos"


def test_memory_stays_bounded_over_200_requests(target):
    prompts = ragged_prompts(200, V, seed=17)
    dec, steps = serve(target, prompts, ModelDraft(perturbed_copy(target, 0.3)), 3, 6, lanes=8)
    assert all(r.finish_reason == "length" for r in dec.rows)
    longest = max(len(p) for p in prompts) + 6 + 3  # a row's context plus one verify's slots
    assert max(s["cache_slots"] for s in steps) <= 2 * longest  # not the ~3,000 tokens the run emitted
    late = [s for s in steps if s["step"] > len(steps) // 2]
    assert max(s["kv_bytes"] for s in late) <= max(s["kv_bytes"] for s in steps[: len(steps) // 2]) * 1.5
    assert dec.proposer.kv.slots <= 2 * longest and sum(s["compacted"] for s in steps) > 0


@pytest.mark.parametrize("draft", ["regular", "scripted"])
def test_a_join_causes_no_compaction(target, draft):
    """Newcomers with short prompts join rows whose caches are long: they sit right-aligned with
    holes in front, more than a quarter of the cache, which a compaction could not remove (it keeps
    the longest row). With no rejected drafts (regular, or a draft that is always right) nothing
    is reclaimable, so no step compacts; the outputs stay exact."""
    g = torch.Generator().manual_seed(43)
    prompts = [torch.randint(1, V, (n,), generator=g).tolist() for n in (30, 28, 26, 3, 4, 2, 5, 3)]
    plain = reference_greedy(target, prompts, max_new=12)
    others = {t for o in plain[1:] for t in o}
    eos = next(t for t in plain[0][1:] if t not in others)  # request 0 ends early: newcomers join mid-run
    ref = reference_greedy(target, prompts, max_new=12, eos=eos)
    proposer = None if draft == "regular" else ScriptedDraft(prompts, ref, ["all"] * len(prompts), V)
    dec = decoder_for_ids(target, proposer, prompts, 0 if draft == "regular" else 3, 12, lanes=3)
    dec.eos = {eos}
    steps = [s.to_json() for s in dec.steps()]
    assert [r.output for r in dec.rows] == ref and dec.rows[0].finish_reason == "eos"
    joins = [s for s in steps if s["joined"]]
    assert max(s["cache_holes"] / (s["cache_slots"] * s["batch_size"]) for s in joins) > 0.25
    assert not any(s["compacted"] for s in steps)
    assert max(s["cache_slots"] for s in steps) <= 30 + 12  # the longest prompt plus its output


def test_simultaneous_joins_run_one_prefill(target, monkeypatch):
    """Requests that join in the same step are prefilled together: one target forward and one
    draft forward over all of them, whatever their prompt lengths."""
    from specviz.engine.ragged import RaggedCache

    calls = []
    forward = RaggedCache.forward

    def counted(self, input_ids, input_valid, last_only=False, **kw):
        if self.slots == 0:  # a fresh cache's first forward: a prefill of prompts
            calls.append(("target" if self.model is target.model else "draft", input_valid.shape[0]))
        return forward(self, input_ids, input_valid, last_only, **kw)

    monkeypatch.setattr(RaggedCache, "forward", counted)
    prompts = ragged_prompts(8, V, seed=47)
    ref = reference_greedy(target, prompts, max_new=6)
    for proposer, k in ((None, 0), (ModelDraft(perturbed_copy(target, 0.3)), 2)):
        calls.clear()
        dec, steps = serve(target, prompts, proposer, k, 6, lanes=3)
        assert [r.output for r in dec.rows] == ref
        joins = [len(s["joined"]) for s in steps if s["joined"]]
        assert max(joins) >= 2  # some rows left in the same step
        want = [("target", n) for n in [3] + joins]
        assert [c for c in calls if c[0] == "target"] == want
        if proposer is not None:
            assert [c for c in calls if c[0] == "draft"] == [("draft", n) for n in [3] + joins]


def test_static_batches_wait_for_their_slowest_row(target):
    prompts = ragged_prompts(7, V, seed=19)
    ref = reference_greedy(target, prompts, max_new=10)
    dec, steps = serve(target, prompts, NgramDraft(), 3, 10, lanes=3, refill=False)
    assert [r.output for r in dec.rows] == ref
    for s in steps:
        if s["joined"]:
            assert s["batch_size"] == len(s["joined"])  # a batch joins only into an empty engine
    assert [len(s["joined"]) for s in steps if s["joined"]] == [3, 1]


def test_requests_join_only_after_they_arrive(target):
    prompts = ragged_prompts(5, V, seed=23)
    cfg = RunConfig(prompts=["x"] * 5, batch_size=2, requests=5, arrival_rate=200.0, seed=4)
    arrivals = cfg.arrivals()
    assert arrivals == RunConfig(prompts=["x"], batch_size=2, requests=5, arrival_rate=200.0, seed=4).arrivals()
    assert all(b > a for a, b in zip(arrivals, arrivals[1:])) and arrivals[0] > 0
    dec, steps = serve(target, prompts, None, 0, 6, lanes=2, arrivals=arrivals)
    assert [r.output for r in dec.rows] == reference_greedy(target, prompts, max_new=6)
    for r in dec.rows:
        assert r.join_s >= r.arrival_s and r.first_token_s > r.join_s and r.leave_s >= r.first_token_s
    assert RunConfig(prompts=["x"], batch_size=2, requests=5).arrivals() is None  # all queued at t = 0


def test_feature_draft_rows_join_with_the_targets_prefill_features(target):
    from specviz.distill.feature import build_feature_draft
    from specviz.models.distilled import DistilledDraft

    torch.manual_seed(1)
    model = build_feature_draft(target.model, list(range(V))).eval()
    with torch.no_grad():
        model.fc.weight.add_(0.3 * torch.randn_like(model.fc.weight))
    draft = DistilledDraft(spec="f", name="f", model=model, tokenizer=target.tokenizer, device=target.device,
                           dtype=target.dtype, kind="feature")
    prompts = ragged_prompts(7, V, seed=29) + [[5]]
    ref = reference_greedy(target, prompts, max_new=10)
    dec, steps = serve(target, prompts, FeatureDraft(draft, vocab_size=V), 2, 10, lanes=3)
    assert [r.output for r in dec.rows] == ref
    assert sum(r["accepted"] for s in steps for r in s["rows"] if r["index"] >= 3) > 0  # joined rows draft


def test_request_metrics_in_the_trace(target):
    prompts = ragged_prompts(6, V, seed=31)
    dec, steps = serve(target, prompts, NgramDraft(), 2, 8, lanes=2)
    seqs = [sequence_record(r, target.tokenizer) for r in dec.rows]
    wall = steps[-1]["t_start"] + 1.0
    s = summarize(steps, seqs, wall, dec.prefill_s)
    assert s["requests"] == s["requests_finished"] == 6 and s["tokens"] == 48
    assert s["throughput_requests_per_s"] == pytest.approx(6 / wall)
    assert s["goodput_tokens_per_s"] == pytest.approx(48 / wall)
    lat = sorted(q["latency_s"] for q in seqs)
    assert lat[0] <= s["latency_p50_s"] <= s["latency_p95_s"] <= lat[-1]
    for q in seqs:
        assert q["ttft_s"] == pytest.approx(q["first_token_s"] - q["arrival_s"])
        assert q["tpot_s"] == pytest.approx((q["leave_s"] - q["first_token_s"]) / 7)
        assert q["join_step"] <= q["leave_step"] and q["lane"] in (0, 1)
    assert [st["queue_length"] for st in steps][0] == 4 and s["max_queue_length"] == 4
    assert s["join_prefill_s"] == pytest.approx(sum(st["t_prefill"] for st in steps))


def test_version_one_traces_still_load():
    v1 = '{"version": 1, "config": {}, "sequences": [], "steps": [], "summary": {}}'
    assert load_json(v1)["version"] == 1
    with pytest.raises(ValueError, match="unsupported trace version 6"):
        load_json(v1.replace('"version": 1', '"version": 6'))


def test_a_trace_from_before_version_four_reads_its_controller_as_the_policy():
    v3 = '{"version": 3, "config": {"controller": "goodput"}, "sequences": [], "steps": [], "summary": {}}'
    assert load_json(v3)["config"] == {"policy": "goodput"}


def test_a_trace_from_before_version_five_reads_each_requests_slot_as_its_lane(target):
    """Versions 2-4 named the lane a request held "slot", per sequence and per row of a step; load_json
    renames it, so an old queue trace reads (and draws) as a new one, Step.from_json included."""
    from specviz.figures import queuecharts
    from specviz.records import Step

    dec, steps = serve(target, ragged_prompts(5, V, seed=41), NgramDraft(), 2, 6, lanes=2)
    new = {"version": 5, "config": {"batch_size": 2, "requests": 5}, "steps": steps, "summary": {},
           "sequences": [sequence_record(r, None) for r in dec.rows]}
    old = json.loads(json.dumps(new).replace('"lane"', '"slot"'))
    old["version"] = 4
    assert old["sequences"][0]["slot"] is not None and "lane" not in json.dumps(old)
    back = load_json(json.dumps(old))
    assert [q["lane"] for q in back["sequences"]] == [r.lane for r in dec.rows]
    assert not any("slot" in q for q in back["sequences"])
    assert [[r.get("lane") for r in s["rows"]] for s in back["steps"]] == [[r.get("lane") for r in s["rows"]] for s in steps]
    assert [Step.from_json(s).to_json() for s in back["steps"]] == steps
    assert queuecharts.lane_spans(back) == queuecharts.lane_spans(new) != []


@pytest.mark.parametrize("kw,message", [
    ({"requests": 0}, "requests must be at least 1"),
    ({"arrival_rate": -1.0}, "arrival rate must be 0"),
    ({"requests": 2, "batch_size": 4}, "2 requests cannot fill 4 lanes"),
])
def test_bad_queue_settings_are_one_sentence(kw, message):
    with pytest.raises(SpecvizError, match=message):
        RunConfig(prompts=["hi"], **kw).validate()


# ---- the goodput policy and the steady-state model ------------------------------------------

COSTS = Costs(target=CostModel(0.004, 0.020, 0.0004), draft=CostModel(0.001, 0.002, 0.00005), overhead=0.002)


def test_goodput_picks_the_k_with_most_tokens_per_second():
    alphas = [0.8, 0.5, 0.3]
    best = max(range(9), key=lambda k: sum(expected_tokens_per_step(a, k) for a in alphas)
               / steady.step_seconds(3, k, COSTS))
    assert steady.goodput_k(alphas, COSTS, 8) == best > 0
    expensive = Costs(target=COSTS.target, draft=CostModel(0.02, 0.02, 0.001), overhead=0.002)
    assert steady.goodput_k(alphas, expensive, 8) == 0  # a draft as dear as the target: no drafting


def test_goodput_policy_follows_the_rows_it_has_seen():
    policy = make_policy("goodput", 2, costs=COSTS, k_max=8)
    k0 = policy.next_k(4)
    for _ in range(30):  # every row accepts every draft: the estimate climbs, so does k
        policy.observe([4] * 4, [4] * 4, rows=[0, 1, 2, 3], remaining=[9] * 4)
    assert policy.next_k(4) > k0
    for _ in range(60):  # the next requests (rows 4..7) reject every draft
        policy.observe([4] * 4, [0] * 4, rows=[4, 5, 6, 7], remaining=[9] * 4)
    assert policy.next_k(4) == 0 and policy.name == "goodput"


def test_steady_state_is_the_long_queue_limit_of_the_refilled_run():
    alphas = [0.2, 0.5, 0.7, 0.9] * 100
    L, B, join = 64, 8, 0.01
    t = steady.refilled_run_time([L] * len(alphas), alphas, B, 2, COSTS, join)
    x = steady.steady_throughput(B, alphas, 2, COSTS, L, join)
    assert L * len(alphas) / t == pytest.approx(x, rel=0.03)
    # one lane: no sharing, the run is the sum of each request's own steps and join
    one = steady.refilled_run_time([10, 20], [0.5, 0.0], 1, 1, COSTS, join)
    expect = (10 / 1.5 + 20) * steady.step_seconds(1, 1, COSTS) + 2 * join
    assert one == pytest.approx(expect)
    assert steady.steady_speedup(B, [0.0], 0, COSTS, L, join) == pytest.approx(1.0)


def test_goodput_policy_under_refills_stays_exact_and_sees_the_occupancy(target):
    prompts = ragged_prompts(9, V, seed=37)
    ref = reference_greedy(target, prompts, max_new=10)
    seen = []
    policy = make_policy("goodput", 2, costs=COSTS, k_max=4)
    ask = policy.next_k
    policy.next_k = lambda b: seen.append(b) or ask(b)
    dec = decoder_for_ids(target, ModelDraft(perturbed_copy(target, 0.2)), prompts, 2, 10, policy=policy,
                          lanes=3)
    steps = [s.to_json() for s in dec.steps()]
    assert [r.output for r in dec.rows] == ref
    assert seen == [s["batch_size"] for s in steps] and seen[-1] < 3  # the occupancy, step by step
    assert {s["k"] for s in steps} <= set(range(5))


@pytest.mark.parametrize("argv,message", [
    (["--requests", "0"], "requests must be at least 1 (got 0)"),
    (["--arrival-rate", "-2"], "arrival rate must be 0 (all queued at the start) or a positive number"),
    (["--requests", "3", "--batch-size", "8"], "3 requests cannot fill 8 lanes"),
])
def test_the_cli_refuses_bad_queue_flags_in_one_line_before_loading(argv, message, capsys):
    from specviz.cli import main

    rc = main(["run", "--prompt", "hi", *argv])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_a_one_token_prompt_joins_with_nothing_to_prefill(target):
    prompts = [[5]] + ragged_prompts(3, V, seed=41) + [[9], [11]]
    ref = reference_greedy(target, prompts, max_new=8)
    dec, steps = serve(target, prompts, ModelDraft(perturbed_copy(target, 0.3)), 2, 8, lanes=2)
    assert [r.output for r in dec.rows] == ref
    assert any(set(s["joined"]) & {4, 5} for s in steps)
