"""The tuning loop against a server: load on it (specviz.peers.bench.Load), ``specviz tune
--metrics-url`` reading it, and the config tune writes served as given (``vllm serve
--speculative-config``). The load's logic runs against tests/fakevllm.py; the whole loop against the
real vLLM server is opt-in (marker ``vllm``, SPECVIZ_VLLM_TESTS=1, after ``bash setup.sh --vllm``).
The speed claim, tune's config against vLLM's default k, is bench/vllm_tune_loop.py's, recorded in
BENCHMARKS.md: a test here checks the mechanics, not the speed."""

from __future__ import annotations

import json
import os
import time

import pytest

from specviz.peers import metrics
from specviz.peers import server as srv
from specviz.peers.bench import Load, vllm_round
import locations


def test_load_sends_round_after_round_until_its_block_ends(model_dir, fake):
    fake.mode("serve")
    with srv.VllmServer(srv.ServeConfig(target=str(model_dir))) as server:
        with Load(server.url, "m", [[1, 2], [3]], 3, 2) as load:
            deadline = time.monotonic() + 20
            while load.rounds < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        rounds = load.rounds
        time.sleep(0.3)
        assert load.rounds == rounds >= 2 and not load.errors  # nothing more is sent once the block ends


def test_load_keeps_the_error_that_stopped_it():
    port = srv.free_port()  # nothing listens there
    with Load(f"http://127.0.0.1:{port}", "m", [[1]], 2, 1) as load:
        load.thread.join(10)
    assert load.rounds == 0 and len(load.errors) == 1 and "Connection refused" in str(load.errors[0])


# ---- the real server (opt-in) ------------------------------------------------------------------------------

real = pytest.mark.skipif(
    not os.environ.get("SPECVIZ_VLLM_TESTS") or not (locations.ROOT / ".venv-vllm" / "bin" / "python").is_file(),
    reason="the real vLLM server test is opt-in: bash setup.sh --vllm, then SPECVIZ_VLLM_TESTS=1")


@pytest.mark.vllm
@real
def test_tune_reads_a_loaded_real_server_and_the_config_it_writes_is_served_as_given(capsys):
    from transformers import AutoTokenizer

    from specviz.cli import main
    from specviz.models.loading import encode_prompts
    from specviz.prompts.sets import prompt_set

    ids = encode_prompts(AutoTokenizer.from_pretrained(srv.model_path("default")), prompt_set("copy")[:4])
    model = srv.served_name("default")
    base = srv.ServeConfig(compile=False, max_num_seqs=4)
    with srv.VllmServer(srv.ServeConfig(**{**vars(base), "draft": "ngram", "draft_length": 4})) as server:
        vllm_round(server.url, model, ids, 4, 4)  # the first requests allocate
        with Load(server.url, model, ids, 48, 4) as load:
            assert main(["tune", "--metrics-url", server.url, "--window", "10", "--engine", "vllm", "--draft", "ngram",
                         "--target-step-ms", "30", "--draft-cost-ratio", "0", "--knee-tokens", "32", "--json"]) == 0
        assert not load.errors and load.rounds >= 1
    ans = json.loads(capsys.readouterr().out)
    src, per_position = ans["source"], ans["statistics"]["acceptance_per_position"]
    assert src["kind"] == "vllm" and src["k"] == 4 and src["drafts"] > 0 and 1 <= src["median_running"] <= 4
    assert len(per_position) == 4 and all(1 >= a >= b >= 0 for a, b in zip(per_position, per_position[1:]))
    text = ans["settings"]["text"]
    if not text:  # tune says off: the explanation says so, and there is nothing to serve
        assert "leave --speculative-config out" in ans["settings"]["explanation"]
        return
    given = srv.parse_speculative_config(text)
    assert given["method"] == "ngram" and given["prompt_lookup_max"] == srv.NGRAM_MAX
    with srv.VllmServer(srv.ServeConfig(**{**vars(base), "speculative_config": text})) as tuned:
        before = metrics.scrape(tuned.url)
        vllm_round(tuned.url, model, ids, 32, 4)
        d = metrics.delta(before, metrics.scrape(tuned.url))
    assert d.has_spec and d.drafts > 0 and d.k == given["num_speculative_tokens"]
