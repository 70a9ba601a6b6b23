"""Bucket-ready times and the last measured step: the one place notebook 06 and the explorer take
them from."""

from __future__ import annotations

from distlab.ddp.step_model import bucket_ready_s, buckets_for_sizes
from distlab.timeline import Span, Timeline
from distlab.viz.ddp import last_step


def test_a_bucket_is_ready_when_its_last_parameter_is() -> None:
    mib = 1 << 20
    sizes = [mib // 2, mib // 2, mib, 2 * mib]
    ready = [0.1, 0.3, 0.2, 0.9]   # seconds; not monotone on purpose
    buckets = buckets_for_sizes(sizes, 1.0)
    got = bucket_ready_s(sizes, ready, 1.0)
    assert got == [max(ready[i] for i in b) for b in buckets]
    assert len(got) == len(buckets) > 1
    assert bucket_ready_s(sizes, ready, 100.0) == [0.9]   # one bucket: the latest parameter


def test_last_step_starts_at_the_last_backward_opening() -> None:
    spans = [Span("bw layer 3", "backward", "rank0/backward", t0, 5.0) for t0 in (0.0, 100.0)]
    spans += [Span("bw layer 2", "backward", "rank0/backward", t0 + 5, 5.0) for t0 in (0.0, 100.0)]
    spans += [Span("allreduce bucket 0", "allreduce", "rank0/allreduce", t0 + 8, 9.0)
              for t0 in (0.0, 100.0)]
    tl = last_step(Timeline(spans))
    assert sorted(s.start_us for s in tl.spans) == [100.0, 105.0, 108.0]
    assert len(last_step(Timeline([s for s in spans if s.category != "backward"]))) == 0
