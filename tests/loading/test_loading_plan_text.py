"""The model's plan rows as text (notebook 02): narrow enough for a notebook, nothing cut."""

from __future__ import annotations

import pytest

from distlab.loading import equal_stages
from distlab.loading.bottleneck import Station, plan_rows, plan_rows_text
from helpers.figure_guard import MAX_COLUMNS


def _named(names: list[str], cost_s: float = 0.01) -> list:
    stages = equal_stages("sleep", len(names), cost_s)
    for stage, name in zip(stages, names, strict=True):
        stage.name = name
    return stages


def test_notebook_stages_fit_and_every_station_is_shown() -> None:
    """Notebook 02's six stages: the old ``name: ms x servers`` threads row was 115 wide."""
    stages = _named(["read", "decode", "collate", "pin", "h2d", "compute"])
    rows = plan_rows(stages, 16, workers=2, queue_depth=2)
    lines = plan_rows_text(rows).splitlines()
    assert all(len(line) <= MAX_COLUMNS for line in lines), max(map(len, lines))
    assert lines[0].split()[:5] == ["executor", "bound", "ms", "simulated", "ms"]
    by = {line.split()[0]: line for line in lines[1:]}
    assert list(by) == ["sync", "threads", "processes", "torch"]
    assert by["threads"].split("  ")[-1].strip() == \
        "read 10 | decode 10 | collate 10 | pin 10 | h2d 10 | compute 10"
    assert by["sync"].split()[1:3] == [f"{rows[0]['bound_s'] * 1e3:.1f}",
                                       f"{rows[0]['sim_s'] * 1e3:.1f}"]
    assert "read+decode+collate+pin+h2d+compute 60" in by["sync"]


@pytest.mark.parametrize("width", [72, 80, 110])
def test_long_station_lists_continue_under_the_stations_column(width: int) -> None:
    stages = _named([f"stage_{i:02d}" for i in range(16)])
    rows = plan_rows(stages, 8, workers=3, queue_depth=2)
    lines = plan_rows_text(rows, width=width).splitlines()
    assert all(len(line) <= width for line in lines)
    lead = lines[0].index("stations")
    continued = [line for line in lines[1:] if not line[:1].strip()]
    assert continued and all(line[:lead].strip() == "" and line[lead] != " "
                             for line in continued)
    text = " ".join(line[lead:] for line in lines[1:])
    assert all(f"stage_{i:02d} 10" in text for i in range(16))   # every station, none cut
    assert "x3" in text                                           # the fused worker station


def test_servers_are_marked_only_when_more_than_one() -> None:
    row = {"executor": "x", "bound_s": 0.5, "sim_s": 0.5,
           "plan": [Station("worker", 0.02, 2), Station("compute", 0.01, 1)]}
    assert plan_rows_text([row]).splitlines()[1].endswith("worker 20 x2 | compute 10")
    with pytest.raises(ValueError, match="width"):
        plan_rows_text([row], width=20)
