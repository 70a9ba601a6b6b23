"""The verify table: bytes in GiB, or in MiB where every one is under a GiB (a small model on a
host, whose bytes would all read 0.00 GiB); the JSON keeps GiB whatever the table shows."""

from __future__ import annotations

import pytest

from distlab.plan.layout import Layout
from distlab.plan.model import ModelSpec
from distlab.plan.verify.rank import RankMeasurement
from distlab.plan.verify.report import COLUMNS, columns, verify_json, verify_rows, verify_table
from distlab.plan.verify.run import VerifyRow

TINY = ModelSpec("tiny", 2, 128, 4, 512, 64)
LAYOUT = Layout(dp=2, zero=3, global_batch=2, precision="fsdp-mixed")


def _row(allocated: int, predicted: int) -> VerifyRow:
    ranks = tuple(RankMeasurement(r, 2, "cpu", (0.2, 0.25), {}, {"step": {
        "allocated": allocated - r, "reserved": None}}, None, "none", False) for r in range(2))
    return VerifyRow(LAYOUT, TINY, None, predicted, ranks, "ran")


def test_small_bytes_are_shown_in_mib_and_large_in_gib() -> None:
    small = _row(9 * 2**20, 8 * 2**20)
    lines = verify_table([small]).splitlines()
    assert "alloc MiB" in lines[0] and "alloc GiB" not in lines[0]
    (row,) = verify_rows([small], unit="MiB")
    assert row["alloc_meas"] == pytest.approx(9.0) and row["alloc_pred"] == pytest.approx(8.0)
    assert row["alloc_err"] == pytest.approx(12.5)
    assert row["step_meas"] == pytest.approx(0.225)   # the slower rank's median
    large = _row(3 * 2**30, 2 * 2**30)
    assert "alloc GiB" in verify_table([small, large]).splitlines()[0]
    (json_row,) = verify_json([small])
    assert json_row["alloc_meas"] == pytest.approx(9 / 1024)   # GiB in the JSON


def test_columns_name_their_unit_and_refuse_others() -> None:
    assert columns("GiB") == COLUMNS
    assert [c.header for c in columns("MiB")][7] == "alloc MiB"
    with pytest.raises(ValueError, match="unit must be one of GiB, MiB"):
        columns("KiB")
    with pytest.raises(ValueError, match="unit"):
        verify_rows([], unit="GB")
