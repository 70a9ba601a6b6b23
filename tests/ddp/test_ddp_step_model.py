"""The DDP step model: simulation rules, bucket sweep, DataParallel vs DDP traffic, the ready
order of a sequential MLP."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.collectives import get_preset
from distlab.ddp.buckets import backward_ready_order
from distlab.ddp.step_model import (
    allreduce_seconds,
    bucket_seconds,
    buckets_for_sizes,
    compressed_allreduce_seconds,
    compression_pass_bytes,
    dataparallel_vs_ddp,
    mlp_ready_order,
    predict,
    simulate_step,
    sweep_bucket_cap,
)

LINK = get_preset("pcie4_x16")


def test_simulate_hand_case():
    p = simulate_step([1.0, 2.0, 3.0], [1.5, 0.5, 1.0], 3.0)
    assert p.comm_spans == ((1.0, 2.5), (2.5, 3.0), (3.0, 4.0))
    assert p.exposed_s == 1.0 and p.step_s == 4.0 and p.overlap_fraction == pytest.approx(2 / 3)
    q = simulate_step([1.0, 2.0, 3.0], [1.5, 0.5, 1.0], 3.0, overlap=False)
    assert q.exposed_s == 3.0 and q.overlap_fraction == 0.0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0, 5)), min_size=1, max_size=8),
       st.floats(0, 10))
def test_overlap_never_slower_and_bounded(pairs, extra):
    ready = sorted(r for r, _ in pairs)
    comm = [c for _, c in pairs]
    bwd = max(ready) + extra
    a = simulate_step(ready, comm, bwd)
    b = simulate_step(ready, comm, bwd, overlap=False)
    assert a.step_s <= b.step_s + 1e-9
    assert bwd - 1e-9 <= a.step_s <= bwd + sum(comm) + 1e-9
    assert 0.0 <= a.overlap_fraction <= 1.0 + 1e-12
    assert all(s >= r - 1e-12 for (s, _), r in zip(a.comm_spans, ready, strict=True))


def test_buckets_for_sizes_first_bucket_small():
    sizes = [263168] * 8  # Linear(256) layers, one entry per layer
    assert [len(b) for b in buckets_for_sizes(sizes, None)] == [4, 4]
    assert [len(b) for b in buckets_for_sizes(sizes, 0.25)] == [1] * 8


def test_sweep_has_interior_optimum_with_latency():
    sizes = [4 << 20] * 16
    ready = [0.01 * (i + 1) for i in range(16)]
    sweep = sweep_bucket_cap(sizes, ready, 0.16, LINK, 4, [1, 4, 16, 64, 256])
    steps = [p.step_s for _, p in sweep]
    assert steps[-1] > min(steps)  # one huge bucket cannot overlap at all


def test_allreduce_grows_with_bytes_and_world():
    assert allreduce_seconds(1 << 20, 1, LINK) == 0.0
    assert allreduce_seconds(1 << 20, 4, LINK) < allreduce_seconds(1 << 24, 4, LINK)


def test_dataparallel_moves_more_than_ddp():
    dp, ddp = dataparallel_vs_ddp(100 << 20, 8 << 20, 1 << 20, 4, LINK)
    assert dp.total_bytes > ddp.total_bytes
    assert ddp.total_bytes == int(2 * 3 / 4 * (100 << 20))
    assert [p[0] for p in dp.phases] == ["broadcast params", "scatter inputs", "gather outputs",
                                         "reduce grads"]
    assert predict([1 << 20], [0.0], 0.0, LINK, 2, None).step_s > 0


def test_compression_pass_bytes_hand_case():
    # 1000 float32 -> float16: cast down 4000 + 2000, divide 2000 + 2000, cast back 2000 + 4000
    assert compression_pass_bytes(4000) == 16000
    assert compression_pass_bytes(4000, wire_itemsize=4) == 24000  # no compression: 3 passes
    with pytest.raises(ValueError, match="nbytes"):
        compression_pass_bytes(-1)


def test_compressed_bucket_is_half_the_wire_plus_the_casts():
    nbytes, n = 64 << 20, 4
    full = allreduce_seconds(nbytes, n, LINK)
    half = allreduce_seconds(nbytes // 2, n, LINK, itemsize=2)
    casts = LINK.gamma * compression_pass_bytes(nbytes)
    assert compressed_allreduce_seconds(nbytes, n, LINK) == pytest.approx(half + casts, rel=1e-12)
    assert bucket_seconds(nbytes, n, LINK, compression="bf16") == \
        compressed_allreduce_seconds(nbytes, n, LINK)
    assert bucket_seconds(nbytes, n, LINK) == full
    assert half < full  # the wire time shrinks ...
    # ... casts cost
    assert compressed_allreduce_seconds(nbytes, n, LINK, pass_s_per_byte=1.0) > full
    assert compressed_allreduce_seconds(nbytes, 1, LINK) == 0.0
    with pytest.raises(ValueError, match="compression"):
        bucket_seconds(nbytes, n, LINK, compression="int8")


def test_predict_with_compression_is_pure_and_faster_on_a_slow_link():
    sizes = [4 << 20] * 8
    ready = [0.001 * (i + 1) for i in range(8)]
    slow = get_preset("ethernet_100g")
    a = predict(sizes, ready, 0.008, slow, 4, 8.0)
    b = predict(sizes, ready, 0.008, slow, 4, 8.0, compression="fp16")
    assert b == predict(sizes, ready, 0.008, slow, 4, 8.0, compression="fp16")  # same in, same out
    assert b.comm_s < a.comm_s and b.step_s <= a.step_s


def _sequential_mlp(layers: int, width: int) -> torch.nn.Sequential:
    mods: list[torch.nn.Module] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)


@pytest.mark.parametrize("layers, width", [(1, 4), (3, 8), (5, 3)])
def test_mlp_ready_order_is_the_order_a_real_backward_gives(layers: int, width: int) -> None:
    model = _sequential_mlp(layers, width)
    named = dict(model.named_parameters())
    names = list(named)
    real = [names[i] for i in backward_ready_order(model, torch.randn(2, width))]
    order = mlp_ready_order(layers, width, 1e-9)
    assert list(order.names) == real
    assert list(order.sizes) == [named[n].numel() * named[n].element_size() for n in real]


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6), st.integers(1, 64), st.floats(0.0, 1e-6), st.sampled_from([2, 4, 8]))
def test_mlp_ready_times_add_up_the_bytes_at_the_rate(layers, width, rate, itemsize):
    order = mlp_ready_order(layers, width, rate, itemsize=itemsize)
    total = layers * (width * width + width) * itemsize
    assert sum(order.sizes) == total and len(order.ready_s) == len(order.sizes) == 2 * layers
    assert all(b >= a for a, b in zip(order.ready_s, order.ready_s[1:], strict=False))
    assert order.ready_s[0] == pytest.approx(order.sizes[0] * rate, rel=1e-12, abs=1e-300)
    assert order.backward_s == pytest.approx(total * rate, rel=1e-9, abs=1e-300)
    assert order.ready_s[-1] == pytest.approx(order.backward_s, rel=1e-12, abs=1e-300)


def test_mlp_ready_order_feeds_predict_and_checks_its_arguments():
    order = mlp_ready_order(3, 256, 1e-9)
    p = predict(order.sizes, order.ready_s, order.backward_s, LINK, 2, 0.1)
    assert p.backward_s == pytest.approx(order.backward_s, rel=1e-12)
    assert len(p.comm_spans) == len(buckets_for_sizes(list(order.sizes), 0.1))
    with pytest.raises(ValueError, match="layers"):
        mlp_ready_order(0, 8, 1e-9)
    with pytest.raises(ValueError, match="backward_s_per_byte"):
        mlp_ready_order(2, 8, -1.0)


def test_join_costs_two_tiny_allreduces_per_step_and_a_shadow_iteration_adds_the_buckets():
    from distlab.ddp.step_model import (
        JOIN_ALLREDUCES_PER_STEP,
        allreduce_seconds,
        join_step_seconds,
        shadow_step_seconds,
    )

    link = get_preset("ethernet_100g")
    tiny = allreduce_seconds(4, 4, link)
    assert JOIN_ALLREDUCES_PER_STEP == 2
    assert join_step_seconds(4, link) == pytest.approx(2 * tiny)
    buckets = [1 << 20, 25 << 20]
    assert shadow_step_seconds(buckets, 4, link) == pytest.approx(
        2 * tiny + sum(allreduce_seconds(b, 4, link) for b in buckets))
    assert join_step_seconds(1, link) == 0.0  # one rank: nothing to join
    assert shadow_step_seconds([], 4, link) == join_step_seconds(4, link)
