"""The distil command end to end on a tiny budget, and the saved draft used as a draft."""

import argparse
import json

import pytest
import torch

from specviz.checks.parser import build_parser
from specviz.distill.data import build_vocab_map, read_samples
from specviz.distill.train import autocast_pays
from specviz.models.distilled import DRAFT_FILE, is_distilled_draft, load_distilled_draft
from specviz.engine.proposers import ModelDraft
from specviz.common import SpecvizError
from specviz.prompts.gen import FREEFORM, HELDOUT_SLOTS, TRAIN_SLOTS, heldout_prompts, training_prompts
from specviz.run import encode_prompts, get_model
from specviz.engine.sampling import SamplingParams

from fakes import decode, tiny_llama
import locations

pytestmark = pytest.mark.slow  # the real default model, ~20 s for the module

VOCAB = 512
TINY = ["--samples", "6", "--val-samples", "2", "--max-new-tokens", "8", "--gen-batch-size", "3", "--steps", "30",
        "--batch-size", "3", "--vocab", str(VOCAB), "--layers", "1", "--eval-every", "10", "--eval-prompts", "2",
        "--eval-max-new-tokens", "8", "--eval-ks", "1,2", "--cost-rounds", "1", "--cost-prefix-len", "16", "--dtype", "float32", "--lr", "3e-3", "--gen-workers", "1",
        "--no-freeform"]


def parse(argv):
    return build_parser().parse_args(["distill", *argv])


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # Two intra-op threads on a shared 2-core CPU stall each other (10x slower under load); one is steady.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def target():
    return get_model("default", "cpu", "float32")


@pytest.fixture(scope="module")
def distilled(tmp_path_factory, target):
    out = tmp_path_factory.mktemp("draft")
    a = parse(["--out", str(out), *TINY])
    assert a.func(a) == 0
    return out, json.loads((out / "report.json").read_text())


@pytest.fixture(scope="module")
def draft(distilled, target):
    return load_distilled_draft(distilled[0], target)


def test_command_writes_draft_report_and_readme(distilled):
    out, report = distilled
    for name in ("config.json", "model.safetensors", DRAFT_FILE, "report.json", "README.md"):
        assert (out / name).is_file(), name
    assert is_distilled_draft(str(out))
    assert report["data"]["train_samples"] == 6 and report["data"]["train_tokens"] > 0
    assert [r["k"] for r in report["heldout"]] == [1, 2]
    assert set(report["cost_ratio"]) == {"1", "8"} and report["cost_ratio"]["1"]["c"] > 0
    assert "python -m specviz distill" in (out / "README.md").read_text()
    native = autocast_pays(torch.device("cpu"))  # bf16 autocast only where bf16 matmuls are native
    assert report["training"]["precision"] == ("bf16 autocast" if native else "float32")
    assert f"steps ({report['training']['precision']})" in (out / "README.md").read_text()


def test_training_loss_drops(distilled):
    t = distilled[1]["training"]
    assert t["steps"] == 30
    assert t["loss_last"] < 0.8 * t["loss_first"]


def test_same_data_seed_and_steps_give_the_same_weights(distilled, tmp_path):
    """The weights follow the seed, the data and --steps only, never the clock (issue 5: reproducible)."""
    first, report = distilled
    assert report["training"]["stopped_by"] == "steps" and report["training"]["reproducible"]
    a = parse(["--out", str(tmp_path), "--data", str(first / "data"), *TINY])
    assert a.func(a) == 0
    assert (tmp_path / "model.safetensors").read_bytes() == (first / "model.safetensors").read_bytes()
    assert json.loads((tmp_path / DRAFT_FILE).read_text())["vocab_map"] == json.loads((first / DRAFT_FILE).read_text())["vocab_map"]


def test_a_time_budget_stop_is_reported():
    from specviz.distill.token import collate_tokens, token_loss
    from specviz.distill.train import train

    model = torch.nn.Linear(2, 2)
    hist = train(model, [], [], steps=5, batch_size=1, lr=1e-3, seed=0, loss_fn=token_loss, collate=collate_tokens,
                 budget_s=0.0)
    assert hist["steps"] == 0 and hist["stopped_by"] == "time budget"


