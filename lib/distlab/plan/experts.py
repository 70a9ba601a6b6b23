"""The expert dimension of a layout: what a mixture-of-experts layer adds to memory and step
time when its routed experts are divided over ``ep`` ranks.

The vocabulary is :mod:`distlab.moe`'s: a token-choice router sends each token to ``top_k`` of
the layer's routed experts; the experts run as one grouped matrix product per GPU; expert
parallelism dispatches each token to the rank holding its expert with an all-to-all and
combines the results with a second one (torchtitan's ``ExpertParallel``, Megatron-Core's
all-to-all token dispatcher).

- **Routed rows.** One GPU's experts receive ``tokens * top_k * IMBALANCE`` rows per MoE layer
  and microbatch (``tokens`` = the GPU's share of the microbatch, ``seq_len / cp`` each
  sequence): on average every rank receives as many rows as it sends; :data:`IMBALANCE` is the
  busiest rank's share over the mean, the stated factor every routed-token term carries
  (:func:`row_factor`). A token-drop layout (``Layout.expert_capacity = c``, padded to
  capacity) computes ``tokens * top_k * c`` rows on every rank instead, whatever the routing.
- **Compute.** The routed experts' FLOPs are the active ones (``top_k`` experts per token,
  :func:`~distlab.transformer.routed_expert_flops`), run at the compute rate of a matrix
  ``expert_ffn / etp`` wide (the narrow side of an expert's products; the rate's width term) times
  :data:`GROUPED_GEMM_EFFICIENCY` (measured).
- **All-to-all.** Dispatch and combine each move ``rows * hidden`` 16-bit elements per GPU;
  forward runs both, backward both again (the gradients travel the same way back), and full
  recompute a third pair. distlab's NCCL model holds no all-to-all, so it is priced as NCCL runs
  one, grouped point-to-point sends all in flight at once (:func:`all_to_all_seconds`): the
  bytes for ranks in the same node over the GPU's NVLink bandwidth (times the fitted
  :data:`A2A_LINK_SHARE`), those for other nodes over its network port, the slower of the two,
  with the point-to-point latency of :mod:`distlab.plan.collectives`. Exposed unless
  ``Layout.ep_overlap`` hides it behind the layer's compute (another microbatch's, as
  Megatron-Core's 1F1B overlap and DualPipe run it).
- **Memory.** Experts ``experts / ep`` per GPU, sharded by ZeRO over the expert-data-parallel
  ranks (:mod:`distlab.plan.partition`); per MoE layer the routed rows' activations
  (:func:`moe_kept_tensors`: one ``rows * hidden`` tensor more where the router's probability
  weights the experts' output or input than where Megatron-Core's fused weighted SwiGLU applies
  it, ``moe_weighting``; the grouped linears' inputs in 8 bits under float8) and the dispatch
  and combine buffers while the layer runs (:func:`dispatch_buffers`).
"""

from __future__ import annotations

from distlab.plan.activations import ActivationOptions, linear_input_bytes, mlp_inner_terms
from distlab.plan.collectives import p2p_seconds
from distlab.plan.layout import Hardware, Layout, group_span
from distlab.transformer import ModelSpec

__all__ = ["A2A_BYTES", "GROUPED_GEMM_EFFICIENCY", "IMBALANCE", "all_to_all_seconds",
           "check_experts", "dispatch_buffers", "moe_kept_tensors", "moe_layer_a2a_seconds",
           "routed_rows", "row_factor"]

IMBALANCE = 1.0
"""Rows the busiest expert-parallel rank receives over the mean: 1.0, the published benchmarks'
setting (Megatron-Core's ``--moe-router-force-load-balancing``: "we force-balance the token
distribution among experts", Megatron Bridge's performance summary). A dropless run trained
with an auxiliary loss sees more; a capacity factor ``c`` caps it at ``c`` (padded to
capacity, every rank computes exactly ``c`` times the mean: ``Layout.expert_capacity``,
:func:`row_factor`)."""

GROUPED_GEMM_EFFICIENCY = 0.84
"""The routed experts' grouped matrix products' rate over a dense product of the same width at
the calibrated compute rate (the grouped kernels run many products of ``tokens * top_k * ep /
experts`` rows each). Measured: on one H200 (torch 2.11, bf16, ``torch._grouped_mm``) the local
experts' SwiGLU products of the nine per-GPU shapes of the published MoE runs take 1.07-1.80x
(median 1.19x) forward and backward the time of one dense SwiGLU of the expert's width on the
same rows (``results/gpu-h200-2026-11-28-moe-step/``, ``tools/gpu/moe_step.py``); 1 / 1.19 =
0.84. The forward alone measured 0.70-1.06x, median 0.86x
(``results/gpu-h200-2026-11-28-expert-gemm/``). Not fitted: ``python -m distlab.judge plan --moe
--refit`` fits :data:`A2A_LINK_SHARE` only (``--refit-gemm`` fits this too, for comparison)."""

