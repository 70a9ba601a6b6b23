"""``python -m distlab.bench zero``: tiny run through the CLI, and the pure summary."""

from __future__ import annotations

from distlab.bench.__main__ import main
from distlab.bench.zero import VARIANTS, summarize
from helpers.leaks import no_leaks


def test_summary_takes_the_slowest_rank_and_pairs_rounds():
    a = {v: [1.0, 2.0, 3.0] for v in VARIANTS}
    b = {**a, "stage1": [2.0, 4.0, 9.0]}
    rows = {r["variant"]: r for r in summarize([a, b])}
    assert rows["ddp"]["vs_ddp"] == 1.0 and rows["ddp"]["step_ms"] == 2000.0
    assert rows["stage1"]["vs_ddp"] == 2.0 and rows["stage1"]["max_ms"] == 9000.0


def test_cli_tiny(capsys):
    with no_leaks():
        rc = main(["zero", "--world-size", "2", "--layers", "1", "--width", "16", "--batch", "2",
                   "--steps", "1", "--rounds", "2", "--timeout", "120"])
    out = capsys.readouterr().out
    assert rc == 0
    assert [ln.split()[0] for ln in out.splitlines() if ln.split() and ln.split()[0] in
            VARIANTS] == list(VARIANTS)
