"""Every collective kind the NCCL model prices, priced per kernel of a trace; sizes a rank's
kernel lacks taken from the matched call on another rank (and the source said); communication
under other names (expert-parallel, NVSHMEM, MSCCL) counted; kernels whose names only suggest
communication listed, and claimed with ``--comm-pattern``.

The traces are built here: two rank files of Kineto JSON, each kernel a ``kernel`` event on a
stream with its launching ``cudaLaunchKernel`` (``correlation``), times in microseconds."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.judge.trace_command import main
from distlab.judge.trace_judgement import judge_trace, judgement_json
from distlab.judge.trace_model import (
    PRICED,
    KernelPrice,
    price_collectives,
)
from distlab.judge.trace_report import report_lines
from distlab.nccl.alltoall import alltoall_times, fabric, p2p_time
from distlab.nccl.execution import nccl_execution
from distlab.nccl.family import nccl_collective
from distlab.trace.collectives import (
    P2P,
    CollectiveCall,
    Collectives,
    RankCall,
    canonical_collective,
    match_collectives,
)
from distlab.trace.torch_trace import read_run
from distlab.vocabulary import COLLECTIVES, error_pct

H100 = "NVIDIA H100 80GB HBM3"
N = 1 << 18  # elements of the size-stating kernels (float: 1 MiB)


def _args(coll: str, nelems: int, out: int | None = None, group: int = 2) -> dict[str, Any]:
    """The args torch writes on an NCCL kernel (``record_shapes=True``)."""
    return {"Collective name": coll, "In msg nelems": nelems,
            "Out msg nelems": nelems if out is None else out, "Group size": group,
            "dtype": "Float", "Process Group Name": "0",
            "Process Group Ranks": str(list(range(group)))}


def _rank(rank: int, kernels: list[tuple[str, float, float, dict[str, Any] | None]], *,
          world: int = 2, gpu: str | None = H100,
          extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One rank's Kineto trace: ``kernels`` as (name, start us, duration us, args or None) on
    stream 30, each launched by a ``cudaLaunchKernel`` 5 us before it, plus ``extra`` events."""
    ev: list[dict[str, Any]] = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1,
                                 "tid": 1, "ts": 10.0, "dur": 5.0}]
    for k, (name, ts, dur, args) in enumerate(kernels):
        corr = 1000 + k
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                   "tid": 1, "ts": ts - 5.0, "dur": 3.0, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 30, "ts": ts,
                   "dur": dur, "args": {"stream": 30, "correlation": corr, "device": 0,
                                        **(args or {})}})
    ev += extra or []
    d: dict[str, Any] = {"schemaVersion": 1, "traceEvents": ev,
                         "baseTimeNanoseconds": 1_700_000_000_000_000_000,
                         "distributedInfo": {"backend": "nccl", "rank": rank,
                                             "world_size": world, "nccl_version": "2.28.9"}}
    if gpu:
        d["deviceProperties"] = [{"id": 0, "name": gpu}]
    return d


def _write(folder: Path, ranks: dict[int, dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r, d in ranks.items():
        (folder / f"rank{r}.json").write_text(json.dumps(d))
    return folder


SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
KINDS = [  # (kernel name, rank 0's args, does rank 1 state the size itself)
    (SENDRECV, _args("send", N), False),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     _args("_allgather_base", N, 2 * N), True),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     _args("all_gather_into_tensor_coalesced", N, 2 * N), False),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     _args("_reduce_scatter_base", 2 * N, N), False),
    (SENDRECV, _args("all_to_allv", N), False),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     _args("broadcast", N), True),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     _args("broadcast", 4 * N), False),
    ("ncclDevKernel_Reduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     _args("reduce", N), True),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     _args("allreduce", N), True),
    (SENDRECV, None, False),                  # no rank states this one's size
]
WANT = ["send", "all_gather", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
        "broadcast", "reduce", "all_reduce", "sendrecv"]
LATE_US = 40.0  # rank 1 starts every kernel this much later: rank 0 waits for it


@pytest.fixture(scope="module")
def kinds_run(tmp_path_factory) -> Path:
    k0, k1 = [], []
    for i, (name, args, both) in enumerate(KINDS):
        t = 1000.0 + 1000.0 * i
        k0.append((name, t, 300.0, args))
        k1.append((name, t + LATE_US, 250.0, args if both else None))
    return _write(tmp_path_factory.mktemp("kinds"), {0: _rank(0, k0), 1: _rank(1, k1)})


