"""Compare two computations of nested numbers with a stated tolerance, never with ``==``.

Two computations of the same float (a sum in another order, another numpy, BLAS or CPU) may
differ in the last bits; a test that compares them with ``==`` passes on one machine only.
:func:`assert_close_tree` walks dicts, lists and tuples and compares every float with
``math.isclose(rel_tol=rel, abs_tol=abs_tol)``; everything else (strings, ints, bools, None)
must be equal. The first difference is reported with its path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["REL", "assert_close_tree", "close_tree_difference"]

REL = 1e-6
"""The default relative tolerance. Float64 rounds at about 1e-16 per operation, but the trees
compared here hold least-squares fits over sizes from a few bytes to tens of MiB: their design
matrices have condition numbers near 1e7-1e8, so a fit is exact only to about cond * 1e-16, and
two machines (another BLAS kernel, another summation order) were seen to differ by 3e-9. 1e-6
sits well above that and far below any difference a model change makes (1e-3 and more)."""


def close_tree_difference(actual: Any, expected: Any, *, rel: float = REL, abs_tol: float = 0.0,
                          path: str = "value") -> str | None:
    """The first place where ``actual`` and ``expected`` differ beyond the tolerance, as a
    message, or None when they agree everywhere."""
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping):
            return f"{path}: expected a mapping, got {type(actual).__name__}"
        if set(actual) != set(expected):
            extra = sorted(map(str, set(actual) - set(expected)))
            missing = sorted(map(str, set(expected) - set(actual)))
            return f"{path}: keys differ: only in actual {extra}, only in expected {missing}"
        for key in expected:
            found = close_tree_difference(actual[key], expected[key], rel=rel, abs_tol=abs_tol,
                                          path=f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(expected, Sequence) and not isinstance(expected, (str, bytes)):
        if not isinstance(actual, Sequence) or isinstance(actual, (str, bytes)):
            return f"{path}: expected a sequence, got {type(actual).__name__}"
        if len(actual) != len(expected):
            return f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            found = close_tree_difference(a, e, rel=rel, abs_tol=abs_tol, path=f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(expected, float) or isinstance(actual, float):
        if isinstance(actual, bool) or isinstance(expected, bool) or \
                not isinstance(actual, (int, float)) or not isinstance(expected, (int, float)):
            return f"{path}: {actual!r} != {expected!r}"
        if math.isnan(expected) and math.isnan(actual):
            return None
        if not math.isclose(actual, expected, rel_tol=rel, abs_tol=abs_tol):
            return f"{path}: {actual!r} != {expected!r} (rel tolerance {rel:g})"
        return None
    return None if actual == expected else f"{path}: {actual!r} != {expected!r}"


def assert_close_tree(actual: Any, expected: Any, *, rel: float = REL,
                      abs_tol: float = 0.0) -> None:
    """Fail with the path of the first difference beyond ``rel`` (see the module doc)."""
    found = close_tree_difference(actual, expected, rel=rel, abs_tol=abs_tol)
    assert found is None, found
