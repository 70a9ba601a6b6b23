"""The RCCL model beside the collective kernels of a ROCm trace: an all_reduce over an
8 x MI300X node priced by :func:`distlab.rccl.rccl_allreduce_times` at the trace's RCCL release,
every other collective on an AMD GPU, a partial node, a group beyond a node and gfx950 each
with one line why; NVIDIA traces priced as before.

The traces are built here in the shape torch.profiler writes on ROCm (Kineto's roctracer
backend): ``deviceProperties[0].name`` is HIP's device name (``AMD Instinct MI300X``), the
kernels keep NCCL's names (RCCL's ``ncclDevKernel_Generic_4``, MSCCL's ``mscclKernel_Sum_...``)
and carry no collective args, so the message comes from the ``record_param_comms`` op around the
``hipLaunchKernel`` that launched them; ``distributedInfo.nccl_version`` is RCCL's version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from distlab.judge.trace_judgement import judge_trace
from distlab.judge.trace_model import (
    RCCL_ALL_REDUCE_ONLY,
    RCCL_ARCHS_PRICED,
    RCCL_NOT_MSCCL,
    box_for_gpu,
    collective_library,
    price_collectives,
    rccl_arch_for_gpu,
)
from distlab.judge.trace_report import REPORT_WIDTH, report_lines, run_line
from distlab.nccl.execution import nccl_execution
from distlab.rccl import rccl_allreduce_times
from distlab.rccl.execution import ONE_NODE_ARCHS
from distlab.rccl.tables import RCCL_ARCHS
from distlab.trace.collectives import P2P, CollectiveCall, Collectives, RankCall
from distlab.vocabulary import error_pct

MI300X = "AMD Instinct MI300X"
H100 = "NVIDIA H100 80GB HBM3"
MIB = 1 << 20
RCCL_KERNEL = "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"
MSCCL_KERNEL = "mscclKernel_Sum_bf16_Simple_false(ncclDevComm*, mscclAlgo*, mscclWork*)"
LATE_US = 5.0  # rank r starts each kernel r * LATE_US after rank 0: rank 7 is last


def _rank(rank: int, calls: list[tuple[str, str, int, float, float]], *, world: int = 8,
          gpu: str | None = MI300X, version: str | None = "2.21.5",
          group: int | None = None) -> dict[str, Any]:
    """One rank's ROCm Kineto trace: per call ``(kernel name, collective, bf16 bytes, rank 0's
    kernel start us, duration us)``, a ``record_param_comms`` op stating the message around a
    ``hipLaunchKernel`` whose kernel (stream 1, no collective args) starts ``rank * LATE_US``
    later than rank 0's."""
    group = world if group is None else group
    ev: list[dict[str, Any]] = []
    for k, (name, coll, nbytes, start, dur) in enumerate(calls):
        corr, host = 5000 + k, start - 100.0
        out = nbytes // 2 * (group if coll == "allgather" else 1)
        ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
                   "ts": host, "dur": 20.0,
                   "args": {"Collective name": coll, "In msg nelems": nbytes // 2,
                            "Out msg nelems": out, "Group size": group, "dtype": "BFloat16",
                            "Process Group Name": "0",
                            "Process Group Ranks": str(list(range(group)))}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 1,
                   "tid": 1, "ts": host + 5.0, "dur": 8.0, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 2, "tid": 1,
                   "ts": start + rank * LATE_US, "dur": dur - rank * LATE_US,
                   "args": {"stream": 1, "correlation": corr, "device": rank}})
    d: dict[str, Any] = {"schemaVersion": 1, "traceEvents": ev,
                         "baseTimeNanoseconds": 1_700_000_000_000_000_000,
                         "distributedInfo": {"backend": "nccl", "rank": rank,
                                             "world_size": world}}
    if version is not None:
        d["distributedInfo"]["nccl_version"] = version
    if gpu:
        d["deviceProperties"] = [{"id": rank, "name": gpu, "computeMajor": 9,
                                  "computeMinor": 4, "warpSize": 64, "numSms": 304}]
    return d


