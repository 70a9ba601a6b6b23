"""Pictures of a sampler :class:`~distlab.samplers.Assignment`, and an ipywidgets explorer.

    from distlab.samplers import assign
    from distlab.viz.samplers import assignment_figure, SamplerExplorer
    fig = assignment_figure(assign(22, 4, shuffle=False), batch_size=2)
    SamplerExplorer().widget          # sliders for length, world size, ... and the live picture

Two panels. *Dataset*: every index ``0 .. n-1`` (wrapped into rows) coloured by the rank that
reads it (:func:`distlab.viz.palette.rank_colours`: rank ``r`` has one colour at every world
size); dropped indices grey with an ``x``; indices that some rank also reads as a padded
duplicate carry a black dot (:data:`~distlab.viz.palette.MARK_COLOURS`, no rank colour near any
of them). *Ranks*: one row per rank, one column per position in its reading order, coloured by
the dataset index read there (so strided and contiguous layouts look different); padded
positions are hatched, batch boundaries are white lines, empty cells (uneven counts) stay
white. Ranks and positions are ticked on whole numbers (:func:`~distlab.viz.axes.integer_ticks`);
a panel with nothing to show says so in words.
"""

from __future__ import annotations

import math
from typing import Any

import ipywidgets as w
import numpy as np
from matplotlib import colormaps
from matplotlib.colors import ListedColormap, to_rgba_array
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from distlab.samplers import LAYOUTS, Assignment, assign
from distlab.samplers.elastic import ElasticReplay
from distlab.viz.axes import integer_ticks
from distlab.viz.explorer import Drawing, Explorer
from distlab.viz.figure import figure_png, new_figure
from distlab.viz.palette import MARK_COLOURS, rank_colours, text_colour_on

__all__ = ["elastic_figure", "assignment_table", "rank_colors", "plot_dataset", "plot_ranks",
           "assignment_figure", "summary_text", "figure_png", "SamplerExplorer"]

_ANNOTATE_MAX = 64  # write numbers into cells up to this many indices
_MAX_RANK_TICKS = 16  # label every rank up to this many, else every 2nd, 5th, ...
_MAX_POSITION_TICKS = 20


def rank_colors(num_replicas: int) -> np.ndarray:
    """One RGBA colour per rank, ``(num_replicas, 4)``: :func:`distlab.viz.palette.rank_colours`
    (rank ``r`` has the same colour at every world size)."""
    return to_rgba_array(rank_colours(num_replicas)) if num_replicas else np.empty((0, 4))


def _empty(ax: Any, text: str) -> None:
    """``ax`` drawn as empty: no ticks, no frame, ``text`` in its middle."""
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes,
            fontsize=10, color="#555555")


def _why_empty(a: Assignment) -> str:
    """The word an empty panel of ``a`` shows."""
    if a.length == 0:
        return "no samples: dataset length 0"
    return (f"no samples on any rank: drop_last drops all {a.num_dropped} indices "
            f"(fewer than {a.num_replicas} ranks)")


def plot_dataset(a: Assignment, ax: Any) -> None:
    """Dataset panel: each index coloured by its rank, dropped and duplicated ones marked."""
    n = a.length
    ax.set_title(f"dataset: {n} indices, colour = rank that reads it "
                 "(dot: also a padded duplicate, x: dropped)", fontsize=9)
    if n == 0:
        _empty(ax, _why_empty(a))
        return
    cols = max(1, min(n, math.ceil(math.sqrt(n * 4))))
    rows = max(1, math.ceil(n / cols))
    owner = np.full(rows * cols, -2, dtype=np.int64)
    owner[:n] = a.owner()
    ranks = rank_colours(a.num_replicas)
    cells = [MARK_COLOURS["empty"], MARK_COLOURS["dropped"], *ranks]
    ax.imshow((owner + 2).reshape(rows, cols), cmap=ListedColormap(to_rgba_array(cells)),
              vmin=0, vmax=len(cells) - 1, interpolation="nearest", aspect="auto")
    dup = np.zeros(n, dtype=bool)
    for idx, pad in zip(a.per_rank, a.padded, strict=False):
        hit = idx[pad]
        dup[hit[(hit >= 0) & (hit < n)]] = True
    for mask, marker, color in ((dup, "o", MARK_COLOURS["padded dot"]),
                                (owner[:n] == -1, "x", MARK_COLOURS["dropped cross"])):
        where = np.flatnonzero(mask)
        if where.size:
            ax.scatter(where % cols, where // cols, marker=marker, s=18 if n <= 400 else 4,
                       c=color, linewidths=1)
    if n <= _ANNOTATE_MAX:
        for i in range(n):
            ax.text(i % cols, i // cols + 0.32, str(i), ha="center", va="center", fontsize=6,
                    color=text_colour_on(cells[owner[i] + 2]))
    ax.set_xticks([])
    ax.set_yticks([])


