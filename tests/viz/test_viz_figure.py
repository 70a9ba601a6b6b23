"""distlab.viz.figure: a DisplayFigure knows whether it was ever rendered; the audit reports
the ones a cell made and never showed, and only those."""

from __future__ import annotations

import io
import weakref

import pytest

from distlab.viz import figure as F


def test_rendered_only_after_a_render() -> None:
    fig = F.new_figure(figsize=(3, 2), layout=None)
    ax = fig.add_subplot()
    ax.plot([0, 1], [1, 0])
    fig.tight_layout()           # layout computes sizes without rendering
    assert not fig.rendered
    assert F.figure_png(fig).startswith(b"\x89PNG")
    assert fig.rendered
    other = F.new_figure(figsize=(3, 2))
    other.savefig(io.BytesIO(), format="svg")
    assert other.rendered


def test_report_unshown_names_only_unrendered_figures(capsys: pytest.CaptureFixture[str]) -> None:
    shown = F.new_figure(figsize=(3, 2))
    lost = F.new_figure(figsize=(5, 1))
    lost.add_subplot().set_title("gone")
    F._pending[:] = [weakref.ref(shown), weakref.ref(lost)]
    F.figure_png(shown)
    F._report_unshown()
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(F.AUDIT_MARK)
    assert "5x1 in" in lines[0] and "'gone'" in lines[0]
    assert F._pending == []
    F._report_unshown()          # nothing pending: silent
    assert capsys.readouterr().err == ""


def test_no_audit_outside_ipython(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(F.AUDIT_ENV, "1")
    before = list(F._pending)
    F.new_figure()               # no IPython shell here: nothing is remembered
    assert F._pending == before
