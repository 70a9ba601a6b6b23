"""distlab's one vocabulary: names and conventions every floor shares, each defined once here.

- **Collective names**: :data:`COLLECTIVES`, torch.distributed's spelling (``"all_reduce"``,
  ``"all_gather"``, ...). :func:`collective_name` turns an accepted spelling (nccl-tests'
  ``"allreduce"``, ``"reducescatter"``, NCCL's ``"AllReduce"``, ``"all-reduce"``) into it and
  names the known ones in its ``ValueError`` otherwise.
- **Bus bandwidth**: :func:`busbw_factor`, nccl-tests' ``busbw / algbw`` per collective.
- **Error sign**: :func:`error_pct` is ``(measured - model) / model * 100``, of *times*: positive
  means the run was slower than the model, negative faster. Every table, figure and JSON file
  of distlab states errors this way. A bandwidth comparison is turned into times first
  (:func:`bandwidth_error_pct`: time is bytes / bandwidth, so the error of a measured bandwidth
  ``b`` against a model bandwidth ``B`` is ``(B - b) / b * 100``), so the same sign holds: a
  positive error is a run slower (less bandwidth) than the model.
- **Error summary**: :class:`ErrorSummary`, ``|error%|`` over a set of rows or points (count,
  median, 90th percentile, max), built by :meth:`ErrorSummary.of` from a list of signed errors;
  :func:`error_quantiles`, percentiles of the signed errors (a band with its sign).
- **Sizes**: :func:`size_label`, bytes as ``"1 KiB"`` (``style="binary"``) or ``"1K"``
  (``style="compact"``).
- **dtypes**: :func:`dtype_name`, torch's canonical name of a dtype from a ``torch.dtype`` or
  any usual spelling (``"bf16"``, ``"torch.bfloat16"``, Kineto's ``"BFloat16"``), or a
  ``ValueError`` naming the known ones; :func:`dtype_bytes`, its bytes per element.
- **NCCL releases**: :func:`nccl_release` reads ``"2.29.7"``, ``"v2.21.5-1"``, ``"NCCL 2.18"``
  or ``"2.26.2+cuda12.8"`` as an :class:`NcclRelease` ``(major, minor, patch)``.

Core floor: imports nothing of distlab but :mod:`distlab._checks`; ``tests/test_vocabulary.py``
fails if any of these names is defined anywhere else in ``lib/distlab`` (or a bus bandwidth
factor ``2 * (n - 1) / n`` is written out).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from distlab._checks import check_int

__all__ = ["COLLECTIVES", "ErrorSummary", "NcclRelease", "SIZE_STYLES", "bandwidth_error_pct",
           "busbw_factor", "collective_name", "dtype_bytes", "dtype_name", "error_pct",
           "error_quantiles", "gb_per_s",
           "nccl_release", "size_in", "size_label"]

COLLECTIVES: tuple[str, ...] = ("all_reduce", "broadcast", "reduce", "gather", "scatter",
                                "all_gather", "reduce_scatter", "all_to_all", "barrier")
"""Every collective distlab knows, spelt as ``torch.distributed`` spells its functions."""

_SQUASHED = {c.replace("_", ""): c for c in COLLECTIVES}
_ALIASES = {"bcast": "broadcast", "alltoallv": "all_to_all", "allgatherbase": "all_gather",
            "reducescatterbase": "reduce_scatter"}


def collective_name(name: str) -> str:
    """The canonical name (one of :data:`COLLECTIVES`) of ``name``.

    Accepted: the canonical names; the same letters in any case with ``_``, ``-`` or spaces
    anywhere (nccl-tests' ``allreduce``, ``reducescatter``, ``alltoall``; NCCL's ``AllReduce``;
    ``all-gather``); torch's ``_allgather_base`` / ``_reduce_scatter_base``, ``all_to_allv``
    and ``bcast``. Raises ``ValueError`` naming the known names otherwise, ``TypeError`` for a
    non-string.
    """
    if not isinstance(name, str):
        raise TypeError(f"collective must be a string, one of {', '.join(COLLECTIVES)}; got "
                        f"{type(name).__name__} {name!r}")
    key = re.sub(r"[\s_-]", "", name).lower()
    found = _SQUASHED.get(key) or _ALIASES.get(key)
    if found is None:
        raise ValueError(f"unknown collective {name!r}: the known ones are "
                         f"{', '.join(COLLECTIVES)} (nccl-tests' spellings such as 'allreduce' "
                         "are accepted too)")
    return found


def busbw_factor(collective: str, world_size: int) -> float | None:
    """nccl-tests' bus bandwidth factor of ``collective`` on ``world_size`` ranks:
    ``busbw = algbw * factor``, where ``algbw`` is the call's bytes (nccl-tests' size) over its
    time.

    ``2 (n - 1) / n`` for all-reduce; 1 for broadcast and reduce; ``(n - 1) / n`` for all-gather,
    reduce-scatter, gather, scatter and all-to-all; ``None`` for a barrier (it moves no data).
    ``collective``: any spelling :func:`collective_name` accepts; ``world_size`` an int >= 1
    (one rank: 0 where the factor has ``n - 1``).
    """
    c = collective_name(collective)
    n = check_int("world_size", world_size, minimum=1)
    if c == "all_reduce":
        return 2 * (n - 1) / n
    if c in ("broadcast", "reduce"):
        return 1.0
    return None if c == "barrier" else (n - 1) / n


def _finite(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def error_pct(measured: float, model: float) -> float:
    """The error of a measured time against the model's, percent:
    ``(measured - model) / model * 100``.

    Positive: the run was slower than the model; negative: faster. ``model`` must be > 0 (a
    caller without a prediction reports no error rather than calling this); both finite. For
    bandwidths use :func:`bandwidth_error_pct`, which gives the same number for the same call.
    """
    m = _finite("model", model)
    if m <= 0:
        raise ValueError(f"model must be > 0 (a time to compare with), got {model!r}")
    return 100.0 * (_finite("measured", measured) - m) / m


_DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8,
                "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "float8_e4m3fn": 1,
                "float8_e5m2": 1}
"""Bytes per element of every dtype distlab knows, by torch's canonical name."""

