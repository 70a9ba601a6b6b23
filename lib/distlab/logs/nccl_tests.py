"""nccl-tests' output read back: every table of every binary, the devices and the NCCL release.

nccl-tests (NVIDIA/nccl-tests, ``src/common.cu``) prints, per binary run:

- a header, ``# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) ...``:
  ``nGpus`` is the ``-g`` of the command line (GPUs one process drives);
- ``# Using devices`` then one line per rank, ``#  Rank  0 Group  0 Pid 1234 on host device  0
  [0x18] NVIDIA H100 80GB HBM3`` (older releases leave out ``Group``);
- the table: two header lines (``out-of-place`` / ``in-place``, then the column names ``size
  count type redop root time algbw busbw #wrong`` twice; releases before 2.10 have no ``root``
  and call ``#wrong`` ``error``), then one row per size; ``N/A`` where a column does not apply;
- ``# Avg bus bandwidth    : 123.4``.

The binary is named by ``# Collective test starting: all_reduce_perf`` (releases from 2.13), by
the command line where the log holds it, or by the caller. The NCCL release comes from NCCL's
own ``NCCL INFO NCCL version 2.21.5+cuda12.4`` line (``NCCL_DEBUG=INFO``) or from nccl-tests'
``# nccl-tests version 2.13.9 nccl-headers=21903 nccl-library=21903`` (``NCCL_VERSION_CODE``:
``major * 10000 + minor * 100 + patch``). Lines that ``mpirun --tag-output`` (``[1,0]<stdout>:``)
or ``srun --label`` (``0: ``) prefix are read as the same lines.

nccl-tests' JSON output (``-J FILE``, releases from 2.14) is read by :func:`read_json`.

Core floor: the facts a log states, nothing priced (``distlab.health`` judges them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distlab.vocabulary import collective_name, dtype_bytes, dtype_name

__all__ = ["COLUMNS", "Device", "LogError", "NcclTestsRun", "Row", "parse_text", "read_json",
           "read_log"]

COLUMNS = ("out-of-place", "in-place")
"""The two timings nccl-tests prints per size: into a separate buffer, and into the input."""


class LogError(ValueError):
    """A log that holds no nccl-tests table, or one that contradicts itself; says which line."""


@dataclass(frozen=True)
class Row:
    """One size of one table, one of its two columns.

    Attributes:
        nbytes: nccl-tests' ``size`` column, bytes.
        count: elements (nccl-tests' ``count``: per rank for all-gather and reduce-scatter).
        dtype: nccl-tests' ``type`` (``float``, ``bfloat16``, ...).
        redop: ``sum``, ``none``, ...
        root: the root rank (``-1`` where there is none; ``None`` where the log has no column).
        column: ``"out-of-place"`` or ``"in-place"``.
        time_us: the mean time of one call, microseconds.
        algbw_gbps, busbw_gbps: nccl-tests' bandwidths, GB/s (1e9 bytes/s).
        wrong: ``#wrong`` (``None`` where the log printed ``N/A`` or an older float error).
    """

    nbytes: int
    count: int
    dtype: str
    redop: str
    root: int | None
    column: str
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None


@dataclass(frozen=True)
class Device:
    """One rank's line of ``# Using devices``: its rank, host, local device and GPU name."""

    rank: int
    host: str
    device: int
    name: str


@dataclass(frozen=True)
class NcclTestsRun:
    """One binary's run as its log states it.

    Attributes:
        collective: the canonical collective (:func:`distlab.vocabulary.collective_name`), or
            ``"sendrecv"`` / ``"hypercube"`` for nccl-tests' point-to-point binaries.
        rows: every row of its table, both columns.
        devices: the ranks' device lines (empty where the log has none).
        gpus_per_process: ``nGpus`` of the header (nccl-tests' ``-g``; 1 when absent).
        nccl_version: the NCCL release the log names (``"2.21.5"``), or ``None``.
        command: the command line, where the log holds one.
        source: the file (or ``"-"``) and the line the table starts on.
        env: ``(NAME, VALUE)`` of every ``NCCL_*`` variable NCCL says it read (``NCCL INFO
            NCCL_ALGO set by environment to Ring``, printed under ``NCCL_DEBUG=INFO``).
    """

    collective: str
    rows: tuple[Row, ...]
    devices: tuple[Device, ...] = ()
    gpus_per_process: int = 1
    nccl_version: str | None = None
    command: str | None = None
    source: str = ""
    env: tuple[tuple[str, str], ...] = ()

    @property
    def ranks(self) -> int | None:
        """GPUs in the run: the device lines' count (``None`` where the log has none)."""
        return len(self.devices) or None

    @property
    def hosts(self) -> tuple[str, ...]:
        """The distinct hosts of the device lines, in rank order."""
        return tuple(dict.fromkeys(d.host for d in self.devices))

    @property
    def gpu_names(self) -> tuple[str, ...]:
        """The distinct GPU names of the device lines."""
        return tuple(dict.fromkeys(d.name for d in self.devices))

    def column(self, which: str = "out-of-place") -> list[Row]:
        """The rows of one column, in size order."""
        return sorted((r for r in self.rows if r.column == which), key=lambda r: r.nbytes)


_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\d+: )")
_HEADER = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_DEVICE = re.compile(r"#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+"
                     r"(\d+)\s+\[[^\]]*\]\s+(.+?)\s*$")
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\w+)")
_BINARY = re.compile(r"\b(\w+?)_perf(?:_mpi)?\b")
_NCCL_INFO = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
_ENV = re.compile(r"NCCL INFO (NCCL_\w+) set by environment to (\S+)")
_TESTS_VERSION = re.compile(r"nccl-library=(\d{5,})")
_COMMAND = re.compile(r"(?:^|\s)(\S*_perf(?:_mpi)?)\s+(.*)$")


