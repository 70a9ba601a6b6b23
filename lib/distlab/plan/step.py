"""Step time of a layout: compute, exposed communication and the pipeline bubble.

The model, in full (every term is per optimizer step, on the slowest rank):

- **Compute.** Each stage's FLOPs per microbatch (:func:`stage_flops`: its layers' matrix
  products, the output layer on the last stage; backward twice the forward; plus what the
  layout's recompute policy runs again, :meth:`~distlab.recompute.Recompute.
  forward_again_flops`: full recompute one more forward of the layers, selective the
  attention's ``s^2`` products, per-op checkpointing (``"op"``, torchtitan's) the products its
  policy does not keep (:func:`~distlab.transformer.per_op_saved_linears`), not the attention),
  divided over ``tp * cp`` GPUs, run at :meth:`ComputeRate.flops_per_s`: the GPU's peak times an
  efficiency that grows with the width each GPU multiplies (``hidden / tp``), calibrated on
  published runs (:mod:`distlab.plan.calibration`).
- **Each parallel dimension's exposed communication**, priced by its entry in
  :mod:`distlab.plan.dimensions` (which says how each is priced): per stage and microbatch on
  the compute stream, tensor parallelism's collectives, context parallelism's ring transfers and
  FSDP's per-layer gathers and reductions, in that order (FSDP's window is the layer's compute
  and the tp/cp collectives it waits for); then the pipeline: the stages' forward and backward
  seconds (compute plus those parts) feed the schedule's event simulation, and the bubble is
  the simulated step less the busiest rank's work; then, once a step, the data-parallel
  gradient reduction and parameter gather, what the last backward and the first forward do
  not hide.
- **Experts** (a model with experts): an MoE layer's FLOPs are its active ones (the attention,
  router, shared experts and ``top_k`` routed experts per token,
  :func:`~distlab.transformer.moe_layer_matmul_flops`); the routed experts' grouped products
  run at the rate of a matrix ``expert_ffn / etp`` wide times the rate's ``grouped_gemm``
  (:data:`~distlab.plan.experts.GROUPED_GEMM_EFFICIENCY`), the busiest expert-parallel rank's
  share of the rows (:func:`~distlab.plan.experts.row_factor`: the stated
  :data:`~distlab.plan.experts.IMBALANCE` dropless, the capacity factor with token drop)
  included; the all-to-alls are the ``ep`` dimension's part.
- **Optimizer.** AdamW's step after the last backward, memory-bound: the bytes it moves over
  the GPU's memory bandwidth (:func:`optimizer_seconds`; measured at 0.72 of the data sheet's
  on an H200), exposed.

:class:`StepEstimate` holds each part's seconds by name, in the order of
:func:`~distlab.plan.dimensions.step_parts`; ``step_s`` is their sum.

Left out, and said so: the embedding's and loss's small collectives, kernel launch gaps, the
elementwise kernels between the products (the fitted rate carries them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from distlab.pipeline_parallel.simulate import Simulation
from distlab.plan.calibration import (
    CAUSAL_WORK,
    OPTIMIZER_BANDWIDTH,
    OPTIMIZER_BYTES_PER_PARAM,
    ComputeRate,
    shipped_rate,
)
from distlab.plan.dimensions import (
    ACTIVATION_BYTES,
    COMPUTE,
    OPTIMIZER,
    SIMULATE_UP_TO,
    PipelinePart,
    RankWork,
    StagePart,
    StageSeconds,
    StageWork,
    StepInputs,
    StepPart,
    dimensions,
)
from distlab.plan.experts import check_experts, row_factor
from distlab.plan.layout import Hardware, Layout, check_layout_fits
from distlab.plan.partition import (
    layers_per_stage,
    rank_params,
    stage_moe_layers,
    stage_params,
    stage_sliding_layers,
)
from distlab.timeline import Timeline
from distlab.transformer import (
    ModelSpec,
    attention_score_flops,
    layer_matmul_flops,
    moe_layer_matmul_flops,
    per_op_saved_linears,
    routed_expert_flops,
)

__all__ = ["ACTIVATION_BYTES", "CAUSAL_WORK", "SIMULATE_UP_TO", "StepEstimate",
           "model_flops_per_step", "optimizer_seconds", "output_layer_s", "routed_expert_seconds",
           "stage_flops", "step_time", "step_timeline"]


@dataclass(frozen=True)
class StageFlops:
    """FLOPs of one stage for one microbatch on one GPU: ``forward``, ``backward`` (input and
    weight gradients) and ``recompute`` (forward work done again in backward);
    ``expert_forward`` and ``expert_recompute``: the routed experts' share of ``forward`` and
    ``recompute`` (the busiest expert-parallel rank's, :func:`~distlab.plan.experts.row_factor`
    included)."""

    forward: float
    backward: float
    recompute: float
    attention_forward: float
    expert_forward: float = 0.0
    expert_recompute: float = 0.0


def stage_flops(model: ModelSpec, layout: Layout, layers: int, *, last: bool,
                moe_layers: int = 0, sliding_layers: int = 0) -> StageFlops:
    """FLOPs of a stage of ``layers`` layers (``moe_layers`` of them MoE layers,
    ``sliding_layers`` of them sliding-window ones) and the output layer if ``last``, for one
    microbatch, on one of its ``tp * cp`` GPUs. Per layer, the stage's mean attention
    (:func:`~distlab.transformer.attention_score_flops`: what its windowed layers do not
    compute spread over its layers; every term is linear in it, so the stage's sums are
    exact)."""
    b, s, split = layout.micro_batch, model.seq_len, layout.tp * layout.cp
    layer = layer_matmul_flops(model, s) * b / split
    attention = attention_score_flops(model, s) * b / split
    windowed = 0.0
    if sliding_layers:
        windowed = (attention_score_flops(model, s) - attention_score_flops(
            model, s, sliding=True)) * b / split * sliding_layers / layers
        layer, attention = layer - windowed, attention - windowed
    dense = layers - moe_layers
    forward = dense * layer + (2 * s * b * model.hidden * model.vocab / split if last else 0)
    recomputed_products = sum(2 * s * b * lin.in_features * lin.out_features
                              for lin, saved in per_op_saved_linears(model)
                              if not saved) / split
    policy = layout.recompute_policy
    recompute = dense * policy.forward_again_flops(
        layer=layer, attention=attention, unsaved_products=recomputed_products)
    if not moe_layers:
        return StageFlops(forward, 2 * forward, recompute, layers * attention)
    routed = routed_expert_flops(model, s) * b / split
    rows = row_factor(layout)
    moe = moe_layer_matmul_flops(model, s) * b / split - windowed + routed * (rows - 1)
    expert = moe_layers * routed * rows
    forward += moe_layers * moe
    again = moe_layers * policy.forward_again_flops(
        layer=moe, attention=attention, unsaved_products=recomputed_products)
    expert_again = expert if policy.keeps_input_only else 0.0
    return StageFlops(forward, 2 * forward, recompute + again, layers * attention, expert,
                      expert_again)


def output_layer_s(model: ModelSpec, layout: Layout, hw: Hardware, *,
                   rate: ComputeRate | None = None) -> float:
    """Seconds per step the last pipeline stage spends on the output layer (the vocabulary
    projection, ``2 s b h v`` FLOPs forward, twice that backward, every microbatch), on one of
    its ``tp * cp`` GPUs: the work only the last stage does (part of :func:`stage_flops` with
    ``last=True``), which leaves every other stage waiting that long."""
    rate = shipped_rate() if rate is None else rate
    per_s = rate.flops_per_s_dtype(hw, model.hidden // layout.tp, layout.compute_dtype)
    forward = 2 * model.seq_len * layout.micro_batch * model.hidden * model.vocab \
        / (layout.tp * layout.cp)
    return 3 * forward / per_s * layout.microbatches


def model_flops_per_step(model: ModelSpec, layout: Layout) -> float:
    """The model's FLOPs per step as MFU counts them: three times the forward's (forward and
    backward, no recompute) over ``global_batch`` sequences, attention counted whole
    (``6 N + 12 l h s`` per token, N without the embedding)."""
    return 3.0 * model.forward_flops() * layout.global_batch


@dataclass(frozen=True)
class StepEstimate:
    """One layout's step, seconds, with its parts (the module docstring defines each).

    ``seconds``: each part's seconds by name, in the order of
    :func:`~distlab.plan.dimensions.step_parts` (:meth:`parts` as a dict, :meth:`part_s` one of
    them, a registered dimension's part alike). The built-in parts, each an attribute too:
    ``compute_s``: the busiest pipeline rank's compute; ``tp_s``, ``cp_s``: exposed tensor-
    and context-parallel communication on that rank; ``fsdp_s``: exposed ZeRO-3 gathers and
    reductions; ``bubble_s``: that rank's idle time in the pipeline (waiting on other stages
    and on transfers), what the pipeline adds to its work (not the bubble fraction of every
    rank's time, :attr:`~distlab.pipeline_parallel.simulate.Simulation.bubble_fraction`);
    ``dp_s``: exposed gradient reduction and parameter gather; ``optimizer_s``: the
    optimizer's step after the backward; ``step_s`` their sum.
    """

    model: ModelSpec
    layout: Layout
    hardware: Hardware
    seconds: tuple[tuple[str, float], ...]
    simulation: Simulation | None = field(default=None, compare=False, repr=False)

    def part_s(self, name: str) -> float:
        """Seconds of the part called ``name``; ``KeyError`` naming the parts where it has
        none."""
        for key, value in self.seconds:
            if key == name:
                return value
        raise KeyError(f"the step has no part {name!r}; its parts: "
                       f"{', '.join(k for k, _ in self.seconds)}")

    @property
    def compute_s(self) -> float:
        """The busiest pipeline rank's compute, seconds."""
        return self.part_s("compute")

    @property
    def tp_s(self) -> float:
        """Exposed tensor-parallel communication, seconds."""
        return self.part_s("tp")

    @property
    def cp_s(self) -> float:
        """Exposed context-parallel communication, seconds."""
        return self.part_s("cp")

    @property
    def fsdp_s(self) -> float:
        """Exposed ZeRO-3 gathers and reductions, seconds."""
        return self.part_s("fsdp")

    @property
    def bubble_s(self) -> float:
        """The busiest pipeline rank's idle time, seconds."""
        return self.part_s("bubble")

    @property
    def dp_s(self) -> float:
        """Exposed gradient reduction and parameter gather, seconds."""
        return self.part_s("dp")

    @property
    def optimizer_s(self) -> float:
        """The optimizer's step, seconds."""
        return self.part_s("optimizer")

    @property
    def step_s(self) -> float:
        """Seconds of one optimizer step: every part's, added in order."""
        total = 0.0
        for _, value in self.seconds:
            total += value
        return total

    @property
    def tokens_per_s_per_gpu(self) -> float:
        """Tokens trained per second per GPU."""
        tokens = self.layout.global_batch * self.model.seq_len
        return tokens / self.step_s / self.layout.gpus

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: :func:`model_flops_per_step` over the step, per GPU, over
        the GPU's peak."""
        return (model_flops_per_step(self.model, self.layout) / self.step_s
                / self.layout.gpus / self.hardware.gpu.peak_flops)

    def parts(self) -> dict[str, float]:
        """The seconds of each part, by name (their sum is :attr:`step_s`)."""
        return dict(self.seconds)


def step_time(model: ModelSpec, layout: Layout, hw: Hardware, *,
              rate: ComputeRate | None = None,
              simulate_pipeline: bool | str = "auto") -> StepEstimate:
    """The :class:`StepEstimate` of ``layout`` for ``model`` on ``hw``.

    Args:
        model, layout, hw: what runs where (``layout.gpus`` must equal ``hw.gpus``).
        rate: the compute rate; default the shipped calibration
            (:func:`distlab.plan.calibration.shipped_rate`).
        simulate_pipeline: ``True``: the bubble from the schedule's event simulation;
            ``False``: from per-stage times on the closed form ``(p - 1)`` stage-steps of
            fill and drain (fast, for ranking many layouts; equal stages make them agree);
            ``"auto"``: simulated up to :data:`SIMULATE_UP_TO` stage-microbatches, the closed
            form beyond (hundreds of microbatches: the two agree within a percent there).
    """
    check_layout_fits(layout, hw)
    check_experts(model, layout)
    rate = shipped_rate() if rate is None else rate
    inputs = StepInputs(model, layout, hw,
                        rate.attention_flops_per_s(hw, layout.attention_kernel),
                        rate.a2a_link_share)
    parts = [p for d in dimensions(model) for p in d.parts]
    stage_parts = [p for p in parts if isinstance(p, StagePart)]
    stages = _stage_seconds(inputs, rate, stage_parts)
    m = layout.microbatches
    per_rank = []
    for share in rank_params(model, layout):
        per_rank.append((share, [stages[s] for s in share.stages]))
    busiest = max(per_rank, key=lambda x: sum(st.forward_s + st.backward_s for st in x[1]))
    rank_stages = busiest[1]

    compute = m * sum(st.compute_s for st in rank_stages)
    seconds = [(COMPUTE.name, compute)]
    busy = compute
    for part in stage_parts:
        value = m * sum(st.parts[part.name] for st in rank_stages)
        seconds.append((part.name, value))
        busy += value
    most = max(share.total for share, _ in per_rank)
    shard = max(share.zero_shard(layout) for share, _ in per_rank) if model.moe else None
    rank = RankWork(tuple(stages), tuple(rank_stages), busy, most, simulate_pipeline)
    sim = None
    for pipe in (p for p in parts if isinstance(p, PipelinePart)):
        idle, sim = pipe.price(inputs, rank)
        seconds.append((pipe.name, idle))
    for after in (p for p in parts if isinstance(p, StepPart)):
        seconds.append((after.name, after.price(inputs, rank)))
    seconds.append((OPTIMIZER.name, optimizer_seconds(layout, hw, most, shard=shard)))
    return StepEstimate(model, layout, hw, tuple(seconds), sim)


def optimizer_seconds(layout: Layout, hw: Hardware, params: int, *,
                      shard: int | None = None) -> float:
    """Seconds of one AdamW step on a GPU holding ``params`` parameters (elements, before
    ZeRO): the states it updates (its shard from ZeRO 1 on: ``shard`` elements where given, as
    for experts sharded over fewer ranks, else ``ceil(params / (dp * cp))``) x
    :data:`~distlab.plan.calibration.OPTIMIZER_BYTES_PER_PARAM`, at
    :data:`~distlab.plan.calibration.OPTIMIZER_BANDWIDTH` of the memory's bandwidth; 0 where
    the GPU's bandwidth is unknown."""
    bandwidth = hw.gpu.memory_bytes_per_s * OPTIMIZER_BANDWIDTH
    if bandwidth <= 0:
        return 0.0
    if layout.zero == 0:
        shard = params
    elif shard is None:
        shard = -(-params // (layout.dp * layout.cp))
    return shard * OPTIMIZER_BYTES_PER_PARAM / bandwidth


def routed_expert_seconds(model: ModelSpec, tokens: int, hw: Hardware, rate: ComputeRate, *,
                          dtype: str = "bf16") -> tuple[float, float]:
    """Seconds the planner gives one MoE layer's routed experts on one GPU whose experts receive
    ``tokens * top_k`` rows (balanced), ``(forward, backward)``: their forward FLOPs
    (``2 * rows * hidden * expert_ffn`` per matrix, 3 gated) at the rate of a matrix
    ``expert_ffn`` wide in ``dtype`` times ``rate.grouped_gemm``, backward twice the forward's
    (the step's own pricing of the expert products, :mod:`distlab.plan.step`, for one layer).
    What else the layer runs (router, permutes, combine) has no time in the model."""
    if not model.moe:
        raise ValueError(f"{model.name} has no routed experts")
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    mats = 3 if model.gated_ffn else 2
    flops = 2 * tokens * model.top_k * model.hidden * model.expert_width * mats
    per_s = rate.flops_per_s_dtype(hw, model.expert_width, dtype) * rate.grouped_gemm
    return flops / per_s, 2 * flops / per_s


def _stage_seconds(inputs: StepInputs, rate: ComputeRate,
                   stage_parts: list[StagePart]) -> list[StageSeconds]:
    model, layout, hw = inputs.model, inputs.layout, inputs.hw
    width = model.hidden // layout.tp
    flops_per_s = rate.flops_per_s_dtype(hw, width, layout.compute_dtype)
    attention_per_s = inputs.attention_per_s
    split = layers_per_stage(model.layers, layout.stages)
    pricers = [(part.name, part.price(inputs)) for part in stage_parts]
    repeats_attention = layout.recompute_policy.repeats_attention
    out = []
    expert_per_s = (rate.flops_per_s_dtype(hw, max(1, model.expert_width // layout.expert_tp),
                                           layout.compute_dtype) * rate.grouped_gemm
                    if model.moe else flops_per_s)
    for s, layers in enumerate(split):
        last = s == layout.stages - 1
        moe = stage_moe_layers(model, layout, s) if model.moe else 0
        fl = stage_flops(model, layout, layers, last=last, moe_layers=moe,
                         sliding_layers=stage_sliding_layers(model, layout, s))
        attention = fl.attention_forward
        recompute_attention = attention if repeats_attention else 0.0

        # the attention's forward and backward share its time as the kernels do; recompute
        # repeats the forward only
        attn_s = 3 * attention * CAUSAL_WORK / attention_per_s
        attn_f = attn_s * rate.attention_forward_share(hw)
        recomputed = attn_f if recompute_attention else 0.0
        fwd_c = (fl.forward - attention) / flops_per_s + attn_f
        bwd_c = ((fl.backward + fl.recompute - 2 * attention - recompute_attention)
                 / flops_per_s + (attn_s - attn_f) + recomputed)
        if fl.expert_forward:
            # the routed experts' grouped products, at their own rate
            slower = 1 / expert_per_s - 1 / flops_per_s
            fwd_c += fl.expert_forward * slower
            bwd_c += (2 * fl.expert_forward + fl.expert_recompute) * slower
        params = stage_params(model, layout, (s,)).total
        fwd, bwd = fwd_c, bwd_c
        exposed: dict[str, float] = {}
        for name, price in pricers:
            e = price(StageWork(s, layers, params, fwd_c, bwd_c, fwd, bwd))
            exposed[name] = e.seconds
            fwd += e.forward_s
            bwd += e.backward_s
        out.append(StageSeconds(fwd, bwd, fwd_c + bwd_c, exposed, params))
    return out


def step_timeline(est: StepEstimate) -> Timeline:
    """The step of ``est`` on a :class:`~distlab.timeline.Timeline` (microseconds), for a
    trace viewer: with a pipeline, the schedule's simulated actions on one lane per pipeline
    rank (:meth:`~distlab.pipeline_parallel.simulate.Simulation.to_timeline`; each action's
    time holds its exposed tensor/context-parallel and FSDP communication), then the exposed
    data-parallel communication; without one, the step's parts one after another on lane
    ``rank0/compute``."""
    if est.simulation is not None:
        tl = est.simulation.to_timeline()
        start = est.simulation.step_time_s * 1e6
        parts = est.parts()
        for part in (p for d in dimensions(est.model) for p in d.parts
                     if isinstance(p, StepPart)):
            seconds = parts.get(part.name, 0.0)
            if seconds > 0:
                for r in range(est.layout.pp):
                    tl.record(part.description, part.name, f"rank{r}/compute", start,
                              seconds * 1e6, {})
                start += seconds * 1e6
        return tl
    tl = Timeline(notes=[f"{est.layout.label}: the step's parts in sequence (not simulated)"])
    t = 0.0
    for part, seconds in est.parts().items():
        if seconds > 0:
            tl.record(part, part, "rank0/compute", t * 1e6, seconds * 1e6, {})
            t += seconds
    return tl