def test_saved_weights_exclude_the_target_embedding(distilled, target):
    from safetensors import safe_open

    with safe_open(str(distilled[0] / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        assert not any("embed_tokens" in k for k in keys)
        head = f.get_tensor("lm_head.weight")
    assert head.dtype == torch.bfloat16 and head.shape == (VOCAB, target.model.config.hidden_size)


def test_vocabulary_map_round_trips(distilled, draft, target):
    out, _ = distilled
    saved = json.loads((out / DRAFT_FILE).read_text())
    vmap = saved["vocab_map"]
    assert saved["embedding"] == "from_target" and saved["target"] == "default"
    assert vmap == sorted(set(vmap)) and len(vmap) == VOCAB
    assert draft.model.lm_head.vocab_map.tolist() == vmap
    assert target.tokenizer.eos_token_id in vmap
    samples = read_samples(sorted((out / "data").glob("train-*.jsonl")))
    assert build_vocab_map(samples, VOCAB, target.model.config.vocab_size, always=[target.tokenizer.eos_token_id]) == vmap
    # the draft shares the target's embedding tensor instead of a copy
    assert draft.model.get_input_embeddings().weight.data_ptr() == target.model.get_input_embeddings().weight.data_ptr()


@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(temperature=1.0)], ids=["greedy", "sampled"])
def test_draft_proposes_only_mapped_tokens(draft, target, params):
    V = target.model.config.vocab_size
    proposer = ModelDraft(draft, vocab_size=V)
    contexts = encode_prompts(target.tokenizer, ["Tell me about rivers.", "Write a Python function that adds two numbers."])
    proposer.start(contexts)
    prop = proposer.propose(contexts, 3, params, torch.rand(2, 3, generator=torch.Generator().manual_seed(0)))
    vmap = set(draft.model.lm_head.vocab_map.tolist())
    assert prop.tokens.shape == (2, 3) and all(int(t) in vmap for t in prop.tokens.flatten())
    if prop.probs is not None:
        outside = torch.ones(V, dtype=torch.bool)
        outside[draft.model.lm_head.vocab_map] = False
        assert prop.probs.shape == (2, 3, V) and float(prop.probs[..., outside].sum()) == 0.0


def test_greedy_speculative_equals_regular_in_fp32(draft, target):
    V = target.model.config.vocab_size
    ids = encode_prompts(target.tokenizer, ["Explain what a lighthouse does.", "List three uses of salt."])
    regular, _ = decode(target, ids, None, 0, max_new=16)
    spec, steps = decode(target, ids, ModelDraft(draft, vocab_size=V), 3, max_new=16)
    assert [r.output for r in spec.rows] == [r.output for r in regular.rows]
    assert sum(r["drafted"] for s in steps for r in s["rows"]) > 0


def test_loader_refuses_a_different_target(distilled):
    with pytest.raises(SpecvizError, match="vocabulary"):
        load_distilled_draft(distilled[0], tiny_llama(64))


def test_heldout_prompts_never_overlap_training():
    train, held = set(training_prompts(5000)), heldout_prompts(300)
    assert len(held) == 300 and not train & set(held) and not train & set(FREEFORM)
    for key in ("topic", "activity", "code_task", "sentences"):
        assert not set(TRAIN_SLOTS[key]) & set(HELDOUT_SLOTS[key]), key
    assert training_prompts(50) == training_prompts(200)[:50]  # prefix-stable: data generation resumes


def test_two_worker_processes_write_what_one_process_writes(tmp_path, target, monkeypatch):
    from specviz.distill.data import generate_data, generate_parallel

    monkeypatch.chdir(tmp_path)  # the workers import this specviz from any working directory
    kwargs = dict(prompts=training_prompts(4), name="train", max_new=4, batch_size=2, topk=4, seed=3)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    generate_data(target, data=tmp_path / "one", **kwargs)  # batch 0 greedy, batch 1 sampled
    generate_parallel(target, 2, data=tmp_path / "two", **kwargs)
    assert sorted(p.name for p in (tmp_path / "two").glob("train-*.jsonl")) == ["train-0.jsonl", "train-1.jsonl"]

    def outputs(d):
        return {s["sample"]: s["output_ids"] for s in read_samples(sorted(d.glob("train-*.jsonl")))}

    assert outputs(tmp_path / "two") == outputs(tmp_path / "one") and len(outputs(tmp_path / "one")) == 4
    generate_parallel(target, 2, data=tmp_path / "two", **kwargs)  # resuming finds nothing left to do
    assert len(read_samples(sorted((tmp_path / "two").glob("train-*.jsonl")))) == 4


@pytest.fixture(scope="module")
def feature_distilled(tmp_path_factory, target):
    out = tmp_path_factory.mktemp("feature-draft")
    a = parse(["--out", str(out), *TINY, "--kind", "feature"])
    assert a.func(a) == 0
    return out, json.loads((out / "report.json").read_text())


def test_feature_draft_command_trains_saves_and_loads_as_a_feature_draft(feature_distilled, target):
    from specviz.engine.proposers import FeatureDraft
    from specviz.run import make_proposer

    out, report = feature_distilled
    assert report["draft"]["kind"] == "feature" and report["draft"]["layers"] == 1
    assert report["training"]["loss_last"] < 0.8 * report["training"]["loss_first"]
    assert json.loads((out / DRAFT_FILE).read_text())["kind"] == "feature"
    proposer = make_proposer(str(out), target)
    assert isinstance(proposer, FeatureDraft) and "feature" in proposer.name
    vmap = set(json.loads((out / DRAFT_FILE).read_text())["vocab_map"])
    ids = encode_prompts(target.tokenizer, ["Explain what a lighthouse does.", "List three uses of salt."])
    regular, _ = decode(target, ids, None, 0, max_new=16)
    spec, steps = decode(target, ids, proposer, 3, max_new=16)
    assert [r.output for r in spec.rows] == [r.output for r in regular.rows]  # greedy exactness in fp32
    proposed = [t for s in steps for r in s["rows"] for t in r["draft_tokens"]]
    assert proposed and set(proposed) <= vmap


