"""The experiment behind this folder's README: does a dropless MoE layer's host sync explain why
Megatron Bridge's token-drop rows run up to 2x the dropless rows of the same layout? Not shipped.

    PYTHONPATH=lib python results/moe-routing-2026-11-28/dropless_sync.py

1. From distlab's own traced MoE layer step on one H200
   (``results/gpu-h200-2026-11-28-moe-step/moe_layer_trace.json``), the GPU's idle time around
   each ``cudaStreamSynchronize``: from the end of the GPU's last op before the sync returns to
   the start of its next op (the drained queue refilled by the host), microseconds.
2. That median priced as the exposed seconds of one host sync per dropless MoE layer per forward
   pass (Megatron-Core's all-to-all dispatcher synchronises once before the expert-parallel
   all-to-all to read the splits; the backward reuses them; a full recompute repeats the
   forward and its sync); a token-drop layout (``Layout.expert_capacity``) pays none. Added as
   a registered dimension (``distlab.plan.dimensions.register_dimension``), the all-to-all's
   NVLink share chosen again on the calibration split only from ``LINK_SHARE_GRID`` (the rule
   of ``fit_moe_rate``), both splits printed run by run against the shipped model.
3. The same for other sync costs, to show what the calibration split can and cannot pin.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

from distlab.evidence.plan.judged_moe import LINK_SHARE_GRID, judge_moe
from distlab.plan.calibration import shipped_rate
from distlab.plan.dimensions import (
    Dimension,
    Exposed,
    StagePart,
    register_dimension,
    unregister_dimension,
)
from distlab.plan.partition import stage_moe_layers

TRACE = Path(__file__).resolve().parent.parent / "gpu-h200-2026-11-28-moe-step" \
    / "moe_layer_trace.json"


def sync_idle_us() -> list[float]:
    """GPU idle microseconds around each host sync of the traced layer step."""
    events = json.loads(TRACE.read_text())["traceEvents"]
    gpu = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                 key=lambda e: e["ts"])
    out = []
    for s in (e for e in events if e.get("name") == "cudaStreamSynchronize"):
        end = s["ts"] + s["dur"]
        before = [g["ts"] + g["dur"] for g in gpu if g["ts"] < end]
        after = [g["ts"] for g in gpu if g["ts"] >= end]
        if before and after:
            out.append(min(after) - max(before))
    return out


def sync_dimension(seconds: float) -> Dimension:
    """``seconds`` exposed per dropless MoE layer per forward pass (and per recompute)."""
    def price(inputs):
        model, layout = inputs.model, inputs.layout

        def stage(st):
            if layout.expert_capacity is not None:
                return Exposed(0.0, 0.0, 0.0)
            f = stage_moe_layers(model, layout, st.index) * seconds
            b = f if layout.recompute_policy.keeps_input_only else 0.0
            return Exposed.of(f, b)
        return stage
    return Dimension("moe_sync", ("expert_capacity", "recompute"), None,
                     (StagePart("moe_sync", None, None, "ep a2a",
                                "exposed dropless host sync", price),),
                     applies=lambda m: m.moe)


def judged(seconds: float):
    """The judgement with ``seconds`` per sync, the share refit on calibration."""
    register_dimension(sync_dimension(seconds))
    try:
        best = None
        for share in LINK_SHARE_GRID:
            j = judge_moe(replace(shipped_rate(), a2a_link_share=share))
            s = j.summary("calibration")
            if best is None or (s.median, s.p90) < best[:2]:
                best = (s.median, s.p90, share, j)
        return best[2], best[3]
    finally:
        unregister_dimension("moe_sync")


def line(name: str, j) -> str:
    c, h = j.summary("calibration"), j.summary("held_out")
    return (f"{name:34} calibration {c.median:5.1f} / {c.p90:5.1f}   "
            f"held out {h.median:5.1f} / {h.p90:5.1f}")


def main() -> None:
    idle = sync_idle_us()
    med = statistics.median(idle)
    print(f"GPU idle around each of {len(idle)} host syncs: median {med:.1f} us, "
          f"range {min(idle):.1f}-{max(idle):.1f} us")
    base = judge_moe()
    share, j = judged(med * 1e-6)
    print(line("shipped (no sync)", base))
    print(line(f"+ {med:.0f} us sync, share {share}", j))
    was = {r.inputs.run.id: r.step_error_pct for r in base.runs}
    for r in j.runs:
        rid = r.inputs.run.id
        if abs(r.step_error_pct - was[rid]) >= 0.05:
            print(f"  {rid:36} {r.split:11} {was[rid]:+6.1f} -> {r.step_error_pct:+6.1f}")
    print("sync cost per dropless MoE layer forward, the share refit on calibration:")
    for us in (0, 20, 42, 100, 200, 500, 1000, 2000):
        share, j = judged(us * 1e-6)
        print(line(f"  {us:5d} us, share {share}", j))


if __name__ == "__main__":
    main()
