"""``python -m distlab.judge trace PATH...``: a user's own torch.profiler traces of every rank, read
and judged.

    python -m distlab.judge trace results/traces/gloo_ddp_3ranks
    python -m distlab.judge trace traces/run1 --rank 0 --step 3 --json judged.json
    python -m distlab.judge trace traces/run1 --timeline analysis.json   # open in ui.perfetto.dev
    python -m distlab.judge trace traces/run1 --comm-pattern 'my_lib::moe_(dispatch|combine)'

(``traces/run1``: the folder ``distlab.trace.record("traces/run1")`` writes, as in the README.)

PATH: trace files (``.json``/``.json.gz``, as ``tensorboard_trace_handler`` writes them) or
folders of them, one file per rank of one run. Prints: the run (ranks, GPU, NCCL, backend) and
what the traces lack; per rank the breakdown (GPU idle / compute / exposed communication /
memory / other, % of the span; HTA's ``non_compute`` = the last three), the share of
communication overlapped by compute, the causes of idle time; GPU kernels whose names suggest
communication but that no pattern claims (``possible communication, not counted: NAME (N
kernels, T ms)``); the stragglers (the ranks the others waited for, and the time lost); the
collective kernels (all-reduce, all-gather, reduce-scatter, broadcast, reduce, all-to-all,
send/recv) beside the NCCL model with NCCL's algorithm and protocol for the size and where the
size came from (``own args``, ``matched rank N``, ...), worst errors first, ``|error|`` per
collective, and why the others are not priced (one line per reason, with counts); where the traces
hold ``PP:<action>`` spans, the pipeline bubble per rank beside the schedule's plan
(:mod:`distlab.judge.pipeline_bubble`), and where they hold FSDP2's ``FSDP::all_gather`` spans,
each unit's exposed all-gather beside the prefetch model (:mod:`distlab.judge.fsdp_exposure`).
Definitions:
:mod:`distlab.trace.breakdown`, :mod:`distlab.trace.collectives`,
:mod:`distlab.trace.patterns`, :mod:`distlab.judge.trace_model`.

``--rank R`` reports rank R only; ``--step N`` uses ProfilerStep#N instead of the whole trace;
``--json PATH`` writes every number; ``--timeline PATH`` writes distlab's Chrome trace of the
analysis: per rank the steps, the collective calls split into ``wait for rank L`` and
``transfer`` slices, and GPU idle gaps. ``--comm-pattern REGEX`` (repeatable): GPU kernels whose
names match (``re.match``) count as communication too, beside
:data:`~distlab.trace.patterns.COMM_PATTERNS`. A path that is not a readable trace, an empty
folder, ranks of two runs or a regex that does not compile: one error line, exit 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from distlab.cli import options
from distlab.cli.run import UsageError, run_main
from distlab.judge.fsdp_exposure import FsdpExposure, exposure_lines, run_fsdp_exposure
from distlab.judge.pipeline_bubble import PipelineBubble, bubble_lines, run_pipeline_bubble
from distlab.judge.trace_model import KernelPrice, box_for_gpu, price_collectives
from distlab.report.jsonfile import write_json
from distlab.timeline import Timeline
from distlab.trace.breakdown import Breakdown, RankAnalysis, analyze_run, step_windows
from distlab.trace.chrome import write_chrome_trace
from distlab.trace.collectives import (
    Collectives,
    UnclaimedKernels,
    clock_shift_us,
    match_collectives,
    unclaimed_comm_kernels,
)
from distlab.trace.patterns import CommPattern, user_patterns
from distlab.trace.torch_trace import Run, TraceReadError, read_run
from distlab.vocabulary import ErrorSummary, size_label

__all__ = ["TraceJudgement", "judge_trace", "judgement_json", "judgement_timeline", "main",
           "model_lines", "possible_comm_lines", "report_lines", "run_line"]


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


def run_line(name: str, j: TraceJudgement) -> str:
    """One line per trace folder: how many of the run's ranks it holds, the GPU, the NCCL
    release and the event count, each unknown said as such (never ``None``)."""
    run = j.run
    rt = next(iter(run.ranks.values()))
    events = sum(len(r) for r in run.ranks.values())
    ranks = f"{len(run.ranks)} of {run.world_size or '?'} ranks"
    return (f"{name:21} {ranks:15} GPU {_gpu_words(run):28} NCCL "
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
             + (f" (NCCL model box {box_for_gpu(run.gpu)})" if box_for_gpu(run.gpu) else "")
             + f"; NCCL {rt0.nccl_version or 'not stated'}; backend {rt0.backend or 'not stated'}"]
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
    and model microseconds, NCCL's algorithm/protocol, where the size came from), ``|error|``
    per collective (:class:`~distlab.vocabulary.ErrorSummary`), where the sizes came from when
    any is not the rank's own, the notes, and one line per reason a kernel is not priced."""
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
                     f"across {p.group_size} ranks (size: {p.size_source}): kernel "
                     f"{p.kernel_us:.0f} us {split}; model {p.model_us:.1f} us "
                     f"{p.algorithm}/{p.protocol}; error {p.error_percent or 0:+.0f}% of the "
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
    lines += [f"  note: {n}" for n in dict.fromkeys(p.note for p in priced if p.note)]
    reasons: dict[str, int] = {}
    for p in unpriced:
        reasons[p.why or "?"] = reasons.get(p.why or "?", 0) + 1
    lines += [f"not priced ({n}): {w}" for w, n in reasons.items()]
    return lines


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
            wait = min(max(0.0, call.last_start_us - c.start_us), c.end_us - c.start_us)
            if wait > 0:
                tl.record(f"wait for rank {last}", "straggler_wait", f"rank{r}/comm {call.group}",
                          c.start_us - t0, wait, {"collective": c.collective, "seq": call.seq,
                                                  "last_rank": last})
            tl.record(f"{c.collective} transfer", "transfer", f"rank{r}/comm {call.group}",
                      c.start_us + wait - t0, max(0.0, c.end_us - c.start_us - wait),
                      {"collective": c.collective, "seq": call.seq, "nbytes": c.nbytes})
    return tl