_DTYPE_ALIASES = {"float": "float32", "fp32": "float32", "f32": "float32",
                  "double": "float64", "fp64": "float64", "f64": "float64",
                  "half": "float16", "fp16": "float16", "f16": "float16",
                  "bf16": "bfloat16", "int": "int32", "long": "int64", "short": "int16",
                  "char": "int8", "byte": "uint8"}
"""torch's own aliases (``torch.float is torch.float32``, ``torch.half``, ``torch.long``),
Kineto's spellings once lower-cased (``Float``, ``Half``, ``Char``, ``Byte``) and the usual
short forms (``bf16``, ``fp16``, ``fp32``)."""


def _dtype_key(dtype: Any) -> str:
    return str(dtype).strip().lower().removeprefix("torch.").removeprefix("c10::")


def dtype_name(dtype: Any, name: str = "dtype") -> str:
    """torch's canonical name of a dtype (``"bfloat16"``), from a ``torch.dtype``
    (``torch.bfloat16``, ``torch.half``), a NumPy dtype, or a string as torch, Kineto or people
    write it: ``"bfloat16"``, ``"torch.bfloat16"``, ``"BFloat16"``, ``"c10::Half"``, ``"bf16"``,
    ``"fp16"``, ``"float"``.

    Raises:
        TypeError: not a string, ``torch.dtype`` or NumPy dtype (names ``name``).
        ValueError: a dtype distlab does not know, naming ``name`` and the known ones.
    """
    is_dtype = isinstance(dtype, np.dtype) or (type(dtype).__name__ == "dtype"
                                               and type(dtype).__module__ == "torch")
    if not (isinstance(dtype, str) or is_dtype):
        raise TypeError(f"{name} must be a dtype name (such as 'bfloat16' or 'bf16') or a "
                        f"torch.dtype, got {type(dtype).__name__} {dtype!r}")
    key = _dtype_key(dtype)
    key = _DTYPE_ALIASES.get(key, key)
    if key not in _DTYPE_BYTES:
        raise ValueError(f"{name} must be one of {', '.join(_DTYPE_BYTES)} (or torch.<name>, "
                         f"or an alias: {', '.join(_DTYPE_ALIASES)}), got {dtype!r}")
    return key


