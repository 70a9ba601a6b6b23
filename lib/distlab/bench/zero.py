"""Step time of ZeRO stages 0, 1, 2 beside torch DDP + Adam, measured side by side on live ranks.

    python -m distlab.bench zero --world-size 2 --layers 8 --width 512

Every rank trains the same MLP (``layers`` x Linear(``width``) + ReLU, Adam) as torch DDP
(``ddp``) and as :class:`distlab.zero.ZeroDataParallel` at stages 0, 1 and 2 from the same
weights on the same batches. One round runs ``steps`` steps of every variant after a barrier,
the variant order rotating from round to round; round 0 warms up and is not timed. A round's
time for a variant is its slowest rank's seconds per step; reported: the median over rounds and
``vs_ddp``, the median over rounds of ``variant / ddp`` within one round (paired, so load drift
cancels; above 1 is slower than DDP).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from distlab import launch
from distlab.bench.harness import BenchConfig, Benchmark, Report, opt, run_cli
from distlab.bench.rounds import Phases, rank_fences, timed_rounds
from distlab.cli import options
from distlab.nets import mlp
from distlab.report.table import Column, Table
from distlab.zero.optimizer import ZeroDataParallel

__all__ = ["BENCHMARK", "VARIANTS", "ZeroConfig", "main", "summarize", "zero_bench_rank"]

VARIANTS = ("ddp", "stage0", "stage1", "stage2")


def _variant(name: str, layers: int, width: int, rank: int) -> tuple[Any, Any]:
    """(callable model, step function) of one variant."""
    if name == "ddp":
        m = DistributedDataParallel(mlp(layers, width, 0))
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)

        def step() -> None:
            opt.step()
            opt.zero_grad()
        return m, step
    z = ZeroDataParallel(mlp(layers, width, 0), int(name[-1]), lr=1e-3)
    return z, z.step


def zero_bench_rank(rank: int, world_size: int, layers: int, width: int, batch: int,
                    steps: int, rounds: int) -> dict[str, list[float]]:
    """Rank function: per-round seconds per step of every variant on this rank."""
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(rank)
    xs = [torch.randn(batch, width, generator=g) for _ in range(steps)]
    runs = {v: _variant(v, layers, width, rank) for v in VARIANTS}

    def train(v: str, _: Phases) -> None:
        model, step = runs[v]
        for x in xs:
            model(x).pow(2).mean().backward()
            step()

    # rotate: the variants are compared within a round (vs_ddp is paired by round), so each
    # goes first in turn and a change in load hits them alike
    timings = timed_rounds(VARIANTS, train, warmup=1, rounds=rounds, rotate=True,
                           fences=rank_fences(torch.device("cpu")))
    return {v: [s / steps for s in timings.seconds[i]] for i, v in enumerate(VARIANTS)}


def summarize(results: list[dict[str, list[float]]]) -> list[dict[str, Any]]:
    """Rows (one per variant) from the ranks' results: median ms per step and vs_ddp."""
    per_round = {v: [max(r[v][i] for r in results) for i in range(len(results[0][v]))]
                 for v in VARIANTS}
    return [{"variant": v, "step_ms": statistics.median(per_round[v]) * 1e3,
             "vs_ddp": statistics.median(a / b for a, b in zip(per_round[v], per_round["ddp"],
                                                                 strict=True)),
             "min_ms": min(per_round[v]) * 1e3, "max_ms": max(per_round[v]) * 1e3}
            for v in VARIANTS]


COLUMNS = (Column("variant", "variant", width=8), Column("step(ms)", "step_ms", ".3f"),
           Column("min", "min_ms", ".3f"), Column("max", "max_ms", ".3f"),
           Column("vs ddp", "vs_ddp", ".3f"))


@dataclass(frozen=True)
class ZeroConfig(BenchConfig):
    """Options of ``python -m distlab.bench zero``."""

    world_size: int = opt(2, "--world-size", type=options.positive_int, help="ranks")
    layers: int = opt(8, "--layers", type=options.positive_int, help="Linear layers")
    width: int = opt(512, "--width", type=options.positive_int, help="layer width")
    batch: int = opt(32, "--batch", type=options.positive_int, help="rows per batch")
    steps: int = opt(5, "--steps", type=options.positive_int,
                     help="training steps per variant per round")
    rounds: int = opt(5, "--rounds", type=options.int_at_least(2),
                      help="timed rounds (one more warms up)")
    timeout: float = opt(900.0, "--timeout", type=options.positive_float,
                         help="seconds for the whole run")


class ZeroBenchmark(Benchmark[ZeroConfig]):
    """ZeRO stages' step time beside torch DDP's (see the module docstring)."""

    name = "zero"
    about = "step time of ZeRO stages 0, 1, 2 (distlab.zero) beside torch DDP + Adam"
    config_type = ZeroConfig

    def run(self, config: ZeroConfig) -> Report:
        c = config
        res = launch.run(zero_bench_rank, c.world_size,
                         args=(c.layers, c.width, c.batch, c.steps, c.rounds), timeout=c.timeout)
        rows = summarize(res)
        head = [f"zero: gloo, {c.world_size} rank(s), {c.layers}xLinear({c.width}), batch "
                f"{c.batch}, Adam, {c.steps} steps x {c.rounds} rounds (+1 warmup), order "
                "rotating; vs ddp = median over rounds of variant/ddp step time"]
        return Report([Table(rows, COLUMNS)], head, [], {"rows": rows},
                      backend="gloo", world_size=c.world_size)


BENCHMARK = ZeroBenchmark()


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench zero``; see the module docstring."""
    return run_cli(BENCHMARK, argv)
