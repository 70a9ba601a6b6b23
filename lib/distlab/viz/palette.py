"""One colour per name in every distlab figure: algorithms, NCCL's (algorithm, protocol) pairs,
collectives, the span kinds of a timeline, pipeline-parallel schedules and the planner's parts.

A reader who learns in one figure that ``ring`` is blue reads blue as ring in the next, so every
figure takes a named thing's colour from :data:`COLOURS` (through :func:`colour` or
:func:`colours`) and never from the position of a line in a colour cycle. Only figures draw
(the labs name categories, they do not colour them), so the palette lives on the viz floor.

What the palette promises: one name, one colour, everywhere. Names of different families that
are never drawn together may share a colour (there are more names than colours a reader can tell
apart); names that one figure draws together must not, which
:func:`distlab.viz.layout_check.colour_problems` checks on every figure a notebook shows.

A label names a palette name when, stripped of a ``"<prefix>: "`` (``"ours: ring"``,
``"picked: ring/LL"``) and of a trailing ``" (...)"``, ``" measured"``, ``" model"`` or
``" predicted"``, it is that name (:func:`name_of_label`). Colours are hex strings.

Ranks are numbered, not named: rank ``r`` has one colour at every world size
(:func:`rank_colours`), and no rank's colour reads as one of the marks figures put beside ranks
(:data:`MARK_COLOURS`: a dropped index, its cross, a padded duplicate's dot, an empty cell).
Colours are compared as a reader sees them: CIELAB distance (:func:`delta_e`) and WCAG
contrast of text on a colour (:func:`contrast_ratio`, :func:`text_colour_on`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import numpy as np
from matplotlib.colors import to_hex, to_rgba_array

from distlab.vocabulary import collective_name

__all__ = ["ALGORITHM_COLOURS", "COLLECTIVE_COLOURS", "COLOURS", "NCCL_PAIR_COLOURS",
           "MARK_COLOURS", "PLAN_COLOURS", "RANK_MARGIN", "SCHEDULE_COLOURS", "SPAN_COLOURS",
           "colour", "colours", "contrast_ratio", "delta_e", "name_of_label", "nccl_pair",
           "rank_colours", "srgb_to_lab", "text_colour_on"]

#: Every algorithm of the registry (all collectives share one name space: ``ring`` is ring
#: whichever collective it runs), the ones drawn most first in the most distinct colours.
ALGORITHM_COLOURS: dict[str, str] = {
    "ring": "#1f77b4", "tree": "#ff7f0e", "recursive_doubling": "#2ca02c",
    "rabenseifner": "#d62728", "builtin": "#9467bd", "double_binary_tree": "#8c564b",
    "segmented_ring": "#e377c2", "hierarchical": "#bcbd22", "naive": "#17becf",
    "gloo_ring": "#393b79", "binomial": "#637939", "scatter_allgather": "#8c6d31",
    "linear": "#843c39", "bruck": "#7b4173", "pairwise": "#5254a3",
    "recursive_halving": "#9c9ede", "dissemination": "#e7969c",
}

#: NCCL's (algorithm, protocol) as ``"algorithm/protocol"``: one hue per algorithm (ring blue,
#: tree orange, NVLS green, as distlab's ring and tree), light to dark for LL, LL128, Simple.
NCCL_PAIR_COLOURS: dict[str, str] = {
    "ring/LL": "#9ecae1", "ring/LL128": "#4292c6", "ring/Simple": "#08306b",
    "tree/LL": "#fdae6b", "tree/LL128": "#f16913", "tree/Simple": "#7f2704",
    "nvls/Simple": "#41ab5d", "nvls_tree/Simple": "#005a32",
    "collnet_direct/Simple": "#bcbddc", "collnet_chain/Simple": "#6a51a3",
}

#: Collectives, under :data:`distlab.vocabulary.COLLECTIVES`' names; any spelling
#: :func:`~distlab.vocabulary.collective_name` reads (``allreduce``, the category DDP's spans
#: carry) finds its collective's colour.
COLLECTIVE_COLOURS: dict[str, str] = {
    "all_reduce": "#d62728", "all_gather": "#ff7f0e",
    "reduce_scatter": "#8c564b", "broadcast": "#8c6d31", "reduce": "#843c39",
    "gather": "#637939", "scatter": "#b5cf6b", "all_to_all": "#7b4173", "barrier": "#393b79",
}

#: The categories of timeline spans (Gantt charts), the bottlenecks notebook 12 names, and the
#: compute kinds and bubbles of pipeline-parallel schedules.
SPAN_COLOURS: dict[str, str] = {
    "forward": "#1f77b4", "backward": "#17becf", "compute": "#2ca02c", "step": "#bcbd22",
    "wait": "#7f7f7f", "shadow": "#e377c2", "ready": "#000000", "comm": "#ff9896",
    "nccl": "#f7b6d2", "kernel": "#c7c7c7", "io": "#aec7e8", "cpu": "#ffbb78",
    "copy": "#9467bd", "blocked": "#d3d3d3", "startup": "#c49c94", "calibration": "#525252",
    "worker": "#ff7f0e", "cores": "#d62728",
    # pipeline parallelism: F is "forward", B "backward"; a split backward's I and W, and the
    # idle steps of a schedule
    "backward_input": "#74c476", "backward_weight": "#fdae61", "bubble": "#ececec",
}


#: Pipeline-parallel schedules, torch's names without ``Schedule``
#: (:data:`distlab.pipeline_parallel.SCHEDULES`), as figures comparing them draw their lines.
SCHEDULE_COLOURS: dict[str, str] = {
    "GPipe": "#8c564b", "1F1B": "#d62728", "Interleaved1F1B": "#9467bd", "LoopedBFS": "#bcbd22",
    "InterleavedZeroBubble": "#2ca02c", "ZBVZeroBubble": "#ff7f0e", "DualPipeV": "#e377c2",
}


#: The planner's parts of memory per GPU and of a step, as its figures name them
#: (:mod:`distlab.viz.plan`; ``compute`` and ``bubble`` are the span kinds' colours), and the
#: split of the published runs it is judged on (``calibration`` is the span kind's grey).
PLAN_COLOURS: dict[str, str] = {
    "parameters": "#08519c", "gradients": "#6baed6", "optimizer state": "#54278f",
    "activations": "#e6550d", "gathered, buffers, transients": "#bdbdbd",
    "allocator reserve": "#fdd0a2", "outside the allocator": "#636363",
    "tp/cp exposed": "#dd1c77", "dp/fsdp exposed": "#fec44f", "held out": "#2b8cbe",
    "optimizer step": "#807dba", "ep a2a": "#7b4173",
}


#: The trace judge's figures (:mod:`distlab.viz.trace`): a GPU's idle time and the rest of its
#: breakdown, the causes of idle time no span kind names, and the step windows behind a rank's
#: Gantt chart (the legends keep the breakdown's own words: idle, other, host, synchronize).
TRACE_COLOURS: dict[str, str] = {
    "gpu idle": "#bbbbbb", "other time": "#8172b3", "host launch": "#c44e52",
    "synchronize": "#da8bc3", "other idle": "#8c8c8c", "step window": "#e5e5e5",
}


def _merge(*families: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for fam in families:
        for name, c in fam.items():
            if out.get(name, c) != c:  # pragma: no cover - checked by the tests at import
                raise AssertionError(f"palette: {name!r} has two colours ({out[name]}, {c})")
            out[name] = c
    return out


#: Every name the palette knows and its colour.
COLOURS: dict[str, str] = _merge(ALGORITHM_COLOURS, NCCL_PAIR_COLOURS, COLLECTIVE_COLOURS,
                                 SPAN_COLOURS, SCHEDULE_COLOURS, PLAN_COLOURS, TRACE_COLOURS)

#: Colours for names the palette does not know, in order; none is a palette colour.
_SPARE = ("#98df8a", "#c5b0d5", "#dbdb8d", "#9edae5", "#fd8d3c", "#6b6ecf", "#cedb9c",
          "#e7cb94", "#de9ed6", "#3182bd", "#31a354", "#756bb1", "#636363", "#fdd0a2")

_SUFFIX = re.compile(r"(\s*\([^()]*\)|\s+measured|\s+model|\s+predicted)$")


def nccl_pair(algorithm: str, protocol: str) -> str:
    """The palette's name of NCCL's (algorithm, protocol): ``"ring/LL"``."""
    return f"{algorithm}/{protocol}"


def _known(name: str) -> str | None:
    """The palette's name for ``name``: itself, or the collective it spells; None if neither."""
    if name in COLOURS:
        return name
    try:
        canonical = collective_name(name)
    except (ValueError, TypeError):
        return None
    return canonical if canonical in COLOURS else None


