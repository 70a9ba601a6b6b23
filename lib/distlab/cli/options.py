"""Command-line option types shared by every distlab command (benchmarks, profile).

Every option is checked while argparse parses it, so a bad value ends in one line that names the
option, the value and what is allowed, and exit status 2 (:class:`Parser`'s ``error``: one line
that ends with ``(see --help)``, no usage block), never a traceback or a NaN in the output. Use
these as ``type=`` functions, :func:`parser` for the help layout (every option shows its default
once), and :func:`fail` for checks that involve two options. Paths a command writes are checked
the same way, before anything is measured: :func:`output_file` (``--json``) and
:func:`output_dir` (a profile folder).

    p = options.parser("python -m distlab.bench transfers", __doc__)
    p.add_argument("--iters", type=options.positive_int, default=20, help="timed copies per size")
    args = p.parse_args(argv)
    if args.maxbytes < args.minbytes:
        options.fail(p, "-e/--maxbytes", args.maxbytes, f">= -b/--minbytes ({args.minbytes})")
"""

from __future__ import annotations

import argparse
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
    "HELP_HINT", "Parser", "checked", "comma_choices", "existing_file", "fail", "nonnegative_int",
    "output_dir", "output_file", "output_problem", "parser", "plain_text", "positive_float",
    "positive_int", "report_options",
    "size_bytes", "size_list", "size_sweep", "int_list", "float_list", "int_at_least",
]

_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}


