"""Elastic resume replayed for notebook 01 (samplers/elastic.py): every index read, twice only
through the new padding; the figure draws what the replay recorded."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.samplers.elastic import replay_elastic_resume
from distlab.viz.figure import DisplayFigure
from distlab.viz.samplers import elastic_figure


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), old=st.integers(1, 9), new=st.integers(1, 9),
       frac=st.floats(0, 1), seed=st.integers(0, 5), epoch=st.integers(0, 3))
def test_every_index_is_read_and_repeats_are_the_new_padding(n, old, new, frac, seed,
                                                             epoch) -> None:
    share = -(-n // old)                                   # each old rank's padded share
    steps = min(int(frac * share), n // old)               # stop before the old padding
    r = replay_elastic_resume(n, old, new, steps, seed=seed, epoch=epoch)
    assert r.read_by.min() >= 1                            # nothing skipped
    assert int((r.read_by - 1).sum()) == r.padding >= 0    # every repeat is new padding
    # an elastic (other size) world pads from the remainder; the same world keeps its own layout,
    # whose padding wraps to the epoch's first indices
    assert r.disjoint or old == new
    assert len(r.old_reads) == steps and all(len(row) == old for row in r.old_reads)
    assert all(len(row) == new for row in r.new_reads)
    old_set = sorted({i for row in r.old_reads for i in row})
    assert (r.first_step[old_set] < steps).all() and (r.first_world[old_set] == old).all()
    rest = sorted(set(range(n)) - set(old_set))
    assert (r.first_step[rest] >= steps).all()


def test_known_case_of_notebook_01() -> None:
    r = replay_elastic_resume(200, 8, 6, 9, seed=1)
    assert r.state["consumed"] == 9 and r.state["epoch"] == 0
    assert (len(r.new_reads), r.padding) == (22, 4)
    fig = elastic_figure(r)
    assert isinstance(fig, DisplayFigure) and len(fig.axes) == 2
    bars = fig.axes[1].patches
    assert [int(b.get_height()) for b in bars] == r.read_by.tolist()


@pytest.mark.parametrize("args, word", [((0, 2, 2, 0), "n"), ((10, 0, 2, 0), "old_world"),
                                        ((10, 2, 0, 0), "new_world"), ((10, 2, 2, 6), "steps")])
def test_bad_input_names_the_argument(args, word) -> None:
    with pytest.raises(ValueError, match=word):
        replay_elastic_resume(*args)
