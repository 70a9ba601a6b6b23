"""HolisticTraceAnalysis's multi-rank A100 test traces (trimmed by ``tools/trim_hta_trace.py``,
``results/traces/README.md``) priced: every all-to-all kernel whose ``nccl:all_to_all`` span
states its size stands beside NCCL's all-to-all model, the size read back here from the raw
JSON independently; every other NCCL kernel says why it is not priced."""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from pathlib import Path

import pytest

from distlab.judge.trace_judgement import judge_trace
from distlab.nccl.alltoall import alltoall_times, fabric
from distlab.nccl.multinode import NETWORKS
from distlab.vocabulary import dtype_bytes, error_pct
from helpers.paths import RESULTS

TRACES = RESULTS / "traces"
A100_16 = TRACES / "hta_a100_a2a_16ranks_rank0"  # negative_queue_length_values_check/rank0
A100_8 = TRACES / "hta_a100_a2a_8ranks_rank3"  # trace_diff/control/control


def _span_bytes(folder: Path) -> dict[int, tuple[str, int]]:
    """Kernel correlation -> (span name, bytes) read straight from the file: the ``nccl:`` span
    on the launching thread that holds the launch."""
    (path,) = folder.glob("*.json.gz")
    with gzip.open(path, "rt") as fh:
        ev = json.load(fh)["traceEvents"]
    spans = [e for e in ev if e["name"].startswith("nccl:")]
    out = {}
    for e in ev:
        if e.get("cat") != "cuda_runtime":
            continue
        t = e["ts"]
        hold = [s for s in spans if s["tid"] == e["tid"] and s["ts"] <= t <= s["ts"] + s["dur"]]
        if hold:
            s = max(hold, key=lambda s: s["ts"])
            n = math.prod(s["args"]["Input Dims"][0])
            out[e["args"]["correlation"]] = (s["name"], n * dtype_bytes(s["args"]["Input type"][0]))
    return out


@pytest.mark.parametrize(("folder", "ranks", "nodes", "priced"),
                         [(A100_16, 16, 2, {"all_to_all": 45}),
                          (A100_8, 8, 1, {"all_to_all": 42, "all_reduce": 18})])
def test_hta_a100_traces_are_priced_where_their_spans_state_sizes(folder: Path, ranks: int,
                                                                  nodes: int,
                                                                  priced: dict[str, int]) -> None:
    j = judge_trace(folder)
    done = [p for p in j.prices if p.model_us is not None]
    assert Counter(p.collective for p in done) == priced
    sizes = sorted(b for name, b in _span_bytes(folder).values() if name == "nccl:all_to_all"
                   and b > 0)
    a2a = [p for p in done if p.collective == "all_to_all"]
    assert sorted(p.nbytes for p in a2a) == sizes  # every stated all-to-all size, priced
    nic = NETWORKS["ib_hdr200x8"].nic_gbps if nodes > 1 else 0.0
    f = fabric("a100_sxm8", ranks, nodes=nodes, nic_gbps=nic)
    for p in a2a:
        assert p.size_source == "own annotation" and p.group_size == ranks
        model = alltoall_times(f, [p.nbytes])[0]
        assert p.model_us == pytest.approx(model.seconds * 1e6, rel=1e-12)
        assert p.protocol == model.layout.protocol
        assert p.error_percent == pytest.approx(error_pct(p.kernel_us, p.model_us))
        if nodes > 1:
            assert "priced over ib_hdr200x8" in (p.note or "")


def test_the_16_rank_trace_says_why_the_rest_is_not_priced() -> None:
    j = judge_trace(A100_16)
    why = Counter(p.why for p in j.prices if p.model_us is None)
    assert sum(why.values()) == 80 - 45
    disagree = {w: n for w, n in why.items() if w and "disagree" in w}
    assert sorted(disagree.values()) == [10, 10, 10]
    assert all("around an NCCL sendrecv kernel" in w for w in disagree)
    unlinked = [n for w, n in why.items() if w and w.startswith("no nccl: annotation span")]
    assert unlinked == [5]


def test_deepep_kernels_are_listed_with_why_beside_a_priced_all_to_all(tmp_path: Path) -> None:
    """DeepEP's dispatch/combine kernels state no size torch can read: listed, not priced; an
    NCCL all-to-all of the same trace, sized by its span, is priced."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "nccl:all_to_all", "pid": 1, "tid": 7,
           "ts": 100.0, "dur": 20.0, "args": {"Input Dims": [[1 << 20]], "Input type": ["float"]}}]
    for corr, (name, ts) in enumerate([
            ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", 105.0),
            ("void deep_ep::intranode::dispatch<8, 768>(int4*, float*)", 300.0),
            ("void deep_ep::intranode::combine<8, 768>(int4*, float*)", 500.0)]):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                   "tid": 7, "ts": ts, "dur": 2.0, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 20, "ts": ts + 20,
                   "dur": 40.0, "args": {"stream": 20, "correlation": corr, "device": 0}})
    doc = {"schemaVersion": 1, "traceEvents": ev,
           "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},
           "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}
    (tmp_path / "rank0.json").write_text(json.dumps(doc))
    j = judge_trace(tmp_path)
    by_lib = {p.library: p for p in j.prices}
    assert by_lib["DeepEP"].model_us is None
    assert "DeepEP kernels" in (by_lib["DeepEP"].why or "")
    a2a = next(p for p in j.prices if p.collective == "all_to_all")
    assert a2a.nbytes == 4 << 20 and a2a.model_us is not None
    want = alltoall_times(fabric("h100_sxm8", 8), [4 << 20])[0].seconds * 1e6
    assert a2a.model_us == pytest.approx(want, rel=1e-12)
