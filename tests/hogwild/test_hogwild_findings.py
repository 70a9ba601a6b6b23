"""What a set of Hogwild runs shows is said from the runs' numbers: a run that lost nothing is
not said to lose updates, a lock that slowed the run down is not said to cost little."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distlab.hogwild.findings import COLUMNS, eval_spread, findings, lock_change, lost_line
from distlab.hogwild.lost import LostUpdates
from distlab.hogwild.run import HogwildResult
from distlab.report.table import format_table

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "10_process_hop.ipynb"


def _run(n: int, lock: bool, *, lost: int = 0, missed: int = 0, wall: float = 0.1,
         eval_loss: float = 0.34, wait: float = 0.0, update: float = 0.01) -> HogwildResult:
    steps = 8192 // (32 * n)
    total = n * steps * 2177
    return HogwildResult(n, lock, 8192, 32, steps, 0.05, 1.5, wall, 4.29, eval_loss,
                         LostUpdates(lost, total, min(lost, 2177), missed, 2177,
                                     1e-6 if lost else 0.0), [],
                         lock_wait_s=wait, update_s=update)


def test_a_run_that_lost_nothing_says_so() -> None:
    """The SMOKE=1 run of notebook 10: 0 of 557312 lost, the lock about 40% slower."""
    runs = [_run(1, False, wall=0.116), _run(2, False, wall=0.0754),
            _run(2, True, wall=0.126, wait=0.02, update=0.012)]
    lines = findings(runs)
    text = "\n".join(lines)
    assert lines[0] == ("2 processes, no lock: no update was lost (0 of 557,312 witness "
                        "increments, 0 of 2,177 parameters)")
    assert lock_change(runs[2], runs[1]) == pytest.approx(0.0754 / 0.126 - 1)
    assert "with the lock 40% fewer steps per second" in text
    assert "costs little" not in text and "some updates are lost" not in text
    assert "with the lock: 4.8% of their time in the update it serializes, 7.9% waiting" in text
    assert all(len(line) <= 110 for line in lines)


def test_a_run_that_lost_updates_counts_them() -> None:
    runs = [_run(1, False, eval_loss=0.1127), _run(2, False, lost=56, missed=13, eval_loss=0.1097),
            _run(2, True, eval_loss=0.1091, wall=0.05)]
    line = lost_line(runs[1])
    assert line == ("2 processes, no lock: 56 of 557,312 updates lost (0.0001); 13 of 2,177 "
                    "parameters miss one")
    text = findings(runs)
    assert "with the lock 100% more steps per second" in text[1]
    assert text[-1] == ("evaluation loss after 8,192 samples: 0.1127 for 1 process; the others "
                        "0.97x to 1.00x that")
    assert eval_spread(runs) == pytest.approx(0.1127 / 0.1091)


def test_the_table_fits_a_notebook_line() -> None:
    runs = [_run(1, False), _run(4, False, lost=123456, missed=8000), _run(4, True, wait=0.2)]
    runs = [HogwildResult(**{**r.__dict__, "lost": LostUpdates(
        r.lost.lost, 17_827_840, 1, r.lost.missed, 8705, 0.0)}) for r in runs]
    lines = format_table([r.row() for r in runs], COLUMNS).splitlines()
    assert len(lines) == 4 and all(len(line) <= 100 for line in lines)
    assert lines[0].split()[:2] == ["run", "start-up"]
    assert lines[1].split()[-3:] == ["0", "0", "-"], "no lock: no lock wait"
    assert lines[3].split()[-1] == "50.0"
    said = findings(runs) + [lost_line(HogwildResult(**{**runs[1].__dict__, "lost": LostUpdates(
        0, 17_827_840, 0, 0, 8705, 0.0)}))]
    assert all(len(line) <= 110 for line in said), said


def test_notebook_prose_claims_only_what_its_cells_assert() -> None:
    """The Hogwild text of notebook 10 makes no claim about this run's outcome that no cell
    computes: no "some updates are lost", no "costs little"; the cell after the runs prints
    :func:`findings` and asserts the claims the text makes (lost share, loss spread)."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    prose = " ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    for claim in ("some updates are lost", "costs little", "is about the same"):
        assert claim not in prose, claim
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert "findings(runs)" in code
    assert "r.lost.fraction < 0.10" in code and "eval_spread(" in code
