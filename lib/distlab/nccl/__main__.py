"""``python -m distlab.nccl``: NCCL's choice per size on a GPU box, and its measured time (model).

    python -m distlab.nccl h100_sxm8                   # 8 GPUs, torchrun, 64 KiB..4 GiB
    python -m distlab.nccl a100_sxm8 -n 4 --harness nccl-tests --sizes 1M,64M,1G
    python -m distlab.nccl h100_sxm8 --harness torch-isolated  # one call, waited for
    python -m distlab.nccl h100_sxm8 --release 2.18          # an older NCCL's constants
    python -m distlab.nccl h100_sxm8 --nodes 4 --network ib_ndr400x8   # 32 GPUs
    python -m distlab.nccl h100_sxm8 --collective all_gather          # FSDP's traffic
    python -m distlab.nccl b200_sxm8 --collective all_to_all --nodes 2 --network ib_ndr400x8
    python -m distlab.nccl b200_sxm8 --release 2.30.4 --json out.json
    python -m distlab.nccl gb200_nvl72 --sizes 1M,1G         # one 72-GPU NVLink domain
    python -m distlab.nccl --judge                     # the model on the published tables
    python -m distlab.nccl --boxes                     # every box, network and release

Per size: NCCL's algorithm and protocol (its estimate's cheapest), channels launched, chunk
bytes, pipeline steps, NCCL's own estimate, the predicted measured time, its bus bandwidth, and
what bounds it (``host``: the harness cannot enqueue faster; ``gpu``; under ``torch-isolated``,
which times one call at a time, the larger of the two terms that add). The model is
:mod:`distlab.nccl.execution` (NCCL 2.18 to 2.30; a release the model does
not hold is priced with its neighbour, which one line on stderr and ``--json``'s
``nccl_version`` say; ``--release`` is also spelt ``--nccl-version``). ``--judge`` prints the
model's error on every published table (the same report as ``python -m distlab.judge nccl
--published``, :mod:`distlab.evidence.nccl.judged`); ``--boxes`` lists every box, network and
release the model knows, where its constants come from and how published tables judge it
(:mod:`distlab.evidence.nccl.inventory`). The options that name the same thing are spelt as
``python -m distlab.rccl``'s: ``--release``, ``--nodes``, ``--sizes``, ``--judge``,
``--boxes``, ``--json``. Nothing is measured.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from distlab.cli import options
from distlab.cli.run import run_main
from distlab.nccl.boxes import GPU_BOXES
from distlab.nccl.execution import HARNESSES
from distlab.nccl.family import FAMILY
from distlab.nccl.lines import DEFAULT_SIZES, choice_json, choice_lines
from distlab.nccl.multinode import NETWORKS
from distlab.nccl.versions import (
    DEFAULT_NCCL_VERSION,
    NCCL_CONSTANTS,
    release_key,
    resolve_nccl_version,
)
from distlab.report.jsonfile import write_json
from distlab.vocabulary import collective_name

__all__ = ["PROG", "main"]

PROG = "python -m distlab.nccl"


def _release(text: str) -> str:
    """``--release``'s ``type=``: a release as NCCL prints it (``2.26``, ``2.26.2``,
    ``v2.26.2-1``, ``2.26.2+cuda12.8``), kept as written, checked as the Python functions check
    ``nccl_version`` (:func:`~distlab.nccl.versions.release_key`: a CUDA version like ``12.8``
    is refused); one the model does not hold is priced with its neighbour
    (:func:`~distlab.nccl.versions.resolve_nccl_version`)."""
    try:
        release_key(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: {exc}") from None
    return str(text).strip()


def _collective(text: str) -> str:
    """``--collective``'s ``type=``: the canonical name of an accepted spelling
    (:func:`distlab.vocabulary.collective_name`); an unknown name is left for ``choices`` to
    refuse."""
    try:
        return collective_name(text)
    except ValueError:
        return text


def _parser() -> options.Parser:
    p = options.parser(PROG, __doc__)
    p.add_argument("box", nargs="?", choices=sorted(GPU_BOXES), metavar="BOX",
                   help=f"a GPU box: {', '.join(sorted(GPU_BOXES))}")
    p.add_argument("-n", "--world-size", type=options.int_at_least(2), default=None,
                   help="GPUs (default: every GPU of the box)")
    p.add_argument("--harness", choices=sorted(HARNESSES), default="torch",
                   help="how the calls are issued: torch (one process per GPU, back-to-back "
                        "calls; default), torch-isolated (one call at a time on an idle GPU, "
                        "torch's host overhead added to each) or nccl-tests (-g: one process "
                        "drives every GPU)")
    p.add_argument("--release", "--nccl-version", dest="nccl_version", type=_release,
                   default=DEFAULT_NCCL_VERSION, metavar="RELEASE",
                   help=f"the NCCL release: {', '.join(sorted(NCCL_CONSTANTS))}, or as NCCL "
                        "prints it (2.26.2, 2.26.2+cuda12.8), which prices its minor release "
                        f"(default {DEFAULT_NCCL_VERSION}: 2.28.9, torch 2.11's)")
    p.add_argument("--nodes", type=options.int_at_least(1), default=1,
                   help="boxes joined by --network (default 1; NCCL 2.28.9's multi-node model)")
    p.add_argument("--network", choices=sorted(NETWORKS), default=None,
                   help="the network between nodes: " + ", ".join(sorted(NETWORKS)))
    p.add_argument("--sizes", type=options.size_list, default=None,
                   help="comma-separated sizes, e.g. 64K,1M,1G (default 64 KiB..4 GiB x4)")
    p.add_argument("--collective", type=_collective,
                   choices=("all_reduce", *FAMILY, "all_to_all"),
                   default="all_reduce",
                   help="the collective: all_reduce (default), or all_gather, reduce_scatter or "
                        "broadcast on one node, or all_to_all (one node or across nodes, "
                        "alltoall_perf's columns); nccl-tests' spellings (allreduce, allgather, "
                        "reducescatter, alltoall) are accepted")
    options.report_options(
        p, ("--judge", "the measured-time model on every published table instead (as python "
                       "-m distlab.judge nccl --published)"),
        boxes="every box, network and NCCL release the model knows, where each constant comes "
              "from and how published tables judge it",
        json="also write the table (a BOX's, or --boxes') as JSON to OUT")
    return p


def _nccl_command(argv: list[str]) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if sum((args.boxes, args.judge, args.box is not None)) > 1:
        p.error("give one of BOX, --judge or --boxes")
    if args.judge:
        if args.json is not None:
            p.error("--json writes a BOX's table or the --boxes report; the judgement is text")
        from distlab.evidence.nccl.judged import collective_lines, multinode_lines, published_lines

        print("\n".join(published_lines() + multinode_lines() + collective_lines()))
        return 0
    if args.boxes:
        from distlab.evidence.nccl.inventory import print_boxes

        print_boxes(args.json)
        return 0
    if args.box is None:
        p.error("give a BOX, --judge (the model on published tables) or --boxes")
    if args.nodes > 1 and args.network is None:
        p.error(f"--nodes {args.nodes} needs --network")
    if args.nodes == 1 and args.network is not None:
        p.error(f"--network {args.network} joins nodes: give --nodes 2 or more (one node's "
                "GPUs talk over its own links)")
    default = NCCL_CONSTANTS[DEFAULT_NCCL_VERSION]
    if args.collective == "all_to_all":
        return _alltoall(p, args)
    if args.collective != "all_reduce" and (
            args.nodes > 1 or resolve_nccl_version(args.nccl_version).version is not default):
        p.error(f"--collective {args.collective} is modelled on one node with NCCL 2.28.9 only")
    gpus = GPU_BOXES[args.box].gpus * args.nodes
    n = gpus if args.world_size is None else args.world_size
    if n > gpus:
        options.fail(p, "--world-size", n, f"at most {gpus}, the GPUs of {args.nodes} x "
                     f"{args.box}")
    if n % args.nodes:
        options.fail(p, "--world-size", n, f"a multiple of --nodes {args.nodes}")
    if args.json is not None and args.collective != "all_reduce":
        p.error("--json writes the allreduce table")
    resolved = resolve_nccl_version(args.nccl_version)
    if resolved.note:
        print(f"{PROG}: warning: {resolved.note}", file=sys.stderr)
    sizes = args.sizes or DEFAULT_SIZES
    print("\n".join(choice_lines(args.box, n, sizes, args.harness, resolved.version,
                                  nodes=args.nodes, network=args.network,
                                  collective=args.collective)))
    if args.json is not None:
        write_json(args.json, choice_json(args.box, n, sizes, args.harness, args.nccl_version,
                                          nodes=args.nodes, network=args.network))
    return 0


def _alltoall(p: options.Parser, args: argparse.Namespace) -> int:
    """``--collective all_to_all``: :func:`distlab.nccl.alltoall_table.alltoall_lines`."""
    from distlab.nccl.alltoall_table import alltoall_lines

    if args.json is not None:
        p.error("--json writes the allreduce table")
    gpus = GPU_BOXES[args.box].gpus * args.nodes
    n = gpus if args.world_size is None else args.world_size
    if n > gpus or n % args.nodes:
        options.fail(p, "--world-size", n, f"at most {gpus} and a multiple of --nodes "
                     f"{args.nodes}")
    print("\n".join(alltoall_lines(args.box, n, args.sizes or DEFAULT_SIZES, nodes=args.nodes,
                                    network=args.network)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0, 2 with one error line, or 130 on Ctrl-C (one line, no traceback)."""
    return run_main(PROG, _nccl_command, argv, on_interrupt="nothing written")


if __name__ == "__main__":
    sys.exit(main())
