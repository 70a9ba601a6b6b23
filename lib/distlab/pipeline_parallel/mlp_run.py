"""One MLP cut into pipeline stages and run on real gloo ranks, with its plan simulated from
the times the run measured: the measurement and the model side by side.

    from distlab.pipeline_parallel.mlp_run import run_mlp_pipeline
    run = run_mlp_pipeline("1F1B", ranks=2, microbatches=4)
    print(run.summary_lines())          # step, bubble and activation bytes: measured | model
    run.timeline, run.simulation        # draw with distlab.viz.pipeline_parallel.compare_gantt

Every rank builds the same seeded MLP (:func:`distlab.nets.mlp`: ``layers`` x Linear(``width``)
+ ReLU, float32, MSE loss), cut into ``ranks * stages_per_rank`` stages of consecutive layers
(:func:`stage_layers`), keeps the stages the plan puts on it and runs ``steps`` steps of the
schedule (:mod:`.runtime`); the last one starts after a barrier (every rank at once) and records
every action on a :class:`~distlab.timeline.Timeline`. The parent checks the losses and every
gradient against one process running the whole MLP on the whole batch, and simulates the plan
(:func:`~distlab.pipeline_parallel.simulate.simulate`) with each stage's mean measured forward
and backward seconds (:func:`stage_times`) and the loopback link of
:mod:`distlab.collectives.model.presets` (gloo on this host).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from distlab import launch
from distlab._checks import check_float, check_int
from distlab.nets import mlp
from distlab.pipeline_parallel.actions import Kind
from distlab.pipeline_parallel.cost import activation_bytes
from distlab.pipeline_parallel.plan import PipelinePlan
from distlab.pipeline_parallel.schedules.registry import build_plan, schedule_info
from distlab.pipeline_parallel.simulate import P2PCost, Simulation, StageTimes, simulate
from distlab.timeline import Span, Timeline
from distlab.vocabulary import error_pct

__all__ = ["P2P_PRESET", "PipelineRun", "build_schedule", "mlp_pipeline_rank",
           "model_activation_nbytes", "run_mlp_pipeline", "simulate_measured",
           "stage_activation_nbytes", "stage_layers", "stage_module", "stage_times"]

P2P_PRESET = "loopback"
"""The link preset the model prices sends and receives with (gloo on this host)."""

_SEED = 1234


def stage_layers(layers: int, num_stages: int) -> list[range]:
    """The layer indices of each stage: ``layers`` cut into ``num_stages`` runs of consecutive
    layers, the first ``layers % num_stages`` stages one layer longer.

    Raises:
        ValueError: fewer layers than stages.
    """
    layers = check_int("layers", layers, minimum=1)
    num_stages = check_int("num_stages", num_stages, minimum=1)
    if layers < num_stages:
        raise ValueError(f"layers={layers} cannot fill {num_stages} stages: every stage needs "
                         "at least one layer (more layers, fewer ranks or fewer stages per rank)")
    base, extra = divmod(layers, num_stages)
    out, start = [], 0
    for s in range(num_stages):
        n = base + (1 if s < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


def stage_module(model: nn.Sequential, layers: range) -> nn.Sequential:
    """The ``Linear, ReLU`` pairs of ``layers`` of an :func:`~distlab.nets.mlp` (each layer is
    two modules there), sharing their parameters with ``model``."""
    return nn.Sequential(*[model[2 * i + j] for i in layers for j in (0, 1)])


def stage_activation_nbytes(layers: range, rows: int, width: int, *, last: bool,
                            handed_over: bool = False, itemsize: int = 4) -> int:
    """Bytes one microbatch's forward keeps for the backward on a stage of ``layers`` Linear +
    ReLU layers: the stage input and every ReLU's output, and on the ``last`` stage the target
    the MSE loss keeps, ``(1 + len(layers) + last) * rows * width * itemsize`` (a Linear saves
    its input, which is the previous ReLU's output or the stage input; a ReLU saves its
    output; the loss saves its input, the last ReLU's output, and the target). A stage whose
    input is ``handed_over`` in memory by the previous stage on the same rank (the tip of a V)
    shares that tensor with it: its input is not counted twice."""
    return (int(not handed_over) + len(layers) + int(last)) * rows * width * itemsize


def stage_times(plan: PipelinePlan, spans: Sequence[Sequence[tuple[int, str, float]]]
                ) -> StageTimes:
    """Each stage's mean forward, input- and weight-gradient seconds from the ranks' traced
    actions ``(stage, kind, seconds)`` (the mean, not the median: a step pays every action's
    time, its slow ones included); a full backward ``B`` counts as input gradient (weight 0),
    so the simulation charges it whole."""
    seen: dict[tuple[int, str], list[float]] = defaultdict(list)
    for rank_spans in spans:
        for stage, kind, seconds in rank_spans:
            seen[(stage, kind)].append(seconds)

    def mean(stage: int, kind: Kind) -> float:
        values = seen.get((stage, kind.value))
        return statistics.fmean(values) if values else 0.0

    n = plan.num_stages
    forward = tuple(mean(s, Kind.FORWARD) for s in range(n))
    b = [mean(s, Kind.FULL_BACKWARD) for s in range(n)]
    i = [mean(s, Kind.BACKWARD_INPUT) for s in range(n)]
    w = [mean(s, Kind.BACKWARD_WEIGHT) for s in range(n)]
    return StageTimes(forward, tuple(bs or is_ for bs, is_ in zip(b, i, strict=True)),
                      tuple(0.0 if bs else ws for bs, ws in zip(b, w, strict=True)))


def simulate_measured(plan: PipelinePlan, spans: Sequence[Sequence[tuple[int, str, float]]],
                      rows: int, width: int) -> Simulation:
    """``plan`` simulated with the ranks' measured actions ``(stage, kind, seconds)``
    (:func:`stage_times`), ``rows x width`` float32 crossing each boundary, on the
    :data:`P2P_PRESET` link."""
    return simulate(plan, stage_times(plan, spans), boundary_nbytes=rows * width * 4,
                    p2p=P2PCost.from_preset(P2P_PRESET))


def model_activation_nbytes(plan: PipelinePlan, layers: int, rows: int,
                            width: int) -> tuple[int, ...]:
    """Per rank, the plan's peak activation bytes for the MLP of ``layers`` cut into its stages:
    microbatches in flight x :func:`stage_activation_nbytes` of each stage (the last one keeps
    the target; a stage handed its input in memory does not count it twice)."""
    last = plan.num_stages - 1
    return tuple(activation_bytes(plan, [
        stage_activation_nbytes(c, rows, width, last=i == last,
                                handed_over=i > 0 and plan.rank_of(i - 1) == plan.rank_of(i))
        for i, c in enumerate(stage_layers(layers, plan.num_stages))]))


def build_schedule(impl: str, schedule: str, modules: dict[int, nn.Module], num_stages: int,
                   microbatches: int, loss_fn: Any, *, timeout: float = 120.0) -> Any:
    """A schedule object of ``impl`` (``"distlab"``: :mod:`.runtime`; ``"torch"``:
    torch.distributed.pipelining) over this rank's ``modules`` (stage index -> module), built
    with the same arguments, on the default process group and the CPU."""
    cpu = torch.device("cpu")
    info = schedule_info(schedule)
    if impl == "distlab":
        from distlab.pipeline_parallel import runtime as lib
        kwargs: dict[str, Any] = {"timeout": timeout}
    elif impl == "torch":
        import torch.distributed.pipelining as lib  # type: ignore[no-redef]
        kwargs = {}
    else:
        raise ValueError(f"impl={impl!r}; allowed: 'distlab', 'torch'")
    stages = [lib.PipelineStage(m, s, num_stages, cpu) for s, m in sorted(modules.items())]
    cls = getattr(lib, info.torch_class)
    if info.single_stage:
        return cls(stages[0], microbatches, loss_fn=loss_fn, **kwargs)
    return cls(stages, microbatches, loss_fn=loss_fn, **kwargs)


def _batch(batch: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(_SEED)
    return torch.randn(batch, width, generator=g), torch.randn(batch, width, generator=g)


def mlp_pipeline_rank(rank: int, world_size: int, schedule: str, microbatches: int,
                      stages_per_rank: int, layers: int, width: int, batch: int, steps: int,
                      timeout: float) -> dict[str, Any]:
    """Rank function of :func:`run_mlp_pipeline`: ``{"spans": [Span], "stats": {...},
    "losses": [float] (last stage's rank, else []), "grads": {name: tensor}}`` of the last
    step, gradients named ``"<layer>.<weight|bias>"``."""
    torch.set_num_threads(1)
    plan = build_plan(schedule, world_size, microbatches, stages_per_rank)
    model = mlp(layers, width, 0)
    cuts = stage_layers(layers, plan.num_stages)
    mine = {s: stage_module(model, cuts[s]) for s in plan.stages_of(rank)}
    sched = build_schedule("distlab", schedule, mine, plan.num_stages, microbatches,
                           nn.MSELoss(), timeout=timeout)
    x, y = _batch(batch, width)
    first, last = 0 in mine, plan.num_stages - 1 in mine
    losses: list[torch.Tensor] = []
    for k in range(steps):
        model.zero_grad(set_to_none=True)
        if k == steps - 1 and world_size > 1:
            dist.barrier()   # the traced step starts on every rank at once
        sched.timeline = Timeline() if k == steps - 1 else None
        sched.step(*((x,) if first else ()), target=y if last else None,
                   losses=losses if last else None)
    st = sched.last_step_stats
    grads = {f"{i}.{name}": p.grad.clone() for s in mine for i in cuts[s]
             for name, p in model[2 * i].named_parameters() if p.grad is not None}
    return {"spans": list(sched.timeline.spans), "losses": [float(t) for t in losses],
            "grads": grads,
            "stats": {"step_seconds": st.step_seconds, "compute_seconds": st.compute_seconds,
                      "bubble_fraction": st.bubble_fraction,
                      "peak_activation_nbytes": st.peak_activation_nbytes,
                      "peak_in_flight": st.peak_in_flight}}


def _one_process(layers: int, width: int, batch: int, microbatches: int
                 ) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The whole MLP on the whole batch in this process: per-microbatch losses and the
    gradients of their mean (what the pipeline's scaled microbatch losses sum to)."""
    model = mlp(layers, width, 0)
    x, y = _batch(batch, width)
    losses = [nn.functional.mse_loss(model(xm), ym)
              for xm, ym in zip(torch.tensor_split(x, microbatches),
                                torch.tensor_split(y, microbatches), strict=True)]
    torch.stack(losses).mean().backward()
    grads = {f"{i}.{name}": p.grad.clone() for i in range(layers)
             for name, p in model[2 * i].named_parameters()}
    return [float(t.detach()) for t in losses], grads


@dataclass(frozen=True)
class PipelineRun:
    """A measured pipeline step of the MLP beside its simulation (see the module docstring).

    Attributes:
        plan: the plan that ran.
        timeline: every rank's actions of the traced step (lanes ``rank{r}/compute``,
            ``rank{r}/p2p``, ``rank{r}/step``; microseconds on the host's monotonic clock).
        simulation: the plan simulated with the measured stage times and the loopback link.
        stats: per rank, its :class:`~.runtime.StepStats` as a dict.
        model_act_nbytes: per rank, the plan's peak activation bytes (microbatches in flight x
            :func:`stage_activation_nbytes`).
        max_loss_error: the largest ``|pipeline - one process|`` of a microbatch loss.
        max_grad_error: the largest ``|pipeline - one process|`` of any gradient element.
        layers, width, batch: the MLP and the batch.
    """

    plan: PipelinePlan
    timeline: Timeline
    simulation: Simulation
    stats: tuple[dict[str, Any], ...]
    model_act_nbytes: tuple[int, ...]
    max_loss_error: float
    max_grad_error: float
    layers: int
    width: int
    batch: int

    @property
    def step_s(self) -> float:
        """The measured step: the slowest rank's seconds."""
        return max(s["step_seconds"] for s in self.stats)

    @property
    def bubble_fraction(self) -> float:
        """The measured share of the step the ranks did not compute (mean over ranks)."""
        return statistics.fmean(s["bubble_fraction"] for s in self.stats)

    @property
    def step_error_pct(self) -> float:
        """The measured step against the simulated one, ``(measured - model) / model``, %."""
        return error_pct(self.step_s, self.simulation.step_time_s)

    def summary_lines(self) -> list[str]:
        """Step, bubble and peak activation bytes, measured beside the model, and the
        agreement with one process."""
        sim = self.simulation
        acts = " ".join(f"{s['peak_activation_nbytes'] / 1024:.0f}|{m / 1024:.0f}"
                        for s, m in zip(self.stats, self.model_act_nbytes, strict=True))
        return [f"{self.plan.schedule}: {self.plan.ranks} ranks x {self.plan.stages_per_rank} "
                f"stage(s), {self.plan.microbatches} microbatches, {self.layers}xLinear"
                f"({self.width}), batch {self.batch}",
                f"step {self.step_s * 1e3:.1f} ms measured | {sim.step_time_s * 1e3:.1f} ms "
                f"simulated ({self.step_error_pct:+.0f}%)",
                f"bubble {self.bubble_fraction:.2f} measured | {sim.bubble_fraction:.2f} "
                "simulated",
                f"peak activation KiB per rank, live tensors | model: {acts}",
                f"vs one process: loss within {self.max_loss_error:.1e}, gradients within "
                f"{self.max_grad_error:.1e}"]


def run_mlp_pipeline(schedule: str, ranks: int = 2, microbatches: int = 4, *,
                     stages_per_rank: int | None = None, layers: int = 8, width: int = 256,
                     batch: int = 32, steps: int = 3, timeout: float = 120.0) -> PipelineRun:
    """Run ``schedule`` on ``ranks`` gloo ranks over the MLP; return it beside its simulation.

    Args:
        schedule: a schedule name (:data:`~.schedules.registry.SCHEDULES`, any case).
        ranks: pipeline ranks (processes), >= 1.
        microbatches: microbatches per step.
        stages_per_rank: ``None``: the schedule's default (1 or 2).
        layers, width: the MLP, ``layers`` >= ranks x stages per rank.
        batch: rows per step, >= microbatches.
        steps: steps run, the last one traced (the first ones warm up).
        timeout: seconds for the whole run, also any one wait between ranks.

    Raises:
        ValueError: a combination the schedule refuses, too few layers or rows.
    """
    spr = schedule_info(schedule).default_stages_per_rank if stages_per_rank is None \
        else stages_per_rank
    plan = build_plan(schedule, ranks, microbatches, spr)
    stage_layers(layers, plan.num_stages)   # too few layers: refused before any rank starts
    width = check_int("width", width, minimum=1)
    batch = check_int("batch", batch, minimum=plan.microbatches)
    steps = check_int("steps", steps, minimum=1)
    timeout = check_float("timeout (seconds)", timeout, minimum=1.0)
    res = launch.run(mlp_pipeline_rank, ranks,
                     args=(plan.schedule, plan.microbatches, plan.stages_per_rank, layers,
                           width, batch, steps, timeout), timeout=timeout)
    ref_losses, ref_grads = _one_process(layers, width, batch, plan.microbatches)
    losses = next(r["losses"] for r in res if r["losses"])
    loss_err = max(abs(a - b) for a, b in zip(losses, ref_losses, strict=True))
    grad_err = max(float((g - ref_grads[k]).abs().max()) for r in res
                   for k, g in r["grads"].items())
    timeline = Timeline([sp for r in res for sp in r["spans"] if isinstance(sp, Span)])
    spans = [[(int(sp.args["stage"]), str(sp.args["kind"]), sp.duration_us * 1e-6)
              for sp in r["spans"] if sp.lane.endswith("/compute")] for r in res]
    rows = -(-batch // plan.microbatches)
    sim = simulate_measured(plan, spans, rows, width)
    return PipelineRun(plan, timeline, sim, tuple(r["stats"] for r in res),
                       model_activation_nbytes(plan, layers, rows, width), loss_err, grad_err,
                       layers, width, batch)
