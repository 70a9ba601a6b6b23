"""A judged run as text (what ``python -m distlab.health`` prints) and as JSON."""

from __future__ import annotations

import textwrap
from typing import Any

from distlab.health.verdict import RunVerdict
from distlab.report.table import Column, format_table
from distlab.vocabulary import size_label

__all__ = ["COLUMNS", "run_json", "run_lines"]

COLUMNS = (
    Column("size", "size", width=8), Column("measured us", "measured_us", ".1f"),
    Column("expected us", "expected_us", ".1f"),
    Column("healthy us", "healthy", width=17), Column("share", "share", ".2f"),
    Column("verdict", "verdict", align="<", width=7), Column("NCCL runs", "runs", align="<"))
"""Per size: measured and expected time, the band's times (fastest-slowest a healthy run
takes), measured bandwidth over the model's (``share``), the verdict and what NCCL runs."""


def _band(lo: float, hi: float) -> str:
    return f"{lo:.1f}-{hi:.1f}" if hi < 1e4 else f"{lo:.0f}-{hi:.0f}"


WIDTH = 100
"""The report's lines wrap at this many characters (the table is narrower)."""


def _wrapped(lines: list[str]) -> list[str]:
    """Each line wrapped at :data:`WIDTH`, continuations indented under it."""
    out = []
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip(" #")) + 2)
        first = line[:len(line) - len(line.lstrip(" #"))]
        cont = ("# " if first.startswith("#") else "") + indent
        out += textwrap.wrap(line, WIDTH, subsequent_indent=cont, break_on_hyphens=False) or [""]
    return out


def run_lines(v: RunVerdict) -> list[str]:
    """The report of one run, lines of at most :data:`WIDTH` characters: a header, what was
    read and assumed, the table, the verdict and each cause with its evidence and rerun."""
    head, table, tail = _parts(v)
    return _wrapped(head) + table + _wrapped(tail)


def _parts(v: RunVerdict) -> tuple[list[str], list[str], list[str]]:
    s = v.setup
    where = f"{s.nodes} nodes x {s.gpus_per_node}" if s.nodes > 1 else "one node"
    out = [f"# {v.run.source}: {v.run.collective} on {s.world_size} GPUs ({where}, "
           f"{s.box.name}), {v.column}",
           f"# {s.line()}"]
    if s.unpriced:
        out.append(f"# not priced: {', '.join(s.unpriced)} (the model's paths are NVLink/PCIe "
                   "peer-to-peer and GPUDirect RDMA)")
    if v.not_priced:
        return out, [], [f"verdict: not priced: {v.not_priced}"]
    rows = [{"size": size_label(r.nbytes), "measured_us": r.measured_us,
             "expected_us": r.expected_us, "healthy": _band(r.expected_high_us, r.expected_low_us),
             "share": r.share, "verdict": r.verdict, "runs": f"{r.algorithm}/{r.protocol}"}
            for r in v.rows]
    head, table, out = out, format_table(rows, COLUMNS).splitlines(), []
    low = [r for r in v.rows if r.verdict == "low"]
    high = [r for r in v.rows if r.verdict == "high"]
    scope = "on one 8-GPU node" if s.scope == "node" else "across nodes or NVLink domains"
    said = (f"{len(low)} of {len(v.rows)} sizes slower than healthy" if low else
            f"{len(high)} of {len(v.rows)} sizes faster than the model expects" if high else
            "every size inside its healthy band")
    out.append(f"verdict: {v.verdict}: {said} (healthy: the model's error on published tables "
               f"it was not fitted on, 95% of them, {scope}, per size class)")
    if s.stand_in and v.verdict != "ok":
        out.append(f"  priced through a stand-in box ({s.box.key} for {s.stand_in}): the "
                   "verdict is only as right as the stand-in")
    for k, c in enumerate(v.causes, 1):
        out += [f"cause {k}: {c.name}", f"  evidence: {c.evidence}", f"  rerun: {c.rerun}"]
        if c.rerun_expected:
            out.append("  a healthy rerun takes: " + ", ".join(
                f"{size_label(n)} {us:.0f} us" for n, us in c.rerun_expected))
    return head, table, out


def run_json(v: RunVerdict) -> dict[str, Any]:
    """The same as a JSON-ready dict (times in microseconds, errors in percent)."""
    s = v.setup
    return {
        "source": v.run.source, "collective": v.run.collective, "column": v.column,
        "box": s.box.key, "world_size": s.world_size, "nodes": s.nodes,
        "network": None if s.network is None else s.network.name, "harness": s.harness,
        "nccl_version": s.release.asked, "priced_as": s.release.priced_as,
        "read": list(s.read), "assumed": list(s.assumed), "not_priced_env": list(s.unpriced),
        "verdict": v.verdict, "not_priced": v.not_priced or None,
        "rows": [{"nbytes": r.nbytes, "measured_us": r.measured_us,
                  "expected_us": r.expected_us, "error_pct": r.error_pct,
                  "band_pct": [r.band.low_pct, r.band.high_pct], "verdict": r.verdict,
                  "algorithm": r.algorithm, "protocol": r.protocol} for r in v.rows],
        "causes": [{"name": c.name, "evidence": c.evidence, "rerun": c.rerun,
                    "rerun_expected_us": [[n, us] for n, us in c.rerun_expected]}
                   for c in v.causes],
    }
