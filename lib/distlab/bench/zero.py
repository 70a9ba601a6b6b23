"""Step time and bytes per rank of ZeRO stages 0-3 beside torch DDP and FSDP2 + Adam, measured side
by side on live ranks.

    python -m distlab.bench zero --world-size 2 --layers 8 --width 512
    python -m distlab.bench zero --stage 3           # ZeRO-3 beside torch FSDP2

Every rank trains the same MLP (``layers`` x Linear(``width``) + ReLU, Adam) as torch DDP
(``ddp``) and as :class:`distlab.zero.ZeroDataParallel` at each ``--stage`` (default 0, 1, 2)
from the same weights on the same batches. With stage 3: torch FSDP2 (``fsdp2``: ``fully_shard``
on every Linear, then on the root) and four stage-3 variants: ``stage3`` (distlab's plans,
prefetch 1), ``stage3:nopf`` (prefetch 0), ``stage3:builtin`` and ``stage3:builtin:nopf``
(torch's built-in collectives), each unit a Linear as FSDP2's. One round runs ``steps`` steps
of every variant after a barrier, the variant order rotating from round to round; round 0 warms
up and is not timed. A round's time for a variant is its slowest rank's seconds per step;
reported: the median over rounds, ``vs_ddp``, the median over rounds of ``variant / ddp``
within one round (paired, so load drift cancels; above 1 is slower than DDP), and with stage 3
``vs_fsdp2`` the same against FSDP2 (FSDP2's speed relative to the variant's is its inverse).

Bytes per rank: after the timed rounds every rank sums the bytes of the distinct storages behind
each variant's model states (parameters, gradients, Adam's state; :func:`state_bytes`: for the ZeRO
variants :func:`distlab.zero.measure.held_bytes`, for torch DDP and FSDP2 their (local) parameters,
``.grad`` after one more backward, and Adam's state). The table shows the largest rank's total
(``states``) beside the model's (:func:`distlab.zero.memory_model.zero_memory`, fp32; ``ddp`` as
stage 0, ``fsdp2`` as stage 3: shards; the units gathered in flight are freed after a step), in the
binary unit that fits (named in the header). The JSON rows carry both in bytes: ``state_bytes``
(with ``state_parts``: params, grads, optimizer) and ``model_state_bytes``; the JSON's ``params`` is
the parameter count. torch DDP's own gradient buckets are communication buffers, not model states,
and are not counted.
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
from distlab.zero.fsdp2_check import shard_like_fsdp2
from distlab.zero.measure import held_bytes, storage_bytes
from distlab.zero.memory_model import byte_unit, zero_memory
from distlab.zero.optimizer import ZeroDataParallel

__all__ = ["BENCHMARK", "STAGE3_VARIANTS", "VARIANTS", "ZeroConfig", "columns", "main",
           "state_bytes", "summarize", "variants_for", "zero_bench_rank"]

#: The default run's variants (stages 0, 1, 2).
VARIANTS = ("ddp", "stage0", "stage1", "stage2")
#: Stage 3's variants: (name, algorithm, prefetch), beside ``fsdp2``.
STAGE3_VARIANTS = (("stage3", None, 1), ("stage3:nopf", None, 0),
                   ("stage3:builtin", "builtin", 1), ("stage3:builtin:nopf", "builtin", 0))
_TORCH = ("ddp", "fsdp2")   # torch's own: DDP, and FSDP2 as the stage-3 reference


def variants_for(stages: tuple[int, ...]) -> tuple[str, ...]:
    """The variants a run of ``stages`` times: ``ddp``, then per stage its own (stage 3:
    ``fsdp2`` and :data:`STAGE3_VARIANTS`)."""
    out = ["ddp"]
    for s in sorted(set(stages)):
        out += (["fsdp2"] + [v[0] for v in STAGE3_VARIANTS]) if s == 3 else [f"stage{s}"]
    return tuple(out)


def stage_of(variant: str) -> int:
    """The ZeRO stage a variant's memory is modelled as (``ddp`` 0, ``fsdp2`` 3)."""
    torch_stage = {"ddp": 0, "fsdp2": 3}
    return torch_stage[variant] if variant in torch_stage else int(variant.split(":")[0][-1])


def _torch_step(opt: torch.optim.Optimizer) -> Any:
    def step() -> None:
        opt.step()
        opt.zero_grad()
    return step