HELP_HINT = "(see --help)"
"""How every one-line error ends: where to look next."""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Keeps the module docstring's layout and appends ``(default: X)`` to every option whose
    help does not already say its default (``(default ...`` or ``default: ...`` written in the
    help wins, so a default is said once), and ``(at least N)`` to every option typed
    :func:`int_at_least` with ``N >= 2`` (a refusal the help did not announce is a surprise)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        minimum = getattr(action.type, "minimum", None)
        if minimum is not None and minimum >= 2 and not _SAYS_MINIMUM.search(text):
            text = f"{text} (at least {minimum})".strip()
        if _SAYS_DEFAULT.search(text):
            return text
        saved, action.help = action.help, text
        try:
            return super()._get_help_string(action)
        finally:
            action.help = saved


_SAYS_DEFAULT = re.compile(r"\(default\b|\bdefault:", re.IGNORECASE)
"""A help text that states its option's default itself."""

_SAYS_MINIMUM = re.compile(r"\bat least\b|>=", re.IGNORECASE)
"""A help text that states its option's minimum itself."""


_NEGATIVE_VALUE = re.compile(r"^-\d*\.?\d+(?:[eE][-+]?\d+)?[A-Za-z]*$")
"""What looks like a negative value (``-1``, ``-0.5``, ``-1K``, ``-2MiB``), not an option: argparse
alone takes ``-1K`` for an unknown flag and says "expected one argument"."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose error is one line on stderr, ``prog: error: message (see
    --help)``, and exit status 2: no usage block above it. A value that looks negative (``-b
    -1K``) reaches its option's type, which names what is allowed."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._negative_number_matcher = _NEGATIVE_VALUE

    def error(self, message: str) -> NoReturn:
        """Print the one line and exit 2 (argparse calls this for every bad option)."""
        self.exit(2, f"{self.prog}: error: {' '.join(str(message).split())} {HELP_HINT}\n")


_ROLE = re.compile(r":[a-z]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain_text(doc: str | None) -> str | None:
    """A docstring as a terminal shows it: reST roles become their target's name
    (``:func:`~a.b.run``` -> ``run``, ``:mod:`a.b``` -> ``a.b``), double backquotes go, a
    paragraph's closing ``::`` becomes ``:`` and ``.. directive::`` lines are left out."""
    if doc is None:
        return None

    def role(m: re.Match[str]) -> str:
        target = m.group(1).strip()
        return target.rsplit(".", 1)[-1] if m.group(0).startswith(":") and "`~" in m.group(0) \
            else target

    lines = []
    for line in _LITERAL.sub(r"\1", _ROLE.sub(role, doc)).splitlines():  # spans may wrap
        if line.lstrip().startswith(".. "):
            continue
        if line.rstrip().endswith("::"):
            line = line.rstrip()[:-1]
        lines.append(line)
    return "\n".join(lines)


def parser(prog: str, doc: str | None) -> Parser:
    """A :class:`Parser` whose help shows ``doc`` laid out as written, in plain text
    (:func:`plain_text`), and every option's default once."""
    return Parser(prog=prog, description=plain_text(doc), formatter_class=_HelpFormatter)


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
    parse.minimum = minimum  # type: ignore[attr-defined]  # the help says it (_HelpFormatter)
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


def checked(check: Callable[[Any], object], convert: Callable[[str], Any] | None = None,
            ) -> Callable[[str], object]:
    """A ``type=`` from the library's own check of an argument (``check(value)`` returns it
    resolved, or raises ``ValueError`` / ``TypeError`` with the message the library gives a
    Python caller): the option and the function refuse the same values with the same words.
    ``convert`` turns the text first (``float`` for a number)."""
    def parse(text: str) -> object:
        try:
            return check(convert(text) if convert is not None else text)
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: {exc}") from None
    parse.__name__ = getattr(check, "__name__", "value")
    return parse


def existing_file(text: str) -> Path:
    """A path to a readable file that exists now."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"invalid path {text!r}: a folder, not a file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"invalid path {text!r}: no such file")
    return path


def output_problem(path: str | os.PathLike[str], kind: str) -> str | None:
    """Why a command could not write ``path``, or None when it can. ``kind``: ``"file"`` (a
    file written there, its folders created as needed) or ``"dir"`` (a folder created there,
    files written inside it).

    The target must not be an existing folder (for a file) or file (for a folder); the nearest
    existing ancestor must be a folder where a file can be made (it is where the missing folders
    would be created); an existing target must be writable. Nothing visible is created: a file
    is opened for appending and closed unchanged, a folder is tried with an unnamed temporary
    file that vanishes when closed.
    """
    if kind not in ("file", "dir"):
        raise ValueError(f"kind must be 'file' or 'dir', got {kind!r}")
    if not os.fspath(path).strip():
        return "an empty path"
    p = Path(path).expanduser()
    if kind == "file" and (p.is_dir() or os.fspath(path).endswith(("/", os.sep))):
        return "it is a folder, and a file path is needed"
    if kind == "dir" and p.exists() and not p.is_dir():
        return "it is a file, and a folder path is needed"
    if kind == "file" and p.exists():
        return _probe(lambda: open(p, "ab").close(), "it cannot be written")
    folder = p if p.is_dir() else p.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{str(folder)!r} is a file, not a folder"
    where = "it" if folder == p else repr(str(folder))
    return _probe(lambda: tempfile.TemporaryFile(dir=folder).close(),
                  f"nothing can be created in {where}")


def _probe(attempt: Callable[[], None], what: str) -> str | None:
    """None when ``attempt()`` works, else ``what (the OS's reason)``."""
    try:
        attempt()
    except OSError as exc:
        return f"{what} ({exc.strerror or type(exc).__name__})"
    return None


def _output(kind: str) -> Callable[[str], Path]:
    def parse(text: str) -> Path:
        why = output_problem(text, kind)
        if why is not None:
            raise argparse.ArgumentTypeError(f"cannot write to {text!r}: {why}")
        return Path(text).expanduser()
    parse.__name__ = f"output {kind}"
    return parse


output_file = _output("file")
"""A ``type=`` for a file a command will write (``--json``): :func:`output_problem` says why
not, before anything is measured; nothing is created while checking."""
output_dir = _output("dir")
"""A ``type=`` for a folder a command will create and fill (a profile's ``--out``)."""


def report_options(p: argparse.ArgumentParser, judge: tuple[str, str], boxes: str,
                   json: str) -> None:
    """The three options every collective library's commands share, in this order: the flag that
    prints the model's judgement on published tables (``judge``: its spelling, ``--judge`` on
    the model's own command or ``--published`` on ``python -m distlab.judge``, and its help),
    ``--boxes`` (every box the model knows; help ``boxes``) and ``--json OUT`` (an
    :data:`output_file`; help ``json``). NCCL's and RCCL's commands and their ``judge``
    subcommands all add them here."""
    flag, judge_help = judge
    p.add_argument(flag, action="store_true", help=judge_help)
    p.add_argument("--boxes", action="store_true", help=boxes)
    p.add_argument("--json", metavar="OUT", default=None, type=output_file, help=json)


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
    # the harness shows 'all' and a group's name: it reads these back
    parse.choices = tuple(choices)  # type: ignore[attr-defined]
    parse.all_word = all_word  # type: ignore[attr-defined]
    parse.groups = groups  # type: ignore[attr-defined]
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
