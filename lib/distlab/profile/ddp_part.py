"""ddp part: the DDP lab's benchmark (naive, bucketed, distlab overlap, torch DDP) on the device
:func:`ddp_device` picks: CUDA when there is a GPU (NCCL with one GPU per rank, else gloo ranks
sharing it), the CPU otherwise. Under ``--rehearse BOX`` the placement is the fake box's, and a
CUDA placement runs on the CPU (gloo), its result labelled ``rehearsal``."""

from __future__ import annotations

import os

from distlab.bench.ddp import BENCHMARK, DdpConfig
from distlab.devices import gpu_sharing_problem
from distlab.envinfo import gpu_count
from distlab.profile.parts import PartContext, PartResult
from distlab.transfers.gpu_box import RehearsalBox

__all__ = ["config_for", "ddp_device", "run"]


def config_for(quick: bool, world_size: int, timeout: float, device: str = "auto") -> DdpConfig:
    """The DDP benchmark's config (quick: 4 x Linear(256), one cap, few steps)."""
    if quick:
        return DdpConfig(world_size=world_size, layers=4, width=256, bucket_cap_mb=(0.25,),
                         steps=3, rounds=1, timeout=timeout, device=device)
    return DdpConfig(world_size=world_size, timeout=timeout, device=device)


def ddp_device(gpus: int, torchrun: bool, local_world_size: int) -> tuple[str, str]:
    """``(device, why CUDA is skipped or "")`` for the profile's DDP part: CUDA when there is a
    GPU, except under torchrun when the host's ranks cannot each own one (then every rank runs
    DDP on the CPU, and says why)."""
    problem = gpu_sharing_problem(gpus, local_world_size) if torchrun else ""
    if gpus == 0:
        return "cpu", ""
    return ("cpu", problem) if problem else ("cuda", "")


def run(ctx: PartContext) -> PartResult:
    """One span on lane ``ddp/<device>``, and rank 0's traced step of each distlab variant on lanes
    ``ddp/<variant> cap <c> MB rank0/{backward,allreduce}``; needs >= 2 ranks (torchrun world
    or 2 local ranks)."""
    ws = ctx.world_size if ctx.torchrun else 2
    if ws < 2:
        why = f"DDP needs at least 2 ranks; torchrun started {ws}"
        return PartResult("ddp", "skipped", skipped=[{"what": "ddp", "why": why}], reason=why)
    gpus = RehearsalBox(ctx.rehearse).n_gpus if ctx.rehearse else gpu_count()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", ws)) if ctx.torchrun else ws
    device, why = ddp_device(gpus, ctx.torchrun, local)
    skipped = [{"what": "ddp/cuda", "why": why}] if why else []
    rehearsal = None
    if ctx.rehearse and device == "cuda":
        rehearsal = {"stands_for": "cuda", "ran_on": "cpu (gloo)",
                     "why": "rehearsal: no GPU here; the placement is the real box's"}
        device = "cpu"
    config = config_for(ctx.quick, ws, ctx.timeout, device)
    with ctx.timed(f"ddp/{device}", f"ddp benchmark ws{ws}", world_size=ws):
        report = BENCHMARK.run(config)
    for row in report.rows:  # rank 0's traced step of each distlab variant (torch DDP: none)
        cap = "" if row["bucket_cap_mb"] is None else f" cap {row['bucket_cap_mb']:g} MB"
        ctx.timeline.extend({**s, "lane": f"ddp/{row['variant']}{cap} {s['lane']}"}
                            for s in row["spans"])
    return PartResult("ddp", payload={"config": config.to_dict(), "rows": report.rows,
                                      **report.data,
                                      **({"rehearsal": rehearsal} if rehearsal else {})},
                      skipped=skipped)