def _model_us(p: KernelPrice) -> tuple[float, str, str]:
    """What the NCCL model says for ``p`` (the test's own reading of trace_model's docstring)."""
    n, b = p.group_size, p.nbytes
    if p.collective == "all_reduce":
        e = nccl_execution("h100_sxm8", n, [b], harness="torch", nccl_version="2.28.9")[0]
        return e.seconds * 1e6, e.algorithm, e.protocol
    if p.collective in ("all_gather", "reduce_scatter", "broadcast", "reduce"):
        kind = "broadcast" if p.collective == "reduce" else p.collective
        e = nccl_collective("h100_sxm8", n, [b], kind)[0]
        return e.seconds * 1e6, e.algorithm, e.protocol
    f = fabric("h100_sxm8", n)
    if p.collective == "all_to_all":
        run = alltoall_times(f, [b])[0]
        return run.seconds * 1e6, "p2p", run.layout.protocol
    one = p2p_time(fabric("h100_sxm8", 8), b, cross_node=False)
    return one.seconds * 1e6, "p2p", one.layout.protocol


def test_every_kind_is_priced_with_its_own_model(kinds_run: Path) -> None:
    j = judge_trace(kinds_run)
    by = {(p.rank, p.seq): p for p in j.prices}
    assert len(by) == 2 * len(KINDS)
    for seq, (want, (_, args, both)) in enumerate(zip(WANT, KINDS, strict=True)):
        p0, p1 = by[(0, seq)], by[(1, seq)]
        assert p0.collective == want
        # rank 1's SendRecv kernel without args reads "sendrecv" from its name; a peer's
        # all_to_all args name it better, a peer's "send" does not
        assert p1.collective == ("sendrecv" if want in P2P else want)
        assert p0.wait_us == pytest.approx(LATE_US) and p1.wait_us == 0.0
        for p in (p0, p1):
            assert p.wait_us + p.transfer_us == pytest.approx(p.kernel_us)
        if args is None:
            assert p0.size_source == p1.size_source == "none"
            assert p0.model_us is None and "message size unknown on every rank" in p0.why
            continue
        assert p0.size_source == "own args"
        assert p1.size_source == ("own args" if both else "matched rank 0")
        assert p0.nbytes == p1.nbytes == 4 * max(args["In msg nelems"], args["Out msg nelems"])
        for p in (p0, p1):
            us, algo, proto = _model_us(p)
            assert p.model_us == pytest.approx(us)
            assert (p.algorithm, p.protocol) == (algo, proto)
            assert p.error_percent == pytest.approx(error_pct(p.transfer_us, us))
    assert "reduce priced as a broadcast" in by[(0, WANT.index("reduce"))].note


def test_report_says_sources_algorithms_and_why_not(kinds_run: Path) -> None:
    j = judge_trace(kinds_run)
    lines = report_lines(j, worst=30)
    text = "\n".join(lines)
    assert "## model beside the kernels: 18 priced, 2 not" in text
    rows = [ln for ln in lines if ln.startswith(("rank 0 ", "rank 1 "))]
    assert len(rows) == 18
    assert sum("(size: matched rank 0)" in ln for ln in rows) == 5
    assert any(ln.startswith("rank 1 all_to_all") and "p2p/LL" in ln for ln in rows)
    assert any(ln.startswith("rank 0 all_gather") and "ring/" in ln for ln in rows)
    assert "message sizes from: own args 13, matched rank 0 5, none 2" in text
    reasons = [ln for ln in lines if ln.startswith("not priced (")]
    assert reasons == ["not priced (2): message size unknown on every rank (no In/Out msg "
                       "nelems and dtype in this rank's trace or a matched rank's; record with "
                       "record_shapes=True)"]
    for kind in ("send", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
                 "all_reduce"):
        assert any(ln.startswith(f"  {kind}: ") and "|error| median" in ln for ln in lines)
    doc = judgement_json(j)
    assert {m["size_source"] for m in doc["model"]} == {"own args", "matched rank 0", "none"}
    sources = [x["size_source"] for c in doc["collectives"] for x in c["ranks"].values()]
    assert sources.count("matched rank 0") == 5