def test_a_feature_draft_stores_no_output_rows_and_loads_the_targets_own(feature_distilled, target):
    """A feature draft's head is the target's frozen rows for its map: distill leaves them out of
    model.safetensors ("head": "from_target") and the loader rebuilds them from the target."""
    from safetensors import safe_open

    out, _ = feature_distilled
    meta = json.loads((out / DRAFT_FILE).read_text())
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert "lm_head.weight" not in f.keys() and "fc.weight" in f.keys()
    assert meta["head"] == "from_target"
    loaded = load_distilled_draft(out, target)
    rows = target.model.get_output_embeddings().weight[meta["vocab_map"]]  # [n_map, hidden]
    assert torch.equal(loaded.model.lm_head.weight, rows)


def test_a_stored_head_draft_and_its_stripped_copy_draft_the_same(feature_distilled, target, tmp_path):
    """bench/head_from_target.py turns a draft that stores the target's rows (the older format, still
    loaded) into one that does not, and both propose the same tokens up to bf16 near-ties; rows that are
    not the target's are refused."""
    import importlib.util
    import shutil
    from pathlib import Path

    from safetensors.torch import load_file, save_file

    from specviz.run import make_proposer

    spec = importlib.util.spec_from_file_location("head_from_target", locations.ROOT / "bench" / "head_from_target.py")
    strip = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(strip)
    out, _ = feature_distilled
    stored, bad = tmp_path / "stored", tmp_path / "bad"
    for d in (stored, bad):
        shutil.copytree(out, d)
        meta = json.loads((d / DRAFT_FILE).read_text())
        weights = load_file(str(d / "model.safetensors"))
        rows = target.model.get_output_embeddings().weight[meta["vocab_map"]].to(torch.bfloat16)  # [n_map, hidden]
        weights["lm_head.weight"] = rows if d == stored else rows.flip(0).contiguous()
        save_file(weights, str(d / "model.safetensors"))
        (d / DRAFT_FILE).write_text(json.dumps({k: v for k, v in meta.items() if k != "head"}))
    ids = encode_prompts(target.tokenizer, ["Explain what a lighthouse does.", "List three uses of salt."])
    before = decode(target, ids, make_proposer(str(stored), target), 3, max_new=16)[1]
    strip.strip_head(stored, target)
    assert json.loads((stored / DRAFT_FILE).read_text())["head"] == "from_target"
    assert "lm_head.weight" not in load_file(str(stored / "model.safetensors"))
    after = decode(target, ids, make_proposer(str(stored), target), 3, max_new=16)[1]
    drafted = [[r["draft_tokens"] for s in steps for r in s["rows"]] for steps in (before, after)]
    # The stored rows are the target's rounded to bf16; the stripped draft takes the exact fp32 rows, so
    # a near-tie deep in a chain may flip (one of 96 tokens did on an AVX2 EPYC): the same drafts but ties.
    pairs = [(x, y) for a, b in zip(*drafted) for x, y in zip(a, b)]
    assert any(drafted[0]) and sum(x == y for x, y in pairs) >= 0.95 * len(pairs), drafted
    head = make_proposer(str(stored), target).loaded.model.lm_head.weight
    rows = target.model.get_output_embeddings().weight[json.loads((stored / DRAFT_FILE).read_text())["vocab_map"]]
    assert torch.equal(head, rows)  # stripped: exactly the target's rows
    with pytest.raises(SystemExit, match="not the target's"):
        strip.strip_head(bad, target)


def test_a_two_layer_feature_draft_continued_from_a_one_layer_one_drafts_the_same_at_step_0(feature_distilled, target,
                                                                                              tmp_path):
    """distill --kind feature --layers 2 --init-from a one-layer feature draft: the extra layer starts as an
    identity, so before any training step it proposes exactly what the one-layer draft proposes."""
    from specviz.run import make_proposer

    out, _ = feature_distilled
    tiny = list(TINY)
    tiny[tiny.index("--steps") + 1], tiny[tiny.index("--layers") + 1] = "0", "2"
    a = parse(["--out", str(tmp_path), "--data", str(out / "data"), "--init-from", str(out), "--vocab-from", str(out),
               *tiny, "--kind", "feature"])
    assert a.func(a) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["draft"]["layers"] == 2 and report["draft"]["init_from"]["layers_added"] == 1
    ids = encode_prompts(target.tokenizer, ["Explain what a lighthouse does.", "List three uses of salt."])
    regular, _ = decode(target, ids, None, 0, max_new=16)
    runs = [decode(target, ids, make_proposer(str(d), target), 3, max_new=16) for d in (out, tmp_path)]
    assert [r.output for r in runs[1][0].rows] == [r.output for r in regular.rows]
    drafted = [[r["draft_tokens"] for s in steps for r in s["rows"]] for _, steps in runs]
    assert drafted[0] == drafted[1] and any(drafted[0])


