"""Read a user's torch.profiler (Kineto) traces, one per rank, into columns (NumPy arrays).

    from distlab.trace.torch_trace import read_run
    run = read_run("traces/")            # a folder of rank*.pt.trace.json.gz, or files
    rt = run.ranks[0]                    # a RankTrace: rt.ts, rt.dur, rt.name (codes) ...

A Kineto trace is ``{"traceEvents": [...], "distributedInfo": {...}, "deviceProperties": [...],
"baseTimeNanoseconds": ...}``; ``tensorboard_trace_handler`` gzips it. The file is streamed by
:func:`distlab.trace.kineto_file.read_kineto_events` (the one Kineto reader: its errors, its clock
convention) and each block of events goes straight into rows of numbers that become arrays: neither
the file's text nor a list of all its event dicts is ever held, so memory is a few numbers per
event. A folder of ranks is read by a pool of processes, one per core
(``read_run(workers=...)``; 1 reads serially, with the same result). Event ``args`` are kept only
where the analysis reads them (collectives: events whose args name a ``Collective
name``/``Process Group Name``, or ``Input Dims`` of a ``c10d::`` op, a ``gloo:`` span or an
``nccl:`` annotation), in :attr:`RankTrace.args`,
keyed by event index.

Facts read from the file: rank, world size, backend and process groups from ``distributedInfo``
(``rank`` falls back to the file name ``rank<N>``), the GPU from ``deviceProperties[0].name``
(``None`` on a CPU-only trace; where HIP gives its generic ``AMD Radeon Graphics`` instead of the
product's name, the architecture family its ``computeMajor``/``computeMinor`` state is added:
``AMD Radeon Graphics (gfx94x)`` for 9.4, the MI300 series; :func:`gpu_name`), the NCCL release
(RCCL's on ROCm) from ``distributedInfo.nccl_version``.

Time: ``ts``/``dur`` are microseconds as Kineto writes them (integers in older traces, fractions
of a microsecond in nanosecond-resolution ones; see :mod:`distlab.trace.kineto_file`'s clock
convention); ``baseTimeNanoseconds`` (absent before torch 2.1) is kept as
:attr:`RankTrace.base_time_ns` and used only to tell whether ranks' time ranges overlap
(:func:`~distlab.trace.kineto_file.epoch_shift_us`): every analysis uses ``ts`` differences within
one run, and ranks of one host share the clock. Ranks of two different runs are refused
(different ``trace_id`` / ``world_size`` / duplicate ranks); see :func:`read_run`.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from distlab.trace.kineto_file import TraceReadError, epoch_shift_us, read_kineto_events

__all__ = ["RankTrace", "Run", "TraceReadError", "cores", "read_rank", "read_run", "trace_files"]

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_KEEP_ARGS = ("Collective name", "Process Group Name")
_CHUNK = 1 << 13  # events per block of columns while reading


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


HIP_GENERIC_NAME = "AMD Radeon Graphics"
"""The device name HIP reports where it lacks the product's marketing name (a real ROCm 6.2
Kineto trace of MI250s, ``results/traces/hta_rocm_mi250``, names every GPU so)."""


def gpu_name(props: dict[str, Any]) -> str | None:
    """The GPU of one ``deviceProperties`` entry: its ``name``; HIP's generic
    :data:`HIP_GENERIC_NAME` gains the architecture family of its ``computeMajor`` /
    ``computeMinor`` (``gfx<major><minor>x``: 9.4 is ``gfx94x``, the MI300 series' gfx942;
    the stepping letter is not in the trace). ``None`` without a name."""
    name = props.get("name")
    if not name:
        return None
    major, minor = props.get("computeMajor"), props.get("computeMinor")
    if str(name) == HIP_GENERIC_NAME and isinstance(major, int) and isinstance(minor, int):
        return f"{name} (gfx{major}{minor}x)"
    return str(name)


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
                raise TraceReadError(f"{p}: no trace files (*.json, *.json.gz) in this folder",
                                     "file")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise TraceReadError(f"{p}: no such file or folder", "file")
    if not out:
        raise TraceReadError("no trace files given", "file")
    return out


class _Columns:
    """:func:`read_rank`'s consumer of event blocks: each event's fields into rows of numbers
    (blocks of :data:`_CHUNK` become float64 arrays), names and categories as codes, the args
    the analysis reads and the thread names; the event dicts themselves are dropped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name_codes: dict[str, int] = {}
        self.cat_codes: dict[str, int] = {"": -1}
        self.rows: list[tuple[Any, ...]] = []
        self.chunks: list[np.ndarray] = []
        self.kept_args: dict[int, dict[str, Any]] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.n = 0

    def __call__(self, events: list[dict[str, Any]]) -> None:
        name_codes, cat_codes = self.name_codes, self.cat_codes
        kept_args, thread_names = self.kept_args, self.thread_names
        rows = self.rows
        add = rows.append
        nan = float("nan")
        n = self.n
        for e in events:
            get = e.get
            nm = get("name")
            if nm.__class__ is not str:
                nm = "" if nm is None else str(nm)
            c = name_codes.get(nm)
            if c is None:
                c = name_codes[nm] = len(name_codes)
            ct = get("cat") or ""
            cc = cat_codes.get(ct)
            if cc is None:
                try:
                    cc = cat_codes[ct] = len(cat_codes) - 1
                except TypeError:
                    raise TraceReadError(f"{self.path}: not a torch.profiler trace (event {n}'s "
                                         "cat is not a string)") from None
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
                      or (nm.startswith(("c10d::", "gloo:", "nccl:")) and "Input Dims" in a)):
                    kept_args[n] = a
            add((c, cc, ord(ph[0]) if ph.__class__ is str and ph else 0,
                 pid if pid.__class__ is int else -1, tid if tid.__class__ is int else -1,
                 nan if ts is None else ts, nan if d is None else d, s, co, x))
            n += 1
            if len(rows) == _CHUNK:
                self._block()
        self.n = n

    def _block(self) -> None:
        try:
            self.chunks.append(np.array(self.rows, dtype=np.float64).reshape(-1, 10))
        except (TypeError, ValueError):
            raise TraceReadError(f"{self.path}: not a torch.profiler trace (an event's ts or "
                                 "dur is not a number)") from None
        self.rows.clear()

    def columns(self) -> np.ndarray:
        if self.rows or not self.chunks:
            self._block()
        cols = np.concatenate(self.chunks) if len(self.chunks) > 1 else self.chunks[0]
        self.chunks = []
        return cols


