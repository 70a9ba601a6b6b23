"""Write a profile folder: ``<part>.json`` each, ``profile.json`` index, trace, ``summary.md``."""

from __future__ import annotations

import datetime
import socket
from pathlib import Path
from typing import Any

from distlab.profile.parts import PartResult
from distlab.profile.summary import summary_markdown
from distlab.report.jsonfile import read_json, write_json
from distlab.report.provenance import provenance
from distlab.timeline import Timeline
from distlab.trace import check_trace, write_chrome_trace

__all__ = ["default_out", "rewrite_summary", "write_part", "write_profile"]

INDEX = "profile.json"
TRACE = "trace.json"
SUMMARY = "summary.md"


def default_out(quick: bool, root: Path = Path("results/profiles")) -> Path:
    """``results/profiles/<host>-<YYYY-MM-DD>[-quick]`` (UTC date), relative to the cwd."""
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    return root / f"{socket.gethostname()}-{day}{'-quick' if quick else ''}"


def part_json(result: PartResult, prov: dict[str, Any]) -> dict[str, Any]:
    """The JSON document of one part (provenance first, then status and measurements)."""
    return {"provenance": prov, "part": result.name, "status": result.status,
            "reason": result.reason, "seconds": result.seconds, "skipped": result.skipped,
            **result.payload}


def write_part(out: Path, result: PartResult, prov: dict[str, Any]) -> Path:
    """Write ``out/<part>.json``; returns its path."""
    return write_json(out / f"{result.name}.json", part_json(result, prov))


def write_profile(out: Path, results: list[PartResult], requested: list[str],
                  timeline: Timeline, *, quick: bool, world_size: int,
                  stopped: str | None = None, rehearsal: str | None = None) -> dict[str, Any]:
    """Write every part, the trace (checked for overlapping slices), the summary and, last, the
    index (an older one is removed first): a folder whose writing was cut short holds no
    ``profile.json``, so no reader takes it for a profile.

    ``stopped`` (e.g. ``"interrupted by Ctrl-C"``) marks the profile incomplete; parts in
    ``requested`` with no result are listed as ``not run``. Returns the index.
    """
    prov = provenance(world_size=world_size, quick=quick)
    out.mkdir(parents=True, exist_ok=True)
    (out / INDEX).unlink(missing_ok=True)  # an older profile's index would vouch for new files
    docs = {}
    for r in results:
        write_part(out, r, prov)
        docs[r.name] = part_json(r, prov)
    done = {r.name: r for r in results}
    entries = {}
    for name in requested:
        r = done.get(name)
        entries[name] = ({"status": r.status, "reason": r.reason, "file": f"{name}.json",
                          "seconds": r.seconds} if r else
                         {"status": "not run", "reason": stopped or "not requested"})
    complete = stopped is None and all(r.status in ("ok", "skipped") for r in results) \
        and len(results) == len(requested)
    index = {"provenance": prov, "complete": complete, "stopped": stopped, "rehearsal": rehearsal,
             "parts": entries, "trace": TRACE, "summary": SUMMARY}
    write_chrome_trace(timeline, out / TRACE)
    check_trace(out / TRACE)
    (out / SUMMARY).write_text(summary_markdown(index, docs))
    write_json(out / INDEX, index)  # last: a folder with an index holds every file it names
    return index


def rewrite_summary(out: Path) -> Path:
    """Regenerate ``out/summary.md`` from the folder's JSON files (no measuring)."""

    index = read_json(out / INDEX)
    docs = {name: read_json(out / e["file"])
            for name, e in index["parts"].items() if e.get("file") and (out / e["file"]).is_file()}
    path = out / SUMMARY
    path.write_text(summary_markdown(index, docs))
    return path
