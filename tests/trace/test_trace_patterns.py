"""Communication kernels of other libraries are recognised by the documented pattern list, which a
user extends; where distlab's rule differs from HTA's (DeepEP is compute to HTA) both are shown."""

from __future__ import annotations

import json
import re

import pytest

from distlab.judge.trace_judgement import judge_trace
from distlab.judge.trace_report import report_lines
from distlab.trace.breakdown import analyze_run
from distlab.trace.patterns import COMM_PATTERNS, CommPattern, comm_regex
from distlab.trace.torch_trace import read_run
from helpers.trace_synth import synth_rank


@pytest.mark.parametrize("name, library", [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "NCCL/RCCL"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
     "NCCL/RCCL"),
    ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "NCCL/RCCL"),
    ("mscclKernel_Sum_float_LL", "MSCCL"),
    ("rcclGenericKernel", "RCCL"),
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)", "DeepEP"),
    ("void deep_ep::internode_ll::combine<false, 7168>(void*)", "DeepEP"),
    ("void deep_ep::internode::cached_notify(int, int*)", "DeepEP"),
    ("void dpsk::ep::internode::dispatch<true, 8>(void*, int4*)", "expert-parallel (::ep::)"),
    ("void dpsk::ep::intranode::combine<bf16>(void*)", "expert-parallel (::ep::)"),
    ("dpsk::ep::internode::cached_notify(int*, int)", "expert-parallel (::ep::)"),
    ("void pplx::dispatchKernel<false>(int)", "pplx-kernels"),
    ("moeA2ADispatchKernel<128>", "MoE all-to-all"),
    ("void nvshmemi_proxy_progress_kernel(int)", "NVSHMEM"),
])
def test_default_patterns_recognise_comm_kernels(name: str, library: str) -> None:
    assert comm_regex().match(name)
    assert next(p.library for p in COMM_PATTERNS
                if p.scope == "gpu" and re.match(p.pattern, name)) == library


@pytest.mark.parametrize("name", ["void at::native::vectorized_elementwise_kernel<4>",
                                  "Memcpy HtoD (Pageable -> Device)", "gloo:all_reduce"])
def test_other_kernels_are_not_gpu_comm(name: str) -> None:
    assert comm_regex().match(name) is None


def _trace_with(tmp_path, kernel_name: str):
    d = synth_rank(0, 1, seed=3, steps=2)
    for e in d["traceEvents"]:
        if e.get("name") == "sm90_xmma_gemm_f16f16":
            e["name"] = kernel_name
    (tmp_path / "rank0.json").write_text(json.dumps(d))
    return tmp_path


def test_deepep_is_communication_to_distlab_and_compute_to_hta(tmp_path) -> None:
    folder = _trace_with(tmp_path, "void deep_ep::intranode::dispatch<8>(int4*)")
    b = analyze_run(read_run(folder))[0].whole
    assert b.hta_compute_us is not None and b.hta_compute_us > b.compute_us
    text = "\n".join(report_lines(judge_trace(folder)))
    assert "HTA's rule (only nccl*Kernel is communication) gives compute" in text


def test_a_user_pattern_extends_the_list(tmp_path) -> None:
    folder = _trace_with(tmp_path, "my_alltoall_kernel")
    mine = [*COMM_PATTERNS, CommPattern(r"my_alltoall", "mine")]
    plain = analyze_run(read_run(folder))[0].whole
    extended = analyze_run(read_run(folder), comm=mine)[0].whole
    assert extended.comm_total_us > plain.comm_total_us
    assert extended.compute_us < plain.compute_us
    assert plain.hta_compute_us is None  # without the pattern both rules agree
