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
import sys
from collections.abc import Sequence
from typing import Any

from distlab.cli import options
from distlab.cli.run import UsageError, run_main
from distlab.judge.trace_judgement import judge_trace, judgement_json, judgement_timeline
from distlab.judge.trace_report import report_lines
from distlab.report.jsonfile import write_json
from distlab.trace.chrome import write_chrome_trace
from distlab.trace.patterns import user_patterns
from distlab.trace.torch_trace import TraceReadError

__all__ = ["main"]


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
