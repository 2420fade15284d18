"""``specviz tune`` end to end: on a trace made by ``specviz run --draft ngram`` with the packaged default model,
on a (local, real HTTP) server that serves a real vLLM 0.32.0's captured /metrics, and its one-line errors."""

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specviz.analysis.acceptstats import counts_from_vllm, position_counts
from specviz.analysis.engineconfig import batch_ranges
from specviz.analysis.trace import load_json
from specviz.analysis.tune import Acceptance, k_by_batch, recommend, roofline_costs
from specviz.cli import main
from specviz.common import EXIT_BAD_INPUT, EXIT_MISSING

from metricsserver import MetricsServer, captured
import locations

ENTERED = ["--target-step-ms", "20", "--draft-cost-ratio", "0.02"]


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    """A real trace: the packaged model, n-gram drafts, 16 new tokens, two rows (repetitive prompts, so the
    n-grams match)."""
    out = tmp_path_factory.mktemp("tune") / "trace.json"
    subprocess.run([sys.executable, "-m", "specviz", "run", "--draft", "ngram", "--max-new-tokens", "16",
                    "--batch-size", "2", "--draft-length", "4", "--out", str(out),
                    "--prompt", "Repeat exactly: the cat sat on the mat. The cat sat on the mat.",
                    "--prompt", "Count from one to twenty in words."], check=True, capture_output=True, timeout=600)
    return out


def run(capsys, *args):
    code = main(["tune", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_tune_prints_the_table_and_the_vllm_config_as_one_json_object(trace_path, capsys):
    code, out, err = run(capsys, "--trace", trace_path, *ENTERED, "--vllm-version", "0.32.0", "--batch-sizes", "1,4,16")
    assert code == 0, err
    lines = out.splitlines()
    table = lines.index(next(ln for ln in lines if ln.split()[:2] == ["B", "k"]))
    assert [ln.split()[0] for ln in lines[table + 1:table + 4]] == ["1", "4", "16"]
    config = json.loads(lines[lines.index("vllm settings:") + 1])  # one line, one JSON object
    assert config["method"] == "ngram" and config["prompt_lookup_max"] == 3
    schedule = config.get("num_speculative_tokens_per_batch_size", [[1, 16, config["num_speculative_tokens"]]])
    assert schedule[0][0] == 1 and config["num_speculative_tokens"] == max(k for _, _, k in schedule)
    assert lines[lines.index("vllm settings:") + 2].startswith("# specviz tune: ")


def test_the_json_answer_is_what_the_analysis_functions_give_for_the_trace(trace_path, capsys):
    code, out, err = run(capsys, "--trace", trace_path, *ENTERED, "--batch-sizes", "1,4,16", "--json")
    assert code == 0, err
    ans = json.loads(out)
    counts = position_counts(load_json(trace_path)["steps"])
    rc = roofline_costs(0.02, 0.02, 64)
    expected = recommend(Acceptance.from_counts(counts), lambda b: rc, [1, 4, 16])
    assert [c["k"] for c in ans["recommendations"]] == [c.k for c in expected]
    assert [c["goodput"] for c in ans["recommendations"]] == pytest.approx([c.goodput for c in expected])
    assert ans["statistics"]["rounds"] == counts.rounds > 0
    assert ans["oracle"]["oracle"] >= ans["oracle"]["best_fixed"] and ans["oracle"]["oracle"] >= ans["oracle"]["as_run"]
    assert ans["serve"]["batch_size"] == 2  # the trace's batch size


@pytest.mark.parametrize("engine,first", [("sglang", "--speculative-algorithm NGRAM"), ("llamacpp", "--draft-max"),
                                          ("transformers", '{"prompt_lookup_num_tokens"')])
def test_each_engine_gets_its_own_form(trace_path, capsys, engine, first):
    code, out, err = run(capsys, "--trace", trace_path, "--target-step-ms", "20", "--draft-cost-ratio", "0",
                         "--engine", engine)
    assert code == 0, err
    assert position_counts(load_json(trace_path)["steps"]).successes > 0  # free drafts that are sometimes accepted:
    after = out.split(f"{engine} settings:\n", 1)[1].splitlines()  # speculation pays, and the settings say how
    assert after[0].startswith(first) and after[1].startswith("# specviz tune: ")


def one_line_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_trace_without_speculative_steps_is_refused_in_one_line(trace_path, tmp_path, capsys):
    trace = load_json(trace_path)  # as a regular run writes it: k = 0, nothing drafted
    for s in trace["steps"]:
        s["k"] = 0
        for r in s["rows"]:
            r.update(drafted=0, accepted=0)
    regular = tmp_path / "regular.json"
    regular.write_text(json.dumps(trace))
    code, _, err = run(capsys, "--trace", regular, *ENTERED)
    assert code == EXIT_BAD_INPUT and "has no speculative steps" in one_line_error(err)


def test_a_missing_trace_and_missing_costs_exit_as_missing(trace_path, tmp_path, capsys, monkeypatch):
    code, _, err = run(capsys, "--trace", tmp_path / "nope.json", *ENTERED)
    assert code == EXIT_MISSING and "no such file or folder" in one_line_error(err)
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "empty-cache"))  # no calibration of the pair anywhere
    code, _, err = run(capsys, "--trace", trace_path)
    assert code == EXIT_MISSING and "no costs for this pair" in one_line_error(err)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_server_is_one_line_and_missing(capsys):
    code, _, err = run(capsys, "--metrics-url", f"127.0.0.1:{free_port()}", *ENTERED, "--window", "0.1")
    assert code == EXIT_MISSING and "cannot reach" in one_line_error(err)


