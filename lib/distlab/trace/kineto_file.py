"""The one reader of torch.profiler (Kineto) trace files: ``.json`` or ``.json.gz``, streamed.

    from distlab.trace.kineto_file import read_kineto_events
    meta = read_kineto_events(path, consume)   # consume(list_of_event_dicts), in file order

Every reader of a Kineto trace in distlab goes through here: the trace analysis
(:func:`distlab.trace.torch_trace.read_rank`, behind ``python -m distlab.judge trace``), the
import onto distlab's timeline (:func:`distlab.trace.kineto.read_kineto_trace`) and the trace
benchmark (:mod:`distlab.bench.trace`). ``tests/test_vocabulary.py`` flags a ``gzip``/``json``
trace reader written anywhere else in ``lib/distlab``.

Format
------
A Kineto trace is one JSON object, ``{"schemaVersion": ..., "deviceProperties": [...],
"distributedInfo": {...}, "traceEvents": [...], "traceName": ..., "baseTimeNanoseconds": ...}``
(keys in any order; ``tensorboard_trace_handler`` gzips it). A file starting with the gzip magic
``1f 8b`` is decompressed, whatever its name.

Streaming
---------
The file's text is never held whole: the (decompressed) bytes are read in blocks of
:data:`CHUNK_BYTES`, decoded as UTF-8 incrementally, and parsed from a rolling buffer that keeps
only the text not yet parsed (at most one block plus one event). The complete events in the
buffer, up to the last ``}`` ``,`` ``{`` between two events, are parsed by one call of ``json``'s C
scanner (``"[" + events + "]"``: one call is faster than one per event, as the scanner shares
its key strings within a call); where that guess of a boundary fails (a ``},{`` inside a string),
and for the last event, events are parsed one at a time (``JSONDecoder.raw_decode``'s scanner),
reading more text while an event is incomplete. Each block of events goes to ``consume`` and is
dropped: the caller keeps what it needs, so memory is bounded by what the caller keeps, not by
the file. The cyclic garbage collector is paused while a file is read (event dicts form no
cycles; reference counting frees them). The values are those ``json.load`` gives (same decoder,
same numbers).

Clock convention
----------------
Times are **microseconds** throughout: an event's ``ts`` and ``dur`` are returned as Kineto wrote
them (integers in older traces, fractions of a microsecond in nanosecond-resolution ones), and
the reader never shifts them. Kineto's ``ts`` counts from the top-level ``baseTimeNanoseconds``
(torch >= 2.1; the key comes *after* ``traceEvents`` in the file, so it is known once the whole
file is read): ``baseTimeNanoseconds / 1000 + ts`` is wall-clock (``CLOCK_REALTIME``, Unix epoch)
microseconds. :func:`epoch_shift_us` is that shift (computed in integer nanoseconds, so nothing is
lost to the 1e15-us epoch values), optionally moved onto another clock; a trace without
``baseTimeNanoseconds`` (torch before 2.1) wrote ``ts`` as wall-clock microseconds already
(shift 0). Ranks recorded on one host share the clock, so analyses of one run use ``ts``
differences and need no shift at all.

Errors
------
:class:`TraceReadError` (a ``ValueError``), one line naming the file: no such file; a truncated
gzip stream; a corrupt gzip stream; text that is not UTF-8; text that is not JSON; truncated JSON;
corrupt JSON (with the character where it stops); JSON that is not a Kineto trace (no top-level
``traceEvents`` list, or an event that is not an object). Its :attr:`~TraceReadError.kind` says
which, for callers that word it their own way.
"""

from __future__ import annotations

import codecs
import gc
import gzip
import json
import json.scanner
import os
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["CHUNK_BYTES", "TraceReadError", "epoch_shift_us", "load_kineto",
           "read_kineto_events"]

CHUNK_BYTES = 1 << 20
"""Bytes of (decompressed) text read at a time: the rolling buffer holds about one to two."""

_WS = re.compile(r"\s*")
_WS_COMMA = re.compile(r"[\s,]*")
_SEP = re.compile(r"\}\s*,\s*(?=\{)")
_SEP_WINDOW = 1 << 16  # where the last event boundary is looked for: the buffer's last 64 KiB
_NEAR_END = 16  # an error this close to the end of the buffer may be a value cut by the block
_SCAN = json.scanner.make_scanner(json.JSONDecoder())

KINDS = ("file", "gzip", "encoding", "json", "format", "run")
""":attr:`TraceReadError.kind`: no such file / a truncated or corrupt gzip stream / not UTF-8 /
not JSON, truncated or corrupt JSON / JSON but not a Kineto trace / files that are not one run."""


