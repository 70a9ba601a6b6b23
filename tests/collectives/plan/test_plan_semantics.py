"""plan.semantics: the call's count for a size in bytes and nccl-tests' bus bandwidth factors."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from distlab.collectives.plan.semantics import BLOCKED, count_for_bytes, layout
from distlab.vocabulary import COLLECTIVES


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