def _run(folder: Path, calls: list[tuple[str, str, int, float, float]], **kw: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(kw.get("world", 8)):
        (folder / f"rank{r}.json").write_text(json.dumps(_rank(r, calls, **kw)))
    return folder


def _rccl_us(nbytes: int, release: str | None, **kw: Any) -> tuple[float, str, str]:
    (t,), _ = rccl_allreduce_times(1, [nbytes], release=release, dtype="bfloat16", **kw)
    assert t.seconds is not None
    return t.seconds * 1e6, t.choice.algorithm, t.choice.protocol


def test_an_rccl_all_reduce_on_8_mi300x_is_priced_by_the_rccl_model(tmp_path: Path) -> None:
    """64 MiB bf16 (slower than the model: error > 0) and 1 MiB (faster: error < 0)."""
    calls = [(RCCL_KERNEL, "allreduce", 64 * MIB, 10_000.0, 900.0),
             (MSCCL_KERNEL, "allreduce", MIB, 20_000.0, 40.0)]
    prices = judge_trace(_run(tmp_path, calls)).prices
    assert len(prices) == 16
    for p in prices:
        want, algo, proto = _rccl_us(p.nbytes, "2.21.5")
        assert p.why is None and p.model_us == pytest.approx(want)
        assert (p.algorithm, p.protocol) == (algo, proto)
        assert p.size_source == "own record_param_comms" and p.group_size == 8
        assert p.wait_us == pytest.approx(LATE_US * (7 - p.rank))
        assert p.error_percent == pytest.approx(error_pct(p.transfer_us, want))
        assert p.note == "RCCL model (distlab.rccl): RCCL 2.21.5's gfx942 tables"
    big = [p for p in prices if p.nbytes == 64 * MIB]
    small = [p for p in prices if p.nbytes == MIB]
    assert {(p.algorithm, p.protocol) for p in big} == {("ring", "Simple")}
    assert {(p.algorithm, p.protocol) for p in small} == {("allpairs", "Simple")}
    assert all(p.error_percent > 0 for p in big) and all(p.error_percent < 0 for p in small)
    # not the NVIDIA model of the same call
    h100 = nccl_execution("h100_sxm8", 8, [64 * MIB], harness="torch")[0].seconds * 1e6
    assert big[0].model_us != pytest.approx(h100, rel=0.05)


def test_an_rccl_kernel_where_the_model_runs_msccl_is_priced_with_msccl_off(
        tmp_path: Path) -> None:
    """An ``nccl...`` kernel at 16 MiB: MSCCL did not run (its kernels are ``mscclKernel_``),
    so the ring RCCL chooses with MSCCL off stands beside it, and the note says so."""
    calls = [(RCCL_KERNEL, "allreduce", 16 * MIB, 10_000.0, 300.0),
             (MSCCL_KERNEL, "allreduce", 16 * MIB, 20_000.0, 300.0)]
    by = {p.seq: p for p in judge_trace(_run(tmp_path, calls)).prices if p.rank == 0}
    off, algo, proto = _rccl_us(16 * MIB, "2.21.5", msccl=False)
    on, algo_on, _ = _rccl_us(16 * MIB, "2.21.5")
    assert (algo, algo_on) == ("ring", "allpairs") and off != pytest.approx(on)
    assert by[0].model_us == pytest.approx(off) and by[0].algorithm == algo
    assert RCCL_NOT_MSCCL in by[0].note
    assert by[1].model_us == pytest.approx(on) and by[1].algorithm == "allpairs"
    assert RCCL_NOT_MSCCL not in by[1].note


@pytest.mark.parametrize("version, release, said", [
    ("2.23.4", "2.21.5", "RCCL 2.23.4 is between the releases read"),
    ("2.22.3", "2.21.5", "RCCL 2.22.3 reads the same allreduce tables on gfx942 as 2.21.5"),
    (None, "2.26.6", "RCCL release not stated in the trace: priced as 2.26.6"),
    ("2.21.5-rocm", "2.26.6", "RCCL release '2.21.5-rocm' not read as one: priced as 2.26.6"),
])
def test_a_release_not_read_is_priced_with_its_neighbour_and_says_so(
        tmp_path: Path, version: str | None, release: str, said: str) -> None:
    """16 MiB bf16 through MSCCL: 2.21.5 runs MSCCL there, 2.26.6 sends bf16 above 8 MiB to
    the ring, so the two releases price it differently."""
    calls = [(MSCCL_KERNEL, "allreduce", 16 * MIB, 10_000.0, 300.0)]
    prices = judge_trace(_run(tmp_path, calls, version=version)).prices
    assert _rccl_us(16 * MIB, "2.21.5")[0] != pytest.approx(_rccl_us(16 * MIB, "2.26.6")[0])
    want, algo, _ = _rccl_us(16 * MIB, release)
    for p in prices:
        assert p.model_us == pytest.approx(want) and p.algorithm == algo
        assert f"RCCL {release}'s gfx942 tables" in p.note and said in p.note


def _call(gpu_collective: str, nbytes: int, group: int, library: str = "NCCL/RCCL",
          name: str = RCCL_KERNEL) -> Collectives:
    calls = {r: RankCall(r, "0", 0, gpu_collective, nbytes // 2, "BFloat16", group,
                         10.0 * r, 10.0 * r + 500.0, name, library, None, None, "own args")
             for r in range(2)}
    return Collectives([CollectiveCall("0", 0, calls)])


def _price(gpu: str, collective: str, nbytes: int = 4 * MIB, group: int = 8, **kw: Any):
    return price_collectives(_call(collective, nbytes, group, **kw), {0: gpu, 1: gpu},
                             {0: "2.21.5", 1: "2.21.5"})


@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter", "broadcast", "reduce",
                                        "all_to_all", *P2P])
