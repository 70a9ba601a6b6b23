"""The palette: one colour per name, every algorithm of the registry in it, labels read back."""

from __future__ import annotations

import pytest
from matplotlib.colors import to_hex

from distlab.collectives.algorithms import registry
from distlab.pipeline_parallel import SCHEDULES
from distlab.viz import palette as P


def test_every_algorithm_and_collective_of_the_registry_has_a_colour() -> None:
    for e in registry.entries():
        assert e.name in P.ALGORITHM_COLOURS, e
        assert e.collective in P.COLLECTIVE_COLOURS, e


def test_every_pipeline_schedule_has_a_colour() -> None:
    assert list(P.SCHEDULE_COLOURS) == list(SCHEDULES)


def test_names_of_a_family_never_share_a_colour() -> None:
    for family in (P.ALGORITHM_COLOURS, P.NCCL_PAIR_COLOURS, P.SCHEDULE_COLOURS,
                   P.TRACE_COLOURS):
        assert len(set(family.values())) == len(family)
    spans = {k: v for k, v in P.SPAN_COLOURS.items() if k not in ("worker", "cores")}
    together = {**spans, **P.COLLECTIVE_COLOURS}   # drawn together in Gantt charts
    assert len(set(together.values())) == len(together)


def test_one_name_one_colour_in_every_family() -> None:
    for family in (P.ALGORITHM_COLOURS, P.NCCL_PAIR_COLOURS, P.COLLECTIVE_COLOURS,
                   P.SPAN_COLOURS, P.SCHEDULE_COLOURS, P.TRACE_COLOURS):
        for name, c in family.items():
            assert P.COLOURS[name] == c == to_hex(c)


def test_colours_gives_spares_that_are_no_palette_colour_of_the_figure() -> None:
    got = P.colours(["ring", "double_binary_tree, pipelined", "tree", "something else"])
    assert got["ring"] == P.colour("ring") and got["tree"] == P.colour("tree")
    spares = [got["double_binary_tree, pipelined"], got["something else"]]
    assert len(set(spares)) == 2 and not set(spares) & set(P.COLOURS.values())


@pytest.mark.parametrize(("label", "name"), [
    ("ring", "ring"), ("ours: ring", "ring"), ("ring (model)", "ring"),
    ("ring measured", "ring"), ("bruck measured (python executor)", "bruck"),
    ("picked: ring/LL", "ring/LL"), ("estimate: nvls/Simple", "nvls/Simple"),
    ("bottleneck: step", "step"), ("segmented_ring", "segmented_ring"),
    ("pinned copy", None), ("ring measured, joined", None), ("published: 8x H100", None),
])
def test_name_of_label(label: str, name: str | None) -> None:
    assert P.name_of_label(label) == name


def test_an_unknown_name_is_refused_by_name() -> None:
    with pytest.raises(KeyError, match="'rings' has no colour"):
        P.colour("rings")


@pytest.mark.parametrize("colour, lab", [
    ("#ffffff", (100.0, 0.0, 0.0)), ("#000000", (0.0, 0.0, 0.0)),
    ("#ff0000", (53.24, 80.09, 67.20)), ("#00ff00", (87.73, -86.18, 83.18)),
    ("#0000ff", (32.30, 79.19, -107.86)), ("#808080", (53.59, 0.0, 0.0)),
])
def test_srgb_to_lab_matches_the_published_values(colour: str, lab: tuple) -> None:
    # CIELAB D65 of the sRGB primaries as colour-science tables give them, to 2 decimals
    assert P.srgb_to_lab(colour)[0] == pytest.approx(lab, abs=0.02)


def test_contrast_ratio_is_wcag_and_text_takes_the_darker_or_lighter() -> None:
    assert P.contrast_ratio("#000000", "#ffffff") == pytest.approx(21.0)
    assert P.contrast_ratio("#777777", "#777777") == pytest.approx(1.0)
    assert P.text_colour_on("#ffff00") == "#000000" and P.text_colour_on("#000080") == "#ffffff"


def test_rank_colours_keep_their_rank_and_stay_clear_of_the_marks() -> None:
    every = P.rank_colours(64)
    assert every[:4] == ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
    for n in range(1, 65):
        assert P.rank_colours(n) == every[:n]
    for c in every:
        for name, mark in P.MARK_COLOURS.items():
            assert P.delta_e(c, mark) >= P.RANK_MARGIN, (c, name)
        assert max(P.contrast_ratio(c, t) for t in ("#000000", "#ffffff")) >= 4.5, c
    with pytest.raises(ValueError, match="num_ranks must be an int >= 0"):
        P.rank_colours(-1)
