"""``python -m distlab.judge nccl --published``: NCCL's measured-time model judged on published
tables.

    python -m distlab.judge nccl --published                 # the model on every published table
    python -m distlab.judge nccl --published --write [PATH]  # refit the constants, write PATH

Prints the error on each published table the project holds, in sample (constants fitted on every
table) and leave-one-source-out (each source priced with constants fitted on the others), then
on each published multi-node table (2 and 4 nodes; out of sample, nothing is fitted on them),
then on each published point of another collective (all-gather, reduce-scatter) or of an
allreduce with an algorithm switched off, and whether the model makes the choice a source says
NCCL made (both out of sample too); the tables are :mod:`distlab.judge.nccl_published`'s.
``--write`` refits the constants on every published table and writes them to PATH (default
``execution_calibration.json`` in the current folder, never into the installed package); copy
it over ``lib/distlab/collectives/model/nccl/execution_calibration.json`` in a checkout to ship
it.
NCCL's choice per size on one box, and every box, network and release the model knows, are
``python -m distlab.nccl BOX`` and ``python -m distlab.nccl --boxes``. Nothing is measured.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from distlab.cli import options
from distlab.cli.run import run_main
from distlab.judge.nccl_published import collective_lines, multinode_lines, published_lines

__all__ = ["PROG", "main"]

PROG = "python -m distlab.judge nccl"


def _parser() -> options.Parser:
    p = options.parser(PROG, __doc__)
    p.add_argument("--published", action="store_true",
                   help="the model's error on every published table (the judgement this "
                        "command prints; NCCL's choice on one box: python -m distlab.nccl BOX)")
    p.add_argument("box", nargs="?", default=None, help=argparse.SUPPRESS)  # the old form
    p.add_argument("--write", nargs="?", const="execution_calibration.json", default=None,
                   metavar="PATH", type=options.output_file,
                   help="with --published: refit the constants on every published table and "
                        "write them to PATH (default: execution_calibration.json in the current "
                        "folder)")
    return p


def _nccl_command(argv: list[str]) -> int:
    p = _parser()
    args, rest = p.parse_known_args(argv)
    moved = {"--boxes", "--harness", "--nccl-version", "--nodes", "--network", "--sizes",
             "--collective", "--json", "-n", "--world-size"}
    if args.box is not None or moved & {a.split("=")[0] for a in rest}:
        p.error("NCCL's choice per size on a box, and --boxes, are their own command now: "
                f"python -m distlab.nccl {' '.join([args.box or '', *rest]).strip()}")
    if rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    if not args.published:
        p.error("give --published (NCCL's choice per size on a box: python -m distlab.nccl BOX)")
    print("\n".join(published_lines(write=args.write) + multinode_lines()
                    + collective_lines()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0, 2 with one error line, or 130 on Ctrl-C (one line, no traceback)."""
    return run_main(PROG, _nccl_command, argv, on_interrupt="nothing written")


if __name__ == "__main__":
    sys.exit(main())
