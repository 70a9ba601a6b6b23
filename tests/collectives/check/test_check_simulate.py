"""simulate(): every algorithm gives every rank the reference reduction (property tests)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.collectives import ALGORITHMS, build, simulate

ALL = sorted(ALGORITHMS)
REFERENCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}


def _options(name: str, p: int, seed: int) -> dict:
    pieces = {"pieces": 1 + (seed >> 4) % 4} if name in ("ring", "segmented_ring",
                                                          "hierarchical") else {}
    if name == "segmented_ring":
        return {"segment_size": 1 + seed % 5, **pieces}
    if name == "hierarchical":
        divisors = [d for d in range(1, p + 1) if p % d == 0]
        return {"group_size": divisors[seed % len(divisors)], **pieces}
    return pieces


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(ALL), p=st.integers(1, 64), n=st.integers(0, 200),
       op=st.sampled_from(["sum", "prod", "max", "min"]),
       dtype=st.sampled_from(["int32", "int64"]), seed=st.integers(0, 2 ** 16))
def test_integers_match_the_reference_exactly(name: str, p: int, n: int, op: str, dtype: str,
                                              seed: int) -> None:
    rng = np.random.default_rng(seed)
    inputs = [rng.integers(-3, 4, n).astype(dtype) for _ in range(p)]
    outs = simulate(build(name, p, n, **_options(name, p, seed)), inputs, op)
    with np.errstate(over="ignore"):  # products wrap identically in any order
        ref = REFERENCE[op](np.stack(inputs), axis=0).astype(dtype)
    for r, out in enumerate(outs):
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(out, ref, err_msg=f"{name} p={p} n={n} rank {r}")


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(ALL), p=st.integers(1, 64), n=st.integers(0, 200),
       op=st.sampled_from(["sum", "avg", "max", "min", "prod"]),
       dtype=st.sampled_from(["float32", "float64", "float16"]), seed=st.integers(0, 2 ** 16))
def test_floats_match_the_reference(name: str, p: int, n: int, op: str, dtype: str,
                                    seed: int) -> None:
    rng = np.random.default_rng(seed)
    if op == "prod":
        inputs = [(1 + rng.uniform(-0.01, 0.01, n)).astype(dtype) for _ in range(p)]
    else:
        inputs = [rng.standard_normal(n).astype(dtype) for _ in range(p)]
    outs = simulate(build(name, p, n, **_options(name, p, seed)), inputs, op)
    stacked = np.stack(inputs).astype(np.float64)
    ref = stacked.mean(0) if op == "avg" else REFERENCE[op](stacked, axis=0)
    tol = {"float16": 2e-2, "float32": 1e-5, "float64": 1e-12}[dtype] * (p if op != "avg" else 1)
    for out in outs:
        assert out.dtype == np.dtype(dtype)
        if op in ("max", "min"):
            np.testing.assert_array_equal(out, ref.astype(dtype))
        else:
            np.testing.assert_allclose(out.astype(np.float64), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ALL)
def test_bfloat16_tensors(name: str) -> None:
    p, n = 5, 33
    inputs = [torch.full((n,), float(r % 3), dtype=torch.bfloat16) for r in range(p)]
    outs = simulate(build(name, p, n), inputs, "sum")
    assert all(isinstance(o, torch.Tensor) and o.dtype == torch.bfloat16 for o in outs)
    assert all(torch.equal(o, torch.full((n,), 4.0, dtype=torch.bfloat16)) for o in outs)


def test_shapes_are_kept_and_inputs_untouched() -> None:
    inputs = [np.full((2, 3), r, dtype=np.int64) for r in range(3)]
    outs = simulate(build("ring", 3, 6), inputs, "sum")
    assert outs[0].shape == (2, 3) and (outs[2] == 3).all()
    assert (inputs[1] == 1).all()


def test_bad_inputs() -> None:
    s = build("ring", 3, 4)
    with pytest.raises(ValueError,
                       match="inputs has 2 arrays but the schedule is for world_size=3"):
        simulate(s, [np.zeros(4)] * 2)
    with pytest.raises(ValueError, match="count=4"):
        simulate(s, [np.zeros(5)] * 3)
    with pytest.raises(ValueError, match=r"inputs\[1\] has shape"):
        simulate(s, [np.zeros(4), np.zeros(4, dtype=np.int32), np.zeros(4)])
    with pytest.raises(TypeError, match="mixes torch tensors and NumPy"):
        simulate(s, [np.zeros(4), torch.zeros(4), np.zeros(4)])
    with pytest.raises(ValueError, match="op='avg' needs a floating dtype"):
        simulate(s, [np.zeros(4, dtype=np.int32)] * 3, "avg")
    with pytest.raises(ValueError, match="op must be one of 'sum', 'prod', 'max', 'min', 'avg'"):
        simulate(s, [np.zeros(4)] * 3, "mean")
    with pytest.raises(TypeError, match="schedule must be a Schedule"):
        simulate("ring", [np.zeros(4)] * 3)  # type: ignore[arg-type]