def dtype_bytes(dtype: str | None) -> int | None:
    """Bytes per element of a dtype as :func:`dtype_name` reads it (``float32``,
    ``torch.bfloat16``, Kineto's ``Float``, ``BFloat16``, ``c10::Half``); None when unknown or
    ``dtype`` is None."""
    if dtype is None:
        return None
    key = _dtype_key(dtype)
    return _DTYPE_BYTES.get(_DTYPE_ALIASES.get(key, key))


def gb_per_s(nbytes: Any, seconds: Any) -> Any:
    """GB/s, decimal as nccl-tests and every distlab table print it: ``nbytes / seconds / 1e9``.

    ``nbytes`` bytes moved in ``seconds`` seconds (> 0). NumPy arrays divide elementwise (the
    caller keeps their seconds positive, as for a plot); a scalar ``seconds <= 0`` is an error,
    since no bandwidth is measured in no time.
    """
    if np.ndim(seconds) == 0 and not float(seconds) > 0:
        raise ValueError(f"seconds must be > 0 to give a bandwidth, got {seconds!r}")
    return nbytes / seconds / 1e9


def bandwidth_error_pct(measured_gbps: float, model_gbps: float) -> float:
    """:func:`error_pct` of the times behind two bandwidths of the same call (time =
    bytes / bandwidth): ``(model - measured) / measured * 100``. Positive: the run moved less
    than the model (it was slower). Both bandwidths must be > 0 and finite, in the same unit."""
    b = _finite("measured_gbps", measured_gbps)
    if b <= 0:
        raise ValueError(f"measured_gbps must be > 0, got {measured_gbps!r}")
    big = _finite("model_gbps", model_gbps)
    if big <= 0:
        raise ValueError(f"model_gbps must be > 0, got {model_gbps!r}")
    return 100.0 * (big - b) / b


@dataclass(frozen=True)
class ErrorSummary:
    """``|error%|`` (:func:`error_pct`) over ``n`` rows or points, percent: ``median``, ``p90``
    (NumPy's linear 90th percentile) and ``max``; all NaN when ``n == 0``. ``label`` names the
    set (a table, a system, ``"all"``; may be empty). ``errors`` keeps the absolute errors,
    sorted, for :meth:`within` and :meth:`meets`. Build it with :meth:`of`."""

    n: int
    median: float
    p90: float
    max: float
    label: str = ""
    errors: tuple[float, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def of(cls, errors: Iterable[float | None], label: str = "") -> ErrorSummary:
        """The summary of signed errors in percent; ``None`` and NaN entries are left out
        (a row without a prediction has no error)."""
        kept = sorted(abs(float(e)) for e in errors if e is not None and not math.isnan(e))
        if not kept:
            return cls(0, math.nan, math.nan, math.nan, label, ())
        a = np.asarray(kept)
        return cls(a.size, float(np.median(a)), float(np.percentile(a, 90)), float(a[-1]),
                   label, tuple(kept))

    def within(self, limit_pct: float) -> int:
        """How many of the errors are at most ``limit_pct`` percent off."""
        return sum(e <= limit_pct for e in self.errors)

    def meets(self, median_pct: float, p90_pct: float) -> bool:
        """Median <= ``median_pct`` and p90 <= ``p90_pct``, over at least one error."""
        return self.n > 0 and self.median <= median_pct and self.p90 <= p90_pct


def error_quantiles(errors: Iterable[float], percents: Iterable[float]) -> tuple[float, ...]:
    """Percentiles (NumPy's linear) of *signed* errors in percent (:func:`error_pct`), e.g.
    ``(2.5, 97.5)``: the band a model's errors stay inside, its sign kept (a run slower than
    the model, positive, is told apart from a faster one).

    Raises:
        ValueError: no errors, or a percent outside [0, 100].
    """
    a = np.asarray([float(e) for e in errors if not math.isnan(float(e))])
    qs = [float(q) for q in percents]
    if a.size == 0:
        raise ValueError("error_quantiles needs at least one error")
    if any(not 0 <= q <= 100 for q in qs):
        raise ValueError(f"percents must be in [0, 100], got {qs}")
    return tuple(float(v) for v in np.percentile(a, qs))


SIZE_STYLES = ("binary", "compact")
_UNITS = ((30, "GiB", "G"), (20, "MiB", "M"), (10, "KiB", "K"))


def size_label(nbytes: int, style: str = "binary") -> str:
    """A byte count in the largest binary unit that divides it exactly.

    ``style="binary"``: ``1024 -> "1 KiB"``, ``1536 -> "1536 B"``, ``3 << 30 -> "3 GiB"`` (tables,
    titles); ``style="compact"``: ``"1K"``, ``"1536B"``, ``"3G"`` (row names, tight columns).
    ``nbytes``: an int >= 0.
    """
    n = check_int("nbytes", nbytes, minimum=0)
    if style not in SIZE_STYLES:
        raise ValueError(f"style must be one of {', '.join(SIZE_STYLES)}, got {style!r}")
    binary = style == "binary"
    for shift, long, short in _UNITS:
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {long}" if binary else f"{n >> shift}{short}"
    return f"{n} B" if binary else f"{n}B"


SIZE_UNITS: dict[str, float] = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30,
                                "TiB": 2**40, "KB": 1e3, "MB": 1e6, "GB": 1e9}