def read_rank(path: str | os.PathLike[str]) -> RankTrace:
    """Read one trace file (``.json`` or ``.json.gz``) into columns; see the module docstring."""
    path = Path(path)
    cols_of = _Columns(path)
    meta = read_kineto_events(path, cols_of)
    cols = cols_of.columns()
    info = meta.get("distributedInfo") or {}
    if not isinstance(info, dict):
        info = {}
    rank = info.get("rank")
    if not isinstance(rank, int):
        m = _RANK_IN_NAME.search(path.name)
        rank = int(m.group(1)) if m else 0
    props = meta.get("deviceProperties") or []
    gpu = gpu_name(props[0]) if props and isinstance(props[0], dict) else None
    ws_ = info.get("world_size")
    base = meta.get("baseTimeNanoseconds")
    return RankTrace(
        path=str(path), rank=rank, world_size=ws_ if isinstance(ws_, int) else None,
        backend=info.get("backend"), gpu=gpu,
        nccl_version=str(info["nccl_version"]) if info.get("nccl_version") else None,
        trace_id=meta.get("trace_id"), base_time_ns=int(base) if base is not None else None,
        process_groups=list(info.get("pg_config") or []),
        names=list(cols_of.name_codes), cats=[k for k in cols_of.cat_codes if k != ""],
        name=cols[:, 0].astype(np.int32), cat=cols[:, 1].astype(np.int32),
        ph=cols[:, 2].astype(np.uint8), pid=cols[:, 3].astype(np.int64),
        tid=cols[:, 4].astype(np.int64), ts=cols[:, 5].copy(), dur=cols[:, 6].copy(),
        stream=cols[:, 7].astype(np.int64), correlation=cols[:, 8].astype(np.int64),
        ext_id=cols[:, 9].astype(np.int64),
        args=cols_of.kept_args, thread_names=cols_of.thread_names)


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
        shift = epoch_shift_us(rt.base_time_ns) if with_base else 0.0
        spans[r] = (float(rt.ts[ok].min()) + shift, float((rt.ts[ok] + rt.dur[ok]).max()) + shift)
    if len(spans) > 1 and max(s for s, _ in spans.values()) > min(e for _, e in spans.values()):
        first = min(spans, key=lambda r: spans[r][1])
        last = max(spans, key=lambda r: spans[r][0])
        raise TraceReadError(f"ranks of different runs mixed: rank {first}'s trace ends before "
                             f"rank {last}'s begins ({Path(ranks[first].path).name}, "
                             f"{Path(ranks[last].path).name})", "run")


def cores() -> int:
    """CPU cores this process may run on (its affinity; ``os.cpu_count()`` where the OS does not
    say)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _worker_init() -> None:
    """A pool worker leaves Ctrl-C to its parent, which terminates the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _pool_context() -> Any:
    """``fork`` (no start-up cost) when this process runs one thread, else ``forkserver`` (forking
    a process with threads may deadlock the child), else ``spawn``."""
    methods = mp.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return mp.get_context("fork")
    if "forkserver" in methods:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload([__name__])
        return ctx
    return mp.get_context("spawn")  # pragma: no cover - not POSIX