def test_other_collectives_on_amd_say_the_rccl_model_prices_all_reduce_only(
        collective: str) -> None:
    for p in _price(MI300X, collective):
        assert p.model_us is None and p.algorithm is None
        assert p.why == f"collective {collective}: the RCCL model prices all_reduce only"
        assert p.why.endswith(RCCL_ALL_REDUCE_ONLY)
    # the same call on an H100 is priced (the why above is the GPU's, not the collective's)
    assert all(p.model_us is not None for p in _price(H100, collective))


@pytest.mark.parametrize("gpu, group, why", [
    ("AMD Instinct MI300X VF", 16, "group of 16 ranks spans nodes of 8 x gfx942: the network "
                                   "is not in the trace"),
    ("AMD Instinct MI325X", 4, "group of 4 ranks: the RCCL model prices an all_reduce over a "
                               "whole 8-GPU node only"),
    ("AMD Instinct MI355X", 4, "group of 4 ranks: the RCCL model prices an all_reduce over a "
                               "whole 8-GPU node only"),
    ("AMD Instinct MI250X", 8, "GPU 'AMD Instinct MI250X' is none of the RCCL model's GPUs "
                               "(MI300X, MI325X: gfx942; MI350X, MI355X: gfx950)"),
    ("AMD Radeon Graphics (gfx90x)", 8, "GPU 'AMD Radeon Graphics (gfx90x)' is none of the "
                                        "RCCL model's GPUs (MI300X, MI325X: gfx942; MI350X, "
                                        "MI355X: gfx950)"),
])
def test_groups_and_gpus_the_rccl_model_does_not_price_say_why(gpu: str, group: int,
                                                               why: str) -> None:
    prices = _price(gpu, "all_reduce", group=group)
    assert prices and all(p.model_us is None and p.why == why for p in prices)


def test_a_size_the_rccl_model_does_not_price_gives_its_reason() -> None:
    """64 KiB by RCCL's own kernel: MSCCL off, RCCL runs ring/LL on one node, not priced."""
    (t,), _ = rccl_allreduce_times(1, [65536], release="2.21.5", dtype="bfloat16", msccl=False)
    assert t.seconds is None and t.why
    for p in _price(MI300X, "all_reduce", nbytes=65536):
        assert p.model_us is None and p.why == f"the RCCL model: {t.why}"
    msccl = _price(MI300X, "all_reduce", nbytes=65536, library="MSCCL", name=MSCCL_KERNEL)
    assert all(p.model_us is not None and p.algorithm == "allpairs" for p in msccl)


@pytest.mark.parametrize("gpu, arch", [
    ("AMD Instinct MI300X", "gfx942"), ("AMD Instinct MI300X VF", "gfx942"),
    ("AMD Instinct MI325X", "gfx942"), ("AMD Instinct MI355X", "gfx950"),
    ("AMD Instinct MI350X", "gfx950"), ("AMD Instinct MI300A", None),
    ("AMD Radeon Graphics", None), ("AMD Radeon Graphics (gfx90x)", None),
    ("AMD Radeon Graphics (gfx94x)", "gfx942"), ("AMD Radeon Graphics (gfx95x)", "gfx950"),
    (H100, None), (None, None),
])
def test_gpu_names_map_to_rccl_architectures(gpu: str | None, arch: str | None) -> None:
    assert rccl_arch_for_gpu(gpu) == arch
    assert box_for_gpu(gpu) is None or arch is None
    assert collective_library(gpu) == ("RCCL" if gpu and "AMD" in gpu else "NCCL")


