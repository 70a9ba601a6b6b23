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
