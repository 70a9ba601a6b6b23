"""The README as the person who opens it first reads it: what distlab is, the two commands and
what they show on the first screen, five things to do that each run, one line per notebook."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from helpers.paths import ROOT

TEXT = (ROOT / "README.md").read_text()
FIRST_SCREEN = 40
"""Lines a terminal or a repository page shows before scrolling."""


def _section(title: str) -> str:
    return TEXT.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _to_do() -> list[tuple[str, str]]:
    """``(what you want, its command)`` of every row of "What you can do"."""
    rows = re.findall(r"^\| ([^|`]+?) \| `(python -m [^`]+)` \|$", _section("What you can do"),
                      re.MULTILINE)
    return [(want.strip(), cmd) for want, cmd in rows]


def test_the_first_screen_says_what_it_is_the_commands_and_where_to_start() -> None:
    first = "\n".join(TEXT.splitlines()[:FIRST_SCREEN])
    assert first.index("distributed training") < first.index("make lab")
    for words in ("make lab", "make test", "00_start_here", "token=", "minutes"):
        assert words in first, words
    assert "/dev/shm" not in first and "DISTLAB_TEST_SPLIT" not in first


def test_six_things_each_with_one_command() -> None:
    wants = [w for w, _ in _to_do()]
    assert len(wants) == 6, wants
    for words in ("which rank reads", "profile", "nccl-tests log", "training run", "layout",
                  "price NCCL"):
        assert any(words in w for w in wants), words


@pytest.mark.parametrize(("want", "command"), _to_do())
def test_each_command_is_one_the_package_has(want: str, command: str) -> None:
    """Its module answers ``--help``; the ones that need nothing from the user (no trace folder,
    no minutes of profiling, no planner search) run, the health check on a log of the tests'."""
    argv = shlex.split(command)
    proc = subprocess.run([sys.executable, *argv[1:3], "--help"] if argv[3:4] != ["trace"]
                          else [sys.executable, *argv[1:4], "--help"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-1000:]
    if argv[2] == "distlab.health":
        argv = [*argv[:3], str(ROOT / "results" / "nccl-tests-logs" / "h100_1node_nvls.log")]
    if argv[2] in ("distlab.samplers", "distlab.nccl", "distlab.health"):
        run = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True,
                             timeout=120, cwd=ROOT)
        assert run.returncode == 0 and run.stdout.strip(), run.stderr[-1000:]


def test_each_notebook_is_one_short_line() -> None:
    rows = re.findall(r"^\| `(\w+)` \| (.+) \|$", _section("The notebooks"), re.MULTILINE)
    assert len(rows) == len(list((ROOT / "notebooks").glob("*.ipynb")))
    long = [(name, len(text.split())) for name, text in rows if len(text.split()) > 18]
    assert not long, long


def test_every_page_it_links_exists() -> None:
    links = re.findall(r"\]\(([^)#]+)\)", TEXT)
    assert links and all((ROOT / link).exists() for link in links), links


def test_install_detail_lives_in_docs() -> None:
    assert "Install variants" in TEXT and "docs/install.md" in TEXT
    install = (ROOT / "docs" / "install.md").read_text()
    for words in ("TORCHVISION=skip", "pip older than 23.2", "environment.yml",
                  "DISTLAB_TEST_SPLIT"):
        assert words in install, words