def test_bench_says_transformers_cannot_run_a_feature_draft_and_takes_a_peer_draft(feature_distilled, capsys):
    from specviz.cli import main

    common = ["bench", "--prompt", "List three uses of salt.", "--max-new-tokens", "4", "--repeats", "1",
              "--dtype", "float32", "--draft", str(feature_distilled[0]), "--draft-length", "2"]
    assert main(common) == 0
    out = capsys.readouterr()
    assert "no transformers peer" in out.err and "transformers generate peer" not in out.out
    assert main([*common, "--peer-draft", "ngram"]) == 0
    out = capsys.readouterr().out
    assert "transformers generate peer" in out and "its draft: ngram" in out and "ours vs peer" in out


# ---- teacher-forced text labels (specviz.distill.text) and resumable training -----------------


def _tiny_chunks(n: int, vocab: int = 64) -> list[dict]:
    g = torch.Generator().manual_seed(5)
    return [{"prompt": f"doc {i}", "prompt_ids": torch.randint(1, vocab, (2 + i % 3,), generator=g).tolist(),
             "output_ids": torch.randint(1, vocab, (4 + 3 * i % 7,), generator=g).tolist(), "source": f"doc{i}.txt",
             "source_sha256": "0" * 64} for i in range(n)]


def _dies_on_call(fn, n: int):
    """fn, except that its n-th call raises KeyboardInterrupt (an interruption mid-run)."""
    calls = []

    def wrapped(*args, **kw):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return fn(*args, **kw)

    return wrapped


def _records(data, name="text"):
    from specviz.distill.data import read_shards

    return {s["sample"]: (s["output_ids"], s["topk_ids"].tolist(), s["topk_logits"].tolist()) for s in read_shards(data, name)}


def test_text_labels_are_the_targets_topk_at_each_answer_position_and_resume_after_an_interruption(tmp_path, monkeypatch):
    import specviz.distill.text as text

    tiny = tiny_llama(64)
    chunks = _tiny_chunks(5)
    (tmp_path / "whole").mkdir()
    text.label_text(tiny, chunks, tmp_path / "whole", batch_size=2, topk=4)
    whole = _records(tmp_path / "whole")
    assert sorted(whole) == [0, 1, 2, 3, 4]
    for i, c in enumerate(chunks):  # each chunk alone, unpadded: the same top-4 at the answer positions
        seq = torch.as_tensor([c["prompt_ids"] + c["output_ids"][:-1]])  # [1, P + n - 1]
        with torch.no_grad():
            z = tiny.model(seq).logits[0, len(c["prompt_ids"]) - 1:]  # [n, V]
        vals, ids = z.topk(4, dim=-1)
        assert whole[i][1] == ids.tolist() and whole[i][0] == c["output_ids"]
        assert torch.allclose(torch.tensor(whole[i][2]), vals, atol=1e-2)

    (tmp_path / "cut").mkdir()
    real = text.label_batch
    monkeypatch.setattr(text, "label_batch", _dies_on_call(real, 2))
    with pytest.raises(KeyboardInterrupt):
        text.label_text(tiny, chunks, tmp_path / "cut", batch_size=2, topk=4)
    assert sorted(_records(tmp_path / "cut")) == [0, 1]
    monkeypatch.setattr(text, "label_batch", real)
    text.label_text(tiny, chunks, tmp_path / "cut", batch_size=2, topk=4)  # resume: only batches 1 and 2
    assert _records(tmp_path / "cut") == whole
    assert len((tmp_path / "cut" / "text-0.jsonl").read_text().splitlines()) == 5  # nothing labelled twice
    assert [s["sample"] for s in text.read_text_samples(tmp_path / "cut", chunks)] == [0, 1, 2, 3, 4]


def test_documents_keep_the_visible_text_and_chunks_end_at_paragraphs(tmp_path, target):
    from specviz.distill.text import chunk_documents, documents, source_manifest

    (tmp_path / "page.html").write_text(
        "<html><head><title>t</title><script>var x = 1;</script></head><body>"
        "<div class='sphinxsidebar'><div>Navigation</div> sidebar</div>"
        "<h1>Lists</h1><p>A list holds   items in order.</p><pre>xs = [1, 2]\n  xs.append(3)</pre></body></html>")
    (tmp_path / "notes.txt").write_text("First paragraph about tea.\n\n" + "Second paragraph, a longer one. " * 40)
    docs = documents([tmp_path])
    assert [d[0].rsplit("/", 1)[-1] for d in docs] == ["notes.txt", "page.html"]
    page = docs[1][1]
    assert "A list holds items in order." in page and "xs = [1, 2]\n  xs.append(3)" in page
    assert "var x" not in page and "Navigation" not in page and "sidebar" not in page
    import hashlib

    assert docs[1][2] == hashlib.sha256((tmp_path / "page.html").read_bytes()).hexdigest()
    chunks = chunk_documents(docs, target.tokenizer, chunk_tokens=64)
    tok = target.tokenizer
    assert all(len(c["output_ids"]) <= 64 for c in chunks)
    assert tok.decode(chunks[0]["output_ids"]) == "First paragraph about tea."  # the next paragraph did not fit
    assert chunks[0]["prompt_ids"] == encode_prompts(tok, ["Tell me about: First paragraph about tea."])[0]
    assert chunk_documents(docs, tok, chunk_tokens=64) == chunks  # deterministic
    man = source_manifest(docs, chunks)
    assert {m["path"] for m in man} == {d[0] for d in docs}
    assert sum(m["tokens"] for m in man) == sum(len(c["output_ids"]) for c in chunks)
    limited = chunk_documents(docs, tok, chunk_tokens=64, max_tokens=100)
    assert limited == chunks[:len(limited)] and sum(len(c["output_ids"]) for c in limited[:-1]) < 100


