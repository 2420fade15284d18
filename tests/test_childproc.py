"""specviz.childproc: a child interpreter never imports a module planted in the working directory."""

from __future__ import annotations

import subprocess
import sys

from specviz.childproc import python_argv


def test_a_torch_py_in_the_working_directory_is_not_what_the_child_imports(tmp_path):
    (tmp_path / "torch.py").write_text("raise SystemExit('the planted torch.py ran')\n")
    plain = subprocess.run([sys.executable, "-c", "import torch"], cwd=tmp_path, capture_output=True, text=True)
    assert "planted" in plain.stderr  # what the unsafe path does
    safe = subprocess.run(python_argv("-c", "import torch; print(torch.__file__)"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert safe.returncode == 0 and str(tmp_path) not in safe.stdout, safe.stderr


def test_a_module_run_with_m_keeps_its_arguments_and_not_the_working_directory(tmp_path):
    (tmp_path / "json.py").write_text("raise SystemExit('the planted json.py ran')\n")
    out = subprocess.run(python_argv("-m", "json.tool", "--sort-keys"), cwd=tmp_path, input='{"b": 1, "a": 2}',
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.index('"a"') < out.stdout.index('"b"'), out.stderr


def test_the_decode_worker_starts_from_a_folder_with_a_planted_torch(tmp_path, monkeypatch):
    from specviz.device.worker import Worker

    (tmp_path / "torch.py").write_text("raise SystemExit('the planted torch.py ran')\n")
    monkeypatch.chdir(tmp_path)
    w = Worker(threads=1)
    try:
        assert w.alive()
        w.send("quit")
        w.proc.wait(60)
        assert w.proc.returncode == 0  # it imported the real torch (the planted one exits 1)
    finally:
        if w.alive():
            w.close()
