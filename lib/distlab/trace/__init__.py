"""Read and write a :class:`~distlab.timeline.Timeline` as trace files.

- :mod:`.chrome`: Chrome Trace Event JSON (``{"traceEvents": [...]}``, microseconds), which opens
  in ui.perfetto.dev; one pid per process of a lane, tids never holding overlapping slices.
- :mod:`.kineto`: a torch.profiler (Kineto) trace, shifted onto distlab's clock.
- :mod:`.check`: a written trace's slices checked for overlap on one (pid, tid).

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

__all__ = ["check_distributed_info", "check_trace", "clock_offset_us", "from_torch_profiler",
           "overlapping_slices", "read_chrome_trace", "read_kineto_trace", "trace_events",
           "write_chrome_trace", "write_rank_traces"]
