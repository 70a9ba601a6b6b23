"""What each measured row of a profile should have measured, and a verdict on it (pure).

A row gets a verdict only where distlab has an expectation for it that does not come from the row
itself:

- **link** (transfers part): pinned host-to-device and device-to-host peaks against the GPU's
  PCIe link as ``nvidia-smi`` reported it (:func:`distlab.links.link_from_pcie`: the per-direction
  line rate) times the fraction a copy engine reaches
  (:data:`distlab.collectives.model.presets.PCIE_ACHIEVED_FRACTION`, 0.87). The measured value is
  the row family's peak GB/s over its sizes. Pageable copies, disk reads and device-to-device
  copies have no expectation here (their bound is host or HBM memory, which distlab does not
  model from a spec), and get no verdict.
- **model** (collectives part): each row of at least 64 KiB (allreduce, and the all-gather ...
  broadcast sweeps) that stored a prediction when it was measured (``predicted_us``: distlab's
  calibrated cost model for distlab's algorithms, NCCL's own estimate for NCCL's builtin),
  compared as bus bandwidth, measured / expected =
  predicted time / measured time. gloo's builtin rows store no prediction and get no verdict, nor
  do rows with a wrong result.
- **model** (ddp part): each variant's steps per second against the step model's prediction
  stored with it (``predicted_step_s``; torch's DDP rows are priced as distlab's overlap).
- **link** (gpus part): each GPU's rate in the ``local`` host-to-all run (every GPU fed at once,
  host buffers on the GPU's own NUMA node), and one-way GPU-to-GPU copies over a PCIe path
  (``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``) with peer access on, at the largest size, against
  the GPU's PCIe link x the same fraction. Copies over NVLink (``NV#``) get no verdict: distlab
  holds no measured fraction of NVLink's peak that a copy engine reaches.

Rows a rehearsal made (``--rehearse``: host memory for GPUs, gloo for NCCL) go through the same
code and get the verdict ``rehearsal`` whatever their ratio: they are never judged as a machine's.

Thresholds (:data:`THRESHOLDS`), ratio = measured / expected:

- link: ``low`` below 0.8, ``high`` above 1.2. The fraction 0.87 is one measurement (an H100 on
  PCIe Gen5 x16), so a healthy link lands within about +-10% of it; below 0.8 is a link trained
  down, a GPU on the far NUMA node or a shared bus; above 1.2 the link read from ``nvidia-smi`` is
  not the one the copies crossed.
- model: ``low`` below 0.5, ``high`` above 2.0. The cost model's own median error on the
  committed profiles is measured by ``python -m distlab.judge refit`` (well under a factor of
  two), so only a factor of two says the machine and not the model is off.

Everything else is ``ok``, except where the measurement cannot tell: a collectives row whose
timed rounds' bootstrap interval (:func:`distlab.collectives.model.noise.row_noise`, the median's
90% interval) reaches back across the threshold it crossed is ``unsure``, not ``low`` or
``high`` (a ``--quick`` profile's 5 rounds rarely judge; 20 usually do). Reads part documents
(the JSON a profile folder holds); starts nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from distlab.collectives.model.noise import row_noise
from distlab.collectives.model.presets import PCIE_ACHIEVED_FRACTION
from distlab.links import link_from_pcie
from distlab.report.table import Column, format_table
from distlab.vocabulary import size_label

__all__ = ["LINK_PATHS", "MODEL_MIN_BYTES", "REHEARSAL", "THRESHOLDS", "UNSURE", "VERDICTS",
           "VERDICT_COLUMNS", "RowVerdict", "judge_ratio", "judge_interval", "low_lines",
           "ordered", "profile_verdicts", "thresholds_text", "verdict_table"]

# transfer row families (path/memory) bounded by the PCIe link, one direction each
LINK_PATHS = ("h2d/pinned", "d2h/pinned")
# collectives rows below this size are latency-bound, where no model here is meant to hold
MODEL_MIN_BYTES = 64 * 1024
# (low below, high above) per kind of expectation: see the module docstring for why
THRESHOLDS: dict[str, tuple[float, float]] = {"link": (0.8, 1.2), "model": (0.5, 2.0)}


@dataclass(frozen=True)
class RowVerdict:
    """One judged row: measured and expected in ``unit`` (GB/s), their ratio and the verdict
    (``ok``, ``low`` or ``high``), with ``basis`` saying where the expectation comes from."""

    part: str
    row: str
    measured: float
    expected: float
    unit: str
    ratio: float
    verdict: str
    basis: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge_ratio(ratio: float, kind: str) -> str:
    """``low``, ``high`` or ``ok`` for ``ratio`` (measured / expected) under ``kind``'s
    thresholds (:data:`THRESHOLDS`).

    Raises:
        ValueError: an unknown kind, or a ratio that is not a finite number >= 0.
    """
    if kind not in THRESHOLDS:
        raise ValueError(f"unknown expectation kind {kind!r}: must be one of {sorted(THRESHOLDS)}")
    if not (isinstance(ratio, (int, float)) and math.isfinite(ratio) and ratio >= 0):
        raise ValueError(f"ratio must be a finite number >= 0, got {ratio!r}")
    low, high = THRESHOLDS[kind]
    return "low" if ratio < low else "high" if ratio > high else "ok"


def thresholds_text() -> str:
    """The thresholds as one phrase: ``link 0.8-1.2x, model 0.5-2x``."""
    return ", ".join(f"{k} {lo:g}-{hi:g}x" for k, (lo, hi) in THRESHOLDS.items())


REHEARSAL = "rehearsal"
UNSURE = "unsure"
VERDICTS = ("low", "high", UNSURE, "ok", REHEARSAL)
"""Every verdict, in the order a listing shows them: what is off first."""


def judge_interval(ratio: float, low_ratio: float, high_ratio: float, kind: str) -> str:
    """The verdict of ``ratio`` whose measurement could plausibly give any ratio in
    ``[low_ratio, high_ratio]``: ``low`` / ``high`` only when the whole interval lies beyond the
    threshold ``ratio`` crossed, else :data:`UNSURE`; ``ok`` as :func:`judge_ratio` says."""
    verdict = judge_ratio(ratio, kind)
    if verdict == "ok":
        return verdict
    lo, hi = THRESHOLDS[kind]
    sure = high_ratio < lo if verdict == "low" else low_ratio > hi
    return verdict if sure else UNSURE


def _verdict(part: str, row: str, measured: float, expected: float, kind: str,
             basis: str, rehearsal: bool = False) -> RowVerdict:
    ratio = measured / expected
    verdict = REHEARSAL if rehearsal else judge_ratio(ratio, kind)
    return RowVerdict(part, row, measured, expected, "GB/s", ratio, verdict, basis)


def _link_expectation(links: Sequence[Mapping[str, Any]], gpu: int) -> tuple[float, str] | None:
    """(expected GB/s, basis) for GPU ``gpu``'s PCIe link, or None where none is reported."""
    link = next((ln for ln in links if ln.get("gpu") == gpu), None) or \
        (links[0] if len(links) == 1 else None)
    if not link or not link.get("gen") or not link.get("width"):
        return None
    spec = link_from_pcie(int(link["gen"]), int(link["width"]))
    return (spec.gbps * PCIE_ACHIEVED_FRACTION,
            f"{spec.name} {spec.gbps:.1f} GB/s x {PCIE_ACHIEVED_FRACTION:g} achieved "
            "(distlab.links, presets.PCIE_ACHIEVED_FRACTION)")


