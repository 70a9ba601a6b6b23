"""compute_bucket_assignment_by_size against torch's own function on random inputs."""

from __future__ import annotations

import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.ddp import compute_bucket_assignment_by_size, rebuilt_buckets, torch_ddp_buckets

DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64]


@st.composite
def cases(draw):
    n = draw(st.integers(1, 12))
    tensors = [torch.zeros(draw(st.integers(0, 300)), dtype=draw(st.sampled_from(DTYPES)))
               for _ in range(n)]
    limits = draw(st.lists(st.integers(1, 2000), min_size=1, max_size=4))
    sparse = draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=n, max_size=n)))
    indices = draw(st.one_of(st.none(), st.permutations(list(range(n)))))
    return tensors, limits, sparse, indices


@settings(max_examples=100, deadline=None)
@given(cases())
def test_matches_torch(case):
    tensors, limits, sparse, indices = case
    ours = compute_bucket_assignment_by_size(tensors, limits, sparse, indices)
    ref = dist._compute_bucket_assignment_by_size(tensors, limits, sparse or [], indices or [])
    pairs_ours = list(zip(*ours, strict=True))
    pairs_ref = [(list(b), int(lim)) for b, lim in zip(*ref, strict=True)]
    if not indices:
        assert pairs_ours == pairs_ref
        return
    # With tensor_indices torch appends the still-open buckets (at most one per dtype) in
    # hash-map order: the closed prefix must match exactly, the tail as a multiset.
    k = len({t.dtype for t in tensors})
    head = max(len(pairs_ref) - k, 0)
    assert pairs_ours[:head] == pairs_ref[:head]
    assert sorted(pairs_ours[head:]) == sorted(pairs_ref[head:])


def test_single_dtype_with_indices_is_exact_order():
    ts = [torch.zeros(100) for _ in range(6)]
    order = [5, 4, 3, 2, 1, 0]
    ours = compute_bucket_assignment_by_size([ts[i] for i in order], [400, 800],
                                             tensor_indices=order)
    ref = dist._compute_bucket_assignment_by_size([ts[i] for i in order], [400, 800], [], order)
    assert ours == (ref[0], ref[1]) == ([[5], [4, 3], [2, 1], [0]], [400, 800, 800, 800])


def test_first_bucket_small_only_with_default_cap():
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])
    default = torch_ddp_buckets(model)
    # each layer is 257 KiB: the 1 MiB first bucket closes after four layers, the rest fit 25 MiB
    assert [len(b) for b in default] == [8, 8]
    assert default[0][:2] == ["7.bias", "7.weight"]
    params = list(model.parameters())
    order = list(reversed(range(len(params))))
    assert [len(b) for b in rebuilt_buckets(params, order, 2)] == [16]  # no small first bucket
