"""``python -m distlab.judge plan``: the planner judged on published training runs.

    python -m distlab.judge plan                 # error per source, per split, ranking checks
    python -m distlab.judge plan --runs          # and every run: measured, model, error
    python -m distlab.judge plan --refit         # fit the compute rate on the calibration split
    python -m distlab.judge plan --json OUT      # the judgement as JSON
    python -m distlab.judge plan --moe           # the expert dimension on published MoE runs
    python -m distlab.judge plan --moe --refit   # ... its all-to-all share fitted again
    python -m distlab.judge plan --moe --refit-gemm   # ... and its grouped-GEMM efficiency

Each published run (``lib/distlab/evidence/plan/data/published_runs.json``: 13 sources,
their tables named) is priced as it states its layout; step time and memory per GPU against
what it published, ``error% = (measured - model) / model``. Sources marked ``held_out``
never enter a fit: their rows are the out-of-sample judgement. ``--refit`` fits the compute
rate again on the calibration split (:mod:`distlab.evidence.plan.fit_rate`) and judges with
it; the shipped rate is :data:`distlab.plan.calibration.SHIPPED`. ``--moe`` judges the
planner's expert dimension on the published mixture-of-experts runs instead
(``lib/distlab/evidence/plan/data/published_moe_runs.json``,
:mod:`distlab.evidence.plan.judged_moe`; with ``--refit`` its all-to-all share of NVLink is
fitted again on their calibration split, the grouped-GEMM efficiency kept at its measured
value; with ``--refit-gemm`` that efficiency is fitted too). Every published run ran, so the
memory model's verdict on each is checked too: the report counts the runs it calls misfits
(:func:`misfit_lines`; each is the model's error), listed with ``--runs`` (always with
``--moe``). Nothing is measured.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from distlab.cli import options
from distlab.cli.run import run_main
from distlab.evidence.plan.judged import (
    MEMORY_TARGET_MEDIAN,
    STEP_TARGET,
    PlanJudgement,
    judge_published,
)
from distlab.report.jsonfile import write_json
from distlab.report.table import Column, format_table
from distlab.vocabulary import size_in

__all__ = ["PROG", "judgement_json", "main", "misfit_lines", "moe_memory_verdicts",
           "moe_misfit_lines", "report_lines"]

PROG = "python -m distlab.judge plan"

SUMMARY_COLUMNS = (
    Column("source", "source", align="<"), Column("split", "split", align="<"),
    Column("runs", "n"), Column("step median %", "median", ".1f"),
    Column("p90 %", "p90", ".1f"), Column("memory runs", "mn"),
    Column("memory median %", "mmedian", ".1f"),
)
RUN_COLUMNS = (
    Column("run", "id", align="<"), Column("split", "split", align="<"),
    Column("measured s", "measured", ".3f"), Column("model s", "model", ".3f"),
    Column("error %", "error", "+.1f"), Column("memory error %", "merror", "+.1f"),
    Column("measured from", "how", align="<"),
)


def misfit_lines(verdicts: Sequence[tuple[str, int, int]], *, listed: bool = True) -> list[str]:
    """The memory model's verdicts on runs that ran: ``verdicts`` holds ``(run id, the model's
    peak bytes per GPU, the GPU's memory bytes)`` of each; one line with how many it calls
    misfits (each is the model's error) and, with ``listed``, one line per misfit."""
    misfit = [(rid, model, gpu) for rid, model, gpu in verdicts if model > gpu]
    lines = [f"memory verdict: every run here ran; the model calls {len(misfit)} of "
             f"{len(verdicts)} misfits (its peak per GPU above the GPU's memory: each one is "
             "the model's error)"]
    if listed:
        lines += [f"  called a misfit: {rid}: {size_in(model, 'GiB')} on a "
                  f"{size_in(gpu, 'GiB')} GPU" for rid, model, gpu in misfit]
    return lines


def _summary_row(j: PlanJudgement, label: str, split: str | None,
                 source: str | None) -> dict[str, Any]:
    s, m = j.step_summary(split, source), j.memory_summary(split, source)
    return {"source": label, "split": split or "", "n": s.n, "median": s.median, "p90": s.p90,
            "mn": m.n, "mmedian": m.median if m.n else None}


def report_lines(j: PlanJudgement, *, runs: bool = False) -> list[str]:
    """The report: per source, per split with the targets, the ranking checks, and every run
    with ``runs``."""
    split_of = {r.inputs.run.source: r.split for r in j.runs}
    rows = [_summary_row(j, src, split_of[src], src) for src in j.sources]
    speeds = ", ".join(f"{k} {v:g}x" for k, v in j.rate.kernel_speed.items()) or "none"
    lines = [f"# the compute rate: {j.rate.source}; attention kernels over FlashAttention-2, "
             f"measured: {speeds}",
             format_table(rows, SUMMARY_COLUMNS), ""]
    for split in ("calibration", "held_out"):
        s, m = j.step_summary(split), j.memory_summary(split)
        meets = "meets" if s.meets(*STEP_TARGET) else "misses"
        lines.append(f"{split}: step time |error| median {s.median:.1f}%, p90 {s.p90:.1f}% over "
                     f"{s.n} runs ({meets} the target {STEP_TARGET[0]:g}% / "
                     f"{STEP_TARGET[1]:g}%); memory median {m.median:.1f}% over {m.n} runs "
                     f"(target {MEMORY_TARGET_MEDIAN:g}%)")
    ok = sum(c.ok for c in j.rankings)
    big = [c for c in j.rankings if len(c.runs) > 3]
    lines.append(f"ranking: the published fastest layout is among the model's three fastest in "
                 f"{ok} of {len(j.rankings)} groups of layouts a source compared ("
                 f"{sum(c.ok for c in big)} of the {len(big)} groups of more than three, where "
                 "the check can fail); the model's fastest is the published fastest in "
                 f"{sum(c.model_order[0] == c.published_best for c in j.rankings)}")
    for c in j.rankings:
        if not c.ok:
            lines.append(f"  missed: {c.published_best} (model's order: "
                         f"{', '.join(c.model_order[:4])}, ...)")
    lines += misfit_lines([(r.inputs.run.id, r.model_total_bytes, r.gpu_memory_bytes)
                           for r in j.runs], listed=runs)
    if runs:
        lines += ["", format_table([{
            "id": r.inputs.run.id, "split": r.split, "measured": r.measured_step_s,
            "model": r.model_step_s, "error": r.step_error_pct, "merror": r.memory_error_pct,
            "how": r.step_from} for r in j.runs], RUN_COLUMNS)]
    return lines


def judgement_json(j: PlanJudgement) -> dict[str, Any]:
    """The judgement as JSON: the rate, every run's errors, the summaries and rankings."""
    def summary(s: Any) -> dict[str, Any]:
        return {"n": s.n, "median_pct": s.median, "p90_pct": s.p90}

    return {
        "rate": {"efficiency": j.rate.efficiency, "width_scale": j.rate.width_scale,
                 "attention": j.rate.attention, "source": j.rate.source},
        "splits": {sp: {"step": summary(j.step_summary(sp)),
                        "memory": summary(j.memory_summary(sp))}
                   for sp in ("calibration", "held_out")},
        "runs": [{"id": r.inputs.run.id, "split": r.split, "measured_step_s": r.measured_step_s,
                  "model_step_s": r.model_step_s, "step_error_pct": r.step_error_pct,
                  "memory_error_pct": r.memory_error_pct, "measured_from": r.step_from,
                  "model_memory_total_bytes": r.model_total_bytes,
                  "gpu_memory_bytes": r.gpu_memory_bytes, "fits": r.fits,
                  "assumed": list(r.inputs.assumed)} for r in j.runs],
        "rankings": [{"source": c.source, "published_best": c.published_best,
                      "model_order": list(c.model_order), "ok": c.ok} for c in j.rankings],
    }


def _parser() -> options.Parser:
    p = options.parser(PROG, __doc__)
    p.add_argument("--runs", action="store_true", help="also list every run")
    p.add_argument("--refit", action="store_true",
                   help="fit the compute rate on the calibration split and judge with it")
    p.add_argument("--json", metavar="OUT", default=None, type=options.output_file,
                   help="also write the judgement as JSON to OUT")
    p.add_argument("--moe", action="store_true",
                   help="judge the expert dimension on the published mixture-of-experts runs")
    p.add_argument("--refit-gemm", action="store_true",
                   help="with --moe --refit: fit the grouped-GEMM efficiency too (shipped: "
                        "measured)")
    return p


MOE_COLUMNS = (
    Column("run", "id", align="<"), Column("split", "split", align="<"),
    Column("layout", "layout", align="<"), Column("GPU", "gpu", align="<"),
    Column("measured tok/s/GPU", "measured", ".0f"), Column("model tok/s/GPU", "model", ".0f"),
    Column("error %", "error", "+.1f"), Column("ep a2a s", "ep", ".2f"),
)


def moe_report_lines(j: Any) -> list[str]:
    """The MoE judgement: the constants, every run, and each split against the target."""
    from distlab.evidence.plan.judged_moe import MOE_STEP_TARGET

    lines = [f"# grouped-GEMM efficiency {j.rate.grouped_gemm:g}, all-to-all share of NVLink "
             f"{j.rate.a2a_link_share:g}; error % = (measured - model) / model of the step "
             "(tokens/s per GPU: the same |error|)",
             format_table([{
                 "id": r.inputs.run.id, "split": r.split, "layout": r.inputs.layout.label,
                 "gpu": r.inputs.hw.gpu.name, "measured": r.measured_tokens_per_s_per_gpu,
                 "model": r.step.tokens_per_s_per_gpu, "error": r.step_error_pct,
                 "ep": r.step.part_s("ep")} for r in j.runs], MOE_COLUMNS), ""]
    for split in ("calibration", "held_out"):
        s = j.summary(split)
        meets = "meets" if s.meets(*MOE_STEP_TARGET) else "misses"
        lines.append(f"{split}: tokens/s per GPU |error| median {s.median:.1f}%, p90 "
                     f"{s.p90:.1f}% over {s.n} runs ({meets} the target "
                     f"{MOE_STEP_TARGET[0]:g}% / {MOE_STEP_TARGET[1]:g}%)")
    for r in j.runs:
        if r.set_aside:
            lines.append(f"set aside, {r.inputs.run.id}: {r.set_aside}")
    lines += ["", *moe_misfit_lines(j)]
    lines += same_layout_lines()
    return lines


def moe_memory_verdicts(j: Any) -> list[tuple[str, int, int]]:
    """``(run id, the memory model's peak bytes per GPU, the GPU's memory bytes)`` of each
    published MoE run of the judgement ``j`` (:func:`~distlab.plan.memory.memory_per_gpu` with
    the runs' Megatron-Core settings, :data:`~distlab.evidence.plan.published_moe.
    MEMORY_OPTIONS`)."""
    from distlab.evidence.plan.published_moe import MEMORY_OPTIONS
    from distlab.plan.memory import memory_per_gpu

    return [(r.inputs.run.id,
             memory_per_gpu(r.inputs.model, r.inputs.layout, r.inputs.hw,
                            **MEMORY_OPTIONS).total,
             r.inputs.hw.gpu.memory_bytes) for r in j.runs]


def moe_misfit_lines(j: Any) -> list[str]:
    """:func:`misfit_lines` of the published MoE runs, every misfit listed."""
    return misfit_lines(moe_memory_verdicts(j))


def same_layout_lines() -> list[str]:
    """One line per layout two sources published: their tokens/s per GPU (``*``: a token-drop
    run, the others dropless) and the least ``|error|`` one prediction can have on the worst of
    them."""
    from distlab.evidence.plan.published_moe import same_layouts

    groups = same_layouts()
    if not groups:
        return []
    lines = ["", "# one layout, more than one source: no single prediction is nearer than the "
                 "floor to all of them; * token drop"]
    for g in groups:
        runs = ", ".join(f"{r.id} {r.measured.get('tokens_per_s_per_gpu', '?')}"
                         f"{'*' if r.routing == 'tokendrop' else ''}" for r in g.runs)
        lines.append(f"floor {g.floor_pct:4.1f}%: {runs}")
    return lines


def moe_judgement_json(j: Any) -> dict[str, Any]:
    """The MoE judgement as JSON."""
    from distlab.evidence.plan.published_moe import same_layouts

    memory = {rid: (model, gpu) for rid, model, gpu in moe_memory_verdicts(j)}
    return {"grouped_gemm": j.rate.grouped_gemm, "a2a_link_share": j.rate.a2a_link_share,
            "splits": {sp: {"n": j.summary(sp).n, "median_pct": j.summary(sp).median,
                            "p90_pct": j.summary(sp).p90} for sp in ("calibration", "held_out")},
            "runs": [{"id": r.inputs.run.id, "split": r.split, "layout": r.inputs.layout.label,
                      "routing": r.inputs.run.routing,
                      "measured_step_s": r.measured_step_s, "model_step_s": r.model_step_s,
                      "step_error_pct": r.step_error_pct, "set_aside": r.set_aside,
                      "model_memory_total_bytes": memory[r.inputs.run.id][0],
                      "gpu_memory_bytes": memory[r.inputs.run.id][1],
                      "fits": memory[r.inputs.run.id][0] <= memory[r.inputs.run.id][1]}
                     for r in j.runs],
            "same_layout_floors_pct": {",".join(r.id for r in g.runs): g.floor_pct
                                       for g in same_layouts()}}


def _moe_command(args: Any) -> int:
    from distlab.evidence.plan.judged_moe import fit_moe_rate, judge_moe

    rate = fit_moe_rate(grouped_gemm=args.refit_gemm) if args.refit or args.refit_gemm \
        else None
    if rate is not None:
        print(f"# refit on the calibration split: grouped-GEMM efficiency {rate.grouped_gemm:g}, "
              f"all-to-all share of NVLink {rate.a2a_link_share:g}")
    j = judge_moe(rate)
    print("\n".join(moe_report_lines(j)))
    if args.json is not None:
        write_json(args.json, moe_judgement_json(j))
    return 0


def _plan_command(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.moe:
        return _moe_command(args)
    rate = None
    if args.refit:
        from distlab.evidence.plan.fit_rate import fit_rate
        from distlab.evidence.plan.published import load_published
        from distlab.evidence.plan.runs import run_inputs

        published = load_published()
        rate = fit_rate([run_inputs(r) for r in published.runs(split="calibration")],
                        source="refit on the calibration split by python -m distlab.judge "
                               "plan --refit")
        print(f"# refit: efficiency {rate.efficiency}, width scale {rate.width_scale:g}, "
              f"attention {rate.attention:g}")
    j = judge_published(rate=rate)
    print("\n".join(report_lines(j, runs=args.runs)))
    if args.json is not None:
        write_json(args.json, judgement_json(j))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0, 2 with one error line, or 130 on Ctrl-C."""
    return run_main(PROG, _plan_command, argv, on_interrupt="nothing written")


if __name__ == "__main__":
    sys.exit(main())