"""The units :func:`size_in` writes: binary (KiB...) and decimal (KB...), bytes per unit."""


def size_in(nbytes: float, unit: str, spec: str = ".1f") -> str:
    """``nbytes`` in ``unit`` of :data:`SIZE_UNITS`, formatted with ``spec``:
    ``size_in(3 << 29, "GiB") == "1.5 GiB"``, ``size_in(52_300, "KB", ".0f") == "52 KB"``.
    A fixed unit for sizes that are not exact multiples of one (:func:`size_label` names exact
    ones); an unknown unit is a ``ValueError`` naming the known ones."""
    if unit not in SIZE_UNITS:
        raise ValueError(f"unit must be one of {', '.join(SIZE_UNITS)}, got {unit!r}")
    return f"{nbytes / SIZE_UNITS[unit]:{spec}} {unit}"


class NcclRelease(NamedTuple):
    """An NCCL release: ``major``, ``minor`` and ``patch`` (``None`` when the text gave none)."""

    major: int
    minor: int
    patch: int | None

    @property
    def key(self) -> tuple[int, int]:
        """``(major, minor)``: what orders releases by their constants."""
        return self.major, self.minor

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}" + ("" if self.patch is None else f".{self.patch}")


_RELEASE = re.compile(r"^(?:nccl[\s_-]*)?v?(\d+)\.(\d+)(?:\.(\d+))?(?:-\d+)?(?:\+\S*)?$",
                      re.IGNORECASE)


def nccl_release(text: str) -> NcclRelease:
    """The release in ``text`` as NCCL, its tags and its users write it: ``"2.26"``,
    ``"2.26.2"``, ``"v2.26.2-1"`` (a git tag), ``"2.26.2+cuda12.8"`` (a wheel), ``"NCCL 2.18"``;
    surrounding spaces are ignored. Raises ``ValueError`` naming the forms otherwise."""
    m = _RELEASE.match(str(text).strip())
    if m is None:
        raise ValueError(f"not an NCCL release: {text!r} (write it like '2.26', '2.26.2', "
                         "'v2.26.2-1', '2.26.2+cuda12.8' or 'NCCL 2.26.2')")
    patch = m.group(3)
    return NcclRelease(int(m.group(1)), int(m.group(2)), None if patch is None else int(patch))
