"""The experiment behind this folder's "what the planner takes from it": the MoE layer's
non-GEMM parts priced from this measurement and judged on the published MoE runs. Not shipped.

    PYTHONPATH=lib python results/gpu-h200-2026-11-28-moe-step/nongemm_pricing.py

Per MoE layer and microbatch it adds ``passes * routed_bytes / (memory bandwidth * 4.11 / 4.8)
+ fixed`` to the expert-parallel part (a third forward, the rest backward; the forward's share
again under full recompute), ``routed_bytes = tokens * top_k * hidden * 2``, the memory
bandwidth the GPU's data sheet's scaled by the copy bandwidth measured here over the H200's
data sheet (4.11 / 4.8 TB/s). ``passes = 106`` and ``fixed = 0.81 ms`` are the least-squares fit
of permute + combine (forward + backward) over the nine shapes of ``moe_step.json``; the
router's median is 1.37 ms. For each variant the all-to-all's NVLink share is chosen again on
the calibration split (grouped-GEMM efficiency 0.84, measured) and both splits are printed.
"""

from __future__ import annotations

from dataclasses import replace

import distlab.plan.dimensions as dims
import distlab.plan.experts as ex
from distlab.evidence.plan.judged_moe import LINK_SHARE_GRID, judge_moe
from distlab.plan.calibration import shipped_rate

ORIGINAL = dims.moe_layer_a2a_seconds
COPY_SHARE = 4.11e12 / 4.8e12


def priced(passes: float, fixed: float, forward_share: float = 1 / 3):
    def seconds(model, layout, hw, *, link_share=None):
        a, b = ORIGINAL(model, layout, hw, link_share=link_share)
        if not model.moe:
            return a, b
        routed = ex.routed_rows(model, layout) * model.hidden * 2
        t = passes * routed / (hw.gpu.memory_bytes_per_s * COPY_SHARE) + fixed
        again = forward_share * t if layout.recompute_policy.keeps_input_only else 0.0
        return a + forward_share * t, b + (1 - forward_share) * t + again
    return seconds


def judged(passes: float, fixed: float, share: float):
    dims.moe_layer_a2a_seconds = priced(passes, fixed)
    try:
        return judge_moe(replace(shipped_rate(), grouped_gemm=0.84, a2a_link_share=share))
    finally:
        dims.moe_layer_a2a_seconds = ORIGINAL


def main() -> None:
    print("variant                          share  calibration med/p90  held-out med/p90")
    for label, passes, fixed in (("expert products only", 0, 0),
                                 ("+ permute/combine + router", 106, 0.81e-3 + 1.37e-3),
                                 ("+ permute/combine passes", 106, 0),
                                 ("+ fixed (permute/combine, router)", 0, 0.81e-3 + 1.37e-3),
                                 ("+ router only", 0, 1.37e-3)):
        best = min(LINK_SHARE_GRID, key=lambda s: (
            judged(passes, fixed, s).summary("calibration").median,
            judged(passes, fixed, s).summary("calibration").p90))
        j = judged(passes, fixed, best)
        c, h = j.summary("calibration"), j.summary("held_out")
        print(f"{label:32s} {best:5g}  {c.median:6.1f} / {c.p90:6.1f}      "
              f"{h.median:6.1f} / {h.p90:6.1f}")


if __name__ == "__main__":
    main()
