"""The experiment behind this folder's README: priced by its own published bandwidth, does each
published MoE run's token dispatcher (``published_moe_runs.json``'s ``dispatcher``) explain the
runs the model prices too slow? Not shipped.

    PYTHONPATH=lib python results/moe-dispatcher-2026-11-28/dispatcher_pricing.py

1. Every run judged as shipped (``distlab.evidence.plan.judged_moe.judge_moe``: every run's
   all-to-all priced as Megatron-Core's NCCL all-to-all dispatcher, its end-to-end share of
   NVLink ``A2A_LINK_SHARE`` fitted on the calibration split).
2. The same with each run's all-to-all priced by its dispatcher: ``alltoall`` as shipped;
   ``deepep`` and ``hybridep`` at the share of NVLink (inside a node) and of the network port
   (across nodes) their own READMEs publish (:data:`SHARES`), a token crossing to another node
   once however many of its experts are there (:func:`network_row_fraction`, DeepEP's NVLink
   forwarding). Nothing fitted: the calibration runs are all ``alltoall`` (Megatron Bridge
   25.11), so the fitted share is the NCCL dispatcher's and stays 0.08.
3. For the runs whose expert-parallel group fits in one node, the end-to-end share of NVLink
   each would need to be priced exactly (a diagnosis, not a fit).
4. Found on the way: the runs whose configuration sets ``moe_a2a_overlap`` marked
   ``ep_overlap``, every run alltoall as shipped, the share chosen again on calibration from
   ``LINK_SHARE_GRID`` (``fit_moe_rate``'s rule).

The pricing is swapped in for ``distlab.plan.dimensions.moe_layer_a2a_seconds`` run by run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import distlab.plan.dimensions as dimensions
from distlab.evidence.plan.judged_moe import LINK_SHARE_GRID, judge_moe
from distlab.evidence.plan.published_moe import (
    MoeRunInputs,
    columns_disagree,
    load_moe_runs,
    moe_run_inputs,
)
from distlab.nccl.alltoall import alltoall_times, fabric
from distlab.plan.calibration import shipped_rate
from distlab.plan.collectives import p2p_seconds
from distlab.plan.experts import A2A_BYTES, routed_rows
from distlab.plan.layout import Hardware, Layout, group_span
from distlab.plan.libraries import library_of
from distlab.plan.step import step_time
from distlab.transformer import ModelSpec
from distlab.vocabulary import ErrorSummary, error_pct

SHARES: dict[str, tuple[float, float, str]] = {
    # dispatcher: (share of NVLink each way in a node, share of the network port, source)
    "deepep": ((153 + 158) / 2 / 200, 50.5 / 50,
               "DeepEP README (docs/legacy.md, V1 normal kernels): H800 intranode EP8 "
               "dispatch 153 / combine 158 GB/s of 200 GB/s NVLink each way; internode "
               "EP16-64 43-58 GB/s (median 50.5) RDMA of ~50 GB/s CX7"),
    "hybridep": ((535.94 + 530.86) / 2 / 900, 49.9 / 50,
                 "Hybrid-EP README (docs/README_Hybrid-EP.md): B200 EP8 16 SMs torch API BF16 "
                 "dispatch 535.94 / combine 530.86 GB/s of 900; H100 EP16-64 16 SMs "
                 "41-54 GB/s (median 49.9) of 50"),
}


def network_row_fraction(experts: int, top_k: int, nodes: int) -> float:
    """Bytes a per-node dispatcher sends across the network over a per-expert one's: a token's
    ``top_k`` experts (uniform over ``experts`` spread evenly over ``nodes``) fall in other
    nodes ``top_k (nodes - 1) / nodes`` times on average, in ``(nodes - 1) (1 - C(experts -
    experts / nodes, top_k) / C(experts, top_k))`` distinct other nodes."""
    if nodes <= 1:
        return 1.0
    miss = math.comb(experts - experts // nodes, top_k) / math.comb(experts, top_k)
    return (1.0 - miss) * nodes / top_k


def nccl_kernel_share(nbytes: int, hw: Hardware) -> float:
    """The share of NVLink (each way) NCCL's all-to-all kernel reaches on ``hw``'s box when each
    of 8 ranks sends ``nbytes``, by distlab's calibrated NCCL all-to-all model
    (:mod:`distlab.nccl.alltoall`)."""
    run = alltoall_times(fabric(hw.gpu.box, hw.gpus_per_node), [nbytes])[0]
    return run.layout.nvl_bytes / run.seconds / 1e9 / library_of(hw.gpu).link_gbps(hw.gpu.box)


def a2a_by(dispatcher: str, nvlink_share: float | None = None,
           kernel_only: bool = False) -> Callable[..., tuple[float, float]]:
    """``moe_layer_a2a_seconds`` with the all-to-all priced as ``dispatcher`` moves it
    (``nvlink_share`` replaces the in-node share where given). ``kernel_only``: the published
    share replaces only the NCCL kernel's part of the fitted end-to-end time, ``1 / share = 1 /
    0.08 - 1 / nccl_kernel_share + 1 / published``."""
    shipped = dimensions.moe_layer_a2a_seconds

    def priced(model: ModelSpec, layout: Layout, hw: Hardware, *,
               link_share: float | None = None) -> tuple[float, float]:
        if dispatcher == "alltoall" and nvlink_share is None:
            return shipped(model, layout, hw, link_share=link_share)
        if not model.moe or layout.ep == 1:
            return 0.0, 0.0
        nvl, net = (SHARES[dispatcher][:2] if dispatcher in SHARES
                    else (link_share or 0.08, 1.0))
        nvl = nvl if nvlink_share is None else nvlink_share
        span = group_span(layout.ep, layout.expert_tp, hw.gpus_per_node)
        fraction = (network_row_fraction(model.experts, model.top_k, span.nodes)
                    if dispatcher in SHARES else 1.0)
        nbytes = int(routed_rows(model, layout) * model.hidden * A2A_BYTES)
        if kernel_only:
            fitted = link_share or 0.08
            nvl = 1.0 / (1.0 / fitted - 1.0 / nccl_kernel_share(nbytes, hw) + 1.0 / nvl)
        share = nbytes / layout.ep   # to each rank of the group
        local_bytes = share * (span.per_node - 1) / nvl
        remote_bytes = share * (layout.ep - span.per_node) * fraction / net
        local = p2p_seconds(int(local_bytes), cross_node=False, hw=hw) if local_bytes else 0.0
        remote = p2p_seconds(int(remote_bytes), cross_node=True, hw=hw) if remote_bytes else 0.0
        one = max(local, remote)
        again = 2 * one if layout.recompute_policy.keeps_input_only else 0.0
        return 2 * one, 2 * one + again
    return priced


@contextmanager
def pricing(fn: Callable[..., tuple[float, float]]) -> Iterator[None]:
    """``fn`` in place of the planner's all-to-all price while the block runs."""
    shipped = dimensions.moe_layer_a2a_seconds
    dimensions.moe_layer_a2a_seconds = fn
    try:
        yield
    finally:
        dimensions.moe_layer_a2a_seconds = shipped


