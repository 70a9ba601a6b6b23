"""collectives part: allreduce on every usable backend, built-in next to distlab's algorithms;
all-gather, reduce-scatter, all-to-all and broadcast on the same backends (:data:`MORE_OPS`,
``bench collective``): the traffic of FSDP, ZeRO and mixture-of-experts.

gloo always runs (CPU tensors; world size 2, and 4 in a full profile); NCCL runs with one rank per
GPU (the torchrun world, or every local GPU) when there are at least two. Rows follow nccl-tests
(size, count, type, redop, time, algbw, busbw, #wrong) plus the calibrated model's predicted time
and error% for distlab's algorithms (:mod:`distlab.bench.allreduce`). Which runs a machine gets
is a pure function of its facts (:func:`plan_runs`), tested for any GPU count.

Under ``--rehearse BOX`` the facts are the fake box's (its GPU count, NCCL built), so the plan is
the one a real box of that shape gets; each NCCL run then goes on gloo ranks over CPU tensors at
the gloo sweep's sizes (:func:`stand_in`), and its result says so (``rehearsal``).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from distlab._checks import check_int
from distlab.bench.allreduce import BENCHMARK, AllreduceConfig
from distlab.bench.collective import BENCHMARK as COLLECTIVE
from distlab.bench.collective import CollectiveConfig
from distlab.collectives.algorithms.registry import BUILTIN, entry, names
from distlab.devices import nccl_problem
from distlab.envinfo import gpu_count
from distlab.profile.parts import PartContext, PartResult
from distlab.transfers.gpu_box import RehearsalBox

__all__ = [
    "MORE_OPS",
    "QUICK_ALGORITHMS",
    "CollectiveFacts",
    "facts_here",
    "plan_collective_runs",
    "plan_runs",
    "run",
    "stand_in",
]

# what ZeRO and FSDP (all-gather, reduce-scatter) and mixture-of-experts (all-to-all) are made of,
# and the broadcast every job starts with
MORE_OPS = ("all_gather", "reduce_scatter", "all_to_all", "broadcast")

QUICK_ALGORITHMS = tuple(entry("all_reduce", a).name for a in
                         (BUILTIN, "ring", "tree", "recursive_doubling", "rabenseifner"))
"""The quick profile's allreduce sweep: the builtin and the plans the calibration prices
directly."""
QUICK_CALIBRATION_SIZES = (4096, 65536, 1024 * 1024)


@dataclass(frozen=True)
class CollectiveFacts:
    """What the plan depends on: the torch build's backends, visible GPUs, torchrun's world."""

    gloo: bool
    nccl: bool
    gpus: int
    torch_version: str = ""
    torchrun: bool = False
    world_size: int = 1
    local_world_size: int = 1


def facts_here(ctx: PartContext) -> CollectiveFacts:
    """This machine's :class:`CollectiveFacts` (under ``ctx.rehearse``: the fake box's GPUs,
    with NCCL built)."""
    ok = dist.is_available()
    gpus = RehearsalBox(ctx.rehearse).n_gpus if ctx.rehearse else gpu_count()
    return CollectiveFacts(gloo=ok and dist.is_gloo_available(),
                           nccl=ok and (dist.is_nccl_available() or bool(ctx.rehearse)),
                           gpus=gpus,
                           torch_version=torch.__version__, torchrun=ctx.torchrun,
                           world_size=ctx.world_size,
                           local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE",
                                                               ctx.world_size)))


def plan_runs(facts: CollectiveFacts, quick: bool, timeout: float = 900.0,
              progress: bool = True, rounds: int | None = None
              ) -> tuple[list[AllreduceConfig], list[dict[str, str]]]:
    """The allreduce sweeps this machine supports, and the skipped ones with their reason;
    ``rounds`` (None: 20, or 5 when ``quick``) timed rounds each.

    gloo: the torchrun world, else ranks 2 (and 4 unless ``quick``); NCCL: one rank per GPU, so
    only with >= 2 GPUs (an allreduce needs two ranks, and NCCL refuses two ranks on one GPU),
    and under torchrun only when every rank has its own GPU.
    """
    if quick:
        sweep: dict[str, Any] = {"minbytes": 64 * 1024, "maxbytes": 1024 * 1024,
                                 "algorithms": QUICK_ALGORITHMS, "iters": 5, "warmup": 2,
                                 "calibration_sizes": QUICK_CALIBRATION_SIZES}
    else:
        sweep = {"minbytes": 1024, "maxbytes": 64 * 2**20,
                 "algorithms": names("all_reduce", "builtin", "plan"),
                 "iters": 20, "warmup": 5}
    if rounds is not None:
        sweep["iters"] = check_int("rounds", rounds, minimum=1)
    common = {"stepfactor": 4, "timeout": timeout, "quiet": not progress}
    runs: list[AllreduceConfig] = []
    skipped: list[dict[str, str]] = []
    if not facts.gloo:
        skipped.append({"what": "collectives/gloo", "why": "torch.distributed has no gloo"})
    else:
        for ws in [facts.world_size] if facts.torchrun else ([2] if quick else [2, 4]):
            if ws < 2:
                skipped.append({"what": f"collectives/gloo ws{ws}",
                                "why": "an allreduce needs at least 2 ranks"})
                continue
            runs.append(AllreduceConfig(world_size=ws, backend="gloo", **sweep, **common))
    why = _nccl_skip(facts)
    if why:
        skipped.append({"what": "collectives/nccl", "why": why})
    else:
        ws = facts.world_size if facts.torchrun else facts.gpus
        gpu_sweep = {**sweep, "minbytes": 1024, "maxbytes": 16 * 2**20 if quick else 2**30}
        runs.append(AllreduceConfig(world_size=ws, backend="nccl", **gpu_sweep, **common))
    return runs, skipped


def plan_collective_runs(facts: CollectiveFacts, quick: bool, timeout: float = 900.0,
                         progress: bool = True) -> list[CollectiveConfig]:
    """The ``bench collective`` sweeps of :data:`MORE_OPS` (every algorithm and the built-in):
    on gloo, the torchrun world, else 2 ranks (and 4 unless ``quick``); on NCCL, where
    :func:`plan_runs` runs NCCL's allreduce (one rank per GPU, at least two GPUs), the same world
    and sizes up to 1 GiB (16 MiB when ``quick``). Why NCCL is skipped is said once, by
    :func:`plan_runs`."""
    gloo: dict[str, Any] = ({"minbytes": 64 * 1024, "maxbytes": 1024 * 1024, "iters": 5,
                             "warmup": 2} if quick else
                            {"minbytes": 1024, "maxbytes": 64 * 2**20, "iters": 9,
                             "warmup": 2})
    common = {"stepfactor": 4, "timeout": timeout, "quiet": not progress}
    worlds = [facts.world_size] if facts.torchrun else ([2] if quick else [2, 4])
    runs = [CollectiveConfig(op=op, world_size=ws, backend="gloo", **gloo, **common)
            for op in MORE_OPS for ws in worlds if ws >= 2] if facts.gloo else []
    if not _nccl_skip(facts):
        ws = facts.world_size if facts.torchrun else facts.gpus
        nccl = {**gloo, "minbytes": 1024, "maxbytes": 16 * 2**20 if quick else 2**30}
        runs += [CollectiveConfig(op=op, world_size=ws, backend="nccl", **nccl, **common)
                 for op in MORE_OPS]
    return runs


Sweep = TypeVar("Sweep", AllreduceConfig, CollectiveConfig)


def stand_in(c: Sweep) -> tuple[Sweep, dict[str, str] | None]:
    """A rehearsal's run of ``c``: an NCCL sweep goes on gloo ranks at the gloo quick sweep's
    sizes (64 KiB .. 1 MiB), with the label its result carries; a gloo sweep is itself."""
    if c.backend != "nccl":
        return c, None
    label = {"stands_for": "nccl", "ran_on": "gloo (CPU tensors)",
             "why": "rehearsal: no GPU here; the plan is the real box's, the sizes the gloo "
                    "sweep's"}
    return replace(c, backend="gloo", minbytes=64 * 1024,
                   maxbytes=max(64 * 1024, min(c.maxbytes, 1024 * 1024))), label


def _nccl_skip(facts: CollectiveFacts) -> str:
    """Why NCCL cannot run here ("" when it can): :func:`distlab.devices.nccl_problem` for the
    torchrun world (its ranks on this host) or one local rank per GPU."""
    ranks = facts.world_size if facts.torchrun else facts.gpus
    local = facts.local_world_size if facts.torchrun else facts.gpus
    return nccl_problem(facts.gpus, max(ranks, 1), max(local, 1), nccl_built=facts.nccl,
                        torch_version=facts.torch_version)


def _lane_backend(planned: AllreduceConfig | CollectiveConfig,
                  label: dict[str, str] | None) -> str:
    """The backend a trace lane names: the planned one, and for a rehearsal's stand-in what it
    ran on (``nccl (rehearsal on gloo)``), so its calls never share a lane with gloo's own."""
    return f"{planned.backend} (rehearsal on gloo)" if label else planned.backend