def test_a_missing_text_source_is_one_clear_error(tmp_path):
    from specviz.distill.text import documents

    with pytest.raises(SpecvizError, match="does not exist"):
        documents([tmp_path / "nope"])


def test_training_resumed_after_an_interruption_ends_with_the_uninterrupted_weights(tmp_path):
    from torch import nn

    from specviz.distill.token import collate_tokens, token_loss, token_tensors
    from specviz.distill.train import init_from_target, train
    from specviz.models.distilled import build_draft, draft_config

    tiny = tiny_llama(64)
    g = torch.Generator().manual_seed(0)
    samples = [{"prompt_ids": torch.randint(1, 64, (3,), generator=g).tolist(),
                "output_ids": torch.randint(1, 64, (6,), generator=g).tolist(),
                "topk_ids": torch.randint(0, 64, (6, 4), generator=g).numpy(),
                "topk_logits": torch.randn(6, 4, generator=g).numpy()} for _ in range(12)]
    vmap = list(range(0, 64, 2))
    data = token_tensors(samples, vmap, 64)

    def fresh():
        torch.manual_seed(0)
        emb = nn.Embedding.from_pretrained(tiny.model.get_input_embeddings().weight.detach().clone(), freeze=True)
        draft = build_draft(draft_config(tiny.model.config, 1), emb, vmap).float()
        init_from_target(draft, tiny.model, [0])
        return draft

    common = dict(train_data=data[:9], val_data=data[9:], steps=10, batch_size=3, lr=1e-2, seed=4,
                  collate=collate_tokens, eval_every=3, warmup=2, autocast=False)
    whole = fresh()
    h_whole = train(whole, loss_fn=token_loss, **common)
    state = tmp_path / "train-state.pt"
    calls = []

    def dies_at_step_8(draft, batch, autocast):
        if draft.training:
            calls.append(1)
            if len(calls) == 8:
                raise KeyboardInterrupt
        return token_loss(draft, batch, autocast)

    cut = fresh()
    with pytest.raises(KeyboardInterrupt):
        train(cut, loss_fn=dies_at_step_8, state_path=state, **common)
    assert torch.load(state, weights_only=True)["step"] == 6  # the last checkpoint before the interruption
    resumed = fresh()  # a new process: a new draft from the same start
    h_resumed = train(resumed, loss_fn=token_loss, state_path=state, **common)
    assert h_resumed["steps"] == 10 and h_resumed["loss"] == h_whole["loss"]
    assert [v["agreement"] for v in h_resumed["val"]] == [v["agreement"] for v in h_whole["val"]]
    for (k, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), k
    other = dict(common, seed=5)  # another run's state is not resumed
    h_other = train(fresh(), loss_fn=token_loss, state_path=state, **other)
    assert len(h_other["loss"]) == 10


@pytest.fixture(scope="module")
def text_distilled(tmp_path_factory, target):
    root = tmp_path_factory.mktemp("text-draft")
    (root / "doc.txt").write_text("\n\n".join(f"Paragraph {i}: tea is brewed from leaves and served hot or cold."
                                              for i in range(12)))
    a = parse(["--out", str(root / "out"), *TINY, "--steps", "10", "--text", str(root / "doc.txt"),
               "--text-chunk-tokens", "32", "--text-batch-size", "2", "--prompts", "mixed"])
    assert a.func(a) == 0
    return root, json.loads((root / "out" / "report.json").read_text())


def test_distill_with_text_trains_on_teacher_forced_labels_and_records_the_sources(text_distilled):
    import hashlib

    root, report = text_distilled
    text = report["data"]["text"]
    assert text["files"] == [{"path": str(root / "doc.txt"), "sha256": hashlib.sha256((root / "doc.txt").read_bytes()).hexdigest(),
                              "chunks": text["samples"], "tokens": text["tokens"]}]
    assert text["samples"] >= 3 and report["data"]["train_samples"] == 6  # generated samples counted apart
    assert f"--text {root / 'doc.txt'} " in report["command"]  # a repeatable option is spelled as given
    samples = read_samples(sorted((root / "out" / "data").glob("text-*.jsonl")))
    assert len(samples) == text["samples"] and all(s["teacher_forced"] for s in samples)
    assert json.loads((root / "out" / "data" / "text-sources.json").read_text())["sha256"] == text["sha256"]
    assert not (root / "out" / "train-state.pt").exists()  # removed once the draft is saved


def test_mixed_prompts_put_varied_prompts_in_the_generated_data(text_distilled):
    from specviz.prompts.varied import mixed_prompts

    root, report = text_distilled
    generated = read_samples(sorted((root / "out" / "data").glob("train-*.jsonl")))
    assert sorted(s["prompt"] for s in generated) == sorted(mixed_prompts(6))
    assert json.loads((root / "out" / "data" / "meta.json").read_text())["prompts"] == "mixed"


