"""How a model is cut over a layout: layers per pipeline stage, stages per rank, parameters per
GPU.

The ``layers`` are split over the ``pp * stages_per_rank`` stages as evenly as they go, the
first ``layers % stages`` stages taking one more (torchtitan's and Megatron-LM's uneven split
put the extra layers first too); the input embedding sits on stage 0, the final norm and
output layer on the last stage. Stages sit on ranks as the schedule places them (``loop``:
rank ``r`` holds ``r, r + pp, ...``; ``v``: ``r`` and ``2 pp - 1 - r``). Tensor parallelism
splits every matrix, the column-parallel biases and the vocabulary (padded to whole rows per
rank) over ``tp`` ranks; norms, row-parallel biases and learned positions are replicated
(Megatron-LM's default), which :func:`rank_params` counts once per rank. A tied output layer
on a rank without the embedding keeps its own copy.

An MoE layer (:meth:`~distlab.transformer.ModelSpec.is_moe_layer`) holds its attention as a
dense layer does, its shared experts split over ``tp`` as a dense MLP, its router replicated,
and ``experts / ep`` of its routed experts, each split over ``etp`` (Megatron-Core's expert
tensor parallelism, ``tp`` unless the layout says 1): :attr:`RankParams.expert`, the elements
ZeRO shards over the expert-data-parallel ranks (``Layout.expert_dp``) instead of ``dp * cp``
(:meth:`RankParams.zero_shard`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from distlab._checks import check_int
from distlab.pipeline_parallel.plan import stage_to_rank
from distlab.pipeline_parallel.schedules.registry import schedule_info
from distlab.plan.layout import Layout
from distlab.transformer import ModelSpec

__all__ = ["RankParams", "layer_params_per_gpu", "layers_per_stage", "moe_layer_params_per_gpu",
           "rank_params", "rank_stages", "stage_moe_layers", "stage_params",
           "stage_sliding_layers"]


def layers_per_stage(layers: int, stages: int) -> tuple[int, ...]:
    """Layers on each of ``stages`` stages: ``layers // stages``, the first
    ``layers % stages`` one more. ``ValueError`` if a stage would hold none."""
    layers = check_int("layers", layers, minimum=1)
    stages = check_int("stages", stages, minimum=1)
    if stages > layers:
        raise ValueError(f"{stages} pipeline stages for {layers} layers: a stage would hold "
                         "no layer")
    return _even_split(layers, stages)


@functools.lru_cache(maxsize=4096)
def _even_split(layers: int, stages: int) -> tuple[int, ...]:
    """:func:`layers_per_stage` of checked ints (kept: the planner asks it for every stage of
    every layout it prices, a few hundred thousand times a plan)."""
    base, extra = divmod(layers, stages)
    return tuple(base + (1 if s < extra else 0) for s in range(stages))


def rank_stages(layout: Layout, pp_rank: int) -> tuple[int, ...]:
    """The stages pipeline rank ``pp_rank`` holds, in stage order."""
    pp_rank = check_int("pp_rank", pp_rank, minimum=0, maximum=layout.pp - 1)
    style = schedule_info(layout.schedule).style if layout.pp > 1 else "loop"
    return tuple(s for s in range(layout.stages)
                 if stage_to_rank(s, layout.pp, layout.stages_per_rank, style) == pp_rank)


@dataclass(frozen=True)
class RankParams:
    """Parameters (elements) one GPU of a pipeline rank holds.

    Attributes:
        pp_rank: the pipeline rank.
        stages: its stages.
        layers: transformer layers on them.
        split: elements of the tensors tensor parallelism divides (this GPU's ``1 / tp``:
            matrices, column-parallel biases, its vocabulary rows).
        replicated: elements every GPU of the tensor-parallel group holds whole (norms,
            row-parallel biases, learned positions).
        tied_copy: elements of the output layer's own copy of a tied embedding (on a rank
            holding the last stage but not stage 0), this GPU's vocabulary rows.
        expert: elements of the routed experts this GPU holds (``experts / ep`` of each MoE
            layer's, split over ``tp``); 0 for a dense model.
    """

    pp_rank: int
    stages: tuple[int, ...]
    layers: int
    split: int
    replicated: int
    tied_copy: int
    expert: int = 0

    @property
    def total(self) -> int:
        """Elements on this GPU: ``split + replicated + tied_copy + expert``."""
        return self.split + self.replicated + self.tied_copy + self.expert

    def zero_shard(self, layout: Layout) -> int:
        """Elements of this GPU's ZeRO shard: ``ceil(dense / (dp * cp))`` of everything but
        the routed experts, ``ceil(expert / expert_dp)`` of those
        (:attr:`~distlab.plan.layout.Layout.expert_dp`)."""
        dense = self.total - self.expert
        return -(-dense // (layout.dp * layout.cp)) + -(-self.expert // layout.expert_dp)


def layer_params_per_gpu(spec: ModelSpec, tp: int) -> tuple[int, int]:
    """``(split elements on one GPU, replicated elements)`` of one layer under ``tp``-way
    tensor parallelism (Megatron-LM's ``tensor_parallel/layers.py``: column-parallel linears
    split their weights and biases, row-parallel ones their weights only; with fewer
    key/value heads than ``tp`` each GPU holds one key/value head)."""
    h, q, f = spec.hidden, spec.q_width, spec.ffn
    kv_local = spec.kv_width // tp if spec.kv % tp == 0 else spec.head_width
    mats = 3 if spec.gated_ffn else 2
    split = 2 * h * q // tp + 2 * h * kv_local + mats * h * f // tp  # Q, O; K, V; MLP
    replicated = 2 * spec.norm_params
    if spec.attention_bias:
        split += q // tp + 2 * kv_local       # Q, K, V biases (column-parallel)
        replicated += h                       # the output projection's (row-parallel)
    if spec.mlp_bias:
        split += (mats - 1) * f // tp         # the first linears' biases (column-parallel)
        replicated += h                       # the second linear's (row-parallel)
    return split, replicated


def moe_layer_params_per_gpu(spec: ModelSpec, tp: int, ep: int, etp: int | None = None
                             ) -> tuple[int, int, int]:
    """``(split, replicated, expert)`` elements one GPU holds of one MoE layer: the attention
    and norms as :func:`layer_params_per_gpu` counts them, the shared experts split over ``tp``
    with the attention, the router replicated, and ``experts / ep`` routed experts split over
    ``etp`` (``None``: ``tp``). ``ValueError`` where ``ep`` does not divide the experts."""
    etp = tp if etp is None else etp
    if not spec.moe:
        raise ValueError(f"{spec.name} has no experts: an MoE layer needs experts >= 1")
    if spec.experts % ep:
        raise ValueError(f"ep={ep} must divide the {spec.experts} routed experts of "
                         f"{spec.name}")
    split, replicated = layer_params_per_gpu(spec, tp)
    mats = 3 if spec.gated_ffn else 2
    dense_mlp = mats * spec.hidden * spec.ffn // tp
    if spec.mlp_bias:
        dense_mlp += (mats - 1) * spec.ffn // tp
        replicated -= spec.hidden
    split += spec.shared_experts * spec.expert_params // tp - dense_mlp
    replicated += spec.router_params
    return split, replicated, spec.experts // ep * spec.expert_params // etp


def stage_moe_layers(spec: ModelSpec, layout: Layout, stage: int) -> int:
    """MoE layers of pipeline stage ``stage`` (the leading dense layers sit on the first)."""
    split = layers_per_stage(spec.layers, layout.stages)
    start = sum(split[:stage])
    return spec.moe_layers_in(start, start + split[stage])


def stage_sliding_layers(spec: ModelSpec, layout: Layout, stage: int) -> int:
    """Sliding-window layers of pipeline stage ``stage``
    (:meth:`~distlab.transformer.ModelSpec.is_sliding_layer`)."""
    split = layers_per_stage(spec.layers, layout.stages)
    start = sum(split[:stage])
    return spec.sliding_layers_in(start, start + split[stage])


def rank_params(model: ModelSpec, layout: Layout) -> tuple[RankParams, ...]:
    """The parameters one GPU of each pipeline rank holds (module docstring), one
    :class:`RankParams` per pipeline rank."""
    return tuple(stage_params(model, layout, rank_stages(layout, r), r)
                 for r in range(layout.pp))


def stage_params(spec: ModelSpec, layout: Layout, stages: tuple[int, ...],
                 pp_rank: int = -1) -> RankParams:
    """The parameters one GPU holds of ``stages`` (any set of stages; ``pp_rank`` is only
    recorded)."""
    tp = layout.tp
    layers = sum(layers_per_stage(spec.layers, layout.stages)[s] for s in stages)
    moe = sum(stage_moe_layers(spec, layout, s) for s in stages) if spec.moe else 0
    per_split, per_repl = layer_params_per_gpu(spec, tp)
    dense = layers - moe
    split, replicated, tied_copy, expert = dense * per_split, dense * per_repl, 0, 0
    if moe:
        m_split, m_repl, m_expert = moe_layer_params_per_gpu(spec, tp, layout.ep,
                                                             layout.expert_tp)
        split, replicated, expert = split + moe * m_split, replicated + moe * m_repl, \
            moe * m_expert
    vocab_rows = -(-spec.vocab // tp) * spec.hidden
    first, last = 0 in stages, layout.stages - 1 in stages
    if first:
        split += vocab_rows
        replicated += (spec.positions or 0) * spec.hidden
    if last:
        replicated += spec.norm_params
        if not spec.tied_embeddings:
            split += vocab_rows
        elif not first:
            tied_copy = vocab_rows
    return RankParams(pp_rank, stages, layers, split, replicated, tied_copy, expert)