def _add_rank_spans(ctx: PartContext, backend: str, c: AllreduceConfig,
                    spans: list[list[dict[str, Any]]], hosts: list[str | None]) -> None:
    """Every timed call of every rank on lane ``collectives/<backend> ws<n> rank<r>``, from the
    ranks on this host (spans of ranks on another host are on that host's clock: left out, and
    the trace says so)."""
    here = socket.gethostname()
    elsewhere = []
    for rank, (rank_spans, host) in enumerate(zip(spans, hosts, strict=True)):
        if host != here:
            elsewhere.append(rank)
            continue
        lane = f"collectives/{backend} ws{c.ranks} rank{rank}"
        ctx.timeline.extend({**s, "lane": lane} for s in rank_spans)
    if elsewhere:
        ctx.timeline.add_note(f"collectives {backend} ws{c.ranks}: calls of ranks "
                              f"{elsewhere} left out of the trace (another host's clock)")


def run(ctx: PartContext) -> PartResult:
    """Run every planned sweep; each is one span on lane ``collectives/<backend>``, and every
    timed call of every rank on this host one span on ``collectives/<backend> ws<n> rank<r>``."""
    facts = facts_here(ctx)
    runs, skipped = plan_runs(facts, ctx.quick, ctx.timeout, ctx.progress, ctx.rounds)
    results = []
    for planned in runs:
        c, label = stand_in(planned) if ctx.rehearse else (planned, None)
        with ctx.timed(f"collectives/{_lane_backend(planned, label)}",
                       f"allreduce sweep ws{c.ranks}", world_size=c.ranks):
            report = BENCHMARK.run(c)
        _add_rank_spans(ctx, _lane_backend(planned, label), c, report.extra["spans"],
                        report.extra["hosts"])
        results.append({"backend": planned.backend, "world_size": c.ranks, "sizes": c.sizes,
                        "algorithms": list(c.algorithms), "iters": c.iters, "warmup": c.warmup,
                        "calibration": report.data["calibration"], "rows": report.rows,
                        **({"rehearsal": label} if label else {})})
    more = []
    for planned in plan_collective_runs(facts, ctx.quick, ctx.timeout, ctx.progress):
        c, label = stand_in(planned) if ctx.rehearse else (planned, None)
        with ctx.timed(f"collectives/{_lane_backend(planned, label)}",
                       f"{c.op} sweep ws{c.ranks}", world_size=c.ranks):
            report = COLLECTIVE.run(c)
        more.append({"op": c.op, "backend": planned.backend, "world_size": c.ranks,
                     "sizes": c.sizes, "algorithms": c.names, "iters": c.iters,
                     "warmup": c.warmup, "calibration": report.data["calibration"],
                     "rows": report.rows, **({"rehearsal": label} if label else {})})
    status = "ok" if results else "skipped"
    reason = "" if results else "; ".join(dict.fromkeys(s["why"] for s in skipped))
    return PartResult("collectives", status, {"runs": results, "collective_runs": more},
                      skipped, reason)
