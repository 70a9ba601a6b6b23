"""Chrome Trace Event JSON for a :class:`~distlab.timeline.Timeline` (opens in ui.perfetto.dev).

Written as ``{"traceEvents": [...]}``: ``M`` events name processes and threads, ``X`` events are
the spans (``ts``/``dur`` in microseconds). How lanes map to pid/tid, and how overlapping spans of
one lane are spread over extra tids so that no two slices on a tid overlap, is described in
:mod:`distlab.timeline`. Reading accepts the object and bare-array forms.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from distlab._checks import check_instance, check_int, check_str
from distlab.timeline import Timeline, natural_key, split_lane

__all__ = ["check_distributed_info", "read_chrome_trace", "trace_events", "write_chrome_trace",
           "write_rank_traces"]


def trace_events(timeline: Timeline) -> list[dict[str, Any]]:
    """Trace Event dicts (``M`` names, then ``X`` slices); see the module docstring."""
    spans = timeline.spans
    procs = sorted({split_lane(s.lane)[0] for s in spans}, key=natural_key)
    pid_of = {p: i + 1 for i, p in enumerate(procs)}
    by_lane: dict[str, list[int]] = {}
    for i, s in enumerate(spans):
        by_lane.setdefault(s.lane, []).append(i)
    next_tid = {p: 1 for p in procs}
    events: list[dict[str, Any]] = []
    for p in procs:
        events.append({"ph": "M", "name": "process_name", "pid": pid_of[p], "tid": 0,
                       "args": {"name": p}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid_of[p], "tid": 0,
                       "args": {"sort_index": pid_of[p]}})
    slices: list[dict[str, Any]] = []
    for lane, idx in by_lane.items():
        proc, thread = split_lane(lane)
        pid = pid_of[proc]
        track_end: list[float] = []
        track_tid: list[int] = []
        for i in sorted(idx, key=lambda i: (spans[i].start_us, spans[i].end_us, i)):
            s = spans[i]
            k = next((k for k, end in enumerate(track_end) if end <= s.start_us), None)
            if k is None:
                k = len(track_end)
                track_end.append(s.end_us)
                tid = next_tid[proc]
                next_tid[proc] += 1
                track_tid.append(tid)
                tname = thread if k == 0 else f"{thread} [{k}]"
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                               "args": {"name": tname, "lane": lane}})
                events.append({"ph": "M", "name": "thread_sort_index", "pid": pid,
                               "tid": tid, "args": {"sort_index": tid}})
            track_end[k] = s.end_us
            slices.append({"ph": "X", "name": s.name, "cat": s.category, "pid": pid,
                           "tid": track_tid[k], "ts": s.start_us, "dur": s.duration_us,
                           "args": dict(s.args)})
    return events + slices


def check_distributed_info(info: Any) -> dict[str, Any]:
    """Validate a ``distributedInfo`` block as Kineto writes it (torch 2.13: ``backend``,
    ``rank``, ``world_size``, ``pg_count``, ``pg_config``); returns a plain copy.

    ``backend`` (str), ``rank`` (int in ``[0, world_size - 1]``) and ``world_size`` (int >= 1)
    are required; ``pg_count`` (int >= 1) defaults to 1; other keys are passed through.
    """
    check_instance("distributed_info", info, Mapping, "a mapping with backend, rank, world_size")
    missing = [k for k in ("backend", "rank", "world_size") if k not in info]
    if missing:
        raise ValueError(f"distributed_info lacks {', '.join(missing)}; it needs backend, rank "
                         f"and world_size, got keys {sorted(info)}")
    out = dict(info)
    out["backend"] = check_str("distributed_info['backend']", info["backend"], nonempty=True,
                               example="'gloo'")
    out["world_size"] = check_int("distributed_info['world_size']", info["world_size"], minimum=1)
    out["rank"] = check_int("distributed_info['rank']", info["rank"], minimum=0,
                            maximum=out["world_size"] - 1)
    out["pg_count"] = check_int("distributed_info['pg_count']", info.get("pg_count", 1),
                                minimum=1)
    return out


def write_chrome_trace(timeline: Timeline, path: str | os.PathLike[str], *,
                distributed_info: Mapping[str, Any] | None = None) -> Path:
    """Write Trace Event JSON (``{"traceEvents": [...]}``, microseconds); returns the path.

    ``distributed_info``, when given, is written as the top-level ``distributedInfo`` block that
    Kineto writes for one rank (see :func:`check_distributed_info`), so trace analysis tools
    that read per-rank Kineto files find the rank and world size.
    """
    payload: dict[str, Any] = {
        "traceEvents": trace_events(timeline), "displayTimeUnit": "ms",
        "otherData": {"producer": "distlab.timeline", "notes": list(timeline.notes)}}
    if distributed_info is not None:
        payload["distributedInfo"] = check_distributed_info(distributed_info)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(payload, default=str))
    return p


def write_rank_traces(timeline: Timeline, directory: str | os.PathLike[str], *, backend: str,
                      world_size: int | None = None) -> list[Path]:
    """One trace file per rank, ``rank{r}.json`` in ``directory``, each holding the spans of
    process ``"rank{r}"`` and its ``distributedInfo`` block (the per-rank layout torch.profiler
    writes). ``world_size`` defaults to the highest rank + 1. Spans of other processes are not
    written. Returns the paths in rank order."""
    backend = check_str("backend", backend, nonempty=True, example="'gloo'")
    ranks: dict[int, list[Any]] = {}
    for s in timeline.spans:
        proc = split_lane(s.lane)[0]
        if proc.startswith("rank") and proc[4:].isdigit():
            ranks.setdefault(int(proc[4:]), []).append(s)
    if not ranks:
        raise ValueError(f"timeline has no 'rank<r>/...' lanes; lanes are {timeline.lanes}")
    ws = max(ranks) + 1 if world_size is None else \
        check_int("world_size", world_size, minimum=max(ranks) + 1)
    out = []
    for r in sorted(ranks):
        info = {"backend": backend, "rank": r, "world_size": ws, "pg_count": 1}
        out.append(write_chrome_trace(Timeline(ranks[r], timeline.notes),
                               Path(directory) / f"rank{r}.json", distributed_info=info))
    return out


def read_chrome_trace(path: str | os.PathLike[str]) -> Timeline:
    """Load a Trace Event JSON file (object or bare-array form); ``X`` events become spans.

    Lanes come from the ``thread_name`` metadata (``args.lane`` when distlab wrote it, else
    ``"<process name>/<thread name>"``, falling back to pid/tid numbers).
    """
    data = json.loads(Path(path).read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError(f"{path}: traceEvents must be a list, got {type(events).__name__}")
    pnames: dict[Any, str] = {}
    tlanes: dict[tuple[Any, Any], str] = {}
    tnames: dict[tuple[Any, Any], str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            pnames[e["pid"]] = str(e["args"]["name"])
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            if "lane" in e.get("args", {}):
                tlanes[(e["pid"], e["tid"])] = str(e["args"]["lane"])
            tnames[(e["pid"], e["tid"])] = str(e["args"]["name"])
    tl = Timeline(notes=(data.get("otherData", {}).get("notes", [])
                    if isinstance(data, dict) else []))
    for e in events:
        if e.get("ph") != "X":
            continue
        key = (e.get("pid"), e.get("tid"))
        lane = tlanes.get(key) or (f"{pnames.get(key[0], f'pid{key[0]}')}/"
                                   f"{tnames.get(key, f'tid{key[1]}')}")
        tl.record(str(e.get("name", "")), str(e.get("cat", "")), lane, float(e["ts"]),
                  float(e.get("dur", 0.0)), e.get("args") or {})
    return tl