def test_a_peer_trace_absent_leaves_the_size_unknown(tmp_path: Path) -> None:
    """With rank 0's file alone, rank 1's args cannot be borrowed: the source says none."""
    k1 = [(SENDRECV, 1000.0, 200.0, None)]
    j = judge_trace(_write(tmp_path, {1: _rank(1, k1)}))
    (p,) = j.prices
    assert p.size_source == "none" and p.model_us is None and "message size" in p.why


def test_other_group_sizes_and_boxes_say_why(tmp_path: Path) -> None:
    big = _args("all_gather", N, 16 * N, group=16)
    one = _args("broadcast", N, group=1)
    gather = _args("gather", N)
    k = [("ncclDevKernel_AllGather_RING_LL", 1000.0, 100.0, big),
         ("ncclDevKernel_Broadcast_RING_LL", 2000.0, 100.0, one),
         ("ncclDevKernel_Generic_1", 3000.0, 100.0, gather),
         ("ncclDevKernel_Generic_1", 4000.0, 100.0, None)]
    j = judge_trace(_write(tmp_path, {0: _rank(0, k, world=16)}))
    why = [p.why for p in j.prices]
    assert "spans nodes of h100_sxm8" in why[0]
    assert why[1].startswith("group of 1 rank")
    assert why[2] == "collective gather: the NCCL model has no price for it"
    assert why[3].startswith("NCCL kernel of no named collective")


# --- communication by other names ------------------------------------------------------------

GEMM = "sm90_xmma_gemm_f16f16"


def _mixed(folder: Path, comm_name: str, ranks: int = 2) -> Path:
    """Each rank: a GEMM, then ``comm_name`` twice, then a GEMM (microseconds)."""
    ks = [(GEMM, 1000.0, 400.0, None), (comm_name, 1500.0, 300.0, None),
          (comm_name, 2000.0, 200.0, None), (GEMM, 2300.0, 400.0, None)]
    return _write(folder, {r: _rank(r, ks, world=ranks) for r in range(ranks)})


def test_deepseek_ep_dispatch_is_communication(tmp_path: Path) -> None:
    name = "void dpsk::ep::internode::dispatch<true, 8, 7168>(int4*, float*, int*)"
    j = judge_trace(_mixed(tmp_path, name))
    b = j.breakdown(0)
    assert b.comm_total_us == pytest.approx(500.0) and b.hta_compute_us is not None
    assert len(j.collectives.calls) == 2 and len(j.collectives.multi_rank()) == 2
    assert {p.library for p in j.prices} == {"expert-parallel (::ep::)"}
    lines = report_lines(j)
    assert "not priced (4): expert-parallel (::ep::) kernels: the library's own transfers, not " \
           "an NCCL collective: the NCCL model does not price them" in lines
    assert not any("possible communication" in ln for ln in lines)


def test_an_unclaimed_moe_kernel_is_listed_then_claimed(tmp_path: Path, capsys) -> None:
    folder = _mixed(tmp_path, "my_lib::moe_dispatch_kernel(int*, float*)")
    j = judge_trace(folder)
    assert j.breakdown(0).comm_total_us == 0 and not j.collectives.calls
    lines = report_lines(j)
    assert "possible communication, not counted: my_lib::moe_dispatch_kernel(int*, float*) " \
           "(4 kernels, 1.00 ms)" in lines
    assert any("see the possible communication below" in ln for ln in lines)
    assert judgement_json(j)["possible_communication"] == [
        {"name": "my_lib::moe_dispatch_kernel(int*, float*)", "count": 4, "total_us": 1000.0,
         "ranks": [0, 1]}]
    assert "(2 kernels, 0.50 ms)" in "\n".join(report_lines(j, rank=1))

    assert main([str(folder), "--comm-pattern", r"my_lib::moe_(dispatch|combine)",
                 "--comm-pattern", "unused_.*"]) == 0
    out = capsys.readouterr().out
    assert "possible communication" not in out
    assert "## collectives: 2 calls, 2 seen on 2+ ranks" in out
    assert "not priced (4): --comm-pattern kernels" in out
    claimed = judge_trace(folder, comm=__import__("distlab.trace.patterns", fromlist=["x"])
                          .user_patterns([r"my_lib::moe_"]))
    assert claimed.breakdown(0).comm_total_us == pytest.approx(500.0)
    assert not claimed.possible_comm()


