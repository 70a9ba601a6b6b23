"""``python -m distlab.judge verdict DIR [DIR ...]``: a verdict on every profile row that has an
expectation, one line each.

    python -m distlab.judge verdict results/profiles/h100-2026-11-23
    python -m distlab.judge verdict results/profiles/* --low

Prints, per profile folder, one line per judged row: ``part  row  measured  expected  unit
ratio  verdict`` (GB/s, or steps/s for DDP; ratio = measured / expected; ``low``, ``high``,
``unsure`` (beyond a threshold, but the row's timed rounds reach back inside) or ``ok``), the low
rows first. What has an expectation and the thresholds are :mod:`distlab.profile.expected`'s. A
folder without ``profile.json`` is one error line and exit 2. Reads JSON only; measures nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from distlab.cli import options
from distlab.cli.run import UsageError, run_main
from distlab.judge.profile_args import profile_dir_arg
from distlab.profile.expected import (
    REHEARSAL,
    UNSURE,
    VERDICTS,
    profile_verdicts,
    thresholds_text,
    verdict_table,
)
from distlab.report.jsonfile import read_json

__all__ = ["main", "stored_parts"]


def stored_parts(folder: Path) -> dict[str, dict[str, Any]]:
    """The part documents of a profile folder as stored (name -> JSON), those its index names.

    Raises:
        ValueError: ``profile.json`` or a part file it names is not valid JSON.
    """
    try:
        index = read_json(folder / "profile.json")
        return {name: read_json(folder / e["file"])
                for name, e in index.get("parts", {}).items()
                if e.get("file") and (folder / e["file"]).is_file()}
    except (json.JSONDecodeError, AttributeError, TypeError) as exc:
        raise ValueError(f"{folder}: not a readable profile ({exc})") from None


def _parser() -> argparse.ArgumentParser:
    p = options.parser("python -m distlab.judge verdict", __doc__)
    p.add_argument("profiles", nargs="+", type=profile_dir_arg, metavar="DIR",
                   help="profile folders (each holding profile.json)")
    p.add_argument("--low", action="store_true", help="print only the rows judged low")
    return p


def _verdict_command(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    for n, folder in enumerate(args.profiles):
        try:
            parts = stored_parts(folder)
        except ValueError as exc:  # stored_parts' own: JSON it cannot read
            raise UsageError(f"argument DIR: invalid value {str(folder)!r}: {exc}") from None
        verdicts = profile_verdicts(parts)
        shown = [v for v in verdicts if v.verdict == "low"] if args.low else verdicts
        counts = {k: sum(v.verdict == k for v in verdicts) for k in VERDICTS}
        if n:
            print()
        print(f"# {folder}")
        print(f"# {len(verdicts)} rows with an expectation: {counts['low']} low, "
              f"{counts['high']} high, {counts[UNSURE]} unsure, {counts['ok']} ok"
              + (f"; {counts[REHEARSAL]} a rehearsal's, not judged" if counts[REHEARSAL] else ""))
        print(f"# ok within {thresholds_text()} of expected; low rows first")
        print("# unsure: beyond a threshold, but the row's timed rounds reach back inside")
        if shown:
            print(verdict_table(shown))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0, 2 with one error line, or 130 on Ctrl-C (one line, no traceback)."""
    return run_main("python -m distlab.judge verdict", _verdict_command, argv,
                    on_interrupt="nothing printed")


if __name__ == "__main__":
    sys.exit(main())
