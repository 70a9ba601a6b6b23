"""Grouped SwiGLU experts: the loop over experts against a token-by-token dense SwiGLU, and
torch's grouped matmul against the loop (outputs and the gradients of inputs and every
weight), on random group sizes (hypothesis), empty experts included; which path runs and why.
Float32 results of two computations agree to the rounding of their sums in another order
(:func:`_close`: ``helpers.float_tolerance`` for sums of at most 16 terms, 4 deep, so
``|a - b| <= 7.6e-6 max|b|`` per tensor; a wrong expert or token is off by a sizeable part of
``max|b|``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.moe import (
    GroupedExperts,
    SwiGLU,
    grouped_mm_problem,
    grouped_mm_reason,
    swiglu_flops,
    swiglu_grouped,
    swiglu_loop,
)
from helpers.float_tolerance import error_ratio

REDUCTION = 16
"""The longest sum: the hidden width (``w2`` forward, the input's gradient backward); ``dim``
is 8 and a weight gradient adds at most 5 tokens per expert."""
DEPTH = 4
"""Reductions in series: ``w1``/``w3`` then ``w2`` forward, the same backward."""


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> None:
    ratio = error_ratio(actual, expected, reduction_length=REDUCTION, depth=DEPTH)
    assert ratio <= 1, f"{what} max|a - b| is {ratio:.3g} times the float32 bound"


def _weights(experts: int, dim: int, hidden: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(experts, hidden, dim, generator=g) * 0.3,
            torch.randn(experts, dim, hidden, generator=g) * 0.3,
            torch.randn(experts, hidden, dim, generator=g) * 0.3]


@st.composite
def groups(draw):
    experts = draw(st.integers(1, 6))
    counts = draw(st.lists(st.integers(0, 5), min_size=experts, max_size=experts))
    return experts, torch.tensor(counts), draw(st.integers(0, 10_000))


@settings(max_examples=40, deadline=None)
@given(groups())
def test_loop_is_each_tokens_own_expert(args):
    experts, counts, seed = args
    w1, w2, w3 = _weights(experts, 8, 12, seed)
    x = torch.randn(int(counts.sum()), 8, generator=torch.Generator().manual_seed(seed + 1))
    out = swiglu_loop(w1, w2, w3, x, counts)
    owner = torch.repeat_interleave(torch.arange(experts), counts)
    for t in range(x.shape[0]):
        e = int(owner[t])
        ref = w2[e] @ (F.silu(w1[e] @ x[t]) * (w3[e] @ x[t]))
        _close(out[t], ref)


@settings(max_examples=40, deadline=None)
@given(groups())
def test_grouped_mm_equals_the_loop_forward_and_backward(args):
    experts, counts, seed = args
    ws = _weights(experts, 8, 16, seed)
    x = torch.randn(int(counts.sum()), 8, generator=torch.Generator().manual_seed(seed + 1))
    if x.shape[0] == 0:
        assert grouped_mm_problem(x, ws[0]).startswith("no rows to compute")
        return
    assert grouped_mm_problem(x, ws[0]) is None
    results = []
    for fn in (swiglu_loop, swiglu_grouped):
        leaves = [t.clone().requires_grad_() for t in (x, *ws)]
        out = fn(leaves[1], leaves[2], leaves[3], leaves[0], counts)
        out.sum().backward()            # a stride-0 gradient: grouped_mm needs it contiguous
        results.append((out.detach(), [t.grad for t in leaves]))
    (out_l, grads_l), (out_g, grads_g) = results
    _close(out_g, out_l)
    for a, b in zip(grads_g, grads_l, strict=True):
        _close(a, b)


def test_module_picks_its_path_and_says_why():
    torch.manual_seed(0)
    counts = torch.tensor([2, 0, 3])
    x = torch.randn(5, 8)
    auto = GroupedExperts(8, 16, 3)
    y = auto(x, counts)
    assert auto.last_path == "grouped_mm" and auto.last_reason is None
    loop = GroupedExperts(8, 16, 3, grouped_mm=False)
    loop.load_state_dict(auto.state_dict())
    _close(loop(x, counts), y)
    assert loop.last_path == "loop" and loop.last_reason == "grouped_mm=False"
    odd = GroupedExperts(6, 10, 3)                       # 24-byte rows: not 16-byte aligned
    odd(torch.randn(5, 6), counts)
    assert odd.last_path == "loop" and "multiple of 16 bytes" in odd.last_reason
    doubled = GroupedExperts(8, 16, 3).double()
    doubled(x.double(), counts)
    assert doubled.last_path == "loop" and "float32, bfloat16 or float16" in doubled.last_reason
    forced = GroupedExperts(6, 10, 3, grouped_mm=True)
    with pytest.raises(ValueError, match="grouped_mm=True but torch._grouped_mm needs rows"):
        forced(torch.randn(5, 6), counts)
    empty = GroupedExperts(8, 16, 3)
    assert empty(torch.randn(0, 8), torch.zeros(3, dtype=torch.int64)).shape == (0, 8)
    assert empty.last_path == "loop" and empty.last_reason.startswith("no rows")
    assert "num_experts=3" in repr(auto)


def test_bad_input_names_the_argument():
    e = GroupedExperts(8, 16, 3)
    with pytest.raises(ValueError, match="counts must be >= 0 and sum to the 5 rows of x"):
        e(torch.randn(5, 8), torch.tensor([1, 1, 1]))
    with pytest.raises(ValueError, match="counts must be 3 integer token counts"):
        e(torch.randn(5, 8), torch.tensor([5.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match=r"x must be \(tokens, 8\)"):
        e(torch.randn(5, 7), torch.tensor([5, 0, 0]))
    with pytest.raises(TypeError, match="grouped_mm must be True, False or None"):
        GroupedExperts(8, 16, 3, grouped_mm="yes")
    with pytest.raises(ValueError, match="num_experts must be an int"):
        GroupedExperts(8, 16, 0)
    with pytest.raises(ValueError, match="w1, w3 must be"):
        swiglu_loop(*_weights(2, 8, 16, 0)[:2], torch.randn(2, 16, 4), torch.randn(1, 8),
                    torch.tensor([1, 0]))


def test_dense_swiglu_and_flops():
    torch.manual_seed(0)
    ffn = SwiGLU(8, 12)
    x = torch.randn(3, 8)
    ref = ffn.w2.weight @ (F.silu(ffn.w1.weight @ x.T) * (ffn.w3.weight @ x.T))
    _close(ffn(x), ref.T)
    assert swiglu_flops(8, 12, 5) == 6 * 8 * 12 * 5
    assert float(ffn.w1.weight.detach().abs().max()) <= 2 * 0.02 + 1e-7   # cut at 2 std


def test_grouped_path_rules_for_every_device():
    ok = dict(dim=8, hidden=16, rows=4)
    assert grouped_mm_reason(torch.float32, "cpu", None, **ok) is None
    assert grouped_mm_reason(torch.bfloat16, "cuda", (9, 0), **ok) is None
    assert grouped_mm_reason(torch.bfloat16, "cuda", (8, 0), **ok) is None
    assert "compute capability 8.0" in grouped_mm_reason(torch.bfloat16, "cuda", (7, 5), **ok)
    assert "on CUDA takes bfloat16" in grouped_mm_reason(torch.float32, "cuda", (9, 0), **ok)
    assert "not known to run on mps" in grouped_mm_reason(torch.float32, "mps", None, **ok)
    assert "no grouped matmul" in grouped_mm_reason(torch.float32, "cpu", None, **ok,
                                                     available=False)
    # bfloat16 rows of 8 elements are 16 bytes; float32 rows of 6 are 24
    assert grouped_mm_reason(torch.bfloat16, "cpu", None, dim=8, hidden=24, rows=1) is None
    assert "multiple of 16 bytes" in grouped_mm_reason(torch.float32, "cpu", None, dim=6,
                                                       hidden=16, rows=1)
    assert "one dtype" in grouped_mm_problem(torch.ones(2, 8), torch.ones(1, 16, 8,
                                                                         dtype=torch.bfloat16))
