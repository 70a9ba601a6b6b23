"""Rank functions used only by tests/pipeline_parallel (importable by spawned ranks).

The model is :func:`distlab.nets.mlp` (Linear + ReLU layers, seeded): stage ``s`` holds layers
``[s * per_stage, (s + 1) * per_stage)`` of one full model built on every rank, so a gradient is
named by the full model's parameter name and compared with a one-process run of the same model.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import distlab.pipeline_parallel.runtime as ours
from distlab.nets import mlp
from distlab.pipeline_parallel.schedules.registry import build_plan
from distlab.timeline import Timeline

WIDTH = 16
BATCH = 8
MICROBATCHES = 4
STEPS = 2
SINGLE = ("GPipe", "1F1B")


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error (a plain function: both APIs call ``loss_fn(output, target)``)."""
    return torch.nn.functional.mse_loss(output, target)


def full_model(num_stages: int, per_stage: int = 1, seed: int = 0) -> nn.Sequential:
    """``mlp(num_stages * per_stage, WIDTH, seed)``."""
    return mlp(num_stages * per_stage, WIDTH, seed)


def stage_module(model: nn.Sequential, stage: int, per_stage: int = 1) -> nn.Sequential:
    """Stage ``stage``'s layers of ``model`` (the same module objects)."""
    mods = list(model)
    return nn.Sequential(*mods[2 * per_stage * stage: 2 * per_stage * (stage + 1)])