class TraceReadError(ValueError):
    """A file or folder that is not a readable torch.profiler trace (one line says why, naming
    the file); :attr:`kind` is one of :data:`KINDS`."""

    def __init__(self, message: str, kind: str = "format") -> None:
        super().__init__(message)
        self.kind = kind

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process pools intact
        return (type(self), (str(self), self.kind))


def epoch_shift_us(base_time_ns: int | None, minus_ns: int = 0) -> float:
    """Microseconds to add to an event's ``ts`` for wall-clock (Unix epoch) time, minus
    ``minus_ns`` (e.g. realtime minus monotonic, to land on the monotonic clock): ``(base -
    minus) / 1000`` in integer nanoseconds; ``base_time_ns`` None (torch before 2.1) counts as 0."""
    return (int(base_time_ns or 0) - int(minus_ns)) / 1000.0


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while events are parsed: the millions of new dicts (none
    in a cycle) would set it off again and again over everything the caller keeps (a third of
    the reading time on a 35 MB trace); reference counting still frees every dropped event."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _open(path: Path) -> BinaryIO:
    try:
        f: BinaryIO = open(path, "rb")
    except FileNotFoundError:
        raise TraceReadError(f"{path}: no such file", "file") from None
    except IsADirectoryError:
        raise TraceReadError(f"{path}: a folder, not a trace file", "file") from None
    except OSError as e:
        raise TraceReadError(f"{path}: cannot be read ({e.strerror})", "file") from None
    if f.read(2) == b"\x1f\x8b":
        f.seek(0)
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    f.seek(0)
    return f


class _Stream:
    """The rolling text buffer: ``buf[i:]`` is the text not yet parsed, ``base`` the characters
    dropped before ``buf``."""

    def __init__(self, raw: BinaryIO, path: Path, chunk: int) -> None:
        self.raw, self.path, self.chunk = raw, path, chunk
        self.decode = codecs.getincrementaldecoder("utf-8")().decode
        self.buf, self.i, self.base, self.eof = "", 0, 0, False

    def more(self) -> bool:
        """Append the next block (dropping the parsed text); False at the end of the file."""
        if self.eof:
            return False
        try:
            data = self.raw.read(self.chunk)
        except EOFError:
            raise TraceReadError(f"{self.path}: truncated gzip (the compressed stream ends "
                                 "early)", "gzip") from None
        except (OSError, zlib.error) as e:
            raise TraceReadError(f"{self.path}: corrupt gzip ({e})", "gzip") from None
        try:
            text = self.decode(data, final=not data)
        except UnicodeDecodeError:
            raise TraceReadError(f"{self.path}: not a trace (not UTF-8 JSON text)",
                                 "encoding") from None
        if not data:
            self.eof = True
        self.base += self.i
        self.buf = self.buf[self.i:] + text if self.i else self.buf + text
        self.i = 0
        return bool(data)

    def skip(self, rx: re.Pattern[str]) -> str:
        """Move past ``rx`` (whitespace); the next character, '' at the end of the file."""
        while True:
            j = rx.match(self.buf, self.i).end()  # type: ignore[union-attr]
            self.i = j
            if j < len(self.buf):
                return self.buf[j]
            if not self.more():
                return ""

    def fail(self, what: str, pos: int) -> TraceReadError:
        return TraceReadError(f"{self.path}: corrupt trace JSON near character {self.base + pos}"
                              f" ({what})", "json")

    def truncated(self, where: str) -> TraceReadError:
        return TraceReadError(f"{self.path}: truncated trace (the JSON ends {where})", "json")

    def value(self, where: str) -> Any:
        """Parse the JSON value at ``i``, reading more while it may be incomplete."""
        while True:
            buf = self.buf
            try:
                v, j = _SCAN(buf, self.i)
            except StopIteration as e:
                pos, msg = e.value, "expecting a value"
            except json.JSONDecodeError as e:
                pos, msg = e.pos, e.msg
            else:
                # a value ending near the block's end may go on ("1." of "1.5"): read on first
                if j < len(buf) - _NEAR_END or not self.more():
                    self.i = j - (len(buf) - len(self.buf))  # (more() dropped parsed text)
                    return v
                continue
            cut = pos >= len(buf) - _NEAR_END or msg.startswith("Unterminated string")
            if not cut:
                raise self.fail(msg, pos)
            if not self.more():
                raise self.truncated(where)


