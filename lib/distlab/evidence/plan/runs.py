"""A published training run (:mod:`distlab.evidence.plan.published`) as the planner's inputs,
and what the run measured as a step time.

:func:`run_inputs` turns a run's stated model, hardware and layout into a
:class:`~distlab.transformer.ModelSpec`, :class:`~distlab.plan.layout.Layout` and
:class:`~distlab.plan.layout.Hardware`; whatever the run leaves unstated is filled by one rule
each (``RunInputs.assumed`` names every one used). :func:`measured_step_s` reads the step time
from what the source published, in this order: the step time itself; tokens per second per GPU;
TFLOP/s per GPU with the FLOPs the source counts (``flops_basis``: ``"model"``, three forward
passes; ``"hardware"``, with the recompute's extra forward, Narayanan et al. 2021's eq. 3); MFU
times the GPU's peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distlab.evidence.plan.published import PublishedRun, PublishedSource, load_published
from distlab.nccl.boxes import GPU_BOXES
from distlab.plan.layout import Hardware, Layout, gpu_kind
from distlab.plan.memory import FRAMEWORKS
from distlab.plan.step import StageFlops, stage_flops
from distlab.recompute import NONE, OP, from_published
from distlab.transformer import ModelSpec

__all__ = ["CUDNN_FROM_SM", "FSDP_SOURCES", "PER_OP_NOTE", "TRANSFORMER_ENGINE_SOURCES",
           "RunInputs", "measured_memory_bytes", "measured_step_s", "memory_options", "run_inputs"]

SEQUENCE_PARALLEL_FROM = 2023
"""Runs whose tensor parallelism does not say: sequence parallel from this year on (Megatron-LM
made it the default with Korthikanti et al. 2022), off before (BLOOM, Narayanan et al.)."""

PER_OP_NOTE = OP.published_note
"""A run's ``activation_checkpointing_note`` for torchtitan's per-op selective checkpointing
(``selective_ac_option = 'op'``): priced as ``recompute="op"``
(:func:`distlab.recompute.from_published`). torchtitan's per-layer option (``"selective per
layer"``, every n-th layer checkpointed whole, n unstated) stays ``"selective"``."""

FSDP_SOURCES = ("torchtitan", "mosaicml")
"""Sources whose ZeRO-3 is torch FSDP with a bf16 ``param_dtype`` (fp32 sharded states):
their states are priced as ``"fsdp-mixed"``; every other source's as its ``states`` where the
configuration its runs ran with states them (:class:`~distlab.evidence.plan.published.
PublishedSource`), else as Megatron-LM's ``"mixed-fp32-grads"`` (DeepSpeed's BF16 optimizer keeps
fp32 gradients too). A run that states no ZeRO stage takes its source's ``zero_stage`` where
that configuration states it, else 0."""


TRANSFORMER_ENGINE_SOURCES = ("megatron_lm_h100_2024", "nemo_24_07", "nemo_long_sequence_2024",
                              "megatron_bridge_25_11")
"""Sources that train with Megatron-Core on NVIDIA's Transformer Engine (FP8, or
``--tp-comm-overlap``, both need it): their attention is cuDNN's fused kernel where the GPU is
Hopper or later, which Transformer Engine prefers to FlashAttention-2 whenever both apply (NeMo's
documentation, ``memory_optimizations.rst``, 2024: "Transformer Engine prefers cuDNN flash
attention on Hopper+ architectures"). Every other source runs FlashAttention or an older kernel,
priced as FlashAttention-2."""

CUDNN_FROM_SM = 90
"""Compute capability (x 10) from which Transformer Engine picks cuDNN's attention."""


@dataclass(frozen=True)
class RunInputs:
    """A run as the planner prices it, and each rule used where the run is silent."""

    run: PublishedRun
    model: ModelSpec
    layout: Layout
    hardware: Hardware
    assumed: tuple[str, ...]


def _network(text: str | None, gpu: str) -> str:
    t = (text or "").lower()
    if "roce" in t and "400" in t:
        return "roce400x8"
    if "roce" in t or "rdma" in t:
        return "roce400x8" if "400" in t or "1600" in t else "ib_ndr400x8"
    if "omni-path" in t:
        return "efa400"  # 4 x 100 Gb/s per node: the preset with the same bandwidth
    if "hdr" in t or gpu.startswith("A100"):
        return "ib_hdr200x8"
    return "ib_ndr400x8"


