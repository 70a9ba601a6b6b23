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
- **Tensor parallelism.** Each layer's collectives (:func:`~distlab.tensor_parallel.cost.
  layer_collectives`: two all-reduces forward and two backward, or all-gathers and
  reduce-scatters with sequence parallelism) priced by NCCL's model on the ``tp`` group, fully
  exposed (Megatron-LM and torch's ``parallelize_module`` run them between the layer's
  matrix products); the forward's again in backward where the recompute policy repeats them
  (:meth:`~distlab.recompute.Recompute.repeats_tp_forward`).
- **Context parallelism.** Ring attention passes each rank's key/value block ``cp - 1`` times
  per layer forward, and keys, values and their gradients backward; each transfer hides behind
  the attention's own compute, what is longer is exposed.
- **Pipeline.** The stages' forward and backward seconds (compute plus the exposed collectives
  above) feed the schedule's plan (:func:`~distlab.pipeline_parallel.schedules.registry.
  build_plan`) into distlab's event simulation (:func:`~distlab.pipeline_parallel.simulate.
  simulate`) with the activations sent between stages priced as point-to-point transfers; the
  bubble is the simulated step less the busiest rank's compute.
- **Data parallelism.** DDP (``zero=0``) all-reduces every gradient, ZeRO 1/2 reduce-scatter
  them and all-gather the updated parameters, over the ``dp * cp`` ranks that hold the same
  parameters; the reduction hides behind the last microbatch's backward (bucketed, as DDP and
  Megatron-LM overlap it) and the gather behind the next step's first forward, what is longer
  is exposed. ZeRO 3 / FSDP gathers each layer's parameters before its forward and again
  before its backward and reduce-scatters its gradients after, every microbatch, each hidden
  behind the neighbouring layer as it runs (prefetch): FSDP's collectives run on streams of
  their own, so the window is the layer's time on the compute stream, its compute and the
  tensor/context-parallel collectives it waits for. Exposed is the part longer than that
  window, plus the first gather: nothing while the gather is the shorter, then every
  microsecond by which it is longer, in each layer of each microbatch (the two-stream
  pipeline's steady state). Under a pipeline schedule FSDP keeps the stage
  gathered through the step and reduces once after the last microbatch (torchtitan's choice;
  torch's ``PipelineStage`` defers gradient sync to the last microbatch), priced as ZeRO 1/2.

- **Optimizer.** AdamW's step after the last backward, memory-bound: the bytes it moves over
  the GPU's memory bandwidth (:func:`optimizer_seconds`; measured at 0.72 of the data sheet's
  on an H200), exposed.

Left out, and said so: the embedding's and loss's small collectives, kernel launch gaps, the
elementwise kernels between the products (the fitted rate carries them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from distlab.pipeline_parallel.schedules.registry import build_plan
from distlab.pipeline_parallel.simulate import P2PCost, Simulation, StageTimes, simulate
from distlab.plan.calibration import (
    OPTIMIZER_BANDWIDTH,
    OPTIMIZER_BYTES_PER_PARAM,
    ComputeRate,
    shipped_rate,
)
from distlab.plan.collectives import collective_seconds, p2p_seconds
from distlab.plan.layout import PRECISIONS, Hardware, Layout, check_layout_fits, group_span
from distlab.plan.partition import layers_per_stage, rank_params, stage_params
from distlab.tensor_parallel.cost import layer_collectives
from distlab.timeline import Timeline
from distlab.transformer import ModelSpec, layer_matmul_flops, per_op_saved_linears

__all__ = ["StepEstimate", "model_flops_per_step", "optimizer_seconds", "output_layer_s",
           "stage_flops", "step_time", "step_timeline"]

SIMULATE_UP_TO = 2048
"""``pp * stages_per_rank * microbatches`` up to which ``simulate_pipeline="auto"`` simulates."""

CAUSAL_WORK = 0.5
"""The share of the attention's counted ``s^2`` products a causal kernel computes (flash
attention skips the masked blocks): FLOPs and MFU count them whole, as every source does; time
is spent on half."""

ACTIVATION_BYTES = 2
"""Bytes per activation element sent between stages and in tensor-parallel collectives
(16-bit, as every published run trains)."""


@lru_cache(maxsize=256)
def _with_seq_len(model: ModelSpec, seq_len: int) -> ModelSpec:
    """``model`` on the ``seq_len`` tokens of one context-parallel rank."""
    return replace(model, seq_len=seq_len)


@dataclass(frozen=True)
class StageFlops:
    """FLOPs of one stage for one microbatch on one GPU: ``forward``, ``backward`` (input and
    weight gradients) and ``recompute`` (forward work done again in backward)."""

    forward: float
    backward: float
    recompute: float
    attention_forward: float


def stage_flops(model: ModelSpec, layout: Layout, layers: int, *, last: bool) -> StageFlops:
    """FLOPs of a stage of ``layers`` layers (and the output layer if ``last``) for one
    microbatch, on one of its ``tp * cp`` GPUs."""
    b, s, split = layout.micro_batch, model.seq_len, layout.tp * layout.cp
    layer = layer_matmul_flops(model, s) * b / split
    attention = 4 * s * s * model.hidden * b / split
    forward = layers * layer + (2 * s * b * model.hidden * model.vocab / split if last else 0)
    recomputed_products = sum(2 * s * b * lin.in_features * lin.out_features
                              for lin, saved in per_op_saved_linears(model)
                              if not saved) / split
    recompute = layers * layout.recompute_policy.forward_again_flops(
        layer=layer, attention=attention, unsaved_products=recomputed_products)
    return StageFlops(forward, 2 * forward, recompute, layers * attention)


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
    compute_s: float
    tp_s: float
    cp_s: float
    fsdp_s: float
    bubble_s: float
    dp_s: float
    simulation: Simulation | None = field(default=None, compare=False, repr=False)
    optimizer_s: float = 0.0

    @property
    def step_s(self) -> float:
        """Seconds of one optimizer step."""
        return (self.compute_s + self.tp_s + self.cp_s + self.fsdp_s + self.bubble_s + self.dp_s
                + self.optimizer_s)

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
        return {"compute": self.compute_s, "tp": self.tp_s, "cp": self.cp_s,
                "fsdp": self.fsdp_s, "bubble": self.bubble_s, "dp": self.dp_s,
                "optimizer": self.optimizer_s}


@dataclass(frozen=True)
class _StageSeconds:
    forward_s: float
    backward_s: float
    compute_s: float
    tp_s: float
    cp_s: float
    fsdp_s: float
    params: int


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
    rate = shipped_rate() if rate is None else rate
    stages = _stage_seconds(model, layout, hw, rate)
    m = layout.microbatches
    per_rank = []
    for share in rank_params(model, layout):
        per_rank.append((share, [stages[s] for s in share.stages]))
    busiest = max(per_rank, key=lambda x: sum(st.forward_s + st.backward_s for st in x[1]))
    rank_stages = busiest[1]

    def total(attr: str) -> float:
        return m * sum(getattr(st, attr) for st in rank_stages)

    compute, tp, cp, fsdp = (total(a) for a in ("compute_s", "tp_s", "cp_s", "fsdp_s"))
    busy = compute + tp + cp + fsdp
    sim = None
    if layout.pp == 1:
        pipeline_s = busy
    elif simulate_pipeline is True or (
            simulate_pipeline == "auto"
            and layout.pp * layout.stages_per_rank * layout.microbatches <= SIMULATE_UP_TO):
        sim = _simulate(model, layout, hw, stages)
        pipeline_s = sim.step_time_s
    else:
        worst = max(st.forward_s + st.backward_s for st in stages)
        pipeline_s = busy + (layout.pp - 1) * worst
    bubble = max(0.0, pipeline_s - busy)
    most = max(share.total for share, _ in per_rank)
    dp = _dp_exposed(model, layout, hw, most, rank_stages)
    return StepEstimate(model, layout, hw, compute, tp, cp, fsdp, bubble, dp, sim,
                        optimizer_seconds(layout, hw, most))


def optimizer_seconds(layout: Layout, hw: Hardware, params: int) -> float:
    """Seconds of one AdamW step on a GPU holding ``params`` parameters (elements, before
    ZeRO): the states it updates (its shard from ZeRO 1 on) x
    :data:`~distlab.plan.calibration.OPTIMIZER_BYTES_PER_PARAM`, at
    :data:`~distlab.plan.calibration.OPTIMIZER_BANDWIDTH` of the memory's bandwidth; 0 where
    the GPU's bandwidth is unknown."""
    bandwidth = hw.gpu.memory_bytes_per_s * OPTIMIZER_BANDWIDTH
    if bandwidth <= 0:
        return 0.0
    shard = -(-params // (layout.dp * layout.cp)) if layout.zero >= 1 else params
    return shard * OPTIMIZER_BYTES_PER_PARAM / bandwidth


def _stage_seconds(model: ModelSpec, layout: Layout, hw: Hardware,
                   rate: ComputeRate) -> list[_StageSeconds]:
    width = model.hidden // layout.tp
    flops_per_s = rate.flops_per_s_dtype(hw, width, layout.compute_dtype)
    attention_per_s = rate.attention_flops_per_s(hw, layout.attention_kernel)
    split = layers_per_stage(model.layers, layout.stages)
    tp_f, tp_b = _tp_layer_seconds(model, layout, hw)
    cp_f, cp_b = _cp_layer_exposed(model, layout, hw, attention_per_s)
    out = []
    for s, layers in enumerate(split):
        last = s == layout.stages - 1
        fl = stage_flops(model, layout, layers, last=last)
        attention = fl.attention_forward
        recompute_attention = attention if layout.recompute_policy.repeats_attention else 0.0

        # the attention's forward and backward share its time as the kernels do; recompute
        # repeats the forward only
        attn_s = 3 * attention * CAUSAL_WORK / attention_per_s
        attn_f = attn_s * rate.attention_forward_share(hw)
        recomputed = attn_f if recompute_attention else 0.0
        fwd_c = (fl.forward - attention) / flops_per_s + attn_f
        bwd_c = ((fl.backward + fl.recompute - 2 * attention - recompute_attention)
                 / flops_per_s + (attn_s - attn_f) + recomputed)
        tp_fwd = layers * _exposed_tp(tp_f, fwd_c / max(layers, 1), layout)
        tp_bwd = layers * (_exposed_tp(tp_b, bwd_c / max(layers, 1), layout)
                           + (tp_f if _repeats_tp_forward(layout) else 0.0))
        cp_s = layers * (cp_f + cp_b)
        params = stage_params(model, layout, (s,)).total
        # a layer's gather hides behind the neighbouring layer as it runs on the compute
        # stream: its compute and the tp/cp collectives it waits for
        fsdp = _fsdp_exposed(model, layout, hw, layers, params, fwd_c + tp_fwd + layers * cp_f,
                             bwd_c + tp_bwd + layers * cp_b)
        out.append(_StageSeconds(fwd_c + tp_fwd + layers * cp_f + fsdp[0],
                                 bwd_c + tp_bwd + layers * cp_b + fsdp[1],
                                 fwd_c + bwd_c, tp_fwd + tp_bwd, cp_s, fsdp[0] + fsdp[1],
                                 params))
    return out


def _repeats_tp_forward(layout: Layout) -> bool:
    """Whether backward runs a layer's forward tensor-parallel collectives again, as the
    layout's recompute policy says (:meth:`~distlab.recompute.Recompute.repeats_tp_forward`).
    With ``tp_overlap`` the repeat hides behind the recompute."""
    if layout.tp_overlap:
        return False
    return layout.recompute_policy.repeats_tp_forward(layout.sequence_parallel)


def _exposed_tp(comm_s: float, layer_compute_s: float, layout: Layout) -> float:
    """Exposed seconds of a layer's tensor-parallel collectives: all of them, or with
    ``tp_overlap`` what outlasts the layer's compute."""
    return max(0.0, comm_s - layer_compute_s) if layout.tp_overlap else comm_s


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


def _cp_layer_exposed(model: ModelSpec, layout: Layout, hw: Hardware,
                      attention_per_s: float) -> tuple[float, float]:
    if layout.cp == 1:
        return 0.0, 0.0
    span = group_span(layout.cp, layout.stride("cp"), hw.gpus_per_node)
    block = 2 * (model.seq_len // layout.cp) * layout.micro_batch * model.kv_width \
        * ACTIVATION_BYTES // layout.tp
    hop = p2p_seconds(block, cross_node=span.nodes > 1, hw=hw)
    attention = 4 * model.seq_len ** 2 * model.hidden * layout.micro_batch * CAUSAL_WORK \
        / (layout.tp * layout.cp) / attention_per_s
    fwd = max(0.0, (layout.cp - 1) * hop - attention)
    bwd = max(0.0, 2 * (layout.cp - 1) * hop - 2 * attention)
    return fwd, bwd


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


def _dp_exposed(model: ModelSpec, layout: Layout, hw: Hardware, params: int,
                rank_stages: list[_StageSeconds]) -> float:
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


def _simulate(model: ModelSpec, layout: Layout, hw: Hardware,
              stages: list[_StageSeconds]) -> Simulation:
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



def step_timeline(est: StepEstimate) -> Timeline:
    """The step of ``est`` on a :class:`~distlab.timeline.Timeline` (microseconds), for a
    trace viewer: with a pipeline, the schedule's simulated actions on one lane per pipeline
    rank (:meth:`~distlab.pipeline_parallel.simulate.Simulation.to_timeline`; each action's
    time holds its exposed tensor/context-parallel and FSDP communication), then the exposed
    data-parallel communication; without one, the step's parts one after another on lane
    ``rank0/compute``."""
    if est.simulation is not None:
        tl = est.simulation.to_timeline()
        if est.dp_s > 0:
            start = est.simulation.step_time_s * 1e6
            for r in range(est.layout.pp):
                tl.record("exposed data-parallel communication", "dp", f"rank{r}/compute",
                          start, est.dp_s * 1e6, {})
        return tl
    tl = Timeline(notes=[f"{est.layout.label}: the step's parts in sequence (not simulated)"])
    t = 0.0
    for part, seconds in est.parts().items():
        if seconds > 0:
            tl.record(part, part, "rank0/compute", t * 1e6, seconds * 1e6, {})
            t += seconds
    return tl
