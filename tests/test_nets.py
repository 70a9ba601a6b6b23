"""distlab.nets: the one test-model builder of the labs and benchmarks."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.nets import mlp


@settings(max_examples=20, deadline=None)
@given(layers=st.integers(1, 4), width=st.integers(1, 9), seed=st.integers(0, 2**31))
def test_mlp_is_layers_of_linear_and_relu_with_the_seeded_weights(layers: int, width: int,
                                                                   seed: int) -> None:
    model = mlp(layers, width, seed)
    kinds = [type(m) for m in model]
    assert kinds == [torch.nn.Linear, torch.nn.ReLU] * layers
    assert all(m.in_features == width and m.out_features == width
               for m in model if isinstance(m, torch.nn.Linear))
    # the weights are those torch's global generator gives right after manual_seed(seed)
    torch.manual_seed(seed)
    want = [torch.nn.Linear(width, width) for _ in range(layers)]
    got = [m for m in model if isinstance(m, torch.nn.Linear)]
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)


def test_same_arguments_same_weights_other_seed_other_weights() -> None:
    a, b, c = mlp(2, 8, 5), mlp(2, 8, 5), mlp(2, 8, 6)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(a[0].weight, c[0].weight)
