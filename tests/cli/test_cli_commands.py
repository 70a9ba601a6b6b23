"""Every distlab command, as a user meets it: ``--help`` says each default once, a bad option is
one line that names ``--help`` (exit 2), and an output path that cannot be written is refused in
one line before anything is measured.

The command list is derived from the dispatchers (``python -m distlab.bench``, ``python -m
distlab.judge``), the profile, ``python -m distlab.nccl`` and ``python -m distlab.rccl``, so a
new command of a dispatcher is checked without being named here.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from distlab.bench.__main__ import MODULES as BENCH_MODULES
from distlab.judge.__main__ import COMMANDS as JUDGE_MODULES
from helpers.paths import ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
PROFILE = ROOT / "results" / "profiles" / "vm-2026-11-23"
RUN = ROOT / "results" / "allreduce_ws2_run1.json"

# prog -> its main(argv); every command a user can type
COMMANDS: dict[str, str] = {
    **{f"python -m distlab.bench {n}": m for n, m in BENCH_MODULES.items()},
    **{f"python -m distlab.judge {n}": m for n, m in JUDGE_MODULES.items()},
    "python -m distlab.profile": "distlab.profile.cli",
    "python -m distlab.nccl": "distlab.nccl.__main__",
    "python -m distlab.rccl": "distlab.rccl.__main__",
    "python -m distlab.plan": "distlab.plan.__main__",
    "python -m distlab.samplers": "distlab.samplers.__main__",
    "python -m distlab.health": "distlab.health.__main__",
}
DISPATCHERS = {"python -m distlab.bench": "distlab.bench.__main__",
               "python -m distlab.judge": "distlab.judge.__main__"}
# prog -> (the arguments it needs besides the path, the output option): every command that writes
WRITERS: dict[str, tuple[list[str], str]] = {
    **{f"python -m distlab.bench {n}": ([], "--json") for n in BENCH_MODULES},
    "python -m distlab.judge refit": ([str(PROFILE)], "--json"),
    "python -m distlab.judge summary": ([str(RUN)], "--out"),
    "python -m distlab.nccl": (["h100_sxm8"], "--json"),
    "python -m distlab.rccl": ([], "--json"),
    "python -m distlab.profile": (["--quick"], "--out"),
    "python -m distlab.health": ([str(ROOT / "results" / "nccl-tests-logs" /
                                      "h100_1node_nvls.log")], "--json"),
}
SAYS_DEFAULT = re.compile(r"\(default\b|(?<!\()\bdefault:", re.IGNORECASE)
ONE_LINE = re.compile(r"^(?P<prog>python -m distlab[\w .-]*): error: (?P<msg>.+) \(see --help\)$")


def _main(prog: str) -> Callable[[list[str]], int]:
    """``main(argv)`` of ``prog`` as the shell reaches it: through its family's dispatcher."""
    family = next((d for d in DISPATCHERS if prog.startswith(d + " ")), None)
    if family is None:
        return importlib.import_module(COMMANDS.get(prog) or DISPATCHERS[prog]).main
    dispatch = importlib.import_module(DISPATCHERS[family]).main
    name = prog[len(family) + 1:]
    return lambda argv: dispatch([name, *argv])


def _option_entries(help_text: str) -> list[str]:
    """The help's option and positional entries (the description above them is left out), each
    joined onto one line."""
    body = help_text.split("\npositional arguments:\n", 1)[-1]
    if "\noptions:\n" in help_text and "\npositional arguments:\n" not in help_text:
        body = help_text.split("\noptions:\n", 1)[1]
    entries: list[str] = []
    for line in body.splitlines():
        if re.match(r"^  \S", line):
            entries.append(line.strip())
        elif line.startswith("   ") and entries:
            entries[-1] += " " + line.strip()
    return entries


@pytest.mark.parametrize("prog", sorted(COMMANDS))
def test_help_says_each_default_once(prog: str, capsys) -> None:
    assert _main(prog)(["--help"]) == 0
    entries = _option_entries(capsys.readouterr().out)
    assert len(entries) >= 2, "the help lists its options"
    doubled = [e for e in entries if len(SAYS_DEFAULT.findall(e)) > 1]
    assert not doubled, f"{prog}: a default said twice: {doubled}"
    assert not [e for e in entries if "(default: ())" in e], f"{prog}: an empty default shown"


REST_MARKUP = re.compile(r":(func|mod|class|data|meth|attr|exc):`|``|^\s*\.\. |docstring",
                         re.MULTILINE)


@pytest.mark.parametrize("prog", sorted(COMMANDS) + sorted(DISPATCHERS))
def test_help_is_plain_text(prog: str, capsys) -> None:
    """A terminal shows no reST (roles, double backquotes, directives) and never sends the user
    to a docstring."""
    assert _main(prog)(["--help"]) == 0
    text = capsys.readouterr().out
    assert not REST_MARKUP.findall(text), f"{prog}: {REST_MARKUP.findall(text)}"