def error_with(i: MoeRunInputs, dispatcher: str, nvlink_share: float | None = None,
               kernel_only: bool = False) -> float:
    """The run's step error %, its all-to-all priced as ``dispatcher``."""
    with pricing(a2a_by(dispatcher, nvlink_share, kernel_only)):
        step = step_time(i.model, i.layout, i.hw, rate=shipped_rate(),
                         simulate_pipeline=False)
    return error_pct(i.run.measured_step_s(), step.step_s)


def main() -> None:
    aside = columns_disagree()
    shipped = {r.inputs.run.id: r.step_error_pct for r in judge_moe().runs}
    inputs = [moe_run_inputs(r) for r in load_moe_runs()]
    after = {i.run.id: error_with(i, i.run.dispatcher) for i in inputs}
    kernel = {i.run.id: error_with(i, i.run.dispatcher, kernel_only=True) for i in inputs}
    for name, errs in (("shipped (every run alltoall)", shipped),
                       ("A: published share end to end", after),
                       ("B: published share, kernel only", kernel)):
        cells = []
        for split in ("calibration", "held_out"):
            s = ErrorSummary.of([errs[i.run.id] for i in inputs
                                 if i.run.split == split and i.run.id not in aside])
            cells.append(f"{split:11s} {s.median:5.1f} / {s.p90:5.1f}")
        print(f"{name:34s} " + "   ".join(cells))
    print("\nEvery run that moved (error %: shipped, A, B):")
    for i in inputs:
        if abs(after[i.run.id] - shipped[i.run.id]) > 0.05:
            split = "set_aside" if i.run.id in aside else i.run.split
            span = group_span(i.layout.ep, i.layout.expert_tp, i.hw.gpus_per_node)
            print(f"    {i.run.id:36s} {split:11s} {i.run.dispatcher:8s} ep{i.layout.ep:<3d} "
                  f"{span.nodes} node(s) {shipped[i.run.id]:+7.1f} {after[i.run.id]:+7.1f} "
                  f"{kernel[i.run.id]:+7.1f}")
    print("\nNCCL's all-to-all kernel's share of NVLink at each moved run's dispatch size "
          "(distlab.nccl.alltoall):")
    for i in inputs:
        if i.run.dispatcher != "alltoall":
            nbytes = int(routed_rows(i.model, i.layout) * i.model.hidden * A2A_BYTES)
            print(f"    {i.run.id:36s} {nbytes / 2**20:7.1f} MiB  "
                  f"{nccl_kernel_share(nbytes, i.hw):.2f}")
    print("\nFlex-dispatcher runs with their ep group in one node: the in-node share of NVLink"
          "\nthat prices each exactly (the NCCL dispatcher's fitted share is 0.08):")
    for i in inputs:
        span = group_span(i.layout.ep, i.layout.expert_tp, i.hw.gpus_per_node)
        if i.run.dispatcher == "alltoall" or span.nodes > 1:
            continue
        lo, hi = 0.01, 1.0
        if error_with(i, i.run.dispatcher, hi) < 0:
            need = "none: faster than the model at 1.0"
        else:
            for _ in range(30):
                mid = math.sqrt(lo * hi)
                lo, hi = (lo, mid) if error_with(i, i.run.dispatcher, mid) > 0 else (mid, hi)
            need = f"{math.sqrt(lo * hi):.3f}"
        published = SHARES[i.run.dispatcher][0]
        print(f"    {i.run.id:36s} {i.run.dispatcher:8s} published {published:.2f}, "
              f"needs {need}")
    print("\nBytes a per-node dispatcher sends across nodes over a per-expert one's:")
    for i in inputs:
        span = group_span(i.layout.ep, i.layout.expert_tp, i.hw.gpus_per_node)
        if i.run.dispatcher != "alltoall" and span.nodes > 1:
            f = network_row_fraction(i.model.experts, i.model.top_k, span.nodes)
            print(f"    {i.run.id:36s} {i.model.experts} experts top-{i.model.top_k} over "
                  f"{span.nodes} nodes: {f:.2f}")
    overlap_check()