@pytest.mark.parametrize("choice", ["natural", "natural2"])
def test_natural_prompts_are_what_the_data_answers_and_the_first_sets_held_out_split_is_what_it_checks_on(tmp_path, choice):
    from specviz.prompts.natural import is_heldout, natural_prompts, split

    a = parse(["--out", str(tmp_path), *TINY, "--steps", "0", "--prompts", choice])
    assert a.func(a) == 0
    generated = read_samples(sorted((tmp_path / "data").glob("train-*.jsonl")))
    held = read_samples(sorted((tmp_path / "data").glob("val-*.jsonl")))
    assert sorted(s["prompt"] for s in generated) == sorted(natural_prompts(6, second=choice == "natural2"))
    assert held and all(is_heldout(s["prompt"]) for s in held) and not any(is_heldout(s["prompt"]) for s in generated)
    assert {s["prompt"] for s in held} <= set(split(heldout=True))  # either way, the first set's held-out prompts
    assert json.loads((tmp_path / "data" / "meta.json").read_text())["prompts"] == choice


def test_feature_text_samples_hold_the_targets_features_and_topk_and_resume_after_an_interruption(tmp_path, monkeypatch):
    import specviz.distill.feature as feature
    import specviz.distill.text as text

    tiny = tiny_llama(64)
    chunks = _tiny_chunks(5)
    feature.label_text_features(tiny, chunks, tmp_path / "whole", batch_size=2, topk=4)
    whole = feature.read_text_features(tmp_path / "whole", chunks)
    assert [s["sample"] for s in whole] == [0, 1, 2, 3, 4] and all(s["teacher_forced"] for s in whole)
    for s, c in zip(whole, chunks):  # each chunk alone, unpadded
        seq = torch.as_tensor([c["prompt_ids"] + c["output_ids"][:-1]])  # [1, P + n - 1]
        with torch.no_grad():
            f = tiny.model.model(seq).last_hidden_state[0]  # [P + n - 1, H]: the final-norm output
            z = tiny.model(seq).logits[0, len(c["prompt_ids"]) - 1:]  # [n, V] the answer positions
        assert s["features"].dtype == torch.bfloat16 and s["features"].shape == f.shape
        assert torch.allclose(s["features"].float(), f, rtol=1e-2, atol=1e-2)
        assert s["topk_ids"].tolist() == z.topk(4, dim=-1).indices.tolist() and list(s["output_ids"]) == c["output_ids"]
    items = feature.feature_tensors(whole, list(range(64)), 64)  # what training reads
    assert len(items) == 5 and all(len(x["ids"]) == x["fin"].shape[0] for x in items)

    real = text.label_batch
    monkeypatch.setattr(text, "label_batch", _dies_on_call(real, 2))
    with pytest.raises(KeyboardInterrupt):
        feature.label_text_features(tiny, chunks, tmp_path / "cut", batch_size=2, topk=4)
    assert [s["sample"] for s in feature.read_text_features(tmp_path / "cut", chunks)] == [0, 1]
    resumed = []
    monkeypatch.setattr(text, "label_batch", lambda t, cs, *a, **kw: resumed.append(len(cs)) or real(t, cs, *a, **kw))
    feature.label_text_features(tiny, chunks, tmp_path / "cut", batch_size=2, topk=4)
    assert resumed == [2, 1]  # only batches 1 and 2 (chunks 2-3 and 4) were labelled again
    cut = feature.read_text_features(tmp_path / "cut", chunks)
    assert [s["sample"] for s in cut] == [0, 1, 2, 3, 4]
    assert all(torch.equal(a["features"], b["features"]) for a, b in zip(cut, whole))
    other = [dict(c, output_ids=c["output_ids"][:-1]) for c in chunks]  # other chunks: nothing stale is read
    assert feature.read_text_features(tmp_path / "cut", other) == []


def test_a_feature_draft_trains_on_text_too(tmp_path, target):
    (tmp_path / "doc.txt").write_text("\n\n".join(f"Paragraph {i}: tea is brewed from leaves and served hot or cold."
                                                  for i in range(12)))
    a = parse(["--out", str(tmp_path / "out"), *TINY, "--steps", "10", "--kind", "feature", "--text",
               str(tmp_path / "doc.txt"), "--text-chunk-tokens", "32", "--text-batch-size", "2"])
    assert a.func(a) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["draft"]["kind"] == "feature" and report["data"]["text"]["samples"] >= 3
    assert report["data"]["train_samples"] == 6  # generated samples counted apart
    assert sorted(p.name for p in (tmp_path / "out" / "data").glob("text-*.pt"))  # feature shards, not JSONL


# ---- varied prompts (specviz.prompts.varied) --------------------------------------------------


