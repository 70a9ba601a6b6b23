"""``python -m distlab.rccl``: what RCCL runs for an allreduce on 8 x MI300X / MI325X nodes (or
MI350X / MI355X), and how long it takes (model).

    python -m distlab.rccl                          # one node, RCCL 2.26.6, 64 KiB..4 GiB
    python -m distlab.rccl --nodes 2 --release rocm-6.4 --sizes 1M,64M,1G
    python -m distlab.rccl --nodes 2 --gpu MI355X   # gfx950 (same as --arch gfx950)
    python -m distlab.rccl --no-msccl --dtype bf16      # any torch dtype name or alias
    python -m distlab.rccl --judge                  # the model on the published tables
    python -m distlab.rccl --boxes                  # the AMD boxes and NICs, with sources
    python -m distlab.rccl --nodes 4 --json out.json

Per size: the path RCCL takes (MSCCL's allpairs on one node, its cost model, the multi-node
protocol override), the algorithm and protocol, RCCL's own estimate (what it minimizes; not a
run's time), the modelled time and its bus bandwidth, or why it is not priced
(:mod:`distlab.rccl.execution`). A release the model does not hold is priced with the
tables it carries or its neighbour, which one line on stderr says. Every option is checked by
the same function that checks the Python argument (``--release`` as
:func:`~distlab.rccl.tables.check_release`, ``--dtype`` as :func:`distlab.vocabulary.dtype_name`,
``--nic-gbps`` as :func:`distlab.links.check_nic_gbps`), and the options that name the same
thing are spelt as ``python -m distlab.nccl``'s: ``--release``, ``--nodes``, ``--sizes``,
``--judge`` (also ``python -m distlab.judge rccl --published``), ``--boxes``, ``--json``.
Nothing is measured.
"""

from __future__ import annotations

import sys
from argparse import ArgumentTypeError
from collections.abc import Sequence

from distlab.cli import options
from distlab.cli.run import run_main
from distlab.evidence.rccl.inventory import boxes_report
from distlab.evidence.rccl.judged import judge_report, tree_note
from distlab.links import NIC_GBPS_MAX, check_nic_gbps
from distlab.rccl.execution import NIC_GBPS, rccl_allreduce_times
from distlab.rccl.lines import time_lines, time_row
from distlab.rccl.tables import (
    DEFAULT_ARCH,
    DEFAULT_RELEASE,
    GPU_ARCHS,
    RCCL_ARCHS,
    RCCL_TABLES,
    check_release,
)
from distlab.report.jsonfile import write_json
from distlab.vocabulary import dtype_name

__all__ = ["PROG", "main"]

PROG = "python -m distlab.rccl"
DEFAULT_SIZES: tuple[int, ...] = (*(65536 << (2 * k) for k in range(8)), 4 << 30)
"""64 KiB to 1 GiB, x4, then 4 GiB."""
GPU_ARCH = GPU_ARCHS
"""``--gpu`` names to the architecture RCCL keys its tables on."""


def _arch(text: str) -> str:
    value = text.strip().lower()
    if value not in RCCL_ARCHS:
        raise ArgumentTypeError(f"invalid value {text!r}: must be one of {', '.join(RCCL_ARCHS)}")
    return value


def _gpu(text: str) -> str:
    value = text.strip().upper().removeprefix("AMD ").removeprefix("INSTINCT ").strip()
    if value not in GPU_ARCH:
        raise ArgumentTypeError(f"invalid value {text!r}: must be one of {', '.join(GPU_ARCH)}")
    return value


def _parser() -> options.Parser:
    p = options.parser(PROG, __doc__)
    p.add_argument("--nodes", type=options.int_at_least(1), default=1,
                   help="8-GPU nodes, one 400G NIC per GPU (default 1)")
    p.add_argument("--arch", type=_arch, default=None, metavar="ARCH",
                   help=f"the GPU architecture: {' or '.join(RCCL_ARCHS)} (default "
                        f"{DEFAULT_ARCH}); gfx950's one node at MI300X's fitted xGMI rates x 1.2")
    p.add_argument("--gpu", type=_gpu, default=None, metavar="GPU",
                   help=f"the GPU instead of --arch: {', '.join(GPU_ARCH)}")
    p.add_argument("--release", "--rccl-version", type=options.checked(check_release),
                   default=DEFAULT_RELEASE, metavar="RELEASE",
                   help=f"the RCCL release ({', '.join(sorted(RCCL_TABLES))}, any other 2.x "
                        "priced by its neighbour) or ROCm's (rocm-6.4)")
    p.add_argument("--sizes", type=options.size_list, default=None,
                   help="comma-separated sizes, e.g. 64K,1M,1G (default 64 KiB..4 GiB x4)")
    p.add_argument("--no-msccl", action="store_true",
                   help="MSCCL off (RCCL_MSCCL_ENABLE=0): one node runs the cost model's ring")
    p.add_argument("--dtype", type=options.checked(dtype_name), default="float32",
                   metavar="DTYPE",
                   help="element type, as torch names it or an alias (bfloat16, bf16, "
                        "torch.bfloat16; bf16 above 8 MiB skips MSCCL from 2.26.6)")
    p.add_argument("--intel-host", action="store_true",
                   help="an Intel CPU host (RCCL's network overhead 1 us instead of 2)")
    p.add_argument("--nic-gbps", type=options.checked(check_nic_gbps, float), default=NIC_GBPS,
                   help=f"one NIC's rate in GB/s (bytes), in (0, {NIC_GBPS_MAX:g}]; a 400 Gb/s "
                        "NIC is 50")
    options.report_options(
        p, ("--judge", "the execution model on every published table instead"),
        boxes="the AMD boxes and NICs the model knows, each constant's source, and what it "
              "cannot price, instead",
        json="also write the table as JSON to OUT")
    return p


def _command(argv: list[str]) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.judge and args.boxes:
        p.error("give one of --judge and --boxes")
    arch = args.arch or (GPU_ARCH[args.gpu] if args.gpu else DEFAULT_ARCH)
    if args.arch and args.gpu and GPU_ARCH[args.gpu] != args.arch:
        options.fail(p, "--gpu", args.gpu, f"a {args.arch} GPU (--arch {args.arch}), or one "
                     "of the two options")
    if (args.judge or args.boxes) and (args.arch or args.gpu):
        p.error("--arch / --gpu price sizes; --judge and --boxes cover every table and box")
    if args.judge:
        return judge_report(args.json)
    if args.boxes:
        return boxes_report(args.json)
    rows, note = rccl_allreduce_times(args.nodes, args.sizes or DEFAULT_SIZES,
                                      release=args.release, msccl=not args.no_msccl,
                                      dtype=args.dtype, amd_host=not args.intel_host,
                                      nic_gbps=args.nic_gbps, arch=arch)
    if note:
        print(f"{PROG}: warning: {note}", file=sys.stderr)
    print("\n".join(time_lines(rows, args.nodes, args.release, arch,
                                  notes=[tree_note(rows)])))
    table = [time_row(r) for r in rows]
    if args.json is not None:
        write_json(args.json, {"nodes": args.nodes, "arch": arch, "release": args.release,
                               "release_note": note, "rows": table})
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0, 2 with one error line, or 130 on Ctrl-C (one line, no traceback)."""
    return run_main(PROG, _command, argv, on_interrupt="nothing written")


if __name__ == "__main__":
    sys.exit(main())
