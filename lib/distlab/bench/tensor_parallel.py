"""Tensor-parallel step time: distlab's ``parallelize_module`` beside torch's (DTensor), on the
same model with the same plan, and the collectives' price beside the measurement.

    python -m distlab.bench tensor-parallel --world-size 2
    python -m distlab.bench tensor-parallel --world-size 2 --layers 4 --width 1024 --batch 64

Every rank builds the same ``layers`` MLP blocks (``Linear(width, 4 width)``, ReLU,
``Linear(4 width, width)``, float32), split by Megatron's plan (first Linear column-wise, second
row-wise) over all ranks with distlab's :func:`distlab.tensor_parallel.parallelize_module`
(``distlab``) and with torch's on a CPU device mesh (``torch``, DTensor), over gloo. A round runs
``steps`` forward and backward steps of each on the same batch, the order rotating from round to
round; round 0 warms up. A round's time is its slowest rank's seconds per step; reported: the
median over rounds, and ``vs torch``: the median over rounds of torch's step / distlab's (above 1:
distlab is faster; the target is at least 0.9).

Beside the distlab row, the model of its communication: the collectives distlab counted in one
step, each priced by gloo's own ring with the shipped loopback calibration
(:func:`distlab.collectives.predict_builtin`), summed (``comm model``), and its share of the
measured step. ``#wrong``: 1 where distlab's loss differs from torch's by more than 1e-5 relative.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from distlab import launch
from distlab.bench.harness import BenchConfig, Benchmark, Report, opt, run_cli
from distlab.bench.tensor_parallel_ranks import tp_bench_rank
from distlab.cli import options
from distlab.collectives import predict_builtin
from distlab.report.table import Column, Table

__all__ = ["BENCHMARK", "TensorParallelConfig", "comm_model_seconds", "main", "summarize"]

TARGET_RATE = 0.9
"""distlab's step rate must be at least this fraction of torch's."""

LOSS_RTOL = 1e-5
"""distlab's and torch's step losses must agree this closely (float32, the same weights)."""


def comm_model_seconds(counts: dict[str, int], world_size: int, batch: int, width: int) -> float:
    """Seconds of one step's all-reduces by gloo's ring on the loopback calibration: each of
    ``counts["all_reduce"]`` calls moves the block output, ``batch * width`` float32.

    Raises:
        ValueError: a collective other than all_reduce was counted (the plan issues none).
    """
    other = sorted(k for k, v in counts.items() if v and k != "all_reduce")
    if other:
        raise ValueError(f"the model prices all_reduce only; the step also counted {other}")
    n = counts.get("all_reduce", 0)
    if n == 0 or world_size == 1:
        return 0.0
    return n * predict_builtin("loopback", world_size, [batch * width * 4])[0]


def summarize(results: list[dict[str, Any]], world_size: int, batch: int,
              width: int) -> list[dict[str, Any]]:
    """Rows (distlab, torch) from the ranks' per-round seconds, losses and counts."""
    per_round = {impl: [max(r["seconds"][impl][k] for r in results)
                        for k in range(len(results[0]["seconds"][impl]))]
                 for impl in results[0]["seconds"]}
    mine, ref = per_round["distlab"], per_round["torch"]
    step = statistics.median(mine)
    counts = results[0]["counts"]
    comm = comm_model_seconds(counts, world_size, batch, width)
    loss_d, loss_t = results[0]["loss"]["distlab"], results[0]["loss"]["torch"]
    return [{"impl": "distlab", "step_ms": step * 1e3,
             "rate_vs_torch": statistics.median(t / d for d, t in zip(mine, ref, strict=True)),
             "collectives": " ".join(f"{k}x{v}" for k, v in sorted(counts.items())),
             "comm_model_ms": comm * 1e3, "comm_share": comm / step if step > 0 else None,
             "wrong": int(not math.isclose(loss_d, loss_t, rel_tol=LOSS_RTOL))},
            {"impl": "torch", "step_ms": statistics.median(ref) * 1e3, "rate_vs_torch": 1.0}]


COLUMNS = (Column("impl", "impl", width=7, align="<"), Column("step(ms)", "step_ms", ".3f"),
           Column("vs torch", "rate_vs_torch", ".3f"),
           Column("collectives/step", "collectives", width=16, missing=""),
           Column("comm model(ms)", "comm_model_ms", ".3f"),
           Column("share", "comm_share", ".2f"), Column("#wrong", "wrong", missing=""))


@dataclass(frozen=True)
class TensorParallelConfig(BenchConfig):
    """Options of ``python -m distlab.bench tensor-parallel``."""

    world_size: int = opt(2, "--world-size", type=options.positive_int,
                          help="tensor-parallel ranks")
    layers: int = opt(4, "--layers", type=options.positive_int, help="MLP blocks")
    width: int = opt(512, "--width", type=options.positive_int,
                     help="block width (the hidden layer is 4x)")
    batch: int = opt(32, "--batch", type=options.positive_int, help="rows per step")
    steps: int = opt(5, "--steps", type=options.positive_int,
                     help="steps per implementation per round")
    rounds: int = opt(7, "--rounds", type=options.int_at_least(2),
                      help="timed rounds (one more warms up)")
    timeout: float = opt(600.0, "--timeout", type=options.positive_float,
                         help="seconds for the whole run")


class TensorParallelBenchmark(Benchmark[TensorParallelConfig]):
    """distlab's tensor parallelism beside torch's DTensor (see the module docstring)."""

    name = "tensor-parallel"
    about = ("tensor-parallel step time of distlab's parallelize_module beside torch's "
             "(DTensor), with the collectives priced")
    config_type = TensorParallelConfig

    def check(self, parser: Any, config: TensorParallelConfig) -> TensorParallelConfig:
        if (4 * config.width) % config.world_size or config.width % config.world_size:
            options.fail(parser, "--width", config.width,
                         f"a multiple of --world-size {config.world_size} (both Linears split)")
        return config

    def run(self, config: TensorParallelConfig) -> Report:
        c = config
        res = launch.run(tp_bench_rank, c.world_size,
                         args=(c.layers, c.width, c.batch, c.steps, c.rounds), timeout=c.timeout)
        rows = summarize(res, c.world_size, c.batch, c.width)
        rate = rows[0]["rate_vs_torch"]
        head = [f"tensor-parallel: gloo, {c.world_size} rank(s), {c.layers} x [Linear({c.width}, "
                f"{4 * c.width}), ReLU, Linear({4 * c.width}, {c.width})], batch {c.batch}",
                f"{c.steps} steps x {c.rounds} rounds (+1 warmup), order rotating; step: forward "
                "+ backward, slowest rank",
                "vs torch: median over rounds of torch's step / distlab's (above 1: faster)",
                "comm model: the counted collectives priced by gloo's ring (loopback "
                "calibration); share: of the step"]
        tail = [f"target: distlab's step rate >= {TARGET_RATE}x torch's: "
                f"{'met' if rate >= TARGET_RATE else 'MISSED'} ({rate:.3f}x)"]
        return Report([Table(rows, COLUMNS)], head, tail, {"rows": rows},
                      failed="distlab's loss differs from torch's" if rows[0]["wrong"] else "",
                      backend="gloo", world_size=c.world_size)


BENCHMARK = TensorParallelBenchmark()


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench tensor-parallel``; see the module docstring."""
    return run_cli(BENCHMARK, argv)


if __name__ == "__main__":
    raise SystemExit(main())