A2A_LINK_SHARE = 0.08
"""The share of the NVLink bandwidth an MoE layer's dispatch or combine moves its bytes at inside a
node, end to end (the permutation, the token counts' exchange and the all-to-all kernel
together). Fitted, with :data:`GROUPED_GEMM_EFFICIENCY` held at its measured value: the value of
a grid that gives the smallest median ``|error|`` on the calibration split of the published MoE
runs (``python -m distlab.judge plan --moe --refit`` fits it again); across nodes the network
port's bandwidth is taken whole. It was 0.12 before the Qwen3 and GPT-OSS presets had their
``head_dim``: a median over seven runs that disagree by up to 2x moves by whole grid steps when
one model's FLOPs change, which says how loosely it is pinned. What it says: the published
in-node expert-parallel runs move their tokens at about a twelfth of NVLink's data-sheet
bandwidth, far below what nccl-tests' all-to-all reaches. It is a catch-all, and it carries most
of what an MoE layer costs beyond its FLOPs: at NVLink's whole bandwidth (share 1.0) the
calibration runs took a median 2.2x the model's step; the published MoE runs reach about 12% of
their GPUs' peak (Megatron Bridge's model TFLOP/s: 242 on H100s for Qwen3-235B-A22B in fp8)
where the same tables' dense runs reach about 37% (728 for Llama 3 70B). On one H200 distlab's
own MoE layer (plain torch ops, ``results/gpu-h200-2026-11-28-moe-step/``) spends as long in its
router, permute and combine (about 53 read-and-write passes over the routed rows forward and
backward, a host-sync-bound router of 1.1-1.8 ms, 12 host syncs a step) as in its expert
products, but priced as a mechanism those parts make the held-out runs' error worse
(Megatron-Core's fused permute and router kernels cost less), so they are not in the model."""

A2A_BYTES = 2
"""Bytes per element the dispatch and combine move (16-bit activations)."""


def check_experts(model: ModelSpec, layout: Layout) -> None:
    """``ValueError`` where ``layout`` cannot split ``model``'s experts: ``ep > 1`` on a
    dense model, ``ep`` not a divisor of the routed experts, or ``tp`` not a divisor of the
    expert width."""
    if model.moe and model.expert_width % layout.expert_tp:
        raise ValueError(f"etp={layout.expert_tp} must divide the expert width "
                         f"{model.expert_width} of {model.name}")
    if layout.ep == 1:
        return
    if not model.moe:
        raise ValueError(f"ep={layout.ep}: {model.name} is a dense model (no experts to "
                         "divide); use ep=1")
    if model.experts % layout.ep:
        raise ValueError(f"ep={layout.ep} must divide the {model.experts} routed experts of "
                         f"{model.name}")


def _tokens(model: ModelSpec, layout: Layout) -> int:
    """Tokens of one microbatch one GPU routes (its context-parallel share; with sequence
    parallelism its tensor-parallel share too)."""
    tokens = model.seq_len // layout.cp * layout.micro_batch
    return tokens // layout.tp if layout.sequence_parallel else tokens


def row_factor(layout: Layout) -> float:
    """The busiest expert-parallel rank's routed rows over the balanced mean: :data:`IMBALANCE`
    for a dropless layout, its capacity factor for a token-drop one padded to capacity
    (``Layout.expert_capacity``: every expert computes exactly its capacity).

    The rows are all the routing changes in the model. A dropless layer also synchronises with
    the host once per forward (Megatron-Core's all-to-all dispatcher reads the splits before the
    all-to-all) and cannot be captured in a CUDA graph; one sync measured about 42 us of GPU idle
    on an H200, and priced per dropless MoE layer forward it moved no run by more than 0.6 points
    and made the held-out median worse, so it is not priced
    (``results/moe-routing-2026-11-28/``)."""
    return IMBALANCE if layout.expert_capacity is None else layout.expert_capacity


def routed_rows(model: ModelSpec, layout: Layout) -> float:
    """Rows one GPU's experts receive per MoE layer and microbatch (the module docstring):
    ``tokens * top_k * row_factor(layout)``."""
    return _tokens(model, layout) * model.top_k * row_factor(layout)


def dispatch_buffers(model: ModelSpec, layout: Layout, dtype_bytes: int) -> tuple[int, ...]:
    """Bytes of the buffers one MoE layer's dispatch holds while it runs: the permuted tokens
    sent and those received, ``rows * hidden`` elements each (empty for a dense model)."""
    if not model.moe:
        return ()
    rows = int(routed_rows(model, layout))
    return (rows * model.hidden * dtype_bytes,) * 2


def _inner_nbytes(rows: int, width: int, model: ModelSpec, opt: ActivationOptions,
                  linear_bytes: int) -> int:
    """Bytes an MLP ``width`` wide keeps between its first and its last linear for ``rows``
    tokens: :func:`~distlab.plan.activations.mlp_inner_terms`, the dense MLP's rule."""
    return sum(t.nbytes for t in mlp_inner_terms(rows * width, gated=model.gated_ffn,
                                                 dtype_bytes=opt.dtype_bytes,
                                                 linear_bytes=linear_bytes,
                                                 fused_swiglu=opt.fused_swiglu))