def plot_ranks(a: Assignment, ax: Any, batch_size: int | None = None) -> None:
    """Rank x position panel: the dataset index each rank reads at each step of its order."""
    idx, pad = a.grid()
    width = idx.shape[1]
    ax.set_title("ranks x positions, colour = dataset index (hatched: padded duplicate)",
                 fontsize=9)
    if width == 0:
        _empty(ax, _why_empty(a))
        return
    top = max(a.length - 1, 1)
    ax.imshow(np.ma.masked_less(idx.astype(float), 0), cmap="viridis", vmin=0, vmax=top,
              aspect="auto", interpolation="nearest")
    for r, c in zip(*np.nonzero(pad), strict=False):
        ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch="///",
                               edgecolor="red", linewidth=1.2))
    if batch_size:
        for x in range(batch_size, width, batch_size):
            ax.axvline(x - 0.5, color="white", linewidth=2)
    if idx.size <= _ANNOTATE_MAX * 2:
        for (r, c), v in np.ndenumerate(idx):
            if v >= 0:
                ax.text(c, r, str(v), ha="center", va="center", fontsize=7,
                        color=text_colour_on(colormaps["viridis"](min(v, top) / top)))
    integer_ticks(ax, "x", width, max_ticks=_MAX_POSITION_TICKS, fontsize=8)
    ticks = integer_ticks(ax, "y", a.num_replicas, fmt="rank {}", max_ticks=_MAX_RANK_TICKS,
                          fontsize=7)
    colors = rank_colours(a.num_replicas)
    ax.tick_params(axis="y", pad=4)
    for r, label in zip(ticks, ax.get_yticklabels(), strict=False):
        label.set_color(text_colour_on(colors[r]))
        label.set_bbox({"boxstyle": "round,pad=0.2", "facecolor": colors[r],
                        "edgecolor": "none"})
    ax.set_xlabel("position in the rank's order" + (f" (white lines: batches of {batch_size})"
                                                   if batch_size else ""), fontsize=8)


def assignment_table(a: Assignment, batch_size: int | None = None) -> str:
    """Text table: one line per rank with its indices (``*`` marks a padded duplicate)."""
    lines = []
    for rank, (idx, pad) in enumerate(zip(a.per_rank, a.padded, strict=False)):
        cells = [f"{v}*" if p else str(v) for v, p in zip(idx.tolist(), pad.tolist(), strict=False)]
        if batch_size:
            groups = [cells[i:i + batch_size] for i in range(0, len(cells), batch_size)]
            body = " | ".join(" ".join(g) for g in groups)
        else:
            body = " ".join(cells)
        lines.append(f"rank {rank}: [{body}]")
    if a.num_dropped:
        lines.append(f"dropped: {a.dropped.tolist()}")
    return "\n".join(lines)


def _overlap(a: Assignment) -> str:
    """What the ranks' index sets share, as it is."""
    shared = a.shared_indices()
    if shared.size:
        return f"SHARED: {shared.size} indices on two ranks, not by padding"
    if a.num_padded:
        return (f"ranks share only the {a.num_padded} padded "
                f"duplicate{'s' if a.num_padded != 1 else ''}")
    return "disjoint: no index on two ranks"


def summary_text(a: Assignment, batch_size: int | None = None) -> str:
    """One line of the numbers the picture shows."""
    counts = a.counts
    low, high = (int(counts.min()), int(counts.max())) if counts.size else (0, 0)
    ranks = f"{a.num_replicas} rank{'s' if a.num_replicas != 1 else ''}"
    parts = [f"{a.layout} layout, {a.length} indices on {ranks}",
             f"per-rank counts {low}..{high}", f"padded {a.num_padded}",
             f"dropped {a.num_dropped}", _overlap(a)]
    if batch_size:
        steps = a.steps(batch_size)
        parts.append(f"steps per rank {steps.min()}..{steps.max()}")
    bad = a.out_of_range()
    if bad.size:
        parts.append(f"reads past the end: {bad.tolist()[:5]}")
    if a.layout == "libtorch" and a.shuffle:
        parts.append("libtorch seeds with the epoch only")
    return "; ".join(parts)


def _two_lines(line: str, width: int = 110) -> str:
    """``line`` as it is when at most ``width`` characters, else broken in two at the ``"; "``
    nearest its middle (a title wider than the figure would widen the image)."""
    if len(line) <= width or "; " not in line:
        return line
    cuts = [i for i in range(len(line)) if line.startswith("; ", i)]
    cut = min(cuts, key=lambda i: abs(i - len(line) / 2))
    return f"{line[:cut + 1]}\n{line[cut + 2:]}"


