"""``python -m distlab.rccl``: what RCCL runs for an allreduce on 8 x MI300X / MI325X nodes (or
MI350X / MI355X), and how long it takes (model).

    python -m distlab.rccl                          # one node, RCCL 2.26.6, 64 KiB..4 GiB
    python -m distlab.rccl --nodes 2 --release rocm-6.4 --sizes 1M,64M,1G
    python -m distlab.rccl --nodes 2 --gpu MI355X   # gfx950 (same as --arch gfx950)
    python -m distlab.rccl --no-msccl --dtype bfloat16
    python -m distlab.rccl --judge                  # the model on the published tables
    python -m distlab.rccl --boxes                  # the AMD boxes and NICs, with sources
    python -m distlab.rccl --nodes 4 --json out.json

Per size: the path RCCL takes (MSCCL's allpairs on one node, its cost model, the multi-node
protocol override), the algorithm and protocol, RCCL's own estimate (what it minimizes; not a
run's time), the modelled time and its bus bandwidth, or why it is not priced
(:mod:`distlab.rccl.execution`). A release the model does not hold is priced with the
tables it carries or its neighbour, which one line on stderr says. Nothing is measured.
"""

from __future__ import annotations

import sys
from argparse import ArgumentTypeError
from collections.abc import Sequence
from typing import Any

from distlab.cli import options
from distlab.cli.run import run_main
from distlab.rccl.boxes import NOT_PRICED, box_lines, box_rows, nic_rows
from distlab.rccl.execution import judge, rccl_allreduce_times
from distlab.rccl.lines import judge_lines, judge_rows, time_lines, time_row
from distlab.rccl.tables import (
    DEFAULT_ARCH,
    DEFAULT_RELEASE,
    GPU_ARCHS,
    RCCL_ARCHS,
    RCCL_TABLES,
)
from distlab.report.jsonfile import write_json

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
    p.add_argument("--release", default=DEFAULT_RELEASE, metavar="RELEASE",
                   help=f"the RCCL release ({', '.join(sorted(RCCL_TABLES))}, any other "
                        "priced by its neighbour) or ROCm's (rocm-6.4)")
    p.add_argument("--sizes", type=options.size_list, default=None,
                   help="comma-separated sizes, e.g. 64K,1M,1G (default 64 KiB..4 GiB x4)")
    p.add_argument("--no-msccl", action="store_true",
                   help="MSCCL off (RCCL_MSCCL_ENABLE=0): one node runs the cost model's ring")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                   help="element type (bf16 above 8 MiB skips MSCCL from 2.26.6)")
    p.add_argument("--intel-host", action="store_true",
                   help="an Intel CPU host (RCCL's network overhead 1 us instead of 2)")
    p.add_argument("--nic-gbps", type=options.positive_float, default=50.0,
                   help="one NIC's rate in GB/s (default 50: 400 Gb/s)")
    p.add_argument("--judge", action="store_true",
                   help="the execution model on every published table instead")
    p.add_argument("--boxes", action="store_true",
                   help="the AMD boxes and NICs the model knows, each constant's source, and "
                        "what it cannot price, instead")
    p.add_argument("--json", metavar="OUT", default=None, type=options.output_file,
                   help="also write the table as JSON to OUT")
    return p


def _judge(out: Any) -> int:
    rows = judge_rows()
    print("\n".join(judge_lines(rows)))
    if out is not None:
        judged = judge()
        write_json(out, {"tables": rows, "points": {j.id: [list(r) for r in j.rows]
                                                    for j in judged},
                         "unpriced": {j.id: [[n, why] for n, why in
                                             zip(j.unpriced, j.unpriced_why, strict=True)]
                                      for j in judged}})
    return 0


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
        return _judge(args.json)
    if args.boxes:
        print("\n".join(box_lines()))
        if args.json is not None:
            write_json(args.json, {"boxes": box_rows(), "nics": nic_rows(),
                                   "not_priced": list(NOT_PRICED)})
        return 0
    try:
        rows, note = rccl_allreduce_times(args.nodes, args.sizes or DEFAULT_SIZES,
                                          release=args.release, msccl=not args.no_msccl,
                                          dtype=args.dtype, amd_host=not args.intel_host,
                                          nic_gbps=args.nic_gbps, arch=arch)
    except ValueError as e:
        text = str(e)
        options.fail(p, "--release", args.release,
                     "a release like 2.21.5 or rocm-6.3" if "written like" in text else
                     f"a ROCm release whose RCCL is known: {text.split('; ')[-1]}")
    if note:
        print(f"{PROG}: warning: {note}", file=sys.stderr)
    print("\n".join(time_lines(rows, args.nodes, args.release, arch)))
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
