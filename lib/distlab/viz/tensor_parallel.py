"""Tensor parallelism drawn: which shard each rank holds, the traced collectives, their price.

- :func:`block_figure`: an MLP block on each rank of a real run
  (:func:`~distlab.tensor_parallel.demo.run_mlp_tensor_parallel`), one row per rank and case,
  left to right: activations (boxes with this rank's shape), weights (the whole matrix's
  outline with this rank's shard filled: ``fc1`` a band of rows, its output features; ``fc2`` a
  band of columns, its input features) and Megatron's operators with the collective each runs
  forward (``>``) and backward (``<``), in the collective's palette colour.
- :func:`trace_figure`: the run's timelines, one panel per case, one row per rank's compute
  and collectives, boxes coloured by pass (``forward``, ``backward``) and by collective.
- :func:`price_figure`: a layer's collectives priced (:func:`~distlab.tensor_parallel.cost.
  price_layer`) against the tensor-parallel degree, inside one node of a GPU box and across
  two nodes over named networks.
- :class:`TensorParallelExplorer`: degree, sequence parallelism, hidden size, box and where
  the ranks sit -> each collective's price and the activation bytes per layer per rank.

Every figure is made with :func:`~distlab.viz.figure.new_figure` (it displays once) and fits
JupyterLab's 968 px.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as w
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

from distlab.nccl.boxes import GPU_BOXES
from distlab.nccl.multinode import NETWORKS
from distlab.tensor_parallel.cost import PASSES, TransformerShape, check_tp, price_layer
from distlab.tensor_parallel.demo import TPRun
from distlab.tensor_parallel.memory import layer_activation_bytes
from distlab.timeline import Timeline
from distlab.transformer import ModelSpec
from distlab.viz.explorer import Drawing, Explorer
from distlab.viz.figure import DisplayFigure, message_figure, new_figure
from distlab.viz.palette import colour
from distlab.vocabulary import size_in

__all__ = ["FIG_WIDTH_IN", "IN_NODE", "TensorParallelExplorer", "block_figure", "gpt_shape",
           "price_figure", "trace_figure"]

#: Figure width in inches: at the default 100 dpi the image stays within JupyterLab's 968 px.
FIG_WIDTH_IN = 9.2
#: The explorer's "where" choice for one node (the others are network names: two nodes).
IN_NODE = "one node"

_CASE_TITLES = {"tp": "tensor parallel", "tp+sp": "tensor + sequence parallel"}
_SHARD = "#6baed6"
_ACTIVATION = "#f0f0f0"
_SERIES = ("#222222", "#1b9e77", "#d95f02", "#7570b3", "#e7298a")   # no palette names drawn
_STYLES = ("o-", "s--", "^--", "v--", "d--")


def _shape_text(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))


#: How an operator's name is drawn: Korthikanti et al.'s f, f-bar, g, g-bar.
OPERATOR_TEXT = {"f": "$f$", "f_bar": r"$\bar{f}$", "g": "$g$", "g_bar": r"$\bar{g}$"}
_TEXT_PT = 8.0    # the boxes' and operators' text: at 100 dpi about 11 px


def _draw_step(ax: Any, x: float, y: float, step: Any, rank: int, ranks: int) -> None:
    wd, ht = 0.9, 0.76
    left, bottom = x - wd / 2, y - ht / 2
    if step.kind == "operator":
        ax.text(x, y + 0.2, OPERATOR_TEXT.get(step.label, step.label), ha="center",
                va="center", fontsize=12)
        for dy, arrow, name in ((-0.08, ">", step.forward), (-0.3, "<", step.backward)):
            ax.text(x, y + dy, f"{arrow} {name}", ha="center", va="center",
                    fontsize=_TEXT_PT - 0.5,
                    color="#555555" if name == "identity" else colour(name))
        return
    if step.kind == "weight":
        ax.add_patch(Rectangle((left, bottom), wd, ht, facecolor="white", edgecolor="#999999",
                               lw=0.8))
        if step.shape == step.full_shape:
            ax.add_patch(Rectangle((left, bottom), wd, ht, facecolor=_SHARD, edgecolor="none"))
        elif step.shape[0] != step.full_shape[0]:   # rows: output features
            band = ht * step.shape[0] / step.full_shape[0]
            ax.add_patch(Rectangle((left, bottom + ht - band * (rank + 1)), wd, band,
                                   facecolor=_SHARD, edgecolor="none"))
        else:                                        # columns: input features
            band = wd * step.shape[1] / step.full_shape[1]
            ax.add_patch(Rectangle((left + band * rank, bottom), band, ht, facecolor=_SHARD,
                                   edgecolor="none"))
    else:
        ax.add_patch(Rectangle((left, bottom), wd, ht, facecolor=_ACTIVATION,
                               edgecolor="#999999", lw=0.8))
    ax.text(x, y + 0.16, step.label, ha="center", va="center", fontsize=_TEXT_PT)
    ax.text(x, y - 0.17, _shape_text(step.shape), ha="center", va="center", fontsize=_TEXT_PT,
            fontweight="bold" if step.shape != step.full_shape else "normal")


def block_figure(run: TPRun) -> DisplayFigure:
    """The block on each rank of ``run``, per case (see the module docstring). A shape in bold
    is a shard (smaller than the tensor in one process)."""
    if not isinstance(run, TPRun):
        raise TypeError(f"run must be a TPRun (run_mlp_tensor_parallel), got "
                        f"{type(run).__name__}")
    cases = list(run.cases.items())
    fig = new_figure(figsize=(FIG_WIDTH_IN, 0.8 * run.ranks * len(cases) + 1.3))
    axes = fig.subplots(len(cases), 1, squeeze=False)[:, 0]
    width = max(len(case.steps[0]) for _, case in cases)
    for ax, (name, case) in zip(axes, cases, strict=True):
        for rank, steps in enumerate(case.steps):
            y = run.ranks - 1 - rank
            for i, step in enumerate(steps):
                _draw_step(ax, i, y, step, rank, run.ranks)
                if i:
                    ax.plot([i - 1 + 0.46, i - 0.46], [y, y], "-", color="#bbbbbb", lw=0.8)
        ax.set_xlim(-0.5, width - 0.5)
        ax.set_ylim(-0.5, run.ranks - 0.5)
        ax.set_yticks(range(run.ranks), [f"rank {r}" for r in reversed(range(run.ranks))])
        ax.set_xticks([])
        for side in ("top", "right", "bottom", "left"):
            ax.spines[side].set_visible(False)
        ax.tick_params(left=False)
        ax.set_title(f"{_CASE_TITLES.get(name, name)} on {run.ranks} ranks (> forward, "
                     "< backward)", fontsize="medium", loc="left")
    handles = [Patch(facecolor=_SHARD, label="this rank's shard of the weight"),
               Patch(facecolor=_ACTIVATION, edgecolor="#999999", label="activation")]
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize="small", frameon=False)
    fig.get_layout_engine().set(rect=(0, 0.07, 1, 0.93))
    return fig


def _lanes(timeline: Timeline) -> list[str]:
    procs = sorted({lane.split("/")[0] for lane in timeline.lanes},
                   key=lambda p: int(p.removeprefix("rank")))
    return [f"{p}/{t}" for p in procs for t in ("compute", "tp")]


def trace_figure(run: TPRun) -> DisplayFigure:
    """``run``'s timelines, one panel per case: each rank's forward and backward (row
    ``rank{r} compute``) above its collectives (row ``rank{r} tp``), in milliseconds from the
    first span of the panel."""
    if not isinstance(run, TPRun):
        raise TypeError(f"run must be a TPRun, got {type(run).__name__}")
    cases = list(run.cases.items())
    fig = new_figure(figsize=(FIG_WIDTH_IN, 0.5 * 2 * run.ranks * len(cases) + 1.6))
    axes = fig.subplots(len(cases), 1, squeeze=False)[:, 0]
    seen: dict[str, str] = {}
    for ax, (name, case) in zip(axes, cases, strict=True):
        tl = case.timeline
        lanes = _lanes(tl)
        origin = tl.extent_us()[0]
        for row, lane in enumerate(lanes):
            for s in tl.spans:
                if s.lane != lane:
                    continue
                key = s.category if s.category in PASSES else s.name
                c = colour(key)
                seen.setdefault(key, c)
                y = len(lanes) - 1 - row
                ax.barh(y, max(s.duration_us, 1.0) / 1e3, left=(s.start_us - origin) / 1e3,
                        height=0.7, color=c, edgecolor="white", lw=0.4)
        ax.set_yticks(range(len(lanes)), [lane.replace("/", " ") for lane in reversed(lanes)],
                      fontsize="small")
        ax.set_xlabel("ms from the first span")
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(f"{_CASE_TITLES.get(name, name)}: one forward and backward, traced",
                     fontsize="medium", loc="left")
    fig.legend(handles=[Patch(facecolor=c, label=k) for k, c in seen.items()],
               loc="lower center", ncol=len(seen), fontsize="small", frameon=False)
    fig.get_layout_engine().set(rect=(0, 0.06, 1, 0.94))
    return fig


def gpt_shape(hidden: int, *, seq_len: int = 2048, micro_batch: int = 1,
              head_dim: int = 128) -> TransformerShape:
    """A GPT-3-like layer of ``hidden`` (heads of ``head_dim`` elements, 2-byte activations) at
    ``micro_batch`` sequences: a one-layer :class:`~distlab.transformer.ModelSpec` with GPT's
    vocabulary, layer norms and biases (:meth:`TransformerShape.of
    <distlab.tensor_parallel.cost.TransformerShape.of>`). GPT-3 175B is ``gpt_shape(12288)``
    (96 heads)."""
    if hidden % head_dim:
        raise ValueError(f"hidden={hidden} must be a multiple of head_dim={head_dim}")
    spec = ModelSpec(f"gpt h{hidden}", 1, hidden, hidden // head_dim, 51200, seq_len,
                     tied_embeddings=True, attention_bias=True, mlp_bias=True, norm="layernorm")
    return TransformerShape.of(spec, micro_batch)


def price_figure(hiddens: Sequence[int], tp: int, box: str, networks: Sequence[str], *,
                 seq_len: int = 2048, sequence_parallel: bool = False,
                 title: str | None = None) -> DisplayFigure:
    """Milliseconds of one layer's collectives (forward and backward, one after another)
    against the hidden size (GPT-3-like layers, :func:`gpt_shape`), ``tp`` ranks inside one
    node of ``box`` and across two nodes (``tp / 2`` GPUs on each) over each of ``networks``
    (:func:`~distlab.tensor_parallel.cost.price_layer`, NCCL's model), log scales."""
    if box not in GPU_BOXES:
        raise ValueError(f"box must be one of {', '.join(GPU_BOXES)}, got {box!r}")
    for n in networks:
        if n not in NETWORKS:
            raise ValueError(f"networks must be keys of NETWORKS ({', '.join(NETWORKS)}), "
                             f"got {n!r}")
    if not hiddens:
        raise ValueError("hiddens must hold at least one hidden size, got none")
    fig = new_figure(figsize=(FIG_WIDTH_IN, 4.0))
    ax = fig.add_subplot()
    series = [(f"one node ({tp} GPUs)", 1, None)] + [
        (f"2 nodes x {tp // 2} over {n}", 2, n) for n in networks]
    for k, (label, nodes, net) in enumerate(series):
        ys = [price_layer(gpt_shape(h, seq_len=seq_len), tp, sequence_parallel, box=box,
                          nodes=nodes, network=net).seconds * 1e3 for h in hiddens]
        ax.plot(list(hiddens), ys, _STYLES[k % len(_STYLES)], lw=1.4, ms=5, label=label,
                color=_SERIES[k % len(_SERIES)])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(hiddens), [str(h) for h in hiddens])
    ax.xaxis.set_minor_locator(NullLocator())
    # every 1, 2 and 5 of each decade labelled, in plain numbers (not only 10^0 and 10^1)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(3.0, 4.0, 6.0, 7.0, 8.0, 9.0)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("hidden size h")
    ax.set_ylabel("ms of collectives per layer")
    ax.grid(alpha=0.3, which="both")
    sp = "with" if sequence_parallel else "without"
    ax.set_title(title or (f"one layer's collectives at t={tp} on {box}, s={seq_len}, b=1, "
                           f"{sp} sequence parallelism (NCCL's model)"), fontsize="medium")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def _call_label(call: Any) -> str:
    block = "attention" if call.where.startswith("attention") else "MLP"
    return f"{'fwd' if call.phase == 'forward' else 'bwd'} {block} {call.operator}"


