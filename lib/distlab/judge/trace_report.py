"""A trace judgement (:mod:`distlab.judge.trace_judgement`) as the readable report
``python -m distlab.judge trace`` prints (see :mod:`distlab.judge.trace_command`).
"""

from __future__ import annotations

import math
import textwrap

from distlab.judge.fsdp_exposure import exposure_lines
from distlab.judge.pipeline_bubble import bubble_lines
from distlab.judge.trace_judgement import TraceJudgement
from distlab.judge.trace_model import box_for_gpu, collective_library, rccl_arch_for_gpu
from distlab.trace.torch_trace import Run
from distlab.vocabulary import ErrorSummary, size_label

__all__ = ["REPORT_WIDTH", "model_lines", "possible_comm_lines", "report_lines", "run_line"]


def _pct(v: float) -> str:
    return "   -" if v is None or math.isnan(v) else f"{v:5.1f}"


def _ms(us: float) -> str:
    return f"{us / 1000:.2f}"


def _gpu_words(run: Run) -> str:
    """The run's GPU, or why there is none to name."""
    if run.gpu:
        return run.gpu
    return ("not stated (kernels present)" if any(rt.has_gpu_events for rt in run.ranks.values())
            else "none (CPU-only trace)")


REPORT_WIDTH = 110
"""An AMD run's notes are wrapped to lines of at most this many characters."""


def _model_words(gpu: str | None) -> str:
    """`` (NCCL model box KEY)`` / `` (RCCL model, ARCH)`` after the GPU, or ``""``."""
    if collective_library(gpu) == "RCCL":
        arch = rccl_arch_for_gpu(gpu)
        return f" (RCCL model, {arch})" if arch else ""
    box = box_for_gpu(gpu)
    return f" (NCCL model box {box})" if box else ""


def run_line(name: str, j: TraceJudgement) -> str:
    """One line per trace folder: how many of the run's ranks it holds, the GPU, the NCCL
    release (RCCL's on an AMD GPU) and the event count, each unknown said as such (never
    ``None``)."""
    run = j.run
    rt = next(iter(run.ranks.values()))
    events = sum(len(r) for r in run.ranks.values())
    ranks = f"{len(run.ranks)} of {run.world_size or '?'} ranks"
    return (f"{name:21} {ranks:15} GPU {_gpu_words(run):28} {collective_library(run.gpu)} "
            f"{rt.nccl_version or 'not stated':10} {events:6d} events")


def report_lines(j: TraceJudgement, *, rank: int | None = None,
                 step: int | None = None, worst: int = 5) -> list[str]:
    """The readable report (see the module docstring)."""
    run = j.run
    ranks = [rank] if rank is not None else list(run.ranks)
    rt0 = run.ranks[ranks[0]]
    lines = [f"# {len(run.ranks)} rank trace(s)"
             + (f" of {run.world_size}" if run.world_size else "")
             + f"; GPU {_gpu_words(run)}"
             + _model_words(run.gpu)
             + f"; {collective_library(run.gpu)} {rt0.nccl_version or 'not stated'}; "
             f"backend {rt0.backend or 'not stated'}"]
    lines += [f"# missing: {m}" for m in j.missing]
    scope = f"ProfilerStep#{step}" if step is not None else \
        "whole trace (last of 2+ steps left out, as HTA)"
    lines.append(f"## breakdown, {scope}: % of span (non_comp: HTA's non_compute)")
    lines.append("rank basis span(ms) idle% comp% comm%  mem% other% non_comp% overlap% | "
                 "  host loader  sync  other (idle, ms)")
    for r in ranks:
        b = j.breakdown(r, step)
        if b is None:
            steps = j.analyses[r].steps
            lines.append(f"{r:4d} no events" + (f" (steps: {steps})" if step is not None else ""))
            continue
        c = b.idle_causes_us
        lines.append(f"{r:4d} {b.basis:5s} {_ms(b.span_us):>8s} {_pct(b.pct('idle'))} "
                     f"{_pct(b.pct('compute'))} {_pct(b.pct('communication'))} "
                     f"{_pct(b.pct('memory'))}  {_pct(b.pct('other'))}     "
                     f"{_pct(b.pct('non_compute'))}    {_pct(b.overlap_pct)} | "
                     f"{_ms(c['host']):>6s} {_ms(c['data_loader']):>6s} "
                     f"{_ms(c['synchronize']):>5s} {_ms(c['other']):>6s}")
    for r in ranks:
        b = j.breakdown(r, step)
        if b is not None and b.hta_compute_us is not None:
            lines.append(f"  rank {r}: HTA's rule (only nccl*Kernel is communication) gives "
                         f"compute {100 * b.hta_compute_us / b.span_us:.1f}%: distlab counts "
                         "the other libraries' comm kernels as communication")
    lines += possible_comm_lines(j, rank)
    col = j.collectives
    multi = col.multi_rank()
    whole = " (every step: --step selects the breakdown above)" if step is not None else ""
    lines.append(f"## collectives{whole}: {len(col.calls)} calls, {len(multi)} seen on 2+ "
                 "ranks")
    if multi:
        total = col.total_wait_us
        last = col.last_counts()
        caused = col.caused_us()
        stragglers = col.stragglers()
        lines.append(f"waiting for the last rank: {_ms(total)} ms in all")
        lines += [f"  rank {r} last in {last.get(r, 0)}/{len(multi)} calls, caused {_ms(v)} ms"
                  for r, v in sorted(caused.items(), key=lambda kv: -kv[1])]
        lines.append("stragglers: " + (", ".join(f"rank {r}" for r in stragglers)
                                       if stragglers else "none (waiting spread over ranks)"))
    lines += model_lines(j, rank=rank, worst=worst, whole=whole)
    lines += bubble_lines(j.pipeline, rank) + exposure_lines(j.fsdp, rank)
    return lines


