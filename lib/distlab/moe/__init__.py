"""Mixture of experts and expert parallelism on real ranks.

- :mod:`~distlab.moe.router`: :class:`TokenChoiceRouter`, top-k token-choice routing (softmax
  or sigmoid scores, optional normalisation over the top k, a capacity factor with token
  dropping, or dropless) returning a :class:`Routing`; :func:`expert_capacity`,
  :func:`capacity_mask`.
- :mod:`~distlab.moe.balance`: :func:`load_balance_loss`, the auxiliary load-balancing loss of
  Switch, GShard and DeepSeekMoE (and DeepSeek-V3's sequence-wise form), its formula and
  sources in the module docstring.
- :mod:`~distlab.moe.experts`: :class:`SwiGLU` (dense, the shared experts) and
  :class:`GroupedExperts` (``E`` SwiGLU experts stacked ``(E, ...)``; a loop over experts, the
  reference, and torch's grouped matmul where it runs).
- :mod:`~distlab.moe.block`: :class:`MoE` from a :class:`MoEConfig`: router, routed experts,
  shared experts; ``aux_loss`` after each forward.
- :mod:`~distlab.moe.dispatch` and :mod:`~distlab.moe.expert_parallel`: :class:`ExpertParallel`,
  torchtitan's parallel style (experts sharded over an ``ep`` mesh dimension; token counts
  exchanged by an all-to-all, then tokens dispatched and combined by ``all_to_all_single``
  with those splits, autograd included), applied by torch's or distlab's
  ``parallelize_module``; :func:`reduce_gradients` for expert-parallel ranks that are
  data-parallel ranks.
- :mod:`~distlab.moe.load` (pure): :func:`expert_load`, tokens per expert and per rank, the
  imbalance factor and what it costs the slowest rank; :func:`random_routing`, a fresh
  router's choices on random tokens.
- :mod:`~distlab.moe.step_trace` (pure): :func:`read_layer_step_trace`, one MoE layer's step
  by part from an annotated chrome trace; :func:`measured_layer_step_trace`, the H200 one the
  package ships.
- :mod:`~distlab.moe.demo`: :func:`~distlab.moe.demo.run_expert_parallel`, one MoE block
  expert-parallel on gloo ranks checked against one process.
"""

from distlab.moe.balance import balance_terms, load_balance_loss
from distlab.moe.block import MoE, MoEConfig, sort_by_expert
from distlab.moe.dispatch import (
    Dispatched,
    EPComm,
    all_to_all,
    combine,
    dispatch,
    expert_major_order,
)
from distlab.moe.expert_parallel import (
    ExpertParallel,
    ep_group,
    expert_parameters,
    reduce_gradients,
)
from distlab.moe.experts import (
    GroupedExperts,
    SwiGLU,
    grouped_mm_problem,
    grouped_mm_reason,
    swiglu_flops,
    swiglu_grouped,
    swiglu_loop,
)
from distlab.moe.load import ExpertLoad, expert_load, imbalance, random_routing
from distlab.moe.router import (
    AUX_LOSS_SCOPES,
    DROP_POLICIES,
    SCORE_FUNCS,
    Routing,
    TokenChoiceRouter,
    capacity_mask,
    expert_capacity,
    route,
)
from distlab.moe.step_trace import (
    LayerStepTrace,
    measured_layer_step_trace,
    read_layer_step_trace,
)

__all__ = ["AUX_LOSS_SCOPES", "DROP_POLICIES", "Dispatched", "EPComm", "ExpertLoad",
           "ExpertParallel", "GroupedExperts", "LayerStepTrace", "MoE", "MoEConfig", "Routing",
           "SCORE_FUNCS", "SwiGLU", "TokenChoiceRouter", "all_to_all", "balance_terms",
           "capacity_mask", "combine", "dispatch", "ep_group", "expert_capacity", "expert_load",
           "expert_major_order", "expert_parameters", "grouped_mm_problem", "grouped_mm_reason",
           "imbalance", "load_balance_loss", "measured_layer_step_trace", "random_routing",
           "read_layer_step_trace", "reduce_gradients", "route", "sort_by_expert",
           "swiglu_flops", "swiglu_grouped", "swiglu_loop"]
