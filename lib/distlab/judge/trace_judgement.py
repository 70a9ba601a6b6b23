"""A run of torch.profiler traces read and judged (:func:`judge_trace`): each rank's breakdown,
the collective calls matched across ranks and priced by NCCL's model, the communication no
pattern claims, a pipeline's bubble and FSDP's exposed all-gathers; and the judgement as JSON
(:func:`judgement_json`) and as distlab's timeline (:func:`judgement_timeline`).

:mod:`distlab.judge.trace_report` writes it as text, :mod:`distlab.judge.trace_command` is the
command (``python -m distlab.judge trace``), :mod:`distlab.viz.trace` draws it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from distlab.judge.fsdp_exposure import FsdpExposure, run_fsdp_exposure
from distlab.judge.pipeline_bubble import PipelineBubble, run_pipeline_bubble
from distlab.judge.trace_model import KernelPrice, price_collectives
from distlab.timeline import Timeline
from distlab.trace.breakdown import Breakdown, RankAnalysis, analyze_run, step_windows
from distlab.trace.collectives import (
    Collectives,
    UnclaimedKernels,
    clock_shift_us,
    match_collectives,
    unclaimed_comm_kernels,
)
from distlab.trace.patterns import CommPattern
from distlab.trace.torch_trace import Run, read_run

__all__ = ["TraceJudgement", "judge_trace", "judgement_json", "judgement_timeline"]


@dataclass
class TraceJudgement:
    """A run's traces read and judged: the breakdowns, the matched calls, the model's prices."""

    run: Run
    analyses: dict[int, RankAnalysis]
    collectives: Collectives
    prices: list[KernelPrice]
    unclaimed: dict[int, list[UnclaimedKernels]] = field(default_factory=dict)
    """Per rank: GPU kernels whose names suggest communication that no pattern claims."""
    pipeline: PipelineBubble | None = None
    """The pipeline bubble per rank beside the plan (traces with ``PP:<action>`` spans)."""
    fsdp: dict[int, FsdpExposure] = field(default_factory=dict)
    """Per rank: FSDP's exposed all-gathers beside the prefetch model (``FSDP::`` spans)."""

    def possible_comm(self, rank: int | None = None) -> list[UnclaimedKernels]:
        """:attr:`unclaimed` of ``rank`` (None: every rank's, summed per kernel name), longest
        total first."""
        by: dict[str, UnclaimedKernels] = {}
        for r, kernels in self.unclaimed.items():
            if rank is not None and r != rank:
                continue
            for u in kernels:
                got = by.setdefault(u.name, UnclaimedKernels(u.name, 0, 0.0, []))
                got.count += u.count
                got.total_us += u.total_us
                got.ranks.append(r)
        return sorted(by.values(), key=lambda u: (-u.total_us, u.name))

    def breakdown(self, rank: int, step: int | None = None) -> Breakdown | None:
        a = self.analyses[rank]
        return a.whole if step is None else a.per_step.get(step)

    @property
    def missing(self) -> list[str]:
        out: list[str] = list(self.run.notes)
        for a in self.analyses.values():
            for m in a.missing:
                line = f"{m}"
                if line not in out:
                    out.append(line)
        out += [n for n in self.collectives.notes if n not in out]
        if not self.collectives.calls:
            out.append("no collective calls (no communication kernel, no gloo span): "
                       "nothing to match or price"
                       + ("; see the possible communication below (--comm-pattern REGEX claims "
                          "it)" if self.possible_comm() else ""))
        return out


def judge_trace(paths: Any, *, comm: list[CommPattern] | None = None) -> TraceJudgement:
    """Read the traces at ``paths`` and judge them (raises TraceReadError for bad input).
    ``comm``: the communication patterns (default
    :data:`~distlab.trace.patterns.COMM_PATTERNS`; :func:`~distlab.trace.patterns.user_patterns`
    adds a user's)."""
    run = read_run(paths)
    col = match_collectives(run, comm)
    prices = price_collectives(col, {r: rt.gpu for r, rt in run.ranks.items()},
                               {r: rt.nccl_version for r, rt in run.ranks.items()})
    unclaimed = {r: unclaimed_comm_kernels(rt, comm) for r, rt in run.ranks.items()}
    return TraceJudgement(run, analyze_run(run, comm=comm), col, prices,
                          {r: u for r, u in unclaimed.items() if u},
                          run_pipeline_bubble(run), run_fsdp_exposure(run))


