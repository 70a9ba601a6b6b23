"""Rank code of ``python -m distlab.bench pipeline-parallel``: one MLP cut into stages, trained
with distlab's schedule and torch's on the same stages, timed in rotating rounds.

Every rank builds the same seeded MLP (:func:`distlab.nets.mlp`), cuts it into
``ranks * stages_per_rank`` stages of consecutive layers
(:func:`distlab.pipeline_parallel.mlp_run.stage_layers`) and keeps the stages the plan puts on
it, once for distlab's schedule and once (a deep copy, the same weights) for torch's. A case is
one schedule of one implementation; a round runs ``steps`` steps of every case, the case order
rotating from round to round. After the timed rounds one more step of each distlab case records
a :class:`~distlab.timeline.Timeline` (the per-action times the model reads) and its
:class:`~distlab.pipeline_parallel.runtime.StepStats`.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from distlab.bench.rounds import Phases, rank_fences, timed_rounds
from distlab.nets import mlp
from distlab.pipeline_parallel.mlp_run import build_schedule, stage_layers, stage_module
from distlab.pipeline_parallel.schedules.registry import build_plan
from distlab.timeline import Timeline

__all__ = ["IMPLEMENTATIONS", "pp_bench_rank"]

IMPLEMENTATIONS = ("distlab", "torch")


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
        mine = {s: stage_module(model, cuts[s]) for s in plan.stages_of(rank)}
        first, last = 0 in mine, plan.num_stages - 1 in mine
        for impl in IMPLEMENTATIONS:
            modules = mine if impl == "distlab" else copy.deepcopy(mine)
            sched = build_schedule(impl, schedule, modules, plan.num_stages, microbatches,
                                   loss_fn, timeout=timeout)
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
