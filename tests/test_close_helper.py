"""The tolerance helper the suite compares float computations with: it must fail where values
differ beyond the tolerance, name where, and pass where only the last bits differ."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.close import assert_close_tree, close_tree_difference


def test_last_bit_differences_pass_and_real_ones_fail_with_their_path() -> None:
    a = {"beta": 2.53052566097714e-10, "sizes": [1, 2], "nested": {"m": [7.0992971667907705]}}
    b = {"beta": 2.5305256611567487e-10, "sizes": [1, 2], "nested": {"m": [7.099297166739771]}}
    assert_close_tree(a, b)
    c = {**b, "nested": {"m": [7.1]}}
    assert close_tree_difference(a, c) == \
        "value['nested']['m'][0]: 7.0992971667907705 != 7.1 (rel tolerance 1e-06)"
    with pytest.raises(AssertionError, match="nested"):
        assert_close_tree(a, c)


def test_structure_strings_ints_and_nan() -> None:
    assert close_tree_difference({"a": 1}, {"a": 1, "b": 2}) is not None
    assert close_tree_difference([1, 2], [1, 2, 3]) == "value: length 2 != 3"
    assert close_tree_difference("mean", "median") is not None
    assert close_tree_difference(3, 4) is not None
    assert close_tree_difference(True, 1.0) is not None
    assert close_tree_difference(None, 0.0) is not None
    assert close_tree_difference(math.nan, math.nan) is None
    assert close_tree_difference((1, 2.0), [1, 2.0 + 1e-15]) is None


@given(st.floats(-1e300, 1e300, allow_nan=False), st.integers(1, 4))
def test_a_few_ulps_pass_and_one_part_in_a_hundred_thousand_fails(x: float, ulps: int) -> None:
    y = x
    for _ in range(ulps):
        y = math.nextafter(y, math.inf)
    assert close_tree_difference([y], [x], abs_tol=1e-300) is None
    if abs(x) > 1e-290:
        assert close_tree_difference([x * (1 + 1e-5)], [x]) is not None
        assert close_tree_difference([x * (1 + 1e-8)], [x]) is None  # machines differ by 3e-9
