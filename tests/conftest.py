import os
import sys

import torch

# Triton kernels run on CPU only in interpreter mode, which must be set before triton is imported;
# on a CUDA machine the kernels run for real.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# Tests import the shared fakes, and a few import another test module's helpers, as plain modules from any
# folder (test file names are unique: tests/test_layout.py), whichever files pytest was given.
sys.path[:0] = [os.path.dirname(__file__)] + sorted(e.path for e in os.scandir(os.path.dirname(__file__))
                                                  if e.is_dir() and e.name != "data" and not e.name.startswith(("_", ".")))
os.environ.setdefault("SPECVIZ_WORKER_JOBS", "workerfakes")  # the decode worker registers the stand-in jobs
# No test reaches a model hub (weights come from the package or are built): the device process, which
# inherits this environment, then refuses an uncached hub id at once instead of waiting on the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The Live page calibrates a pair after its first run (specviz.app.firstcal) into the calibration cache: off
# for the suite, so that no run writes into the user's cache; its own tests turn it on with a scratch cache.
os.environ.setdefault("SPECVIZ_AUTO_CALIBRATE", "0")
# Under pytest-xdist (the README's `-n 2`) two workers share the cores: one intra-op thread each, and for
# the processes they start, since two spinning thread pools on two cores stall each other many-fold.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)


import pytest  # noqa: E402


@pytest.fixture
def navigation_owns_the_pages(monkeypatch):
    """For AppTest tests (``pytestmark = pytest.mark.usefixtures("navigation_owns_the_pages")``):
    AppTest resets Streamlit's "pages/ folder" flag before every run, so each rerun would run the
    page file alone (old-style multipage mode: no app.py, no sidebar) and the page would rerun
    through app.py, dropping button clicks. On a live server the flag is cleared for good by
    app.py's first st.navigation call; do the same here."""
    from streamlit.runtime.pages_manager import PagesManager

    real_init = PagesManager.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False

    monkeypatch.setattr(PagesManager, "__init__", init)


@pytest.fixture(autouse=True)
def signal_handlers_restored():
    """A CLI command interrupted in this process (main() with a real Ctrl-C) leaves SIGINT and SIGTERM
    ignored, as a finished CLI process should on its way out (specviz.interrupts.Stop's final); put
    them back so the next test, and pytest itself, get them."""
    import signal

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in this test, whatever the runner set (a worker may ignore it);
    signal_handlers_restored puts the runner's handler back after it."""
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config):
    """Under pytest-xdist, hand out the files in the order below: by default it reorders them by how many tests
    each holds, which sends the long one-test files (app memory, the browser's first calibration) last."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
    """Files with a test marked ``slow`` run first (a stable sort: otherwise the order is pytest's), so that under
    pytest-xdist (the README's ``-n 2 --dist loadfile``) the long files start first and the workers end together
    instead of one worker finishing a long file alone."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