def colour(name: str) -> str:
    """The colour of ``name`` (hex). ``KeyError`` naming it when the palette has none."""
    known = _known(name)
    if known is None:
        raise KeyError(f"name={name!r} has no colour in distlab.viz.palette")
    return COLOURS[known]


def colours(names: Iterable[str]) -> dict[str, str]:
    """A colour for each of ``names`` (one figure's, duplicates allowed): the palette's for a
    name it knows, else the next spare colour no palette name of this figure uses."""
    names = list(dict.fromkeys(names))
    known = {n: _known(n) for n in names}
    taken = {COLOURS[k] for k in known.values() if k is not None}
    spare = iter([c for c in _SPARE if c not in taken] or list(_SPARE))
    out: dict[str, str] = {}
    for n in names:
        k = known[n]
        out[n] = COLOURS[k] if k is not None else next(spare, "#7f7f7f")
    return out


def name_of_label(label: str) -> str | None:
    """The palette name a legend label names, or None (see the module doc):
    ``"ours: ring"``, ``"ring (model)"`` and ``"picked: ring/LL"`` name ``ring``, ``ring``
    and ``ring/LL``; ``"pinned copy"`` names nothing."""
    text = str(label).strip()
    if ": " in text:
        text = text.rsplit(": ", 1)[1]
    while True:
        shorter = _SUFFIX.sub("", text).strip()
        if shorter == text:
            break
        text = shorter
    return _known(text)


