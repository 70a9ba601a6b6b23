"""Read and write a :class:`~distlab.timeline.Timeline` as trace files.

- :mod:`.chrome`: Chrome Trace Event JSON (``{"traceEvents": [...]}``, microseconds), which opens
  in ui.perfetto.dev; one pid per process of a lane, tids never holding overlapping slices.
- :mod:`.kineto_file`: the one reader of torch.profiler (Kineto) trace files (``.json`` or
  ``.json.gz``, streamed; one error type, :class:`TraceReadError`; the clock convention).
- :mod:`.kineto`: a torch.profiler (Kineto) trace, shifted onto distlab's clock.
- :mod:`.check`: a written trace's slices checked for overlap on one (pid, tid).
- A user's own run: :mod:`.record` (``record(out_dir)``: torch.profiler set up to record each
  rank's trace), :mod:`.torch_trace` (``read_run``: per-rank traces into columns),
  :mod:`.breakdown` (HTA's temporal breakdown, overlap and idle time, per rank and step),
  :mod:`.collectives` (calls matched across ranks, stragglers), :mod:`.patterns` (what counts as
  communication, a list a user extends), :mod:`.intervals`; judged by ``python -m distlab.judge
  trace`` (:mod:`distlab.judge.trace_command`), drawn by :mod:`distlab.viz.trace`.

The timeline never imports this package (its readers and writers import it).

    from distlab.trace import write_chrome_trace, read_chrome_trace, from_torch_profiler
    write_chrome_trace(tl, "trace.json")
"""

from __future__ import annotations

from distlab.trace.check import check_trace, overlapping_slices
from distlab.trace.chrome import (
                     check_distributed_info,
                     read_chrome_trace,
                     trace_events,
                     write_chrome_trace,
                     write_rank_traces,
)
from distlab.trace.kineto import clock_offset_us, from_torch_profiler, read_kineto_trace
from distlab.trace.record import record
from distlab.trace.torch_trace import TraceReadError, read_run

__all__ = ["TraceReadError", "check_distributed_info", "check_trace", "clock_offset_us",
           "from_torch_profiler", "overlapping_slices", "read_chrome_trace", "read_kineto_trace",
           "read_run", "record", "trace_events", "write_chrome_trace", "write_rank_traces"]