def batches(steps: int = STEPS, *, batch: int = BATCH, seed: int = 1,
            replicas: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` seeded ``(x, y)`` pairs of ``batch * replicas`` samples."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch * replicas, WIDTH, generator=g),
             torch.randn(batch * replicas, WIDTH, generator=g)) for _ in range(steps)]


def reference(num_stages: int, per_stage: int = 1, microbatches: int = MICROBATCHES,
              replicas: int = 1, model: nn.Module | None = None,
              batch: int = BATCH) -> list[dict[str, Any]]:
    """One process, the whole batch: per step the loss of each microbatch (of each replica's
    share, in replica then microbatch order) and every gradient of the mean loss."""
    model = model if model is not None else full_model(num_stages, per_stage)
    out = []
    for x, y in batches(replicas=replicas, batch=batch):
        model.zero_grad(set_to_none=True)
        pred = model(x)
        loss_fn(pred, y).backward()
        losses = [float(loss_fn(p, t)) for xs, ys in zip(x.chunk(replicas), y.chunk(replicas),
                                                         strict=True)
                  for p, t in zip(model(xs).detach().tensor_split(microbatches),
                                  ys.tensor_split(microbatches), strict=True)]
        out.append({"losses": losses, "output": pred.detach(),
                    "grads": {n: p.grad.clone() for n, p in model.named_parameters()}})
    return out


def _stage_ids(schedule: str, ranks: int, rank: int) -> tuple[int, ...]:
    spr = 1 if schedule in SINGLE else 2
    return build_plan(schedule, ranks, MICROBATCHES, spr).stages_of(rank)


def torch_style_script(api: ModuleType, rank: int, schedule: str, group: Any = None,
                       data: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
                       wrap: Any = None, **extra: Any) -> dict[str, Any]:
    """A torch pipelining script: ``api`` is ``torch.distributed.pipelining`` or
    ``distlab.pipeline_parallel.runtime`` and nothing else changes. Returns per step this
    rank's gradients by full-model name, the losses and the output (last stage only), and
    distlab's step stats and timeline spans where ``api`` is distlab's; ``allreduces``: per
    stage, the collectives a distlab DDP wrapper issued."""
    ranks = dist.get_world_size(group)
    prank = dist.get_rank(group)
    ids = _stage_ids(schedule, ranks, prank)
    num_stages = ranks * len(ids)
    model = full_model(num_stages)
    mods = {s: stage_module(model, s) for s in ids}
    if wrap is not None:
        mods = {s: wrap(m) for s, m in mods.items()}
    stages = [api.PipelineStage(mods[s], s, num_stages, torch.device("cpu"), group=group)
              for s in ids]
    cls = getattr(api, "Schedule" + schedule)
    sched = cls(stages[0] if schedule in SINGLE else stages, MICROBATCHES, loss_fn=loss_fn,
                **extra)
    first, last = 0 in ids, num_stages - 1 in ids
    steps = []
    for x, y in data or batches():
        model.zero_grad(set_to_none=True)
        losses: list[Any] = []
        args = (x,) if first else ()
        kw = {"target": y, "losses": losses} if last else {}
        out = sched.step(*args, **kw)
        step: dict[str, Any] = {
            "grads": {n: p.grad.clone() for n, p in model.named_parameters()
                      if p.grad is not None},
            "losses": [float(v.detach()) for v in losses] if last else None,
            "output": out.detach().clone() if last else None}
        stats = getattr(sched, "last_step_stats", None)
        if stats is not None:
            step["stats"] = {k: getattr(stats, k) for k in (
                "step_seconds", "compute_seconds", "p2p_wait_seconds",
                "peak_activation_nbytes", "peak_in_flight", "compute_actions",
                "bubble_fraction")}
            step["stats"]["saved_nbytes"] = dict(stats.saved_nbytes)
        steps.append(step)
    counts = {s: m.allreduce_count for s, m in mods.items() if hasattr(m, "allreduce_count")}
    return {"stages": list(ids), "steps": steps, "allreduces": counts}


def every_schedule(rank: int, world_size: int, schedules: list[str],
                   with_torch: list[str]) -> dict[str, Any]:
    """distlab's run of each schedule in ``schedules`` (its timeline's spans included) and
    torch's run of each in ``with_torch``, the same script with the other import."""
    import torch.distributed.pipelining as torch_pp

    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    for name in schedules:
        tl = Timeline()
        res = torch_style_script(ours, rank, name, timeline=tl, timeout=60.0)
        res["spans"] = tl.to_dicts()
        out[name] = {"ours": res}
    for name in with_torch:
        out[name]["torch"] = torch_style_script(torch_pp, rank, name)
    return out


def dp_times_pp(rank: int, world_size: int, runs: list[tuple[str, str]]) -> dict[str, Any]:
    """4 ranks: 2 pipeline ranks x 2 data-parallel replicas. Pipeline groups {0, 1} and
    {2, 3}; replica groups {0, 2} and {1, 3}; every stage module wrapped in a DDP on its replica
    group (``runs``: ``(schedule, "distlab" or "torch")``, distlab's :class:`~distlab.ddp.DDP`
    or torch's); replica r trains on its half of each batch."""
    from distlab.ddp import DDP

    torch.set_num_threads(1)
    pipes = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    reps = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    replica, prank = divmod(rank, 2)
    pipe, rep = pipes[replica], reps[prank]
    data = [(x.chunk(2)[replica], y.chunk(2)[replica]) for x, y in batches(replicas=2)]
    wrappers = {"distlab": lambda m: DDP(m, process_group=rep),
                "torch": lambda m: torch.nn.parallel.DistributedDataParallel(
                    m, process_group=rep)}
    return {f"{name} {ddp}": torch_style_script(ours, rank, name, group=pipe, data=data,
                                                wrap=wrappers[ddp], timeout=60.0)
            for name, ddp in runs}


ZERO_LR = 1e-2
"""Adam's learning rate in the ZeRO runs and their one-process reference."""


def zero_reference(num_stages: int, steps: int = STEPS) -> list[dict[str, Any]]:
    """One process, the whole model on the concatenated batch of both replicas, trained with
    ``torch.optim.Adam(lr=ZERO_LR)``: per step the loss of each microbatch of each replica's
    half (replica then microbatch order, before the step) and every parameter after the step."""
    model = full_model(num_stages)
    opt = torch.optim.Adam(model.parameters(), lr=ZERO_LR)
    out = []
    for x, y in batches(steps, replicas=2):
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            losses = [float(loss_fn(model(xm), ym))
                      for xs, ys in zip(x.chunk(2), y.chunk(2), strict=True)
                      for xm, ym in zip(xs.tensor_split(MICROBATCHES),
                                        ys.tensor_split(MICROBATCHES), strict=True)]
        loss_fn(model(x), y).backward()
        opt.step()
        out.append({"losses": losses,
                    "params": {n: p.detach().clone() for n, p in model.named_parameters()}})
    return out


def zero_times_pp(rank: int, world_size: int, runs: list[tuple[str, int]]) -> dict[str, Any]:
    """4 ranks as :func:`dp_times_pp` (pipeline groups {0, 1}, {2, 3}; replica groups {0, 2},
    {1, 3}), every stage module in a :class:`~distlab.zero.ZeroDataParallel` of ZeRO stage
    ``zero`` on its replica group (Adam, ``lr=ZERO_LR``), passed to ``PipelineStage`` as it is;
    per ``(schedule, zero)`` of ``runs``, :data:`STEPS` steps of ``schedule.step()`` then
    ``ZeroDataParallel.step()``. Returns per run and step the parameters of this rank's stages
    after the step, gathered (``full_state_dict``) and named as in the full model, and the
    losses (last stage's rank only); ``reductions``: per stage, the gradient collectives
    (reduce-scatters, all-reduces at stage 0) its ZeroDataParallel ran in all the steps."""
    from distlab.zero import ZeroDataParallel

    torch.set_num_threads(1)
    pipes = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    reps = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    replica, prank = divmod(rank, 2)
    pipe, rep = pipes[replica], reps[prank]
    data = [(x.chunk(2)[replica], y.chunk(2)[replica]) for x, y in batches(replicas=2)]
    out: dict[str, Any] = {}
    for schedule, zero in runs:
        ids = _stage_ids(schedule, 2, prank)
        num_stages = 2 * len(ids)
        model = full_model(num_stages)
        full_name = {id(p): n for n, p in model.named_parameters()}
        mods = {s: stage_module(model, s) for s in ids}
        names = {s: {n: full_name[id(p)] for n, p in m.named_parameters()}
                 for s, m in mods.items()}
        zdps = {s: ZeroDataParallel(m, zero, lr=ZERO_LR, group=rep, timeline=Timeline(),
                                    timeout=60.0) for s, m in mods.items()}
        try:
            stages = [ours.PipelineStage(zdps[s], s, num_stages, "cpu", group=pipe)
                      for s in ids]
            cls = getattr(ours, "Schedule" + schedule)
            sched = cls(stages[0] if schedule in SINGLE else stages, MICROBATCHES,
                        loss_fn=loss_fn, timeout=60.0)
            first, last = 0 in ids, num_stages - 1 in ids
            steps = []
            for x, y in data:
                losses: list[Any] = []
                sched.step(*((x,) if first else ()),
                           **({"target": y, "losses": losses} if last else {}))
                for z in zdps.values():
                    z.step()
                params = {names[s][n]: t for s, z in zdps.items()
                          for n, t in z.full_state_dict().items()}
                steps.append({"params": params,
                              "losses": [float(v) for v in losses] if last else None})
        finally:
            for z in zdps.values():
                z.close()
        reductions = {s: sum(1 for sp in z.timeline.spans
                             if sp.category in ("reduce_scatter", "allreduce"))
                      for s, z in zdps.items()}
        out[f"{schedule} ZeRO-{zero}"] = {"steps": steps, "reductions": reductions}
    return out


def bad_input_shape(rank: int, world_size: int) -> None:
    """Stage 1's ``input_args`` expect width 8; stage 0 sends width 16."""
    model = full_model(2)
    example = torch.zeros(2, 8) if rank == 1 else None
    stage = ours.PipelineStage(stage_module(model, rank), rank, 2, "cpu", input_args=example)
    sched = ours.ScheduleGPipe(stage, MICROBATCHES, loss_fn=loss_fn, timeout=20.0)
    x, y = batches(1)[0]
    sched.step(x) if rank == 0 else sched.step(target=y)


class _Fails(nn.Module):
    def __init__(self, inner: nn.Module, on_call: int, how: str) -> None:
        super().__init__()
        self.inner, self.on_call, self.how, self.calls = inner, on_call, how, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == self.on_call:
            if self.how == "raise":
                raise RuntimeError("stage 1 failed on purpose in its forward of microbatch 2")
            time.sleep(3600)
        return self.inner(x)


def stage_fails(rank: int, world_size: int, schedule: str, how: str,
                timeout: float) -> None:
    """Rank 1's stage raises (``how="raise"``) or hangs (``"hang"``) in its third forward."""
    ids = _stage_ids(schedule, world_size, rank)
    num_stages = world_size * len(ids)
    model = full_model(num_stages)
    stages = []
    for s in ids:
        mod: nn.Module = stage_module(model, s)
        if rank == 1 and s == ids[0]:
            mod = _Fails(mod, 3, how)
        stages.append(ours.PipelineStage(mod, s, num_stages, "cpu"))
    cls = ours.get_schedule_class(schedule)
    sched = cls(stages[0] if schedule in SINGLE else stages, MICROBATCHES, loss_fn=loss_fn,
                timeout=timeout)
    x, y = batches(1)[0]
    first, last = 0 in ids, num_stages - 1 in ids
    sched.step(*((x,) if first else ()), **({"target": y} if last else {}))


def stage_fails_caught(rank: int, world_size: int, timeout: float) -> dict[str, Any]:
    """Rank 1's stage raises in its third forward (1F1B); every rank catches its own error
    and returns it with the seconds its step ran, so rank 0 has to stop by itself."""
    t0 = time.monotonic()
    try:
        stage_fails(rank, world_size, "1F1B", "raise", timeout)
    except Exception as exc:  # noqa: BLE001 - the error is the result
        return {"error": f"{type(exc).__name__}: {exc}", "kind": getattr(exc, "kind", None),
                "seconds": time.monotonic() - t0}
    return {"error": None, "kind": None, "seconds": time.monotonic() - t0}


class TupleOut(nn.Module):
    """Stage 0 of :func:`tuple_model`: ``(relu(lin(x)), ids)`` with ``ids`` an int64 tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.relu(self.lin(x)), (x[:, 0] > 0).long()


class TupleIn(nn.Module):
    """Stage 1 of :func:`tuple_model`: ``lin(h)`` where ``ids`` is 1, zeros elsewhere."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, h: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.lin(h) * ids.unsqueeze(1).to(h.dtype)


class TupleNet(nn.Sequential):
    """``TupleIn()(*TupleOut()(x))``: two stages passing a float and an int64 tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self[1](*self[0](x))


def tuple_model(seed: int = 0) -> TupleNet:
    """A seeded :class:`TupleNet`."""
    torch.manual_seed(seed)
    return TupleNet(TupleOut(), TupleIn())


def odd_shapes(rank: int, world_size: int) -> dict[str, Any]:
    """Two 2-rank 1F1B runs: a stage boundary carrying ``(float, int64)`` (only the float one
    gets a gradient), and a batch of 10 in 4 microbatches of 3, 3, 2, 2 samples, then an
    ``eval()`` step of the latter."""
    out: dict[str, Any] = {}
    model = tuple_model()
    stage = ours.PipelineStage(model[rank], rank, 2, "cpu")
    sched = ours.Schedule1F1B(stage, MICROBATCHES, loss_fn=loss_fn)
    runs = []
    for x, y in batches():
        model.zero_grad(set_to_none=True)
        losses: list[Any] = []
        sched.step(x) if rank == 0 else sched.step(target=y, losses=losses)
        runs.append({"grads": {n: p.grad.clone() for n, p in model.named_parameters()
                               if p.grad is not None},
                     "losses": [float(v) for v in losses] if rank == 1 else None})
    out["tuple"] = runs
    model = full_model(2)
    stage = ours.PipelineStage(stage_module(model, rank), rank, 2, "cpu")
    sched = ours.Schedule1F1B(stage, MICROBATCHES, loss_fn=loss_fn)
    runs = []
    for x, y in batches(batch=10):
        model.zero_grad(set_to_none=True)
        losses = []
        sched.step(x) if rank == 0 else sched.step(target=y, losses=losses)
        runs.append({"grads": {n: p.grad.clone() for n, p in model.named_parameters()
                               if p.grad is not None},
                     "losses": [float(v) for v in losses] if rank == 1 else None})
    out["uneven"] = runs
    x, y = batches(1, batch=10)[0]
    losses = []
    res = sched.eval(x) if rank == 0 else sched.eval(target=y, losses=losses)
    out["eval"] = {"output": res, "losses": [float(v) for v in losses]}
    return out


def misuse(rank: int, world_size: int) -> dict[str, str]:
    """The error of each misuse on 2 ranks (both ranks run each one)."""
    errors: dict[str, str] = {}

    def attempt(name: str, fn: Any) -> None:
        try:
            fn()
            errors[name] = "no error"
        except Exception as exc:  # noqa: BLE001 - the type and message are the result
            errors[name] = f"{type(exc).__name__}: {exc}"

    model = full_model(4)
    stages = [ours.PipelineStage(stage_module(model, s), s, 4, "cpu")
              for s in build_plan("Interleaved1F1B", 2, 4, 2).stages_of(rank)]
    v_stages = [ours.PipelineStage(stage_module(model, s), s, 4, "cpu")
                for s in build_plan("DualPipeV", 2, 4, 2).stages_of(rank)]
    attempt("too few microbatches",
            lambda: ours.ScheduleDualPipeV(v_stages, 3, loss_fn=loss_fn))
    attempt("wrong stages for the plan",
            lambda: ours.ScheduleZBVZeroBubble(
                [ours.PipelineStage(stage_module(model, s), s, 4, "cpu")
                 for s in (rank, rank + 2)], 4, loss_fn=loss_fn))
    attempt("num_stages disagrees",
            lambda: ours.ScheduleGPipe(ours.PipelineStage(stage_module(model, rank), rank, 3,
                                                          "cpu"), 4))
    attempt("a list to a single-stage schedule",
            lambda: ours.ScheduleGPipe(stages, 4))
    return errors