def _collective(binary: str) -> str:
    """``all_reduce_perf`` -> ``all_reduce``; ``alltoall`` -> ``all_to_all``."""
    name = binary.removesuffix("_mpi").removesuffix("_perf")
    if name in ("sendrecv", "hypercube"):
        return name
    return collective_name(name)


def _release_of(code: str) -> str:
    """``NCCL_VERSION_CODE`` (``21903``) as a release (``2.19.3``)."""
    n = int(code)
    return f"{n // 10000}.{n // 100 % 100}.{n % 100}"


def _inferred(rows: list[Row], ranks: int) -> str | None:
    """The collective a table's columns leave no doubt about, or ``None``.

    nccl-tests prints ``count`` per rank for all-gather, reduce-scatter and all-to-all
    (``src/all_gather.cu`` ...: ``paramcount = count / nranks``) and whole for all-reduce,
    broadcast and reduce; ``root`` is ``-1`` where the collective has none; ``redop`` is
    ``none`` where nothing is reduced. So: a sum with no root is an all-reduce when ``count`` is
    whole and a reduce-scatter when it is per rank; a root with a sum is a reduce, with none a
    broadcast. All-gather and all-to-all print the same columns: the caller must say.
    """
    r = rows[0]
    try:
        width = dtype_bytes(dtype_name(r.dtype))
    except ValueError:
        return None
    if not width or r.count <= 0:
        return None
    whole = r.count * width == r.nbytes
    per_rank = ranks > 1 and r.count * width * ranks == r.nbytes
    if r.root is not None and r.root >= 0:
        return "reduce" if r.redop not in ("none", "") else "broadcast"
    if r.redop not in ("none", ""):
        return "all_reduce" if whole else "reduce_scatter" if per_rank else None
    return None


def _number(text: str) -> float | None:
    return None if text in ("N/A", "-") else float(text)


def _table_columns(names: list[str]) -> list[str]:
    """The column names of a table's second header line, ``#wrong``/``error`` as ``wrong``."""
    return ["wrong" if n in ("#wrong", "error") else n for n in names]


