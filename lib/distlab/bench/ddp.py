"""DDP benchmark: naive, bucketed without overlap, distlab overlap and torch DDP side by side.

    python -m distlab.bench ddp --world-size 2 --layers 8 --width 1024 --bucket-cap-mb 1,5,25

Runs ``world-size`` ranks on this host: with ``--device cpu`` gloo ranks with CPU parameters; with
``--device cuda`` (the default when torch sees a GPU) NCCL with one GPU per rank when there are
enough GPUs, else gloo ranks sharing the GPUs with CUDA parameters (every table says which:
:func:`distlab.devices.ddp_placement`); CUDA step times are read after a synchronize. Each round
runs every variant for ``--steps`` training steps (variants interleaved; round 0 is warmup); times
are medians over ranks 0's steps. Columns: step and backward time, exposed communication (backward
minus the no-communication backward), overlap (:func:`overlap_fraction`: the share of the
no-overlap variant's exposed communication at the same cap that this variant hides; 0 for naive
and no-overlap, which launch nothing before backward ends), the model's predicted step time
(alpha-beta-gamma calibrated in the same run) and its error (``err%``:
:func:`distlab.vocabulary.error_pct` of the step against it, positive when slower), and #wrong
(parameter tensors that differ from torch DDP's after the same steps); ``us/param`` = (step - the
same step without DDP) / parameter tensors, in microseconds: what DDP adds per parameter per step,
communication included (``python -m distlab.bench ddp-overhead`` measures it in paired rounds, the
step-rate target).
``--join`` adds the variant ``overlap+join`` (overlap trained inside ``torch.distributed.algorithms.
Join`` on the same even inputs) and a line per cap with its step time over overlap's: what Join
costs when no rank runs out (target <= 1.05); and, for ``find_unused_parameters=True`` and
``broadcast_buffers`` (a model with two buffers), the step time over the plain one's, distlab's
beside torch DDP's (:data:`~distlab.bench.ddp_ranks.OPTION_VARIANTS`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from distlab import launch
from distlab.bench.ddp_ranks import (
    JOIN_VARIANT,
    NOT_OVERLAPPING,
    OPTION_VARIANTS,
    TORCH_JOIN_VARIANT,
    measure_rank,
)
from distlab.bench.harness import BenchConfig, Benchmark, Report, opt, run_cli
from distlab.cli import options
from distlab.devices import DDP_DEVICES, ddp_placement
from distlab.envinfo import gpu_count
from distlab.report.table import Column, Table

__all__ = ["BENCHMARK", "COLUMNS", "OVERLAP_DEFINITION", "DdpBenchmark", "DdpConfig", "main",
           "overlap_fraction", "with_overlap"]

TARGET_RATE = 0.9  # distlab overlap step rate / torch DDP step rate
TARGET_JOIN_RATIO = 1.05  # overlap+join step time / overlap step time, even inputs

COLUMNS = (Column("variant", "variant", width=11), Column("cap(MB)", "bucket_cap_mb", "g"),
           Column("step(ms)", "step_s", ".2f", 1e3), Column("bwd(ms)", "backward_s", ".2f", 1e3),
           Column("exposed(ms)", "exposed_s", ".2f", 1e3),
           Column("overlap", "overlap_fraction", ".2f"),
           Column("pred(ms)", "predicted_step_s", ".2f", 1e3),
           Column("err%", "error_pct", "+.1f"), Column("us/param", "us_per_param", ".2f"),
           Column("#wrong", "wrong"))


#: What the ``overlap`` column and figure label mean, in one line.
OVERLAP_DEFINITION = ("overlap = 1 - exposed / exposed(no-overlap, same cap); "
                      "naive and no-overlap: 0")


def overlap_fraction(row: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> float | None:
    """The share of communication ``row``'s variant hides behind backward, from measured times.

    ``1 - exposed_s / exposed_s(no-overlap row of the same bucket_cap_mb)``: the ``no-overlap``
    variant reduces the same buckets after backward, so its exposed time is that communication
    with nothing hidden. Clipped to [0, 1] (a variant measured slower than no-overlap hides
    nothing). ``0.0`` for the variants in
    :data:`~distlab.bench.ddp_ranks.NOT_OVERLAPPING` (they launch no allreduce before backward
    ends). ``None`` when ``rows`` has no such no-overlap row, or either exposed time is missing
    or the no-overlap one is 0 (nothing to hide). Reads only ``variant``, ``bucket_cap_mb`` and
    ``exposed_s`` (seconds), so it can be derived again from any stored rows.
    """
    if row["variant"] in NOT_OVERLAPPING:
        return 0.0
    ref = next((r for r in rows if r["variant"] == "no-overlap"
                and r["bucket_cap_mb"] == row["bucket_cap_mb"]), None)
    if ref is None or row.get("exposed_s") is None or not ref.get("exposed_s"):
        return None
    return min(1.0, max(0.0, 1.0 - row["exposed_s"] / ref["exposed_s"]))


def with_overlap(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``rows`` whose ``overlap_fraction`` is :func:`overlap_fraction` of each (any
    stored value is replaced)."""
    return [{**r, "overlap_fraction": overlap_fraction(r, rows)} for r in rows]