def moe_kept_tensors(model: ModelSpec, layout: Layout, opt: ActivationOptions
                     ) -> tuple[int, ...]:
    """Bytes one GPU keeps for backward of one MoE layer and microbatch beyond what the dense
    layer's activation model counts (:mod:`distlab.plan.activations`, whose MLP is
    ``ffn_hidden`` wide and whose first MLP linear's input is the router's), in order:

    - the routed rows' expert input, ``rows * hidden`` (the first expert linear's, in
      :func:`~distlab.plan.activations.linear_input_bytes`: 8 bits under float8), and, unless
      the probabilities weight the rows inside the activation (``opt.moe_weighting``,
      :data:`~distlab.plan.activations.MOE_WEIGHTINGS`), a second ``rows * hidden`` tensor in
      ``opt.dtype_bytes`` (the experts' output, or the unweighted input); ``rows`` the
      tensor-parallel group's, ``tokens * top_k * row_factor``, each GPU's share of them with
      ``etp = 1``;
    - the router's fp32 scores (``tokens * experts``), and with ``"activation"`` weighting the
      routed rows' fp32 probabilities, which the weighted SwiGLU keeps;
    - the routed and shared experts' inner tensors (:func:`_inner_nbytes`; ``rows * expert_ffn
      / tp`` elements per GPU either way) less the dense MLP's, never below none.

    Nothing under a recompute that keeps each layer's input only."""
    if not model.moe or layout.recompute_policy.keeps_input_only:
        return ()
    d, lin = opt.dtype_bytes, linear_input_bytes(layout, opt)
    tokens = model.seq_len // layout.cp * layout.micro_batch
    rows = int(tokens * model.top_k * row_factor(layout))   # the tensor-parallel group's rows
    seq_split = layout.tp if layout.sequence_parallel else 1
    width = model.expert_width
    experts = (_inner_nbytes(rows, width, model, opt, lin)
               + _inner_nbytes(tokens * model.shared_experts, width, model, opt, lin)) \
        // layout.tp
    dense = _inner_nbytes(tokens, model.ffn, model, opt, lin) // layout.tp
    # with etp = tp the group's rows are gathered on each GPU; with etp = 1 each GPU takes its
    # own share of them, whole-width
    own = layout.tp // layout.expert_tp
    weighted_inside = opt.moe_weighting == "activation"
    routed_io = rows * model.hidden * (lin + (0 if weighted_inside else d)) // own
    probs = rows * 4 // own if weighted_inside else 0
    scores = tokens * model.experts * 4 // seq_split
    return tuple(n for n in (routed_io, scores, probs, max(0, experts - dense)) if n > 0)


def all_to_all_seconds(nbytes: int, ep: int, stride: int, hw: Hardware, *,
                       link_share: float = 1.0) -> float:
    """Seconds of one all-to-all in which every one of ``ep`` ranks (``stride`` ranks apart)
    sends ``nbytes`` in all, ``nbytes / ep`` to each rank (its own share stays), priced as
    grouped point-to-point sends in flight together: the bytes for ranks in its node over the
    NVLink bandwidth times ``link_share``, the bytes for other nodes over its network port,
    the slower of the two (:func:`~distlab.plan.collectives.p2p_seconds`, with its latency
    once). 0 for one rank."""
    if ep == 1 or nbytes <= 0:
        return 0.0
    span = group_span(ep, stride, hw.gpus_per_node)
    share = nbytes / ep
    local = share * (span.per_node - 1) / link_share
    remote = share * (ep - span.per_node)
    inside = p2p_seconds(int(local), cross_node=False, hw=hw) if local else 0.0
    outside = p2p_seconds(int(remote), cross_node=True, hw=hw) if remote else 0.0
    return max(inside, outside)


def moe_layer_a2a_seconds(model: ModelSpec, layout: Layout, hw: Hardware, *,
                          link_share: float | None = None) -> tuple[float, float]:
    """Seconds of one MoE layer's all-to-alls per microbatch on one GPU, ``(forward,
    backward)``: dispatch and combine forward, both again backward, plus the forward's pair
    again under a recompute that repeats the whole layer. The ``ep`` group's ranks are ``etp``
    apart (Megatron-Core's order: expert tensor parallelism innermost, then expert
    parallelism)."""
    if not model.moe or layout.ep == 1:
        return 0.0, 0.0
    nbytes = int(routed_rows(model, layout) * model.hidden * A2A_BYTES)
    share = A2A_LINK_SHARE if link_share is None else link_share
    one = all_to_all_seconds(nbytes, layout.ep, layout.expert_tp, hw, link_share=share)
    again = 2 * one if layout.recompute_policy.keeps_input_only else 0.0
    return 2 * one, 2 * one + again
