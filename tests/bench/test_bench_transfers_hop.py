"""The hop rows in the transfer benchmark: selected by --paths, checked, written to JSON with
their parts, fits and the worker's start-up apart."""

from __future__ import annotations

import json

import pytest

from distlab.bench.harness import parse_config
from distlab.bench.transfers import BENCHMARK, COPY_PATH_NAMES, TransfersConfig, main
from distlab.transfers.hop_paths import HOP_PATHS, hop_unavailable
from distlab.transfers.hop_sweep import local_facts


def test_paths_hops_selects_every_hop_and_the_default_none() -> None:
    assert TransfersConfig().hops == []
    assert list(TransfersConfig().paths) == COPY_PATH_NAMES
    c = parse_config(BENCHMARK, ["--paths", "hops,h2h"])
    assert c.hops == list(HOP_PATHS) and c.kinds == [("h2h", "pageable")]
    assert parse_config(BENCHMARK, ["--paths", "all"]).hops == list(HOP_PATHS)
    host = parse_config(BENCHMARK, ["--paths", "hops", "--memory", "pageable"])
    assert "hop_cuda_ipc" not in host.hops and host.hops


@pytest.mark.parametrize("argv", [["--paths", "hopz"], ["--paths", "hop_cuda_ipc", "--memory",
                                                         "pageable"]])
def test_bad_hop_selection_exits_2(argv, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "argument --paths" in capsys.readouterr().err.strip().splitlines()[-1]


def test_hop_rows_in_the_table_and_json(tmp_path, capsys) -> None:
    out = tmp_path / "h.json"
    assert main(["--paths", "hop_pickle,hop_ring,hop_cuda_ipc", "-b", "4K", "-e", "64K",
                 "--repeats", "2", "--warmup", "0", "--hop-busy", "--prefetch-batches", "0",
                 "--no-progress", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "hop parts: times, not bandwidths" in text and "hop worker start-up" in text
    data = json.loads(out.read_text())
    rows = {(r["path"], r["nbytes"]): r for r in data["rows"]}
    names = {p for p, _ in rows}
    assert names == {"hop_pickle", "hop_ring", "hop_cuda_ipc", "hop_pickle_busy",
                     "hop_ring_busy"}
    skip = hop_unavailable("hop_cuda_ipc", **local_facts())
    for (path, _), r in rows.items():
        if path == "hop_cuda_ipc":
            assert r["skipped"] == skip and (r["wrong"] is None) == (skip is not None)
        else:
            assert r["wrong"] == 0 and r["time_us"] > 0 and r["skipped"] is None
    assert [r["nbytes"] for r in data["rows"]] == sorted(r["nbytes"] for r in data["rows"])
    parts = data["hop_parts"]
    assert {(p["path"], p["nbytes"]) for p in parts} == \
        {k for k, r in rows.items() if r["skipped"] is None}
    assert all(p["handle_us"] > 0 and p["map_us"] >= 0 for p in parts)
    assert [h["startup_s"] > 0 for h in data["hop"]] == [True, True]
    assert set(data["hop"][0]["fits"]) <= {"hop_pickle", "hop_ring", "hop_cuda_ipc"}
