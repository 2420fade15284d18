"""Fixtures of the vLLM peer tests: a model folder the command line accepts and tests/fakevllm.py in
vLLM's place."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import locations

FAKE = locations.TESTS / "fakevllm.py"


@pytest.fixture
def model_dir(tmp_path):
    """A Hugging Face-layout folder (config.json only): enough for the command line, the fake loads nothing."""
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 4096}))
    return d


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """SPECVIZ_VLLM_PYTHON -> a script that runs tests/fakevllm.py; returns (set mode, read its record)."""
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\nshift 2\nexec {sys.executable} {FAKE} \"$@\"\n")  # drops "-m vllm.entrypoints..."
    exe.chmod(0o755)
    record = tmp_path / "record.json"
    monkeypatch.setenv("SPECVIZ_VLLM_PYTHON", str(exe))
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(record))

    class Fake:
        def mode(self, m):
            monkeypatch.setenv("FAKE_VLLM_MODE", m)

        def argv(self):
            return json.loads(record.read_text())["argv"]

        def child_pid(self):
            return int(Path(str(record) + ".child").read_text())

    return Fake()
