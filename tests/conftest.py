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
