"""The tested stack: the exact versions of distlab's notebook and test stack that CI passed with.

    python tools/constraints.py write            # constraints.txt from this environment
    python tools/constraints.py check            # does this environment hold those versions?
    python tools/constraints.py names            # the stack's package names, one a line
    python tools/constraints.py versions         # what a test run runs with (CI prints it)

``make install`` (and so ``make lab`` and ``make test``) installs distlab with ``-c
constraints.txt``, so a release of JupyterLab, ipywidgets, nbval or anything they pull in cannot
turn main red without a commit. ``make test STACK=latest`` installs the newest releases instead;
``make constraints`` installs the newest releases and writes their versions here (then run
``make test`` and commit the file if it passes).

The stack is every distribution that ``distlab[test]``'s requirements reach in this environment,
markers evaluated, with two exceptions: torch keeps its own pin (``TORCH_VERSION``), and what only
torch needs (sympy, networkx, ... and a CUDA build's nvidia-* wheels) is torch's business: pinning
it would make pip refuse a user's own torch. A package both torch and the stack need (jinja2,
typing-extensions) is pinned.

A pinned release that declares a ``Requires-Python`` leaving out a Python distlab supports
(soupsieve 4.1.3 needs 3.11.5; Debian 12's python3 is 3.11.2) is written with that requirement
as an environment marker (``soupsieve==4.1.3; python_full_version >= "3.11.5"``): where the
marker holds, the pin holds; on an older Python the package is left to pip, which takes the
newest release that runs there, instead of failing the whole install.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"
PROJECT = "distlab"
EXTRA = "test"
KEPT_APART = frozenset({"torch", PROJECT})
"""Never pinned here: torch has TORCH_VERSION, distlab is the project itself."""

HEADER = """\
# The tested stack: exact versions of distlab's notebook and test stack (every package that
# distlab[test] needs, torch and what only torch needs left out) that `make test` passed with.
# A pin whose release needs a newer Python than some distlab supports carries that Python floor
# as a marker: on an older Python (Debian 12's 3.11.2) pip takes the newest release that runs.
# make lab / make test install with `-c constraints.txt`; `make test STACK=latest` ignores it and
# takes the newest releases; `make constraints` installs the newest and rewrites this file.
# Written by tools/constraints.py from Python {python}.
"""


def _requirements(dist: str, extras: Iterable[str] = ()) -> list[Requirement]:
    """``dist``'s requirements whose markers hold here (with ``extras`` asked for)."""
    env = default_environment()
    out = []
    for text in metadata.requires(dist) or []:
        req = Requirement(text)
        if req.marker is None:
            out.append(req)
            continue
        asks = [""] + list(extras)
        if any(req.marker.evaluate({**env, "extra": e}) for e in asks):
            out.append(req)
    return out


def stack() -> dict[str, str]:
    """``{canonical name: installed version}`` of every distribution ``distlab[test]`` reaches
    here, torch's own edges not followed (see the module docstring). ``LookupError`` names a
    requirement that is not installed (run ``make install`` first)."""
    found: dict[str, str] = {}
    todo: list[tuple[str, tuple[str, ...]]] = [(PROJECT, (EXTRA,))]
    while todo:
        name, extras = todo.pop()
        for req in _requirements(name, extras):
            key = canonicalize_name(req.name)
            if key in KEPT_APART:
                continue
            try:
                version = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                raise LookupError(f"{req.name} (needed by {name}) is not installed here: run "
                                  "make install first") from None
            if key not in found:
                found[key] = version
                todo.append((req.name, tuple(sorted(req.extras))))
            elif req.extras:
                todo.append((req.name, tuple(sorted(req.extras))))
    return dict(sorted(found.items()))


PYTHONS = tuple(f"3.{minor}.{patch}" for minor in range(10, 15) for patch in (0, 2))
"""Pythons a pin must install on to need no marker: 3.10 (distlab's floor) to 3.14, each at an
early patch release, as distributions ship them (Debian 12: 3.11.2)."""


