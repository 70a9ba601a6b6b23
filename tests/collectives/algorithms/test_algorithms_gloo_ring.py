"""gloo_ring: gloo's own allreduce as a schedule (segmentation from gloo/allreduce.cc), correct
when simulated, registered beside (not among) distlab's algorithms."""

from __future__ import annotations

import numpy as np
import pytest

from distlab.collectives import ALGORITHMS, build, options_of, simulate
from distlab.collectives.algorithms.allreduce.gloo_ring import (
    GLOO_IN_FLIGHT,
    GLOO_MAX_SEGMENT_BYTES,
    gloo_ring,
    gloo_segments,
)
from distlab.collectives.algorithms.registry import BACKEND_ALGORITHMS

COUNTS = [0, 1, 2, 3, 5, 7, 17, 31, 33, 101, 257]


@pytest.mark.parametrize("p", range(1, 17))
def test_simulated_sum_is_exact_for_every_world_size_and_odd_counts(p: int) -> None:
    rng = np.random.default_rng(p)
    for count in COUNTS:
        # a 12-byte segment cap forces many segments per rank (gloo's tests shrink it likewise)
        for cap in (12, 100, GLOO_MAX_SEGMENT_BYTES):
            s = gloo_ring(p, count, itemsize=4, max_segment_bytes=cap)
            xs = [rng.integers(-50, 50, count) for _ in range(p)]
            out = simulate(s, xs, op="sum")
            want = np.sum(xs, axis=0) if p > 1 else xs[0]
            assert all(np.array_equal(o, want) for o in out), (p, count, cap)


@pytest.mark.parametrize("op", ["max", "prod"])
def test_other_ops(op: str) -> None:
    rng = np.random.default_rng(0)
    xs = [rng.integers(1, 4, 37).astype(np.float64) for _ in range(5)]
    out = simulate(gloo_ring(5, 37, max_segment_bytes=16), xs, op=op)
    want = np.max(xs, axis=0) if op == "max" else np.prod(xs, axis=0)
    assert all(np.array_equal(o, want) for o in out)


@pytest.mark.parametrize("p, nbytes, segments, seg_bytes, steps", [
    (2, 64 * 1024, 4, 16 * 1024, 4),            # min 2p segments
    (2, 256 * 1024, 4, 64 * 1024, 4),
    (4, 64 * 1024, 8, 8 * 1024, 12),
    (2, 64 * 2**20, 64, 2**20, 64),              # 1 MiB cap: 64 segments, 2 (p-1) 32 steps
    (4, 64 * 2**20, 64, 2**20, 96),
    (3, 10 * 2**20, 12, 10 * 2**20 // 12, 16),  # roundUp(max(10, 6), 3) = 12
])
def test_segmentation_follows_gloo(p: int, nbytes: int, segments: int, seg_bytes: int,
                                   steps: int) -> None:
    count = nbytes // 4
    got_segments, seg = gloo_segments(p, count, itemsize=4)
    assert got_segments == segments
    assert seg == -(-count // segments)
    assert abs(seg * 4 - seg_bytes) < 4
    s = gloo_ring(p, count)
    assert len(s.steps) == steps
    assert max(t.count for st in s.steps for t in st.transfers) * 4 <= GLOO_MAX_SEGMENT_BYTES


def test_itemsize_changes_the_segmentation_not_the_result() -> None:
    # 786432 elements: 6 MiB of float64 -> 6 segments of 1 MiB; 3 MiB of float32 -> 2p = 4
    assert gloo_segments(2, 786432, itemsize=8) == (6, 131072)
    assert gloo_segments(2, 786432, itemsize=4) == (4, 196608)
    assert gloo_segments(2, 2**20 // 4, itemsize=4, max_segment_bytes=3) == (2**20 // 4, 1)


def test_ring_direction_phases_and_pipeline_depth() -> None:
    p = 4
    s = gloo_ring(p, 4096, max_segment_bytes=1024)
    assert s.options["in_flight"] == GLOO_IN_FLIGHT == 2
    assert sum(s.options["phases"]) == len(s.steps)
    rs, _ = s.options["phases"]
    assert all(t.kind == "reduce" for st in s.steps[:rs] for t in st.transfers)
    assert all(t.kind == "copy" for st in s.steps[rs:] for t in st.transfers)
    for st in s.steps:  # rank r sends to r - 1 (gloo: sendRank = rank - 1)
        assert sorted((t.src, t.dst) for t in st.transfers) == [(r, (r - 1) % p) for r in range(p)]


def test_one_rank_and_empty_buffer_have_no_steps() -> None:
    assert gloo_ring(1, 100).steps == ()
    assert gloo_ring(4, 0).steps == ()


def test_registered_as_a_backend_schedule_not_a_distlab_algorithm() -> None:
    assert "gloo_ring" in BACKEND_ALGORITHMS and "gloo_ring" not in ALGORITHMS
    assert build("gloo_ring", 4, 100, max_segment_bytes=8) == gloo_ring(4, 100,
                                                                        max_segment_bytes=8)
    assert options_of("gloo_ring") == ["itemsize", "max_segment_bytes"]
    with pytest.raises(TypeError, match="takes options"):
        build("gloo_ring", 4, 100, segment_size=8)


@pytest.mark.parametrize("kwargs, match", [
    ({"itemsize": 0}, "itemsize"), ({"max_segment_bytes": 0}, "max_segment_bytes"),
])
def test_bad_options(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        gloo_ring(2, 10, **kwargs)
