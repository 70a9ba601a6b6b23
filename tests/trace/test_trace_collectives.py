"""Collectives matched across ranks: each call's waits and last rank, and the stragglers, on
synthetic traces with planted kernel starts and on the committed gloo runs' planted straggler."""

from __future__ import annotations

import pytest

from distlab.trace.collectives import match_collectives
from distlab.trace.torch_trace import read_run
from helpers.paths import RESULTS
from helpers.trace_synth import synth_rank

TRACES = RESULTS / "traces"


@pytest.mark.parametrize("n", [2, 3, 4])
def test_planted_gloo_straggler_is_named(n: int) -> None:
    col = match_collectives(read_run(TRACES / f"gloo_ddp_{n}ranks"))
    multi = col.multi_rank()
    assert len(multi) == 3 and all(len(c.calls) == n for c in multi)  # 3 profiled steps
    assert col.stragglers() == [n - 1]
    assert col.last_counts() == {n - 1: 3}
    # the straggler sleeps 30 ms before each backward: each other rank waits a good part of it
    # (2 cores shared by 4 ranks blur the rest)
    for c in multi:
        for r in range(n - 1):
            assert 10_000 < c.wait_us(r) < 60_000
    assert all(c.calls[0].collective == "all_reduce" and c.calls[0].nelems == 256 * 256 + 256
               + 256 + 1 for c in multi)


def _write(tmp_path, starts: dict[int, list[float]]):
    import json
    for r, s in starts.items():
        d = synth_rank(r, len(starts), seed=5, steps=len(s), comm_starts=s)
        (tmp_path / f"rank{r}.json").write_text(json.dumps(d))
    return read_run(tmp_path)


def test_waits_last_rank_and_time_lost_exact(tmp_path) -> None:
    starts = {0: [10_000.0, 30_000.0, 50_000.0], 1: [10_500.0, 30_100.0, 50_000.0],
              2: [10_200.0, 30_900.0, 50_300.0]}
    col = match_collectives(_write(tmp_path, starts))
    assert [c.last_rank for c in col.calls] == [1, 2, 2]
    c0 = col.calls[0]
    assert [c0.wait_us(r) for r in range(3)] == [500.0, 0.0, 300.0]
    assert c0.caused_us == 800.0
    assert col.caused_us() == {1: 800.0, 2: 900.0 + 800.0 + 300.0 + 300.0}
    assert col.stragglers() == [2]
    assert col.total_wait_us == 800.0 + 1700.0 + 600.0
    for c in col.calls:
        for r, x in c.calls.items():
            assert c.transfer_us(r) == pytest.approx(max(0.0, x.end_us - c.last_start_us))
