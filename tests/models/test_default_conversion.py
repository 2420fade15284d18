"""The packaged GGUF is converted to safetensors once per cache folder, whoever asks: processes that
convert at once take turns on a lock file and end with one good copy; a killed conversion's
temporary folder does not stay forever."""

import os
import subprocess
import sys

import pytest

from specviz.common import SpecvizError
from specviz.models import loading
from specviz.models.loading import DEFAULT_NAME
import locations

ROOT = str(locations.ROOT)
# prints where the model is and whether this process converted it (read the GGUF) or used the other's copy
CONVERT = """
import transformers
from specviz.models.loading import _convert_default
read = []
real = transformers.AutoModelForCausalLM.from_pretrained
transformers.AutoModelForCausalLM.from_pretrained = lambda *a, **kw: (read.append(1), real(*a, **kw))[1]
print(_convert_default(), "converted" if read else "waited", flush=True)
"""


@pytest.mark.slow  # two real conversions' worth of work (~15-30 s each on a 2-core CPU)
def test_two_processes_converting_the_default_model_at_once_both_get_one_good_copy(tmp_path):
    from safetensors import safe_open
    from transformers import AutoConfig

    env = {**os.environ, "SPECVIZ_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", CONVERT], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, results):
        assert p.returncode == 0, err[-2000:]
    said = sorted(out.split() for out, _ in results)
    # one converted; the other, started at the same moment, waited on the lock and used that copy
    assert said == [[str(tmp_path / DEFAULT_NAME), "converted"], [str(tmp_path / DEFAULT_NAME), "waited"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".{DEFAULT_NAME}.lock", DEFAULT_NAME]  # no temp folders
    model = tmp_path / DEFAULT_NAME
    assert AutoConfig.from_pretrained(model).num_hidden_layers == 30
    with safe_open(str(model / "model.safetensors"), "pt") as f:
        assert f.get_tensor("model.embed_tokens.weight").shape == (49152, 576)


def test_a_killed_conversions_temp_folder_is_removed_and_a_running_ones_kept(tmp_path, monkeypatch):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / f"{DEFAULT_NAME}.tmp{dead.pid}"
        running = tmp_path / f"{DEFAULT_NAME}.tmp{live.pid}"
        for d in (stale, running):
            d.mkdir()
            (d / "model.safetensors").write_bytes(b"half")
        monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))

        def wheel_missing():  # stop right after the clean-up: no conversion needed to see it
            raise SpecvizError("the packaged default model is missing")

        monkeypatch.setattr(loading, "default_gguf_path", wheel_missing)
        with pytest.raises(SpecvizError, match="missing"):
            loading._convert_default()
        assert not stale.exists() and running.is_dir()
    finally:
        live.kill()
        live.wait()