def after_first_read(server: MetricsServer, text: str) -> None:
    """Serve ``text`` at /metrics once the first read of it was answered: the window's second read sees it."""
    def watch():
        deadline = time.monotonic() + 60
        while "/metrics" not in server.requests and time.monotonic() < deadline:
            time.sleep(0.005)
        server.metrics(text)
    threading.Thread(target=watch, daemon=True).start()


def test_a_vllm_servers_metrics_over_a_window_give_its_schedule(capsys):
    with MetricsServer({"/version": (200, "application/json", '{"version": "0.32.0"}')}) as server:
        server.metrics(captured("0.32.0", "before"))
        after_first_read(server, captured("0.32.0", "after"))
        code, out, err = run(capsys, "--metrics-url", server.url, *ENTERED, "--window", "0.6", "--batch-sizes", "1,8,64",
                             "--json")
    assert code == 0, err
    ans = json.loads(out)
    assert ans["source"]["drafts"] == 23 and ans["source"]["k"] == 4  # the capture: 23 drafts of 4 tokens
    assert ans["statistics"]["acceptance_per_position"] == pytest.approx([11 / 23, 10 / 23, 6 / 23, 5 / 23])
    assert ans["recommendations"][0]["interval"] is not None  # counted: an interval from 23 drafts
    # the version came from /version (0.32.0): the schedule over batch sizes 1..64, k falling past the knee
    acc = Acceptance.from_counts(counts_from_vllm(23, (11, 10, 6, 5)))
    rc = roofline_costs(0.02, 0.02, 64)
    schedule = batch_ranges(k_by_batch(acc, lambda b: rc, 64))
    value = json.loads(ans["settings"]["text"])
    assert value == {"method": "ngram", "prompt_lookup_max": 3, "prompt_lookup_min": 1, "num_speculative_tokens": 4,
                     "num_speculative_tokens_per_batch_size": schedule}
    assert schedule[0] == [1, schedule[0][1], 4] and schedule[-1][2] == 0  # all 4 drafted at batch 1; off at 64
    assert any("settings assume ngram" in n for n in ans["notes"])


def calibration_record():
    from specviz.analysis.analytic import CostModel
    from specviz.analysis.costs import Calibration

    return Calibration(target="t", draft="d", device="cpu", dtype="torch.bfloat16",
                       target_cost=CostModel(0.002, 0.018, 0.0003), draft_cost=CostModel(0.0005, 0.0005, 0.00002),
                       overhead={"1": 0.001, "8": 0.002}, residuals={}, samples={}, created="2026-01-01T00:00:00Z")


def test_a_sweep_folder_gives_its_median_alpha_calibration_and_measured_best_k(tmp_path, capsys):
    import csv

    from specviz.analysis.tune import recommend_k

    cal = calibration_record()
    cells = [{"batch_size": b, "draft_length": k, "alpha": a, "measured_speedup": 1.0}
             for b, k, a in [(1, 2, 0.5), (1, 4, 0.7), (8, 2, 0.6), (8, 4, 0.8)]]
    with open(tmp_path / "sweep.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(cells[0]))
        w.writeheader()
        w.writerows(cells)
    (tmp_path / "sweep.json").write_text(json.dumps({
        "calibration": cal.to_json(), "config": {"draft": "ngram"},
        "summary": {"per_batch_size": {"1": {"measured_best_k": 4}, "8": {"measured_best_k": 2}}}}))
    code, out, err = run(capsys, "--sweep", tmp_path, "--batch-sizes", "1,8", "--json")
    assert code == 0, err
    ans = json.loads(out)
    assert ans["acceptance"]["alpha"] == pytest.approx(0.65) and not ans["acceptance"]["counted"]
    assert ans["measured_best"] == {"1": 4, "8": 2} and ans["serve"]["batch_size"] == 8
    assert [c["interval"] for c in ans["recommendations"]] == [None, None]
    assert [c["k"] for c in ans["recommendations"]] == [recommend_k(Acceptance.from_alpha(0.65), cal.costs(b), b).k
                                                        for b in (1, 8)]
    assert ans["costs"].startswith("the pair's calibration (t + d, cpu, torch.bfloat16")


def test_a_calibration_file_from_another_machine_sets_the_costs(trace_path, tmp_path, capsys):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(calibration_record().to_json()))
    code, out, err = run(capsys, "--trace", trace_path, "--calibration", path, "--batch-sizes", "1", "--json")
    assert code == 0, err
    ans = json.loads(out)
    expected = recommend(Acceptance.from_counts(position_counts(load_json(trace_path)["steps"])),
                         calibration_record().costs, [1])
    assert ans["costs"].startswith(f"calibration {path}") and ans["recommendations"][0]["k"] == expected[0].k


def test_tune_piped_into_head_ends_quietly_without_a_traceback(trace_path):
    """The reader of the pipe leaves early (`| head -1` after its line): no BrokenPipeError traceback,
    and the exit status a shell tool killed by SIGPIPE gives."""
    import signal

    from specviz.common import EXIT_SIGNAL_BASE

    cmd = [sys.executable, "-m", "specviz", "tune", "--trace", str(trace_path), *ENTERED, "--engine", "vllm"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0) as proc:
        proc.stdout.close()  # the reader is gone before tune writes (it is still importing torch)
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert code == EXIT_SIGNAL_BASE + signal.SIGPIPE
