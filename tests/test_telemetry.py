"""Telemetry: the sampler on CPU, its NVML path with a fake pynvml, MBU/MFU, measured peaks."""

import math
import sys
import time
import types

import pytest
import torch

from specviz import telemetry
from specviz.telemetry import Sampler


def busy(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def fake_pynvml(fail_init=False, fail_after=None):
    """A stand-in for nvidia-ml-py: 42% kernel-busy, 3 GiB used; counts shutdowns."""
    mod = types.SimpleNamespace(shutdowns=0, reads=0)

    def init():
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def utilization(handle):
        mod.reads += 1
        if fail_after is not None and mod.reads > fail_after:
            raise RuntimeError("GPU is lost")
        return types.SimpleNamespace(gpu=42, memory=17)

    def shutdown():
        mod.shutdowns += 1

    mod.nvmlInit = init
    mod.nvmlShutdown = shutdown
    mod.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)
    mod.nvmlDeviceGetHandleByUUID = lambda u: ("gpu", u)
    mod.nvmlDeviceGetUtilizationRates = utilization
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=3 << 30, total=80 << 30)
    return mod


# --- sampler on CPU -----------------------------------------------------------------------------


def test_psutil_sampler_records_cpu_samples_with_relative_times():
    t0 = time.perf_counter()
    sampler = Sampler(interval_s=0.02, source="psutil").start(t0)
    deadline = time.perf_counter() + 10.0  # busy until 4 samples are in (a loaded machine delays the thread)
    while len(sampler.samples) < 4 and time.perf_counter() < deadline:
        busy(0.05)
    samples = sampler.stop()
    assert sampler.source == "psutil"
    assert len(samples) >= 4
    assert {"t", "util_pct", "mem_bytes", "source", "proc_cpu_pct", "sys_cpu_pct"} <= set(samples[0])
    ts = [s["t"] for s in samples]
    assert ts == sorted(ts) and 0 < ts[0] and ts[-1] < time.perf_counter() - t0
    assert all(s["source"] == "psutil" and s["mem_bytes"] > 0 and 0 <= s["util_pct"] for s in samples)
    assert max(s["util_pct"] for s in samples) > 0  # the busy loop shows up
    assert all(s["util_pct"] <= 100.0 for s in samples)


def test_psutil_reading_right_after_another_stays_within_all_cores():
    """A reading 1 ms after the previous one divided 10 ms CPU-time ticks by 1 ms of wall
    (the ~4000% the Live page showed on a 2-core machine): it must stay within 0..100%."""
    from specviz.telemetry import _PsutilProbe

    probe = _PsutilProbe()
    readings = []
    for _ in range(50):
        busy(0.003)
        readings.append(probe.read()["util_pct"])
    assert all(0.0 <= r <= 100.0 for r in readings), max(readings)
    assert max(readings) > 0  # the busy loop shows up once a window is long enough


def test_sampler_as_context_manager_and_short_runs_get_a_sample():
    with Sampler(interval_s=10.0, source="psutil") as sampler:
        pass
    assert len(sampler.samples) == 1  # the one taken at stop


def test_sampler_t_is_relative_to_the_given_t0():
    sampler = Sampler(interval_s=1.0, source="psutil", t0=time.perf_counter() - 100.0)
    with sampler:
        pass
    assert sampler.samples[0]["t"] >= 100.0


def test_sampler_rebase_moves_t_to_a_later_origin():
    sampler = Sampler(interval_s=1.0, source="psutil", t0=100.0)
    sampler._samples.append({"t": 5.0})  # recorded at perf_counter 105
    sampler.rebase(103.0)
    assert sampler.samples == [{"t": 2.0}] and sampler.t0 == 103.0


def test_sampler_device_picks_the_source(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert Sampler(device="cpu").requested_source == "psutil"  # a CPU run on a GPU machine
    gpu = Sampler(device="cuda:1")
    assert (gpu.requested_source, gpu.gpu_index) == ("nvml", 1)
    with gpu:
        pass
    assert gpu.source == "nvml"


def test_sampler_cannot_start_twice():
    sampler = Sampler(interval_s=1.0, source="psutil").start()
    with pytest.raises(RuntimeError):
        sampler.start()
    sampler.stop()
    assert sampler.stop() == sampler.samples  # stopping again is harmless


# --- NVML path and graceful degradation ---------------------------------------------------------


def test_missing_pynvml_degrades_to_psutil(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    with Sampler(interval_s=1.0, source="auto") as sampler:
        pass
    assert sampler.source == "psutil" and sampler.samples[0]["source"] == "psutil"


def test_nvml_init_failure_degrades_to_psutil(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail_init=True))
    with Sampler(interval_s=1.0, source="nvml") as sampler:
        pass
    assert sampler.source == "psutil"


def test_nvml_sampler_reports_kernel_busy_and_memory(monkeypatch):
    fake = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with Sampler(interval_s=0.01, source="auto") as sampler:
        time.sleep(0.05)
    assert sampler.source == "nvml"
    sample = sampler.samples[-1]
    assert sample["source"] == "nvml" and sample["util_pct"] == 42.0 and sample["mem_bytes"] == 3 << 30
    assert sample["mem_busy_pct"] == 17.0 and sample["mem_total_bytes"] == 80 << 30
    assert fake.shutdowns == 1
    assert "kernel-busy" in telemetry.UTIL_LABELS["nvml"]


def test_nvml_maps_cuda_visible_devices(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert telemetry.open_probe("nvml", gpu_index=1)._handle == ("gpu", 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")
    assert telemetry.open_probe("nvml", gpu_index=0)._handle == ("gpu", "GPU-abc")


def test_failed_readings_are_skipped_not_fatal(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail_after=3))  # read 1 is the check at open
    with Sampler(interval_s=0.01, source="nvml") as sampler:
        time.sleep(0.08)
    assert len(sampler.samples) == 2
    assert sampler.errors >= 1


def test_unknown_source_is_an_error():
    with pytest.raises(ValueError):
        telemetry.open_probe("tpu")


# --- measured peaks -----------------------------------------------------------------------------


def test_measure_peaks_returns_positive_finite_numbers_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    peaks = telemetry.measure_peaks("cpu", copy_bytes=1 << 20, matmul_n=64, budget_s=0.01)
    for key in ("peak_bytes_per_s", "peak_flops"):
        assert math.isfinite(peaks[key]) and peaks[key] > 0
    assert (tmp_path / "peaks.json").exists()

    def must_not_measure(*args):
        raise AssertionError("measured again instead of reading the cache")

    monkeypatch.setattr(telemetry, "_measure", must_not_measure)
    assert telemetry.measure_peaks("cpu", copy_bytes=1 << 20, matmul_n=64, budget_s=0.01) == peaks


def test_cached_peaks_reads_without_measuring(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(telemetry, "_measure", lambda *args: {"peak_bytes_per_s": 1e10, "peak_flops": 1e11})
    assert telemetry.cached_peaks("cpu") is None
    telemetry.measure_peaks("cpu")  # default sizes: the entry cached_peaks looks up
    assert telemetry.cached_peaks("cpu")["peak_flops"] == 1e11
    assert telemetry.cached_peaks("cpu", dtype=torch.bfloat16) is None  # peaks are per dtype


def test_measure_peaks_without_cache_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    peaks = telemetry.measure_peaks("cpu", copy_bytes=1 << 16, matmul_n=32, budget_s=0.005, use_cache=False)
    assert peaks["peak_flops"] > 0
    assert not (tmp_path / "peaks.json").exists()
