"""The planner judged on published training runs: step time, memory and ranking, each in and
out of sample.

Every run of :mod:`distlab.evidence.plan.published` is priced as it states its layout
(:func:`distlab.evidence.plan.runs.run_inputs`): its step time against what it published
(:func:`~distlab.evidence.plan.runs.measured_step_s`), its memory per GPU against its
reported memory where it reports one, both as :func:`~distlab.vocabulary.error_pct` (positive: the
run was slower or larger than the model). The runs of a source marked ``held_out`` never enter a
fit; :func:`judge_published` summarises each split apart. The ranking check takes every group
of runs of one source that train the same model on the same GPUs with the same global batch in
different layouts, and asks whether the layout the source found fastest is among the model's
three fastest of them. Every published run ran, so the memory model's verdict on each can only
be right when it says the run fits: :meth:`PlanJudgement.misfits` lists the runs it calls
misfits (the GPU's memory below the model's peak), each one the model's error.

Targets (the planner's issue): step time median ``|error|`` <= 15% and p90 <= 30%, memory median
<= 10%, the published best layout in the model's top three.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from distlab.evidence.plan.published import PublishedSet, load_published
from distlab.evidence.plan.runs import (
    RunInputs,
    measured_memory_bytes,
    measured_step_s,
    memory_options,
    run_inputs,
)
from distlab.plan.calibration import ComputeRate, shipped_rate
from distlab.plan.memory import memory_per_gpu
from distlab.plan.step import step_time
from distlab.vocabulary import ErrorSummary, error_pct

__all__ = ["STEP_TARGET", "MEMORY_TARGET_MEDIAN", "JudgedRun", "RankingCheck", "PlanJudgement",
           "judge_published", "judge_run", "ranking_checks"]

STEP_TARGET = (15.0, 30.0)
"""Step time: median and p90 ``|error%|`` the planner aims for on runs it never saw."""
MEMORY_TARGET_MEDIAN = 10.0
"""Memory per GPU: median ``|error%|`` aimed for."""


@dataclass(frozen=True)
class JudgedRun:
    """One published run priced: ``step_error_pct`` of its step time, ``memory_error_pct``
    of its memory (``None`` where it publishes none), which figure gave the measured step."""

    inputs: RunInputs
    split: str
    measured_step_s: float
    model_step_s: float
    step_from: str
    measured_memory_bytes: float | None
    model_memory_bytes: int
    model_total_bytes: int = 0
    gpu_memory_bytes: int = 0

    @property
    def fits(self) -> bool:
        """Whether the model says the run fits: its peak per GPU (every part,
        :attr:`~distlab.plan.memory.MemoryEstimate.total`) within the GPU's memory. The run ran,
        so ``False`` is the model's error."""
        return self.model_total_bytes <= self.gpu_memory_bytes

    @property
    def step_error_pct(self) -> float:
        """``(measured - model) / model * 100`` of the step time."""
        return error_pct(self.measured_step_s, self.model_step_s)

    @property
    def memory_error_pct(self) -> float | None:
        """The same of memory per GPU, or ``None``."""
        if self.measured_memory_bytes is None:
            return None
        return error_pct(self.measured_memory_bytes, self.model_memory_bytes)


def judge_run(inputs: RunInputs, split: str, rate: ComputeRate | None = None) -> JudgedRun:
    """Price one run (its pipeline simulated; the closed form where the schedule's plan
    refuses the stated microbatches)."""
    try:
        est = step_time(inputs.model, inputs.layout, inputs.hardware, rate=rate)
    except ValueError:
        est = step_time(inputs.model, inputs.layout, inputs.hardware, rate=rate,
                        simulate_pipeline=False)
    measured, how = measured_step_s(inputs)
    memory = memory_per_gpu(inputs.model, inputs.layout, inputs.hardware,
                            **memory_options(inputs.run))   # the source's kernels
    # a run that reports the caching allocator's reserved bytes is set beside the model's
    # reserved bytes; one that reports the device's memory in use, beside everything
    kind = (inputs.run.measured.memory_kind or "").lower()
    model_memory = memory.reserved if "reserved" in kind else memory.total
    return JudgedRun(inputs, split, measured, est.step_s, how, measured_memory_bytes(inputs),
                     model_memory, memory.total, inputs.hardware.gpu.memory_bytes)


