"""Rank code of ``python -m distlab.bench pipeline-parallel``: one MLP cut into stages, trained
with distlab's schedule and torch's on the same stages, timed in rotating rounds.

Every rank builds the same seeded MLP (:func:`distlab.nets.mlp`), cuts it into
``ranks * stages_per_rank`` stages of consecutive layers (:func:`stage_layers`) and keeps the
stages the plan puts on it, once for distlab's schedule and once (a deep copy, the same weights)
for torch's. A case is one schedule of one implementation; a round runs ``steps`` steps of every
case, the case order rotating from round to round. After the timed rounds one more step of each
distlab case records a :class:`~distlab.timeline.Timeline` (the per-action times the model
reads) and its :class:`~distlab.pipeline_parallel.runtime.StepStats`.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from distlab.bench.rounds import Phases, rank_fences, timed_rounds
from distlab.nets import mlp
from distlab.pipeline_parallel.schedules.registry import build_plan, schedule_info
from distlab.timeline import Timeline

__all__ = ["IMPLEMENTATIONS", "pp_bench_rank", "stage_layers"]

IMPLEMENTATIONS = ("distlab", "torch")


def stage_layers(layers: int, num_stages: int) -> list[range]:
    """The layer indices of each stage: ``layers`` cut into ``num_stages`` runs of consecutive
    layers, the first ``layers % num_stages`` stages one layer longer.

    Raises:
        ValueError: fewer layers than stages.
    """
    if layers < num_stages:
        raise ValueError(f"layers={layers} cannot fill {num_stages} stages: every stage needs "
                         "at least one layer (raise --layers or lower --world-size or the stages "
                         "per rank)")
    base, extra = divmod(layers, num_stages)
    out, start = [], 0
    for s in range(num_stages):
        n = base + (1 if s < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


def _stage_module(model: nn.Sequential, layers: range) -> nn.Sequential:
    """The ``Linear, ReLU`` pairs of ``layers`` (each layer is two modules of ``mlp``)."""
    return nn.Sequential(*[model[2 * i + j] for i in layers for j in (0, 1)])


def _build(impl: str, schedule: str, modules: dict[int, nn.Module], num_stages: int,
           microbatches: int, loss_fn: Any, timeout: float) -> Any:
    """A schedule object of ``impl`` over this rank's ``modules`` (stage index -> module)."""
    cpu = torch.device("cpu")
    info = schedule_info(schedule)
    if impl == "distlab":
        from distlab.pipeline_parallel import runtime as lib
        kwargs: dict[str, Any] = {"timeout": timeout}
    else:
        import torch.distributed.pipelining as lib  # type: ignore[no-redef]
        kwargs = {}
    stages = [lib.PipelineStage(m, s, num_stages, cpu) for s, m in sorted(modules.items())]
    cls = getattr(lib, info.torch_class)
    if info.single_stage:
        return cls(stages[0], microbatches, loss_fn=loss_fn, **kwargs)
    return cls(stages, microbatches, loss_fn=loss_fn, **kwargs)


def pp_bench_rank(rank: int, world_size: int, schedules: tuple[str, ...],
                  stages_per_rank: dict[str, int], microbatches: int, layers: int, width: int,
                  batch: int, steps: int, rounds: int, timeout: float) -> dict[str, Any]:
    """Rank function: ``{"seconds": {case: seconds per step, per round}, "stats": {schedule:
    StepStats of the traced step as a dict}, "spans": {schedule: [(stage, kind, seconds)]},
    "losses": {case: the last step's summed loss on the last stage's rank, else None}}``; a case
    is ``"<schedule>:<impl>"``."""
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(batch, width, generator=g)
    y = torch.randn(batch, width, generator=g)
    loss_fn = nn.MSELoss()
    cases: list[tuple[str, str]] = [(s, i) for s in schedules for i in IMPLEMENTATIONS]
    runs: dict[tuple[str, str], tuple[Any, list[nn.Module], bool, bool]] = {}
    for schedule in schedules:
        plan = build_plan(schedule, world_size, microbatches, stages_per_rank[schedule])
        model = mlp(layers, width, 0)
        cuts = stage_layers(layers, plan.num_stages)
        mine = {s: _stage_module(model, cuts[s]) for s in plan.stages_of(rank)}
        first, last = 0 in mine, plan.num_stages - 1 in mine
        for impl in IMPLEMENTATIONS:
            modules = mine if impl == "distlab" else copy.deepcopy(mine)
            sched = _build(impl, schedule, modules, plan.num_stages, microbatches, loss_fn,
                           timeout)
            runs[(schedule, impl)] = (sched, list(modules.values()), first, last)

    last_losses: dict[str, float | None] = {}

    def one_step(case: tuple[str, str]) -> None:
        sched, modules, first, last = runs[case]
        for m in modules:
            m.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        args = (x,) if first else ()
        sched.step(*args, target=y if last else None, losses=losses if last else None)
        last_losses[f"{case[0]}:{case[1]}"] = float(sum(t.detach() for t in losses)) if last \
            else None

    def train(case: tuple[str, str], _: Phases) -> None:
        for _ in range(steps):
            one_step(case)

    timings = timed_rounds(cases, train, warmup=1, rounds=rounds, rotate=True,
                           fences=rank_fences(torch.device("cpu")))
    stats, spans = {}, {}
    for schedule in schedules:
        sched = runs[(schedule, "distlab")][0]
        sched.timeline = Timeline()
        one_step((schedule, "distlab"))
        st = sched.last_step_stats
        stats[schedule] = {"step_seconds": st.step_seconds,
                           "compute_seconds": st.compute_seconds,
                           "bubble_fraction": st.bubble_fraction,
                           "peak_activation_nbytes": st.peak_activation_nbytes,
                           "peak_in_flight": st.peak_in_flight,
                           "saved_nbytes": dict(st.saved_nbytes)}
        spans[schedule] = [(int(sp.args["stage"]), str(sp.args["kind"]), sp.duration_us * 1e-6)
                           for sp in sched.timeline.spans
                           if sp.lane.endswith("/compute") and "stage" in sp.args]
        sched.timeline = None
    return {"seconds": {f"{s}:{i}": [t / steps for t in timings.seconds[k]]
                        for k, (s, i) in enumerate(cases)},
            "stats": stats, "spans": spans, "losses": last_losses}
