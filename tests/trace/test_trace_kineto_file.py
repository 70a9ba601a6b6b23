"""The one Kineto reader (distlab.trace.kineto_file): one clear error per bad input, naming the
file; .json and .json.gz alike; streaming (any block size) equals a whole-file json.loads; a
folder read by a process pool equals the serial read, errors included, and leaves no process
behind on an error or Ctrl-C."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distlab.trace import torch_trace as T
from distlab.trace.kineto_file import (
    TraceReadError,
    epoch_shift_us,
    load_kineto,
    read_kineto_events,
)
from helpers.leaks import no_leaks
from helpers.paths import RESULTS
from helpers.trace_synth import synth_rank, write_run

TRACES = RESULTS / "traces"
GZ = next((TRACES / "gloo_ddp_2ranks").glob("rank0*.gz"))


def _bad(tmp: Path) -> dict[str, tuple[bytes, str, str]]:
    """name -> (bytes, kind, words in the message)."""
    gz = GZ.read_bytes()
    corrupt = bytearray(gz)
    corrupt[len(gz) // 2: len(gz) // 2 + 64] = b"\xff" * 64
    text = json.dumps(synth_rank(0, 1, seed=0))
    return {
        "trunc.json.gz": (gz[: len(gz) // 2], "gzip", "truncated gzip"),
        "corrupt.json.gz": (bytes(corrupt), "gzip", "gzip"),
        "latin1.json": (b'{"traceEvents": [{"name": "caf\xe9"}]}', "encoding", "UTF-8"),
        "binary.json": (b"\x00\x01binary", "json", "not JSON"),
        "trunc.json": (text[: len(text) // 2].encode(), "json", "truncated trace"),
        "corrupt.json": (text.replace('"ph"', '"ph" 1', 1).encode(), "json", "corrupt trace JSON"),
        "extra.json": (b'{"traceEvents": []} x', "json", "extra data"),
        "nokey.json": (b'{"hello": 1}', "format", "no traceEvents list"),
        "notlist.json": (b'{"traceEvents": 5}', "format", "no traceEvents list"),
        "array.json": (b"[1, 2]", "format", "not an object"),
        "empty.json": (b"", "format", "empty"),
        "item.json": (b'{"traceEvents": [{"ph": "X"}, 3]}', "format", "item 1"),
    }


@pytest.mark.parametrize("name", list(_bad(Path())))
def test_each_bad_input_is_one_error_naming_the_file(tmp_path, name: str) -> None:
    data, kind, words = _bad(tmp_path)[name]
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(TraceReadError) as e:
        read_kineto_events(p, lambda evs: None)
    msg = str(e.value)
    assert msg.startswith(f"{p}: ") and words in msg and "\n" not in msg, msg
    assert e.value.kind == kind
    with pytest.raises(TraceReadError) as e2:  # the analysis path says the same
        T.read_rank(p)
    assert str(e2.value) == msg


def test_missing_file(tmp_path) -> None:
    with pytest.raises(TraceReadError, match="no such file") as e:
        load_kineto(tmp_path / "nope.json")
    assert e.value.kind == "file"


def test_gz_and_plain_read_alike(tmp_path) -> None:
    plain = tmp_path / "rank0.json"
    plain.write_bytes(gzip.decompress(GZ.read_bytes()))
    assert load_kineto(plain) == load_kineto(GZ) == json.loads(plain.read_bytes())
    a, b = T.read_rank(plain), T.read_rank(GZ)
    _same_rank(a, b, paths=False)


def test_committed_traces_stream_as_json_loads() -> None:
    for p in sorted(TRACES.glob("*/*.json.gz")):
        ref = json.loads(gzip.decompress(p.read_bytes()))
        events: list = []
        meta = read_kineto_events(p, events.extend, chunk_bytes=4096)
        assert {**meta, "traceEvents": events} == ref, p


def test_clock_shift_is_integer_nanoseconds() -> None:
    base = 1_716_423_322_510_000_123
    assert epoch_shift_us(base) == base / 1000.0
    assert epoch_shift_us(base, base - 1500) == 1.5
    assert epoch_shift_us(None) == 0.0


_KEYS = st.sampled_from(["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "s"])
_TEXT = st.text(alphabet=st.sampled_from(list('ab },{[]":\\\n\t') + ["é", "€", "😀"]),
                max_size=12)
_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-2**53, 2**53),
                    st.floats(allow_nan=False, allow_infinity=False), _TEXT)
_VALUE = st.recursive(_SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)), max_leaves=6)
_EVENT = st.dictionaries(st.one_of(_KEYS, _TEXT), _VALUE, max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(events=st.lists(_EVENT, max_size=12), before=st.dictionaries(_TEXT, _VALUE, max_size=2),
       after=st.dictionaries(_TEXT, _VALUE, max_size=2), indent=st.sampled_from([None, 0, 2]),
       chunk=st.sampled_from([1, 3, 17, 256, 1 << 20]), gz=st.booleans())
def test_streaming_equals_a_whole_file_parse(tmp_path, events, before, after, indent, chunk,
                                             gz) -> None:
    before = {k: v for k, v in before.items() if k != "traceEvents"}
    after = {k: v for k, v in after.items() if k != "traceEvents" and k not in before}
    text = json.dumps({**before, "traceEvents": events, **after}, indent=indent,
                      ensure_ascii=False)
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    data = text.encode()
    p.write_bytes(gzip.compress(data) if gz else data)
    got: list = []
    meta = read_kineto_events(p, got.extend, chunk_bytes=chunk)
    assert got == json.loads(text)["traceEvents"]
    assert meta == {**before, **after}


def _same_rank(a: T.RankTrace, b: T.RankTrace, paths: bool = True) -> None:
    for k, v in vars(a).items():
        if k == "path" and not paths:
            continue
        w = getattr(b, k)
        if isinstance(v, np.ndarray):
            assert v.dtype == w.dtype and np.array_equal(v, w, equal_nan=True), k
        else:
            assert v == w, k


def test_parallel_read_equals_serial(tmp_path) -> None:
    folder = write_run(tmp_path / "run", 4, seed=5)
    for source in (TRACES / "gloo_ddp_4ranks", folder):
        with no_leaks():
            par = T.read_run(source, workers=3)
        ser = T.read_run(source, workers=1)
        assert list(par.ranks) == list(ser.ranks) and par.notes == ser.notes
        for r in ser.ranks:
            _same_rank(par.ranks[r], ser.ranks[r])


def test_parallel_read_raises_the_serial_error_and_cleans_up(tmp_path) -> None:
    folder = write_run(tmp_path / "run", 4, seed=6, gz=False)
    (folder / "rank2.1.pt.trace.json").write_text('{"traceEvents": [')
    (folder / "rank3.1.pt.trace.json").write_text("not json")
    with pytest.raises(TraceReadError) as serial:
        T.read_run(folder, workers=1)
    with no_leaks(), pytest.raises(TraceReadError) as par:
        T.read_run(folder, workers=2)
    assert str(par.value) == str(serial.value) and "rank2" in str(par.value)


SLOW_READ_S = 30.0


def _slow_read(path):  # a pool worker that is still busy when Ctrl-C comes
    time.sleep(SLOW_READ_S)


def test_ctrl_c_ends_the_pool(tmp_path, monkeypatch) -> None:
    """Ctrl-C during a parallel read raises at once and ends the busy workers: a pool that
    waited for them would take the workers' whole sleep (sleeps never end early), so the read
    ends before that sleep could have."""
    folder = write_run(tmp_path / "run", 2, seed=7)
    monkeypatch.setattr(T, "read_rank", _slow_read)  # forked workers inherit it
    monkeypatch.setattr(T, "_pool_context", lambda: multiprocessing.get_context("fork"))

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        t0 = time.monotonic()
        with no_leaks(), pytest.raises(KeyboardInterrupt):
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            T.read_run(folder, workers=2)
        assert time.monotonic() - t0 < SLOW_READ_S
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_workers_must_be_positive() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="workers"):
            T.read_run(TRACES / "gloo_ddp_2ranks", workers=bad)
