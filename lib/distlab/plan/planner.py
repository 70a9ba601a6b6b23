"""The planner: every layout of a model on some GPUs, its memory per GPU and its step time.

:func:`price` prices one layout (a published run's, or the user's): memory per GPU with its
parts (:mod:`distlab.plan.memory`) and the step with its parts (:mod:`distlab.plan.step`).
:func:`enumerate_layouts` lists the layouts worth trying on the hardware, :func:`plan` prices
them all, keeps those that fit and ranks them, fastest first, by one key (:func:`rank_key`:
the layouts that fit with room to spare first, then the *tight* ones, whose headroom is within
the memory model's own error (:func:`tight_margin_bytes`); within each, the step time, charged
up to :data:`TIE` of it for memory per GPU), the same order whatever number of them is asked
for; where none fits it names a GPU count that holds one
(:attr:`Plan.advice`, :func:`fitting_count`).

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

import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from distlab._checks import check_int
from distlab.collective_library import NotPriced
from distlab.plan.calibration import RESERVED_ERROR_P90
from distlab.plan.layout import PRECISIONS, Hardware, Layout, hardware
from distlab.plan.memory import BOUND_OPTIONS, MemoryEstimate, memory_lower_bound, memory_per_gpu
from distlab.plan.step import ComputeRate, StepEstimate, step_time
from distlab.recompute import FULL, NONE, RECOMPUTE
from distlab.transformer import ModelSpec
from distlab.vocabulary import size_in

__all__ = ["MAX_COUNTS_TRIED", "MIN_CP_TOKENS", "RECOMPUTE_TRIED", "TIE", "LayoutPrice", "Plan",
           "Progress", "enumerate_layouts", "fitting_count", "plan", "price", "rank", "rank_key",
           "tight_margin_bytes"]

MIN_CP_TOKENS = 4096
"""Context parallelism is tried only where each rank keeps at least this many tokens of the
sequence (a shorter block leaves its transfer nothing to hide behind)."""

MICRO_BATCHES = (1, 2, 4)
ZERO_STAGES = (0, 1, 3)
RECOMPUTE_TRIED = (NONE.name, FULL.name)
PIPELINE_SCHEDULES = (("1F1B", 1), ("Interleaved1F1B", 2))


def tight_margin_bytes(hw: Hardware) -> int:
    """The headroom below which a layout that fits on ``hw`` is *tight*: the memory model's
    error, :data:`~distlab.plan.calibration.RESERVED_ERROR_P90` percent (the held-out p90 of its
    peak reserved bytes against measured runs) of the GPU's memory; 2.2 GiB of an H100's
    79.2."""
    return int(RESERVED_ERROR_P90 / 100 * hw.gpu.memory_bytes)


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

    @property
    def tight(self) -> bool:
        """It fits with less to spare than the memory model's own error
        (:func:`tight_margin_bytes`): "fits" rests on the replay being closer than the model
        has been on measured runs. Such layouts rank after every layout with more to spare
        (:func:`rank_key`)."""
        return self.fits and self.headroom_bytes < tight_margin_bytes(self.step.hardware)


@dataclass(frozen=True)
class Plan:
    """The ranking of every layout tried (:func:`plan`).

    ``ranked``: the first ``top`` layouts of the ranking of every layout that fits
    (:func:`rank_key`), each priced in full (its pipeline simulated, its step replayed through
    the caching allocator), so a longer ``top`` extends the same list and never reorders it;
    ``rejected``: the ``top`` least short of the layouts found not to fit, least memory first,
    each priced in full; ``fitting``: the layouts within the memory's lower bound (at most that
    many fit: most were never replayed; the same count whatever ``top``), ``tried``: how
    many were tried (those not priced included); ``advice``: what would fit where nothing does
    (:func:`plan`); ``not_priced``: each reason the GPU's collective library's model gave for
    a layout it could not price, with how many layouts it left out (none on NVIDIA GPUs)."""

    model: ModelSpec
    hardware: Hardware
    ranked: tuple[LayoutPrice, ...]
    rejected: tuple[LayoutPrice, ...]
    fitting: int
    tried: int
    advice: tuple[str, ...] = field(default=())
    not_priced: tuple[tuple[str, int], ...] = field(default=())

    @property
    def best(self) -> LayoutPrice | None:
        """The first layout of the ranking (the fastest that fits, or within :data:`TIE` of
        it in less memory), or ``None`` where nothing fits."""
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
            and (model.kv % tp == 0 or tp % model.kv == 0)
            and (not model.moe or model.expert_width % tp == 0))   # experts split as the MLP


def expert_degrees(model: ModelSpec, ranks: int, tried: Iterable[int] | None = None
                   ) -> tuple[int, ...]:
    """The expert-parallel degrees a layout of ``ranks = dp * cp`` data/context-parallel ranks
    can take for ``model``: the divisors of ``ranks`` that divide its routed experts (only 1
    for a dense model), narrowed to ``tried`` where given."""
    if not model.moe:
        return (1,)
    out = tuple(e for e in _divisors(ranks) if model.experts % e == 0)
    if tried is not None:
        keep = set(tried)
        out = tuple(e for e in out if e in keep)
    return out


def enumerate_layouts(model: ModelSpec, hw: Hardware, global_batch: int, *,
                      precision: str = "mixed", zero_stages: Iterable[int] = ZERO_STAGES,
                      recompute: Iterable[str] = RECOMPUTE_TRIED,
                      micro_batches: Iterable[int] = MICRO_BATCHES,
                      attention_kernel: str = "flash",
                      expert_parallel: Iterable[int] | None = None) -> Iterator[Layout]:
    """Every layout of the module docstring for ``global_batch`` sequences on ``hw``, each
    running ``attention_kernel`` (one of :data:`~distlab.plan.layout.ATTENTION_KERNELS`); for a
    model with experts, each at every expert-parallel degree of :func:`expert_degrees`
    (``expert_parallel`` narrows them)."""
    global_batch = check_int("global_batch", global_batch, minimum=1)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    zero_stages, recompute, micro_batches = tuple(zero_stages), tuple(recompute), \
        tuple(micro_batches)
    tried_ep = None if expert_parallel is None else tuple(expert_parallel)
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
                                for ep in expert_degrees(model, dp * cp, tried_ep):
                                    yield Layout(dp=dp, tp=tp, pp=pp, cp=cp, zero=zero,
                                                 sequence_parallel=tp > 1, schedule=schedule,
                                                 stages_per_rank=v, micro_batch=mb,
                                                 global_batch=global_batch, recompute=rc,
                                                 precision=precision,
                                                 attention_kernel=attention_kernel, ep=ep)


Progress = Callable[[int, int, int], None]
"""A hook :func:`plan` calls as it works: ``progress(bounded, total, priced)``, the layouts
priced cheaply so far of the ``total`` tried, and those priced in full (pipeline simulated,
step replayed) since. Called after every layout; a caller that draws throttles itself."""


def plan(model: ModelSpec, hw: Hardware, global_batch: int, *, precision: str = "mixed",
         rate: ComputeRate | None = None, top: int = 10,
         memory_options: dict[str, Any] | None = None, progress: Progress | None = None,
         **choices: Any) -> Plan:
    """Price every layout of :func:`enumerate_layouts` and rank those that fit.

    The ranking is one order over every layout that fits, each at its full price (a pipeline's
    step from the schedule's event simulation, its memory from the step replayed through the
    caching allocator: :func:`price`), sorted by :func:`rank_key`; ``top`` only says how much
    of it to return, so ``plan(..., top=1).best`` is ``plan(..., top=10).ranked[0]``. Every
    layout is first priced cheaply: its pipeline's closed-form fill and drain, whose step less
    its bubble bounds the full step from below, and
    :func:`~distlab.plan.memory.memory_lower_bound`, which bounds its memory from below (a
    layout over the GPU's memory by that bound does not fit, and is not replayed). Layouts are
    then priced in full in the order of the bounded rank key until the ``top`` first are known
    (a layout whose bound is past them cannot rank among them), so most pipelines of a large
    plan are never simulated and most steps never replayed; one that does not fit once replayed
    leaves the ranking. Layouts that fit with less to spare than the memory model's error
    (:attr:`LayoutPrice.tight`) rank after every one with more (:func:`rank_key`).
    ``fitting`` counts the layouts within the memory bound: at most that many fit, whatever
    ``top`` (a longer ``top`` replays more of them, and the count does not move).
    ``progress`` (:data:`Progress`) is told how far the work is. ``choices`` narrows
    :func:`enumerate_layouts` (``zero_stages``, ``recompute``, ``micro_batches``) or sets its
    ``attention_kernel``.
    Where nothing fits, ``advice`` names a GPU count at which a layout does fit, found by
    pricing the layouts of each count (:func:`fitting_count`). ``memory_options`` go to
    :func:`~distlab.plan.memory.memory_per_gpu` (``expandable_segments``, ``optimizer``, a
    framework's :data:`~distlab.plan.memory.FRAMEWORKS`), and those it shares with
    :func:`~distlab.plan.memory.memory_lower_bound` to the bound too."""
    top = check_int("top", top, minimum=1)
    mem = dict(memory_options or {})
    bound = _bound_options(mem)
    cands: list[_Bounded] = []
    over: list[_Bounded] = []
    unpriced: Counter[str] = Counter()
    layouts = list(enumerate_layouts(model, hw, global_batch, precision=precision, **choices))
    for i, layout in enumerate(layouts, 1):
        try:
            step = step_time(model, layout, hw, rate=rate, simulate_pipeline=False)
        except NotPriced as exc:
            unpriced[str(exc)] += 1
            continue
        finally:
            if progress is not None:
                progress(i, len(layouts), 0)
        b = _Bounded(layout, step, memory_lower_bound(model, layout, **bound))
        (cands if b.memory_bound <= hw.gpu.memory_bytes else over).append(b)
    if progress is None:
        head, ruled_out = _first_ranked(model, hw, cands, top, rate, mem)
    else:
        def priced(n: int) -> None:
            progress(len(layouts), len(layouts), n)

        head, ruled_out = _first_ranked(model, hw, cands, top, rate, mem, priced)
    shortest = sorted(over, key=lambda b: (b.memory_bound, b.layout.label))[:top]
    least = sorted(ruled_out + [price(model, b.layout, hw, rate=rate, **mem) for b in shortest],
                   key=lambda p: (p.memory.total, p.layout.label))[:top]
    tried = tuple(choices.get("recompute", RECOMPUTE_TRIED))
    advice = () if head else _advice(model, hw, global_batch, tuple(least), tried, precision,
                                     choices, mem)
    return Plan(model, hw, tuple(head), tuple(least), len(cands),
                len(cands) + len(over) + sum(unpriced.values()), advice,
                tuple(sorted(unpriced.items())))


@dataclass(frozen=True)
class _Bounded:
    """A layout priced cheaply: its closed-form step and a lower bound of its memory."""

    layout: Layout
    step: StepEstimate
    memory_bound: int


TIE = 0.01
"""The most memory is worth in the ranking, as a fraction of the step: a layout's rank key is
its step time times ``1 + TIE * (its memory per GPU / the GPU's memory)`` (:func:`rank_key`).
So of two layouts whose steps differ by less than ``TIE`` times the difference of their shares
of the GPU's memory, the one with more headroom ranks first (ZeRO 1 beside DDP at the same
speed: the headroom is worth having, and a layout near the memory's edge rests most on the
memory model), and a layout ranked ahead of another is never more than ``TIE`` slower."""


def rank_key(p: LayoutPrice) -> tuple[bool, float, int, str]:
    """The key the planner ranks layouts that fit by, smallest first: whether it is tight
    (:attr:`LayoutPrice.tight`: a layout that fits with room to spare ranks before every tight
    one, so the first of a ranking fits by more than the memory model's error wherever one
    does), then the step time charged for its memory (:data:`TIE`), then the memory per GPU,
    then the layout's label (so equal keys still rank the same way every time). A pure
    function of the one layout: any set of layouts ranks in the order of the whole ranking."""
    return (p.tight, p.step.step_s * _memory_charge(p), p.memory.total, p.layout.label)


def rank(prices: Iterable[LayoutPrice]) -> list[LayoutPrice]:
    """``prices`` in the planner's order (:func:`rank_key`)."""
    return sorted(prices, key=rank_key)


def _memory_charge(p: LayoutPrice) -> float:
    return 1.0 + TIE * p.memory.total / p.step.hardware.gpu.memory_bytes


def _first_ranked(model: ModelSpec, hw: Hardware, cands: list[_Bounded], top: int,
                  rate: ComputeRate | None, memory_options: dict[str, Any],
                  priced: Callable[[int], None] | None = None
                  ) -> tuple[list[LayoutPrice], list[LayoutPrice]]:
    """The ``top`` first of :func:`rank` over the layouts of ``cands`` that fit, each priced in
    full, pricing in full only what can still rank among them; and those priced in full that
    did not fit. A layout's bound: tight where its memory's lower bound already leaves less
    than :func:`tight_margin_bytes` (the full memory is never less), then its closed-form step
    less the closed-form bubble (a pipeline's simulated bubble is >= 0) charged for its
    memory's lower bound, which is never more than its rank key. ``priced(n)`` is called after
    each of the ``n`` layouts priced in full."""
    memory = hw.gpu.memory_bytes
    tight_above = memory - tight_margin_bytes(hw)

    def bound(b: _Bounded) -> tuple[bool, float, int, str]:
        charge = 1.0 + TIE * b.memory_bound / memory
        return (b.memory_bound > tight_above, (b.step.step_s - b.step.bubble_s) * charge,
                b.memory_bound, b.layout.label)

    pending = sorted(cands, key=bound)
    known: list[tuple[tuple[bool, float, int, str], LayoutPrice]] = []   # a heap on rank_key
    out: list[LayoutPrice] = []
    ruled_out: list[LayoutPrice] = []
    i = 0
    while len(out) < top and (known or i < len(pending)):
        if i < len(pending) and (not known or bound(pending[i]) < known[0][0]):
            b = pending[i]
            i += 1
            full = price(model, b.layout, hw, rate=rate,
                         simulate_pipeline="auto" if b.layout.pp > 1 else False,
                         **memory_options)
            if full.fits:
                heapq.heappush(known, (rank_key(full), full))
            else:
                ruled_out.append(full)
            if priced is not None:
                priced(i)
        else:
            out.append(heapq.heappop(known)[1])
    return out, ruled_out


MAX_COUNTS_TRIED = 32
"""GPU counts :func:`fitting_count` prices at most before it gives up."""


def fitting_count(model: ModelSpec, hw: Hardware, global_batch: int, *, start: int,
                  precision: str = "mixed", memory_options: dict[str, Any] | None = None,
                  **choices: Any) -> LayoutPrice | None:
    """The first layout that fits on the first GPU count, from ``start`` GPUs up in whole
    nodes of ``hw`` (then doubling, after ``MAX_COUNTS_TRIED // 2`` counts), at which one of
    :func:`enumerate_layouts` for ``global_batch`` sequences fits; its memory is priced
    (:func:`~distlab.plan.memory.memory_per_gpu`), its step is not. ``None`` when none of
    :data:`MAX_COUNTS_TRIED` counts holds one. The layouts most likely to fit (full recompute,
    the smallest micro-batch, ZeRO 3 first) are priced first, and the first that fits with room
    to spare is taken (a tight one, :attr:`LayoutPrice.tight`, only where every layout that
    fits at that count is tight); the one found carries its
    closed-form step (:func:`~distlab.plan.step.step_time` with ``simulate_pipeline=False``);
    ``memory_options`` as :func:`plan`'s."""
    mem = dict(memory_options or {})
    bound = _bound_options(mem)
    node = hw.gpus_per_node
    count = max(node, -(-check_int("start", start, minimum=1) // node) * node)
    order = {name: i for i, name in enumerate(reversed(RECOMPUTE))}   # least kept first
    for k in range(MAX_COUNTS_TRIED):
        at = hardware(hw.gpu, count, gpus_per_node=hw.gpus_per_node, network=hw.network)
        layouts = sorted(enumerate_layouts(model, at, global_batch, precision=precision,
                                           **choices),
                         key=lambda lay: (order[lay.recompute], lay.micro_batch, -lay.zero))
        tight: LayoutPrice | None = None
        for layout in layouts:
            if memory_lower_bound(model, layout, **bound) > at.gpu.memory_bytes:
                continue
            memory = memory_per_gpu(model, layout, at, **mem)
            if memory.fits():
                try:
                    step = step_time(model, layout, at, simulate_pipeline=False)
                except NotPriced:
                    continue
                found = LayoutPrice(layout, memory, step, True)
                if not found.tight:
                    return found
                tight = tight or found
        if tight is not None:
            return tight
        count += node if k < MAX_COUNTS_TRIED // 2 else count
    return None


def _bound_options(memory_options: dict[str, Any]) -> dict[str, Any]:
    """The ``memory_options`` :func:`~distlab.plan.memory.memory_lower_bound` takes too."""
    return {k: v for k, v in memory_options.items() if k in BOUND_OPTIONS}


def _advice(model: ModelSpec, hw: Hardware, global_batch: int, least: tuple[LayoutPrice, ...],
            recompute_tried: tuple[str, ...], precision: str,
            choices: dict[str, Any], memory_options: dict[str, Any]) -> tuple[str, ...]:
    if not least:
        return (f"no layout of {model.name} splits over {hw.gpus} GPUs with global batch "
                f"{global_batch}: give a batch that {hw.gpus} divides",)
    first = least[0]
    lines = [f"nothing fits in {size_in(hw.gpu.memory_bytes, 'GiB', '.1f')}: the least memory is "
             f"{first.layout.label} at {size_in(first.memory.total, 'GiB', '.1f')} per GPU "
             f"({size_in(-first.headroom_bytes, 'GiB', '.1f')} short)"]
    tried = ("full recompute and ZeRO-3 are already among the layouts tried"
             if FULL.name in recompute_tried else
             "full recompute was not tried: it keeps only each layer's input")
    need = first.memory.total / hw.gpu.memory_bytes
    found = fitting_count(model, hw, global_batch, start=max(hw.gpus + 1, int(need * hw.gpus)),
                          precision=precision, memory_options=memory_options, **choices)
    if found is None:
        lines.append(f"no count of {hw.gpu.name} GPUs tried ({MAX_COUNTS_TRIED} counts above "
                     f"{hw.gpus}) holds it with a global batch of {global_batch}; {tried}")
    else:
        at = found.step.hardware
        lines.append(f"on {at.gpus} GPUs it fits, priced: {found.layout.label} needs "
                     f"{size_in(found.memory.total, 'GiB', '.1f')} per GPU with the same "
                     f"global batch of {global_batch}"
                     + (" (tight: within the memory model's error)" if found.tight else "")
                     + f"; {tried}")
    return tuple(lines)
