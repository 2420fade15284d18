"""A distilled draft is saved whole: a real Ctrl-C (SIGINT to a child process) at any moment of a
save over an existing draft leaves the previous draft byte for byte, or the complete new one; never
new weights beside the old vocabulary map, which would load and draft the wrong tokens."""

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakes import tiny_llama
from specviz.models.distilled import DRAFT_FILE, load_distilled_draft
import locations

TESTS = str(locations.TESTS)

# The child saves one of two tiny drafts (same shapes, different weights and vocabulary maps) over
# `out` when told to, each file write slowed down so a signal can land between any two of them.
CHILD = r"""
import signal, sys, time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, sys.argv[1])
from fakes import tiny_llama
from specviz.models.distilled import build_draft, draft_config, save_draft

out, refs = Path(sys.argv[2]), Path(sys.argv[3])
target = tiny_llama(64)
drafts = {}
for name, seed, vmap in (("old", 1, list(range(0, 64, 2))), ("new", 2, list(range(1, 64, 2)))):
    torch.manual_seed(seed)
    emb = nn.Embedding.from_pretrained(target.model.get_input_embeddings().weight.detach().clone(), freeze=True)
    drafts[name] = (build_draft(draft_config(target.model.config, 1), emb, vmap).float(), vmap)
    save_draft(drafts[name][0], refs / name, target, drafts[name][1])
save_draft(drafts["old"][0], out, target, drafts["old"][1])

import json as _json
import safetensors.torch
import transformers

def slowed(fn):
    def run(*a, **kw):
        r = fn(*a, **kw)
        time.sleep(0.15)
        return r
    return run

safetensors.torch.save_file = slowed(safetensors.torch.save_file)
transformers.PretrainedConfig.to_json_file = slowed(transformers.PretrainedConfig.to_json_file)
_json.dumps = slowed(_json.dumps)  # the draft's specviz_draft.json

saving = False

def on_sigint(signum, frame):
    if saving:  # only a save is interrupted: the rest of the protocol must not be
        raise KeyboardInterrupt

signal.signal(signal.SIGINT, on_sigint)
print("ready", flush=True)
for line in sys.stdin:
    name = line.strip()
    if name == "quit":
        break
    try:
        saving = True
        print("saving", flush=True)
        save_draft(drafts[name][0], out, target, drafts[name][1])
        saving = False
        print("saved", flush=True)
    except KeyboardInterrupt:
        saving = False
        print("interrupted", flush=True)
"""


def _draft_files(folder: Path) -> dict:
    return {n: (folder / n).read_bytes() for n in ("config.json", "model.safetensors", DRAFT_FILE)}


def _line(proc, timeout: float) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the child did not answer"
    return proc.stdout.readline().strip()


