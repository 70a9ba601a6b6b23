"""Reading per-rank torch.profiler traces into columns: every field equals a plain json.load of
the file; rank, GPU and NCCL release from the metadata; us and ns timestamps; no
baseTimeNanoseconds; .json and .json.gz alike."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from distlab.trace.torch_trace import read_rank, read_run, trace_files
from helpers.paths import RESULTS
from helpers.trace_synth import synth_rank, write_run

TRACES = RESULTS / "traces"
ALL = sorted(p for p in TRACES.glob("*/*.json.gz"))


def _reference(path):
    return json.loads(gzip.decompress(path.read_bytes()))


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name[:12]}")
def test_columns_equal_a_plain_json_load(path) -> None:
    rt = read_rank(path)
    ev = _reference(path)["traceEvents"]
    assert len(rt) == len(ev)
    names = [rt.names[c] for c in rt.name]
    assert names == [str(e.get("name", "")) for e in ev]
    cats = [rt.cats[c] if c >= 0 else None for c in rt.cat]
    assert cats == [e.get("cat") for e in ev]
    ts = np.array([e.get("ts", np.nan) for e in ev], dtype=float)
    np.testing.assert_array_equal(np.isnan(rt.ts), np.isnan(ts))
    np.testing.assert_allclose(rt.ts[~np.isnan(ts)], ts[~np.isnan(ts)], rtol=0, atol=0)
    dur = np.array([e.get("dur", np.nan) for e in ev], dtype=float)
    np.testing.assert_array_equal(rt.dur[~np.isnan(dur)], dur[~np.isnan(dur)])
    corr = [(e.get("args") or {}).get("correlation", -1) for e in ev]
    assert rt.correlation.tolist() == corr


def test_metadata_rank_gpu_nccl() -> None:
    rt = read_rank(TRACES / "hta_a100_2ranks_rank0" / "nccl_data.json.gz")
    assert (rt.rank, rt.world_size, rt.gpu, rt.nccl_version) == \
        (0, 2, "NVIDIA A100-PG509-200", "2.17.1")
    assert rt.base_time_ns is not None
    run = read_run(TRACES / "gloo_ddp_3ranks")
    assert sorted(run.ranks) == [0, 1, 2] and run.world_size == 3 and run.gpu is None
    assert {rt.backend for rt in run.ranks.values()} == {"gloo"}


@pytest.mark.parametrize("ns", [False, True])
@pytest.mark.parametrize("gz", [False, True])
def test_us_ns_and_no_base_time(tmp_path, ns: bool, gz: bool) -> None:
    folder = write_run(tmp_path / "r", 2, seed=3, ns=ns, base_time=False, gz=gz)
    run = read_run(folder)
    ref = synth_rank(1, 2, seed=3, ns=ns, base_time=False)["traceEvents"]
    rt = run.ranks[1]
    assert rt.base_time_ns is None
    np.testing.assert_array_equal(rt.ts[~np.isnan(rt.ts)],
                                  [e["ts"] for e in ref if "ts" in e])
    if ns:
        assert np.any(rt.ts % 1 != 0)


def test_rank_falls_back_to_the_file_name(tmp_path) -> None:
    d = synth_rank(5, 8, seed=0)
    del d["distributedInfo"]
    (tmp_path / "rank5.x.pt.trace.json").write_text(json.dumps(d))
    assert read_rank(tmp_path / "rank5.x.pt.trace.json").rank == 5


def test_folder_lists_trace_files_only(tmp_path) -> None:
    write_run(tmp_path, 2, seed=1)
    (tmp_path / "notes.txt").write_text("x")
    assert [p.name for p in trace_files(tmp_path)] == ["rank0.1.pt.trace.json.gz",
                                                       "rank1.1.pt.trace.json.gz"]