def parse_text(text: str, *, source: str = "-",
               collective: str | None = None) -> list[NcclTestsRun]:
    """Every table of nccl-tests' text output in ``text``, one :class:`NcclTestsRun` each.

    Args:
        text: the log, as nccl-tests printed it (several binaries one after another, with
            NCCL's INFO lines, ``mpirun`` / ``srun`` prefixes, are read).
        source: the file name, for messages and :attr:`NcclTestsRun.source`.
        collective: the binary's collective where the log does not name it (``all_reduce``,
            ``allreduce``, ``all_reduce_perf``); a log that names one wins only where both
            agree.

    Returns:
        The runs, in the order of the log.

    Raises:
        LogError: no table in ``text``; a row whose fields do not fit its header (naming the
            line); a log that names a collective other than ``collective``; a table whose
            collective neither the log nor ``collective`` names.
    """
    forced = _collective(collective) if collective else None
    runs: list[NcclTestsRun] = []
    devices: dict[int, Device] = {}
    env: dict[str, str] = {}
    gpus = 1
    release = None
    binary = command = None
    names: list[str] | None = None
    rows: list[Row] = []
    start = 0

    def close() -> None:
        nonlocal rows, names, binary
        if names is None or not rows:
            names, rows = None, []
            return
        coll = forced
        if binary is not None:
            stated = _collective(binary)
            if forced is not None and stated != forced:
                raise LogError(f"{source}:{start}: the log runs {binary} but --collective "
                               f"says {collective}")
            coll = stated
        if coll is None:
            coll = _inferred(rows, len(devices))
        if coll is None:
            raise LogError(f"{source}:{start}: the table does not say which nccl-tests binary "
                           "printed it, and its columns fit more than one: give the collective "
                           "(--collective all_gather, all_to_all, ...)")
        runs.append(NcclTestsRun(coll, tuple(rows), tuple(devices[k] for k in sorted(devices)),
                                 gpus, release, command, f"{source}:{start}",
                                 tuple(env.items())))
        names, rows, binary = None, [], None

    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _PREFIX.sub("", raw.rstrip())
        body = line.lstrip()
        if m := _NCCL_INFO.search(line):
            release = release or m[1]
            continue
        if m := _ENV.search(line):
            env[m[1]] = m[2].rstrip(".")
            continue
        if m := _TESTS_VERSION.search(line):
            release = release or _release_of(m[1])
            continue
        if m := _STARTING.match(body):
            close()
            binary = m[1]
            continue
        if m := _HEADER.match(body):
            close()
            gpus, devices = int(m[2]), {}
            continue
        if m := _DEVICE.match(body):
            devices[int(m[1])] = Device(int(m[1]), m[2], int(m[3]), m[4])
            continue
        if not body.startswith("#") and (m := _COMMAND.search(body)) and "_perf" in m[1]:
            command = body
            binary = binary or _BINARY.search(m[1])[1] + "_perf"  # type: ignore[index]
            continue
        if body.startswith("#"):
            words = body.lstrip("#").split()
            if words[:1] == ["size"] and "time" in words:
                close()
                names, start = _table_columns(words), lineno
            continue
        if names is None or not body:
            continue
        fields = body.split()
        if not fields[0].isdigit():
            continue    # NCCL's INFO and WARN lines, a program's own output
        half = names.index("time")
        lead, timing = names[:half], names[half:]
        per_column = len(timing) // 2 if names.count("time") == 2 else len(timing)
        if len(fields) != len(names):
            raise LogError(f"{source}:{lineno}: {len(fields)} fields where the table's header "
                           f"names {len(names)} ({' '.join(names)}): {body!r}")
        head = dict(zip(lead, fields[:half], strict=True))
        for k, column in enumerate(COLUMNS[:len(timing) // per_column]):
            values = dict(zip(timing[:per_column],
                              fields[half + k * per_column: half + (k + 1) * per_column],
                              strict=True))
            time_us = _number(values["time"])
            if time_us is None:
                continue
            try:
                wrong = values.get("wrong", "N/A")
                rows.append(Row(int(head["size"]), int(head.get("count", 0)),
                                head.get("type", ""), head.get("redop", ""),
                                int(head["root"]) if "root" in head else None, column, time_us,
                                _number(values["algbw"]) or 0.0,
                                _number(values["busbw"]) or 0.0,
                                int(wrong) if wrong.lstrip("-").isdigit() else None))
            except ValueError as exc:
                raise LogError(f"{source}:{lineno}: {exc}: {body!r}") from None
    close()
    if not runs:
        raise LogError(f"{source}: no nccl-tests table (a line '#  size  count  type ...  time  "
                       "algbw  busbw' and rows under it) in the log")
    return runs


def read_json(data: dict[str, Any] | list[Any], *, source: str = "-") -> list[NcclTestsRun]:
    """nccl-tests' ``-J`` output: an object (or a list of them) with the binary, the devices and
    one result per size and column.

    The reader takes the keys nccl-tests writes and their plain variants: the binary
    (``"collective"`` / ``"test"`` / ``"name"``), ``"nGpus"``, ``"devices"`` (each with
    ``rank``, ``host``/``hostname``, ``device``, ``name``), ``"nccl_version"`` and
    ``"results"`` (each with ``size``, ``count``, ``type``, ``redop``, ``root``, and
    ``"out_of_place"`` / ``"in_place"`` objects of ``time``, ``algbw``, ``busbw``, ``wrong``).

    Raises:
        LogError: naming the first key that is missing or of the wrong kind.
    """
    items = data if isinstance(data, list) else [data]
    runs = []
    for i, item in enumerate(items):
        where = f"{source}[{i}]"
        if not isinstance(item, dict):
            raise LogError(f"{where}: expected an object of one nccl-tests run")
        name = next((item[k] for k in ("collective", "test", "name") if k in item), None)
        results = item.get("results")
        if not isinstance(name, str) or not isinstance(results, list):
            raise LogError(f"{where}: needs 'collective' (the binary) and 'results' (a list)")
        rows = []
        for j, r in enumerate(results):
            for column, key in (("out-of-place", "out_of_place"), ("in-place", "in_place")):
                timing = r.get(key) if isinstance(r, dict) else None
                if not isinstance(timing, dict) or timing.get("time") in (None, "N/A"):
                    continue
                try:
                    rows.append(Row(int(r["size"]), int(r.get("count", 0)), str(r.get("type", "")),
                                    str(r.get("redop", "")),
                                    None if r.get("root") is None else int(r["root"]), column,
                                    float(timing["time"]), float(timing.get("algbw", 0.0)),
                                    float(timing.get("busbw", 0.0)),
                                    None if timing.get("wrong") is None else int(timing["wrong"])))
                except (KeyError, TypeError, ValueError) as exc:
                    raise LogError(f"{where}.results[{j}]: {exc!r}") from None
        devices = tuple(Device(int(d.get("rank", k)), str(d.get("host", d.get("hostname", ""))),
                               int(d.get("device", 0)), str(d.get("name", "")))
                        for k, d in enumerate(item.get("devices", [])))
        runs.append(NcclTestsRun(_collective(name), tuple(rows),
                                 devices, int(item.get("nGpus", 1)), item.get("nccl_version"),
                                 item.get("command"), where))
    if not any(r.rows for r in runs):
        raise LogError(f"{source}: no result rows in the JSON")
    return runs


def read_log(path: str | Path, *, collective: str | None = None,
             text: str | None = None) -> list[NcclTestsRun]:
    """The runs of one log file (text or ``-J`` JSON; ``path`` ``"-"`` with ``text`` given).

    Raises:
        LogError: as :func:`parse_text` / :func:`read_json`; a file that cannot be read, named.
    """
    name = str(path)
    if text is None:
        try:
            text = Path(path).read_text(errors="replace")
        except OSError as exc:
            raise LogError(f"{name}: {exc.strerror or exc}") from None
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return read_json(json.loads(stripped), source=name)
        except json.JSONDecodeError as exc:
            raise LogError(f"{name}: not readable JSON ({exc})") from None
    return parse_text(text, source=name, collective=collective)
