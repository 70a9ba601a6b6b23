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
"""

from __future__ import annotations

from dataclasses import dataclass

from distlab._checks import check_int
from distlab.pipeline_parallel.plan import stage_to_rank
from distlab.pipeline_parallel.schedules.registry import schedule_info
from distlab.plan.layout import Layout
from distlab.transformer import ModelSpec

__all__ = ["RankParams", "layer_params_per_gpu", "layers_per_stage", "rank_params",
           "rank_stages", "stage_params"]


def layers_per_stage(layers: int, stages: int) -> tuple[int, ...]:
    """Layers on each of ``stages`` stages: ``layers // stages``, the first
    ``layers % stages`` one more. ``ValueError`` if a stage would hold none."""
    layers = check_int("layers", layers, minimum=1)
    stages = check_int("stages", stages, minimum=1)
    if stages > layers:
        raise ValueError(f"{stages} pipeline stages for {layers} layers: a stage would hold "
                         "no layer")
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
    """

    pp_rank: int
    stages: tuple[int, ...]
    layers: int
    split: int
    replicated: int
    tied_copy: int

    @property
    def total(self) -> int:
        """Elements on this GPU: ``split + replicated + tied_copy``."""
        return self.split + self.replicated + self.tied_copy


def layer_params_per_gpu(spec: ModelSpec, tp: int) -> tuple[int, int]:
    """``(split elements on one GPU, replicated elements)`` of one layer under ``tp``-way
    tensor parallelism (Megatron-LM's ``tensor_parallel/layers.py``: column-parallel linears
    split their weights and biases, row-parallel ones their weights only; with fewer
    key/value heads than ``tp`` each GPU holds one key/value head)."""
    h, f = spec.hidden, spec.ffn
    kv_local = spec.kv_width // tp if spec.kv % tp == 0 else spec.head_dim
    mats = 3 if spec.gated_ffn else 2
    split = 2 * h * h // tp + 2 * h * kv_local + mats * h * f // tp  # Q, O; K, V; MLP
    replicated = 2 * spec.norm_params
    if spec.attention_bias:
        split += h // tp + 2 * kv_local       # Q, K, V biases (column-parallel)
        replicated += h                       # the output projection's (row-parallel)
    if spec.mlp_bias:
        split += (mats - 1) * f // tp         # the first linears' biases (column-parallel)
        replicated += h                       # the second linear's (row-parallel)
    return split, replicated


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
    per_split, per_repl = layer_params_per_gpu(spec, tp)
    split, replicated, tied_copy = layers * per_split, layers * per_repl, 0
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
    return RankParams(pp_rank, stages, layers, split, replicated, tied_copy)