def test_a_save_interrupted_by_a_real_sigint_at_any_moment_leaves_the_old_draft_or_the_whole_new_one(tmp_path):
    out, refs = tmp_path / "draft", tmp_path / "refs"
    child = subprocess.Popen([sys.executable, "-c", CHILD, TESTS, str(out), str(refs)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(TESTS))
    try:
        assert _line(child, 180) == "ready"
        want = {name: _draft_files(refs / name) for name in ("old", "new")}
        assert want["old"]["model.safetensors"] != want["new"]["model.safetensors"]
        (out / "report.json").write_text('{"kept": true}')  # a distill run's other files share the folder
        (out / "data").mkdir()
        (out / "data" / "train-0.jsonl").write_text('{"sample": 0}\n')
        target = tiny_llama(64)
        now, outcomes = "old", []
        # the slowed save takes ~0.5 s: signals from its first instant to past its end
        for delay in (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.8, 1.5):
            other = "new" if now == "old" else "old"
            child.stdin.write(other + "\n")
            child.stdin.flush()
            assert _line(child, 60) == "saving"
            time.sleep(delay)
            child.send_signal(signal.SIGINT)
            said = _line(child, 60)
            assert said in ("saved", "interrupted")
            got = _draft_files(out)
            assert got in (want[now], want[other]), f"a signal {delay} s into the save left a mixed draft"
            if said == "saved":
                assert got == want[other]
            now = other if got == want[other] else now
            outcomes.append(said)
            loaded = load_distilled_draft(out, target)
            assert loaded.model.lm_head.vocab_map.tolist() == json.loads(want[now][DRAFT_FILE])["vocab_map"]
            assert (out / "report.json").read_text() == '{"kept": true}'
            assert (out / "data" / "train-0.jsonl").read_text() == '{"sample": 0}\n'
            assert sorted(p.name for p in tmp_path.iterdir()) == ["draft", "refs"]  # no half-made folder left
        assert "interrupted" in outcomes and "saved" in outcomes  # the signals did land mid-save, and after it
        child.stdin.write("quit\n")
        child.stdin.flush()
        assert child.wait(60) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_draft_folder_left_aside_by_a_killed_save_comes_back(tmp_path, monkeypatch):
    """Where two folders cannot be exchanged in one step the old one is renamed aside for a moment; a
    process killed in that moment leaves it there, and the next save puts it back before writing."""
    from specviz import wholefolder

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    dest = tmp_path / "draft"
    aside = tmp_path / f".draft.old{dead.pid}-1-0123abcd"
    aside.mkdir()
    (aside / DRAFT_FILE).write_text("{}")
    (aside / "report.json").write_text("kept")
    stale_new = tmp_path / f".draft.new{dead.pid}-1-89abcdef"
    stale_new.mkdir()
    monkeypatch.setattr(wholefolder, "_exchange", lambda a, b: False)  # as on a system without it
    with wholefolder.replaced_whole(dest) as new:
        (new / DRAFT_FILE).write_text('{"new": 1}')
    assert (dest / DRAFT_FILE).read_text() == '{"new": 1}' and (dest / "report.json").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft"]


def test_an_exception_while_writing_leaves_the_folder_as_it_was(tmp_path):
    from specviz.wholefolder import replaced_whole

    dest = tmp_path / "draft"
    with replaced_whole(dest) as new:
        (new / "a").write_text("old")
    with pytest.raises(OSError):
        with replaced_whole(dest) as new:
            (new / "a").write_text("new")
            raise OSError(28, "No space left on device")
    assert [p.name for p in tmp_path.iterdir()] == ["draft"] and (dest / "a").read_text() == "old"


def _ctrl_c_inside(fn):
    """``fn`` that sends this process a Ctrl-C as it starts, the first time it is called."""
    sent = []

    def wrapped(*a, **kw):
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        return fn(*a, **kw)
    return wrapped


@pytest.mark.parametrize("where", ["_exchange", "_link_missing", "rmtree"])
def test_a_ctrl_c_during_the_exchange_or_the_clean_up_acts_after_them_and_leaves_nothing_beside(
        tmp_path, monkeypatch, ctrl_c_raises, where):
    from specviz import wholefolder

    dest = tmp_path / "draft"
    with wholefolder.replaced_whole(dest) as new:
        (new / "a").write_text("old")
    (dest / "report.json").write_text("kept")
    if where == "rmtree":
        monkeypatch.setattr(wholefolder.shutil, "rmtree", _ctrl_c_inside(wholefolder.shutil.rmtree))
    else:
        monkeypatch.setattr(wholefolder, where, _ctrl_c_inside(getattr(wholefolder, where)))
    with pytest.raises(KeyboardInterrupt):
        with wholefolder.replaced_whole(dest) as new:
            (new / "a").write_text("new")
    assert (dest / "a").read_text() == "new" and (dest / "report.json").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft"]


def test_a_ctrl_c_as_the_new_folder_is_made_stops_before_the_callers_block_and_leaves_nothing(
        tmp_path, monkeypatch, ctrl_c_raises):
    from specviz import wholefolder

    dest = tmp_path / "draft"
    with wholefolder.replaced_whole(dest) as new:
        (new / "a").write_text("old")
    monkeypatch.setattr(wholefolder.shutil, "copymode", _ctrl_c_inside(wholefolder.shutil.copymode))
    ran = []
    with pytest.raises(KeyboardInterrupt):
        with wholefolder.replaced_whole(dest) as new:
            ran.append(True)
    assert not ran and (dest / "a").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft"]
