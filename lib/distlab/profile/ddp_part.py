"""ddp part: the DDP lab's benchmark (naive, bucketed, distlab overlap, torch DDP; gloo ranks)."""

from __future__ import annotations

from .parts import PartContext, PartResult

__all__ = ["bench_args", "run"]


def bench_args(quick: bool, world_size: int) -> list[str]:
    """Options for :func:`distlab.bench.ddp.parse_args` (quick: 4 x Linear(256), one cap)."""
    if quick:
        return ["--world-size", str(world_size), "--layers", "4", "--width", "256",
                "--bucket-cap-mb", "0.25", "--steps", "3", "--rounds", "2"]
    return ["--world-size", str(world_size)]


def run(ctx: PartContext) -> PartResult:
    """One span on lane ``ddp/gloo``, and rank 0's traced step of each distlab variant on lanes
    ``ddp/<variant> cap <c> MB rank0/{backward,allreduce}``; needs >= 2 ranks (torchrun world
    or 2 local ranks)."""
    from distlab.bench.ddp import parse_args, run_benchmark

    ws = ctx.world_size if ctx.torchrun else 2
    if ws < 2:
        why = f"DDP needs at least 2 ranks; torchrun started {ws}"
        return PartResult("ddp", "skipped", skipped=[{"what": "ddp", "why": why}], reason=why)
    argv = bench_args(ctx.quick, ws) + ["--timeout", str(ctx.timeout)]
    with ctx.timed("ddp/gloo", f"ddp benchmark ws{ws}", world_size=ws):
        out = run_benchmark(parse_args(argv))
    for row in out["rows"]:  # rank 0's traced step of each distlab variant (torch DDP: none)
        cap = "" if row["bucket_cap_mb"] is None else f" cap {row['bucket_cap_mb']:g} MB"
        ctx.timeline.extend({**s, "lane": f"ddp/{row['variant']}{cap} {s['lane']}"}
                            for s in row["spans"])
    return PartResult("ddp", payload={**out, "options": argv})
