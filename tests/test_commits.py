"""Commit subjects from CONTRIBUTING.md's arrival on: at most 72 characters, one line."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from helpers.paths import ROOT

LIMIT = 72


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=True).stdout


def subjects_since_the_rule() -> list[str]:
    """The subjects of the commits made since the one that added CONTRIBUTING.md (by their
    commit time: a branch begun before the rule and merged after it keeps its old subjects)."""
    first = _git("log", "--diff-filter=A", "--format=%ct", "--", "CONTRIBUTING.md").split()
    if not first:
        return []
    return _git("log", "--format=%s", f"--since=@{first[-1]}", "HEAD").splitlines()


def long_subjects(subjects: list[str]) -> list[str]:
    """The subjects over :data:`LIMIT` characters."""
    return [s for s in subjects if len(s) > LIMIT]


def test_long_subjects_are_found() -> None:
    assert long_subjects(["plan: refuse a bad layout", "x" * 73]) == ["x" * 73]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="not a git checkout: no commits to read")
def test_commit_subjects_since_the_rule_fit_72_characters() -> None:
    assert long_subjects(subjects_since_the_rule()) == []
