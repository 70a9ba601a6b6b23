"""Command line of ``python -m distlab.profile``: what it measures, where it writes, how it stops.

    python -m distlab.profile [--out DIR] [--quick] [--only env,transfers,gpus,collectives,ddp]
                              [--rounds N] [--rehearse BOX]
    torchrun --nproc-per-node 8 -m distlab.profile     # every rank measures, rank 0 writes
    torchrun --nproc-per-node 8 -m distlab.profile --quick --rehearse dgx_h100_like  # no GPU

Runs the parts in order (env, transfers, gpus, collectives, ddp), prints one line for every part or
step it skipped and why, and writes the profile folder. The folder is checked before anything is
measured (a path that names a file, or where nothing can be created: one line, exit 2). Ctrl-C
stops cleanly: the ranks in flight are stopped, the parts already measured are written and the
profile is marked incomplete (exit 130). Exit status 1 when a part failed or a row came out
wrong, 2 for a bad option.

``--rehearse BOX`` rehearses a multi-GPU run on a machine without one: every decision that reads
the GPU count or topology takes the fake box's (an 8-GPU DGX-H100-like box, a PCIe box with two
switches, the same with peer access off, one GPU), host memory stands in for each GPU, gloo for
NCCL and the CPU for CUDA DDP, and every row so made is labelled rehearsal, in the JSON, the
verdict and ``summary.md``: the first real run on such a box meets no branch that never ran.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from distlab.cli import options, progress
from distlab.cli.run import INTERRUPTED, run_main
from distlab.profile.parts import PART_NAMES, PartContext, PartResult, get_part
from distlab.transfers.gpu_box import REHEARSAL_BOXES

__all__ = ["main"]


def _parser() -> options.argparse.ArgumentParser:
    p = options.parser("python -m distlab.profile", __doc__)
    p.add_argument("--out", default=None, type=options.output_dir, metavar="DIR",
                   help="profile folder (default: results/profiles/<host>-<YYYY-MM-DD>, with "
                        "-quick appended for --quick)")
    p.add_argument("--quick", action="store_true",
                   help="small sizes and few repeats (about 15 s on a 2-core CPU box; the full "
                        "profile takes about 5 min there)")
    p.add_argument("--only", type=options.comma_choices(PART_NAMES), default="all",
                   help=f"comma list of {', '.join(PART_NAMES)}, or 'all'")
    p.add_argument("--timeout", type=options.positive_float, default=900.0,
                   help="seconds allowed for each multi-process measurement")
    p.add_argument("--rounds", type=options.positive_int, default=None,
                   help="timed rounds per allreduce sweep (default 20, 5 with --quick): a "
                        "row's mean is known to about 1/sqrt(rounds) of its rounds' spread, "
                        "and the collectives part's time grows with it")
    p.add_argument("--rehearse", choices=tuple(REHEARSAL_BOXES), default=None, metavar="BOX",
                   help="rehearse a multi-GPU box without its GPUs (host memory for each GPU, "
                        "gloo for NCCL; every row labelled rehearsal): "
                        f"{', '.join(REHEARSAL_BOXES)}")
    p.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    return p


def _wrong(result: PartResult) -> int:
    if result.name == "gpus" and result.status == "ok":
        return int(result.payload.get("wrong", 0))
    if result.name != "collectives" or result.status != "ok":
        return 0
    runs = result.payload["runs"] + result.payload.get("collective_runs", [])
    return sum(r["wrong"] for run in runs for r in run["rows"])


def _agree(result: PartResult, timeout: float) -> PartResult:
    """Under torchrun: every rank learns every rank's status of this part (without a process
    group), so a part that failed on one rank is failed on all, with that rank's reason, and
    the next part starts together (its peers' collectives failed within seconds: the failed
    rank closed its process group). A rank waits ``timeout`` seconds for the others: a part that
    rank 0 measures alone (``gpus``) keeps the others waiting while it runs."""
    from distlab import launch

    try:
        posted = launch.torchrun_exchange(f"profile/{result.name}",
                                          json.dumps([result.status, result.reason]),
                                          timeout=timeout)
    except TimeoutError as exc:
        return PartResult(result.name, "failed", reason=str(exc), seconds=result.seconds)
    bad = [(r, *json.loads(v)) for r, v in enumerate(posted) if json.loads(v)[0] == "failed"]
    if not bad or result.status == "failed":
        return result
    why = "; ".join(f"rank {r}: {reason}" for r, _, reason in bad)
    return PartResult(result.name, "failed", reason=f"failed on other ranks: {why}",
                      skipped=result.skipped, seconds=result.seconds)


def _round_lines_in(bar: tqdm, part: str, shown: bool) -> Any:
    """While a bar is shown: the round lines of ``part``'s benchmarks (printed by its ranks)
    go into the bar's postfix, ``part: allreduce round 3/7``, instead of breaking its line."""
    if not shown:
        return contextlib.nullcontext()
    return progress.relay(lambda line: bar.set_postfix_str(f"{part}: {_plain(line)}"))


