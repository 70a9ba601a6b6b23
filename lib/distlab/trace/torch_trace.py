"""Read a user's torch.profiler (Kineto) traces, one per rank, into columns (NumPy arrays).

    from distlab.trace.torch_trace import read_run
    run = read_run("traces/")            # a folder of rank*.pt.trace.json.gz, or files
    rt = run.ranks[0]                    # a RankTrace: rt.ts, rt.dur, rt.name (codes) ...

A Kineto trace is ``{"traceEvents": [...], "distributedInfo": {...}, "deviceProperties": [...],
"baseTimeNanoseconds": ...}``; ``tensorboard_trace_handler`` gzips it. Each event is parsed on its
own (``json``'s C scanner, one event at a time) and its fields go straight into per-field lists that
become arrays: no list of event dicts is ever held, so memory is the file's text plus a few
numbers per event. Event ``args`` are kept only where the analysis reads them (collectives: events
whose args name a ``Collective name``/``Process Group Name``, or ``Input Dims`` of a ``c10d::``
op), in :attr:`RankTrace.args`, keyed by event index.

Facts read from the file: rank, world size, backend and process groups from ``distributedInfo``
(``rank`` falls back to the file name ``rank<N>``), the GPU from ``deviceProperties[0].name``
(``None`` on a CPU-only trace), the NCCL release from ``distributedInfo.nccl_version``.

Time: ``ts``/``dur`` are microseconds as Kineto writes them (integers in older traces, fractions
of a microsecond in nanosecond-resolution ones); ``baseTimeNanoseconds`` (absent before torch
2.1) is kept but never needed: every analysis uses ``ts`` differences within one run, and ranks
of one host share the clock. Ranks of two different runs are refused (different ``trace_id`` /
``world_size`` / duplicate ranks); see :func:`read_run`.
"""

from __future__ import annotations

import gzip
import json
import json.scanner
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["RankTrace", "Run", "TraceReadError", "read_rank", "read_run", "trace_files"]

_WS_COMMA = re.compile(r"[\s,]*")
_WS = re.compile(r"\s*")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_KEEP_ARGS = ("Collective name", "Process Group Name")
_CHUNK = 1 << 16  # events per block of columns while reading


class TraceReadError(ValueError):
    """A file or folder that is not a readable torch.profiler trace (one line says why)."""


@dataclass
class RankTrace:
    """One rank's events as columns, in file order (index ``i`` is the ``i``-th event).

    Columns (length = events): ``name``/``cat`` codes into :attr:`names`/:attr:`cats` (``cat``
    -1 when absent), ``ph`` (the phase's first character as a byte), ``pid``/``tid`` (-1 when not
    an integer, e.g. Kineto's ``"Spans"``), ``ts``/``dur`` microseconds (NaN when absent),
    ``stream``/``correlation``/``ext_id`` from args (-1 when absent).
    """

    path: str
    rank: int
    world_size: int | None
    backend: str | None
    gpu: str | None
    nccl_version: str | None
    trace_id: str | None
    base_time_ns: int | None
    process_groups: list[dict[str, Any]]
    names: list[str]
    cats: list[str]
    name: np.ndarray
    cat: np.ndarray
    ph: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    stream: np.ndarray
    correlation: np.ndarray
    ext_id: np.ndarray
    args: dict[int, dict[str, Any]] = field(default_factory=dict)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ts)

    def code(self, name: str) -> int:
        """The name code of ``name`` (-1 when no event has it)."""
        try:
            return self.names.index(name)
        except ValueError:
            return -1

    def cat_code(self, cat: str) -> int:
        try:
            return self.cats.index(cat)
        except ValueError:
            return -1

    def names_matching(self, pattern: str | re.Pattern[str]) -> np.ndarray:
        """Boolean per name code: does the name match ``pattern`` (``re.match``)."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        return np.array([rx.match(n) is not None for n in self.names], dtype=bool)

    def mask_names(self, pattern: str | re.Pattern[str]) -> np.ndarray:
        """Boolean per event: does its name match ``pattern`` (``re.match``)."""
        return self.names_matching(pattern)[self.name] if len(self.names) else \
            np.zeros(len(self), dtype=bool)

    @property
    def has_gpu_events(self) -> bool:
        return bool(np.any((self.stream >= 0) & ~np.isnan(self.dur)))


@dataclass
class Run:
    """Every rank's trace of one run, by rank."""

    ranks: dict[int, RankTrace]
    notes: list[str] = field(default_factory=list)

    @property
    def world_size(self) -> int | None:
        sizes = {r.world_size for r in self.ranks.values() if r.world_size}
        return sizes.pop() if len(sizes) == 1 else None

    @property
    def gpu(self) -> str | None:
        gpus = {r.gpu for r in self.ranks.values() if r.gpu}
        return gpus.pop() if len(gpus) == 1 else None


