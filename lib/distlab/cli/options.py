"""Command-line option types shared by every distlab command (benchmarks, profile).

Every option is checked while argparse parses it, so a bad value ends in one line that names the
option, the value and what is allowed, and exit status 2 (argparse's ``error``), never a traceback
or a NaN in the output. Use these as ``type=`` functions, :func:`parser` for the help layout (every
option shows its default), and :func:`fail` for checks that involve two options.

    p = options.parser("python -m distlab.bench transfers", __doc__)
    p.add_argument("--iters", type=options.positive_int, default=20, help="timed copies per size")
    args = p.parse_args(argv)
    if args.maxbytes < args.minbytes:
        options.fail(p, "-e/--maxbytes", args.maxbytes, f">= -b/--minbytes ({args.minbytes})")
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NoReturn

__all__ = [
    "comma_choices", "existing_file", "fail", "nonnegative_int", "parser", "positive_float",
    "positive_int", "size_bytes", "size_list", "size_sweep", "int_list", "float_list",
    "int_at_least",
]

_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Keeps the module docstring's layout and appends ``(default: X)`` to every option."""


def parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` whose help shows ``doc`` as written and every option's default."""
    return argparse.ArgumentParser(prog=prog, description=doc, formatter_class=_HelpFormatter)


def fail(p: argparse.ArgumentParser, option: str, value: object, allowed: str) -> NoReturn:
    """Exit 2 with one line: ``option: got value; allowed`` (for checks across options)."""
    p.error(f"argument {option}: invalid value {value!r}: must be {allowed}")


def size_bytes(text: str) -> int:
    """``"64K"`` -> 65536, ``"1M"`` -> 1048576, ``"100"`` -> 100 (bytes, binary units, >= 1)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*", str(text).upper())
    if not m:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: must look like 1024, 64K, 16M or 1G (bytes, binary units)")
    value = int(m.group(1)) * _UNITS[m.group(2)]
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: must be at least 1 byte")
    return value


def size_list(text: str) -> list[int]:
    """``"4K,64K,1M"`` -> ``[4096, 65536, 1048576]``: a comma list of :func:`size_bytes`."""
    parts = [t for t in str(text).split(",") if t.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: must be a comma list of "
                                         "sizes such as 4K,64K,1M")
    return [size_bytes(t) for t in parts]


size_list.__name__ = "size list"


def size_sweep(minbytes: int, maxbytes: int, factor: int) -> list[int]:
    """nccl-tests' ``-b/-e/-f`` sweep: ``minbytes, minbytes*factor, ...`` up to ``maxbytes``."""
    if minbytes < 1 or maxbytes < minbytes:
        raise ValueError(f"need 1 <= minbytes <= maxbytes, got -b {minbytes} -e {maxbytes}")
    if factor < 2:
        raise ValueError(f"stepfactor must be >= 2, got -f {factor}")
    out, size = [], minbytes
    while size <= maxbytes:
        out.append(size)
        size *= factor
    return out


def int_at_least(minimum: int) -> Callable[[str], int]:
    """A ``type=`` that accepts whole numbers ``>= minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(str(text).strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"invalid value {text!r}: must be a whole number >= {minimum}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"invalid value {value}: must be >= {minimum}")
        return value
    parse.__name__ = f"int>={minimum}"
    return parse


positive_int = int_at_least(1)
nonnegative_int = int_at_least(0)


def positive_float(text: str) -> float:
    """A finite number > 0 (e.g. seconds, milliseconds)."""
    try:
        value = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: must be a finite number > 0") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: must be a finite number > 0")
    return value


def existing_file(text: str) -> Path:
    """A path to a readable file that exists now."""
    path = Path(text).expanduser()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"invalid path {text!r}: no such file")
    return path


def comma_choices(allowed: Iterable[str], *, all_word: str | None = "all",
                  groups: dict[str, list[str]] | None = None) -> Callable[[str], list[str]]:
    """A ``type=`` for ``a,b,c`` lists drawn from ``allowed`` (``all_word`` means all of them;
    a name in ``groups`` stands for its members, e.g. ``{"hops": [...]}``)."""
    choices = list(allowed)
    groups = dict(groups or {})

    def parse(text: str) -> list[str]:
        if all_word is not None and text.strip() == all_word:
            return list(choices)
        names = [m for t in str(text).split(",") if t.strip()
                 for m in groups.get(t.strip(), [t.strip()])]
        bad = [n for n in names if n not in choices]
        if bad or not names:
            extra = f" or '{all_word}'" if all_word else ""
            extra += "".join(f" or '{g}'" for g in groups)
            raise argparse.ArgumentTypeError(
                f"invalid value {text!r}: must be a comma list of {', '.join(choices)}{extra}")
        return list(dict.fromkeys(names))
    parse.__name__ = "comma list"
    parse.choices = tuple(choices)  # type: ignore[attr-defined]  (the harness shows 'all')
    parse.all_word = all_word  # type: ignore[attr-defined]
    parse.groups = groups  # type: ignore[attr-defined]  (the harness shows a group's name)
    return parse


def _number_list(convert: Callable[[str], float | int], what: str,
                 minimum: float) -> Callable[[str], list]:
    def parse(text: str) -> list:
        try:
            values = [convert(t.strip()) for t in str(text).split(",") if t.strip()]
        except ValueError:
            values = []
        if not values or any(not math.isfinite(v) or v < minimum for v in values):
            raise argparse.ArgumentTypeError(
                f"invalid value {text!r}: must be a comma list of {what} >= {minimum}")
        return values
    parse.__name__ = f"{what} list"
    return parse


def int_list(minimum: int = 1) -> Callable[[str], list[int]]:
    """A ``type=`` for ``1,2,4`` (whole numbers ``>= minimum``)."""
    return _number_list(int, "whole numbers", minimum)


def float_list(minimum: float = 0.0) -> Callable[[str], list[float]]:
    """A ``type=`` for ``0.5,1,25`` (finite numbers ``>= minimum``)."""
    return _number_list(float, "numbers", minimum)
