"""The reordering after a dispatch, against lists built by hand: rows that arrive source-major
(rank 0's rows for local expert 0, 1, ..., then rank 1's, ...) leave expert-major (expert 0's
rows from rank 0, 1, ..., then expert 1's). Integer indices compare exactly."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.moe import expert_major_order


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5), st.integers(1, 4), st.data())
def test_expert_major_order_groups_rows_by_local_expert(ranks, local, data):
    counts = data.draw(st.lists(st.integers(0, 4), min_size=ranks * local,
                                max_size=ranks * local))
    received = torch.tensor(counts).reshape(ranks, local)
    labels = [(s, e) for s in range(ranks) for e in range(local)
              for _ in range(int(received[s, e]))]           # what each arrived row is
    order = expert_major_order(received)
    assert sorted(order.tolist()) == list(range(len(labels)))
    got = [labels[i] for i in order.tolist()]
    assert got == sorted(labels, key=lambda sl: (sl[1], sl[0]))


def test_expert_major_order_by_hand_and_bad_input():
    # rank 0 sends 1 row to expert 0 and 2 to expert 1; rank 1 sends 2 and 0
    received = torch.tensor([[1, 2], [2, 0]])
    assert expert_major_order(received).tolist() == [0, 3, 4, 1, 2]
    with pytest.raises(ValueError, match="received must be a"):
        expert_major_order(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="received must be a"):
        expert_major_order(torch.ones(2, 2))
