"""The planner judged on measured GPU runs: each run of a verify grid (``python -m
distlab.plan.verify.grid``, committed under ``results/gpu-*-fit``) priced as it ran, its step
time, peak allocated and peak reserved bytes set beside the measurement, and whether the
planner's verdict agreed with the run (fits where it ran; does not fit where it ran out of
memory).

What was calibrated on which rows: the constants measured from a grid
(:data:`~distlab.plan.calibration.ATTENTION_BACKWARD`,
:data:`~distlab.plan.calibration.OPTIMIZER_BANDWIDTH`, :data:`~distlab.plan.memory.DEVICE_BYTES`)
come from its Llama 3.2 1B rows (:data:`CALIBRATION_MODELS`): those rows are the calibration
split, every other model's rows are held out. The compute rate is the planner's, fitted on
published runs, never on a grid. Errors are :func:`~distlab.vocabulary.error_pct`: positive,
the run took more than the model said.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from distlab.plan.kernels import gpu_kind_for_device
from distlab.plan.layout import Hardware, gpu_kind
from distlab.plan.memory import DEVICE_BYTES
from distlab.plan.planner import LayoutPrice, price
from distlab.plan.verify.cases import parse_case
from distlab.report.jsonfile import read_json
from distlab.transformer import model_spec
from distlab.vocabulary import ErrorSummary, error_pct, size_in

__all__ = ["CALIBRATION_MODELS", "STEP_TARGET", "MEMORY_TARGET", "GridRun", "SplitCounts",
           "counts", "judge_grid", "load_grid", "summaries"]

CALIBRATION_MODELS = ("llama3.2-1b",)
"""The models whose rows the grid's measured constants come from (the calibration split)."""

STEP_TARGET = 5.0
"""Step time: median ``|error%|`` aimed for on held-out rows."""
MEMORY_TARGET = 5.0
"""Peak reserved bytes: median ``|error%|`` aimed for on held-out rows."""


@dataclass(frozen=True)
class GridRun:
    """One run of a grid, priced.

    Attributes:
        case: the grid's name of the run.
        split: ``"calibration"`` or ``"held_out"``.
        expandable: the run's allocator used expandable segments.
        capped: the run's allocator was capped (``--allocator-limit-gib``): a smaller GPU's
            memory, for the verdict; its step and reserved bytes are not judged.
        price: the planner's price of the run (its layout on one GPU of the run's kind).
        step_s: the measured step (the fastest timed step), or ``None`` where it did not run.
        allocated, reserved: the measured peaks, bytes (``None`` where it did not run).
        oom: the out-of-memory details, where it ran out of memory.
    """

    case: str
    split: str
    expandable: bool
    capped: bool
    price: LayoutPrice
    step_s: float | None
    allocated: int | None
    reserved: int | None
    oom: dict[str, Any] | None

    @property
    def step_error_pct(self) -> float | None:
        """The measured step against the model's (not judged on a capped run)."""
        if self.step_s is None or self.capped:
            return None
        return error_pct(self.step_s, self.price.step.step_s)

    @property
    def allocated_error_pct(self) -> float | None:
        """The measured peak allocated bytes against the model's."""
        return (None if self.allocated is None
                else error_pct(self.allocated, self.price.memory.allocated))

    @property
    def reserved_error_pct(self) -> float | None:
        """The measured peak reserved bytes against the model's (on a capped run, the
        model's reserve on a GPU of that memory)."""
        return (None if self.reserved is None
                else error_pct(self.reserved, self.price.memory.reserved))

    @property
    def verdict_ok(self) -> bool:
        """The planner's verdict agrees with the run: it fits and the run ran, or it does not
        and the run ran out of memory. A verdict of "does not fit" where the run ran is
        wrong the safe way; "fits" where it ran out of memory is the error that costs."""
        return self.price.fits == (self.oom is None)


