"""Hardware use: a background utilization sampler and measured peaks (the MBU / MFU arithmetic
is specviz.analysis.hardware).

The sampler reads NVML on a GPU machine (``util_pct`` = NVML ``utilization.gpu`` = % of the
sample window in which at least one kernel ran: label it "kernel-busy %", it is not
throughput) and psutil otherwise (``util_pct`` = this process's CPU time as % of all cores).
Samples carry ``t`` in seconds since a ``t0`` taken from ``time.perf_counter()``, the clock the
engine stamps its steps with, so the two line up on one time axis.
No Streamlit here: pages read :attr:`Sampler.samples` while it runs.
"""

from __future__ import annotations

import json
import math
import os
import platform
import threading
import time
from pathlib import Path

UTIL_LABELS = {
    "nvml": "GPU kernel-busy % (NVML utilization.gpu)",
    "psutil": "process CPU % of all cores",
}


# ---------------------------------------------------------------------------------------------
# Probes: one reading each; the sampler thread calls read() ~10 times a second


def _nvml_handle(pynvml, gpu_index: int):
    # NVML numbers every GPU on the machine; CUDA numbers only CUDA_VISIBLE_DEVICES, in order.
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if gpu_index < len(visible):
        entry = visible[gpu_index]
        if entry.isdigit():
            return pynvml.nvmlDeviceGetHandleByIndex(int(entry))
        return pynvml.nvmlDeviceGetHandleByUUID(entry)
    return pynvml.nvmlDeviceGetHandleByIndex(gpu_index)


class _NvmlProbe:
    source = "nvml"

    def __init__(self, gpu_index: int = 0):
        import pynvml  # from nvidia-ml-py; raises ImportError / NVMLError without a GPU driver

        self._nvml = pynvml
        pynvml.nvmlInit()
        try:
            self._handle = _nvml_handle(pynvml, gpu_index)
            self.read()  # fail here, not in the thread, if this GPU cannot be read
        except Exception:
            pynvml.nvmlShutdown()
            raise

    def read(self) -> dict:
        rates = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
        memory = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
        return {
            "util_pct": float(rates.gpu),  # kernel-busy %, not throughput
            "mem_bytes": int(memory.used),  # device-wide, all processes
            "mem_busy_pct": float(rates.memory),  # % of the window the memory controller was busy
            "mem_total_bytes": int(memory.total),
        }

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


class _PsutilProbe:
    """This process's CPU time over the wall time since the previous reading, as % of the cores
    it may run on. psutil's own cpu_percent(None) divides by whatever wall time passed since the
    last call: the sampler's last reading at stop() can come a millisecond after the previous
    one, and 10 ms of CPU-time granularity over 1 ms of wall read as ~1000% per core (seen as
    ~4000% on a 2-core machine). So a reading needs MIN_WINDOW_S of wall time (else it repeats
    the previous value) and is clamped to 0..100."""

    source = "psutil"
    MIN_WINDOW_S = 0.05

    def __init__(self):
        import psutil

        self._psutil = psutil
        self._process = psutil.Process()
        try:
            self._cpus = len(os.sched_getaffinity(0))  # the cores this process may use (a container's share)
        except (AttributeError, OSError):
            self._cpus = psutil.cpu_count() or 1
        self._last = (time.perf_counter(), self._cpu_seconds())
        self._proc_pct = 0.0
        psutil.cpu_percent(None)

    def _cpu_seconds(self) -> float:
        t = self._process.cpu_times()
        return t.user + t.system

    def read(self) -> dict:
        now, cpu = time.perf_counter(), self._cpu_seconds()
        wall = now - self._last[0]
        if wall >= self.MIN_WINDOW_S:
            self._proc_pct = 100.0 * (cpu - self._last[1]) / wall  # 100 = one core busy
            self._last = (now, cpu)
        proc_pct = min(max(self._proc_pct, 0.0), 100.0 * self._cpus)
        return {
            "util_pct": proc_pct / self._cpus,  # 100 = every core this process may use, busy with it
            "mem_bytes": int(self._process.memory_info().rss),
            "proc_cpu_pct": proc_pct,
            "sys_cpu_pct": self._psutil.cpu_percent(None),  # whole machine, 100 = all cores
        }

    def close(self) -> None:
        pass