def test_varied_heldout_prompts_share_no_slot_value_with_training_and_training_avoids_the_freeform_set():
    from specviz.prompts.varied import HELDOUT_SLOTS as VH, TRAIN_SLOTS as VT, messages, mixed_prompts, varied_prompts

    assert set(VT) == set(VH)
    for key in VT:
        assert not set(VT[key]) & set(VH[key]), key
    freeform = " ".join(FREEFORM).lower()
    assert not [v for key in VT for v in VT[key] if v.lower() in freeform]
    train, held = varied_prompts(1000), varied_prompts(300, heldout=True)
    assert len(set(train)) == 1000 and not set(train) & set(held) and not set(train) & set(FREEFORM)
    assert varied_prompts(40) == train[:40]  # prefix-stable: data generation resumes
    mixed_train, mixed_held = mixed_prompts(2000), mixed_prompts(200, heldout=True)
    assert not set(mixed_train) & set(mixed_held) and mixed_prompts(30) == mixed_train[:30]
    assert set(mixed_train[3::4]) <= set(varied_prompts(500)) and set(mixed_train[:3]) <= set(training_prompts(3))
    big = mixed_prompts(20000)  # past the ~4,000 varied prompts the rest are templated, still distinct and stable
    assert len(set(big)) == 20000 and big[:2000] == mixed_train and set(big) >= set(varied_prompts(4000))
    convs = [messages(p) for p in train if len(messages(p)) > 1]
    assert convs and all([m["role"] for m in c] == ["user", "assistant", "user"] for c in convs)
    assert messages("Is [x] a list?") == [{"role": "user", "content": "Is [x] a list?"}]


def test_multi_turn_prompts_encode_every_message_and_single_ones_as_a_run_does(target):
    from specviz.distill.data import encode_chat
    from specviz.prompts.varied import messages, varied_prompts

    tok = target.tokenizer
    conv = next(p for p in varied_prompts(50) if len(messages(p)) > 1)
    single = "Why do cats purr?"
    ids = encode_chat(tok, [single, conv])
    assert ids[0] == encode_prompts(tok, [single])[0]
    text = tok.decode(ids[1])
    for m in messages(conv):
        assert m["content"] in text
    assert text.endswith(tok.decode(encode_prompts(tok, ["x"])[0]).split("x")[-1])  # ends with the assistant cue


def test_vocab_from_keeps_a_drafts_map_and_adds_the_datas_most_emitted_tokens(distilled, target):
    import numpy as np

    from specviz.distill.command import _base_map

    out, _ = distilled
    V = target.model.config.vocab_size
    base = _base_map(str(out), VOCAB + 40, V)
    assert len(base) == VOCAB
    samples = read_samples(sorted((out / "data").glob("train-*.jsonl")))
    wider = build_vocab_map(samples, VOCAB + 40, V, always=[target.tokenizer.eos_token_id, *base])
    assert len(wider) == VOCAB + 40 and set(base) <= set(wider)
    counts = np.zeros(V, dtype=np.int64)
    for s in samples:
        np.add.at(counts, np.asarray(s["output_ids"]), 1)
        np.add.at(counts, s["topk_ids"][:, 0], 1)
    added = sorted(set(wider) - set(base))
    rest = [t for t in range(V) if t not in set(wider)]
    assert counts[added].min() >= counts[rest].max()  # the added tokens are the most emitted of the rest
    assert _base_map(str(out), VOCAB, V) == base  # the same size: the map itself, to continue training on
    with pytest.raises(SpecvizError, match="must fit"):
        _base_map(str(out), VOCAB - 1, V)


def test_init_from_a_draft_starts_from_its_layers_and_its_head_rows_by_token(distilled, draft, target):
    from specviz.distill.token import build_token_draft
    from specviz.distill.train import init_from_draft

    out, _ = distilled
    saved_map = json.loads((out / DRAFT_FILE).read_text())["vocab_map"]
    new_tokens = [t for t in range(target.model.config.vocab_size) if t not in set(saved_map)][:5]
    vmap = sorted(saved_map[::2] + new_tokens)
    fresh = build_token_draft(target, vmap, 1, [0])
    start = init_from_draft(fresh, out)
    assert (start["head_rows_kept"], start["head_rows_new"]) == (len(saved_map[::2]), 5)
    mine, theirs = fresh.state_dict(), draft.model.state_dict()
    for k in mine:
        if k != "lm_head.weight":
            assert torch.equal(mine[k].to(theirs[k].dtype), theirs[k]), k
    row = {t: i for i, t in enumerate(saved_map)}
    target_rows = target.model.get_output_embeddings().weight.float()
    for i, t in enumerate(vmap):
        want = theirs["lm_head.weight"][row[t]].float() if t in row else target_rows[t]
        assert torch.equal(mine["lm_head.weight"][i], want), t


def test_a_deeper_draft_continued_from_a_shallower_one_starts_as_that_draft(distilled, draft, target):
    """--init-from with more --layers: the saved layers below, the extra ones identities on top, so at
    step 0 the deeper draft's logits are the saved draft's."""
    from specviz.distill.token import build_token_draft
    from specviz.distill.train import init_from_draft

    saved_map = json.loads((distilled[0] / DRAFT_FILE).read_text())["vocab_map"]
    deeper = build_token_draft(target, saved_map, 2, [0, 1]).eval()
    start = init_from_draft(deeper, distilled[0])
    assert (start["layers_kept"], start["layers_added"]) == (1, 1)
    ids = torch.tensor([[1, 5, 9, 200, 33, 7]])
    with torch.no_grad():
        torch.testing.assert_close(deeper(input_ids=ids).logits, draft.model(input_ids=ids).logits.float())
    assert start["head_rows_kept"] == VOCAB


