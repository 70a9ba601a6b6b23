"""The planner: every layout of a model on some GPUs, its memory per GPU and its step time.

:func:`price` prices one layout (a published run's, or the user's): memory per GPU with its
parts (:mod:`distlab.plan.memory`) and the step with its parts (:mod:`distlab.plan.step`).
:func:`enumerate_layouts` lists the layouts worth trying on the hardware, :func:`plan` prices
them all, keeps those that fit and ranks them by step time; where none fits it says what
would (:attr:`Plan.advice`).

Layouts tried (:func:`enumerate_layouts`): every split ``dp * tp * cp * pp`` of the GPUs with
``tp`` within a node dividing the heads (and the key/value heads, or divided by them),
``cp`` where the sequence is at least ``MIN_CP_TOKENS`` per rank, ``pp`` at most the layers;
ZeRO 0, 1 and 3 (FSDP); 1F1B and interleaved 1F1B (2 stages per rank) for ``pp > 1``;
micro-batches 1, 2 and 4 where the global batch divides; recompute none or full (selective
recompute keeps the attention's ``s^2`` tensors out of memory, which flash attention never
keeps: under it selective only costs time, so it is tried only when asked for; torchtitan's
per-op checkpointing, ``"op"``, exists in torchtitan alone, so it too is tried when asked for:
``recompute=("none", "op", "full")``).
Sequence parallelism is always on with ``tp > 1`` (the same traffic for less memory).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from distlab._checks import check_int
from distlab.plan.layout import PRECISIONS, Hardware, Layout
from distlab.plan.memory import MemoryEstimate, memory_per_gpu
from distlab.plan.model import ModelSpec
from distlab.plan.step import ComputeRate, StepEstimate, step_time
from distlab.vocabulary import size_in

__all__ = ["MIN_CP_TOKENS", "RECOMPUTE_TRIED", "TIE", "LayoutPrice", "Plan", "enumerate_layouts",
           "plan", "price", "tie_ranked"]

MIN_CP_TOKENS = 4096
"""Context parallelism is tried only where each rank keeps at least this many tokens of the
sequence (a shorter block leaves its transfer nothing to hide behind)."""

MICRO_BATCHES = (1, 2, 4)
ZERO_STAGES = (0, 1, 3)
RECOMPUTE_TRIED = ("none", "full")
PIPELINE_SCHEDULES = (("1F1B", 1), ("Interleaved1F1B", 2))


@dataclass(frozen=True)
class LayoutPrice:
    """One layout priced: its :class:`~distlab.plan.memory.MemoryEstimate` and
    :class:`~distlab.plan.step.StepEstimate`."""

    layout: Layout
    memory: MemoryEstimate
    step: StepEstimate
    fits: bool

    @property
    def headroom_bytes(self) -> int:
        """GPU memory left (negative: short by that much), bytes."""
        return self.step.hardware.gpu.memory_bytes - self.memory.total


@dataclass(frozen=True)
class Plan:
    """Every layout tried, ranked: ``ranked`` those that fit, fastest first (within
    :data:`TIE`, the smaller first); ``rejected`` the
    ones that do not, least short first; ``advice`` what would fit where nothing does."""

    model: ModelSpec
    hardware: Hardware
    ranked: tuple[LayoutPrice, ...]
    rejected: tuple[LayoutPrice, ...]
    advice: tuple[str, ...] = field(default=())

    @property
    def best(self) -> LayoutPrice | None:
        """The fastest layout that fits, or ``None``."""
        return self.ranked[0] if self.ranked else None


def price(model: ModelSpec, layout: Layout, hw: Hardware, *, rate: ComputeRate | None = None,
          simulate_pipeline: bool | str = "auto", **memory_options: Any) -> LayoutPrice:
    """Memory per GPU and step time of ``layout`` (its GPUs must be ``hw``'s);
    ``memory_options`` go to :func:`~distlab.plan.memory.memory_per_gpu` (``optimizer``,
    ``expandable_segments``, ...)."""
    memory = memory_per_gpu(model, layout, hw, **memory_options)
    step = step_time(model, layout, hw, rate=rate, simulate_pipeline=simulate_pipeline)
    return LayoutPrice(layout, memory, step, memory.total <= hw.gpu.memory_bytes)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tp_ok(model: ModelSpec, tp: int, gpus_per_node: int) -> bool:
    return (tp <= gpus_per_node and model.heads % tp == 0 and model.ffn % tp == 0
            and (model.kv % tp == 0 or tp % model.kv == 0))


def enumerate_layouts(model: ModelSpec, hw: Hardware, global_batch: int, *,
                      precision: str = "mixed", zero_stages: Iterable[int] = ZERO_STAGES,
                      recompute: Iterable[str] = RECOMPUTE_TRIED,
                      micro_batches: Iterable[int] = MICRO_BATCHES,
                      attention_kernel: str = "flash") -> Iterator[Layout]:
    """Every layout of the module docstring for ``global_batch`` sequences on ``hw``, each
    running ``attention_kernel`` (one of :data:`~distlab.plan.layout.ATTENTION_KERNELS`)."""
    global_batch = check_int("global_batch", global_batch, minimum=1)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    zero_stages, recompute, micro_batches = tuple(zero_stages), tuple(recompute), \
        tuple(micro_batches)
    for tp in _divisors(hw.gpus):
        if not _tp_ok(model, tp, hw.gpus_per_node):
            continue
        for cp in _divisors(hw.gpus // tp):
            if cp > 1 and (model.seq_len % (2 * cp) or model.seq_len // cp < MIN_CP_TOKENS):
                continue
            for pp in _divisors(hw.gpus // (tp * cp)):
                dp = hw.gpus // (tp * cp * pp)
                for schedule, v in (PIPELINE_SCHEDULES if pp > 1 else (("1F1B", 1),)):
                    if pp * v > model.layers:
                        continue
                    for mb in micro_batches:
                        if global_batch % (dp * mb):
                            continue
                        m = global_batch // (dp * mb)
                        if pp > 1 and (m < pp or (v > 1 and m % pp)):
                            continue  # torch refuses these (the schedules' own rules)
                        for zero in zero_stages:
                            if zero and dp * cp == 1:
                                continue
                            for rc in recompute:
                                yield Layout(dp=dp, tp=tp, pp=pp, cp=cp, zero=zero,
                                             sequence_parallel=tp > 1, schedule=schedule,
                                             stages_per_rank=v, micro_batch=mb,
                                             global_batch=global_batch, recompute=rc,
                                             precision=precision,
                                             attention_kernel=attention_kernel)


def plan(model: ModelSpec, hw: Hardware, global_batch: int, *, precision: str = "mixed",
         rate: ComputeRate | None = None, top: int = 10, **choices: Any) -> Plan:
    """Price every layout of :func:`enumerate_layouts` and rank them.

    Each layout is priced with the pipeline's closed-form fill and drain; the ``top`` fastest
    that fit are priced again with the schedule's event simulation and ranked on that.
    ``choices`` narrows :func:`enumerate_layouts` (``zero_stages``, ``recompute``,
    ``micro_batches``) or sets its ``attention_kernel``."""
    top = check_int("top", top, minimum=1)
    fits, short = [], []
    for layout in enumerate_layouts(model, hw, global_batch, precision=precision, **choices):
        p = price(model, layout, hw, rate=rate, simulate_pipeline=False)
        (fits if p.fits else short).append(p)
    fits = tie_ranked(fits)
    head = tie_ranked([price(model, p.layout, hw, rate=rate) for p in fits[:top]])
    short.sort(key=lambda p: p.memory.total)
    tried = tuple(choices.get("recompute", RECOMPUTE_TRIED))
    advice = () if head else _advice(model, hw, global_batch, short, tried)
    return Plan(model, hw, tuple(head) + tuple(fits[top:]), tuple(short), advice)


TIE = 0.005
"""Step times within this fraction of each other rank as equal, the one with less memory
first (ZeRO 1 beside DDP at the same speed: the headroom is worth having)."""


def tie_ranked(prices: list[LayoutPrice]) -> list[LayoutPrice]:
    """``prices`` fastest first, where a layout within :data:`TIE` of the fastest of its group
    joins that group, and each group is ordered by memory per GPU, the least first (then by
    step time). Groups are taken in order of speed, so a layout never ranks behind one more
    than ``TIE`` slower than it."""
    by_step = sorted(prices, key=lambda p: (p.step.step_s, p.memory.total))
    out: list[LayoutPrice] = []
    group: list[LayoutPrice] = []
    for p in by_step:
        if group and p.step.step_s > group[0].step.step_s * (1 + TIE):
            out += sorted(group, key=lambda q: (q.memory.total, q.step.step_s))
            group = []
        group.append(p)
    return out + sorted(group, key=lambda q: (q.memory.total, q.step.step_s))


def _advice(model: ModelSpec, hw: Hardware, global_batch: int, short: list[LayoutPrice],
            recompute_tried: tuple[str, ...] = RECOMPUTE_TRIED) -> tuple[str, ...]:
    if not short:
        return (f"no layout of {model.name} splits over {hw.gpus} GPUs with global batch "
                f"{global_batch}: give a batch that {hw.gpus} divides",)
    least = short[0]
    lines = [f"nothing fits in {size_in(hw.gpu.memory_bytes, 'GiB', '.1f')}: the least memory is "
             f"{least.layout.label} at {size_in(least.memory.total, 'GiB', '.1f')} per GPU "
             f"({size_in(-least.headroom_bytes, 'GiB', '.1f')} short)"]
    need = least.memory.total / hw.gpu.memory_bytes
    tried = ("full recompute and ZeRO-3 are already among the layouts tried"
             if "full" in recompute_tried else
             "full recompute was not tried: it keeps only each layer's input")
    lines.append(f"about {need:.1f}x the GPUs (or GPUs with {need:.1f}x the memory) would "
                 f"hold it; {tried}")
    return tuple(lines)