def run_inputs(run: PublishedRun) -> RunInputs:
    """The planner's inputs for ``run`` (see the module docstring)."""
    m, h, lay = run.model, run.hardware, run.layout
    assumed: list[str] = []
    gated = m.gated_ffn
    model = ModelSpec(
        run.id, m.layers, m.hidden, m.heads, m.vocab, m.seq_len, kv_heads=m.kv_heads,
        ffn_hidden=m.ffn_hidden, gated_ffn=gated, tied_embeddings=m.tied_embeddings,
        attention_bias=not gated, mlp_bias=not gated,
        norm="rmsnorm" if gated else "layernorm", positions=None if gated else m.seq_len)
    per_node = h.gpus_per_node or 8
    if h.gpus_per_node is None:
        assumed.append("8 GPUs per node")
    network = None
    if h.gpus > per_node:
        network = _network(h.network, h.gpu)
        assumed.append(f"network {network} for {h.network!r}")
    hw = Hardware(gpu_kind(h.gpu), h.gpus, min(per_node, h.gpus), network)
    source = _source(run)
    zero = lay.zero_stage if lay.zero_stage is not None else (source.zero_stage or 0)
    if lay.zero_stage is None:
        assumed.append("zero 0 (unstated)" if source.zero_stage is None else
                       f"zero {zero} (its source's configuration)")
    if lay.recompute is None:
        recompute = NONE
        assumed.append("recompute none (unstated)")
    else:  # torchtitan's per-op policy is stated as selective, with a note
        recompute = from_published(lay.recompute, lay.activation_checkpointing_note)
    mb = lay.micro_batch or 1
    if lay.micro_batch is None:
        assumed.append("micro-batch 1 (unstated)")
    v = lay.virtual_stages or 1
    schedule = "Interleaved1F1B" if v > 1 or lay.schedule == "Interleaved1F1B" else "1F1B"
    if schedule == "Interleaved1F1B" and v == 1:
        v = 2
        assumed.append("2 stages per rank (interleaved, count unstated)")
    fsdp = zero == 3 and any(run.source.startswith(s) for s in FSDP_SOURCES)
    precision = "fsdp-mixed" if fsdp else (source.states or "mixed-fp32-grads")
    year = source.year
    sp = bool(lay.sequence_parallel) if lay.sequence_parallel is not None else (
        lay.tp > 1 and year >= SEQUENCE_PARALLEL_FROM)
    if lay.sequence_parallel is None and lay.tp > 1:
        assumed.append(f"sequence parallel {'on' if sp else 'off'} (unstated; a {year} run)")
    kernel = _attention_kernel(run, hw)
    if kernel != "flash":
        assumed.append(f"{kernel} attention (Transformer Engine on "
                       f"{hw.gpu.name})")
    layout = Layout(dp=lay.dp, tp=lay.tp, pp=lay.pp, cp=lay.cp, zero=zero,
                    tp_overlap=_async_tp(run), sequence_parallel=sp, schedule=schedule,
                    stages_per_rank=v,
                    micro_batch=mb, global_batch=lay.global_batch or lay.dp * mb,
                    recompute=recompute.name, precision=precision,
                    compute_dtype="fp8" if lay.precision == "fp8" else "bf16",
                    attention_kernel=kernel)
    return RunInputs(run, model, layout, hw, tuple(assumed))


def _attention_kernel(run: PublishedRun, hw: Hardware) -> str:
    """``"cudnn"`` for a :data:`TRANSFORMER_ENGINE_SOURCES` run on Hopper or later, else
    ``"flash"``."""
    te = run.source in TRANSFORMER_ENGINE_SOURCES
    return "cudnn" if te and GPU_BOXES[hw.gpu.box].sm >= CUDNN_FROM_SM else "flash"


def _source(run: PublishedRun) -> PublishedSource:
    return load_published().sources[run.source]


def memory_options(run: PublishedRun) -> dict[str, Any]:
    """:func:`~distlab.plan.memory.memory_per_gpu`'s keyword arguments for what ``run``'s kernels
    keep: its source's ``framework`` (:data:`distlab.plan.memory.FRAMEWORKS`)."""
    return dict(FRAMEWORKS[_source(run).framework])


def source_how(run: PublishedRun) -> str:
    """How the run's source says its runs were made (its ``how``)."""
    return _source(run).how


def _async_tp(run: PublishedRun) -> bool:
    """Tensor-parallel communication overlapped with compute, as the run or its source says:
    Megatron-LM's ``--tp-comm-overlap`` or torch's async TP (a run named or noted so, never
    one named ``vanilla``)."""
    text = f"{run.id} {run.notes}".lower()
    if "vanilla" in run.id:
        return False
    return ("asynctp" in text or "async-tp" in text or "async tp" in text
            or "--tp-comm-overlap" in source_how(run))


def _step_flops(model: ModelSpec, layout: Layout, basis: str | None) -> float:
    """FLOPs of one step over every GPU as a source counts them."""
    whole = Layout(global_batch=layout.global_batch, recompute=layout.recompute)
    fl: StageFlops = stage_flops(model, whole, model.layers, last=True)
    per_sequence = fl.forward + fl.backward + (fl.recompute if basis == "hardware" else 0.0)
    return per_sequence * layout.global_batch


def measured_step_s(inputs: RunInputs) -> tuple[float, str]:
    """Seconds of one step as ``inputs.run`` published it, and which figure gave it."""
    meas, model, layout = inputs.run.measured, inputs.model, inputs.layout
    if meas.step_s is not None:
        return meas.step_s, "step time"
    tokens = layout.global_batch * model.seq_len
    if meas.tokens_per_s_per_gpu is not None:
        return tokens / meas.tokens_per_s_per_gpu / layout.gpus, "tokens/s per GPU"
    flops = _step_flops(model, layout, meas.flops_basis)
    if meas.tflops_per_gpu is not None:
        return flops / (meas.tflops_per_gpu * 1e12 * layout.gpus), \
            f"TFLOP/s per GPU ({meas.flops_basis or 'model'} FLOPs)"
    if meas.mfu is not None:
        return flops / (meas.mfu * inputs.hardware.gpu.peak_flops * layout.gpus), "MFU"
    raise ValueError(f"published run {inputs.run.id!r} states no step time, throughput or MFU")


def measured_memory_bytes(inputs: RunInputs) -> float | None:
    """Memory per GPU the run published, bytes (``None``: not published)."""
    return inputs.run.measured.memory_bytes
