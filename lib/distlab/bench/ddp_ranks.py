"""The DDP benchmark's rank code: DDP variants measured side by side on live ranks.

:func:`measure_rank` runs on every rank (through :func:`distlab.launch.run`): a local
no-communication model gives the compute times (per-parameter ready times, backward, forward +
optimizer); then for ``rounds`` rounds each variant (naive, bucketed without overlap, distlab
overlap, torch DDP; per bucket cap) runs ``steps`` training steps, variants interleaved so machine
load hits them alike; one more round, untimed, records each distlab variant's spans (so tracing
costs nothing in the timed rounds). All variants train on the same batches from the same
(rank-dependent) initial weights, so their parameters must equal torch DDP's at the end
(``wrong``: parameter tensors that differ). With ``join=True`` one more variant, ``overlap+join``,
is the overlap variant trained inside ``torch.distributed.algorithms.Join`` on the same, even,
inputs: what Join costs per step when nobody runs out (two one-element allreduces per forward),
and the new options' costs beside torch's (:data:`OPTION_VARIANTS`): ``find_unused_parameters=True``
(a walk of the autograd graph per forward, a used-parameter map allreduce per backward, buckets
never rebuilt) and ``broadcast_buffers`` on a model that carries two buffers of ``width`` floats
(one broadcast per forward). Times in seconds.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.algorithms import Join
from torch.nn.parallel import DistributedDataParallel

from distlab.bench.rounds import Phases, rank_fences, timed_rounds
from distlab.clock import synced_seconds
from distlab.collectives.model.calibration import Calibration
from distlab.collectives.runtime.group import rank_device
from distlab.collectives.runtime.rounds import calibrate
from distlab.ddp.step_model import (
    StepPrediction,
    allreduce_seconds,
    join_step_seconds,
    predict,
    simulate_step,
)
from distlab.ddp.wrapper import DDP
from distlab.nets import mlp
from distlab.timeline import Timeline
from distlab.vocabulary import error_pct

__all__ = ["JOIN_VARIANT", "NOT_OVERLAPPING", "OPTION_VARIANTS", "TORCH_JOIN_VARIANT",
           "VARIANTS", "LocalTimes", "local_times", "measure_rank"]

VARIANTS = ("naive", "no-overlap", "overlap", "torch")

#: The optional variants (``join=True``): ``overlap`` and ``torch`` inside ``Join`` on even
#: inputs (torch DDP under Join is the reference for what Join itself costs).
JOIN_VARIANT = "overlap+join"
TORCH_JOIN_VARIANT = "torch+join"

#: With ``join=True`` too: (distlab variant, torch variant) for each option whose cost is shown.
OPTION_VARIANTS = {"find_unused_parameters": ("overlap+unused", "torch+unused"),
                   "broadcast_buffers": ("overlap+buffers", "torch+buffers")}

#: The variants that launch no allreduce before backward has ended (``naive`` reduces each
#: parameter, ``no-overlap`` each bucket, after it): none of their communication is hidden.
NOT_OVERLAPPING = ("naive", "no-overlap")


@dataclass(frozen=True)
class LocalTimes:
    """The model without communication: parameter sizes (bytes) in gradient-ready order, their
    median ready times (seconds from the start of backward), median backward and step seconds."""

    sizes: list[int]
    ready_s: list[float]
    backward_s: float
    step_s: float


def _ready_times(model: torch.nn.Module, x: torch.Tensor) -> tuple[list[int], list[float], float]:
    """(parameter sizes in ready order, their ready times, backward seconds) of one local step.
    On CUDA a ready time is when the hook ran on the host (the autograd engine runs a hook
    after the gradient's kernels are queued), and backward ends at a synchronize."""
    params = list(model.parameters())
    marks: list[tuple[int, float]] = []
    hs = [p.register_post_accumulate_grad_hook(
        lambda _p, i=i: marks.append((i, synced_seconds(None)))) for i, p in enumerate(params)]
    loss = model(x).pow(2).mean()
    t0 = synced_seconds(x.device)
    loss.backward()
    t1 = synced_seconds(x.device)
    for h in hs:
        h.remove()
    model.zero_grad()
    sizes = [params[i].numel() * params[i].element_size() for i, _ in marks]
    return sizes, [t - t0 for _, t in marks], t1 - t0


def local_times(layers: int, width: int, xs: list[torch.Tensor], repeats: int) -> LocalTimes:
    """Time the model alone (no DDP) over ``repeats`` passes of the batches ``xs`` (on their
    device)."""
    local = mlp(layers, width, 1).to(xs[0].device)
    opt = torch.optim.SGD(local.parameters(), lr=1e-3)
    bwd, step, ready_runs, sizes = [], [], [], []
    for _ in range(repeats):
        for x in xs:
            t0 = synced_seconds(x.device)
            sizes, ready, b = _ready_times(local, x)
            opt.step()
            step.append(synced_seconds(x.device) - t0)
            bwd.append(b)
            ready_runs.append(ready)
    ready_med = [statistics.median(r[i] for r in ready_runs) for i in range(len(sizes))]
    return LocalTimes(sizes, ready_med, statistics.median(bwd), statistics.median(step))


def _variants(rank: int, layers: int, width: int, caps: list[float], device: torch.device,
              join: bool = False
              ) -> tuple[dict[tuple[str, float], Any], dict[tuple[str, float], Timeline]]:
    """Every (variant, cap) wrapped model with its optimizer, and a Timeline per distlab one
    (``join``: the :data:`JOIN_VARIANT` too, right after ``overlap``)."""
    models: dict[tuple[str, float], Any] = {}
    timelines: dict[tuple[str, float], Timeline] = {}
    ids = [device.index] if device.type == "cuda" else None
    for cap in caps:
        names = VARIANTS if not join else VARIANTS[:3] + (JOIN_VARIANT,) + VARIANTS[3:] + (
            TORCH_JOIN_VARIANT,) + tuple(v for pair in OPTION_VARIANTS.values() for v in pair)
        for v in names:
            if v == "naive" and cap != caps[0]:
                continue
            m = mlp(layers, width, 100 + rank).to(device)
            if v.endswith("+buffers"):  # batch-norm-like running statistics, unused in forward
                m.register_buffer("running_mean", torch.full((width,), float(rank), device=device))
                m.register_buffer("running_var", torch.ones(width, device=device))
            unused = v.endswith("+unused")
            if v.startswith("torch"):
                w = DistributedDataParallel(m, device_ids=ids, bucket_cap_mb=cap,
                                            find_unused_parameters=unused)
            else:
                timelines[(v, cap)] = Timeline()
                w = DDP(m, bucket_cap_mb=cap, overlap=(v != "no-overlap"), naive=(v == "naive"),
                        timeline=timelines[(v, cap)], find_unused_parameters=unused)
            models[(v, cap)] = (w, torch.optim.SGD(w.parameters(), lr=1e-3))
    return models, timelines


def _timed_rounds(models: dict[tuple[str, float], Any],
                  timelines: dict[tuple[str, float], Timeline], xs: list[torch.Tensor],
                  rounds: int,
                  device: torch.device) -> dict[tuple[str, float], dict[str, list[float]]]:
    """Round 0 warms up (and rebuilds buckets), rounds 1..rounds-1 are timed, then one more
    round, untimed, runs with each distlab variant's timeline attached. Returns per (variant,
    cap) the step and backward seconds of every step of the timed rounds.

    The variant order does not rotate (``rotate=False``): every round runs the variants in the
    order of ``models``, the order of the committed profiles' DDP parts, so a new run is
    measured as they were."""
    keys = list(models)

    def steps(key: tuple[str, float], phases: Phases) -> None:
        w, o = models[key]
        if key[0] in (JOIN_VARIANT, TORCH_JOIN_VARIANT):
            with Join([w]):  # leaving it costs one allreduce and the final broadcast, untimed
                train(w, o, phases)
        else:
            train(w, o, phases)

    def train(w: Any, o: Any, phases: Phases) -> None:
        for x in xs:
            t0 = phases.now()
            loss = w(x).pow(2).mean()
            t1 = phases.now()
            loss.backward()
            t2 = phases.now()
            o.step()
            o.zero_grad()
            t3 = phases.now()
            phases.record("step", t3 - t0)
            phases.record("bwd", t2 - t1)

    fences = rank_fences(device)
    for key in timelines:
        models[key][0].timeline = None  # tracing would cost time in the timed rounds
    timings = timed_rounds(keys, steps, warmup=1, rounds=rounds - 1, rotate=False,
                           fences=fences)
    for key, timeline in timelines.items():
        models[key][0].timeline = timeline
    # the traced round: one more, untimed (a warm-up round records nothing)
    timed_rounds(keys, steps, warmup=1, rounds=0, rotate=False, fences=fences)
    return {k: {"step": p.get("step", []), "bwd": p.get("bwd", [])}
            for k, p in zip(keys, timings.phases, strict=True)}


def _prediction(variant: str, cap: float, local: LocalTimes, link: Calibration | None,
                world_size: int) -> StepPrediction | None:
    if link is None:
        return None
    other = max(local.step_s - local.backward_s, 0.0)
    if variant == "naive":
        comm = [allreduce_seconds(s, world_size, link) for s in local.sizes]
        return simulate_step([local.backward_s] * len(local.sizes), comm, local.backward_s,
                             overlap=False, other_s=other)
    if variant in (JOIN_VARIANT, TORCH_JOIN_VARIANT):
        other += join_step_seconds(world_size, link)
    return predict(local.sizes, local.ready_s, local.backward_s, link, world_size, cap,
                   overlap=(variant != "no-overlap"), other_s=other)


def _row(variant: str, cap: float, model: Any, reference: Any, times: dict[str, list[float]],
         pred: StepPrediction | None, local: LocalTimes,
         timeline: Timeline | None) -> dict[str, Any]:
    wrong = sum(not torch.equal(a, b) for a, b in zip(reference.parameters(),
                                                      model.module.parameters(), strict=True))
    st, bw = statistics.median(times["step"]), statistics.median(times["bwd"])
    exposed = max(bw - local.backward_s, 0.0)
    return {"variant": variant, "bucket_cap_mb": cap if variant != "naive" else None,
            "step_s": st, "backward_s": bw, "exposed_s": exposed,
            "predicted_step_s": pred.step_s if pred else None,
            "error_pct": error_pct(st, pred.step_s) if pred and pred.step_s > 0 else None,
            "wrong": int(wrong),
            "buckets": [len(b) for b in model.buckets] if not variant.startswith("torch")
            else None,
            "spans": timeline.to_dicts()[-400:] if timeline is not None else [],
            "predicted_spans": list(pred.comm_spans) if pred else []}


def measure_rank(rank: int, world_size: int, layers: int, width: int, batch: int,
                 caps: list[float], steps: int, rounds: int, calibrate_link: bool = True,
                 gpu_of_rank: tuple[int | None, ...] | None = None,
                 join: bool = False) -> dict[str, Any]:
    """Measure every variant on this rank (a :func:`distlab.launch.run` rank function); see the
    module docstring. ``gpu_of_rank`` (from :func:`distlab.devices.ddp_placement`) puts local
    rank ``r``'s model and batches on ``cuda:gpu_of_rank[r]`` (None or absent: the CPU); CUDA times
    are taken after a synchronize. Returns the local compute times, the link calibration (or
    None) and one row per (variant, cap) with step/backward/exposed seconds, the model's
    prediction, ``wrong`` and the traced spans."""
    torch.set_num_threads(1)
    local_rank = int(os.environ.get("LOCAL_RANK", rank))  # torchrun: this host's rank
    gpu = gpu_of_rank[local_rank] if gpu_of_rank else None
    device = torch.device("cpu") if gpu is None else torch.device("cuda", gpu)
    if gpu is not None:
        torch.cuda.set_device(device)
    g = torch.Generator().manual_seed(1000 + rank)
    xs = [torch.randn(batch, width, generator=g).to(device) for _ in range(steps)]
    local = local_times(layers, width, xs, max(3, rounds))
    link = calibrate(sizes=(65536, 262144, 1 << 20, 4 << 20), iters=5, warmup=2,
                     device=device if rank_device().type == "cuda" else None) \
        if calibrate_link else None
    models, timelines = _variants(rank, layers, width, caps, device, join)
    times = _timed_rounds(models, timelines, xs, rounds, device)
    rows = [_row(v, cap, w, models[("torch", cap)][0].module, times[(v, cap)],
                 _prediction(v, cap, local, link, world_size), local, timelines.get((v, cap)))
            for (v, cap), (w, _) in models.items()]
    return {"rank": rank, "local_backward_s": local.backward_s, "local_step_s": local.step_s,
            "ready_s": local.ready_s, "sizes": local.sizes, "rows": rows,
            "link": link.to_dict() if link is not None else None}
