"""Published training runs of mixture-of-experts models, each with its exact source, for
judging the planner's expert dimension.

The runs ship as package data (``distlab/evidence/plan/data/published_moe_runs.json``);
:func:`load_moe_runs` reads them into frozen records and :func:`moe_run_inputs` turns one into
the planner's :class:`~distlab.transformer.ModelSpec`, :class:`~distlab.plan.layout.Layout`
and :class:`~distlab.plan.layout.Hardware`, one rule for what a run leaves unstated (written in
the file's ``about`` and each run's ``derived``). Sources are split into ``"calibration"`` (the
grouped-GEMM efficiency is chosen on these) and ``"held_out"`` (only judged).

Units: tokens/s per GPU, seconds per optimizer step, batches in sequences, sequence lengths in
tokens.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, fields
from functools import lru_cache
from importlib import resources
from typing import Any

from distlab.plan.layout import PRECISIONS, Hardware, Layout, hardware
from distlab.plan.memory import FRAMEWORKS
from distlab.transformer import PRESETS, ModelSpec, model_spec
from distlab.vocabulary import error_pct

__all__ = ["COLUMNS_AGREE", "DISPATCHERS", "MEMORY_OPTIONS", "ROUTINGS", "MoeRun", "MoeRunInputs",
           "MoeSource",
           "SameLayout", "columns_disagree", "load_moe_runs", "moe_run_inputs", "same_layouts"]

_DATA = "data/published_moe_runs.json"
SPLITS = ("calibration", "held_out")
ROUTINGS = ("dropless", "tokendrop")
"""How a run's MoE layers route (its ``routing``): ``"dropless"`` (Megatron-Core's default, and
every run whose source says nothing) or ``"tokendrop"`` (a capacity factor, the experts' input
padded to capacity: Megatron Bridge's ``apply_moe_token_drop``), with its ``capacity_factor``."""
DISPATCHERS = ("alltoall", "deepep", "hybridep")
"""The expert-parallel token dispatcher a run's source configures (its ``dispatcher``):
``"alltoall"`` (Megatron-Core's all-to-all token dispatcher over NCCL, the default of every
Megatron Bridge model provider, and what a run whose configuration names no flex backend ran)
or Megatron-Core's flex dispatcher with the ``"deepep"`` (DeepEP's normal kernels) or
``"hybridep"`` (NVIDIA's Hybrid-EP) backend. Recorded, not priced: the planner prices every
run's all-to-all as the NCCL dispatcher's, whose share of NVLink the calibration runs (all
``"alltoall"``) fit; priced at DeepEP's and Hybrid-EP's published bandwidths instead, the
held-out p90 got worse (``results/moe-dispatcher-2026-11-28/``)."""
COLUMNS_AGREE = 0.10
"""How far (a fraction) a run's own two columns may imply a different number of FLOPs per token
than the median of its model's other runs at the same sequence length before
:func:`columns_disagree` sets it aside: a source publishes tokens/s per GPU beside model
TFLOP/s per GPU, whose ratio is the FLOPs per token the source counts, a property of the model
and sequence length alone. The Megatron Bridge rows agree to within 0.5%; one disagrees by 2x."""
_NOT_LAYOUT = frozenset({"id", "source", "measured", "derived", "routing", "capacity_factor",
                         "dispatcher"})
"""The fields of a :class:`MoeRun` that say where it comes from or what it measured, not what
it ran, how it routes and which token dispatcher moved its tokens
(:attr:`MoeRun.layout_key`)."""
PRECISION = "mixed-fp32-grads"
"""The model states of a run whose source does not state them (Megatron-LM's bf16 default:
16-bit parameters, fp32 gradients and Adam states); sharded by its distributed optimizer (ZeRO 1)
unless the run states FSDP. A source that states them says so in its ``states``."""

MEMORY_OPTIONS: dict[str, Any] = FRAMEWORKS["megatron"]
""":func:`~distlab.plan.memory.memory_per_gpu`'s keyword arguments for every run here: each runs
Megatron-Core with ``bias_activation_fusion`` (its fused SwiGLU keeps its input, not SiLU's
output) and routed experts in ``TEGroupedMLP``, whose fused weighted SwiGLU applies each routed
row's probability (``moe_weighting="activation"``: the experts' output is not kept); Megatron
Bridge's providers of every model here set ``bias_activation_fusion = True`` (tags v0.1.0rc3,
v0.2.0), and Megatron-Core has weighted the rows there since core_v0.13.0
(``megatron/core/transformer/moe/experts.py``, ``weighted_bias_swiglu_impl``)."""


@dataclass(frozen=True)
class MoeSource:
    """One source: its key, split, title, URL (and a second one), how its runs were made."""

    key: str
    split: str
    title: str
    url: str
    also: str
    how: str
    states: str = PRECISION


@dataclass(frozen=True)
class MoeRun:
    """One published run as its source states it (the file's ``about`` defines the fields);
    ``measured`` holds ``tokens_per_s_per_gpu`` or ``step_s``; ``routing`` one of
    :data:`ROUTINGS`, ``capacity_factor`` the token-drop run's (``None`` for a dropless one);
    ``dispatcher`` the token dispatcher its source's configuration names, one of
    :data:`DISPATCHERS` (``"alltoall"``, Megatron-Core's default, where it names none)."""

    id: str
    source: MoeSource
    model: str
    gpu: str
    gpus: int
    precision: str
    gbs: int
    mbs: int
    seq_len: int
    tp: int
    pp: int
    cp: int
    vp: int
    ep: int
    etp: int
    recompute: str
    measured: dict[str, float]
    derived: str
    ep_overlap: bool = False
    fsdp: bool = False
    routing: str = "dropless"
    capacity_factor: float | None = None
    dispatcher: str = "alltoall"

    @property
    def split(self) -> str:
        """Its source's split."""
        return self.source.split

    @property
    def dp(self) -> int:
        """Data-parallel ranks: ``gpus / (tp * pp * cp)``."""
        return self.gpus // (self.tp * self.pp * self.cp)

    def measured_step_s(self) -> float:
        """Seconds per optimizer step the source published: the step time itself, or from
        tokens/s per GPU, ``gbs * seq_len / (tokens/s per GPU * gpus)``."""
        if "step_s" in self.measured:
            return float(self.measured["step_s"])
        tokens = self.gbs * self.seq_len
        return tokens / (float(self.measured["tokens_per_s_per_gpu"]) * self.gpus)

    @property
    def stated_flops_per_token(self) -> float | None:
        """FLOPs per token the source's two columns imply, ``model TFLOP/s per GPU * 1e12 /
        tokens/s per GPU``; ``None`` where it publishes only one."""
        m = self.measured
        if "model_tflops_per_gpu" not in m or "tokens_per_s_per_gpu" not in m:
            return None
        return float(m["model_tflops_per_gpu"]) * 1e12 / float(m["tokens_per_s_per_gpu"])

    @property
    def layout_key(self) -> tuple[object, ...]:
        """Everything that defines the run's parallel layout and work (not its source or
        result, nor its ``routing``, ``capacity_factor`` and ``dispatcher``: the same layout
        published dropless by one release and with token drop by another is one layout here,
        so :func:`same_layouts` shows what the routing and the software alone leave apart)."""
        return tuple(getattr(self, f.name) for f in fields(self) if f.name not in _NOT_LAYOUT)


@dataclass(frozen=True)
class MoeRunInputs:
    """A run as the planner prices it."""

    run: MoeRun
    model: ModelSpec
    layout: Layout
    hw: Hardware


@lru_cache(maxsize=1)
def load_moe_runs() -> tuple[MoeRun, ...]:
    """Every run of the package's data file, in file order; ``ValueError`` naming a run whose
    source, split, model or layout is not one this module knows."""
    text = resources.files("distlab.evidence.plan").joinpath(_DATA).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    sources = {s["key"]: MoeSource(**s) for s in data["sources"]}
    for s in sources.values():
        if s.split not in SPLITS:
            raise ValueError(f"source {s.key}: split {s.split!r} is not one of {SPLITS}")
        if s.states not in PRECISIONS:
            raise ValueError(f"source {s.key}: states {s.states!r} is not one of "
                             f"{', '.join(PRECISIONS)}")
    runs = []
    for raw in data["runs"]:
        fields = dict(raw)
        key = fields.pop("source")
        if key not in sources:
            raise ValueError(f"run {raw['id']}: unknown source {key!r}")
        if fields["model"] not in PRESETS:
            raise ValueError(f"run {raw['id']}: model {fields['model']!r} is not a preset")
        run = MoeRun(source=sources[key], **fields)
        if run.routing not in ROUTINGS:
            raise ValueError(f"run {run.id}: routing {run.routing!r} is not one of {ROUTINGS}")
        if run.dispatcher not in DISPATCHERS:
            raise ValueError(f"run {run.id}: dispatcher {run.dispatcher!r} is not one of "
                             f"{DISPATCHERS}")
        if (run.routing == "tokendrop") != (run.capacity_factor is not None):
            raise ValueError(f"run {run.id}: a capacity_factor goes with routing 'tokendrop' "
                             "and only with it")
        if run.dp * run.tp * run.pp * run.cp != run.gpus:
            raise ValueError(f"run {run.id}: tp * pp * cp does not divide {run.gpus} GPUs")
        runs.append(run)
    return tuple(runs)


def moe_run_inputs(run: MoeRun) -> MoeRunInputs:
    """The planner's model, layout and hardware for ``run``: its preset at its sequence
    length; dp from the GPU count; ZeRO 1 (Megatron-Core's distributed optimizer; ZeRO 3 where
    it states FSDP) with its source's ``states`` (:data:`PRECISION` where it states none);
    sequence parallelism with ``tp > 1``; Interleaved1F1B with ``vp > 1``, else 1F1B; cuDNN's
    attention (Transformer Engine's choice on Hopper and later); its routing (token drop: its
    capacity factor, ``Layout.expert_capacity``; dropless: ``None``); its GPUs in nodes of 8
    over the box's usual network. Its ``dispatcher`` is not an input: every run's all-to-all is
    priced as the NCCL dispatcher's (:data:`DISPATCHERS`)."""
    model = model_spec(run.model, seq_len=run.seq_len)
    layout = Layout(dp=run.dp, tp=run.tp, pp=run.pp, cp=run.cp, ep=run.ep, etp=run.etp,
                    zero=3 if run.fsdp else 1, sequence_parallel=run.tp > 1,
                    schedule="Interleaved1F1B" if run.vp > 1 else "1F1B",
                    stages_per_rank=run.vp, micro_batch=run.mbs, global_batch=run.gbs,
                    recompute=run.recompute, precision=run.source.states,
                    compute_dtype=run.precision, attention_kernel="cudnn",
                    ep_overlap=run.ep_overlap, expert_capacity=run.capacity_factor)
    return MoeRunInputs(run, model, layout, hardware(run.gpu, run.gpus))


def columns_disagree(runs: tuple[MoeRun, ...] | None = None) -> dict[str, str]:
    """Runs whose two published columns disagree, by id, with the reason: the FLOPs per token
    they imply (:attr:`MoeRun.stated_flops_per_token`) is more than :data:`COLUMNS_AGREE` from
    the median of the other runs of its model and sequence length (at least two others needed).
    Such a run's tokens/s or its TFLOP/s is misprinted, and which one cannot be told, so the
    judge sets it aside rather than judge the planner on it."""
    runs = load_moe_runs() if runs is None else runs
    out: dict[str, str] = {}
    for run in runs:
        mine = run.stated_flops_per_token
        if mine is None:
            continue
        others = [f for r in runs if r is not run and r.model == run.model
                  and r.seq_len == run.seq_len and (f := r.stated_flops_per_token) is not None]
        if len(others) < 2:
            continue
        mid = statistics.median(others)
        if abs(error_pct(mine, mid)) > 100 * COLUMNS_AGREE:
            out[run.id] = (f"tokens/s and TFLOP/s imply {mine / 1e9:.1f} GFLOP/token, "
                           f"{mine / mid:.2f}x the {mid / 1e9:.1f} of {len(others)} other "
                           f"{run.model} runs ({run.seq_len} tokens)")
    return out


@dataclass(frozen=True)
class SameLayout:
    """Runs of one layout (:attr:`MoeRun.layout_key`) published by more than one source, and
    the least ``|error%|`` any single prediction can have on the worst of them."""

    runs: tuple[MoeRun, ...]

    @property
    def floor_pct(self) -> float:
        """``(slowest - fastest) / (slowest + fastest) * 100`` of their step times: a
        prediction ``p`` has ``|error%| = |measured / p - 1| * 100`` on each, and the largest of
        those is smallest, this value, at ``p`` midway between the two."""
        steps = [r.measured_step_s() for r in self.runs]
        return (max(steps) - min(steps)) / (max(steps) + min(steps)) * 100.0


def same_layouts(runs: tuple[MoeRun, ...] | None = None) -> tuple[SameLayout, ...]:
    """Every layout published by more than one source, in file order of its first run."""
    runs = load_moe_runs() if runs is None else runs
    groups: dict[tuple[object, ...], list[MoeRun]] = {}
    for run in runs:
        groups.setdefault(run.layout_key, []).append(run)
    return tuple(SameLayout(tuple(g)) for g in groups.values()
                 if len({r.source.key for r in g}) > 1)