def test_plain_text_renders_rest() -> None:
    from distlab.cli.options import plain_text

    doc = ("Runs :func:`~distlab.launch.run` and :mod:`distlab.zero` with ``--iters``::\n"
           ".. note:: gone\n    code")
    assert plain_text(doc) == "Runs run and distlab.zero with --iters:\n    code"


@pytest.mark.parametrize("prog", sorted(COMMANDS) + sorted(DISPATCHERS))
def test_bad_option_is_one_line_naming_help(prog: str, capsys) -> None:
    argv = ["--no-such-option"]
    if prog in DISPATCHERS:  # the dispatcher's own error: an unknown command
        argv = ["no-such-command"]
    assert _main(prog)(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, f"{prog}: {err}"
    m = ONE_LINE.match(lines[0])
    assert m and m["prog"] == prog, lines[0]


def test_every_parser_is_the_one_line_parser() -> None:
    """No command builds a plain ``argparse.ArgumentParser`` (whose error prints the usage
    block); the sampler's internal child (``--child``, never typed by a user) is the one other."""
    plain = {str(path.relative_to(ROOT)) for path in (ROOT / "lib" / "distlab").rglob("*.py")
             if "ArgumentParser(" in path.read_text() and path.name != "options.py"}
    assert plain <= {"lib/distlab/bench/sampler.py"}, plain


def _measuring_is_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every benchmark run and profile part fail the test: the path check must come first."""
    def measured(*args: object, **kwargs: object) -> None:
        pytest.fail("measured before the output path was checked")
    for module in BENCH_MODULES.values():
        bench = importlib.import_module(module).BENCHMARK
        monkeypatch.setattr(type(bench), "run", measured)
    monkeypatch.setattr("distlab.profile.cli.get_part", lambda name: measured)


@pytest.mark.parametrize("prog", sorted(WRITERS))
@pytest.mark.parametrize("case", ["under a file", "the wrong kind"])
def test_output_path_refused_before_anything_is_measured(prog: str, case: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys) -> None:
    """``case``: a path under a file; a folder given for a file, or a file for a folder."""
    _measuring_is_a_failure(monkeypatch)
    args, option = WRITERS[prog]
    f = tmp_path / "f"
    f.write_text("")
    wants_folder = prog == "python -m distlab.profile"
    target = f / "out" if case == "under a file" else f if wants_folder else tmp_path
    assert _main(prog)([*args, option, str(target)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert ONE_LINE.match(line), line
    assert f"argument {option}" in line and repr(str(target)) in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"] and f.read_text() == ""


@pytest.mark.timeout(200)
def test_profile_out_under_a_file_exits_2_at_once(tmp_path: Path) -> None:
    """``touch f; python -m distlab.profile --quick --out f/prof``: one line, exit 2, nothing
    measured (no part's line on stdout), nothing created."""
    (tmp_path / "f").write_text("")
    proc = subprocess.run([sys.executable, "-m", "distlab.profile", "--quick", "--out", "f/prof"],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "python -m distlab.profile: error: argument --out: cannot write to 'f/prof': "
        f"{str(tmp_path / 'f')!r} is a file, not a folder (see --help)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("argv", [["bench", "allreduce", "-a", "ring"], ["bench", "nope"],
                                  ["judge", "refit", "--frobnicate"]],
                         ids=["bench-json", "bench-unknown", "judge-option"])
def test_one_line_errors_from_the_shell(argv: list[str], tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    extra = ["--json", "f/x.json"] if argv[-1] == "ring" else []
    proc = subprocess.run([sys.executable, "-m", f"distlab.{argv[0]}", *argv[1:], *extra],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert ONE_LINE.match(line) and "usage:" not in proc.stderr, proc.stderr


def test_profile_default_folder_is_checked_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys) -> None:
    """Without --out the profile writes under results/profiles of the working folder: a file
    named ``results`` there is refused before any part runs."""
    _measuring_is_a_failure(monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").write_text("")
    assert _main("python -m distlab.profile")(["--quick", "--only", "env"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert ONE_LINE.match(line) and "cannot write to the default 'results/profiles/" in line
    assert f"{str(tmp_path / 'results')!r} is a file, not a folder" in line and "--out" in line


def test_the_readme_promises_what_the_commands_do() -> None:
    """The README's sentence on errors names the ending every error line has."""
    from distlab.cli.options import HELP_HINT

    text = " ".join((ROOT / "README.md").read_text().split())
    assert f"is one error line, ending with `{HELP_HINT}`, with exit status 2" in text
    assert ONE_LINE.match(f"python -m distlab.profile: error: it went wrong {HELP_HINT}")