PCIE_TOPO_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")


def _gpus_verdicts(doc: Mapping[str, Any]) -> list[RowVerdict]:
    out = []
    links = doc.get("pcie_links") or []
    for r in doc.get("host_to_all", []):
        if r.get("run") != "local" or r.get("gpu") == "all" or r.get("wrong"):
            continue
        exp = _link_expectation(links, int(r["gpu"]))
        if exp:
            out.append(_verdict("gpus", f"host-to-all local {r['direction']} cuda:{r['gpu']}",
                                float(r["gbps"]), exp[0], "link", exp[1],
                                bool(r.get("rehearsal"))))
    peer = [r for r in doc.get("peer", []) if r.get("direction") == "one-way"]
    top = max((int(r["nbytes"]) for r in peer), default=0)
    for r in peer:
        if (int(r["nbytes"]) != top or r.get("wrong") or r.get("path") not in PCIE_TOPO_PATHS
                or not str(r.get("route", "")).startswith("peer")):
            continue
        exp = _link_expectation(links, int(r["src"]))
        if exp:
            out.append(_verdict("gpus", f"peer cuda:{r['src']}->cuda:{r['dst']} {r['path']}",
                                float(r["gbps"]), exp[0], "link", exp[1],
                                bool(r.get("rehearsal"))))
    return out


