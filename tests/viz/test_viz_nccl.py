"""The NCCL model figure: one panel per preset with the expected lines, drawn without pyplot."""

from __future__ import annotations

import pytest

from distlab.nccl.tuning import nccl_allreduce
from distlab.profile.load import published
from distlab.viz.figure import DisplayFigure, figure_png
from distlab.viz.nccl import DEFAULT_SIZES, nccl_busbw_figure, published_error_table


def _labels(ax) -> list[str]:
    return [ln.get_label() for ln in ax.lines]


def test_figure_has_the_model_its_picks_every_estimate_and_the_published_points() -> None:
    fig = nccl_busbw_figure()
    assert isinstance(fig, DisplayFigure) and len(fig.axes) == 3
    points = published()["allreduce_8gpu"]
    for ax, key in zip(fig.axes, ("h100_sxm8", "a100_sxm8", "pcie5_8"), strict=False):
        labels = _labels(ax)
        choices = nccl_allreduce(key, 8, DEFAULT_SIZES)
        picks = {f"picked: {c.algorithm}/{c.protocol}" for c in choices}
        estimates = [f"estimate: {c.algorithm}/{c.protocol}" for c in choices[0].candidates]
        systems = {p["system"] for p in points if p["preset"] == key}
        assert labels.count("model: NCCL's pick") == 1
        assert {lab for lab in labels if lab.startswith("picked: ")} == picks
        assert [lab for lab in labels if lab.startswith("estimate: ")] == estimates
        pub = [lab for lab in labels if lab.startswith("published: ")]
        assert len(pub) == len(systems) and all(any(s in lab for lab in pub) for s in systems)
        # the model line is NCCL's pick: its y values are the picks' busbw
        model = next(ln for ln in ax.lines if ln.get_label() == "model: NCCL's pick")
        assert list(model.get_ydata()) == pytest.approx([c.busbw_gbps for c in choices])
    forced = [lab for ax in fig.axes for lab in _labels(ax) if "NCCL_ALGO=NVLS" in lab]
    assert len(forced) == 3, "the three Azure Hopper runs forced NVLS and say so"
    assert figure_png(fig)[:8] == b"\x89PNG\r\n\x1a\n"


def test_figure_options_and_checks() -> None:
    fig = nccl_busbw_figure(["a100_sxm8"], 4, [1 << 20, 1 << 30], points=[],
                            show_candidates=False)
    labels = _labels(fig.axes[0])
    assert not any(lab.startswith(("estimate: ", "published: ")) for lab in labels)
    with pytest.raises(ValueError, match="presets must name at least one preset"):
        nccl_busbw_figure([])
    with pytest.raises(ValueError, match="world_size"):
        nccl_busbw_figure(world_size=1)
    with pytest.raises(ValueError, match="preset must be one of"):
        nccl_busbw_figure(["dgx"])


def test_published_error_table_rows_and_count() -> None:
    """A header, per system its name then its points, the count; every line fits a notebook
    (<= 80 characters: nothing wraps in a 1400-px JupyterLab)."""
    lines = published_error_table()
    points = published()["allreduce_8gpu"]
    systems = list(dict.fromkeys(p["system"] for p in points))
    assert len(lines) == 1 + len(systems) + len(points) + 1
    assert [line[:-1] for line in lines if line.endswith(":")] == systems
    assert max(len(line) for line in lines) <= 80
    assert lines[-1] == f"66 of {len(points)} points within 20%"
    assert sum(line.endswith("  miss") for line in lines) == len(points) - 66
    one = published_error_table([p for p in points if p["nbytes"] == 1 << 33
                                 and p["preset"] == "h100_sxm8" and "Azure" in p["system"]],
                                limit_pct=0.5)
    assert len(one) == 8 and all("NVLS" in line and "nvls/Simple" in line
                                 for line in (one[2], one[4], one[6]))
    assert one[1].endswith(":") and one[3].endswith(":") and one[5].endswith(":")
    assert one[-1] == "0 of 3 points within 0.5%"  # -0.7%, -0.9% and -1.1% at 8 GiB
