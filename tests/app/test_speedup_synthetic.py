"""The Speedup page's k*(b) at a 7B scale: it shows a synthetic (random-weight) calibration next to the
small pair when one exists, in the cache or in the GPU script's results. The record here is made by
the real code path (specviz.measure.calibrate.calibrate_synthetic) on tiny shapes on the CPU."""

import os
import shutil

import pytest
import locations

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from specviz.analysis import analytic as an, costs  # noqa: E402
from specviz.measure.calibrate import calibrate_synthetic  # noqa: E402

APP = os.path.join(str(locations.ROOT), "app.py")


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    """A synthetic calibration file made by calibrate_synthetic (tiny shapes, CPU), in a scratch cache."""
    cache = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setattr(costs, "cache_dir", lambda: cache)
    cal, path = calibrate_synthetic("synthetic:tiny", "synthetic:tiny-draft", "cpu", "float32",
                                    batch_sizes=(1, 2, 4), k_max=3, prefix_len=8)
    mp.undo()
    return path, cal


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """The page's two places to look, both empty scratch folders: (cache, results)."""
    cache, results = tmp_path / "cache", tmp_path / "results"
    (cache / "calibration").mkdir(parents=True)
    results.mkdir()
    monkeypatch.setattr(costs, "cache_dir", lambda: cache)
    monkeypatch.setattr(costs, "RESULTS_DIR", results)
    return cache, results


def speedup_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("pages/speedup.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_gpu_runs_record_is_found_once_in_its_results_folder_and_the_cache(record, folders):
    path, cal = record
    cache, results = folders
    shutil.copy(path, cache / "calibration" / path.name)
    (results / "gpu-x").mkdir()
    shutil.copy(path, results / "gpu-x" / "calibration-synthetic-tiny.json")
    found = costs.synthetic_calibrations()
    assert len(found) == 1 and found[0][1].target == "synthetic:tiny"
    assert (found[0][1].created, found[0][1].target_cost) == (cal.created, cal.target_cost)


def test_without_a_synthetic_record_the_page_says_how_to_make_one(folders):
    at = speedup_page()
    assert any("No synthetic calibration yet" in c.value for c in at.caption)
    assert "optimal_k_synthetic" not in {el.key for el in at.get("plotly_chart")}


def test_page_shows_k_star_of_the_synthetic_record_next_to_the_small_pair_at_the_sliders_alpha(record, folders):
    path, cal = record
    cache, results = folders
    (results / "gpu-x").mkdir()
    shutil.copy(path, results / "gpu-x" / "calibration-synthetic-tiny.json")
    at = speedup_page()
    at.slider(key="sp_alpha").set_value(0.9).run()
    assert "optimal_k_synthetic" in {el.key for el in at.get("plotly_chart")}
    assert at.selectbox(key="sp_synth").value.startswith("synthetic:tiny + synthetic:tiny-draft (cpu, float32")
    assert any("SYNTHETIC: random weights" in c.value and "0.900" in c.value for c in at.caption)
    table = next(m.value for m in at.markdown if m.value.startswith("| b | k* small pair"))
    for b in (1, 4, 8, 16, 32, 64):
        c = cal.costs(b)
        k = an.optimal_k(b, 0.9, c, 16)
        s = an.speedup_batch(b, k, 0.9, c.target, c.draft, c.overhead, c.regular_overhead)
        assert f"| {k} | {s:.2f}x |" in next(r for r in table.splitlines() if r.startswith(f"| {b} |"))
