"""What the transfer benchmark and notebook 05 print fits a notebook's width: skip reasons
wrapped and listed once per reason, pin costs as a table, nothing cut."""

from __future__ import annotations

import pytest

from distlab.bench import transfers as bench
from distlab.bench.__main__ import main as bench_main
from distlab.transfers import HostAdapter, pin_rows, sweep
from distlab.transfers.host import host_unavailable
from distlab.transfers.paths import ROW_KINDS
from helpers.figure_guard import MAX_COLUMNS

pytestmark = pytest.mark.timeout(120)

PINNED = host_unavailable("pinned", False)    # the longest reason: 98 characters
DEVICE = host_unavailable("device", False)


def _row(path: str, memory: str, nbytes: int, skipped: str | None = None) -> dict:
    gbps = None if skipped else 1.5
    return {"path": path, "memory": memory, "nbytes": nbytes, "time_us": None if skipped else
            nbytes / 1.5e3, "gbps": gbps, "model_gbps": gbps, "wrong": None if skipped else 0,
            "skipped": skipped, "us_per_mib": None}


ROWS = [_row("h2h", "pageable", 4096), _row("pageable_to_pinned", "pinned", 4096, PINNED),
        _row("h2d", "pinned", 4096, PINNED), _row("d2d", "device", 4096, DEVICE),
        _row("h2d", "pinned", 16384, PINNED)]


def _fits(text: str) -> None:
    wide = [line for line in text.splitlines() if len(line) > MAX_COLUMNS]
    assert wide == [], wide


def test_skip_notes_list_each_reason_once_with_its_paths() -> None:
    """The old footnote ``# skipped [1]: <reason>`` was 116 characters; the notebook's own
    ``path (memory): reason`` lines 115 to 130."""
    notes = bench.skip_notes(ROWS)
    assert all(len(f"# {n}") <= MAX_COLUMNS for n in notes)
    joined = " ".join(n.strip() for n in notes)
    assert joined == (f"skipped [1] pageable_to_pinned (pinned), h2d (pinned): {PINNED} "
                      f"skipped [2] d2d (device): {DEVICE}")
    assert bench.skip_notes([ROWS[0]]) == []


def test_transfer_table_and_pin_table_fit() -> None:
    table = bench.transfer_table(ROWS)
    _fits(table)
    body = table.splitlines()
    assert body[2].split()[-2:] == ["skipped", "[1]"]
    assert body[4].split()[-2:] == ["skipped", "[2]"]
    assert body[-3].startswith("# skipped [1] ") and body[-2].startswith("#     ")
    assert body[-1].startswith("# skipped [2] ")
    pins = [r.as_dict() for r in pin_rows(HostAdapter(), [4096, 65536], repeats=1)]
    text = bench.pin_table(pins)
    _fits(text)
    assert text.splitlines()[0].split() == ["size(B)", "method", "time(us)", "us/MiB"]
    assert len([ln for ln in text.splitlines() if ln.split()[:1] in (["4096"], ["65536"])]) == 6


def test_transfer_html_holds_every_row() -> None:
    html = bench.transfer_html(ROWS, title="sweep")
    assert len(html.rows) == len(ROWS) and html.title == "sweep"
    cells = html._repr_html_()
    assert cells.count("<tr>") == len(ROWS) + 1 and "skipped [2]" in cells
    assert html.text().splitlines()[1:] == bench.format_table(
        html.rows, bench.COLUMNS).splitlines()


def test_the_commands_lines_fit(capsys: pytest.CaptureFixture[str]) -> None:
    """A run with skipped rows, pin costs and the prefetch loops (whose old lines were 140)."""
    assert bench_main(["transfers", "-b", "4K", "-e", "16K", "-f", "4", "--repeats", "1",
                       "--iters", "1", "--warmup", "0", "--no-progress", "--prefetch-batches",
                       "2", "--batch-bytes", "64M", "--compute-ms", "150"]) == 0
    text = capsys.readouterr().out
    _fits(text)
    joined = " ".join(line.removeprefix("#").strip() for line in text.splitlines())
    assert "sequential loop (pageable, 2 x 67108864 B" in joined and "efficiency" in joined
    for kind, why in (("pinned", PINNED), ("device", DEVICE)):
        if HostAdapter().unavailable(kind) == why:     # no GPU here: the rows say why
            assert why in joined


def test_hop_parts_title_is_wrapped() -> None:
    lines = ("# " + "\n# ".join(bench.wrap_lines([bench.HOP_PARTS_TITLE]))).splitlines()
    assert len(lines) > 1 and all(len(line) <= MAX_COLUMNS for line in lines)


def test_sweep_rows_of_this_machine_fit() -> None:
    rows = [r.as_dict() for r in sweep(HostAdapter(), [4096], ROW_KINDS, repeats=1, iters=1)]
    _fits(bench.transfer_table(rows))
    _fits("\n".join(bench.skip_notes(rows)))
