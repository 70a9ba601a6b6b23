"""plan.semantics: the call's count for a size in bytes and nccl-tests' bus bandwidth factors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distlab.collectives.plan.semantics import (
    BLOCKED,
    COLLECTIVES,
    busbw_factor,
    count_for_bytes,
    layout,
)


def test_busbw_factors_are_nccl_tests() -> None:
    assert busbw_factor("all_reduce", 4) == 1.5
    for op in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        assert busbw_factor(op, 4) == 0.75
    assert busbw_factor("broadcast", 8) == busbw_factor("reduce", 8) == 1.0
    assert busbw_factor("barrier", 8) is None
    with pytest.raises(ValueError, match="collective"):
        busbw_factor("allreduce", 2)


@given(st.sampled_from(COLLECTIVES), st.integers(0, 1 << 20), st.sampled_from((1, 2, 4, 8)),
       st.integers(1, 64))
def test_count_for_bytes_is_a_valid_count_near_the_size(collective: str, nbytes: int,
                                                         itemsize: int, p: int) -> None:
    n = count_for_bytes(collective, nbytes, itemsize, p)
    layout(collective, p, n)  # a count every plan of the collective accepts
    assert n >= 1 and n * itemsize <= max(nbytes, itemsize * (p if collective in BLOCKED else 1))
    if collective in BLOCKED:
        assert n % p == 0 and (n == p or n > nbytes // itemsize - p)
    else:
        assert n == max(1, nbytes // itemsize)
