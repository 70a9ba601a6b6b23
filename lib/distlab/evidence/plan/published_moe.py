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
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from distlab.plan.layout import Hardware, Layout, hardware
from distlab.transformer import PRESETS, ModelSpec, model_spec

__all__ = ["MoeRun", "MoeRunInputs", "MoeSource", "load_moe_runs", "moe_run_inputs"]

_DATA = "data/published_moe_runs.json"
SPLITS = ("calibration", "held_out")
PRECISION = "mixed-fp32-grads"
"""The model states of every run (Megatron-Core: 16-bit parameters, fp32 gradients and Adam
states), sharded by its distributed optimizer (ZeRO 1) unless the run states FSDP."""


@dataclass(frozen=True)
class MoeSource:
    """One source: its key, split, title, URL (and a second one), how its runs were made."""

    key: str
    split: str
    title: str
    url: str
    also: str
    how: str


@dataclass(frozen=True)
class MoeRun:
    """One published run as its source states it (the file's ``about`` defines the fields);
    ``measured`` holds ``tokens_per_s_per_gpu`` or ``step_s``."""

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
    runs = []
    for raw in data["runs"]:
        fields = dict(raw)
        key = fields.pop("source")
        if key not in sources:
            raise ValueError(f"run {raw['id']}: unknown source {key!r}")
        if fields["model"] not in PRESETS:
            raise ValueError(f"run {raw['id']}: model {fields['model']!r} is not a preset")
        run = MoeRun(source=sources[key], **fields)
        if run.dp * run.tp * run.pp * run.cp != run.gpus:
            raise ValueError(f"run {run.id}: tp * pp * cp does not divide {run.gpus} GPUs")
        runs.append(run)
    return tuple(runs)


def moe_run_inputs(run: MoeRun) -> MoeRunInputs:
    """The planner's model, layout and hardware for ``run``: its preset at its sequence
    length; dp from the GPU count; ZeRO 1 (Megatron-Core's distributed optimizer; ZeRO 3 where
    it states FSDP) with :data:`PRECISION`; sequence parallelism with ``tp > 1``;
    Interleaved1F1B with ``vp > 1``, else 1F1B; cuDNN's attention (Transformer Engine's
    choice on Hopper and later); its GPUs in nodes of 8 over the box's usual network."""
    model = model_spec(run.model, seq_len=run.seq_len)
    layout = Layout(dp=run.dp, tp=run.tp, pp=run.pp, cp=run.cp, ep=run.ep, etp=run.etp,
                    zero=3 if run.fsdp else 1, sequence_parallel=run.tp > 1,
                    schedule="Interleaved1F1B" if run.vp > 1 else "1F1B",
                    stages_per_rank=run.vp, micro_batch=run.mbs, global_batch=run.gbs,
                    recompute=run.recompute, precision=PRECISION,
                    compute_dtype=run.precision, attention_kernel="cudnn",
                    ep_overlap=run.ep_overlap)
    return MoeRunInputs(run, model, layout, hardware(run.gpu, run.gpus))