@dataclass(frozen=True)
class RankingCheck:
    """One group of a source's runs of one model, GPUs and batch in different layouts:
    ``published_best`` the run it found fastest, ``model_order`` the runs fastest first by the
    model; ``ok`` when the published best is among the model's first three."""

    source: str
    runs: tuple[str, ...]
    published_best: str
    model_order: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """The published best is among the model's three fastest."""
        return self.published_best in self.model_order[:3]


def ranking_checks(judged: Sequence[JudgedRun]) -> tuple[RankingCheck, ...]:
    """Every group of two or more runs of one source with the same model shape, GPUs, GPU
    kind, sequence and global batch (:class:`RankingCheck`)."""
    groups: dict[tuple[object, ...], list[JudgedRun]] = {}
    for j in judged:
        m, lay, hw = j.inputs.model, j.inputs.layout, j.inputs.hardware
        key = (j.inputs.run.source, m.layers, m.hidden, m.heads, m.seq_len, hw.gpus,
               hw.gpu.name, lay.global_batch)
        groups.setdefault(key, []).append(j)
    out = []
    for key, members in groups.items():
        layouts = {j.inputs.layout for j in members}
        if len(members) < 2 or len(layouts) < 2:
            continue
        best = min(members, key=lambda j: j.measured_step_s)
        order = sorted(members, key=lambda j: j.model_step_s)
        out.append(RankingCheck(str(key[0]), tuple(j.inputs.run.id for j in members),
                                best.inputs.run.id, tuple(j.inputs.run.id for j in order)))
    return tuple(out)


@dataclass(frozen=True)
class PlanJudgement:
    """Every run judged, with summaries per split and per source."""

    runs: tuple[JudgedRun, ...]
    rate: ComputeRate
    rankings: tuple[RankingCheck, ...]

    def step_summary(self, split: str | None = None, source: str | None = None
                     ) -> ErrorSummary:
        """``|error%|`` of step time over the runs of ``split`` and/or ``source``."""
        return ErrorSummary.of((j.step_error_pct for j in self._of(split, source)),
                               source or split or "all")

    def memory_summary(self, split: str | None = None, source: str | None = None
                       ) -> ErrorSummary:
        """``|error%|`` of memory per GPU over the runs that publish it."""
        return ErrorSummary.of((j.memory_error_pct for j in self._of(split, source)),
                               source or split or "all")

    def misfits(self, split: str | None = None, source: str | None = None
                ) -> list[JudgedRun]:
        """The runs of ``split`` and/or ``source`` the memory model calls misfits (each ran:
        every one is the model's error)."""
        return [j for j in self._of(split, source) if not j.fits]

    def _of(self, split: str | None, source: str | None) -> list[JudgedRun]:
        return [j for j in self.runs if (split is None or j.split == split)
                and (source is None or j.inputs.run.source == source)]

    @property
    def sources(self) -> tuple[str, ...]:
        """The sources, in the published set's order."""
        return tuple(dict.fromkeys(j.inputs.run.source for j in self.runs))


def judge_published(published: PublishedSet | None = None, *,
                    rate: ComputeRate | None = None) -> PlanJudgement:
    """Judge every run of ``published`` (default the shipped set) with ``rate`` (default the
    shipped calibration)."""
    published = load_published() if published is None else published
    rate = shipped_rate() if rate is None else rate
    judged = tuple(judge_run(run_inputs(r), published.sources[r.source].split, rate)
                   for r in published.all_runs)
    return PlanJudgement(judged, rate, ranking_checks(judged))
