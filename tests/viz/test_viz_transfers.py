"""Transfer figures and the prefetcher explorer, driven through their widgets' values."""

from __future__ import annotations

from distlab.links import LINKS
from distlab.transfers import HostAdapter
from distlab.viz.figure import DisplayFigure
from distlab.viz.transfers import PrefetchExplorer, chain_hops, path_figure, sweep_figure
from helpers.paths import RESULTS


def _row(path, memory, nbytes, gbps, skipped=None):
    return {"path": path, "memory": memory, "nbytes": nbytes, "gbps": gbps,
            "time_us": None if gbps is None else nbytes / gbps / 1e3,
            "model_gbps": gbps, "wrong": 0 if gbps else None, "skipped": skipped}


def test_chain_hops_and_figures() -> None:
    rows = [_row("disk_read_cold", "pageable", 1024, 1.5),
            _row("pageable_to_pinned", "pinned", 1024, None, "no accelerator"),
            _row("h2d", "pinned", 1024, 20.0), _row("h2d", "pinned", 2048, 22.0)]
    hops = chain_hops(rows, 1024)
    assert [h["gbps"] for h in hops] == [1.5, None, 20.0]
    assert hops[1]["skipped"] == "no accelerator"
    assert chain_hops(rows, 4096)[0]["skipped"] == "not in this sweep"
    fig = path_figure(hops, 1024)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "1.50 GB/s" in texts and "skipped" in texts and "no accelerator" in texts
    assert isinstance(fig, DisplayFigure)
    sweep = sweep_figure(rows, [LINKS["pcie4_x16"]])
    assert any("PCIe Gen4 x16" in t.get_text() for t in sweep.axes[-1].texts)  # the GPU panel


def test_explorer_remeasures_and_says_what_is_skipped() -> None:
    ex = PrefetchExplorer(HostAdapter(), batch_mib=1, compute_ms=1.0, batches=3)
    first = ex.summary
    assert len(ex.results) == 2 and all(r.wrong == 0 for r in ex.results)
    ex.batch_mib.value = 2
    assert ex.summary != first and "2 MiB" in ex.summary
    # the host adapter never has pinned memory (no accelerator, or: use the CUDA adapter)
    ex.memory.value = "pinned"
    assert ex.results == [] and ex.summary.startswith("pinned skipped:")


def test_sweep_figure_of_the_committed_h100_sweep_is_readable() -> None:
    """Log axes (on a linear axis only d2d was visible), host and GPU copies in
    their own panels, the link peak labelled once at the edge, no pin cost drawn as a GB/s."""
    import json

    from distlab.links import link_from_pcie
    from distlab.transfers.paths import PIN_PATHS

    data = json.loads((RESULTS /
                       "transfers_h100.json").read_text())
    link = link_from_pcie(data["pcie_link"]["gen"], data["pcie_link"]["width"])
    fig = sweep_figure(data["rows"], [link])
    host, gpu = fig.axes
    assert host.get_yscale() == gpu.get_yscale() == "log" and gpu.get_xscale() == "log"
    labels = {ln.get_label() for ax in fig.axes for ln in ax.lines}
    assert not any(m in lab for lab in labels for m in PIN_PATHS)
    assert {"h2d (pinned)", "d2h (pinned)", "d2d (device)"} <= labels
    assert not any(lab.startswith(("h2d", "d2h", "d2d")) for lab in
                   {ln.get_label() for ln in host.lines})
    notes = [t.get_text() for t in gpu.texts]
    assert notes == [f"{link.name}\n{link.gbps:.1f} GB/s"] and not host.texts
    peak = max(max(ln.get_ydata()) for ln in gpu.lines if ln.get_label() == "h2d (pinned)")
    assert 0.8 < peak / link.gbps < 0.95  # 55 GB/s of 63: the 87% notebook 05 states


def test_two_link_labels_never_collide_however_wide_the_measured_range() -> None:
    """On a loaded machine the smallest host copies measure thousands of times below the links'
    peaks; the log axis then squeezes PCIe Gen4's 31.5 and Gen5's 63 GB/s labels together, and
    the two centred labels collided (notebook 05 under the browser test)."""
    from distlab.viz.layout_check import collision_problems

    rows = [_row("host_to_host", "pageable", 1 << k, 2e-4 * 2 ** (k - 10)) for k in range(10, 27)]
    fig = sweep_figure(rows, [LINKS["pcie4_x16"], LINKS["pcie5_x16"]])
    assert collision_problems(fig) == []
