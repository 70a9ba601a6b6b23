"""Progress lines: on stderr by default; inside a relay, handed to the bar (from this process and
from processes it starts) and never printed where a bar is drawn."""

from __future__ import annotations

import multiprocessing as mp
import os

from distlab.cli import progress


def _child_emits(n: int) -> None:
    for i in range(n):
        progress.emit(f"[child] round {i + 1}/{n}")


def test_emit_prints_on_stderr_outside_a_relay(capfd) -> None:
    assert progress.ENV not in os.environ
    progress.emit("[x] round 1/2")
    out, err = capfd.readouterr()
    assert out == "" and err == "[x] round 1/2\n"


def test_relay_hands_lines_of_spawned_processes_to_show(capfd) -> None:
    shown: list[str] = []
    with progress.relay(shown.append, interval_s=0.05):
        progress.emit("[parent] round 1/1")
        child = mp.get_context("spawn").Process(target=_child_emits, args=(3,))
        child.start()
        child.join(timeout=120)
        assert child.exitcode == 0
        name = os.environ[progress.ENV]
    assert os.environ.get(progress.ENV) is None and not os.path.exists(name)
    assert shown and shown[-1] == "[child] round 3/3"
    assert all("round" in s for s in shown)
    out, err = capfd.readouterr()
    assert "round" not in out + err, "nothing printed where a bar is drawn"
    progress.emit("[x] after")  # the relay is over: stderr again
    assert capfd.readouterr().err == "[x] after\n"


def test_emit_after_the_relay_ended_creates_nothing(tmp_path, monkeypatch, capfd) -> None:
    """A rank still running when its parent's relay ended keeps the variable; its lines are
    dropped and no file comes back."""
    gone = tmp_path / "relay.txt"
    monkeypatch.setenv(progress.ENV, str(gone))
    progress.emit("[late] round 1/1")
    assert not gone.exists() and capfd.readouterr().err == ""