#: The marks figures draw beside rank colours (the sampler's dataset panel): a dropped index's
#: cell and its cross, the dot of an index also read as a padded duplicate, an empty cell.
MARK_COLOURS: dict[str, str] = {
    "dropped": "#d1d1d1", "dropped cross": "#696969", "padded dot": "#000000",
    "empty": "#ffffff",
}

#: The least CIELAB distance (:func:`delta_e`) between any rank colour and any of
#: :data:`MARK_COLOURS`: a rank colour is at least this saturated and no darker than L* 40.
RANK_MARGIN = 30.0

#: The first rank colours, in order: tab10's (rank 0 blue, rank 1 orange, ...) without its grey
#: and its brown (a dull colour 25 from a grey); the rest are picked by :func:`rank_colours`.
_RANK_SEEDS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#e377c2", "#bcbd22",
               "#17becf")
_RANK_LIGHTNESS = (40.0, 80.0)   # L* of every rank colour: black dots and grey cells stay apart
_RANK_COUNT = 256                # distinct rank colours; rank r + 256 repeats rank r's


def srgb_to_lab(colours: Any) -> np.ndarray:
    """CIELAB (D65) ``(..., 3)`` of sRGB colours: anything ``matplotlib.colors.to_rgba_array``
    reads (hex strings, names, RGB or RGBA floats in 0..1); alpha is ignored."""
    rgb = to_rgba_array(colours)[:, :3]
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    to_xyz = np.array([[0.4124564, 0.3575761, 0.1804375],
                       [0.2126729, 0.7151522, 0.0721750],
                       [0.0193339, 0.1191920, 0.9503041]])
    xyz = linear @ to_xyz.T / np.array([0.95047, 1.0, 1.08883])   # relative to D65 white
    eps = (6 / 29) ** 3
    f = np.where(xyz > eps, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]),
                     200 * (f[:, 1] - f[:, 2])], axis=-1)


