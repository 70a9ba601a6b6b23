"""The ZeRO explorer says what :mod:`distlab.zero` models for its sliders and marks them."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from distlab.viz.zero import GIB, ZeroExplorer
from distlab.zero.memory_model import largest_model_that_fits, zero_memory


def test_the_explorer_reads_out_the_memory_model() -> None:
    ex = ZeroExplorer(params_b=7.5, world_size=64, stage=2, gpu_gib=80.0)
    m = zero_memory(int(7.5e9), 64, 2, "mixed")
    assert ex.summary.startswith("ZeRO-2, N=64: ")
    assert f"= {m.total / GIB:.2f} GiB per rank" in ex.summary
    fits = largest_model_that_fits(80.0 * GIB, 64, 2, "mixed")
    assert f"{fits / 1e9:.2f} B parameters" in ex.summary
    ax = ex.figure.axes[0]
    assert [ln.get_xdata()[0] for ln in ax.lines if ln.get_linestyle() == ":"] == [64]
    ex.stage.value = 3
    assert ex.summary.startswith("ZeRO-3, N=64: ")
    ex.world.value = 8
    assert "N=8" in ex.summary
    assert [ln.get_xdata()[0] for ln in ex.figure.axes[0].lines
            if ln.get_linestyle() == ":"] == [8]
    ex.precision.value = "fp32"
    total = zero_memory(int(7.5e9), 8, 3, "fp32").total / GIB
    assert f"= {total:.2f} GiB per rank" in ex.summary
