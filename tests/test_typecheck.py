"""tools/typecheck.py: mypy's errors counted per unit; the clean units stay at zero and no unit
rises above its baseline (the run itself is make lint's)."""

from __future__ import annotations

import json
from collections import Counter

from helpers.paths import ROOT
from helpers.tools import load_tool

tool = load_tool("typecheck")


def test_errors_are_counted_per_unit() -> None:
    out = "\n".join([
        "lib/distlab/plan/memory.py:3: error: Incompatible types  [assignment]",
        "lib/distlab/plan/verify/rank.py:9: error: x  [operator]",
        "lib/distlab/fit.py:115: error: Dict entry 0  [dict-item]",
        "lib/distlab/plan/memory.py:4: note: see https://mypy.readthedocs.io",
    ])
    assert tool.counts(out) == Counter({"plan": 2, "fit": 1})


def test_a_rise_or_any_error_in_a_clean_unit_fails_and_a_fall_is_named() -> None:
    worse, better = tool.problems(Counter({"plan": 40, "samplers": 1, "viz": 10}),
                                  {"plan": 39, "viz": 54})
    assert worse == ["plan: 40 mypy errors, allowed 39", "samplers: 1 mypy errors, allowed 0"]
    assert better and better[0].startswith("viz: 10 mypy errors, baseline 54: lower it")


def test_the_baseline_holds_no_clean_unit() -> None:
    baseline = json.loads((ROOT / "tools" / "typecheck_baseline.json").read_text())
    assert not set(baseline) & set(tool.CLEAN)
    assert {"samplers", "nccl", "rccl"} <= set(tool.CLEAN)
