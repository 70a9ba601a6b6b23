"""The MoE block against its formula token by token: ``y_t = shared(x_t) + sum over kept
choices j of w_{t,j} * expert_{i_{t,j}}(x_t)`` (or the weight on the expert's input with
``score_before_experts``), dropped assignments contributing nothing; and the grouped-matmul
block against the loop block in outputs and every gradient. Float32 results agree to the
rounding of their sums in another order (:func:`_close`, ``helpers.float_tolerance``: sums of at
most 16 terms, 8 deep, so ``|a - b| <= 1.5e-5 max|b|`` per tensor).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.moe import MoE, MoEConfig, sort_by_expert
from helpers.float_tolerance import error_ratio

REDUCTION = 16
"""The longest sum: the experts' hidden width; the gate sums ``dim`` = 8, the combine at most
3 choices and a shared expert, a weight gradient 12 tokens."""
DEPTH = 8
"""Reductions in series: the gate, the score function, an expert's two matmuls forward; the
same backward. A wrong expert, weight or token is off by ~0.1 of the outputs' scale."""


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> None:
    ratio = error_ratio(actual, expected, reduction_length=REDUCTION, depth=DEPTH)
    assert ratio <= 1, f"{what} max|a - b| is {ratio:.3g} times the float32 bound"


def _expert(moe: MoE, e: int, x: torch.Tensor) -> torch.Tensor:
    w1, w2, w3 = moe.experts.w1[e], moe.experts.w2[e], moe.experts.w3[e]
    return w2 @ (F.silu(w1 @ x) * (w3 @ x))


def _by_formula(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    r = moe.last_routing
    flat = x.reshape(-1, moe.config.dim)
    out = []
    for t in range(flat.shape[0]):
        y = moe.shared_experts(flat[t]) if moe.shared_experts is not None \
            else torch.zeros(moe.config.dim)
        for j in range(r.indices.shape[1]):
            if not r.kept[t, j]:
                continue
            w, e = r.weights[t, j], int(r.indices[t, j])
            if moe.config.score_before_experts:
                y = y + _expert(moe, e, w * flat[t])
            else:
                y = y + w * _expert(moe, e, flat[t])
        out.append(y)
    return torch.stack(out).reshape(x.shape)


@st.composite
def configs(draw):
    experts = draw(st.sampled_from([1, 2, 4, 8]))
    return MoEConfig(
        dim=8, hidden=16, num_experts=experts, top_k=draw(st.integers(1, min(experts, 3))),
        score_func=draw(st.sampled_from(["softmax", "sigmoid"])),
        normalize=draw(st.booleans()),
        capacity_factor=draw(st.sampled_from([None, 0.5, 1.0, 1.5])),
        drop_policy=draw(st.sampled_from(["position", "score"])),
        num_shared_experts=draw(st.integers(0, 2)),
        score_before_experts=draw(st.booleans()),
        init_std=0.4)


@settings(max_examples=30, deadline=None)
@given(configs(), st.integers(0, 1000))
def test_block_equals_its_formula(config, seed):
    torch.manual_seed(seed)
    moe = MoE(config)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        y = moe(x)
        _close(y, _by_formula(moe, x))
    assert y.shape == x.shape and y._base is None      # a new tensor, not a view
    assignment, token = sort_by_expert(moe.last_routing)
    experts = moe.last_routing.indices.reshape(-1)[assignment]
    assert (experts[1:] >= experts[:-1]).all()          # grouped by expert
    assert torch.bincount(experts, minlength=config.num_experts).tolist() == \
        moe.last_routing.tokens_per_expert.tolist()


def test_grouped_block_equals_loop_block_with_gradients():
    config = MoEConfig(dim=8, hidden=16, num_experts=4, top_k=2, normalize=True,
                       capacity_factor=1.0, num_shared_experts=1, aux_loss_coeff=0.01,
                       init_std=0.4)
    runs = []
    for grouped in (True, False):
        torch.manual_seed(3)
        moe = MoE(MoEConfig(**{**config.__dict__, "grouped_mm": grouped}))
        x = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(9),
                        requires_grad=True)
        y = moe(x)
        ((y ** 2).mean() + moe.aux_loss).backward()
        runs.append((y.detach(), x.grad, {n: p.grad for n, p in moe.named_parameters()},
                     moe.experts.last_path))
    (y_g, xg_g, g_g, path_g), (y_l, xg_l, g_l, path_l) = runs
    assert (path_g, path_l) == ("grouped_mm", "loop")
    _close(y_g, y_l)
    _close(xg_g, xg_l)
    assert set(g_g) == {"router.gate.weight", "experts.w1", "experts.w2", "experts.w3",
                        "shared_experts.w1.weight", "shared_experts.w2.weight",
                        "shared_experts.w3.weight"}
    for name in g_g:
        _close(g_g[name], g_l[name], name)


def test_dropped_tokens_get_the_shared_experts_only():
    torch.manual_seed(0)
    moe = MoE(MoEConfig(dim=8, hidden=16, num_experts=2, capacity_factor=0.5,
                        num_shared_experts=1, init_std=0.4))
    x = torch.randn(8, 8)
    y = moe(x)
    r = moe.last_routing
    assert r.capacity == 2 and r.dropped == 4
    dropped = ~r.kept[:, 0]
    _close(y[dropped], moe.shared_experts(x[dropped]))


def test_config_is_checked():
    with pytest.raises(ValueError, match="num_shared_experts must be an int >= 0"):
        MoEConfig(dim=8, hidden=16, num_experts=4, num_shared_experts=-1)
    with pytest.raises(TypeError, match="score_before_experts must be a bool"):
        MoEConfig(dim=8, hidden=16, num_experts=4, score_before_experts="yes")
    with pytest.raises(ValueError, match="top_k must be an int"):
        MoE(MoEConfig(dim=8, hidden=16, num_experts=2, top_k=3))
    with pytest.raises(TypeError, match="config must be an MoEConfig"):
        MoE({"dim": 8})