@dataclass(frozen=True)
class DdpConfig(BenchConfig):
    """Options of ``python -m distlab.bench ddp``."""

    world_size: int = opt(2, "--world-size", type=options.int_at_least(2), help="ranks (gloo)")
    layers: int = opt(8, "--layers", type=options.positive_int, help="Linear layers")
    width: int = opt(1024, "--width", type=options.positive_int, help="layer width")
    batch: int = opt(32, "--batch", type=options.positive_int, help="rows per batch")
    bucket_cap_mb: tuple[float, ...] = opt((1.0, 5.0, 25.0), "--bucket-cap-mb",
                                           type=options.float_list(0.001),
                                           help="bucket caps in MiB (comma list)")
    steps: int = opt(5, "--steps", type=options.positive_int, help="steps per round")
    rounds: int = opt(3, "--rounds", type=options.positive_int,
                      help="timed rounds (one more warms up first, as in ddp-overhead and "
                           "zero)")
    timeout: float = opt(600.0, "--timeout", type=options.positive_float,
                         help="seconds for the whole run")
    device: str = opt("auto", "--device", choices=DDP_DEVICES,
                      help="where parameters live: cpu, cuda, or auto (cuda when torch sees a "
                           "GPU)")
    join: bool = opt(False, "--join", action="store_true",
                     help="add overlap+join: the overlap variant inside torch's Join (even "
                          "inputs), and its step time as a ratio of overlap's")