def _variant(name: str, layers: int, width: int, rank: int) -> tuple[Any, Any, Any]:
    """(callable model, step function, torch's Adam for ``ddp``/``fsdp2`` else None)."""
    if name == "ddp":
        m: Any = DistributedDataParallel(mlp(layers, width, 0))
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        return m, _torch_step(opt), opt
    if name == "fsdp2":
        m = shard_like_fsdp2(mlp(layers, width, 0))
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        return m, _torch_step(opt), opt
    if name.startswith("stage3"):
        _, algorithm, prefetch = next(v for v in STAGE3_VARIANTS if v[0] == name)
        z = ZeroDataParallel(mlp(layers, width, 0), 3, lr=1e-3, algorithm=algorithm,
                             prefetch=prefetch)
        return z, z.step, None
    z = ZeroDataParallel(mlp(layers, width, 0), int(name[-1]), lr=1e-3)
    return z, z.step, None


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (FSDP2's parameters and state), else the tensor."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def state_bytes(variant: str, model: Any, optimizer: Any, x: torch.Tensor) -> dict[str, int]:
    """Measured model-state bytes of one variant on this rank: ``params``, ``grads``,
    ``optimizer`` and ``total`` (each storage counted once, in the first state that holds it).
    ZeRO variants: :func:`~distlab.zero.measure.held_bytes` after their last step. ``ddp`` and
    ``fsdp2`` (``zero_grad`` frees their ``.grad`` after every step): one more backward on
    ``x`` first, so the gradients are counted as they are held during a step, then freed
    again; every rank must call this in the same order (the backward all-reduces). FSDP2's
    parameters, gradients and state are DTensors: their local shards are counted."""
    if variant not in _TORCH:
        return held_bytes(model)
    model(x).pow(2).mean().backward()
    module = model.module if variant == "ddp" else model
    params = [_local(p) for p in module.parameters()]
    grads = [_local(p.grad) for p in module.parameters() if p.grad is not None]
    states = [_local(t) for st in optimizer.state.values() for t in st.values()
              if isinstance(t, torch.Tensor)]
    seen: set[int] = set()
    out: dict[str, int] = {}
    for key, tensors in (("params", params), ("grads", grads), ("optimizer", states)):
        out[key] = storage_bytes(tensors, exclude=seen)
        seen |= {t.untyped_storage().data_ptr() for t in tensors}
    out["total"] = out["params"] + out["grads"] + out["optimizer"]
    optimizer.zero_grad()
    return out


def zero_bench_rank(rank: int, world_size: int, layers: int, width: int, batch: int,
                    steps: int, rounds: int, stages: tuple[int, ...] = (0, 1, 2)
                    ) -> dict[str, Any]:
    """Rank function: ``{"seconds": {variant: seconds per step, per round}, "state_bytes":
    {variant: measured bytes (params, grads, optimizer, total)}, "params": count}`` for the
    variants of ``stages`` (:func:`variants_for`)."""
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(rank)
    xs = [torch.randn(batch, width, generator=g) for _ in range(steps)]
    variants = variants_for(stages)
    runs = {v: _variant(v, layers, width, rank) for v in variants}

    def train(v: str, _: Phases) -> None:
        model, step, _opt = runs[v]
        for x in xs:
            model(x).pow(2).mean().backward()
            step()

    # rotate: the variants are compared within a round (vs_ddp is paired by round), so each
    # goes first in turn and a change in load hits them alike
    timings = timed_rounds(variants, train, warmup=1, rounds=rounds, rotate=True,
                           fences=rank_fences(torch.device("cpu")))
    out = {"seconds": {v: [s / steps for s in timings.seconds[i]]
                       for i, v in enumerate(variants)},
           "state_bytes": {v: state_bytes(v, runs[v][0], runs[v][2], xs[0]) for v in variants},
           "params": sum(p.numel() for p in mlp(layers, width, 0).parameters())}
    for model, _step, _opt in runs.values():
        if isinstance(model, ZeroDataParallel):
            model.close()
    return out


def summarize(results: list[dict[str, list[float]]],
              states: list[dict[str, dict[str, int]]] | None = None, params: int = 0,
              world_size: int = 1) -> list[dict[str, Any]]:
    """Rows (one per variant, in the order of ``results``' keys) from the ranks' per-round
    seconds: median ms per step, vs_ddp, and vs_fsdp2 when ``fsdp2`` ran; with ``states``
    (each rank's measured bytes per variant) also ``state_bytes`` and ``state_parts`` (the
    largest rank's) and ``model_state_bytes`` (the fp32 model for ``params`` parameters on
    ``world_size`` ranks; ``ddp`` as stage 0, ``fsdp2`` as stage 3)."""
    variants = list(results[0])
    per_round = {v: [max(r[v][i] for r in results) for i in range(len(results[0][v]))]
                 for v in variants}

    def paired(v: str, ref: str) -> float:
        return statistics.median(a / b for a, b in zip(per_round[v], per_round[ref],
                                                       strict=True))

    rows = [{"variant": v, "step_ms": statistics.median(per_round[v]) * 1e3,
             "vs_ddp": paired(v, "ddp"),
             "min_ms": min(per_round[v]) * 1e3, "max_ms": max(per_round[v]) * 1e3}
            for v in variants]
    if "fsdp2" in per_round:
        for row in rows:
            row["vs_fsdp2"] = paired(row["variant"], "fsdp2")
    if states:
        for row in rows:
            v = row["variant"]
            parts = max((s[v] for s in states), key=lambda b: b["total"])
            row.update(state_bytes=parts["total"], state_parts=dict(parts),
                       model_state_bytes=zero_memory(params, world_size, stage_of(v),
                                                     "fp32").total)
    return rows


def columns(rows: list[dict[str, Any]]) -> tuple[Column, ...]:
    """The table's columns; the bytes columns in the unit that fits ``rows``' bytes."""
    unit, scale = byte_unit([r[k] for r in rows for k in ("state_bytes", "model_state_bytes")
                             if r.get(k) is not None])
    width = max([8] + [len(r["variant"]) for r in rows])
    fsdp2 = (Column("vs fsdp2", "vs_fsdp2", ".3f"),) if any("vs_fsdp2" in r for r in rows) else ()
    return (Column("variant", "variant", width=width),) + COLUMNS[1:] + fsdp2 + (
        Column(f"states({unit})", "state_bytes", ".3f", 1 / scale),
        Column(f"model({unit})", "model_state_bytes", ".3f", 1 / scale))


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
    stage: tuple[str, ...] = opt(("0", "1", "2"), "--stage",
                                 type=options.comma_choices(("0", "1", "2", "3")),
                                 help="ZeRO stages to time (3 adds torch FSDP2 and stage 3 "
                                      "with prefetch on and off)")
    timeout: float = opt(900.0, "--timeout", type=options.positive_float,
                         help="seconds for the whole run")


class ZeroBenchmark(Benchmark[ZeroConfig]):
    """ZeRO stages' step time beside torch DDP's (see the module docstring)."""

    name = "zero"
    about = ("step time and bytes per rank of ZeRO stages 0-3 (distlab.zero) beside torch "
             "DDP and FSDP2 + Adam")
    config_type = ZeroConfig

    def run(self, config: ZeroConfig) -> Report:
        c = config
        stages = tuple(int(s) for s in c.stage)
        res = launch.run(zero_bench_rank, c.world_size,
                         args=(c.layers, c.width, c.batch, c.steps, c.rounds, stages),
                         timeout=c.timeout)
        rows = summarize([r["seconds"] for r in res], [r["state_bytes"] for r in res],
                         res[0]["params"], c.world_size)
        head = [f"zero: gloo, {c.world_size} rank(s), {c.layers}xLinear({c.width}), batch "
                f"{c.batch}, Adam, {c.steps} steps x {c.rounds} rounds (+1 warmup)",
                "step: the slowest rank's ms per step, median over rounds (variant order "
                "rotating)",
                "vs ddp: median over rounds of variant / ddp step time"]
        if 3 in stages:
            head += ["vs fsdp2: the same against torch FSDP2 (fully_shard per Linear); "
                     "1 / it: the speed as a fraction of FSDP2's",
                     "stage3: units = Linears, prefetch 1 (nopf: 0); builtin: torch's "
                     "collectives, else distlab's plans"]
        head += ["states: bytes of params + grads + Adam state per rank, measured (largest rank)",
                 f"model: the same by distlab.zero.memory_model (fp32, {res[0]['params']:,} "
                 "params; stage 3: the shards)"]
        return Report([Table(rows, columns(rows))], head, [],
                      {"rows": rows, "params": res[0]["params"]},
                      backend="gloo", world_size=c.world_size)


BENCHMARK = ZeroBenchmark()


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench zero``; see the module docstring."""
    return run_cli(BENCHMARK, argv)
