"""An adapter described for a reader (notebook 05's first cell): narrow lines, every reason."""

from __future__ import annotations

import pytest

from distlab.transfers import HostAdapter
from distlab.transfers.adapter import MEMORY_KINDS
from distlab.transfers.host import host_unavailable
from helpers.figure_guard import MAX_COLUMNS


class _FakeAdapter(HostAdapter):
    """The host adapter as it reads on a machine with or without a GPU."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda

    def unavailable(self, kind: str) -> str | None:
        return host_unavailable(kind, self.cuda)


@pytest.mark.parametrize("cuda", [False, True])
def test_describe_lines_fit_and_keep_every_reason(cuda: bool) -> None:
    """The old ``print(adapter.describe())`` was one dict repr of 245 characters."""
    a = _FakeAdapter(cuda)
    lines = a.describe_lines()
    assert all(len(line) <= MAX_COLUMNS for line in lines), lines
    assert lines[0] == "adapter: host; memory here: pageable"
    text = " ".join(line.strip() for line in lines[1:])
    for kind in ("pinned", "device"):
        assert f"no {kind} memory: {a.unavailable(kind)}" in text
    assert all(line.startswith("  ") for line in lines[1:])


def test_describe_lines_narrower_and_all_available() -> None:
    a = _FakeAdapter(False)
    assert all(len(line) <= 50 for line in a.describe_lines(50))

    class Everything(HostAdapter):
        def unavailable(self, kind: str) -> str | None:
            return None

    assert Everything().describe_lines() == [f"adapter: host; memory here: "
                                             f"{', '.join(MEMORY_KINDS)}"]
    with pytest.raises(ValueError, match="width"):
        a.describe_lines(10)
