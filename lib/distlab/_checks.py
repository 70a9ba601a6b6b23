"""Argument checks shared by every public boundary: messages name the argument, value and range."""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Iterable
from typing import Any

import numpy

__all__ = ["check_int", "check_float", "check_bool", "check_choice", "check_instance", "check_str",
           "check_sizes", "check_window", "dataset_length", "check_rank"]


def check_int(name: str, value: Any, *, minimum: int | None = None,
              maximum: int | None = None) -> int:
    """Return ``value`` as an int, or raise ``TypeError``/``ValueError`` naming ``name``.

    Accepts Python ints and integer scalars (NumPy, 0-d tensors) but not bools or floats.
    ``minimum`` and ``maximum`` are inclusive bounds.
    """
    if (type(value) is int and (minimum is None or value >= minimum)
            and (maximum is None or value <= maximum)):
        return value   # the common case, checked without building the message (hot in the planner)
    rng = _describe_range(minimum, maximum)
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int {rng}, got bool {value!r}")
    try:
        out = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int {rng}, got {type(value).__name__} "
                        f"{value!r}") from None
    if (minimum is not None and out < minimum) or (maximum is not None and out > maximum):
        raise ValueError(f"{name} must be an int {rng}, got {out}")
    return out


def _describe_range(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"in [{minimum}, {maximum}]"
    if minimum is not None:
        return f">= {minimum}"
    if maximum is not None:
        return f"<= {maximum}"
    return "(any value)"


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool (or NumPy bool), else raise ``TypeError`` naming it."""
    if isinstance(value, bool):
        return value
    if _is_numpy_bool(value):
        return bool(value)
    raise TypeError(f"{name} must be a bool (True or False), got {type(value).__name__} "
                    f"{value!r}")


def _is_numpy_bool(value: Any) -> bool:
    """True for ``numpy.bool_`` (named "bool" under NumPy 2, "bool_" before); numpy imported
    lazily."""
    if type(value).__module__ != "numpy":
        return False
    return isinstance(value, numpy.bool_)


def dataset_length(dataset: Any, *, name: str = "dataset") -> int:
    """Length of ``dataset``: ``len(dataset)``, or the dataset itself when it is an int >= 0."""
    if isinstance(dataset, bool):
        raise TypeError(f"{name} must be a sized dataset or an int length >= 0, got bool")
    if hasattr(dataset, "__len__"):
        try:
            n = len(dataset)
        except TypeError:  # e.g. a 0-d tensor: has __len__ but no length
            pass
        else:
            return check_int(f"len({name})", n, minimum=0)
    if hasattr(dataset, "__index__"):
        return check_int(f"{name} (length)", dataset, minimum=0)
    raise TypeError(f"{name} must be a sized dataset (with __len__) or an int length >= 0, "
                    f"got {type(dataset).__name__}")


def check_rank(rank: Any, num_replicas: int) -> int:
    """``rank`` as an int in ``[0, num_replicas - 1]``."""
    return check_int("rank", rank, minimum=0, maximum=num_replicas - 1)


def check_float(name: str, value: Any, *, minimum: float | None = None,
                maximum: float | None = None, exclusive_minimum: bool = False,
                allow_inf: bool = False) -> float:
    """Return ``value`` as a float, or raise ``TypeError``/``ValueError`` naming ``name``.

    Accepts real numbers (Python, NumPy, 0-d tensors via ``float()``), not bools, strings or
    NaN; infinities only with ``allow_inf``. ``minimum`` is exclusive when ``exclusive_minimum``
    (e.g. a duration that must be > 0), ``maximum`` inclusive.
    """
    lo = "" if minimum is None else (f"> {minimum}" if exclusive_minimum else f">= {minimum}")
    hi = "" if maximum is None else f"<= {maximum}"
    rng = " and ".join(x for x in (lo, hi) if x) or "(any value)"
    what = "a number" if allow_inf else "a finite number"
    if isinstance(value, bool) or isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be {what} {rng}, got {type(value).__name__} {value!r}")
    if not isinstance(value, numbers.Real):
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be {what} {rng}, got {type(value).__name__} "
                            f"{value!r}") from None
    out = float(value)
    if math.isnan(out) or (math.isinf(out) and not allow_inf):
        raise ValueError(f"{name} must be {what} {rng}, got {out}")
    if minimum is not None and (out <= minimum if exclusive_minimum else out < minimum):
        raise ValueError(f"{name} must be {what} {rng}, got {out}")
    if maximum is not None and out > maximum:
        raise ValueError(f"{name} must be {what} {rng}, got {out}")
    return out


def check_choice(name: str, value: Any, choices: Any) -> Any:
    """Return ``value`` if it is one of ``choices``, else raise ``ValueError`` listing them."""
    options = list(choices)
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, options))}, got {value!r}")
    return value


def check_str(name: str, value: Any, *, nonempty: bool = False, example: str = "") -> str:
    """Return ``value`` if it is a str (non-empty when ``nonempty``), else raise naming ``name``.

    ``TypeError`` for other types, ``ValueError`` for ``""`` when ``nonempty``; ``example`` is
    shown in the message (e.g. ``"'rank0/read'"``).
    """
    like = f" like {example}" if example else ""
    what = f"a non-empty str{like}" if nonempty else f"a str{like}"
    if not isinstance(value, str):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    if nonempty and not value:
        raise ValueError(f"{name} must be {what}, got ''")
    return value


def check_instance(name: str, value: Any, types: type | tuple[type, ...],
                   what: str | None = None) -> Any:
    """Return ``value`` if it is an instance of ``types``, else raise ``TypeError`` naming it."""
    if not isinstance(value, types):
        if what is None:
            names = [t.__name__ for t in (types if isinstance(types, tuple) else (types,))]
            what = "a " + " or ".join(names)
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    return value


def check_window(name: str, value: Any) -> tuple[float, float]:
    """A ``(start, end)`` pair of finite numbers with ``start <= end``."""
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a (start, end) pair of finite numbers, got "
                        f"{type(value).__name__} {value!r}") from None
    lo = check_float(f"{name}[0] (start)", lo)
    hi = check_float(f"{name}[1] (end)", hi, minimum=lo)
    return lo, hi


def check_sizes(sizes_bytes: Any) -> list[int]:
    """``sizes_bytes`` (message sizes in bytes) as a list of ints >= 1 (``TypeError`` /
    ``ValueError`` naming the first bad one)."""
    if isinstance(sizes_bytes, (str, bytes)) or not isinstance(sizes_bytes, Iterable):
        raise TypeError(f"sizes_bytes must be a sequence of ints >= 1, got "
                        f"{type(sizes_bytes).__name__} {sizes_bytes!r}")
    return [check_int(f"sizes_bytes[{i}]", s, minimum=1) for i, s in enumerate(sizes_bytes)]