def load_grid(paths: Iterable[Path | str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(provenance, row)`` of every row of every grid file (a ``grid*.json`` or a folder of
    them)."""
    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(p.glob("grid*.json")) if p.is_dir() else [p]
    if not files:
        raise ValueError("no grid file found (grid*.json from python -m distlab.plan.verify.grid)")
    out = []
    for f in files:
        try:
            doc = read_json(f)
        except ValueError as exc:   # not JSON, or another schema
            raise ValueError(f"{f}: not a verify grid ({exc})") from None
        if not isinstance(doc, dict) or "rows" not in doc:
            raise ValueError(f"{f}: not a verify grid (no 'rows')")
        out += [(doc.get("provenance", {}), row) for row in doc["rows"]]
    return out


def judge_grid(paths: Iterable[Path | str]) -> list[GridRun]:
    """Every run of the grid files priced (the module docstring); rows that failed for
    another reason than memory are left out."""
    out = []
    for prov, row in load_grid(paths):
        if row.get("error"):
            continue
        case = parse_case(row["case"])
        kind = gpu_kind_for_device(str(prov.get("gpu", ""))) or gpu_kind("h100")
        limit = prov.get("allocator_limit_bytes")
        if limit is not None:
            # the allocator was capped: the GPU, as far as the step could tell, had that much
            # memory and what the process holds outside the allocator
            kind = replace(kind, name=f"{kind.name} capped at {size_in(limit, 'GiB', '.2f')}",
                           memory_bytes=int(limit) + DEVICE_BYTES)
        hw = Hardware(kind, 1)
        expandable = "expandable_segments:true" in str(prov.get("alloc_conf", "")).lower()
        spec = model_spec(case.model, seq_len=case.seq_len)
        if row.get("tied_embeddings") is False and spec.tied_embeddings:
            # the run's output layer had its own weight (see the grid's README)
            spec = replace(spec, tied_embeddings=False)
        p = price(spec, case.layout(), hw, optimizer=case.optimizer,
                  expandable_segments=expandable)
        m = row.get("measured")
        step = allocated = reserved = None
        if m:
            step = min(m["step_s"])
            allocated = max(v["allocated"] for v in m["peaks"].values())
            reserved = max(v["reserved"] or 0 for v in m["peaks"].values())
        split = "calibration" if case.model in CALIBRATION_MODELS else "held_out"
        out.append(GridRun(row["case"], split, expandable, limit is not None, p, step,
                           allocated, reserved, row.get("oom")))
    return out


@dataclass(frozen=True)
class SplitCounts:
    """The counts of one split's runs, each the one number for its quantity (the command's
    lines, the figure's legend and the notebook's text read them from here).

    Attributes:
        runs: every run of the split.
        ran: those that ran: their peak allocated and reserved bytes are measured (the ``n``
            of :func:`summaries`' ``allocated`` and ``reserved``).
        out_of_memory: those that ran out of memory (under a capped allocator), ``runs - ran``.
        timed: those whose step is judged, the ones that ran on an uncapped allocator (the
            ``n`` of :func:`summaries`' ``step``).
    """

    runs: int
    ran: int
    out_of_memory: int
    timed: int

    def line(self, split: str) -> str:
        """The counts in one line, e.g. ``held out: 41 runs, 39 ran, 31 timed`` (the others
        ran out of memory; of those that ran, the ones under a capped allocator are not
        timed)."""
        name = "held out" if split == "held_out" else split
        return f"{name}: {self.runs} runs, {self.ran} ran, {self.timed} timed"


def counts(runs: Sequence[GridRun], split: str) -> SplitCounts:
    """How many of ``split``'s runs there are, ran, ran out of memory and were timed."""
    rs = [r for r in runs if r.split == split]
    return SplitCounts(len(rs), sum(r.reserved is not None for r in rs),
                       sum(r.oom is not None for r in rs),
                       sum(r.step_error_pct is not None for r in rs))


def summaries(runs: Sequence[GridRun], split: str) -> dict[str, ErrorSummary]:
    """``|error%|`` of step, allocated and reserved over ``split``'s runs."""
    rs = [r for r in runs if r.split == split]
    return {"step": ErrorSummary.of((r.step_error_pct for r in rs), "step"),
            "allocated": ErrorSummary.of((r.allocated_error_pct for r in rs), "allocated"),
            "reserved": ErrorSummary.of((r.reserved_error_pct for r in rs), "reserved")}