def _last_boundary(buf: str, i: int) -> int:
    """Index of the ``}`` that ends the last event followed by ``,`` and another event's ``{``
    in ``buf[i:]``, or -1."""
    start = max(i, len(buf) - _SEP_WINDOW)
    while True:
        last = -1
        for m in _SEP.finditer(buf, start):
            last = m.start()
        if last >= 0 or start == i:
            return last
        start = i


def _events(s: _Stream, consume: Callable[[list[dict[str, Any]]], None]) -> int:
    """Stream the ``traceEvents`` list (``s.i`` just past its ``[``) into ``consume``."""
    n = 0
    slow_until = -1  # absolute position up to which boundaries are not guessed
    where = "inside traceEvents (the list never ends)"
    while True:
        if not s.eof and len(s.buf) - s.i < s.chunk:
            s.more()
        c = s.skip(_WS_COMMA)
        if c == "]":
            s.i += 1
            return n
        if c == "":
            raise s.truncated(where)
        buf, i = s.buf, s.i
        if s.base + i > slow_until:
            end = _last_boundary(buf, i)
            if end > i:
                try:
                    evs, j = _SCAN("[" + buf[i:end + 1] + "]", 0)
                except (StopIteration, json.JSONDecodeError):
                    evs, j = None, -1
                if evs is not None and j == end - i + 3 and \
                        all(e.__class__ is dict for e in evs):
                    consume(evs)
                    n += len(evs)
                    s.i = end + 1
                    continue
                slow_until = s.base + end
        e = s.value(where)
        if e.__class__ is not dict:
            raise TraceReadError(f"{s.path}: not a torch.profiler trace (traceEvents item {n} "
                                 "is not an object)", "format")
        consume([e])
        n += 1


def read_kineto_events(path: str | os.PathLike[str],
                       consume: Callable[[list[dict[str, Any]]], None], *,
                       chunk_bytes: int = CHUNK_BYTES) -> dict[str, Any]:
    """Stream the events of the Kineto trace at ``path`` to ``consume`` (lists of event dicts,
    in file order; ``consume`` must not keep the lists it is given past the call, only what it
    takes from them) and return every other top-level key (``distributedInfo``,
    ``baseTimeNanoseconds``, ...). Raises :class:`TraceReadError` (see the module docstring);
    ``consume``'s own exceptions pass through."""
    path = Path(path)
    with _open(path) as raw, _gc_paused():
        s = _Stream(raw, path, max(1, int(chunk_bytes)))
        c = s.skip(_WS)
        if c == "":
            raise TraceReadError(f"{path}: empty, not a torch.profiler trace", "format")
        if c != "{":
            if c in '["-0123456789' or s.buf.startswith(("true", "false", "null"), s.i):
                raise TraceReadError(f"{path}: not a torch.profiler trace (JSON but not an "
                                     "object with a traceEvents list)", "format")
            raise TraceReadError(f"{path}: not a trace (not JSON text: it starts with "
                                 f"{c!r})", "json")
        s.i += 1
        meta: dict[str, Any] = {}
        seen = False
        where = "inside the top-level object"
        c = s.skip(_WS)
        while c != "}":
            if c != '"':
                raise s.truncated(where) if c == "" else s.fail("expecting a key", s.i)
            key = s.value(where)
            if s.skip(_WS) != ":":
                raise s.truncated(where) if s.eof and s.i >= len(s.buf) else \
                    s.fail("expecting ':'", s.i)
            s.i += 1
            c = s.skip(_WS)
            if c == "":
                raise s.truncated(where)
            if key == "traceEvents" and c == "[":
                if seen:
                    raise TraceReadError(f"{path}: not a torch.profiler trace (two "
                                         "traceEvents lists)", "format")
                s.i += 1
                _events(s, consume)
                seen = True
            else:
                meta[key] = s.value(where)
            c = s.skip(_WS)
            if c == ",":
                s.i += 1
                c = s.skip(_WS)
                if c == "}":
                    raise s.fail("expecting a key after ','", s.i)
            elif c == "":
                raise s.truncated(where)
            elif c != "}":
                raise s.fail("expecting ',' or '}'", s.i)
        s.i += 1
        if s.skip(_WS) != "":
            raise s.fail("extra data after the trace object", s.i)
    if not seen:
        raise TraceReadError(f"{path}: not a torch.profiler trace (no traceEvents list)",
                             "format")
    return meta


def load_kineto(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The whole trace document (every event kept: for a small trace that is to be rewritten,
    as :mod:`distlab.bench.trace` does; analyses use :func:`read_kineto_events`)."""
    events: list[dict[str, Any]] = []
    meta = read_kineto_events(path, events.extend)
    return {**meta, "traceEvents": events}