def python_marker(requires_python: str | None) -> str:
    """``requires_python`` (a release's ``Requires-Python``) as an environment marker, or ""
    when it admits every Python of :data:`PYTHONS` (or is absent)."""
    if not requires_python:
        return ""
    spec = SpecifierSet(requires_python)
    if all(spec.contains(v) for v in PYTHONS):
        return ""
    return " and ".join(f'python_full_version {s.operator} "{s.version}"'
                        for s in sorted(spec, key=str))


def requires_python(name: str) -> str | None:
    """The installed release of ``name``'s ``Requires-Python`` (None when it declares none)."""
    return metadata.metadata(name).get("Requires-Python")


def render(pins: dict[str, str], markers: dict[str, str] | None = None) -> str:
    """The constraints file's text for ``pins``, a pin followed by ``; marker`` where
    ``markers`` gives one (:func:`python_marker`)."""
    python = ".".join(map(str, sys.version_info[:3]))
    marks = markers or {}
    return HEADER.format(python=python) + "".join(
        f"{n}=={v}{'; ' + marks[n] if marks.get(n) else ''}\n" for n, v in pins.items())


def read(path: Path = CONSTRAINTS, *, every: bool = False) -> dict[str, str]:
    """``{canonical name: version}`` from a constraints file (comments and blanks skipped): the
    pins that hold on this Python (a pin whose marker does not hold left out), or with
    ``every`` all of them; ``ValueError`` names a line that is not ``name==version``."""
    pins = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        if req.marker is not None and not every and not req.marker.evaluate():
            continue
        spec = list(req.specifier)
        if len(spec) != 1 or spec[0].operator != "==":
            raise ValueError(f"{path.name}:{number}: expected name==version, got {raw!r}")
        pins[canonicalize_name(req.name)] = spec[0].version
    return pins


def differences(pins: dict[str, str], here: dict[str, str]) -> list[str]:
    """One line per package whose version here is not the pinned one, or that only one side
    has."""
    lines = []
    for name in sorted(set(pins) | set(here)):
        want, have = pins.get(name), here.get(name)
        if want != have:
            lines.append(f"{name}: constraints {want or 'absent'}, installed {have or 'absent'}")
    return lines


SHOWN = ("jupyterlab", "ipywidgets", "ipykernel", "nbval", "playwright", "torch")
"""The packages whose versions a test run states first."""


def chromium_version() -> str:
    """What ``chromium --version`` says (the real-browser tests' browser), or why not."""
    exe = shutil.which("chromium")
    if exe is None:
        return "absent (the real-browser tests skip and say so)"
    try:
        done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{exe} did not answer --version ({exc})"
    return done.stdout.strip() or done.stderr.strip()


def versions_lines(pins: dict[str, str]) -> list[str]:
    """One line per :data:`SHOWN` package (installed version, and the tested one where it
    differs) and one for Chromium: what a run of the tests runs with."""
    lines = []
    for name in SHOWN:
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            have = "absent"
        want = pins.get(canonicalize_name(name))
        note = "" if want in (None, have) else f" (constraints.txt: {want})"
        lines.append(f"{name:>10} {have}{note}")
    lines.append(f"{'chromium':>10} {chromium_version()}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("write", "check", "names", "versions"))
    parser.add_argument("--file", type=Path, default=CONSTRAINTS,
                        help="the constraints file (default: constraints.txt at the root)")
    args = parser.parse_args(argv)
    try:
        if args.command == "names":
            print("\n".join(read(args.file)))
            return 0
        if args.command == "versions":
            print("\n".join(versions_lines(read(args.file))))
            return 0
        here = stack()
        if args.command == "write":
            args.file.write_text(render(here, {n: python_marker(requires_python(n))
                                               for n in here}))
            print(f"constraints: {len(here)} packages written to {args.file}")
            return 0
        pins = read(args.file)
        elsewhere = set(read(args.file, every=True)) - set(pins)   # pinned for newer Pythons
        found = differences(pins, {n: v for n, v in here.items() if n not in elsewhere})
    except (LookupError, ValueError, OSError) as exc:
        print(f"constraints: {exc}", file=sys.stderr)
        return 2
    if found:
        print(f"constraints: this environment differs from {args.file.name}:", *found, sep="\n  ")
        return 1
    print(f"constraints: this environment holds the tested stack ({len(here)} packages)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