def open_probe(source: str = "auto", gpu_index: int = 0):
    """NVML when asked ("auto"/"nvml") and it works; any failure degrades silently to psutil."""
    if source not in ("auto", "nvml", "psutil"):
        raise ValueError(f"unknown telemetry source {source!r}: use auto, nvml or psutil")
    if source != "psutil":
        try:
            return _NvmlProbe(gpu_index)
        except Exception:  # no pynvml, no driver, no such GPU: the CPU numbers still help
            pass
    return _PsutilProbe()


# ---------------------------------------------------------------------------------------------
# The sampler


def _current_cuda_index(default: int) -> int:
    try:
        import torch

        return torch.cuda.current_device() if torch.cuda.is_available() else default
    except Exception:
        return default


class Sampler:
    """Records {"t", "util_pct", "mem_bytes", "source", ...} every ``interval_s`` in a thread.

    ``start(t0)`` / ``stop() -> samples``, or ``with Sampler(t0=t0) as s: ...`` then
    ``s.samples``. ``t`` is seconds since ``t0`` (``time.perf_counter()`` at start by default).
    One last sample is taken at stop, so even a run shorter than the interval has one.
    """

    def __init__(
        self,
        interval_s: float = 0.1,
        source: str = "auto",
        gpu_index: int = 0,
        t0: float | None = None,
        device=None,
    ):
        # ``device`` (a torch.device or string) picks the source: a CUDA run reads NVML for
        # that GPU, a CPU run reads psutil even on a GPU machine; None keeps ``source``.
        if device is not None:
            device_type, _, index = str(device).partition(":")
            source = "nvml" if device_type == "cuda" else "psutil"
            gpu_index = int(index) if index else _current_cuda_index(gpu_index)
        self.interval_s = interval_s
        self.requested_source = source
        self.gpu_index = gpu_index
        self.t0 = t0
        self.source: str | None = None  # "nvml" | "psutil" once started
        self.errors = 0  # readings that raised and were skipped
        self._samples: list[dict] = []
        self._probe = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def samples(self) -> list[dict]:
        """A snapshot, safe to read while the sampler runs."""
        return list(self._samples)

    def start(self, t0: float | None = None) -> "Sampler":
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        self.t0 = t0 if t0 is not None else (self.t0 if self.t0 is not None else time.perf_counter())
        self._probe = open_probe(self.requested_source, self.gpu_index)
        self.source = self._probe.source
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="specviz-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[dict]:
        if self._thread is None:
            return self.samples
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._sample()
        self._probe.close()
        return self.samples

    def rebase(self, t0: float) -> None:
        """Measure ``t`` from a new origin (e.g. the engine's t0, known only once it starts)."""
        shift = self.t0 - t0
        self._samples[:] = [{**s, "t": s["t"] + shift} for s in self._samples]
        self.t0 = t0

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        next_t = time.perf_counter() + self.interval_s
        # Deadline-based so slow reads do not make the period drift.
        while not self._stop.wait(max(0.0, next_t - time.perf_counter())):
            self._sample()
            next_t += self.interval_s

    def _sample(self) -> None:
        try:
            reading = self._probe.read()
        except Exception:
            self.errors += 1
            return
        self._samples.append({"t": time.perf_counter() - self.t0, **reading, "source": self.source})


# ---------------------------------------------------------------------------------------------
# Measured peaks: a big copy for bytes/s, a big matmul for FLOP/s, cached per device


