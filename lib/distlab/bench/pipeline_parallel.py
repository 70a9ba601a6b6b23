"""Pipeline-parallel step time: distlab's schedules beside torch.distributed.pipelining's, on
the same stages of the same model, with the simulation of each plan beside the measurement.

    python -m distlab.bench pipeline-parallel --world-size 2 --schedules 1F1B,GPipe
    python -m distlab.bench pipeline-parallel --world-size 2 --schedules all --microbatches 8
    python -m distlab.bench pipeline-parallel --layers 16 --width 1024 --batch 64 --json pp.json

Every rank builds the same MLP (``layers`` x Linear(``width``) + ReLU, float32, MSE loss),
cut into ``world_size * stages per rank`` stages of consecutive layers (2 stages per rank for
the multi-stage schedules, 1 for GPipe and 1F1B), and runs each schedule twice: as
:mod:`distlab.pipeline_parallel.runtime` (``distlab``) and as torch's own class of the same name
(``torch``), from the same weights on the same batch, over gloo. A round runs ``steps`` steps
of every case, the case order rotating from round to round; round 0 warms up. A round's time
for a case is its slowest rank's seconds per step; reported: the median over rounds, and
``rate vs torch``: the median over rounds of torch's step time / distlab's in the same round
(above 1: distlab steps faster; the target is at least 0.9).

Beside each distlab row, the model: one more step records every action's time; the mean
forward, backward (or input- and weight-gradient) seconds of each stage, the activation bytes
crossing each stage boundary and the loopback link's alpha and beta
(``distlab.collectives.model.presets``, gloo calibrated on this kind of machine) go into
:func:`distlab.pipeline_parallel.simulate`. ``model`` is its step time, ``err`` the measured step
against it ((measured - model) / model), ``bubble`` the measured share of the step the ranks did
not compute (mean over ranks) beside the simulation's, and ``act`` the most activation bytes a
rank held, counted from live tensors, beside the plan's microbatches in flight x each stage's
bytes per microbatch (:func:`distlab.pipeline_parallel.mlp_run.stage_activation_nbytes`).
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass
from typing import Any

from distlab import launch
from distlab.bench.harness import BenchConfig, Benchmark, Report, opt, run_cli
from distlab.bench.pipeline_parallel_ranks import pp_bench_rank
from distlab.cli import options
from distlab.pipeline_parallel.mlp_run import (
    P2P_PRESET,
    model_activation_nbytes,
    simulate_measured,
    stage_layers,
)
from distlab.pipeline_parallel.plan import PipelinePlan
from distlab.pipeline_parallel.schedules.registry import (
    SCHEDULES,
    build_plan,
    check_combination,
    schedule_info,
    schedule_name,
)
from distlab.report.table import Column, Table
from distlab.vocabulary import error_pct

__all__ = ["BENCHMARK", "PipelineParallelConfig", "main", "model_row", "schedule_list"]

TARGET_RATE = 0.9
"""distlab's step rate must be at least this fraction of torch's."""

LOSS_RTOL = 1e-5
"""distlab's and torch's summed microbatch losses of one step must agree this closely (float32;
the weights are the same and no optimizer steps, so every step's loss is the same)."""


def schedule_list(text: str) -> list[str]:
    """``a,b`` (any case, torch's class names too) or ``all`` -> schedule names."""
    if text.strip() == "all":
        return list(SCHEDULES)
    try:
        names = [schedule_name(t) for t in text.split(",") if t.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not names:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: must be a comma list of "
                                         f"{', '.join(SCHEDULES)} or 'all'")
    return list(dict.fromkeys(names))


schedule_list.__name__ = "schedule list"


def model_row(plan: PipelinePlan, results: list[dict[str, Any]], layers: int, width: int,
              batch: int) -> dict[str, Any]:
    """The model's figures for ``plan`` from the ranks' traced step: ``model_ms``,
    ``bubble``/``model_bubble``, ``act_bytes``/``model_act_bytes``."""
    s = plan.schedule
    rows = batch // plan.microbatches
    sim = simulate_measured(plan, [r["spans"][s] for r in results], rows, width)
    return {"model_ms": sim.step_time_s * 1e3, "model_bubble": sim.bubble_fraction,
            "bubble": statistics.fmean(r["stats"][s]["bubble_fraction"] for r in results),
            "act_bytes": max(r["stats"][s]["peak_activation_nbytes"] for r in results),
            "model_act_bytes": max(model_activation_nbytes(plan, layers, rows, width))}


def summarize(plans: dict[str, PipelinePlan], results: list[dict[str, Any]], layers: int,
              width: int, batch: int) -> list[dict[str, Any]]:
    """One row per schedule and implementation (distlab first) from the ranks' results."""
    per_round = {case: [max(r["seconds"][case][k] for r in results)
                        for k in range(len(results[0]["seconds"][case]))]
                 for case in results[0]["seconds"]}
    losses = {case: v for r in results for case, v in r["losses"].items() if v is not None}
    out = []
    for s, plan in plans.items():
        mine, ref = per_round[f"{s}:distlab"], per_round[f"{s}:torch"]
        rate = statistics.median(t / d for d, t in zip(mine, ref, strict=True))
        row = {"schedule": s, "impl": "distlab", "step_ms": statistics.median(mine) * 1e3,
               "rate_vs_torch": rate, "stages_per_rank": plan.stages_per_rank,
               "wrong": int(not math.isclose(losses[f"{s}:distlab"], losses[f"{s}:torch"],
                                             rel_tol=LOSS_RTOL)),
               **model_row(plan, results, layers, width, batch)}
        row["err_pct"] = error_pct(row["step_ms"], row["model_ms"])
        out.append(row)
        out.append({"schedule": s, "impl": "torch", "step_ms": statistics.median(ref) * 1e3,
                    "rate_vs_torch": 1.0, "stages_per_rank": plan.stages_per_rank})
    return out


COLUMNS = (Column("schedule", "schedule", width=21, align="<"),
           Column("impl", "impl", width=7, align="<"),
           Column("v", "stages_per_rank"), Column("step(ms)", "step_ms", ".2f"),
           Column("vs torch", "rate_vs_torch", ".3f"),
           Column("model(ms)", "model_ms", ".2f"), Column("err%", "err_pct", "+.1f"),
           Column("bubble", "bubble", ".3f"), Column("model", "model_bubble", ".3f"),
           Column("act(KiB)", "act_bytes", ".1f", 1 / 1024),
           Column("model", "model_act_bytes", ".1f", 1 / 1024),
           Column("#wrong", "wrong", missing=""))


@dataclass(frozen=True)
class PipelineParallelConfig(BenchConfig):
    """Options of ``python -m distlab.bench pipeline-parallel``."""

    world_size: int = opt(2, "--world-size", type=options.positive_int,
                          help="pipeline ranks")
    schedules: tuple[str, ...] = opt(("GPipe", "1F1B"), "--schedules", type=schedule_list,
                                     help=f"schedules to run: a comma list of "
                                          f"{', '.join(SCHEDULES)} (any case) or 'all'")
    microbatches: int = opt(4, "--microbatches", type=options.positive_int,
                            help="microbatches per step")
    layers: int = opt(8, "--layers", type=options.positive_int, help="Linear layers")
    width: int = opt(512, "--width", type=options.positive_int, help="layer width")
    batch: int = opt(64, "--batch", type=options.positive_int,
                     help="rows per step (cut into the microbatches)")
    steps: int = opt(3, "--steps", type=options.positive_int,
                     help="steps per case per round")
    rounds: int = opt(5, "--rounds", type=options.int_at_least(2),
                      help="timed rounds (one more warms up)")
    timeout: float = opt(600.0, "--timeout", type=options.positive_float,
                         help="seconds for the whole run")


class PipelineParallelBenchmark(Benchmark[PipelineParallelConfig]):
    """distlab's pipeline schedules beside torch's (see the module docstring)."""

    name = "pipeline-parallel"
    about = ("pipeline-parallel step time of distlab's schedules beside torch.distributed."
             "pipelining's, with each plan's simulation, bubble and activation bytes")
    config_type = PipelineParallelConfig

    def check(self, parser: argparse.ArgumentParser, config: PipelineParallelConfig
              ) -> PipelineParallelConfig:
        c = config
        for s in c.schedules:
            spr = schedule_info(s).default_stages_per_rank
            try:
                check_combination(s, c.world_size, c.microbatches, spr)
                stage_layers(c.layers, c.world_size * spr)
            except ValueError as exc:
                parser.error(str(exc))
        if c.batch % c.microbatches:
            options.fail(parser, "--batch", c.batch, f"a multiple of --microbatches "
                                                      f"{c.microbatches} (the model's bytes per "
                                                      "microbatch assume equal microbatches)")
        return c

    def run(self, config: PipelineParallelConfig) -> Report:
        c = config
        spr = {s: schedule_info(s).default_stages_per_rank for s in c.schedules}
        plans = {s: build_plan(s, c.world_size, c.microbatches, spr[s]) for s in c.schedules}
        res = launch.run(pp_bench_rank, c.world_size,
                         args=(tuple(c.schedules), spr, c.microbatches, c.layers, c.width,
                               c.batch, c.steps, c.rounds, min(c.timeout, 120.0)),
                         timeout=c.timeout)
        rows = summarize(plans, res, c.layers, c.width, c.batch)
        worst = min(r["rate_vs_torch"] for r in rows if r["impl"] == "distlab")
        head = [f"pipeline-parallel: gloo, {c.world_size} rank(s), {c.layers}xLinear({c.width}) "
                f"+ ReLU, batch {c.batch} in {c.microbatches} microbatches, MSE",
                f"{c.steps} steps x {c.rounds} rounds (+1 warmup), case order rotating; v: "
                "stages per rank",
                "step: the slowest rank's ms per step, median over rounds",
                "vs torch: median over rounds of torch's step / distlab's (above 1: faster)",
                f"model: the plan simulated with each stage's measured action times, the "
                f"{P2P_PRESET} link",
                "err: (measured - model) / model; bubble: share of the step not computing, "
                "measured | model",
                "act: peak activation bytes on a rank, live tensors | in flight x bytes each",
                f"#wrong: 1 where distlab's step loss and torch's differ by > {LOSS_RTOL:g} "
                "relative"]
        verdict = "met" if worst >= TARGET_RATE else "MISSED"
        tail = [f"target: distlab's step rate >= {TARGET_RATE}x torch's on every schedule: "
                f"{verdict} (worst {worst:.3f}x)"]
        wrong = [r["schedule"] for r in rows if r.get("wrong")]
        return Report([Table(rows, COLUMNS)], head, tail,
                      {"rows": rows, "losses": [r["losses"] for r in res]},
                      failed=f"losses differ from torch's: {', '.join(wrong)}" if wrong else "",
                      backend="gloo", world_size=c.world_size)


BENCHMARK = PipelineParallelBenchmark()


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench pipeline-parallel``; see the module docstring."""
    return run_cli(BENCHMARK, argv)


if __name__ == "__main__":
    raise SystemExit(main())