OVERLAP_IN_CONFIG = ("mb2511_h100_qwen3_235b_a22b", "mb2511_b200_qwen3_235b_a22b",
                     "mb2602_h100_qwen3_235b_a22b", "mb2509_h100_deepseek_v3",
                     "mb2602_h100_qwen3_30b_a3b")
"""Runs whose Megatron Bridge performance config sets ``moe_a2a_overlap`` (``A2A_1F1B`` in
25.09's ``run_script.py``) where the data has no ``ep_overlap``."""


def overlap_check() -> None:
    """Item 4 of the module docstring, printed."""
    aside = columns_disagree()
    inputs = []
    for run in load_moe_runs():
        i = moe_run_inputs(run)
        if run.id in OVERLAP_IN_CONFIG:
            i = replace(i, layout=i.layout.with_(ep_overlap=True))
        inputs.append(i)
    best = None
    for share in LINK_SHARE_GRID:
        rate = replace(shipped_rate(), a2a_link_share=share)
        errs = {i.run.id: error_pct(i.run.measured_step_s(),
                                    step_time(i.model, i.layout, i.hw, rate=rate,
                                              simulate_pipeline=False).step_s) for i in inputs}
        s = {split: ErrorSummary.of([errs[i.run.id] for i in inputs
                                     if i.run.split == split and i.run.id not in aside])
             for split in ("calibration", "held_out")}
        key = (s["calibration"].median, s["calibration"].p90)
        if best is None or key < best[0]:
            best = (key, share, s)
    assert best is not None
    _, share, s = best
    print(f"\nThe {len(OVERLAP_IN_CONFIG)} runs whose config overlaps the all-to-all marked "
          f"ep_overlap, share refit {share:g}:")
    print("    " + "   ".join(f"{k:11s} {v.median:5.1f} / {v.p90:5.1f}" for k, v in s.items()))


if __name__ == "__main__":
    main()
