"""``python -m distlab.judge nccl``: NCCL's choice per size on a GPU box, and its measured time.

    python -m distlab.judge nccl h100_sxm8                   # 8 GPUs, torchrun, 64 KiB..4 GiB
    python -m distlab.judge nccl a100_sxm8 -n 4 --harness nccl-tests --sizes 1M,64M,1G
    python -m distlab.judge nccl h100_sxm8 --harness torch-isolated  # one call, waited for
    python -m distlab.judge nccl h100_sxm8 --nccl-version 2.18     # an older NCCL's constants
    python -m distlab.judge nccl h100_sxm8 --nodes 4 --network ib_ndr400x8   # 32 GPUs
    python -m distlab.judge nccl h100_sxm8 --collective all_gather          # FSDP's traffic
    python -m distlab.judge nccl b200_sxm8 --nccl-version 2.30.4 --json out.json
    python -m distlab.judge nccl gb200_nvl72 --sizes 1M,1G         # one 72-GPU NVLink domain
    python -m distlab.judge nccl --boxes                     # every box, network and release
    python -m distlab.judge nccl --published                 # the model on every published table
    python -m distlab.judge nccl --published --write [PATH]  # refit the constants, write PATH

Per size: NCCL's algorithm and protocol (its estimate's cheapest), channels launched, chunk
bytes, pipeline steps, NCCL's own estimate, the predicted measured time, its bus bandwidth, and
what bounds it (``host``: the harness cannot enqueue faster; ``gpu``; under ``torch-isolated``,
which times one call at a time, the larger of the two terms that add). The model is
:mod:`distlab.collectives.model.nccl.execution` (NCCL 2.18 to 2.30; a release the model does
not hold is priced with its neighbour, which one line on stderr and ``--json``'s
``nccl_version`` say). ``--boxes`` lists every box, network and release the model knows, where
its constants come from and how published tables judge it
(:mod:`distlab.judge.nccl_boxes`).
``--published`` prints the error on each published table the project holds, in sample
(constants fitted on every table) and leave-one-source-out (each source priced with constants
fitted on the others), then on each published multi-node table (2 and 4 nodes; out of sample,
nothing is fitted on them), then on each published point of another collective (all-gather,
reduce-scatter) or of an allreduce with an algorithm switched off, and whether the model makes
the choice a source says NCCL made (both out of sample too). Nothing is measured. ``--write``
refits the constants on every published table and writes them to PATH (default
``execution_calibration.json`` in the current folder, never into the installed package); copy
it over ``lib/distlab/collectives/model/nccl/execution_calibration.json`` in a checkout to ship
it.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from os import PathLike
from typing import Any

from distlab.cli import options
from distlab.cli.run import run_main
from distlab.collectives.model.nccl import versions
from distlab.collectives.model.nccl.boxes import GPU_BOXES
from distlab.collectives.model.nccl.execution import HARNESSES, nccl_execution
from distlab.collectives.model.nccl.family import FAMILY
from distlab.collectives.model.nccl.multinode import NETWORKS
from distlab.collectives.model.nccl.versions import (
    DEFAULT_NCCL_VERSION,
    NCCL_VERSIONS,
    NcclVersion,
    resolve_nccl_version,
)
from distlab.report.jsonfile import write_json
from distlab.vocabulary import collective_name, nccl_release, size_label

__all__ = ["choice_agreement", "choice_json", "choice_lines", "collective_lines", "main",
           "multinode_lines",
           "published_lines"]

ERROR_LINE = ("# error: (published - model) / model time, % (+: the run was slower than the "
              "model); med, p90: of |error|")
"""The error convention (:func:`distlab.vocabulary.error_pct`), printed above each table."""

DEFAULT_SIZES = [1 << k for k in range(16, 34, 2)]
"""64 KiB to 8 GiB, every factor 4."""


def choice_lines(box: str, world_size: int, sizes: Sequence[int], harness: str,
                 nccl_version: str | NcclVersion | None = None, *, nodes: int = 1,
                 network: str | None = None, collective: str = "all_reduce") -> list[str]:
    """The per-size table as text lines (at most 110 columns)."""
    version = versions.nccl_version(nccl_version)
    collective = collective_name(collective)
    if collective != "all_reduce":
        return _family_lines(box, world_size, sizes, harness, collective)
    head = (f"{'size':>8} {'algo':>9} {'proto':>6} {'ch':>3} {'chunk':>8} {'steps':>6} "
            f"{'estimate us':>11} {'predicted us':>12} {'busbw GB/s':>10} {'bound':>5}")
    where = f"{nodes} x {box} over {network}" if nodes > 1 else GPU_BOXES[box].name
    lines = [f"# {where}, {world_size} GPUs, NCCL {version.release}, {harness}: NCCL's choice, "
             "time as measured (model)", head]
    for e in _executions(box, world_size, sizes, harness, version, nodes, network):
        lines.append(f"{size_label(e.nbytes):>8} {e.algorithm:>9} {e.protocol:>6} {e.channels:>3} "
                     f"{size_label(e.chunk_bytes):>8} {e.steps:>6} {e.estimate_us:>11.1f} "
                     f"{e.seconds * 1e6:>12.1f} {e.busbw_gbps:>10.1f} {e.bound:>5}")
    return lines


def _executions(box: str, world_size: int, sizes: Sequence[int], harness: str, version: Any,
                nodes: int, network: str | None) -> list[Any]:
    return nccl_execution(box, world_size, sizes, harness=harness, nccl_version=version,
                          nodes=nodes, network=network if nodes > 1 else None)


def choice_json(box: str, world_size: int, sizes: Sequence[int], harness: str,
                nccl_version: str | None = None, *, nodes: int = 1,
                network: str | None = None) -> dict[str, Any]:
    """The per-size allreduce table as JSON: the call, ``nccl_version`` (``asked``, ``priced_as``
    and ``note``: one line when the release asked is not one the model holds, else "") and one
    row per size (the terms of :class:`~distlab.collectives.model.nccl.execution.Execution`)."""
    resolved = resolve_nccl_version(nccl_version)
    rows = [{"nbytes": e.nbytes, "algorithm": e.algorithm, "protocol": e.protocol,
             "channels": e.channels, "chunk_bytes": e.chunk_bytes, "steps": e.steps,
             "estimate_us": e.estimate_us, "predicted_us": e.seconds * 1e6,
             "busbw_gbps": e.busbw_gbps, "bound": e.bound}
            for e in _executions(box, world_size, sizes, harness, resolved.version, nodes,
                                 network)]
    return {"box": box, "world_size": world_size, "nodes": nodes, "network": network,
            "harness": harness, "nccl_version": {"asked": resolved.asked,
                                                 "priced_as": resolved.priced_as,
                                                 "note": resolved.note},
            "rows": rows}


def _family_lines(box: str, world_size: int, sizes: Sequence[int], harness: str,
                  collective: str) -> list[str]:
    from distlab.collectives.model.nccl.family import nccl_collective

    head = (f"{'size':>8} {'algo':>9} {'proto':>6} {'ch':>3} {'chunk':>8} {'steps':>6} "
            f"{'estimate us':>11} {'predicted us':>12} {'busbw GB/s':>10}")
    lines = [f"# {box}, {world_size} GPUs, NCCL 2.28.9, {harness}: {collective}, size = the "
             "whole buffer, time as measured (model)", head]
    for r in nccl_collective(box, world_size, sizes, collective, harness=harness):
        lines.append(f"{size_label(r.nbytes):>8} {r.algorithm:>9} {r.protocol:>6} {r.channels:>3} "
                     f"{size_label(r.chunk_bytes):>8} {r.steps:>6} {r.estimate_us:>11.1f} "
                     f"{r.seconds * 1e6:>12.1f} {r.busbw_gbps:>10.1f}")
    return lines


def published_lines(*, write: str | PathLike[str] | None = None,
                    inside: Sequence[Any] | None = None,
                    outside: Sequence[Any] | None = None) -> list[str]:
    """Errors of the measured-time model on every published table, in sample and
    leave-one-source-out (and the constants; refitted first and written to the file ``write``
    names where one is given).
    ``inside`` / ``outside``: the points already judged in sample / leave-one-source-out
    (:func:`~distlab.collectives.model.nccl.fit_execution.judge`,
    :func:`~distlab.collectives.model.nccl.fit_execution.leave_one_source_out`), so a caller
    that holds them does not judge them again; ``None`` judges them here."""
    from distlab.collectives.model.nccl.fit_execution import (
        CONSTANT_NAMES,
        calibration_points,
        judge,
        leave_one_source_out,
        shipped_constants,
        summarize,
        write_shipped,
    )

    points = calibration_points()
    constants = write_shipped(write) if write is not None else shipped_constants()
    lines = ["# constants (us): " + ", ".join(f"{k} {getattr(constants, k):.3f}"
                                              for k in CONSTANT_NAMES)
             + (f" (refitted, written to {write})" if write is not None else "")]
    if inside is None or write is not None:
        inside = judge(points, constants)
    if outside is None:
        outside = leave_one_source_out(points)
    in_by = {s.label: s for s in summarize(inside)}
    out_by = {s.label: s for s in summarize(outside)}
    lines.append(ERROR_LINE)
    lines.append(f"{'table':<62} {'n':>3} {'in: med':>7} {'p90':>5} {'<=20%':>5} "
                 f"{'out: med':>8} {'p90':>5} {'<=20%':>5}")
    for label, s in in_by.items():
        o = out_by[label]
        first, *rest = _label_lines(label)
        lines.append(f"{first:<62} {s.n:>3} {s.median:>6.1f}% {s.p90:>4.0f}% "
                     f"{s.within(20):>5} {o.median:>7.1f}% {o.p90:>4.0f}% "
                     f"{o.within(20):>5}")
        lines += [f"  {more}" for more in rest]
    return lines


def _label_lines(label: str, width: int = 62) -> list[str]:
    """A table's label in lines of at most ``width`` characters (the rest indented below), so
    no label is cut."""
    return textwrap.wrap(label, width, subsequent_indent="", break_on_hyphens=False) or [""]


def multinode_lines(constants: Any = None) -> list[str]:
    """Errors of the model on every published table beyond one 8-GPU box the project holds
    (``allreduce_multinode``: nodes of 8 GPUs, GB200 racks and hosts; out of sample: no constant
    is fitted on them), one line per table, then all."""
    from distlab.collectives.model.nccl.fit_execution import (
        judge,
        multinode_points,
        shipped_constants,
        summarize,
    )

    judged = judge(multinode_points(), shipped_constants() if constants is None else constants)
    lines = ["# beyond one 8-GPU box: nodes, GB200 NVLink domains (judged only, never fitted on)",
             ERROR_LINE,
             f"{'table':<62} {'n':>3} {'med':>7} {'p90':>5} {'<=20%':>5}"]
    for s in summarize(judged):
        first, *rest = _label_lines(s.label)
        lines.append(f"{first:<62} {s.n:>3} {s.median:>6.1f}% {s.p90:>4.0f}% "
                     f"{s.within(20):>5}")
        lines += [f"  {more}" for more in rest]
    return lines


def collective_lines(constants: Any = None) -> list[str]:
    """The model on every published point of another collective or of an allreduce with an
    algorithm switched off, one line each (out of sample: no constant is fitted on them), then
    each published statement of NCCL's choice beside the model's choice at the same sizes."""
    from distlab.collectives.model.nccl.fit_execution import (
        collective_points,
        judge_collectives,
        published_choices,
        shipped_constants,
    )

    points = collective_points()
    judged = judge_collectives(points, shipped_constants() if constants is None else constants)
    lines = ["# other collectives, and allreduce with an algorithm switched off (judged only, "
             "never fitted on)", ERROR_LINE,
             f"{'collective':<15} {'NCCL may use':<13} {'size':>7} {'ran':>5} {'model':>12} "
             f"{'busbw GB/s: published':>21} {'model':>6} {'time error':>10}"]
    for j, p in zip(judged, points, strict=True):
        allowed = "+".join(p["algorithms"]) if p.get("algorithms") else "any"
        run = f"{j.execution.algorithm}/{j.execution.protocol}"
        name = collective_name(p["collective"])
        lines.append(f"{name:<15} {allowed:<13} {size_label(j.nbytes):>7} "
                     f"{p['published_algorithm']:>5} {run:>12} "
                     f"{float(p['busbw_gbps']):>21.1f} {j.execution.busbw_gbps:>6.1f} "
                     f"{j.error_pct:>+9.1f}%")
    for c in published_choices():
        lines.append(f"# NCCL's choice as published: {c['system']}, NCCL {c['nccl_version']}")
        for stated, sizes, made in choice_agreement(c):
            lines.append(f"  {stated:<34} {sizes:<22} model: {made}")
    return lines


def choice_agreement(stated: dict[str, Any]) -> list[tuple[str, str, str]]:
    """For one published statement of NCCL's choice (``nccl_choice_8gpu``): per stated range,
    ``(stated algorithm/protocol, its sizes, the model's choices there)``, over every power of
    two from 32 KiB to 16 GiB."""
    from distlab.collectives.model.nccl.estimate import nccl_allreduce

    sizes = [1 << k for k in range(15, 35)]
    made = {c.nbytes: f"{c.algorithm}/{c.protocol}" for c in nccl_allreduce(
        stated["preset"], int(stated["world_size"]), sizes, nccl_version=stated["nccl_version"])}
    out = []
    for rule in stated["choices"]:
        lo, hi = int(rule.get("min_nbytes", sizes[0])), int(rule.get("max_nbytes", sizes[-1]))
        inside = [n for n in sizes if lo <= n <= hi]
        out.append((f"{rule['algorithm']}/{rule['protocol']}",
                    f"{size_label(inside[0])} to {size_label(inside[-1])}",
                    ", ".join(sorted({made[n] for n in inside}))))
    return out


def _release(text: str) -> str:
    """``--nccl-version``'s ``type=``: a release as NCCL prints it (``2.26``, ``2.26.2``,
    ``v2.26.2-1``, ``2.26.2+cuda12.8``), kept as written; one the model does not hold is priced
    with its neighbour (:func:`~distlab.collectives.model.nccl.versions.resolve_nccl_version`)."""
    try:
        nccl_release(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: a release like 2.26, 2.26.2 or 2.26.2+cuda12.8 (the "
            f"releases modelled are {', '.join(sorted(NCCL_VERSIONS))})") from None
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
    p = options.parser("python -m distlab.judge nccl", __doc__)
    p.add_argument("box", nargs="?", choices=sorted(GPU_BOXES), metavar="BOX",
                   help=f"a GPU box: {', '.join(sorted(GPU_BOXES))}")
    p.add_argument("-n", "--world-size", type=options.int_at_least(2), default=None,
                   help="GPUs (default: every GPU of the box)")
    p.add_argument("--harness", choices=sorted(HARNESSES), default="torch",
                   help="how the calls are issued: torch (one process per GPU, back-to-back "
                        "calls; default), torch-isolated (one call at a time on an idle GPU, "
                        "torch's host overhead added to each) or nccl-tests (-g: one process "
                        "drives every GPU)")
    p.add_argument("--nccl-version", type=_release, default=DEFAULT_NCCL_VERSION,
                   metavar="RELEASE",
                   help=f"the NCCL release: {', '.join(sorted(NCCL_VERSIONS))}, or as NCCL "
                        "prints it (2.26.2, 2.26.2+cuda12.8), which prices its minor release "
                        f"(default {DEFAULT_NCCL_VERSION}: 2.28.9, torch 2.11's)")
    p.add_argument("--nodes", type=options.int_at_least(1), default=1,
                   help="boxes joined by --network (default 1; NCCL 2.28.9's multi-node model)")
    p.add_argument("--network", choices=sorted(NETWORKS), default=None,
                   help="the network between nodes: " + ", ".join(sorted(NETWORKS)))
    p.add_argument("--sizes", type=options.size_list, default=None,
                   help="comma-separated sizes, e.g. 64K,1M,1G (default 64 KiB..4 GiB x4)")
    p.add_argument("--collective", type=_collective, choices=("all_reduce", *FAMILY),
                   default="all_reduce",
                   help="the collective: all_reduce (default), or all_gather, reduce_scatter or "
                        "broadcast on one node; nccl-tests' spellings (allreduce, allgather, "
                        "reducescatter) are accepted")
    p.add_argument("--published", action="store_true",
                   help="the model's error on every published table instead")
    p.add_argument("--boxes", action="store_true",
                   help="every box, network and NCCL release the model knows, where each "
                        "constant comes from and how published tables judge it")
    p.add_argument("--json", metavar="OUT", default=None, type=options.output_file,
                   help="also write the table (a BOX's, or --boxes') as JSON to OUT")
    p.add_argument("--write", nargs="?", const="execution_calibration.json", default=None,
                   metavar="PATH", type=options.output_file,
                   help="with --published: refit the constants on every published table and "
                        "write them to PATH (default: execution_calibration.json in the current "
                        "folder)")
    return p


def _nccl_command(argv: list[str]) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.write is not None and not args.published:
        p.error("--write refits the constants: use it with --published")
    if args.published + args.boxes + (args.box is not None) > 1:
        p.error("give one of BOX, --boxes or --published")
    if args.published:
        if args.json is not None:
            p.error("--json writes a BOX's table or --boxes'")
        print("\n".join(published_lines(write=args.write) + multinode_lines()
                        + collective_lines()))
        return 0
    if args.boxes:
        from distlab.judge.nccl_boxes import boxes_lines, boxes_report

        report = boxes_report()
        print("\n".join(boxes_lines(report)))
        if args.json is not None:
            write_json(args.json, report)
        return 0
    if args.box is None:
        p.error("give a BOX, --boxes or --published")
    if args.nodes > 1 and args.network is None:
        p.error(f"--nodes {args.nodes} needs --network")
    default = NCCL_VERSIONS[DEFAULT_NCCL_VERSION]
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
        print(f"python -m distlab.judge nccl: warning: {resolved.note}", file=sys.stderr)
    sizes = args.sizes or DEFAULT_SIZES
    print("\n".join(choice_lines(args.box, n, sizes, args.harness, resolved.version,
                                  nodes=args.nodes, network=args.network,
                                  collective=args.collective)))
    if args.json is not None:
        write_json(args.json, choice_json(args.box, n, sizes, args.harness, args.nccl_version,
                                          nodes=args.nodes, network=args.network))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0, 2 with one error line, or 130 on Ctrl-C (one line, no traceback)."""
    return run_main("python -m distlab.judge nccl", _nccl_command, argv,
                    on_interrupt="nothing written")


if __name__ == "__main__":
    sys.exit(main())
