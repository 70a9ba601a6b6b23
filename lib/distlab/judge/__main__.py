"""Judge the allreduce cost model on measured profiles and benchmark runs (offline).

    python -m distlab.judge refit results/profiles/*       # median / p90 |error%| per profile
    python -m distlab.judge refit results/profiles/h100-2026-11-23 \\
        --calibration-from results/profiles/vm-2026-11-23  # calibrated on one, measured on another
    python -m distlab.judge windows results/profiles/vm-quiet-80rounds-2026-11-23
    python -m distlab.judge travel results/profiles/vm-*   # every profile x every calibration
    python -m distlab.judge verdict results/profiles/h100-2026-11-23  # ok / low / high per row
    python -m distlab.judge summary results/allreduce_ws*_run*.json \\
        --out results/allreduce_summary.json
    python -m distlab.judge nccl --published               # NCCL's model on published tables
    python -m distlab.judge rccl --published               # RCCL's model on published tables
    python -m distlab.judge trace results/traces/gloo_ddp_3ranks  # your run's profiler traces
    python -m distlab.judge plan --runs                    # the planner on published runs
    python -m distlab.judge fit results/gpu-h200-2026-11-27-fit  # ... and on measured GPU runs

Nothing is measured and no process is started: profiles and runs are read, rows priced again.
NCCL's and RCCL's choice per size are the models' own commands: python -m distlab.nccl BOX,
python -m distlab.rccl (each also prints its judgement with --judge).
"""

from __future__ import annotations

import sys

from distlab.cli.dispatch import dispatch

COMMANDS = {"refit": "distlab.judge.refit_command", "windows": "distlab.judge.windows_command",
            "travel": "distlab.judge.travel_command", "summary": "distlab.judge.summary_command",
            "verdict": "distlab.judge.verdict_command", "nccl": "distlab.judge.nccl_command",
            "rccl": "distlab.judge.rccl_command", "trace": "distlab.judge.trace_command",
            "plan": "distlab.judge.plan_command", "fit": "distlab.judge.fit_command"}
ABOUT = {"refit": "every allreduce row of profiles priced again: |error%| against the target",
         "windows": "a long profile cut into windows of rounds: how many rounds a judgement "
                    "needs",
         "travel": "every profile priced with every profile's calibration of its world size",
         "summary": "medians over repeated `bench allreduce --json` runs",
         "verdict": "every profile row with an expectation: measured, expected, ok / low / high",
         "nccl": "--published: NCCL's measured-time model judged on every published table",
         "rccl": "--published: RCCL's execution model judged on every published table",
         "trace": "a run's torch.profiler traces of every rank: breakdown, overlap, idle causes, "
                  "stragglers, collective kernels beside the NCCL model",
         "plan": "the planner (python -m distlab.plan) on published training runs: step time, "
                 "memory and ranking, in and out of sample",
         "fit": "the planner on measured GPU runs (verify grids): step time, peak allocated "
                "and reserved memory, and whether its 'fits' held"}


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``argv[0]`` to its command (:func:`distlab.cli.dispatch.dispatch`)."""
    return dispatch("python -m distlab.judge", __doc__ or "", COMMANDS, ABOUT.__getitem__, argv)


if __name__ == "__main__":
    sys.exit(main())