def _plain(line: str, width: int = 48) -> str:
    """``[allreduce] round 3/7: 3 sizes x 5 algorithms`` -> ``allreduce round 3/7: 3 sizes x
    5 algorithms`` cut to ``width`` characters: a bar's postfix stays short and bracket-free."""
    text = " ".join(line.replace("[", "").replace("]", "").split())
    return text if len(text) <= width else text[:width - 3] + "..."


def skip_lines(result: PartResult) -> list[str]:
    """One ``skipped ...: why`` line per reason of ``result``'s skipped steps (steps skipped for
    the same reason share a line); a part skipped whole is said by these lines alone."""
    by_why: dict[str, list[str]] = {}
    for s in result.skipped:
        by_why.setdefault(str(s["why"]), []).append(str(s["what"]))
    return [f"skipped {', '.join(whats)}: {why}" for why, whats in by_why.items()]


def main(argv: list[str] | None = None) -> int:
    """Parse, run the parts, write the profile on rank 0; returns the exit status (Ctrl-C
    outside the parts: one line, exit 130, :func:`distlab.cli.run.run_main`)."""
    return run_main("python -m distlab.profile", _profile_command, argv,
                    on_interrupt="nothing was written")


def _profile_command(argv: list[str]) -> int:
    # torch and the benchmarks load here, inside run_main: Ctrl-C while they load is one line
    from distlab import launch
    from distlab.profile.writer import INDEX, default_out, write_profile

    p = _parser()
    a = p.parse_args(argv)
    out: Path = a.out if a.out is not None else default_out(a.quick)
    why = options.output_problem(out, "dir")  # --out was checked by its type; this is the default
    if why is not None:
        p.error(f"argument --out: cannot write to the default {str(out)!r}: {why}; name a "
                "folder with --out")
    torchrun = launch.in_torchrun()
    rank = int(os.environ.get("RANK", "0")) if torchrun else 0
    ctx = PartContext(quick=a.quick, world_size=int(os.environ.get("WORLD_SIZE", "1")),
                      rank=rank, progress=not a.no_progress and rank == 0, timeout=a.timeout,
                      torchrun=torchrun, rounds=a.rounds, rehearse=a.rehearse)
    results: list[PartResult] = []
    stopped = None
    bar = tqdm(a.only, desc="profile", file=sys.stderr, disable=not ctx.progress)

    def say(text: str) -> None:  # above the bar, which is redrawn below it
        if rank == 0:
            tqdm.write(text, file=sys.stdout)
            sys.stdout.flush()

    name, start = None, 0.0
    try:
        for name in bar:
            bar.set_postfix_str(name)
            start = time.perf_counter()
            with ctx.timed("profile/parts", name), _round_lines_in(bar, name, ctx.progress):
                try:
                    result = get_part(name)(ctx)
                except Exception as exc:  # a failed part is reported; the others still run
                    result = PartResult(name, "failed", reason=f"{type(exc).__name__}: {exc}")
                    if torchrun:  # peers waiting to make a process group with us: stop them
                        launch.torchrun_abort(result.reason)
            result.seconds = time.perf_counter() - start
            if torchrun:
                result = _agree(result, ctx.timeout)
            results.append(result)
            name = None
            for line in skip_lines(result):
                say(line)
            if result.status == "ok":
                say(f"measured {result.name} in {result.seconds:.1f} s")
            elif result.status != "skipped" or not result.skipped:
                say(f"{result.status} {result.name}: {result.reason}")
    except KeyboardInterrupt:
        stopped = "interrupted by Ctrl-C"
        if name is not None:  # the part in flight
            results.append(PartResult(name, "interrupted", reason=stopped,
                                      seconds=time.perf_counter() - start))
        say(f"stopped: {stopped}; writing the parts measured so far, marked incomplete")
    finally:
        bar.close()
    if rank != 0:
        return INTERRUPTED if stopped else 0
    try:
        index = write_profile(out, results, list(a.only), ctx.timeline, quick=a.quick,
                              rehearsal=a.rehearse,
                              world_size=ctx.world_size, stopped=stopped)
    except (OSError, KeyboardInterrupt) as exc:
        why = "interrupted by Ctrl-C" if isinstance(exc, KeyboardInterrupt) else \
            f"{type(exc).__name__}: {exc}"
        left = f"{out} holds part of it and no {INDEX}, so it is not a profile" \
            if out.is_dir() and not (out / INDEX).is_file() else f"{out} is not a complete profile"
        print(f"python -m distlab.profile: error: writing the profile failed ({why}); {left}",
              file=sys.stderr)
        return INTERRUPTED if isinstance(exc, KeyboardInterrupt) else 1
    say(f"wrote {out} ({'complete' if index['complete'] else 'INCOMPLETE'})")
    if stopped:
        return INTERRUPTED
    bad = any(r.status == "failed" for r in results) or any(_wrong(r) for r in results)
    return 1 if bad else 0