POSSIBLE_COMM_NAME_CHARS = 100
"""A kernel name in the possible-communication lines is cut to this many characters."""


def possible_comm_lines(j: TraceJudgement, rank: int | None = None) -> list[str]:
    """GPU kernels whose names suggest communication that no pattern claims (of ``rank``, None:
    every rank's): a heading and one line per kernel name, ``NAME (N kernels, T ms)``; none
    when there are none."""
    found = j.possible_comm(rank)
    if not found:
        return []

    def cut(name: str) -> str:
        return name if len(name) <= POSSIBLE_COMM_NAME_CHARS else \
            name[:POSSIBLE_COMM_NAME_CHARS - 3] + "..."
    return ([f"## {len(found)} kernel name(s) suggest communication, but no pattern claims "
             "them: not in comm% or the collectives (--comm-pattern REGEX counts them)"]
            + [f"possible communication, not counted: {cut(u.name)} ({u.count} kernels, "
               f"{_ms(u.total_us)} ms)" for u in found])


def model_lines(j: TraceJudgement, *, rank: int | None = None, worst: int = 5,
                whole: str = "") -> list[str]:
    """The model beside the kernels: the ``worst`` priced kernels furthest from it (measured
    and model microseconds, NCCL's or RCCL's algorithm/protocol, where the size came from),
    ``|error|`` per collective (:class:`~distlab.vocabulary.ErrorSummary`), where the sizes came
    from when any is not the rank's own, the notes (an AMD run's wrapped at
    :data:`REPORT_WIDTH`), and one line per reason a kernel is not priced."""
    mine = [p for p in j.prices if rank is None or p.rank == rank]
    priced = [p for p in mine if p.model_us is not None]
    unpriced = [p for p in mine if p.model_us is None]
    lines = [f"## model beside the kernels{whole}: {len(priced)} priced, "
             f"{len(unpriced)} not" + (f"; the {min(worst, len(priced))} furthest from "
                                       "the model:" if priced else "")]
    for p in sorted(priced, key=lambda p: -abs(p.error_percent or 0))[:worst]:
        known = p.wait_us is not None and p.transfer_us is not None
        split = (f"= wait {p.wait_us:.0f} + transfer {p.transfer_us:.0f}" if known
                 else "(wait unknown)")
        lines.append(f"rank {p.rank} {p.collective} #{p.seq}, {size_label(p.nbytes or 0)} "
                     f"across {p.group_size} ranks (size: {p.size_source}), "
                     f"{p.algorithm}/{p.protocol}:")
        lines.append(f"    kernel {p.kernel_us:.0f} us {split}; model {p.model_us:.1f} us; "
                     f"error {p.error_percent or 0:+.0f}% of the "
                     + ("transfer" if known else "whole kernel"))
    if len(priced) > worst:
        lines.append(f"  ... and {len(priced) - worst} more (--json holds every kernel)")
    kinds = list(dict.fromkeys(p.collective or "?" for p in priced))
    for kind in kinds:
        es = ErrorSummary.of([p.error_percent for p in priced if (p.collective or "?") == kind],
                             label=kind)
        lines.append(f"  {kind}: {es.n} kernel(s), |error| median {es.median:.0f}%, "
                     f"p90 {es.p90:.0f}%, max {es.max:.0f}%")
    gpu_calls = [p for p in mine if p.library != "gloo"]
    sources: dict[str, int] = {}
    for p in gpu_calls:
        sources[p.size_source] = sources.get(p.size_source, 0) + 1
    if any(not s.startswith("own") for s in sources):
        lines.append("message sizes from: " + ", ".join(f"{s} {n}" for s, n in sources.items()))
    notes = [f"  note: {n}" for n in dict.fromkeys(p.note for p in priced if p.note)]
    if collective_library(j.run.gpu) == "RCCL":
        notes = [w for n in notes for w in textwrap.wrap(n, REPORT_WIDTH - 1,
                                                          subsequent_indent=" " * 8)]
    lines += notes
    reasons: dict[str, int] = {}
    for p in unpriced:
        reasons[p.why or "?"] = reasons.get(p.why or "?", 0) + 1
    lines += [f"not priced ({n}): {w}" for w, n in reasons.items()]
    return lines