def _transfer_verdicts(doc: Mapping[str, Any]) -> list[RowVerdict]:
    out = []
    for dev in doc.get("devices", []):
        link = dev.get("pcie_link") or {}
        if not link.get("gen") or not link.get("width"):
            continue  # no GPU link reported (CPU-only profile, or nvidia-smi absent)
        spec = link_from_pcie(int(link["gen"]), int(link["width"]))
        expected = spec.gbps * PCIE_ACHIEVED_FRACTION
        basis = (f"{spec.name} {spec.gbps:.1f} GB/s x {PCIE_ACHIEVED_FRACTION:g} achieved "
                 "(distlab.links, presets.PCIE_ACHIEVED_FRACTION)")
        for family in LINK_PATHS:
            rates = [float(r["gbps"]) for r in dev.get("rows", [])
                     if f"{r.get('path')}/{r.get('memory')}" == family
                     and r.get("skipped") is None and r.get("gbps")]
            if rates:
                out.append(_verdict("transfers", f"cuda:{dev.get('device', '?')} {family} peak",
                                    max(rates), expected, "link", basis))
    return out


def _collective_verdicts(doc: Mapping[str, Any]) -> list[RowVerdict]:
    out = []
    runs = [(run, "") for run in doc.get("runs", [])]
    runs += [(run, f"{run.get('op', '?')} ") for run in doc.get("collective_runs", [])]
    for run, op in runs:
        ws = int(run.get("world_size", 0))
        backend = run.get("backend", "?")
        rehearsal = bool(run.get("rehearsal"))
        ran_on = run["rehearsal"]["ran_on"].split()[0] if rehearsal else backend
        for r in run.get("rows", []):
            predicted, measured = r.get("predicted_us"), r.get("time_us")
            if (predicted is None or not measured or not predicted or not r.get("busbw_gbps")
                    or int(r["nbytes"]) < MODEL_MIN_BYTES or r.get("wrong")):
                continue
            busbw = float(r["busbw_gbps"])
            expected = busbw * float(measured) / float(predicted)
            basis = (f"distlab's cost model calibrated in this {ran_on} run"
                     if r["algorithm"] != "builtin" else "NCCL's own tuning estimate"
                     if ran_on == "nccl" else
                     f"distlab's price of {ran_on}'s own call, calibrated in this run")
            size = size_label(int(r["nbytes"]), "compact")
            name = f"{backend} ws{ws} {op}{r['algorithm']} {size} busbw"
            verdict = _verdict("collectives", name, busbw, expected, "model", basis, rehearsal)
            out.append(_within_noise(verdict, r))
    return out


def _within_noise(verdict: RowVerdict, row: Mapping[str, Any]) -> RowVerdict:
    """``verdict`` made :data:`UNSURE` where the row's rounds cannot tell it (see the module
    docstring); rows without rounds keep their verdict."""
    if verdict.verdict not in ("low", "high"):
        return verdict
    noise = row_noise(row, "median")
    if noise is None or noise.value_s <= 0:
        return verdict
    # busbw is bytes over time: the slow end of the time interval is the low end of the ratio
    low = verdict.ratio * noise.value_s / noise.high_s
    high = verdict.ratio * noise.value_s / noise.low_s if noise.low_s > 0 else math.inf
    judged = judge_interval(verdict.ratio, low, high, "model")
    if judged == verdict.verdict:
        return verdict
    return replace(verdict, verdict=judged,
                   basis=f"{verdict.basis}; its rounds put the ratio anywhere in "
                         f"{low:.2f}-{high:.2f}x")


