"""No issue number of this project in the library, its data or the notebooks: a user reads the
library's output and docstrings, not our tracker ("(issue 59)" in a trace note said nothing to
them). Citations of other projects' threads stay: a URL (``github.com/.../issues/309``) or an
``owner/repo#N`` / ``repo#N`` reference names whose issue it is."""

from __future__ import annotations

import re
from pathlib import Path

import distlab
from helpers.paths import ROOT

LIB = Path(distlab.__file__).resolve().parent
_ISSUE = re.compile(r"\bissues?\s*(?:no\.?\s*|number\s*|#\s*)?\d+", re.IGNORECASE)
_CITATION = re.compile(r"https?://\S+|[\w.-]+(?:/[\w.-]+)?#\d+")


def issue_numbers(root: Path, patterns: tuple[str, ...]) -> list[str]:
    """``path:line: text`` of every mention of an issue number under ``root`` in files
    matching ``patterns``, citations of other projects left out."""
    found = []
    for pattern in patterns:
        for path in sorted(root.rglob(pattern)):
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if _ISSUE.search(_CITATION.sub("", line)):
                    found.append(f"{path.relative_to(root)}:{number}: {line.strip()[:100]}")
    return found


def test_the_library_and_its_data_cite_no_issue_number() -> None:
    assert issue_numbers(LIB, ("*.py", "*.json")) == []


def test_the_notebooks_cite_no_issue_number() -> None:
    assert issue_numbers(ROOT / "notebooks", ("*.ipynb",)) == []


def test_the_scanner_finds_a_planted_issue_number(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text('NOTE = "not priced (issue 59)"\nX = 1  # see Issue #12\n'
                                   'URL = "https://github.com/NVIDIA/nccl-tests/issues/309"\n'
                                   'SRC = "nccl-tests#309, ROCm/rccl#1502"\n')
    assert [f.split(":")[1] for f in issue_numbers(tmp_path, ("*.py",))] == ["1", "2"]
