"""The planner's expert dimension judged on published mixture-of-experts training runs.

Every run of :mod:`distlab.evidence.plan.published_moe` is priced as it states its layout
(:func:`~distlab.evidence.plan.published_moe.moe_run_inputs`) and its step time compared with
the one it published, as :func:`~distlab.vocabulary.error_pct` (positive: the run was slower than
the model); tokens/s per GPU is the same ratio the other way, so its ``|error|`` is the step's. The
sources marked ``held_out`` never enter the fit: :func:`fit_moe_rate` chooses the all-to-all's
share of NVLink from :data:`LINK_SHARE_GRID` by the smallest median ``|error|`` over the
calibration split only, the grouped-GEMM efficiency held at its measured value
(:data:`~distlab.plan.experts.GROUPED_GEMM_EFFICIENCY`); ``grouped_gemm=True`` fits that too,
from :data:`GROUPED_GEMM_GRID`, to compare a fit with the measurement.

A run whose own two published columns disagree
(:func:`~distlab.evidence.plan.published_moe.columns_disagree`) is priced and shown but set
aside: it enters neither the fit nor a split's summary.

Target (the planner's): tokens/s per GPU median ``|error|`` <= 15% and p90 <= 30% on the runs
not fitted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from distlab.evidence.plan.published_moe import (
    MoeRunInputs,
    columns_disagree,
    load_moe_runs,
    moe_run_inputs,
)
from distlab.plan.calibration import ComputeRate, shipped_rate
from distlab.plan.step import StepEstimate, step_time
from distlab.vocabulary import ErrorSummary, error_pct

__all__ = ["GROUPED_GEMM_GRID", "LINK_SHARE_GRID", "MOE_STEP_TARGET", "SET_ASIDE", "JudgedMoeRun",
           "MoeJudgement", "fit_moe_rate", "judge_moe"]

MOE_STEP_TARGET = (15.0, 30.0)
"""Median and p90 ``|error%|`` aimed for on the held-out runs."""

GROUPED_GEMM_GRID = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""Grouped-GEMM efficiencies :func:`fit_moe_rate` tries."""

LINK_SHARE_GRID = (0.05, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3, 0.5, 1.0)
"""Shares of NVLink bandwidth for the all-to-all :func:`fit_moe_rate` tries."""


SET_ASIDE = "set_aside"
"""The split of a run whose own columns disagree (:func:`columns_disagree`)."""


@dataclass(frozen=True)
class JudgedMoeRun:
    """One run priced: its inputs, the measured and model step (seconds), the model's step,
    and why it is set aside (``""``: judged)."""

    inputs: MoeRunInputs
    measured_step_s: float
    step: StepEstimate
    set_aside: str = ""

    @property
    def split(self) -> str:
        """Its source's split, or :data:`SET_ASIDE`."""
        return SET_ASIDE if self.set_aside else self.inputs.run.split

    @property
    def model_step_s(self) -> float:
        """The model's step, seconds."""
        return self.step.step_s

    @property
    def step_error_pct(self) -> float:
        """``(measured - model) / model * 100`` of the step time."""
        return error_pct(self.measured_step_s, self.model_step_s)

    @property
    def measured_tokens_per_s_per_gpu(self) -> float:
        """Tokens/s per GPU the run measured (from its step where it published that)."""
        layout = self.inputs.layout
        return layout.global_batch * self.inputs.model.seq_len / self.measured_step_s \
            / layout.gpus


@dataclass(frozen=True)
class MoeJudgement:
    """Every run judged with ``rate``."""

    runs: tuple[JudgedMoeRun, ...]
    rate: ComputeRate

    def summary(self, split: str | None = None) -> ErrorSummary:
        """``|error%|`` of the step (and of tokens/s per GPU) over ``split`` (``None``: all)."""
        return ErrorSummary.of([r.step_error_pct for r in self.runs
                                if split is None or r.split == split], split or "all")


def _inputs() -> tuple[MoeRunInputs, ...]:
    return tuple(moe_run_inputs(r) for r in load_moe_runs())


def judge_moe(rate: ComputeRate | None = None) -> MoeJudgement:
    """Every published MoE run priced with ``rate`` (default the shipped one); the pipeline's
    bubble from its closed form (:func:`~distlab.plan.step.step_time`'s
    ``simulate_pipeline=False``: hundreds of microbatches, where the two agree)."""
    rate = shipped_rate() if rate is None else rate
    aside = columns_disagree()
    runs = tuple(JudgedMoeRun(i, i.run.measured_step_s(),
                              step_time(i.model, i.layout, i.hw, rate=rate,
                                        simulate_pipeline=False), aside.get(i.run.id, ""))
                 for i in _inputs())
    return MoeJudgement(runs, rate)


def fit_moe_rate(base: ComputeRate | None = None, *,
                 grouped_gemm: bool = False) -> ComputeRate:
    """``base`` (default the shipped rate) with the all-to-all's share of NVLink of
    :data:`LINK_SHARE_GRID` that gives the smallest median ``|error|`` (then p90) on the
    calibration split; with ``grouped_gemm`` the grouped-GEMM efficiency from
    :data:`GROUPED_GEMM_GRID` fitted with it, else ``base``'s (the measured one) kept."""
    base = shipped_rate() if base is None else base
    aside = columns_disagree()
    calibration = [i for i in _inputs()
                   if i.run.split == "calibration" and i.run.id not in aside]
    best: tuple[float, float, ComputeRate] | None = None
    for g in GROUPED_GEMM_GRID if grouped_gemm else (base.grouped_gemm,):
        for share in LINK_SHARE_GRID:
            rate = replace(base, grouped_gemm=g, a2a_link_share=share)
            s = ErrorSummary.of([error_pct(i.run.measured_step_s(),
                                           step_time(i.model, i.layout, i.hw, rate=rate,
                                                     simulate_pipeline=False).step_s)
                                 for i in calibration])
            if best is None or (s.median, s.p90) < best[:2]:
                best = (s.median, s.p90, rate)
    assert best is not None   # the grids are not empty
    return best[2]