def test_init_from_a_deeper_draft_is_refused_in_one_line(distilled, draft, target, tmp_path):
    from specviz.distill.token import build_token_draft
    from specviz.distill.train import init_from_draft
    from specviz.models.distilled import save_draft

    saved_map = json.loads((distilled[0] / DRAFT_FILE).read_text())["vocab_map"]
    deeper = build_token_draft(target, saved_map, 2, [0, 1])
    save_draft(deeper, tmp_path, target, saved_map)
    with pytest.raises(SpecvizError, match="does not fit this draft.*at least its depth"):
        init_from_draft(build_token_draft(target, saved_map, 1, [0]), tmp_path)


def test_distill_init_from_with_no_steps_saves_the_drafts_own_weights(distilled, tmp_path):
    out, _ = distilled
    tiny = list(TINY)
    tiny[tiny.index("--steps") + 1] = "0"
    a = parse(["--out", str(tmp_path), "--data", str(out / "data"), "--init-from", str(out), "--vocab-from", str(out),
               *tiny])
    assert a.func(a) == 0
    assert (tmp_path / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["draft"]["init_from"]["head_rows_kept"] == VOCAB and "--init-from" in report["command"]


def test_generation_interrupted_mid_run_resumes_to_what_one_uninterrupted_run_writes(tmp_path, target, monkeypatch):
    import specviz.distill.data as data

    kwargs = dict(prompts=training_prompts(6), name="train", max_new=4, batch_size=2, topk=4, seed=3)
    (tmp_path / "whole").mkdir()
    (tmp_path / "cut").mkdir()
    data.generate_data(target, data=tmp_path / "whole", **kwargs)  # batches 0, 2 greedy, 1 sampled
    real = data.decode_batch
    monkeypatch.setattr(data, "decode_batch", _dies_on_call(real, 3))  # dies in the third batch
    with pytest.raises(KeyboardInterrupt):
        data.generate_data(target, data=tmp_path / "cut", **kwargs)
    monkeypatch.setattr(data, "decode_batch", real)
    assert sorted(_records(tmp_path / "cut", "train")) == [0, 1, 2, 3]
    data.generate_data(target, data=tmp_path / "cut", **kwargs)
    assert _records(tmp_path / "cut", "train") == _records(tmp_path / "whole", "train")
    assert len((tmp_path / "cut" / "train-0.jsonl").read_text().splitlines()) == 6


def test_extra_data_adds_another_runs_answers_and_text_to_training_and_records_their_checksum(distilled, text_distilled,
                                                                                               tmp_path):
    import hashlib

    out, _ = distilled
    root, _ = text_distilled
    extra = root / "out" / "data"
    tiny = list(TINY)
    tiny[tiny.index("--steps") + 1] = "5"
    a = parse(["--out", str(tmp_path / "d"), "--data", str(out / "data"), "--extra-data", str(extra), *tiny])
    assert a.func(a) == 0
    report = json.loads((tmp_path / "d" / "report.json").read_text())
    theirs = [*read_samples(sorted(extra.glob("train-*.jsonl"))), *read_samples(sorted(extra.glob("text-*.jsonl")))]
    shards = sorted(p for p in extra.iterdir() if p.name.startswith(("train-", "text-")))
    digest = hashlib.sha256(b"".join(p.name.encode() + b"\0" + p.read_bytes() for p in shards)).hexdigest()
    assert report["data"]["extra"] == [{"path": str(extra), "meta": json.loads((extra / "meta.json").read_text()),
                                        "samples": len(theirs), "shards": len(shards), "sha256": digest,
                                        "tokens": sum(len(s["output_ids"]) for s in theirs)}]
    assert report["data"]["train_samples"] == 6  # this run's own answers, counted apart
    assert f"--extra-data {extra} " in report["command"]
    vmap = set(json.loads((tmp_path / "d" / DRAFT_FILE).read_text())["vocab_map"])
    emitted = {int(t) for s in theirs for t in [*s["topk_ids"][:, 0], *([] if s.get("teacher_forced") else s["output_ids"])]}
    only_theirs = emitted - set(json.loads((out / DRAFT_FILE).read_text())["vocab_map"])
    assert only_theirs and only_theirs <= vmap  # what the target emits on them reached the map: they reached training


def test_extra_data_from_this_runs_own_folder_or_other_settings_is_refused_in_one_line(distilled, tmp_path):
    out, _ = distilled
    other = tmp_path / "other"
    other.mkdir()
    meta = json.loads((out / "data" / "meta.json").read_text())
    (other / "meta.json").write_text(json.dumps({**meta, "dtype": "bfloat16"}))
    for folder, says in [(out / "data", "this run's own --data folder"), (other, "'dtype': ('bfloat16', 'float32')"),
                         (tmp_path, "no meta.json")]:
        a = parse(["--out", str(tmp_path / "d"), "--data", str(out / "data"), "--extra-data", str(folder), *TINY])
        with pytest.raises(SpecvizError, match=None) as e:
            a.func(a)
        assert says in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "d" / "model.safetensors").exists()