def test_nvidia_rows_are_priced_as_before(tmp_path: Path) -> None:
    """The same trace on an H100 with an NCCL release: NCCL's model, no RCCL word anywhere."""
    calls = [(RCCL_KERNEL, "allreduce", 64 * MIB, 10_000.0, 900.0)]
    j = judge_trace(_run(tmp_path, calls, gpu=H100, version="2.24.3"))
    want = nccl_execution("h100_sxm8", 8, [64 * MIB], harness="torch",
                          nccl_version="2.24.3")[0]
    for p in j.prices:
        assert p.model_us == pytest.approx(want.seconds * 1e6)
        assert (p.algorithm, p.protocol) == (want.algorithm, want.protocol)
        assert p.note is None and p.why is None
    text = "\n".join(report_lines(j))
    assert "(NCCL model box h100_sxm8); NCCL 2.24.3;" in text and "RCCL" not in text
    assert " NCCL 2.24.3 " in run_line("run", j)


def test_the_report_of_an_amd_run_says_rccl(tmp_path: Path) -> None:
    calls = [(RCCL_KERNEL, "allreduce", 64 * MIB, 10_000.0, 900.0),
             (RCCL_KERNEL, "allgather", 4 * MIB, 20_000.0, 100.0)]
    j = judge_trace(_run(tmp_path, calls, version="2.22.3"))
    lines = report_lines(j)
    assert lines[0].endswith("GPU AMD Instinct MI300X (RCCL model, gfx942); RCCL 2.22.3; "
                             "backend nccl")
    assert not any("NCCL model" in ln or "NCCL 2." in ln for ln in lines)
    assert "not priced (8): collective all_gather: the RCCL model prices all_reduce only" \
        in lines
    assert any(ln.startswith("  note: RCCL model (distlab.rccl): RCCL 2.21.5's") for ln in lines)
    assert all(len(ln) <= REPORT_WIDTH for ln in lines[lines.index(next(
        ln for ln in lines if ln.startswith("## model beside"))):])
    assert " RCCL 2.22.3 " in run_line("run", j)


def test_a_real_rocm_trace_is_named_rccl() -> None:
    """HTA's ROCm 6.2 trace of MI250s: HIP names the GPU ``AMD Radeon Graphics`` and the trace
    states no distributedInfo; the report says RCCL, and no NCCL box."""
    from helpers.paths import RESULTS

    j = judge_trace(RESULTS / "traces" / "hta_rocm_mi250")
    # MI250 is gfx90a: computeMajor 9, computeMinor 0 in its deviceProperties
    assert j.run.gpu == "AMD Radeon Graphics (gfx90x)" and collective_library(j.run.gpu) == "RCCL"
    assert report_lines(j)[0].endswith("; GPU AMD Radeon Graphics (gfx90x); RCCL not stated; "
                                       "backend not stated")


def test_hips_generic_name_is_priced_by_its_compute_capability(tmp_path: Path) -> None:
    """Where HIP names an MI300X ``AMD Radeon Graphics`` (as it named the MI250s of the real
    ROCm trace), ``computeMajor`` 9 / ``computeMinor`` 4 say gfx942: priced as the MI300X."""
    calls = [(RCCL_KERNEL, "allreduce", 64 * MIB, 10_000.0, 900.0)]
    generic = judge_trace(_run(tmp_path / "generic", calls, gpu="AMD Radeon Graphics",
                               version="2.21.5"))
    named = judge_trace(_run(tmp_path / "named", calls, gpu=MI300X, version="2.21.5"))
    assert generic.run.gpu == "AMD Radeon Graphics (gfx94x)"
    assert generic.prices and all(p.model_us is not None for p in generic.prices)
    assert [p.model_us for p in generic.prices] == [p.model_us for p in named.prices]
    assert "(RCCL model, gfx942)" in report_lines(generic)[0]


def test_the_archs_priced_are_those_whose_one_node_the_rccl_model_times() -> None:
    """gfx950 too: an MI355X trace's (or HIP's generic 9.5 name's) all_reduce over 8 GPUs is
    priced with RCCL's gfx950 table at the gfx942 fit's xGMI rates x 1.2, said in its note,
    and it is not gfx942's price."""
    assert RCCL_ARCHS_PRICED == ONE_NODE_ARCHS == ("gfx942", "gfx950")
    assert set(RCCL_ARCHS) == {"gfx942", "gfx950"}
    (one,), _ = rccl_allreduce_times(1, [MIB], arch="gfx950")
    assert one.seconds is not None and one.choice.arch == "gfx950"
    for gpu in ("AMD Instinct MI355X", "AMD Radeon Graphics (gfx95x)"):
        prices = _price(gpu, "all_reduce")
        assert prices and all(p.model_us is not None for p in prices)
        assert all("gfx950 tables" in p.note and "x 1.20" in p.note for p in prices)
        gfx942 = _price(MI300X, "all_reduce")
        assert prices[0].model_us < gfx942[0].model_us
