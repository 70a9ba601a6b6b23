"""The Assignment model against the samplers it describes, and its checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.samplers import (
    DistributedEvalSampler,
    DistributedRandomSampler,
    DistributedSampler,
    DistributedSequentialSampler,
    assign,
)

params = st.fixed_dictionaries({
    "n": st.one_of(st.integers(0, 12), st.integers(0, 400)),
    "world": st.integers(1, 12),
    "shuffle": st.booleans(),
    "seed": st.integers(0, 5),
    "epoch": st.integers(0, 5),
    "drop_last": st.booleans(),
})


@settings(max_examples=120, deadline=None)
@given(params)
def test_torch_layout_is_the_torch_sampler(p: dict) -> None:
    a = assign(p["n"], p["world"], layout="torch", shuffle=p["shuffle"], seed=p["seed"],
               epoch=p["epoch"], drop_last=p["drop_last"])
    for rank in range(p["world"]):
        s = DistributedSampler(p["n"], p["world"], rank, p["shuffle"], p["seed"], p["drop_last"])
        s.set_epoch(p["epoch"])
        assert a.per_rank[rank].tolist() == s.indices().tolist()
    assert a.is_disjoint() and not a.problems()
    assert a.num_padded + p["n"] - a.num_dropped == int(a.counts.sum())
    if not p["drop_last"]:
        assert a.num_dropped == 0 and a.covers_all()
        assert a.num_padded == (-p["n"]) % p["world"] if p["n"] else a.num_padded == 0
    else:
        assert a.num_padded == 0 and a.num_dropped == p["n"] % p["world"]
    assert len(set(a.counts.tolist())) <= 1  # equal counts: every rank runs the same steps


@settings(max_examples=80, deadline=None)
@given(params)
def test_exact_mode_is_the_eval_sampler(p: dict) -> None:
    a = assign(p["n"], p["world"], shuffle=p["shuffle"], seed=p["seed"], epoch=p["epoch"],
               exact=True)
    for rank in range(p["world"]):
        s = DistributedEvalSampler(p["n"], p["world"], rank, p["shuffle"], p["seed"])
        s.set_epoch(p["epoch"])
        assert a.per_rank[rank].tolist() == list(s)
    assert a.num_padded == 0 and a.num_dropped == 0 and a.covers_all() and a.is_disjoint()
    assert sorted(np.concatenate(a.per_rank).tolist()) == list(range(p["n"]))


@settings(max_examples=80, deadline=None)
@given(params)
def test_libtorch_layout_is_the_libtorch_samplers(p: dict) -> None:
    a = assign(p["n"], p["world"], layout="libtorch", shuffle=p["shuffle"], epoch=p["epoch"],
               drop_last=p["drop_last"])
    cls = DistributedRandomSampler if p["shuffle"] else DistributedSequentialSampler
    for rank in range(p["world"]):
        s = cls(p["n"], p["world"], rank, not p["drop_last"])
        s.set_epoch(p["epoch"])
        s.reset()
        assert a.per_rank[rank].tolist() == s.indices().tolist()
    assert a.is_disjoint()


def test_padding_marks_and_grid() -> None:
    a = assign(10, 4, shuffle=False)
    assert [x.tolist() for x in a.per_rank] == [[0, 4, 8], [1, 5, 9], [2, 6, 0], [3, 7, 1]]
    assert [x.tolist() for x in a.padded] == [[False] * 3, [False] * 3, [False, False, True],
                                              [False, False, True]]
    idx, pad = a.grid()
    assert idx.shape == (4, 3) and pad.sum() == 2
    assert a.owner().tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert a.steps(2).tolist() == [2, 2, 2, 2]
    d = assign(10, 4, shuffle=False, drop_last=True)
    assert d.dropped.tolist() == [8, 9] and d.owner()[8:].tolist() == [-1, -1]
    e = assign(10, 4, shuffle=False, exact=True)
    assert e.counts.tolist() == [3, 3, 2, 2] and e.steps(3).tolist() == [1, 1, 1, 1]


def test_libtorch_quirk_is_reported_as_a_problem() -> None:
    a = assign(2, 5, layout="libtorch", shuffle=True)
    assert a.out_of_range().tolist() == [2]
    assert any("outside [0, 2)" in msg for msg in a.problems())
    assert not assign(2, 5, layout="libtorch", shuffle=False).problems()


def test_shared_indices_detects_overlap() -> None:
    a = assign(8, 2, shuffle=False)
    broken = type(a)(**{**a.__dict__, "per_rank": (a.per_rank[0], a.per_rank[0])})
    assert broken.shared_indices().tolist() == [0, 2, 4, 6]
    assert not broken.is_disjoint() and broken.problems()


@pytest.mark.parametrize("kwargs, exc, word", [
    ({"length": 5, "num_replicas": 2, "layout": "tf"}, ValueError, "layout"),
    ({"length": -1, "num_replicas": 2}, ValueError, "length"),
    ({"length": 5, "num_replicas": 0}, ValueError, "num_replicas"),
    ({"length": 5, "num_replicas": 2, "exact": True, "drop_last": True}, ValueError, "exact"),
    ({"length": 5, "num_replicas": 2, "exact": True, "layout": "libtorch"}, ValueError, "exact"),
    ({"length": 5, "num_replicas": 2, "epoch": -1}, ValueError, "epoch"),
    ({"length": "5", "num_replicas": 2}, TypeError, "length"),
])
def test_bad_arguments(kwargs: dict, exc: type, word: str) -> None:
    with pytest.raises(exc, match=word):
        assign(**kwargs)


def test_numpy_bool_flags_everywhere() -> None:
    """NumPy 2 names numpy.bool_ "bool": every flag still accepts it (and rejects other types)."""
    import numpy as np

    from distlab._checks import check_bool
    from distlab.samplers import DistributedRandomSampler

    assert check_bool("x", np.bool_(True)) is True and check_bool("x", np.False_) is False
    with pytest.raises(TypeError, match="x"):
        check_bool("x", np.int8(1))
    a = assign(10, 3, shuffle=np.bool_(True), drop_last=np.bool_(True), exact=np.bool_(False))
    b = assign(10, 3, shuffle=True, drop_last=True)
    assert a.shuffle is True and a.drop_last is True and a.exact is False
    assert all(np.array_equal(x, y) for x, y in zip(a.per_rank, b.per_rank, strict=True))
    s = DistributedRandomSampler(10, 3, 1, allow_duplicates=np.bool_(False))
    assert s.allow_duplicates is False
