"""specviz.bounds: one table of bounds that the CLI's flags, a run's configuration and the pages' controls all read."""

import dataclasses
import math

import pytest

from specviz.bounds import FLOATS, INTS, SLIDERS, check_numbers
from specviz.common import SpecvizError
from specviz.runconfig import RunConfig


def _inside(dest: str, lo, hi) -> bool:
    if dest in INTS:
        low, high = INTS[dest]
        return lo >= low and (high is None or hi <= high)
    _, low, low_in, high, high_in = FLOATS[dest]
    return (lo >= low if low_in else lo > low) and (hi <= high if high_in else hi < high)


@pytest.mark.parametrize("dest", sorted(SLIDERS))
def test_every_page_control_stays_inside_the_bounds_its_run_is_checked_against(dest):
    lo, hi, default, step = SLIDERS[dest]
    if dest == "requests":  # the page's 0 means "no queue" (None in the config); 1.. are requests
        lo = 1
    assert _inside(dest, lo, hi), (dest, SLIDERS[dest])
    assert SLIDERS[dest][0] <= default <= hi and step > 0


@pytest.mark.parametrize("dest", ["batch_size", "draft_length", "max_new_tokens", "temperature", "top_p", "seed"])
def test_the_live_pages_defaults_are_the_clis(dest):
    assert SLIDERS[dest][2] == getattr(RunConfig(), dest)


def test_every_bounded_number_of_a_run_is_in_the_table():
    numeric = {f.name for f in dataclasses.fields(RunConfig)
               if f.type in ("int", "float", "int | None") and f.name not in ("tree_width", "tree_nodes")}
    assert numeric <= set(INTS) | set(FLOATS)
    assert {"tree_width", "tree_nodes"} <= set(INTS)


@pytest.mark.parametrize("field, value", [("batch_size", 0), ("draft_length", -1), ("max_new_tokens", 0),
                                          ("temperature", -0.5), ("top_p", 0.0), ("top_p", math.nan),
                                          ("draft_confidence", 1.0), ("tree_nodes", 0), ("arrival_rate", math.inf),
                                          ("batch_size", 65537)])
def test_a_run_and_the_cli_refuse_a_number_with_the_same_sentence(field, value):
    cfg = dataclasses.replace(RunConfig(prompts=["hi"]), **{field: value})
    with pytest.raises(SpecvizError) as from_run:
        cfg.validate()

    class Flags:  # what argparse hands the CLI's check pass
        pass

    flags = Flags()
    setattr(flags, field, value)
    with pytest.raises(SpecvizError) as from_cli:
        check_numbers(flags)
    assert str(from_run.value) == str(from_cli.value)
    assert field.replace("_", " ").replace("top p", "top-p") in str(from_run.value)


def test_the_run_config_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, specviz.runconfig, specviz.bounds, specviz.engine.policies; print(any(m == 'torch' or m.startswith('torch.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_a_bad_device_or_dtype_name_is_refused_before_any_model_loads():
    with pytest.raises(SpecvizError, match="unknown device 'gpu'"):
        RunConfig(prompts=["hi"], device="gpu").validate()
    with pytest.raises(SpecvizError, match="unknown dtype 'fp8'"):
        RunConfig(prompts=["hi"], dtype="fp8").validate()
    RunConfig(prompts=["hi"], device="cuda:1", dtype="bfloat16").validate()  # names only: whether CUDA is here is the loader's
