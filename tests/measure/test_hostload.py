"""specviz.measure.hostload: a measurement taken beside another busy process says so."""

from __future__ import annotations

import subprocess
import sys
import time

from specviz.analysis.costs import Calibration
from specviz.analysis.analytic import CostModel
from specviz.measure.calibrate import calibration_load_warning
from specviz.measure.hostload import OtherLoad, load_warning


def test_another_busy_process_is_counted_and_this_ones_own_work_is_not():
    spin = "import time\nt = time.time()\nwhile time.time() - t < 3: pass"
    with OtherLoad() as own:  # this process busy, nothing else
        t = time.time()
        while time.time() - t < 1.5:
            pass
    other = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.5)
        with OtherLoad() as beside:
            time.sleep(1.5)
    finally:
        other.wait()
    assert beside.cores > own.cores + 0.5  # one spinning process is about one core
    assert beside.cores > 0.6


def test_the_warning_names_the_load_and_older_calibrations_have_none():
    assert load_warning(0.1, 2) is None
    assert "kept 1.2 of 2 cores busy" in load_warning(1.2, 2, "the calibration")
    cm = CostModel(0.0, 0.001, 0.0)
    old = Calibration("t", "d", "cpu", "float32", cm, cm, {"1": 0.0}, {}, {})  # a record from before the field
    assert calibration_load_warning(old) is None
    busy = Calibration.from_json({**old.to_json(), "other_load": 1.7, "cpus": 2})
    assert "1.7 of 2 cores" in calibration_load_warning(busy)
