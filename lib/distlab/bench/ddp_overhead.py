"""Per-parameter overhead of distlab's DDP beside torch's, measured side by side on live ranks.

    python -m distlab.bench ddp-overhead --layers 200 --width 16 --bucket-cap-mb 25
    python -m distlab.bench ddp-overhead --layers 8 --width 1024 --bucket-cap-mb 1,5,25
    python -m distlab.bench ddp-overhead --device cuda --world-size 1 --layers 8 --width 4096 \
        --batch 64                                  # NCCL, one rank per GPU

Every case (one per bucket cap) trains, on each rank, the same model (``layers`` x
``Linear(width)`` + ReLU, SGD) in up to five variants from the same initial weights on the same
batches: ``local`` (the bare module, no DDP, no communication), ``torch`` (torch DDP), ``distlab``
(:class:`distlab.ddp.DDP`), and with ``--views`` (``gradient_as_bucket_view=True``) ``torch-view``
and ``distlab-view``. Placement as in ``bench ddp`` (:func:`distlab.devices.ddp_placement`); CUDA
times are read after a synchronize.
Every case trains, on each rank, the same model (``layers`` x ``Linear(width)`` + ReLU, SGD) in
up to five variants from the same initial weights on the same batches: ``local`` (the bare module,
no DDP, no communication), ``torch`` (torch DDP), ``distlab`` (:class:`distlab.ddp.DDP`), and with
``gradient_as_bucket_view=True`` ``torch-view`` and ``distlab-view``. One round runs ``steps``
steps of every variant, one after another, with a barrier before each variant; the order of the
variants rotates from round to round, so a change in machine load hits them alike; round 0 is
warmup (it includes the bucket rebuild) and is not timed. A round's time for a variant is the
slowest rank's seconds per step.

Derived, per case (all medians over the timed rounds):
- ``step_s[v]``: seconds per step of variant ``v``; ``spread_s[v]``: its (min, max) over rounds.
- ``rate_vs_torch``: distlab's step rate over torch DDP's, the median over rounds of
  ``torch_s / distlab_s`` taken within one round (paired, so slow drifts in load cancel);
  ``rate_spread``: its (min, max). ``rate_vs_torch_view`` likewise for the bucket-view variants.
- ``us_per_param[v]``: ``(step_s[v] - step_s["local"]) / P * 1e6`` with ``P`` the number of
  parameter tensors: everything a DDP step costs beyond the same step without DDP, spread over the
  parameters. It includes communication that backward did not hide, so it is a per-parameter hook
  cost only where communication is small (the tiny-layers case); on large layers it is mostly the
  allreduce time.
- ``excess_us_per_param``: ``(step_s["distlab"] - step_s["torch"]) / P * 1e6``: what distlab costs
  beyond torch per parameter per step (negative: faster).
- ``cpu_s[v]`` and ``cpu_us_per_param[v]``: the same from the CPU time of each rank's training
  thread (``time.thread_time``), which leaves out waiting (for communication, or for a core the
  machine's other work holds): the host cost of a step, the quantity a GPU step's launch-bound
  overhead is made of. The gloo threads' own CPU time is not in it.
- ``wrong``: parameter tensors of distlab's model that differ from torch DDP's after training (any
  rank); 0 means bitwise equal.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from distlab import launch
from distlab._checks import check_int
from distlab.bench.ddp import check_device_option
from distlab.bench.harness import BenchConfig, Benchmark, Report, opt, run_cli
from distlab.bench.rounds import Phases, rank_fences, timed_rounds
from distlab.cli import options
from distlab.ddp.wrapper import DDP
from distlab.devices import DDP_DEVICES, ddp_placement
from distlab.envinfo import gpu_count
from distlab.nets import mlp
from distlab.report.table import Column, Table

__all__ = ["BENCHMARK", "DEFAULT_CASES", "LINEAR_1024_CASES", "OverheadBenchmark", "OverheadCase",
           "OverheadConfig", "OverheadRow", "TINY_LAYERS_CASE", "VARIANTS", "main",
           "measure_overhead", "overhead_rank", "summarize_overhead"]

#: Every variant :func:`measure_overhead` knows; ``local``, ``torch`` and ``distlab`` are required.
VARIANTS = ("local", "torch", "distlab", "torch-view", "distlab-view")
_REQUIRED = ("local", "torch", "distlab")


@dataclass(frozen=True)
class OverheadCase:
    """A model and bucket cap: ``layers`` x (``Linear(width, width)``, ReLU), batches of ``batch``
    rows, ``bucket_cap_mb`` MiB (None: torch's default, 25 MiB with a 1 MiB first bucket)."""

    name: str
    layers: int
    width: int
    batch: int
    bucket_cap_mb: float | None = None

    def __post_init__(self) -> None:
        check_int("layers", self.layers, minimum=1)
        check_int("width", self.width, minimum=1)
        check_int("batch", self.batch, minimum=1)
        if self.bucket_cap_mb is not None and not self.bucket_cap_mb > 0:
            raise ValueError(f"bucket_cap_mb must be > 0 MiB or None, got {self.bucket_cap_mb!r}")

    @property
    def params(self) -> int:
        """Parameter tensors (a weight and a bias per layer)."""
        return 2 * self.layers


#: Hundreds of parameter tensors, negligible compute per layer: where per-parameter cost shows.
TINY_LAYERS_CASE = OverheadCase("200 x Linear(16)", 200, 16, 8, 25.0)
#: The ``bench ddp`` default model at bucket caps of 1, 5 and 25 MB (torch's default).
LINEAR_1024_CASES = tuple(OverheadCase(f"8 x Linear(1024) cap {c:g} MB", 8, 1024, 32, c)
                          for c in (1.0, 5.0, 25.0))
DEFAULT_CASES = (TINY_LAYERS_CASE, *LINEAR_1024_CASES)


@dataclass(frozen=True)
class OverheadRow:
    """One case's result; see the module docstring for every field. Seconds and us."""

    case: str
    params: int
    bucket_cap_mb: float | None
    step_s: dict[str, float]
    spread_s: dict[str, tuple[float, float]]
    rate_vs_torch: float
    rate_spread: tuple[float, float]
    us_per_param: dict[str, float]
    excess_us_per_param: float
    wrong: int
    rounds: int
    cpu_s: dict[str, float] = field(default_factory=dict)
    cpu_us_per_param: dict[str, float] = field(default_factory=dict)
    rate_vs_torch_view: float | None = None
    per_round_s: dict[str, list[float]] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _wrap(variant: str, module: Any, cap: float | None, device: torch.device) -> Any:
    view = variant.endswith("-view")
    if variant == "local":
        return module
    if variant.startswith("torch"):
        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(module, device_ids=ids, bucket_cap_mb=cap,
                                       gradient_as_bucket_view=view)
    return DDP(module, bucket_cap_mb=cap, gradient_as_bucket_view=view)


def _training(models: dict[str, Any], optimizers: dict[str, Any],
              xs: list[torch.Tensor]) -> Callable[[str, Phases], None]:
    """The timed call of a variant's turn: one training step per batch of ``xs``."""
    def train(variant: str, _: Phases) -> None:
        model, optimizer = models[variant], optimizers[variant]
        for x in xs:
            model(x).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    return train


def overhead_rank(rank: int, world_size: int, cases: list[dict[str, Any]], steps: int,
                  rounds: int, variants: list[str],
                  gpu_of_rank: tuple[int | None, ...] | None = None) -> dict[str, Any]:
    """Rank function (run through :func:`distlab.launch.run`): for every case (a dict of
    :class:`OverheadCase` fields) the per-round wall seconds and training-thread CPU seconds per
    step of each variant on this rank, and how many of distlab's parameter tensors differ from
    torch DDP's at the end. ``gpu_of_rank`` puts rank r on ``cuda:gpu_of_rank[r]``."""
    torch.set_num_threads(1)
    gpu = gpu_of_rank[rank] if gpu_of_rank else None
    device = torch.device("cpu") if gpu is None else torch.device("cuda", gpu)
    if gpu is not None:
        torch.cuda.set_device(device)
    out = []
    for c in cases:
        case = OverheadCase(**c)
        g = torch.Generator().manual_seed(1000 + rank)
        xs = [torch.randn(case.batch, case.width, generator=g).to(device) for _ in range(steps)]
        models = {v: _wrap(v, mlp(case.layers, case.width, 100 + rank).to(device),
                           case.bucket_cap_mb, device) for v in variants}
        opts = {v: torch.optim.SGD(m.parameters(), lr=1e-3) for v, m in models.items()}
        # rotate: the variants are compared within a round (rate_vs_torch is paired by round),
        # so each goes first in turn and a change in load hits them alike
        timings = timed_rounds(variants, _training(models, opts, xs), warmup=1, rounds=rounds,
                               rotate=True, fences=rank_fences(device), cpu_time=True)
        seconds = {v: [s / steps for s in timings.seconds[i]] for i, v in enumerate(variants)}
        cpu = {v: [s / steps for s in timings.cpu_seconds[i]] for i, v in enumerate(variants)}
        ref = list(models["torch"].module.parameters())
        wrong = sum(not torch.equal(a, b) for a, b in
                    zip(ref, models["distlab"].module.parameters(), strict=True))
        out.append({"case": case.name, "params": sum(1 for _ in models["local"].parameters()),
                    "seconds": seconds, "cpu": cpu, "wrong": int(wrong)})
    return {"rank": rank, "cases": out}


def summarize_overhead(results: list[dict[str, Any]], cases: tuple[OverheadCase, ...]
                       ) -> list[OverheadRow]:
    """Rows from the ranks' :func:`overhead_rank` results (pure; see the module docstring).

    Raises:
        RuntimeError: the ranks disagree on the cases, variants or round counts.
    """
    first = results[0]["cases"]
    for r in results[1:]:
        if [(c["case"], c["params"], {v: len(s) for v, s in c["seconds"].items()})
                for c in r["cases"]] != [(c["case"], c["params"],
                                          {v: len(s) for v, s in c["seconds"].items()})
                                         for c in first]:
            raise RuntimeError("overhead ranks disagree on cases, variants or rounds")
    rows = []
    for i, (case, c0) in enumerate(zip(cases, first, strict=True)):
        per_rank = [r["cases"][i] for r in results]
        variants = list(c0["seconds"])
        per_round = {v: [max(pr["seconds"][v][k] for pr in per_rank)
                         for k in range(len(c0["seconds"][v]))] for v in variants}
        med = {v: statistics.median(s) for v, s in per_round.items()}
        cpu = {v: statistics.median(max(pr["cpu"][v][k] for pr in per_rank)
                                    for k in range(len(c0["cpu"][v]))) for v in variants}
        ratios = [t / d for t, d in zip(per_round["torch"], per_round["distlab"], strict=True)]
        view_ratio = None
        if "torch-view" in per_round and "distlab-view" in per_round:
            view_ratio = statistics.median(
                t / d for t, d in zip(per_round["torch-view"], per_round["distlab-view"],
                                      strict=True))
        p = c0["params"]
        rows.append(OverheadRow(
            case=case.name, params=p, bucket_cap_mb=case.bucket_cap_mb, step_s=med,
            spread_s={v: (min(s), max(s)) for v, s in per_round.items()},
            rate_vs_torch=statistics.median(ratios), rate_spread=(min(ratios), max(ratios)),
            us_per_param={v: (med[v] - med["local"]) / p * 1e6 for v in variants if v != "local"},
            excess_us_per_param=(med["distlab"] - med["torch"]) / p * 1e6,
            wrong=max(pr["wrong"] for pr in per_rank), rounds=len(ratios), cpu_s=cpu,
            cpu_us_per_param={v: (cpu[v] - cpu["local"]) / p * 1e6 for v in variants
                              if v != "local"},
            rate_vs_torch_view=view_ratio, per_round_s=per_round))
    return rows


def measure_overhead(cases: tuple[OverheadCase, ...] | list[OverheadCase] = DEFAULT_CASES, *,
                     world_size: int = 2, steps: int = 10, rounds: int = 7,
                     variants: tuple[str, ...] = ("local", "torch", "distlab"),
                     timeout: float = 900.0, device: str = "cpu") -> list[OverheadRow]:
    """Measure every case on ``world_size`` ranks of this host; one row per case.

    Args:
        cases: :class:`OverheadCase` s (default: 200 x Linear(16); 8 x Linear(1024) at caps 1, 5
            and 25 MiB).
        world_size: ranks, >= 1 (one rank: DDP's own cost with a no-op allreduce).
        steps: training steps per variant per round, >= 1.
        rounds: timed rounds, >= 2 (one more, untimed, warms up first).
        variants: which of :data:`VARIANTS` to run; must include local, torch and distlab.
        timeout: seconds for the whole run (:func:`distlab.launch.run`).
        device: ``cpu``, ``cuda`` or ``auto`` (:func:`distlab.devices.ddp_placement`).
    """
    cases = tuple(cases)
    if not cases or not all(isinstance(c, OverheadCase) for c in cases):
        raise TypeError(f"cases must be a non-empty sequence of OverheadCase, got {cases!r}")
    check_int("world_size", world_size, minimum=1)
    check_int("steps", steps, minimum=1)
    check_int("rounds", rounds, minimum=2)
    variants = tuple(variants)
    bad = [v for v in variants if v not in VARIANTS]
    if bad or len(set(variants)) != len(variants) or not set(_REQUIRED) <= set(variants):
        raise ValueError(f"variants must be distinct names from {VARIANTS} including "
                         f"{_REQUIRED}, got {variants!r}")
    place = ddp_placement(device, gpu_count(), world_size)
    payload = [{k: getattr(c, k) for k in ("name", "layers", "width", "batch", "bucket_cap_mb")}
               for c in cases]
    results = launch.run(overhead_rank, world_size, backend=place.backend,
                         args=(payload, steps, rounds, list(variants)),
                         kwargs={"gpu_of_rank": place.gpu_of_rank}, timeout=timeout)
    return summarize_overhead(results, cases)



TARGET_RATE = 0.9  # distlab's step rate over torch DDP's

COLUMNS = (Column("case", "case", width=22), Column("params", "params"),
           Column("local(ms)", "local_ms", ".3f"), Column("torch(ms)", "torch_ms", ".3f"),
           Column("distlab(ms)", "distlab_ms", ".3f"),
           Column("torch us/param", "torch_us_per_param", ".2f"),
           Column("distlab us/param", "distlab_us_per_param", ".2f"),
           Column("cpu torch", "torch_cpu_us_per_param", ".2f"),
           Column("cpu distlab", "distlab_cpu_us_per_param", ".2f"),
           Column("rate vs torch", "rate_vs_torch", ".3f"), Column("min", "rate_min", ".2f"),
           Column("max", "rate_max", ".2f"), Column("view rate", "rate_vs_torch_view", ".3f"),
           Column("#wrong", "wrong"))


@dataclass(frozen=True)
class OverheadConfig(BenchConfig):
    """Options of ``python -m distlab.bench ddp-overhead``."""

    world_size: int = opt(2, "--world-size", type=options.positive_int, help="ranks")
    layers: int = opt(200, "--layers", type=options.positive_int, help="Linear layers")
    width: int = opt(16, "--width", type=options.positive_int, help="layer width")
    batch: int = opt(32, "--batch", type=options.positive_int, help="rows per batch")
    bucket_cap_mb: tuple[float, ...] = opt((25.0,), "--bucket-cap-mb",
                                           type=options.float_list(0.001),
                                           help="bucket caps in MiB, one case each (comma list)")
    steps: int = opt(10, "--steps", type=options.positive_int,
                     help="training steps per variant per round")
    rounds: int = opt(7, "--rounds", type=options.int_at_least(2),
                      help="timed rounds (one more warms up)")
    views: bool = opt(False, "--views", action="store_true",
                      help="also gradient_as_bucket_view=True for both DDPs")
    device: str = opt("auto", "--device", choices=DDP_DEVICES,
                      help="where parameters live: cpu, cuda, or auto (cuda when torch sees a GPU)")
    timeout: float = opt(900.0, "--timeout", type=options.positive_float,
                         help="seconds for the whole run")


def _display(row: OverheadRow) -> dict[str, Any]:
    return {"case": row.case, "params": row.params, "wrong": row.wrong,
            "local_ms": row.step_s["local"] * 1e3, "torch_ms": row.step_s["torch"] * 1e3,
            "distlab_ms": row.step_s["distlab"] * 1e3,
            "torch_us_per_param": row.us_per_param["torch"],
            "distlab_us_per_param": row.us_per_param["distlab"],
            "torch_cpu_us_per_param": row.cpu_us_per_param["torch"],
            "distlab_cpu_us_per_param": row.cpu_us_per_param["distlab"],
            "rate_vs_torch": row.rate_vs_torch, "rate_min": row.rate_spread[0],
            "rate_max": row.rate_spread[1], "rate_vs_torch_view": row.rate_vs_torch_view}


class OverheadBenchmark(Benchmark[OverheadConfig]):
    """distlab DDP's per-parameter cost beside torch DDP's (see the module docstring)."""

    name = "ddp-overhead"
    about = "per-parameter overhead and step rate of distlab DDP vs torch DDP (paired rounds)"
    config_type = OverheadConfig

    def check(self, parser: argparse.ArgumentParser, config: OverheadConfig) -> OverheadConfig:
        check_device_option(parser, config.device, config.world_size)
        return config

    def run(self, config: OverheadConfig) -> Report:
        c = config
        cases = tuple(OverheadCase(f"{c.layers}xLinear({c.width}) cap {cap:g}", c.layers,
                                   c.width, c.batch, cap) for cap in c.bucket_cap_mb)
        variants = VARIANTS if c.views else ("local", "torch", "distlab")
        place = ddp_placement(c.device, gpu_count(), c.world_size)
        rows = measure_overhead(cases, world_size=c.world_size, steps=c.steps, rounds=c.rounds,
                                variants=variants, timeout=c.timeout, device=c.device)
        head = [f"ddp-overhead: {place.label}, {c.world_size} rank(s), batch {c.batch}, "
                f"{c.steps} steps x {c.rounds} rounds (+1 warmup), variant order rotating; "
                "us/param = (step - local step) / parameter tensors; cpu = the training "
                "thread's CPU time; rate = median over rounds of torch/distlab step time"]
        tail = [f"{r.case}: distlab step rate = {r.rate_vs_torch:.3f} x torch DDP "
                f"(target >= {TARGET_RATE}) {'PASS' if r.rate_vs_torch >= TARGET_RATE else 'MISS'}"
                for r in rows]
        wrong = sum(r.wrong for r in rows)
        return Report([Table([_display(r) for r in rows], COLUMNS)], head, tail,
                      {"cases": [r.to_dict() for r in rows],
                       "placement": dataclasses.asdict(place)},
                      failed=f"{wrong} parameter tensors differ from torch DDP's" if wrong else "",
                      backend=place.backend, world_size=c.world_size)


BENCHMARK = OverheadBenchmark()


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench ddp-overhead``; see the module docstring."""
    return run_cli(BENCHMARK, argv)