def _num(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


def judgement_json(j: TraceJudgement, rank: int | None = None) -> dict[str, Any]:
    """Every number of the judgement as JSON-ready data (NaN as null). ``rank``: only that
    rank's files, breakdowns, calls and prices (``"rank"`` says which); the stragglers and the
    waits they caused stay the run's, which every rank's trace decides."""
    def bd(b: Breakdown | None) -> Any:
        return None if b is None else {k: _num(v) for k, v in b.as_dict().items()}

    def mine(r: int) -> bool:
        return rank is None or r == rank
    col = j.collectives
    return {
        "rank": rank,
        "files": {r: rt.path for r, rt in j.run.ranks.items() if mine(r)},
        "gpu": j.run.gpu, "world_size": j.run.world_size, "missing": j.missing,
        "ranks": {r: {"steps": a.steps, "whole": bd(a.whole),
                      "per_step": {n: bd(b) for n, b in a.per_step.items()}}
                  for r, a in j.analyses.items() if mine(r)},
        "possible_communication": [{"name": u.name, "count": u.count, "total_us": u.total_us,
                                    "ranks": u.ranks} for u in j.possible_comm(rank)],
        "collectives": [{"group": c.group, "seq": c.seq, "last_rank": c.last_rank,
                         "caused_us": c.caused_us,
                         "ranks": {r: {"start_us": x.start_us, "end_us": x.end_us,
                                       "wait_us": c.wait_us(r), "collective": x.collective,
                                       "nbytes": x.nbytes, "size_source": x.size_source,
                                       "step": x.step}
                                   for r, x in c.calls.items() if mine(r)}}
                        for c in col.calls if any(mine(r) for r in c.calls)],
        "stragglers": col.stragglers(), "caused_us": col.caused_us(),
        "total_wait_us": col.total_wait_us,
        "model": [p.as_dict() for p in j.prices if mine(p.rank)],
        "pipeline": j.pipeline.as_dict() if j.pipeline is not None else None,
        "fsdp": {r: f.as_dict() for r, f in j.fsdp.items() if mine(r)}}


def judgement_timeline(j: TraceJudgement, rank: int | None = None) -> Timeline:
    """distlab's timeline of the analysis: steps, each call's wait and transfer, per rank (only
    ``rank``'s lanes when given)."""
    full = _timeline(j)
    if rank is None:
        return full
    return full.filter(lanes=[lane for lane in full.lanes
                              if lane.split("/")[0] == f"rank{rank}"])


def _timeline(j: TraceJudgement) -> Timeline:
    tl = Timeline(notes=["distlab.judge trace: collective calls split into the wait for the "
                         "last rank and the transfer after it"])
    shift = clock_shift_us(j.run)
    steps = {r: step_windows(rt) for r, rt in j.run.ranks.items()}
    starts = [c.start_us for call in j.collectives.calls for c in call.calls.values()]
    starts += [s + shift[r] for r, w in steps.items() for s, _ in w.values()]
    t0 = min(starts, default=0.0)
    for r, w in steps.items():
        for n, (s, e) in w.items():
            tl.record(f"ProfilerStep#{n}", "step", f"rank{r}/steps", s + shift[r] - t0,
                      float(e - s), {"step": n})
    for call in j.collectives.calls:
        last = call.last_rank
        for r, c in call.calls.items():
            wait = min(call.wait_us(r), c.end_us - c.start_us)   # a call ended before the last came
            if wait > 0:
                tl.record(f"wait for rank {last}", "straggler_wait", f"rank{r}/comm {call.group}",
                          c.start_us - t0, wait, {"collective": c.collective, "seq": call.seq,
                                                  "last_rank": last})
            tl.record(f"{c.collective} transfer", "transfer", f"rank{r}/comm {call.group}",
                      c.start_us + wait - t0, call.transfer_us(r),
                      {"collective": c.collective, "seq": call.seq, "nbytes": c.nbytes})
    return tl