def _ddp_verdicts(doc: Mapping[str, Any]) -> list[RowVerdict]:
    out = []
    for r in doc.get("rows", []):
        step, predicted = r.get("step_s"), r.get("predicted_step_s")
        if not step or not predicted or r.get("wrong"):
            continue
        cap = "" if r.get("bucket_cap_mb") is None else f" cap {r['bucket_cap_mb']:g} MB"
        measured, expected = 1.0 / float(step), 1.0 / float(predicted)
        out.append(RowVerdict("ddp", f"{r.get('variant', '?')}{cap} step rate", measured,
                              expected, "steps/s", measured / expected,
                              REHEARSAL if doc.get("rehearsal") else
                              judge_ratio(measured / expected, "model"),
                              "distlab's step model (backward, buckets, calibrated allreduce)"))
    return out


_PARTS = {"transfers": _transfer_verdicts, "gpus": _gpus_verdicts,
          "collectives": _collective_verdicts, "ddp": _ddp_verdicts}


def profile_verdicts(parts: Mapping[str, Mapping[str, Any]]) -> list[RowVerdict]:
    """Every row of the parts (name -> part JSON document, as a profile folder stores them) that
    has an expectation, judged; parts that did not run ok contribute nothing."""
    out: list[RowVerdict] = []
    for name, judge in _PARTS.items():
        doc = parts.get(name)
        if doc is not None and doc.get("status") == "ok":
            out += judge(doc)
    return out


VERDICT_COLUMNS = (Column("part", "part"), Column("row", "row"),
                   Column("measured", "measured", ".2f"), Column("expected", "expected", ".2f"),
                   Column("unit", "unit"), Column("ratio", "ratio", ".2f"),
                   Column("verdict", "verdict"))


def ordered(verdicts: Sequence[RowVerdict]) -> list[RowVerdict]:
    """``verdicts`` in :data:`VERDICTS` order (low rows first), each group in its parts' order."""
    rank = {v: i for i, v in enumerate(VERDICTS)}
    return sorted(verdicts, key=lambda v: rank.get(v.verdict, len(rank)))


def verdict_table(verdicts: Sequence[RowVerdict]) -> str:
    """One line per row, low rows first (:func:`ordered`): ``part  row  measured  expected  unit
    ratio  verdict``."""
    return format_table([v.as_dict() for v in ordered(verdicts)], VERDICT_COLUMNS)


def low_lines(verdicts: Sequence[RowVerdict], max_low: int = 8) -> list[str]:
    """Markdown bullets that lead a summary: a count line, then the first ``max_low`` ``low``
    rows (link rows first, in the order the parts list them) and how many more there are."""
    if not verdicts:
        return ["- no row of this profile has an expectation (no GPU link, no stored prediction)"]
    rehearsed = sum(v.verdict == REHEARSAL for v in verdicts)
    judged = [v for v in verdicts if v.verdict != REHEARSAL]
    low = sorted((v for v in judged if v.verdict == "low"),
                 key=lambda v: v.part not in ("transfers", "gpus"))
    high = sum(v.verdict == "high" for v in judged)
    unsure = sum(v.verdict == UNSURE for v in judged)
    head = (f"- {len(low)} low, {high} high, {unsure} unsure, "
            f"{len(judged) - len(low) - high - unsure} ok of "
            f"{len(judged)} rows with an expectation (ok within {thresholds_text()} of expected; "
            "unsure: the row's rounds reach back inside; "
            "`python -m distlab.judge verdict DIR` lists them)")
    rehearsal = [f"- {rehearsed} rows are a rehearsal's (host memory for GPUs, gloo for NCCL): "
                 "priced, never judged"] if rehearsed else []
    lines = [f"- LOW {v.part} {v.row}: {v.measured:.2f} {v.unit}, expected "
             f"{v.expected:.2f} ({v.ratio:.2f}x; {v.basis})" for v in low[:max_low]]
    if len(low) > max_low:
        lines.append(f"- ... and {len(low) - max_low} more low rows")
    return [head] + rehearsal + lines
