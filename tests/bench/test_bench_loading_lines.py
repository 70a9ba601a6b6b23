"""What the pipeline benchmark and notebook 02 print fits a notebook's width: no line wider than
the notebook guard's limit, wrapped at word boundaries, nothing cut."""

from __future__ import annotations

import pytest

from distlab.bench import loading as bench
from distlab.loading.hop_cost import HopCost
from helpers.figure_guard import MAX_COLUMNS

pytestmark = pytest.mark.timeout(120)


def _fake_hop(nbytes: int, **_: object) -> HopCost:
    """A hop of a tensor-sized batch without spawning its measuring worker."""
    return HopCost(nbytes=131072, path="hop_shm_fd", busy=True, seconds=1.698e-3,
                   send_s=0.212e-3, receive_s=1.486e-3, samples=(1.698e-3,), startup_s=3.21)


@pytest.mark.parametrize("hop", ["none", "empty", "measured"])
def test_every_printed_line_fits(hop: str, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The head (config, load, stage costs, the hop's line), tables and tail of a run: the old
    head's first line alone was 122 characters, the hop's 138 to 250."""
    if hop == "measured":
        monkeypatch.setattr(bench, "measure_hop_cost", _fake_hop)
    argv = ["--items", "4", "--cost-ms", "1", "--stages", "6", "--repeats", "1", "--warmup", "0",
            "--overhead-items", "0", "--workers", "1",
            "--executors", "sync,threads" if hop == "none" else "sync,processes"]
    assert bench.main(argv) == 0
    text = capsys.readouterr().out
    wide = [line for line in text.splitlines() if len(line) > MAX_COLUMNS]
    assert wide == [], wide
    if hop != "none":
        assert "hop" in text and ("0 B cross" in text if hop == "empty" else "1698 us" in text)
    joined = " ".join(line.removeprefix("# ").strip() for line in text.splitlines())
    assert "stage costs measured in sync runs (ms): sleep0" in joined
    assert "queue_depth 2, workers 1" in joined and "load avg" in joined


def test_stage_costs_lines_break_between_stages_and_keep_every_cost() -> None:
    costs = {f"stage{i}": (i + 1) * 1.234e-3 for i in range(14)}
    lines = bench.stage_costs_lines(costs, "sync")
    assert lines[0].startswith("stage costs measured in sync (ms): stage0 1.23, stage1 2.47")
    assert len(" ".join(lines)) > MAX_COLUMNS        # as one line it would wrap in the lab
    assert len(lines) > 1 and all(len(x) <= bench.COMMENT_WIDTH for x in lines)
    assert all(x.startswith("  stage") for x in lines[1:])    # never a cost without its stage
    assert " ".join(x.strip() for x in lines).removeprefix(
        "stage costs measured in sync (ms): ").split(", ") == \
        [f"stage{i} {(i + 1) * 1.234:.2f}" for i in range(14)]
    assert bench.stage_costs_lines({"read": 0.0102}) == [
        "stage costs measured in sync runs (ms): read 10.20"]


def test_wrap_lines_keep_every_word() -> None:
    line = " ".join(f"word{i}" for i in range(40))
    lines = bench.wrap_lines([line])
    assert len(lines) > 1 and all(len(x) <= bench.COMMENT_WIDTH for x in lines)
    assert lines[1].startswith("  ") and " ".join(x.strip() for x in lines) == line
    assert bench.wrap_lines(["short", ""]) == ["short", ""]