class TensorParallelExplorer(Explorer):
    """A layer's collectives priced and its activation bytes, for chosen settings.

    Controls: ``tp`` (degree), ``sequence_parallel`` (on/off), ``hidden`` (a GPT-3-like layer,
    :func:`gpt_shape`, ``s = seq_len``, ``b = 1``), ``box`` (a GPU box of NCCL's model) and
    ``where`` (:data:`IN_NODE` or a network: two nodes, half the ranks on each). The figure:
    each collective's milliseconds, forward and backward, in its palette colour; the summary:
    the layer's total and the activation bytes one rank keeps per layer
    (:func:`~distlab.tensor_parallel.memory.layer_activation_bytes`, no recomputation) beside
    tensor parallelism without sequence parallelism. ``price`` (a
    :class:`~distlab.tensor_parallel.cost.LayerPrice`, None with ``error`` saying why).
    """

    def __init__(self, tp: int = 8, sequence_parallel: bool = False, hidden: int = 12288, *,
                 box: str = "h100_sxm8", where: str = IN_NODE, seq_len: int = 2048,
                 hiddens: Sequence[int] = (4096, 8192, 12288, 16384),
                 networks: Sequence[str] = ("ib_ndr400x8", "efa400", "tcp100")) -> None:
        st = {"description_width": "110px"}
        self.seq_len = seq_len
        self.tp = w.Dropdown(options=[2, 4, 8, 16], value=tp, description="TP degree",
                             style=st)
        self.sequence_parallel = w.Checkbox(value=sequence_parallel,
                                            description="sequence parallel", style=st)
        self.hidden = w.Dropdown(options=list(hiddens), value=hidden, description="hidden",
                                 style=st)
        self.box = w.Dropdown(options=list(GPU_BOXES), value=box, description="box", style=st)
        self.where = w.Dropdown(options=[IN_NODE, *networks], value=where,
                                description="ranks", style=st)
        self.price: Any = None
        self.error = ""
        controls = [self.tp, self.sequence_parallel, self.hidden, self.box, self.where]
        super().__init__(controls, rows=[w.HBox([self.tp, self.hidden, self.sequence_parallel]),
                                         w.HBox([self.box, self.where])])

    def draw(self) -> Drawing:
        shape = gpt_shape(self.hidden.value, seq_len=self.seq_len)
        t, sp = self.tp.value, self.sequence_parallel.value
        nodes, net = (1, None) if self.where.value == IN_NODE else (2, self.where.value)
        try:
            check_tp(shape, t, sp)
            self.price, self.error = price_layer(shape, t, sp, box=self.box.value, nodes=nodes,
                                                 network=net), ""
        except ValueError as exc:
            self.price, self.error = None, str(exc)
            return Drawing(message_figure(self.error, width_in=FIG_WIDTH_IN), self.error)
        price = self.price
        mine = layer_activation_bytes(shape, t, sequence_parallel=sp)
        plain = layer_activation_bytes(shape, t)
        fig = new_figure(figsize=(FIG_WIDTH_IN, 0.28 * len(price.calls) + 1.5))
        ax = fig.add_subplot()
        seen = set()
        for i, c in enumerate(price.calls):
            y = len(price.calls) - 1 - i
            name = c.call.collective
            ax.barh(y, c.seconds * 1e3, color=colour(name), height=0.7,
                    label=name if name not in seen else "_")
            seen.add(name)
        ax.set_yticks(range(len(price.calls)),
                      [_call_label(c.call) for c in reversed(price.calls)],
                      fontsize="small")
        ax.set_xlabel("ms per call")
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(f"t={t}, h={shape.hidden}, {price.where}", fontsize="medium")
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        summary = (f"collectives {price.seconds * 1e3:.3g} ms per layer (forward "
                   f"{price.pass_seconds('forward') * 1e3:.3g}, backward "
                   f"{price.pass_seconds('backward') * 1e3:.3g}); activations "
                   f"{size_in(mine, 'MiB', '.0f')} per layer per rank"
                   + (f" (without SP {size_in(plain, 'MiB', '.0f')})" if sp else ""))
        return Drawing(fig, summary)
