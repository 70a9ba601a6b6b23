"""The gpus part of a profile drawn: the GPU-to-GPU matrix and every GPU fed at once.

Left: one-way GPU-to-GPU GB/s at the largest size as a ``src x dst`` heat map, each cell
labelled with its rate and its ``nvidia-smi topo -m`` path (a staged copy, peer access off, is
marked ``via host``). Right: each GPU's GB/s when every GPU copies host memory at once, per run
(host buffer on the GPU's NUMA node or the other one) and direction, with the aggregate in the
legend. A rehearsal's figure says so in its title: its "GPUs" were host memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distlab._checks import check_instance
from distlab.profile.load import Profile
from distlab.viz.figure import new_figure
from distlab.vocabulary import size_label

__all__ = ["gpus_figure", "gpus_title"]

_RUN_STYLE = {("local", "h2d"): ("tab:blue", ""), ("local", "d2h"): ("tab:orange", ""),
              ("remote", "h2d"): ("tab:blue", "//"), ("remote", "d2h"): ("tab:orange", "//"),
              ("unbound", "h2d"): ("tab:blue", ".."), ("unbound", "d2h"): ("tab:orange", "..")}


def gpus_title(profile: Profile) -> str:
    """``<profile>: <box>, N GPUs`` and, for a rehearsal, what stood in for the GPUs."""
    part = profile.part("gpus") or {}
    box = part.get("box") or {}
    title = f"{profile.name}: {box.get('box', 'no box')}, {box.get('gpus', 0)} GPUs"
    return title + (" (REHEARSAL: host memory, not GPUs)" if box.get("rehearsal") else "")


def gpus_figure(profile: Profile) -> Any:
    """The matrix and host-to-all panels (see the module docstring); ``ValueError`` when the
    profile has no gpus part that ran (a box with fewer than two GPUs skips it)."""
    check_instance("profile", profile, Profile)
    part = profile.part("gpus")
    if part is None or not (part.get("peer") or part.get("host_to_all")):
        raise ValueError(f"profile {profile.name!r} has no measured gpus part (it needs two or "
                         "more GPUs, or python -m distlab.profile --rehearse BOX)")
    n = int(part["box"]["gpus"])
    fig = new_figure(figsize=(9.4, 4.8))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.0, 1.2]})
    peer = [r for r in part.get("peer", []) if r["direction"] == "one-way"]
    if peer:
        top = max(r["nbytes"] for r in peer)
        grid = np.full((n, n), np.nan)
        for r in peer:
            if r["nbytes"] == top:
                grid[r["src"], r["dst"]] = r["gbps"]
        image = left.imshow(grid, cmap="viridis", origin="upper")
        fig.colorbar(image, ax=left, label="GB/s, one way", shrink=0.8)
        lo, hi = np.nanmin(grid), np.nanmax(grid)
        for r in peer:
            if r["nbytes"] == top:
                via = "\nvia host" if r["route"].startswith("staged") else ""
                bright = hi > lo and (r["gbps"] - lo) / (hi - lo) > 0.6   # dark text on yellow
                left.text(r["dst"], r["src"], f"{r['gbps']:.0f}\n{r['path'] or '?'}{via}",
                          ha="center", va="center", color="k" if bright else "w",
                          fontsize=6 if n > 4 else 8)
        left.set_xticks(range(n))
        left.set_yticks(range(n))
        left.set_xlabel("destination GPU")
        left.set_ylabel("source GPU")
        left.set_title(f"GPU to GPU, {size_label(int(top))} copies", fontsize=10)
    else:
        left.text(0.5, 0.5, "no GPU pair measured", ha="center", va="center",
                  transform=left.transAxes)
        left.set_axis_off()
    rows = [r for r in part.get("host_to_all", []) if r["gpu"] != "all"]
    keys = [k for k in _RUN_STYLE if any((r["run"], r["direction"]) == k for r in rows)]
    width = 0.8 / max(len(keys), 1)
    for i, key in enumerate(keys):
        mine = sorted((r for r in rows if (r["run"], r["direction"]) == key),
                      key=lambda r: r["gpu"])
        agg = next(r for r in part["host_to_all"]
                   if r["gpu"] == "all" and (r["run"], r["direction"]) == key)
        colour, hatch = _RUN_STYLE[key]
        right.bar([r["gpu"] + (i - (len(keys) - 1) / 2) * width for r in mine],
                  [r["gbps"] for r in mine], width, color=colour, hatch=hatch,
                  edgecolor="k", lw=0.4,
                  label=f"{key[0]} {key[1]}: {agg['gbps']:.1f} GB/s together")
    right.set_xticks(range(n))
    right.set_xlabel("GPU")
    right.set_ylabel("GB/s per GPU, all GPUs at once")
    right.set_title("every GPU fed at once (host buffer on its node: local)", fontsize=10)
    if keys:
        right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2,
                     borderaxespad=0.0)
    fig.suptitle(gpus_title(profile), fontsize=11)
    return fig
