"""Provenance names the command as retyped; results JSON never holds NaN or infinity."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.report.jsonfile import SCHEMA_VERSION, write_json


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), np.float64("nan"),
                                 np.float32("inf")])
def test_write_json_refuses_non_finite_and_names_where(bad, tmp_path) -> None:
    path = tmp_path / "out.json"
    payload = {"rows": [{"time_us": 1.0}, {"time_us": bad}]}
    with pytest.raises(ValueError, match=r"\['rows'\]\[1\]\['time_us'\]"):
        write_json(path, payload)
    assert not path.exists()


finite = st.floats(allow_nan=False, allow_infinity=False)
leaf = st.one_of(st.none(), st.booleans(), st.integers(), finite, st.text(max_size=5))
tree = st.recursive(leaf, lambda c: st.one_of(st.lists(c, max_size=4),
                                              st.dictionaries(st.text(max_size=4), c, max_size=4)),
                    max_leaves=20)


@settings(max_examples=60, deadline=None)
@given(tree)
def test_finite_payloads_round_trip(tmp_path_factory, value) -> None:
    path = tmp_path_factory.mktemp("j") / "out.json"
    write_json(path, {"v": value})
    assert json.loads(path.read_text()) == {"schema": SCHEMA_VERSION, "v": value}


@settings(max_examples=60, deadline=None)
@given(tree, st.sampled_from([math.nan, math.inf, -math.inf]))
def test_a_non_finite_leaf_anywhere_is_refused(tmp_path_factory, value, bad) -> None:
    path = tmp_path_factory.mktemp("j") / "out.json"
    with pytest.raises(ValueError, match="not a finite number"):
        write_json(path, {"v": [value, {"deep": [bad]}]})
    assert not path.exists()


def test_command_line_names_a_package_module_as_dash_m() -> None:
    import distlab.profile.__main__ as prof_main
    from distlab.report import provenance as prov

    line = prov.command_line([prof_main.__file__, "--quick", "--out", "x"])
    assert line.split()[1:] == ["-m", "distlab.profile", "--quick", "--out", "x"]
    line = prov.command_line([prov.__file__, "-h"])
    assert line.split()[1:] == ["-m", "distlab.report.provenance", "-h"]


def test_command_line_keeps_a_script_outside_the_package() -> None:
    from distlab.report import provenance as prov

    assert prov.command_line(["/tmp/train.py", "--lr", "1"]).split()[1:] == [
        "/tmp/train.py", "--lr", "1"]
