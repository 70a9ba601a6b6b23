"""Is my box healthy? Your nccl-tests log judged against what NCCL should do on that box.

    python -m distlab.health all_reduce.log                        # one node: the log says all
    python -m distlab.health run.log --nics 8 --nic-gbps 400 --fabric ib   # across nodes
    python -m distlab.health run.log --env NCCL_ALGO=Ring          # what NCCL ran under
    ./build/all_reduce_perf -b 8 -e 8G -f 2 -g 8 | python -m distlab.health -
    python -m distlab.health a.log b.log --json health.json

Each table of each log (every nccl-tests binary, out-of-place column unless --column says
otherwise) is priced size by size by the NCCL model for the box the log describes: its GPUs and
hosts (the '# Using devices' lines), nccl-tests' -g (one process driving every GPU, or one per
GPU as mpirun / srun / torchrun run it), the NCCL release and NCCL_* variables NCCL prints under
NCCL_DEBUG=INFO. What a log cannot say comes from the options: the network between nodes, a box
to price an unlisted GPU as. One line says what was read and what was assumed.

A size is ok when its time is inside the band of the model's own error on published tables it
was not fitted on (95% of them, per size class, one node and across nodes apart), low when
slower, high when faster. For the low ones the cause is named: each fault the model can price
(NVLS off, a NIC down, half the NICs, a PCIe link at x8, an algorithm or protocol forced) is
priced, and the one that explains the rows is given with its evidence and the rerun that would
confirm it; else the shape of the shortfall (small sizes only, every size across nodes, a step
where NCCL switches). Nothing is measured.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from distlab.cli import options
from distlab.cli.run import UsageError, run_main

PROG = "python -m distlab.health"

__all__ = ["PROG", "main"]


def _parser() -> options.Parser:
    from distlab.health.setup import FABRICS
    from distlab.nccl.boxes import GPU_BOXES
    from distlab.nccl.multinode import NETWORKS

    p = options.parser(PROG, __doc__)
    p.add_argument("logs", nargs="+", metavar="LOG",
                   help="nccl-tests output (text, or -J JSON); - reads standard input")
    p.add_argument("--collective", default=None,
                   help="the binary's collective where the log does not name it (all_reduce, "
                        "all_gather, ...)")
    p.add_argument("--column", choices=("out-of-place", "in-place"), default="out-of-place",
                   help="which of nccl-tests' two timings to judge")
    p.add_argument("--box", choices=sorted(GPU_BOXES), default=None, metavar="BOX",
                   help="price the GPUs as this box (a stand-in where the log names another "
                        f"GPU): {', '.join(sorted(GPU_BOXES))}")
    p.add_argument("--gpus", type=options.int_at_least(2), default=None,
                   help="GPUs in the run, where the log has no device lines")
    p.add_argument("--nodes", type=options.int_at_least(1), default=None,
                   help="nodes, where the log has no device lines")
    p.add_argument("--nics", type=options.int_at_least(1), default=None,
                   help="network ports per node (across nodes)")
    p.add_argument("--nic-gbps", type=options.positive_float, default=None,
                   help="one port's rate in Gb/s (100, 200, 400)")
    p.add_argument("--fabric", choices=FABRICS, default="ib", help="ib, roce or efa")
    p.add_argument("--network", choices=sorted(NETWORKS), default=None, metavar="PRESET",
                   help=f"a described network instead of --nics: {', '.join(sorted(NETWORKS))}")
    p.add_argument("--release", default=None,
                   help="the NCCL release, where the log does not print it (2.21.5)")
    p.add_argument("--env", action="append", default=[], metavar="NCCL_NAME=VALUE",
                   help="an NCCL variable the run had (repeatable): NCCL_ALGO, NCCL_PROTO, "
                        "NCCL_NVLS_ENABLE are priced")
    p.add_argument("--json", metavar="OUT", default=None, type=options.output_file,
                   help="also write every judged run as JSON to OUT")
    return p


def _work(argv: list[str]) -> int:
    from distlab.health.report import run_json, run_lines
    from distlab.health.setup import setup_of
    from distlab.health.verdict import judge_run
    from distlab.logs.nccl_tests import LogError, read_log
    from distlab.report.jsonfile import write_json

    args = _parser().parse_args(argv)
    if (args.nics is None) != (args.nic_gbps is None):
        raise UsageError("--nics and --nic-gbps go together (ports per node and each one's "
                         "Gb/s)")
    runs = []
    for log in args.logs:
        try:
            text = sys.stdin.read() if log == "-" else None
            runs += read_log(log, collective=args.collective, text=text)
        except (LogError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    judged = []
    for run in runs:
        try:
            setup = setup_of(run, box=args.box, gpus=args.gpus, nodes=args.nodes,
                             network=args.network, nics=args.nics, nic_gbits=args.nic_gbps,
                             fabric=args.fabric, release=args.release, env=args.env)
        except ValueError as exc:
            raise UsageError(f"{run.source}: {exc}") from None
        judged.append(judge_run(run, setup, args.column))
    print("\n\n".join("\n".join(run_lines(v)) for v in judged))
    if args.json is not None:
        write_json(args.json, {"runs": [run_json(v) for v in judged]})
    return 1 if any(v.verdict == "low" for v in judged) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 (every run ok), 1 (a run slower than healthy), 2 (bad input: one line), 130
    (Ctrl-C)."""
    return run_main(PROG, _work, argv, on_interrupt="nothing written")


if __name__ == "__main__":
    sys.exit(main())