class DdpBenchmark(Benchmark[DdpConfig]):
    """The DDP lab's benchmark (see the module docstring)."""

    name = "ddp"
    about = ("naive / bucketed / overlapping distlab DDP vs torch DDP: step time, exposed comm, "
             "model")
    config_type = DdpConfig

    def check(self, parser: argparse.ArgumentParser, config: DdpConfig) -> DdpConfig:
        check_device_option(parser, config.device, config.world_size)
        return config

    def run(self, config: DdpConfig) -> Report:
        c = config
        local = int(os.environ.get("LOCAL_WORLD_SIZE", c.world_size)) if launch.in_torchrun() \
            else c.world_size
        place = ddp_placement(c.device, gpu_count(), local)
        out = launch.run(measure_rank, c.world_size, backend=place.backend,
                         args=(c.layers, c.width, c.batch, list(c.bucket_cap_mb), c.steps,
                               c.rounds + 1),  # the ranks count the warm-up round
                         kwargs={"gpu_of_rank": place.gpu_of_rank, "join": c.join},
                         timeout=c.timeout)
        rows = with_overlap(out[0]["rows"])
        params = 2 * c.layers  # weight and bias of each Linear
        for i, r in enumerate(rows):  # #wrong: any rank
            r["wrong"] = max(o["rows"][i]["wrong"] for o in out)
            r["us_per_param"] = (r["step_s"] - out[0]["local_step_s"]) / params * 1e6
        by = {(r["variant"], r["bucket_cap_mb"]): r for r in rows}
        ratios = {str(cap): by[("torch", cap)]["step_s"] / by[("overlap", cap)]["step_s"]
                  for cap in c.bucket_cap_mb}
        head = [f"ddp: {c.layers} x Linear({c.width}), batch {c.batch}, world {c.world_size} "
                f"({place.label}, one host)",
                f"{c.steps} steps x {c.rounds} rounds (+1 warmup); no-comm backward "
                f"{out[0]['local_backward_s'] * 1e3:.2f} ms", OVERLAP_DEFINITION]
        tail = [f"cap {cap} MB: distlab overlap step rate = {ratio:.3f} x torch DDP "
                f"(target >= {TARGET_RATE}) {'PASS' if ratio >= TARGET_RATE else 'MISS'}"
                for cap, ratio in ratios.items()]
        join_ratios, torch_join = {}, {}
        for cap in c.bucket_cap_mb if c.join else ():
            join_ratios[str(cap)] = (by[(JOIN_VARIANT, cap)]["step_s"]
                                     / by[("overlap", cap)]["step_s"])
            torch_join[str(cap)] = (by[(TORCH_JOIN_VARIANT, cap)]["step_s"]
                                    / by[("torch", cap)]["step_s"])
            ok = join_ratios[str(cap)] <= TARGET_JOIN_RATIO
            tail.append(f"cap {cap} MB: Join on even inputs: step = {join_ratios[str(cap)]:.3f} x "
                        f"overlap's (target <= {TARGET_JOIN_RATIO}) {'PASS' if ok else 'MISS'}; "
                        f"torch DDP's: {torch_join[str(cap)]:.3f} x")
        option_cost: dict[str, dict[str, dict[str, float]]] = {}
        for cap in c.bucket_cap_mb if c.join else ():
            for option, (ours_v, torch_v) in OPTION_VARIANTS.items():
                ours = by[(ours_v, cap)]["step_s"] / by[("overlap", cap)]["step_s"]
                theirs = by[(torch_v, cap)]["step_s"] / by[("torch", cap)]["step_s"]
                option_cost.setdefault(option, {})[str(cap)] = {"distlab": ours, "torch": theirs}
                tail.append(f"cap {cap} MB: {option}: step = {ours:.3f} x overlap's; "
                            f"torch DDP's: {theirs:.3f} x torch's")
        wrong = sum(r["wrong"] for r in rows)
        return Report([Table(rows, COLUMNS)], head, tail,
                      {"rate_vs_torch": ratios, "join_vs_overlap": join_ratios,
                       "torch_join_vs_torch": torch_join, "option_cost": option_cost,
                       "local_backward_s": out[0]["local_backward_s"],
                       "local_step_s": out[0]["local_step_s"], "sizes": out[0]["sizes"],
                       "ready_s": out[0]["ready_s"], "link": out[0]["link"],
                       "placement": dataclasses.asdict(place)},
                      failed=f"{wrong} parameter tensors differ from torch DDP's" if wrong else "",
                      backend=place.backend, world_size=c.world_size)



def check_device_option(parser: argparse.ArgumentParser, device: str, world_size: int) -> None:
    """``--device`` must be placeable here (``cuda`` needs a GPU): else exit 2 with one line."""
    try:
        ddp_placement(device, gpu_count(), world_size)
    except ValueError as exc:
        options.fail(parser, "--device", device, f"cpu or auto here ({exc})")


BENCHMARK = DdpBenchmark()


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench ddp``; see the module docstring."""
    return run_cli(BENCHMARK, argv)