def test_template_arguments_do_not_suggest_communication(tmp_path: Path) -> None:
    name = "void cub::DeviceReduceByKeyKernel<cub::DispatchReduceByKey<long*>>(long*)"
    j = judge_trace(_mixed(tmp_path, name))
    assert not j.possible_comm()


@pytest.mark.parametrize("bad", ["moe_(dispatch", "[a-", "*x"])
def test_a_bad_comm_pattern_is_one_line_and_exit_2(kinds_run: Path, capsys, bad: str) -> None:
    try:
        code = main([str(kinds_run), "--comm-pattern", bad])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1, err
    assert "--comm-pattern" in lines[0] and f"invalid regex {bad!r}" in lines[0]


# --- properties -------------------------------------------------------------------------------

@given(st.sampled_from(COLLECTIVES), st.sampled_from(["", "_base", "_coalesced",
                                                      "_into_tensor_coalesced", "_BASE"]),
       st.sampled_from([str, str.upper, lambda s: s.replace("_", ""), str.title]))
def test_every_spelling_reads_as_the_vocabulary_name(coll: str, suffix: str, case) -> None:
    """NCCL's, nccl-tests' and torch's spellings, with torch's suffixes (``_allgather_base``,
    ``allgather_into_tensor_coalesced``)."""
    assert canonical_collective(case(coll) + suffix) == coll


@given(st.sampled_from(["send", "Send", "recv", "recvAnysource", "SendRecv", "sendrecv"]))
def test_point_to_point_names(name: str) -> None:
    assert canonical_collective(name) in P2P


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 4).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.booleans(), min_size=n, max_size=n),
    st.integers(1, 1 << 22))))
def test_a_size_comes_from_the_lowest_rank_that_states_it(case) -> None:
    n, states, nelems = case
    with tempfile.TemporaryDirectory() as tmp:
        ranks = {r: _rank(r, [(SENDRECV, 1000.0 + r, 100.0,
                               _args("all_to_all", nelems, group=n) if states[r] else None)],
                          world=n) for r in range(n)}
        col = match_collectives(read_run(_write(Path(tmp), ranks)))
    (call,) = col.calls
    first = next((r for r in range(n) if states[r]), None)
    for r, c in call.calls.items():
        if states[r]:
            assert c.size_source == "own args"
        elif first is None:
            assert c.size_source == "none" and c.nbytes is None
        else:
            assert c.size_source == f"matched rank {first}" and c.collective == "all_to_all"
        if first is not None:
            assert c.nbytes == 4 * nelems


def _call(collective: str, nbytes: int, group: int, start1: float = 10.0) -> Collectives:
    calls = {r: RankCall(r, "0", 0, collective, nbytes // 4, "Float", group, s, s + 500.0,
                         "k", "NCCL/RCCL", None, None, "own args")
             for r, s in ((0, 0.0), (1, start1))}
    return Collectives([CollectiveCall("0", 0, calls)])


@given(st.sampled_from([c for c in PRICED]), st.integers(1, 1 << 28).map(lambda b: 4 * b),
       st.floats(0.0, 400.0))
@settings(max_examples=60, deadline=None)
def test_every_priced_kind_prices_any_size(collective: str, nbytes: int, late: float) -> None:
    (p0, p1) = price_collectives(_call(collective, nbytes, 2, late), {0: H100, 1: H100},
                                 {0: None, 1: None})
    for p in (p0, p1):
        assert p.why is None and p.model_us > 0 and p.algorithm and p.protocol
        assert p.wait_us + p.transfer_us == pytest.approx(p.kernel_us)
        assert (p.error_percent > 0) == (p.transfer_us > p.model_us) or \
            p.transfer_us == pytest.approx(p.model_us)
    assert p0.wait_us == pytest.approx(min(late, 500.0)) and p1.wait_us == 0.0
    if collective in (*P2P, "all_to_all"):   # a line in the bytes: more never costs less
        bigger = price_collectives(_call(collective, 2 * nbytes, 2), {0: H100, 1: H100},
                                   {0: None, 1: None})[0]
        assert bigger.model_us > p0.model_us


def test_the_priced_kinds_are_the_vocabulary_s_and_point_to_point() -> None:
    assert set(PRICED) == {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                           "all_to_all", *P2P}
    assert set(PRICED) - set(P2P) <= set(COLLECTIVES)