def _parser() -> Any:
    p = options.parser("python -m distlab.judge trace", __doc__)
    p.add_argument("paths", nargs="+", metavar="PATH", help="trace files or folders of them")
    p.add_argument("--rank", type=int, default=None, help="report this rank only")
    p.add_argument("--step", type=int, default=None, help="ProfilerStep#N instead of all")
    p.add_argument("--json", default=None, metavar="PATH", type=options.output_file,
                   help="write every number as JSON (checked before any trace is read; missing "
                        "folders are created)")
    p.add_argument("--timeline", default=None, metavar="PATH", type=options.output_file,
                   help="write distlab's Chrome trace of the analysis (checked before any "
                        "trace is read; missing folders are created)")
    p.add_argument("--comm-pattern", action="append", default=[], metavar="REGEX",
                   type=_regex, help="GPU kernels whose names match REGEX (re.match: add .* "
                   "to match inside a name) are communication too; repeatable (default: "
                   "none beyond distlab.trace.patterns.COMM_PATTERNS)")
    return p


def _regex(text: str) -> str:
    """``--comm-pattern``'s type: a regex that compiles (else argparse's one-line error)."""
    try:
        user_patterns([text])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _work(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    comm = user_patterns(args.comm_pattern) if args.comm_pattern else None
    try:
        j = judge_trace(args.paths, comm=comm)
    except TraceReadError as exc:
        raise UsageError(str(exc)) from None
    if args.rank is not None and args.rank not in j.run.ranks:
        raise UsageError(f"argument --rank: invalid value {args.rank}: the traces hold ranks "
                         f"{sorted(j.run.ranks)}")
    if args.step is not None and not any(args.step in a.per_step for a in j.analyses.values()):
        have = sorted({n for a in j.analyses.values() for n in a.steps})
        raise UsageError(f"argument --step: invalid value {args.step}: the traces hold steps "
                         f"{have or 'none (no ProfilerStep#N spans)'}")
    for line in report_lines(j, rank=args.rank, step=args.step):
        print(line)
    if args.json:
        write_json(args.json, judgement_json(j, args.rank))
        print(f"# wrote {args.json}")
    if args.timeline:
        write_chrome_trace(judgement_timeline(j, args.rank), args.timeline)
        print(f"# wrote {args.timeline}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0, 2 with one error line, or 130 on Ctrl-C."""
    return run_main("python -m distlab.judge trace", _work, argv, on_interrupt="nothing written")


if __name__ == "__main__":
    sys.exit(main())