def trace_files(paths: Any) -> list[Path]:
    """The trace files named by ``paths`` (files, or folders whose ``*.json``/``*.json.gz`` files
    are taken, sorted); raises :class:`TraceReadError` for a missing path or an empty folder."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(f for f in p.iterdir()
                           if f.is_file() and f.name.endswith((".json", ".json.gz")))
            if not found:
                raise TraceReadError(f"{p}: no trace files (*.json, *.json.gz) in this folder")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise TraceReadError(f"{p}: no such file or folder")
    if not out:
        raise TraceReadError("no trace files given")
    return out


def _text(path: Path) -> str:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as e:
            raise TraceReadError(f"{path}: corrupt or truncated gzip ({e})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TraceReadError(f"{path}: not a trace (not UTF-8 JSON text)") from None


def _locate_events(text: str, path: Path) -> int:
    """Index of the ``[`` that opens the top-level ``traceEvents`` list."""
    m = re.search(r'"traceEvents"\s*:\s*\[', text)
    if m is None or not text.lstrip().startswith("{"):
        raise TraceReadError(f"{path}: not a torch.profiler trace (no traceEvents list)")
    return m.end() - 1


def read_rank(path: str | os.PathLike[str]) -> RankTrace:
    """Read one trace file (``.json`` or ``.json.gz``) into columns; see the module docstring."""
    path = Path(path)
    text = _text(path)
    start = _locate_events(text, path)
    scan = json.scanner.make_scanner(json.JSONDecoder())
    ws_comma, ws = _WS_COMMA.match, _WS.match
    name_codes: dict[str, int] = {}
    cat_codes: dict[str, int] = {"": -1}
    rows: list[tuple[Any, ...]] = []
    chunks: list[np.ndarray] = []
    kept_args: dict[int, dict[str, Any]] = {}
    thread_names: dict[tuple[int, int], str] = {}
    nan = float("nan")
    add = rows.append
    i = ws(text, start + 1).end()
    n = 0
    try:
        while text[i] != "]":
            e, i = scan(text, i)
            i = ws_comma(text, i).end()
            try:
                get = e.get
            except AttributeError:
                raise TraceReadError(f"{path}: not a torch.profiler trace (an event is not an "
                                     "object)") from None
            nm = get("name")
            if nm.__class__ is not str:
                nm = "" if nm is None else str(nm)
            c = name_codes.get(nm)
            if c is None:
                c = name_codes[nm] = len(name_codes)
            ct = get("cat") or ""
            cc = cat_codes.get(ct)
            if cc is None:
                cc = cat_codes[ct] = len(cat_codes) - 1
            ph = get("ph")
            pid = get("pid")
            tid = get("tid")
            ts = get("ts")
            d = get("dur")
            a = get("args")
            s = co = x = -1
            if a.__class__ is dict:
                s = a.get("stream", -1)
                if s.__class__ is not int:
                    try:
                        s = int(s)
                    except (TypeError, ValueError):
                        s = -1
                co = a.get("correlation", -1)
                if co.__class__ is not int:
                    co = -1
                x = a.get("External id", -1)
                if x.__class__ is not int:
                    x = -1
                if ph == "M" and nm == "thread_name":
                    thread_names.setdefault((pid if pid.__class__ is int else -1,
                                             tid if tid.__class__ is int else -1),
                                            str(a.get("name", "")))
                elif (_KEEP_ARGS[0] in a or _KEEP_ARGS[1] in a
                      or (nm.startswith("c10d::") and "Input Dims" in a)):
                    kept_args[n] = a
            add((c, cc, ord(ph[0]) if ph.__class__ is str and ph else 0,
                 pid if pid.__class__ is int else -1, tid if tid.__class__ is int else -1,
                 nan if ts is None else ts, nan if d is None else d, s, co, x))
            n += 1
            if len(rows) == _CHUNK:
                chunks.append(np.array(rows, dtype=np.float64))
                rows.clear()
    except IndexError:
        raise TraceReadError(f"{path}: truncated trace (the traceEvents list never ends)") from None
    except (StopIteration, json.JSONDecodeError, ValueError, TypeError) as e:
        if isinstance(e, TraceReadError):
            raise
        raise TraceReadError(f"{path}: corrupt trace JSON near character {i}") from None
    if rows or not chunks:
        chunks.append(np.array(rows, dtype=np.float64).reshape(-1, 10))
    cols = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
    del chunks, rows
    try:
        meta = json.loads(text[:start] + "[]" + text[i + 1:])
    except json.JSONDecodeError:
        raise TraceReadError(f"{path}: corrupt trace JSON outside traceEvents") from None
    del text
    if not isinstance(meta, dict):
        raise TraceReadError(f"{path}: not a torch.profiler trace")
    info = meta.get("distributedInfo") or {}
    if not isinstance(info, dict):
        info = {}
    rank = info.get("rank")
    if not isinstance(rank, int):
        m = _RANK_IN_NAME.search(path.name)
        rank = int(m.group(1)) if m else 0
    props = meta.get("deviceProperties") or []
    gpu = str(props[0].get("name")) if props and isinstance(props[0], dict) \
        and props[0].get("name") else None
    ws_ = info.get("world_size")
    base = meta.get("baseTimeNanoseconds")
    return RankTrace(
        path=str(path), rank=rank, world_size=ws_ if isinstance(ws_, int) else None,
        backend=info.get("backend"), gpu=gpu,
        nccl_version=str(info["nccl_version"]) if info.get("nccl_version") else None,
        trace_id=meta.get("trace_id"), base_time_ns=int(base) if base is not None else None,
        process_groups=list(info.get("pg_config") or []),
        names=list(name_codes), cats=[k for k in cat_codes if k != ""],
        name=cols[:, 0].astype(np.int32), cat=cols[:, 1].astype(np.int32),
        ph=cols[:, 2].astype(np.uint8), pid=cols[:, 3].astype(np.int64),
        tid=cols[:, 4].astype(np.int64), ts=cols[:, 5].copy(), dur=cols[:, 6].copy(),
        stream=cols[:, 7].astype(np.int64), correlation=cols[:, 8].astype(np.int64),
        ext_id=cols[:, 9].astype(np.int64),
        args=kept_args, thread_names=thread_names)


def _check_distlab_trace(rt: RankTrace) -> None:
    """distlab's own Chrome traces have ``traceEvents`` but none of Kineto's fields."""
    kineto = (rt.base_time_ns is not None or rt.world_size is not None or rt.gpu is not None
              or "cpu_op" in rt.cats or "kernel" in rt.cats or "user_annotation" in rt.cats)
    if not kineto:
        raise TraceReadError(f"{rt.path}: not a torch.profiler trace (no cpu_op, kernel or "
                             "user_annotation events and no Kineto metadata: a distlab or other "
                             "Chrome trace? read it with distlab.trace.read_chrome_trace)")


def _check_one_run(ranks: dict[int, RankTrace]) -> None:
    """Ranks of one run were recorded at the same time: their time ranges share a moment."""
    if len(ranks) < 2:
        return
    with_base = all(rt.base_time_ns is not None for rt in ranks.values())
    spans = {}
    for r, rt in ranks.items():
        ok = ~np.isnan(rt.ts) & ~np.isnan(rt.dur) & (rt.pid >= 0)
        if not ok.any():
            continue
        shift = rt.base_time_ns / 1000.0 if with_base else 0.0  # type: ignore[operator]
        spans[r] = (float(rt.ts[ok].min()) + shift, float((rt.ts[ok] + rt.dur[ok]).max()) + shift)
    if len(spans) > 1 and max(s for s, _ in spans.values()) > min(e for _, e in spans.values()):
        first = min(spans, key=lambda r: spans[r][1])
        last = max(spans, key=lambda r: spans[r][0])
        raise TraceReadError(f"ranks of different runs mixed: rank {first}'s trace ends before "
                             f"rank {last}'s begins ({Path(ranks[first].path).name}, "
                             f"{Path(ranks[last].path).name})")


def read_run(paths: Any) -> Run:
    """Read the per-rank traces of one run (files, or folders of them).

    Raises:
        TraceReadError: a file is not a trace, is truncated or corrupt, a folder is empty, or the
            files are ranks of different runs (two files claim one rank, their world sizes
            differ, or one rank's trace ends before another's begins).
    """
    ranks: dict[int, RankTrace] = {}
    for f in trace_files(paths):
        rt = read_rank(f)
        _check_distlab_trace(rt)
        if rt.rank in ranks:
            raise TraceReadError(f"{f}: rank {rt.rank} twice ({ranks[rt.rank].path} too): "
                                 "traces of two different runs mixed?")
        ranks[rt.rank] = rt
    sizes = {r.world_size for r in ranks.values() if r.world_size is not None}
    if len(sizes) > 1:
        raise TraceReadError(f"ranks of different runs mixed: world sizes {sorted(sizes)} in "
                             f"{', '.join(Path(r.path).name for r in ranks.values())}")
    _check_one_run(ranks)
    notes = []
    ws = sizes.pop() if sizes else None
    if ws is not None and len(ranks) < ws:
        notes.append(f"{len(ranks)} of {ws} ranks' traces given: collectives matched across "
                     "those only")
    return Run(ranks=dict(sorted(ranks.items())), notes=notes)