def _device_name(device) -> str:
    if device.type == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _best_seconds(fn, sync, budget_s: float, min_reps: int = 3, max_reps: int = 50) -> float:
    """Best wall time of fn() over reps (after a warm-up), until the budget is used."""
    fn()
    sync()
    best, spent, reps = math.inf, 0.0, 0
    while reps < min_reps or (spent < budget_s and reps < max_reps):
        start = time.perf_counter()
        fn()
        sync()
        elapsed = time.perf_counter() - start
        best, spent, reps = min(best, elapsed), spent + elapsed, reps + 1
    return best


def _measure(device, dtype, copy_bytes: int, matmul_n: int, budget_s: float) -> dict:
    import torch

    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    src = torch.ones(copy_bytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    copy_s = _best_seconds(lambda: dst.copy_(src), sync, budget_s)
    moved = 2 * src.numel() * src.element_size()  # read src + write dst
    del src, dst
    a = torch.randn(matmul_n, matmul_n, device=device).to(dtype)
    b = torch.randn(matmul_n, matmul_n, device=device).to(dtype)
    matmul_s = _best_seconds(lambda: a @ b, sync, budget_s)
    return {"peak_bytes_per_s": moved / copy_s, "peak_flops": 2.0 * matmul_n**3 / matmul_s}


def measure_peaks(
    device="cpu",
    dtype=None,
    copy_bytes: int | None = None,
    matmul_n: int | None = None,
    budget_s: float = 0.25,
    use_cache: bool = True,
) -> dict:
    """Measured peak memory bandwidth and matmul FLOP/s of ``device``: {"peak_bytes_per_s", "peak_flops", ...}.

    Bandwidth = 2 x bytes / time of a large tensor copy (read + write); FLOP/s = 2 n^3 / time
    of an n x n matmul in ``dtype`` (default float32 on CPU, bfloat16 on CUDA); best of a few
    reps within ``budget_s`` each (~0.5-1 s in all on CPU). These are *achievable* peaks, below
    the datasheet, so MBU/MFU against them read higher than against the datasheet.
    Cached in ``cache_dir()/peaks.json`` per device name, dtype, thread count and sizes.
    """
    device, dtype, copy_bytes, matmul_n, key = _peaks_key(device, dtype, copy_bytes, matmul_n)
    path = _peaks_path()
    cached = _read_json(path) if use_cache else {}
    if key in cached:
        return cached[key]
    name = _device_name(device)
    result = {**_measure(device, dtype, copy_bytes, matmul_n, budget_s), "device_name": name, "dtype": str(dtype)}
    if use_cache:
        _write_json(path, {**_read_json(path), key: result})
    return result


def cached_peaks(device="cpu", dtype=None) -> dict | None:
    """The peaks :func:`measure_peaks` stored for this device and dtype (default sizes), or None.

    Never measures: cheap enough to call at the start of every run.
    """
    *_, key = _peaks_key(device, dtype, None, None)
    return _read_json(_peaks_path()).get(key)


def _peaks_key(device, dtype, copy_bytes, matmul_n):
    import torch

    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    on_gpu = device.type == "cuda"
    dtype = dtype or (torch.bfloat16 if on_gpu else torch.float32)
    copy_bytes = copy_bytes or (1 << 30 if on_gpu else 128 << 20)  # past the largest cache
    matmul_n = matmul_n or (8192 if on_gpu else 1536)
    threads = 0 if on_gpu else torch.get_num_threads()  # CPU peaks scale with threads
    name = _device_name(device)
    key = f"{device.type}|{name}|{dtype}|threads={threads}|copy={copy_bytes}|n={matmul_n}|torch={torch.__version__}"
    return device, dtype, copy_bytes, matmul_n, key


def _peaks_path() -> Path:
    from specviz.common import cache_dir  # lazily: telemetry itself must import without torch

    return Path(cache_dir()) / "peaks.json"


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_json(path: Path, data: dict) -> None:
    from specviz.common import write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a temp file per thread and a rename: a concurrent reader sees the old or the new file, and two
        # threads measuring at once never write into one temp file
        write_atomic(path, json.dumps(data, indent=1))
    except OSError:
        pass  # a read-only cache only costs a re-measurement next time
