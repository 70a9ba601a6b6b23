"""The profile folders judge's commands take: argparse's type and the loading they check.

A command checks its input itself, before anything is priced, and reports only that as bad input
(one line, exit 2: :class:`distlab.cli.run.UsageError`); what goes wrong after those checks is a
bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from distlab.cli.run import UsageError
from distlab.profile.load import Profile, load_profile

__all__ = ["loaded_profile", "profile_dir_arg"]


def profile_dir_arg(text: str) -> Path:
    """argparse type: ``text`` as a profile folder (one holding ``profile.json``)."""
    path = Path(text)
    if not (path / "profile.json").is_file():
        raise argparse.ArgumentTypeError(
            f"invalid profile folder {text!r}: must be a folder holding profile.json (make one "
            "with: python -m distlab.profile)")
    return path


def loaded_profile(path: Path, must: str) -> Profile:
    """The profile folder ``path`` loaded (:func:`distlab.profile.load.load_profile`).

    Raises:
        UsageError: ``argument DIR: invalid value PATH: <must> (<why>)`` where it is not a
            profile folder or its JSON cannot be read (``load_profile``'s own ``ValueError``).
    """
    try:
        return load_profile(path)
    except ValueError as exc:
        raise UsageError(f"argument DIR: invalid value {str(path)!r}: {must} ({exc})") from None