def delta_e(a: Any, b: Any) -> float:
    """CIE76 colour difference of colours ``a`` and ``b`` (about 2.3: just noticeable side by
    side; under 10: easily taken for one another in a small mark)."""
    return float(np.linalg.norm(srgb_to_lab(a)[0] - srgb_to_lab(b)[0]))


def _luminance(colour_: Any) -> float:
    rgb = to_rgba_array(colour_)[0, :3]
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    return float(linear @ np.array([0.2126, 0.7152, 0.0722]))


def contrast_ratio(a: Any, b: Any) -> float:
    """WCAG 2 contrast ratio of colours ``a`` and ``b``: 1 (same) to 21 (black on white);
    small text reads well from 4.5."""
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def text_colour_on(background: Any) -> str:
    """Black or white, whichever contrasts more with ``background`` (at least 4.5:1 on any
    colour)."""
    return "#000000" if contrast_ratio("#000000", background) >= contrast_ratio(
        "#ffffff", background) else "#ffffff"


@lru_cache(maxsize=1)
def _rank_sequence() -> tuple[str, ...]:
    """Every rank colour in rank order: the seeds, then, one at a time, the sRGB colour (of a
    1/15-step grid with L* in :data:`_RANK_LIGHTNESS`, at least :data:`RANK_MARGIN` from every
    mark) farthest in CIELAB from all colours before it."""
    steps = np.linspace(0.0, 1.0, 16)
    grid = np.stack(np.meshgrid(steps, steps, steps, indexing="ij"), axis=-1).reshape(-1, 3)
    lab = srgb_to_lab(grid)
    marks = srgb_to_lab(list(MARK_COLOURS.values()))
    to_marks = np.linalg.norm(lab[:, None, :] - marks[None, :, :], axis=-1).min(axis=1)
    keep = ((lab[:, 0] >= _RANK_LIGHTNESS[0]) & (lab[:, 0] <= _RANK_LIGHTNESS[1])
            & (to_marks >= RANK_MARGIN))
    grid, lab = grid[keep], lab[keep]
    chosen = [to_hex(c) for c in _RANK_SEEDS]
    nearest = np.full(len(lab), np.inf)
    for c in srgb_to_lab(list(chosen)):
        nearest = np.minimum(nearest, np.linalg.norm(lab - c, axis=1))
    while len(chosen) < _RANK_COUNT:
        i = int(nearest.argmax())
        chosen.append(to_hex(grid[i]))
        nearest = np.minimum(nearest, np.linalg.norm(lab - lab[i], axis=1))
    return tuple(chosen)


def rank_colours(num_ranks: int) -> list[str]:
    """The colours of ranks ``0 .. num_ranks - 1`` (hex): rank ``r`` has the same colour at every
    world size, each new rank's colour is the one farthest from all lower ranks' (so any first
    ranks are as distinct as the sequence allows), and every one is at least
    :data:`RANK_MARGIN` from each of :data:`MARK_COLOURS`. From rank 256 on the colours
    repeat (rank 256 is rank 0's colour).

    Raises:
        ValueError: ``num_ranks`` < 0.
    """
    if isinstance(num_ranks, bool) or not isinstance(num_ranks, (int, np.integer)) \
            or num_ranks < 0:
        raise ValueError(f"num_ranks must be an int >= 0, got {num_ranks!r}")
    seq = _rank_sequence()
    return [seq[r % len(seq)] for r in range(int(num_ranks))]
