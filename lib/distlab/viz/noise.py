"""How well the model does against how well a row is known: the noise scatter of notebook 11.

    from distlab.viz.noise import noise_figure
    noise_figure(["results/profiles/vm-quiet-2026-11-23", "results/profiles/h100-2026-11-23"])

Each judged row (of :data:`~distlab.judge.refit.TARGET_ALGORITHMS`, at least
:data:`~distlab.judge.refit.TARGET_MIN_BYTES`) is one dot: its ``noise_pct``
(:mod:`distlab.collectives.model.noise`: how far the row's value, the run's statistic of its
rounds, could land on a re-run) across, its ``|error_pct|`` up, both log. One panel per world
size; the dots' colour is the machine the ranks ran on, told by the CPUs they could use
(:func:`~distlab.judge.refit.profile_cpus`), so the runs of one machine read as one group
whatever the profile; filled dots are rows judged by the mean of their rounds, hollow ones by the
median. Below the dashed diagonal the model is as close as the row is known; far above it the
model is wrong by more than the measurement scatters. Only draws: every number comes from
:func:`~distlab.judge.refit.refit_profile`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from distlab.judge.refit import (
    TARGET_ALGORITHMS,
    TARGET_MEDIAN_PCT,
    TARGET_MIN_BYTES,
    RefitRun,
    profile_cpus,
    refit_runs,
)
from distlab.profile.load import load_profile
from distlab.viz.figure import new_figure
from distlab.vocabulary import size_label

__all__ = ["GROUP_COLOURS", "FLOOR_PCT", "machine_label", "noise_figure"]

PathLike = str | os.PathLike[str]

#: One colour per machine group, in the order of the groups' CPU counts (fewest first).
GROUP_COLOURS = ("tab:orange", "tab:blue", "tab:red", "tab:purple", "tab:brown", "tab:gray")

#: Values below this (percent) are drawn at it: a log axis has no room for 0.
FLOOR_PCT = 0.1


def machine_label(cpus: int | None) -> str:
    """The legend's name of a machine group: ``"ranks on 2 CPUs"`` (``"CPUs not recorded"``
    when the profile records none)."""
    if cpus is None:
        return "CPUs not recorded"
    return f"ranks on {cpus} CPU{'' if cpus == 1 else 's'}"


def _cpus_of(profiles: Iterable[PathLike | RefitRun],
             cpus: Mapping[str, int | None] | None) -> dict[str, int | None]:
    """Profile name -> CPUs: ``cpus`` as given, else read from the folders among ``profiles``."""
    known: dict[str, int | None] = dict(cpus or {})
    for p in profiles:
        if not isinstance(p, RefitRun):
            profile = load_profile(p)
            known.setdefault(profile.name, profile_cpus(profile))
    return known


def _judged(run: RefitRun, algos: set[str] | None, min_bytes: int) -> list[dict[str, Any]]:
    return [r for r in run.rows if r["nbytes"] >= min_bytes and r.get("error_pct") is not None
            and (algos is None or r["algorithm"] in algos)]


def noise_figure(profiles: Iterable[PathLike | RefitRun], *,
                 cpus: Mapping[str, int | None] | None = None,
                 algorithms: Iterable[str] | None = TARGET_ALGORITHMS,
                 min_bytes: int = TARGET_MIN_BYTES) -> Figure:
    """Each judged row's ``|error%|`` against its ``noise_pct``, one panel per world size, one
    colour per machine (the CPUs its ranks could use), filled for rows judged by the mean and
    hollow for the median; the diagonal ``|error| = noise`` dashed and the median target dotted.

    Args:
        profiles: profile folders or :class:`~distlab.judge.refit.RefitRun` objects.
        cpus: profile name -> the CPUs its ranks could use (``profile_facts``' ``cpus``);
            profiles given as folders are read from them, the others are drawn as
            ``"CPUs not recorded"``.
        algorithms: the rows judged (None: every algorithm).
        min_bytes: the smallest row judged (bytes).

    The legend names each machine group with how many of its dots lie inside their row's noise
    interval (``within_noise``); each panel's title counts the same for its world size. Rows
    that kept no rounds (no ``noise_pct``) are left out and counted in the figure's title.

    Raises:
        ValueError: no judged row kept its rounds.
    """
    profiles = list(profiles)
    runs = refit_runs(profiles)
    machines = _cpus_of(profiles, cpus)
    algos = None if algorithms is None else set(algorithms)
    groups = sorted({machines.get(run.profile) for run in runs},
                    key=lambda c: (c is None, c or 0))
    colour = {g: GROUP_COLOURS[i % len(GROUP_COLOURS)] for i, g in enumerate(groups)}
    worlds = sorted({run.world_size for run in runs})
    fig = new_figure(figsize=(min(9.4, 4.4 * len(worlds) + 0.6), 4.9))
    axes = np.atleast_1d(fig.subplots(1, len(worlds), sharex=True, sharey=True))
    lo, hi, left_out = 1.0, 10.0, 0
    inside_by_group = {g: [0, 0] for g in groups}
    statistics: set[str] = set()
    for ax, ws in zip(axes, worlds, strict=True):
        inside_here = total_here = 0
        # the largest groups first, so a small group's dots stay on top
        mine = sorted((run for run in runs if run.world_size == ws),
                      key=lambda run: -sum(machines.get(r.profile) == machines.get(run.profile)
                                           for r in runs))
        for run in mine:
            rows = _judged(run, algos, min_bytes)
            kept = [r for r in rows if r.get("noise_pct") is not None]
            left_out += len(rows) - len(kept)
            if not kept:
                continue
            group = machines.get(run.profile)
            x = [max(r["noise_pct"], FLOOR_PCT) for r in kept]
            y = [max(abs(r["error_pct"]), FLOOR_PCT) for r in kept]
            filled = run.statistic == "mean"
            statistics.add(run.statistic)
            c = colour[group]
            ax.scatter(x, y, s=16, alpha=0.6, marker="o", linewidths=0.9,
                       facecolors=c if filled else "none", edgecolors=c,
                       label=f"{machine_label(group)} ({run.profile} ws {ws})")
            inside = sum(bool(r.get("within_noise")) for r in kept)
            inside_by_group[group][0] += inside
            inside_by_group[group][1] += len(kept)
            inside_here += inside
            total_here += len(kept)
            lo, hi = min(lo, *x, *y), max(hi, *x, *y)
        ax.set_title(f"{ws} ranks: {inside_here}/{total_here} rows inside their noise",
                     fontsize=9)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("row noise: 90% bootstrap half-width (%)")
    if not sum(n for _, n in inside_by_group.values()):
        raise ValueError("no judged row kept its rounds (seconds_per_rank): nothing to draw")
    for ax in axes:
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.9, label="|error| = noise")
        ax.axhline(TARGET_MEDIAN_PCT, color="tab:green", lw=0.9, ls=":",
                   label=f"{TARGET_MEDIAN_PCT:g}% (the median target)")
    axes[0].set_ylabel("|error| of the prediction (%)")
    handles = [Line2D([], [], ls="", marker="o", color=colour[g], markersize=6,
                      label=f"{machine_label(g)}: {i}/{n} inside")
               for g, (i, n) in inside_by_group.items() if n]
    handles += [Line2D([], [], ls="", marker="o", markersize=6, color="0.35",
                       markerfacecolor="0.35" if s == "mean" else "none",
                       label=f"judged by the {s}") for s in sorted(statistics)]
    handles += [Line2D([], [], color="k", ls="--", lw=0.9, label="|error| = noise"),
                Line2D([], [], color="tab:green", ls=":", lw=0.9,
                       label=f"{TARGET_MEDIAN_PCT:g}% (the median target)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(4, len(handles)),
               fontsize=8, frameon=False)
    note = f"; {left_out} rows without rounds left out" if left_out else ""
    fig.suptitle(f"model error against the measurement's own scatter, rows >= "
                 f"{size_label(min_bytes)}{note}", fontsize=10)
    return fig