def assignment_figure(a: Assignment, batch_size: int | None = None,
                      figsize: tuple[float, float] = (9.4, 6.0), *,
                      title: bool = True) -> Figure:
    """Both panels in one matplotlib Figure (not attached to pyplot; display or save it), under
    :func:`summary_text` as its title (``title=False``: none, where the line is shown beside
    it, as :class:`SamplerExplorer` does)."""
    fig = new_figure(figsize=figsize)
    top, bottom = fig.subplots(2, 1, height_ratios=[1, 1])
    plot_dataset(a, top)
    plot_ranks(a, bottom, batch_size)
    if title:
        fig.suptitle(_two_lines(summary_text(a, batch_size)), fontsize=9)
    return fig


class SamplerExplorer(Explorer):
    """Widgets for every sampler parameter and the live picture of the resulting assignment.

    Attributes:
        controls: name -> widget (``length``, ``world_size``, ``drop_last``, ``shuffle``,
            ``seed``, ``epoch``, ``layout``, ``batch_size``).
        assignment: the current :class:`Assignment`; ``figure``: its Figure; ``png``: the bytes
            shown in ``image``; ``summary``: :func:`summary_text` of it (the one line above the
            picture, which carries no title); ``widget``: the box to display. Setting any
            control's ``.value`` redraws (tests do exactly that, without a browser).
    """

    def __init__(self, length: int = 22, world_size: int = 4, *, drop_last: bool = False,
                 shuffle: bool = False, seed: int = 0, epoch: int = 0, layout: str = "torch",
                 batch_size: int = 2, max_length: int = 200, max_world_size: int = 16) -> None:
        style = {"description_width": "initial"}
        self.controls: dict[str, Any] = {
            "length": w.IntSlider(length, 0, max_length, description="length", style=style),
            "world_size": w.IntSlider(world_size, 1, max_world_size, description="world size",
                                      style=style),
            "batch_size": w.IntSlider(batch_size, 1, 16, description="batch size", style=style),
            "seed": w.IntSlider(seed, 0, 20, description="seed", style=style),
            "epoch": w.IntSlider(epoch, 0, 20, description="epoch", style=style),
            "layout": w.ToggleButtons(options=list(LAYOUTS), value=layout,
                                      description="layout", style=style),
            "shuffle": w.Checkbox(shuffle, description="shuffle", indent=False),
            "drop_last": w.Checkbox(drop_last, description="drop_last", indent=False),
        }
        c = self.controls
        super().__init__(list(c.values()), rows=[
            w.HBox([c["length"], c["world_size"], c["batch_size"]]),
            w.HBox([c["seed"], c["epoch"], c["shuffle"], c["drop_last"]]),
            c["layout"]])

    def values(self) -> dict[str, Any]:
        """The controls' current values."""
        return {name: control.value for name, control in self.controls.items()}

    def draw(self) -> Drawing:
        """The assignment of the current controls, drawn and summarised."""
        v = self.values()
        self.assignment = assign(v["length"], v["world_size"], layout=v["layout"],
                                 shuffle=v["shuffle"], seed=v["seed"], epoch=v["epoch"],
                                 drop_last=v["drop_last"])
        return Drawing(assignment_figure(self.assignment, v["batch_size"], title=False),
                       summary_text(self.assignment, v["batch_size"]))


def elastic_figure(replay: ElasticReplay) -> Figure:
    """Each dataset index of an elastic resume: the lockstep step of its first read, coloured by
    the world that read it (dashed: where the old world stopped), and below how many times it
    was read (red: twice, through the new world's padding)."""
    fig = new_figure(figsize=(9, 4.5))
    ax1, ax2 = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    for world, colour in ((replay.old_world, "tab:blue"), (replay.new_world, "tab:orange")):
        sel = replay.first_world == world
        ax1.scatter(np.flatnonzero(sel), replay.first_step[sel], s=4, c=colour,
                    label=f"read by the {world}-rank world")
    ax1.axhline(replay.steps - 0.5, color="grey", lw=0.8, ls="--")
    ax1.set_ylabel("lockstep step")
    ax1.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
               borderaxespad=0.0)   # beside the dots, never over them
    ax1.set_title(f"Elastic resume: every index read once (the {replay.new_world}-rank world's "
                  "padding twice)")
    n = len(replay.read_by)
    ax2.bar(np.arange(n), replay.read_by, width=1.0,
            color=np.where(replay.read_by > 1, "tab:red", "tab:green"))
    ax2.set_ylabel("times read")
    ax2.set_xlabel("dataset index")
    ax2.set_yticks(range(int(replay.read_by.max()) + 1))
    return fig
