"""The step's parts, keyed by parallel dimension: one entry per dimension says which layout
fields size it, which parts of the step it adds and how each is priced, and under which column
of ``python -m distlab.plan`` and which stack of the step figure each is shown.

A step (:func:`distlab.plan.step.step_time`) is compute, what each dimension exposes of its
communication, and the optimizer's step. A part is priced at one of three moments:

- :class:`StagePart`: per pipeline stage and microbatch, on the compute stream, so the pipeline
  sees it: given the stage's compute and what the parts before it added, the seconds it adds to
  the stage's forward and backward (:class:`Exposed`). Tensor parallelism's collectives, context
  parallelism's ring transfers and FSDP's per-layer gathers and reductions, in that order (FSDP
  hides behind the layer as it runs, the tp/cp collectives included).
- :class:`PipelinePart`: from every stage's times, the busiest pipeline rank's idle time (the
  bubble), from the schedule's event simulation or its closed form.
- :class:`StepPart`: once a step after the pipeline: the data-parallel gradient reduction and
  parameter gather, hidden behind the last backward and the first forward.

:func:`step_parts` lists every part in the order :meth:`~distlab.plan.step.StepEstimate.parts`
holds them (compute, the stage parts, the pipeline's, the step parts, the optimizer's), which
:func:`column_parts` and :func:`stack_parts` group into the command's columns and the
figure's stacks. A new dimension is one entry: :func:`register_dimension` (and
:func:`unregister_dimension`); its parts are priced, printed and drawn from then on. A
dimension with a group of ranks of its own also needs its :class:`~distlab.plan.layout.Layout`
field and its place in :data:`~distlab.plan.layout.DIMS`, the ranks' order.

The built-in entries, with the model each prices (:mod:`distlab.plan.step` says how they add
up):

- **tp**: each layer's collectives (:func:`~distlab.tensor_parallel.cost.layer_collectives` of
  the model's :class:`~distlab.transformer.ModelSpec` on one context-parallel rank's tokens:
  two all-reduces forward and two backward, or all-gathers and reduce-scatters with sequence
  parallelism) priced by NCCL's model on the ``tp`` group, fully exposed (Megatron-LM and torch's
  ``parallelize_module`` run them between the layer's matrix products), or with ``tp_overlap``
  what outlasts the layer's compute; the forward's again in backward where the recompute policy
  repeats them (:meth:`~distlab.recompute.Recompute.repeats_tp_forward`: full recompute, and
  per-op checkpointing without sequence parallelism), unless ``tp_overlap`` hides the repeat
  behind the recompute.
- **cp**: ring attention passes each rank's key/value block ``cp - 1`` times per layer forward,
  and keys, values and their gradients backward; each transfer hides behind the attention's own
  compute, what is longer is exposed.
- **dp**: DDP (``zero=0``) all-reduces every gradient, ZeRO 1/2 reduce-scatter them and
  all-gather the updated parameters, over the ``dp * cp`` ranks that hold the same parameters
  (``dp``, a step part); the reduction hides behind the last microbatch's backward (bucketed, as
  DDP and Megatron-LM overlap it) and the gather behind the next step's first forward, what is
  longer is exposed. ZeRO 3 / FSDP (``fsdp``, a stage part) gathers each layer's parameters
  before its forward and again before its backward and reduce-scatters its gradients after,
  every microbatch, each hidden behind the neighbouring layer as it runs (prefetch): FSDP's
  collectives run on streams of their own, so the window is the layer's time on the compute
  stream, its compute and the tensor/context-parallel collectives it waits for. Exposed is the
  part longer than that window, plus the first gather: nothing while the gather is the shorter,
  then every microsecond by which it is longer, in each layer of each microbatch (the
  two-stream pipeline's steady state). Under a pipeline schedule FSDP keeps the stage gathered
  through the step and reduces once after the last microbatch (torchtitan's choice; torch's
  ``PipelineStage`` defers gradient sync to the last microbatch), priced as ZeRO 1/2.
- **pp**: the stages' forward and backward seconds (compute plus the stage parts) feed the
  schedule's plan (:func:`~distlab.pipeline_parallel.schedules.registry.build_plan`) into
  distlab's event simulation (:func:`~distlab.pipeline_parallel.simulate.simulate`), the
  activations sent between stages priced as point-to-point transfers; the bubble is the
  simulated step less the busiest rank's work (``bubble``), or, beyond
  :data:`SIMULATE_UP_TO` stage-microbatches or when asked, the closed form's ``(p - 1)``
  slowest stage-steps of fill and drain.
- **ep** (a model with experts only: :attr:`Dimension.applies`): each MoE layer's dispatch and
  combine all-to-alls over the ``ep`` ranks, forward and backward
  (:func:`~distlab.plan.experts.moe_layer_a2a_seconds`), exposed, or with ``ep_overlap`` what
  outlasts the layer's compute. Its group is not one of the ranks' order: the ``ep`` ranks are a
  part of the ``dp * cp`` ranks.

A dimension that applies only to some models (``applies``) is priced, printed and drawn only
for those: :func:`dimensions`, :func:`step_parts`, :func:`column_parts` and :func:`stack_parts`
take the model, and without one list the dimensions every model has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from distlab.pipeline_parallel.schedules.registry import build_plan
from distlab.pipeline_parallel.simulate import P2PCost, Simulation, StageTimes, simulate
from distlab.plan.calibration import CAUSAL_WORK
from distlab.plan.collectives import collective_seconds, p2p_seconds
from distlab.plan.experts import A2A_LINK_SHARE, moe_layer_a2a_seconds
from distlab.plan.layout import DIMS, PRECISIONS, Hardware, Layout, group_span
from distlab.plan.partition import stage_moe_layers
from distlab.tensor_parallel.cost import layer_collectives
from distlab.transformer import ModelSpec, attention_score_flops

__all__ = ["ACTIVATION_BYTES", "BUILTIN", "COMPUTE", "OPTIMIZER", "SIMULATE_UP_TO", "Dimension",
           "Exposed", "Part", "PipelinePart", "RankWork", "StagePart", "StageSeconds",
           "StageWork", "StepInputs", "StepPart", "column_parts", "dimensions",
           "register_dimension", "stack_parts", "step_parts", "unregister_dimension"]

ACTIVATION_BYTES = 2
"""Bytes per activation element sent between stages and in tensor-parallel collectives
(16-bit, as every published run trains)."""

SIMULATE_UP_TO = 2048
"""``pp * stages_per_rank * microbatches`` up to which ``simulate_pipeline="auto"`` simulates."""


@dataclass(frozen=True)
class StepInputs:
    """What every part of one layout's step is priced from: the model, the layout, the hardware,
    the attention's FLOP/s on one GPU (the compute rate's, for the layout's kernel) and the
    share of NVLink an expert-parallel all-to-all moves its bytes at (the rate's)."""

    model: ModelSpec
    layout: Layout
    hw: Hardware
    attention_per_s: float
    a2a_link_share: float = A2A_LINK_SHARE


@dataclass(frozen=True)
class StageWork:
    """One pipeline stage for one microbatch on one GPU, as priced so far: its ``layers`` and
    ``params`` (elements on the GPU), its compute (seconds forward and backward, recompute
    included) and ``forward_s`` / ``backward_s``, the compute plus what the stage parts before
    this one added."""

    index: int
    layers: int
    params: int
    compute_forward_s: float
    compute_backward_s: float
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class Exposed:
    """What a stage part adds to one stage for one microbatch: seconds on the stage's forward and
    its backward, and the part's ``seconds`` in all (their sum, as the pricer adds it)."""

    forward_s: float
    backward_s: float
    seconds: float

    @classmethod
    def of(cls, forward_s: float, backward_s: float) -> Exposed:
        """Forward and backward seconds, ``seconds`` their sum."""
        return cls(forward_s, backward_s, forward_s + backward_s)


@dataclass(frozen=True)
class StageSeconds:
    """One stage for one microbatch, priced: ``forward_s`` and ``backward_s`` on the compute
    stream (compute and every stage part), ``compute_s``, each stage part's seconds by name
    (``parts``) and the stage's parameters per GPU."""

    forward_s: float
    backward_s: float
    compute_s: float
    parts: Mapping[str, float]
    params: int


@dataclass(frozen=True)
class RankWork:
    """What the pipeline and step parts are priced from: every stage (``stages``), those of the
    busiest pipeline rank (``rank_stages``), that rank's compute and stage parts over the step
    (``busy_s``), the most parameters a rank holds (``params``) and whether to simulate the
    pipeline (``simulate``, as :func:`~distlab.plan.step.step_time` takes it)."""

    stages: tuple[StageSeconds, ...]
    rank_stages: tuple[StageSeconds, ...]
    busy_s: float
    params: int
    simulate: bool | str


@dataclass(frozen=True)
class Part:
    """One part of the step.

    Attributes:
        name: its key in :meth:`~distlab.plan.step.StepEstimate.parts` (seconds;
            ``StepEstimate.<name>_s`` reads it).
        column: the header of the ``python -m distlab.plan`` table column that sums it (parts
            may share one); ``None``: no column.
        key: that column's key in :func:`~distlab.plan.table.plan_rows`' rows.
        stack: the step figure's stack that sums it (:func:`~distlab.viz.plan.step_figure`).
        description: the part in words (a timeline span's name).
    """

    name: str
    column: str | None
    key: str | None
    stack: str
    description: str


@dataclass(frozen=True)
class StagePart(Part):
    """A part priced per stage and microbatch on the compute stream: ``price(inputs)`` is called
    once per layout and returns the function from a :class:`StageWork` to its
    :class:`Exposed`."""

    price: Callable[[StepInputs], Callable[[StageWork], Exposed]]


@dataclass(frozen=True)
class PipelinePart(Part):
    """The pipeline's idle time: ``price(inputs, rank)`` returns its seconds per step and the
    simulation it ran (``None`` where it ran none)."""

    price: Callable[[StepInputs, RankWork], tuple[float, Simulation | None]]


@dataclass(frozen=True)
class StepPart(Part):
    """A part priced once a step after the pipeline: ``price(inputs, rank)`` returns its
    seconds."""

    price: Callable[[StepInputs, RankWork], float]


@dataclass(frozen=True)
class Dimension:
    """One parallel dimension of a layout.

    Attributes:
        name: e.g. ``"tp"``.
        fields: the :class:`~distlab.plan.layout.Layout` fields its pricing reads.
        group: the layout field that is the size of its group of ranks, placed in the ranks'
            order by :data:`~distlab.plan.layout.DIMS` (:meth:`Layout.stride
            <distlab.plan.layout.Layout.stride>`); ``None``: no group of its own.
        parts: the parts of the step it adds.
        applies: which models it prices (e.g. models with experts); ``None``: every model.
    """

    name: str
    fields: tuple[str, ...]
    group: str | None
    parts: tuple[StagePart | PipelinePart | StepPart, ...]
    applies: Callable[[ModelSpec], bool] | None = None

    def applies_to(self, model: ModelSpec | None) -> bool:
        """Whether it prices ``model`` (``None``: whether it prices every model)."""
        if self.applies is None:
            return True
        return model is not None and bool(self.applies(model))


COMPUTE = Part("compute", "compute", "compute", "compute", "compute")
"""The busiest pipeline rank's compute (:mod:`distlab.plan.step`), no dimension's."""

OPTIMIZER = Part("optimizer", "optim", "optimizer", "optimizer step", "optimizer step")
"""The optimizer's step after the last backward (:func:`~distlab.plan.step.
optimizer_seconds`), no dimension's; the command's ``optim`` column, so the step's columns add
up to it."""


# ---- tensor parallelism ----------------------------------------------------------------------

def _tp_layer_seconds(model: ModelSpec, layout: Layout, hw: Hardware) -> tuple[float, float]:
    if layout.tp == 1:
        return 0.0, 0.0
    span = group_span(layout.tp, layout.stride("tp"), hw.gpus_per_node)
    tokens = model.seq_len // layout.cp
    local = model if tokens == model.seq_len else _with_seq_len(model, tokens)
    calls = layer_collectives(local, layout.tp, layout.sequence_parallel,
                              micro_batch=layout.micro_batch, dtype_bytes=ACTIVATION_BYTES,
                              regather_inputs=layout.sequence_parallel)
    fwd = bwd = 0.0
    for c in calls:
        seconds = collective_seconds(c.collective, c.nbytes, span, hw)
        if c.phase == "forward":
            fwd += seconds
        else:
            bwd += seconds
    return fwd, bwd


@lru_cache(maxsize=256)
def _with_seq_len(model: ModelSpec, seq_len: int) -> ModelSpec:
    """``model`` on the ``seq_len`` tokens of one context-parallel rank."""
    return replace(model, seq_len=seq_len)


def _exposed_tp(comm_s: float, layer_compute_s: float, layout: Layout) -> float:
    """Exposed seconds of a layer's tensor-parallel collectives: all of them, or with
    ``tp_overlap`` what outlasts the layer's compute."""
    return max(0.0, comm_s - layer_compute_s) if layout.tp_overlap else comm_s


def _tp(inputs: StepInputs) -> Callable[[StageWork], Exposed]:
    layout = inputs.layout
    tp_f, tp_b = _tp_layer_seconds(inputs.model, layout, inputs.hw)
    # with tp_overlap the repeat hides behind the recompute
    again = (not layout.tp_overlap
             and layout.recompute_policy.repeats_tp_forward(layout.sequence_parallel))

    def price(st: StageWork) -> Exposed:
        per = max(st.layers, 1)
        fwd = st.layers * _exposed_tp(tp_f, st.compute_forward_s / per, layout)
        bwd = st.layers * (_exposed_tp(tp_b, st.compute_backward_s / per, layout)
                           + (tp_f if again else 0.0))
        return Exposed.of(fwd, bwd)
    return price


# ---- context parallelism ---------------------------------------------------------------------

def _cp_layer_exposed(model: ModelSpec, layout: Layout, hw: Hardware,
                      attention_per_s: float) -> tuple[float, float]:
    if layout.cp == 1:
        return 0.0, 0.0
    span = group_span(layout.cp, layout.stride("cp"), hw.gpus_per_node)
    block = 2 * (model.seq_len // layout.cp) * layout.micro_batch * model.kv_width \
        * ACTIVATION_BYTES // layout.tp
    hop = p2p_seconds(block, cross_node=span.nodes > 1, hw=hw)
    scores = attention_score_flops(model, model.seq_len)
    if model.sliding_layers:   # the model's mean layer: its windowed layers compute less
        scores -= (scores - attention_score_flops(model, model.seq_len, sliding=True)) \
            * model.sliding_layers / model.layers
    attention = scores * layout.micro_batch * CAUSAL_WORK / (layout.tp * layout.cp) \
        / attention_per_s
    fwd = max(0.0, (layout.cp - 1) * hop - attention)
    bwd = max(0.0, 2 * (layout.cp - 1) * hop - 2 * attention)
    return fwd, bwd


def _cp(inputs: StepInputs) -> Callable[[StageWork], Exposed]:
    cp_f, cp_b = _cp_layer_exposed(inputs.model, inputs.layout, inputs.hw,
                                   inputs.attention_per_s)

    def price(st: StageWork) -> Exposed:
        return Exposed(st.layers * cp_f, st.layers * cp_b, st.layers * (cp_f + cp_b))
    return price


# ---- data parallelism: FSDP per layer, DDP and ZeRO 1/2 per step ------------------------------

def _fsdp_exposed(model: ModelSpec, layout: Layout, hw: Hardware, layers: int, params: int,
                  fwd_s: float, bwd_s: float) -> tuple[float, float]:
    """Exposed seconds of ZeRO 3's per-layer gathers and reductions for one microbatch of a
    stage: ``(forward, backward)``; ``fwd_s`` and ``bwd_s`` are the stage's forward and
    backward as they run on the compute stream (compute and exposed tp/cp collectives), the
    window the next layer's gather (and the last layer's reduction) hides behind."""
    if layout.zero != 3 or layout.pp > 1 or layout.dp * layout.cp == 1 or layers == 0:
        return 0.0, 0.0  # under a pipeline, FSDP gathers once a step (see _dp_exposed)
    span = group_span(layout.dp * layout.cp, layout.tp, hw.gpus_per_node)
    unit = params // layers
    gather = collective_seconds("all_gather", unit * ACTIVATION_BYTES, span, hw)
    grad_bytes = PRECISIONS[layout.precision][1]
    reduce = collective_seconds("reduce_scatter", unit * grad_bytes, span, hw)
    per_f, per_b = fwd_s / layers, bwd_s / layers
    fwd = gather + (layers - 1) * max(0.0, gather - per_f)
    bwd = (layers - 1) * max(0.0, gather + reduce - per_b) + reduce
    return fwd, bwd


def _fsdp(inputs: StepInputs) -> Callable[[StageWork], Exposed]:
    def price(st: StageWork) -> Exposed:
        # a layer's gather hides behind the neighbouring layer as it runs on the compute
        # stream: its compute and the tp/cp collectives it waits for
        return Exposed.of(*_fsdp_exposed(inputs.model, inputs.layout, inputs.hw, st.layers,
                                         st.params, st.forward_s, st.backward_s))
    return price


def _dp_exposed(model: ModelSpec, layout: Layout, hw: Hardware, params: int,
                rank_stages: tuple[StageSeconds, ...]) -> float:
    group = layout.dp * layout.cp
    if group == 1 or (layout.zero == 3 and layout.pp == 1):
        return 0.0
    span = group_span(group, layout.tp, hw.gpus_per_node)
    param_b, grad_b, _ = PRECISIONS[layout.precision]
    window_b = sum(st.backward_s for st in rank_stages)
    window_f = sum(st.forward_s for st in rank_stages)
    if layout.zero == 0:
        reduce = collective_seconds("all_reduce", params * grad_b, span, hw)
        return max(0.0, reduce - window_b)
    reduce = collective_seconds("reduce_scatter", params * grad_b, span, hw)
    gather = collective_seconds("all_gather", params * min(param_b, 2), span, hw)
    return max(0.0, reduce - window_b) + max(0.0, gather - window_f)


def _dp(inputs: StepInputs, rank: RankWork) -> float:
    return _dp_exposed(inputs.model, inputs.layout, inputs.hw, rank.params, rank.rank_stages)


# ---- pipeline parallelism --------------------------------------------------------------------

def _simulate(model: ModelSpec, layout: Layout, hw: Hardware,
              stages: tuple[StageSeconds, ...]) -> Simulation:
    plan = _plan(layout.schedule, layout.pp, layout.microbatches, layout.stages_per_rank)
    times = StageTimes(tuple(st.forward_s for st in stages),
                       tuple(st.backward_s / 2 for st in stages),
                       tuple(st.backward_s / 2 for st in stages))
    sp = layout.tp if layout.sequence_parallel else 1
    boundary = (model.seq_len // layout.cp) * layout.micro_batch * model.hidden \
        * ACTIVATION_BYTES // sp
    span = group_span(layout.pp, layout.stride("pp"), hw.gpus_per_node)
    seconds = p2p_seconds(boundary, cross_node=span.nodes > 1, hw=hw)
    p2p = P2PCost("planner link", seconds, 0.0, "distlab.plan.collectives.p2p_seconds")
    return simulate(plan, times, boundary_nbytes=boundary, p2p=p2p)


@lru_cache(maxsize=256)
def _plan(schedule: str, pp: int, microbatches: int, stages_per_rank: int) -> Any:
    return build_plan(schedule, pp, microbatches, stages_per_rank)


def _bubble(inputs: StepInputs, rank: RankWork) -> tuple[float, Simulation | None]:
    layout = inputs.layout
    if layout.pp == 1:
        return 0.0, None
    sim = None
    if rank.simulate is True or (
            rank.simulate == "auto"
            and layout.pp * layout.stages_per_rank * layout.microbatches <= SIMULATE_UP_TO):
        sim = _simulate(inputs.model, layout, inputs.hw, rank.stages)
        pipeline_s = sim.step_time_s
    else:
        worst = max(st.forward_s + st.backward_s for st in rank.stages)
        pipeline_s = rank.busy_s + (layout.pp - 1) * worst
    return max(0.0, pipeline_s - rank.busy_s), sim


# ---- expert parallelism ----------------------------------------------------------------------

def _ep(inputs: StepInputs) -> Callable[[StageWork], Exposed]:
    model, layout = inputs.model, inputs.layout
    a2a_f, a2a_b = moe_layer_a2a_seconds(model, layout, inputs.hw,
                                         link_share=inputs.a2a_link_share)

    def price(st: StageWork) -> Exposed:
        moe = stage_moe_layers(model, layout, st.index) if model.moe else 0
        if moe == 0 or (a2a_f == 0 and a2a_b == 0):
            return Exposed(0.0, 0.0, 0.0)
        if layout.ep_overlap:
            per = max(st.layers, 1)
            fwd = max(0.0, a2a_f - st.compute_forward_s / per)
            bwd = max(0.0, a2a_b - st.compute_backward_s / per)
        else:
            fwd, bwd = a2a_f, a2a_b
        return Exposed.of(moe * fwd, moe * bwd)
    return price


def _has_experts(model: ModelSpec) -> bool:
    return model.moe


# ---- the registry ----------------------------------------------------------------------------

_TP_CP = ("tp+cp", "tp_cp", "tp/cp exposed")
_DP_FSDP = ("dp+fsdp", "dp_fsdp", "dp/fsdp exposed")

BUILTIN = (
    Dimension("tp", ("tp", "sequence_parallel", "tp_overlap", "recompute"), "tp",
              (StagePart("tp", *_TP_CP, "exposed tensor-parallel communication", _tp),)),
    Dimension("cp", ("cp",), "cp",
              (StagePart("cp", *_TP_CP, "exposed context-parallel communication", _cp),)),
    Dimension("dp", ("dp", "zero", "precision"), "dp",
              (StagePart("fsdp", *_DP_FSDP, "exposed FSDP gathers and reductions", _fsdp),
               StepPart("dp", *_DP_FSDP, "exposed data-parallel communication", _dp))),
    Dimension("pp", ("pp", "schedule", "stages_per_rank"), "pp",
              (PipelinePart("bubble", "bubble", "bubble", "bubble", "pipeline bubble",
                            _bubble),)),
    Dimension("ep", ("ep", "ep_overlap", "expert_capacity", "recompute"), None,
              (StagePart("ep", "ep a2a", "ep", "ep a2a", "exposed expert-parallel all-to-all",
                         _ep),), applies=_has_experts),
)
"""The built-in dimensions: those of the ranks' order (:data:`~distlab.plan.layout.DIMS`),
then expert parallelism (models with experts)."""

_registry: list[Dimension] = list(BUILTIN)


def dimensions(model: ModelSpec | None = None) -> tuple[Dimension, ...]:
    """The dimensions registered now that price ``model`` (``None``: those that price every
    model), in order (the built-in ones first)."""
    return tuple(d for d in _registry if d.applies_to(model))


def register_dimension(dim: Dimension) -> Dimension:
    """Add ``dim`` after the registered dimensions: from now on its parts are priced by
    :func:`~distlab.plan.step.step_time`, printed by ``python -m distlab.plan`` and drawn by
    :func:`~distlab.viz.plan.step_figure`. ``ValueError`` where its name or a part's name is
    taken, its group is not a field of :data:`~distlab.plan.layout.DIMS`, a part would share a
    column under another key, or a second pipeline part would be added; ``TypeError`` for what
    is not a :class:`Dimension` of parts."""
    if not isinstance(dim, Dimension):
        raise TypeError(f"dim must be a Dimension, got {type(dim).__name__}")
    if any(d.name == dim.name for d in _registry):
        raise ValueError(f"dimension {dim.name!r} is registered already")
    if dim.group is not None and dim.group not in DIMS:
        raise ValueError(f"dimension {dim.name!r}: group={dim.group!r} must be one of "
                         f"{', '.join(DIMS)} (the layout's ranks' order) or None")
    taken = {p.name: p for p in (COMPUTE, *(p for d in _registry for p in d.parts), OPTIMIZER)}
    keys = {p.column: p.key for p in taken.values() if p.column is not None}
    for part in dim.parts:
        if not isinstance(part, (StagePart, PipelinePart, StepPart)):
            raise TypeError(f"dimension {dim.name!r}: parts must be StagePart, PipelinePart or "
                            f"StepPart, got {type(part).__name__}")
        if part.name in taken:
            raise ValueError(f"dimension {dim.name!r}: part {part.name!r} is taken")
        if part.column is not None and keys.setdefault(part.column, part.key) != part.key:
            raise ValueError(f"dimension {dim.name!r}: column {part.column!r} has key "
                             f"{keys[part.column]!r}, not {part.key!r}")
        taken[part.name] = part
    if sum(isinstance(p, PipelinePart) for p in taken.values()) > 1:
        raise ValueError(f"dimension {dim.name!r}: the step has one pipeline part already")
    _registry.append(dim)
    return dim


def unregister_dimension(name: str) -> Dimension:
    """Remove the dimension called ``name`` and return it; ``ValueError`` where none is."""
    for i, d in enumerate(_registry):
        if d.name == name:
            return _registry.pop(i)
    raise ValueError(f"no dimension {name!r} is registered; registered: "
                     f"{', '.join(d.name for d in _registry)}")


def _parts(kind: type, model: ModelSpec | None) -> tuple[Any, ...]:
    return tuple(p for d in dimensions(model) for p in d.parts if isinstance(p, kind))


def step_parts(model: ModelSpec | None = None) -> tuple[Part, ...]:
    """Every part of ``model``'s step (:func:`dimensions`), in the order a step's parts are
    priced and listed: :data:`COMPUTE`, the stage parts, the pipeline's, the step parts,
    :data:`OPTIMIZER`."""
    return (COMPUTE, *_parts(StagePart, model), *_parts(PipelinePart, model),
            *_parts(StepPart, model), OPTIMIZER)


def column_parts(model: ModelSpec | None = None) -> dict[tuple[str, str], tuple[str, ...]]:
    """The command's step columns for ``model``: ``(header, key)`` -> the parts the column
    sums, in the order their first part comes in :func:`step_parts`."""
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for p in step_parts(model):
        if p.column is not None and p.key is not None:
            out[p.column, p.key] = out.get((p.column, p.key), ()) + (p.name,)
    return out


def stack_parts(model: ModelSpec | None = None) -> dict[str, tuple[str, ...]]:
    """The step figure's stacks for ``model``, bottom to top: the stack's name -> the parts it
    sums."""
    out: dict[str, tuple[str, ...]] = {}
    for p in step_parts(model):
        out[p.stack] = out.get(p.stack, ()) + (p.name,)
    return out