def _bar(total: int, progress: bool) -> Any:
    """A bar on stderr counting files read, or (no progress) nothing: even a disabled tqdm
    starts its monitor thread, and a process with threads may not fork its pool."""
    if not progress:
        return contextlib.nullcontext(_NoBar())
    return tqdm(total=total, desc="reading traces", unit="file", file=sys.stderr, leave=False)


class _NoBar:
    def update(self, n: int) -> None:
        pass


def _read_ranks(files: list[Path], workers: int, progress: bool) -> Iterator[RankTrace]:
    """Each file's RankTrace, in the order of ``files``: read here (``workers`` 1) or in a pool
    of ``workers`` processes that is terminated (its processes ended and reaped) when the
    caller stops early, on an error or on Ctrl-C."""
    if workers <= 1:
        with _bar(len(files), progress) as bar:
            for f in files:
                rt = read_rank(f)
                bar.update(1)
                yield rt
        return
    ctx = _pool_context()  # before the bar: tqdm's monitor thread would rule out fork
    with ctx.Pool(workers, initializer=_worker_init) as pool, _bar(len(files), progress) as bar:
        try:
            # largest files first keeps every worker busy to the end; results come back in order
            order = sorted(range(len(files)), key=lambda k: -files[k].stat().st_size)
            done: dict[int, RankTrace | BaseException] = {}
            results = pool.imap_unordered(_read_indexed, [(k, files[k]) for k in order])
            for k in range(len(files)):
                while k not in done:
                    j, rt = next(results)
                    done[j] = rt
                    bar.update(1)
                got = done.pop(k)
                if isinstance(got, BaseException):
                    raise got
                yield got
        finally:
            pool.terminate()
            pool.join()


def _read_indexed(item: tuple[int, Path]) -> tuple[int, RankTrace | Exception]:
    """A pool task: the file's RankTrace, or the exception reading it raised (raised by the
    parent in file order, as a serial read would)."""
    try:
        return item[0], read_rank(item[1])
    except Exception as e:
        return item[0], e


POOL_FROM_BYTES = 16 * 2**20
"""Files of a run smaller than this in all (bytes, compressed as stored) are read in this
process when :func:`read_run` picks the number of workers itself."""


def read_run(paths: Any, *, workers: int | None = None, progress: bool | None = None) -> Run:
    """Read the per-rank traces of one run (files, or folders of them).

    Args:
        workers: processes reading files at once: None = every core this process may use
            (:func:`cores`), at most one per file, where the files hold
            :data:`POOL_FROM_BYTES` or more (below that a pool's start costs more than it
            saves, and the files are read here); 1 reads them here, one after another. The
            result is the same either way (and so is the error raised: the first bad file in the
            order of :func:`trace_files`).
        progress: a bar on stderr counting the files read; None shows it where stderr is a
            terminal and there are several files.

    Raises:
        TraceReadError: a file is not a trace, is truncated or corrupt, a folder is empty, or the
            files are ranks of different runs (two files claim one rank, their world sizes
            differ, or one rank's trace ends before another's begins).
    """
    files = trace_files(paths)
    if workers is None:
        workers = cores() if sum(f.stat().st_size for f in files) >= POOL_FROM_BYTES else 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1 or None, got {workers!r}")
    workers = min(workers, len(files))
    if progress is None:
        progress = len(files) > 1 and sys.stderr.isatty()
    ranks: dict[int, RankTrace] = {}
    read = _read_ranks(files, workers, progress)
    try:
        for f, rt in zip(files, read, strict=True):
            _check_distlab_trace(rt)
            if rt.rank in ranks:
                raise TraceReadError(f"{f}: rank {rt.rank} twice ({ranks[rt.rank].path} too): "
                                     "traces of two different runs mixed?", "run")
            ranks[rt.rank] = rt
    finally:
        read.close()
    sizes = {r.world_size for r in ranks.values() if r.world_size is not None}
    if len(sizes) > 1:
        raise TraceReadError(f"ranks of different runs mixed: world sizes {sorted(sizes)} in "
                             f"{', '.join(Path(r.path).name for r in ranks.values())}", "run")
    _check_one_run(ranks)
    notes = []
    ws = sizes.pop() if sizes else None
    if ws is not None and len(ranks) < ws:
        notes.append(f"{len(ranks)} of {ws} ranks' traces given: collectives matched across "
                     "those only")
    return Run(ranks=dict(sorted(ranks.items())), notes=notes)
