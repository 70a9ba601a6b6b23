"""distlab.vocabulary: each shared name defined once, and what each one means.

The scanner reads every module of ``lib/distlab`` (AST, nothing imported) and reports:

- a ``def``, ``class`` or module-level assignment of one of :data:`VOCABULARY` anywhere but
  ``distlab/vocabulary.py`` (an import that re-exports a name is not a definition);
- a bus bandwidth factor written out, ``2 * (n - 1) / n`` (the ``2`` and ``(n - 1)`` anywhere in
  the product divided by ``n``, so ``bus * 2 * (n - 1) / n`` is found too). The all-gather
  factor ``(n - 1) / n`` is not looked for: the same ratio is a ring's share of data in many
  models that are not nccl-tests' bus bandwidth;
- a trace reader written outside :mod:`distlab.trace.kineto_file` (:func:`trace_readers`): a
  module that parses JSON (``json.load``/``json.loads``/``raw_decode``/``make_scanner``) and
  either decompresses gzip (``gzip.open``/``gzip.decompress``/``GzipFile``/``zlib.decompress``)
  or parses a file's text while naming ``"traceEvents"``. :data:`OWN_TRACE_READERS` are the
  readers of distlab's own Chrome traces (also the bare-array form Kineto never writes);
- a relative error written out (:func:`relative_errors`): ``(a - b) / b`` or ``(a - b) / a``
  (inside a product or ``abs``, so ``100 * (a - b) / b`` is found too) and ``a / b - 1``, where
  :func:`distlab.vocabulary.error_pct` or :func:`~distlab.vocabulary.bandwidth_error_pct` gives
  the one sign and scale. :data:`NOT_ERRORS` are the same shapes that mean something else;
- a bytes-per-second conversion written out (:func:`inline_bandwidths`): a quotient divided by
  ``1e9`` (``n / s / 1e9``, ``n / (us * 1e-6) / 1e9``), where
  :func:`distlab.vocabulary.gb_per_s` is the one;
- a collective-name map (:func:`collective_maps`): a dict literal with two or more keys that
  name collectives, one spelled otherwise than :data:`distlab.vocabulary.COLLECTIVES`
  (``"allreduce"``, ``"AllGather"``), where :func:`~distlab.vocabulary.collective_name` reads
  every spelling (one such key alone is a command's name, like ``bench allreduce``);
- a median or percentile of errors (:func:`error_statistics`): ``statistics.median``,
  ``np.median``, ``np.percentile`` (and their kin) of an expression naming an error (``errs``,
  ``r["error_pct"]``), where :class:`distlab.vocabulary.ErrorSummary` is the one;
- a size formatted by hand (:func:`size_formats`): an f-string dividing by a unit's bytes and
  writing the unit after it (``{n / 2**20:.0f} MiB``), where :func:`distlab.vocabulary.size_in`
  and :func:`~distlab.vocabulary.size_label` are the ones.
"""

from __future__ import annotations

import ast
import functools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import distlab
from distlab import vocabulary as V

ROOT = Path(distlab.__file__).resolve().parent

VOCABULARY = ("COLLECTIVES", "collective_name", "busbw_factor", "error_pct", "bandwidth_error_pct",
              "ErrorSummary", "size_label", "nccl_release", "NcclRelease", "gb_per_s",
              "dtype_bytes", "dtype_name", "_DTYPE_BYTES", "_DTYPE_ALIASES", "SIZE_UNITS",
              "size_in")
"""The names only :mod:`distlab.vocabulary` may define."""


def _product_factors(node: ast.expr) -> list[ast.expr]:
    """The factors of a chain of ``*`` (``a * 2 * (n - 1)`` -> ``[a, 2, n - 1]``)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _product_factors(node.left) + _product_factors(node.right)
    return [node]


def _is_busbw_factor(node: ast.AST) -> bool:
    """``... 2 ... * (x - 1) ... / x`` with the same ``x`` (a name or an attribute)."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
        return False
    x = ast.dump(node.right)
    factors = _product_factors(node.left)
    two = any(isinstance(f, ast.Constant) and f.value in (2, 2.0) for f in factors)
    minus_one = any(isinstance(f, ast.BinOp) and isinstance(f.op, ast.Sub)
                    and ast.dump(f.left) == x and isinstance(f.right, ast.Constant)
                    and f.right.value == 1 for f in factors)
    return two and minus_one


def _defined(tree: ast.Module) -> list[tuple[str, int]]:
    """``(name, line)`` of every def/class anywhere and every module-level assignment."""
    out = [(n.name, n.lineno) for n in ast.walk(tree)
           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    for stmt in tree.body:
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets = stmt.targets
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            targets = [stmt.target]
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    out.append((n.id, stmt.lineno))
    return out


def scan(root: Path, home: str = "vocabulary.py",
         names: tuple[str, ...] = VOCABULARY) -> list[str]:
    """Every second definition of ``names`` and every written-out bus bandwidth factor under
    ``root`` (a package folder), as ``path:line: what`` lines; ``home`` (relative to ``root``)
    is the one module allowed to define them."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), str(path))
        if rel != home:
            found += [f"{rel}:{line}: defines {name} (import it from distlab.vocabulary)"
                      for name, line in _defined(tree) if name in names]
        found += [f"{rel}:{n.lineno}: writes out a bus bandwidth factor 2 (n - 1) / n "
                  "(use distlab.vocabulary.busbw_factor)"
                  for n in ast.walk(tree) if _is_busbw_factor(n) and rel != home]
    return found


TRACE_READER = "trace/kineto_file.py"
"""The one reader of Kineto trace files (``.json``/``.json.gz``)."""
OWN_TRACE_READERS = {"trace/chrome.py": "read_chrome_trace: distlab's own Chrome traces",
                     "trace/check.py": "overlapping_slices: checks distlab's own Chrome traces"}
_JSON_PARSE = {"load", "loads", "raw_decode", "make_scanner"}
_GZIP_READ = {("gzip", "open"), ("gzip", "decompress"), ("gzip", "GzipFile"),
              ("zlib", "decompress"), ("zlib", "decompressobj")}
_FILE_READ = {"read_text", "read_bytes", "read", "open"}


def _calls(tree: ast.Module) -> list[tuple[str, str, ast.Call]]:
    """``(owner, attribute, call)`` of every ``owner.attribute(...)`` call (owner '' when it is
    not a plain name) and ``("", name, call)`` of every ``name(...)`` call."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Attribute):
                out.append((f.value.id if isinstance(f.value, ast.Name) else "", f.attr, n))
            elif isinstance(f, ast.Name):
                out.append(("", f.id, n))
    return out


def _reads_file(call: ast.Call) -> bool:
    """``json.load(f)``, or a parse of text read in the call (``Path(p).read_text()``...)."""
    if isinstance(call.func, ast.Attribute) and call.func.attr == "load":
        return True
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr in _FILE_READ for n in ast.walk(call.args[0]))


def trace_readers(root: Path, home: str = TRACE_READER,
                  allowed: tuple[str, ...] = tuple(OWN_TRACE_READERS)) -> list[str]:
    """Modules under ``root`` that read a trace file on their own (see the module docstring),
    as ``path:line: what`` lines (the line of the JSON parse)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == home or rel in allowed:
            continue
        tree = ast.parse(path.read_text(), str(path))
        calls = _calls(tree)
        parses = [c for owner, attr, c in calls if attr in _JSON_PARSE
                  and owner in ("json", "", "decoder", "scanner")]
        if not parses:
            continue
        gz = any((owner, attr) in _GZIP_READ for owner, attr, _ in calls)
        names_events = any(isinstance(n, ast.Constant) and n.value == "traceEvents"
                           for n in ast.walk(tree))
        reads_file = [c for c in parses if c.args and _reads_file(c)]
        if gz or (names_events and reads_file):
            line = (parses if gz else reads_file)[0].lineno
            found.append(f"{rel}:{line}: reads a trace file on its own (use "
                         "distlab.trace.kineto_file.read_kineto_events)")
    return found


NOT_ERRORS = {"samplers/torch_compat.py": "ceil((m - w) / w): torch's sampler arithmetic",
              "hogwild/findings.py": "lock_change: the lock's change of the step rate, no model"}
"""Modules whose ``(a - b) / b`` shapes are not a measurement against a model."""


def _factors_or_abs(node: ast.expr) -> list[ast.expr]:
    """:func:`_product_factors`, looking inside ``abs(...)`` too."""
    if _is_abs(node):
        return _factors_or_abs(node.args[0])
    return [g for f in _product_factors(node) for g in
            (_factors_or_abs(f) if _is_abs(f) else [f])]


def _is_abs(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
        and node.func.id == "abs" and len(node.args) == 1


def _is_relative_error(node: ast.AST) -> bool:
    """``(a - b) / b``, ``(a - b) / a`` (a, b not constants; in a product or ``abs``) or
    ``a / b - 1``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        below = ast.dump(node.right)
        return any(isinstance(f, ast.BinOp) and isinstance(f.op, ast.Sub)
                   and not isinstance(f.left, ast.Constant)
                   and not isinstance(f.right, ast.Constant)
                   and below in (ast.dump(f.left), ast.dump(f.right))
                   for f in _factors_or_abs(node.left))
    return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)
            and isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.Div)
            and isinstance(node.right, ast.Constant) and node.right.value in (1, 1.0))


@functools.cache
def _parsed(path: Path, mtime_ns: int) -> ast.Module:
    """A module's tree, parsed once per version of the file for all the rules."""
    return ast.parse(path.read_text(), str(path))


def _modules(root: Path, skip: tuple[str, ...]) -> list[tuple[str, ast.Module]]:
    """``(path relative to root, parsed module)`` of every module under ``root`` but ``skip``."""
    return [(rel, _parsed(path, path.stat().st_mtime_ns))
            for path in sorted(root.rglob("*.py"))
            if (rel := path.relative_to(root).as_posix()) not in skip]


def _findings(root: Path, rule: Any, what: Any, skip: tuple[str, ...]) -> list[str]:
    """``path:line: what(node)`` for every node under ``root`` (but ``skip``) ``rule`` flags."""
    return [f"{rel}:{n.lineno}: {what(n)}" for rel, tree in _modules(root, skip)
            for n in ast.walk(tree) if rule(n)]


def relative_errors(root: Path, home: str = "vocabulary.py",
                    allowed: tuple[str, ...] = tuple(NOT_ERRORS)) -> list[str]:
    """Every relative error written out under ``root`` but in ``home`` and ``allowed``, as
    ``path:line: what`` lines."""
    return _findings(root, _is_relative_error,
                     lambda n: f"writes out an error {ast.unparse(n)!r} (use "
                               "distlab.vocabulary.error_pct or bandwidth_error_pct)",
                     (home, *allowed))


def _is_inline_bandwidth(node: ast.AST) -> bool:
    """``(x / y) / 1e9``: bytes over seconds in GB/s."""
    return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
            and isinstance(node.right, ast.Constant) and node.right.value == 1e9
            and isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.Div))


def inline_bandwidths(root: Path, home: str = "vocabulary.py") -> list[str]:
    """Every GB/s written out under ``root`` but in ``home``, as ``path:line: what`` lines."""
    return _findings(root, _is_inline_bandwidth,
                     lambda n: f"writes out GB/s {ast.unparse(n)!r} (use "
                               "distlab.vocabulary.gb_per_s)", (home,))


def _spelling(node: ast.expr | None) -> str | None:
    """``"canonical"`` or ``"other"`` for a string constant that
    :func:`~distlab.vocabulary.collective_name` reads as a collective; None otherwise."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return None
    try:
        return "canonical" if V.collective_name(node.value) == node.value else "other"
    except (ValueError, TypeError):
        return None


def _is_collective_map(node: ast.AST) -> bool:
    if not isinstance(node, ast.Dict):
        return False
    kinds = [k for k in map(_spelling, node.keys) if k is not None]
    return len(kinds) >= 2 and "other" in kinds


def collective_maps(root: Path, home: str = "vocabulary.py") -> list[str]:
    """Every dict literal under ``root`` (but ``home``) keyed by another spelling of a
    collective, as ``path:line: what`` lines."""
    return _findings(root, _is_collective_map,
                     lambda n: "keys a dict by collective spellings (use "
                               "distlab.vocabulary.collective_name)", (home,))


_STATISTICS = {("statistics", "median"), ("statistics", "quantiles"), ("np", "median"),
               ("np", "nanmedian"), ("np", "percentile"), ("np", "nanpercentile"),
               ("np", "quantile"), ("numpy", "median"), ("numpy", "percentile")}


def _names_an_error(node: ast.AST) -> bool:
    return any((isinstance(n, ast.Name) and "err" in n.id.lower())
               or (isinstance(n, ast.Attribute) and "err" in n.attr.lower())
               or (isinstance(n, ast.Constant) and isinstance(n.value, str)
                   and "error" in n.value.lower()) for n in ast.walk(node))


def _is_error_statistic(node: ast.AST) -> bool:
    """A call of :data:`_STATISTICS` on an expression naming an error."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and (node.func.value.id, node.func.attr) in _STATISTICS
            and any(_names_an_error(a) for a in node.args))


def error_statistics(root: Path, home: str = "vocabulary.py") -> list[str]:
    """Every median or percentile of errors computed under ``root`` (but ``home``), as
    ``path:line: what`` lines."""
    return _findings(root, _is_error_statistic,
                     lambda n: f"{ast.unparse(n.func)} of errors (use "
                               "distlab.vocabulary.ErrorSummary)", (home,))


_UNIT_WORDS = ("KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB")


def _is_size_format(node: ast.AST) -> bool:
    """An f-string part ``{x / d...}`` followed by text starting with a size unit."""
    if not isinstance(node, ast.JoinedStr):
        return False
    parts = node.values
    return any(isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.BinOp)
               and isinstance(v.value.op, (ast.Div, ast.FloorDiv))
               and isinstance(nxt, ast.Constant) and isinstance(nxt.value, str)
               and nxt.value.lstrip().startswith(_UNIT_WORDS)
               and not nxt.value.lstrip().startswith(("GB/s", "MB/s", "KB/s"))
               for v, nxt in zip(parts, parts[1:], strict=False))


def size_formats(root: Path, home: str = "vocabulary.py") -> list[str]:
    """Every size formatted by hand under ``root`` (but ``home``), as ``path:line: what``."""
    return _findings(root, _is_size_format,
                     lambda n: "formats a size by hand (use distlab.vocabulary.size_in or "
                               "size_label)", (home,))


# --- the scanner -----------------------------------------------------------------------------

def test_lib_defines_each_vocabulary_name_once() -> None:
    assert scan(ROOT) == []
    assert set(VOCABULARY) <= {n for n, _ in _defined(ast.parse((ROOT / "vocabulary.py")
                                                                .read_text()))}


def test_the_scanner_finds_a_planted_second_definition(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "vocabulary.py").write_text("def busbw_factor(c, n):\n    return 2 * (n - 1) / n\n")
    (pkg / "ok.py").write_text("from pkg.vocabulary import busbw_factor\n"
                               "share = (n - 1) / n\nratio = n / (2 * (n - 1))\n")
    assert scan(pkg) == []
    (pkg / "sub" / "twice.py").write_text(
        "import numpy as np\n"
        "def busbw_factor(collective, n):\n    return 1.0\n"
        "COLLECTIVES = ('allreduce',)\n"
        "class ErrorSummary:\n    pass\n"
        "def f(bus, world):\n    return bus * 2 * (world - 1) / world\n"
        "def g(self):\n    def size_label(b):\n        return str(b)\n"
        "    return self.x * 2.0 * (self.n - 1) / self.n\n")
    found = scan(pkg)
    assert sorted(f.split(": ")[0] for f in found) == [
        "sub/twice.py:10", "sub/twice.py:12", "sub/twice.py:2", "sub/twice.py:4",
        "sub/twice.py:5", "sub/twice.py:8"], found
    assert sum("bus bandwidth factor" in f for f in found) == 2


def test_lib_computes_every_error_through_the_vocabulary() -> None:
    assert relative_errors(ROOT) == []


def test_the_scanner_finds_a_planted_error(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "ok.py").write_text("share = (n - 1) / n\nspeed = b / a\nd = (a - b) / c\n")
    assert relative_errors(pkg) == []
    (pkg / "errors.py").write_text(
        "e1 = (sim - wall) / wall\n"
        "e2 = 100 * (r.gbps - r.model_gbps) / r.model_gbps\n"
        "e3 = abs(model - measured) / measured\n"
        "e4 = measured / model - 1\n"
        "e5 = (a - b) / a\n")
    found = relative_errors(pkg)
    assert [f.split(": ")[0] for f in found] == [f"errors.py:{i}" for i in range(1, 6)], found


def test_lib_converts_bytes_per_second_in_one_place() -> None:
    assert inline_bandwidths(ROOT) == []


def test_the_scanner_finds_a_planted_bandwidth(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "ok.py").write_text("params = n / 1e9\nbw = gb_per_s(n, s)\n")
    assert inline_bandwidths(pkg) == []
    (pkg / "bw.py").write_text("a = n / s / 1e9\nb = n / (us * 1e-6) / 1e9 * f\n")
    assert [f.split(": ")[0] for f in inline_bandwidths(pkg)] == ["bw.py:1", "bw.py:2"]


def test_gb_per_s_is_decimal_and_refuses_no_time() -> None:
    assert V.gb_per_s(2e9, 1.0) == 2.0 and V.gb_per_s(1, 1e-9) == pytest.approx(1.0)
    assert np.allclose(V.gb_per_s(np.array([1e9, 4e9]), np.array([1.0, 2.0])), [1.0, 2.0])
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="seconds must be > 0"):
            V.gb_per_s(1e9, bad)


def test_lib_maps_collective_names_in_one_place() -> None:
    assert collective_maps(ROOT) == []


def test_the_scanner_finds_a_planted_collective_map(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "ok.py").write_text("C = {'all_reduce': 1, 'all_gather': 2, 'ring': 3}\n"
                               "COMMANDS = {'allreduce': 'bench.allreduce', 'trace': 'x'}\n")
    assert collective_maps(pkg) == []
    (pkg / "names.py").write_text("N = {'allreduce': 'all_reduce', 'allgather': 'all_gather'}\n"
                                  "M = {'AllGather': 1, 'reduce_scatter': 2}\n")
    assert [f.split(": ")[0] for f in collective_maps(pkg)] == ["names.py:1", "names.py:2"]


def test_lib_summarizes_errors_in_one_place() -> None:
    assert error_statistics(ROOT) == []


def test_the_scanner_finds_a_planted_error_median(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "ok.py").write_text("import statistics\nt = statistics.median(times)\n"
                               "s = ErrorSummary.of(errs).median\n")
    assert error_statistics(pkg) == []
    (pkg / "stats.py").write_text(
        "import statistics\nimport numpy as np\n"
        "a = statistics.median(abs(e) for e in errs)\n"
        "b = np.percentile([r['error_pct'] for r in rows], 90)\n"
        "c = np.median(run.model_err)\n")
    assert [f.split(": ")[0] for f in error_statistics(pkg)] == ["stats.py:3", "stats.py:4",
                                                                  "stats.py:5"]


def test_lib_formats_sizes_in_one_place() -> None:
    assert size_formats(ROOT) == []


def test_the_scanner_finds_a_planted_size_format(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "ok.py").write_text("a = f'{size_in(n, \"MiB\")} each'\nb = f'{n / s / 1e9:.1f} GB/s'\n"
                               "c = f'{n / 2:.0f} ranks'\n")
    assert size_formats(pkg) == []
    (pkg / "sizes.py").write_text("a = f'{n / 2**20:.0f} MiB'\nb = f'({n // 1024} KiB)'\n"
                                  "c = f'{n / 1e3:.1f} KB mean'\n")
    assert [f.split(": ")[0] for f in size_formats(pkg)] == ["sizes.py:1", "sizes.py:2",
                                                             "sizes.py:3"]


def test_size_in_writes_a_fixed_unit() -> None:
    assert V.size_in(3 << 29, "GiB") == "1.5 GiB" and V.size_in(52_300, "KB", ".0f") == "52 KB"
    assert V.size_in(1 << 20, "MiB", ".0f") == "1 MiB" == V.size_label(1 << 20)
    with pytest.raises(ValueError, match="unit must be one of"):
        V.size_in(1, "mb")


def test_lib_reads_kineto_traces_in_one_place() -> None:
    assert trace_readers(ROOT) == []
    assert (ROOT / TRACE_READER).exists() and all((ROOT / p).exists() for p in OWN_TRACE_READERS)


def test_the_scanner_finds_a_planted_trace_reader(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "trace").mkdir(parents=True)
    (pkg / "trace" / "kineto_file.py").write_text(
        "import gzip, json\ndef read(p):\n    return json.loads(gzip.decompress(p))\n")
    (pkg / "ok.py").write_text("import json\nevents = 'traceEvents'\n"
                               "def parse(line):\n    return json.loads(line.strip())\n")
    assert trace_readers(pkg) == []
    (pkg / "gz.py").write_text("import gzip\nimport json\n\ndef read(p):\n"
                               "    with gzip.open(p) as f:\n        return json.load(f)\n")
    (pkg / "plain.py").write_text("import json\nfrom pathlib import Path\n\ndef read(p):\n"
                                  "    return json.loads(Path(p).read_text())['traceEvents']\n")
    (pkg / "fileobj.py").write_text("import json\n\ndef read(p):\n    with open(p) as f:\n"
                                    "        return json.load(f).get('traceEvents')\n")
    found = trace_readers(pkg)
    assert sorted(f.split(": ")[0] for f in found) == ["fileobj.py:5", "gz.py:6", "plain.py:5"]


# --- collective names and bus bandwidth -------------------------------------------------------

def test_collective_names_are_torch_distributed_s() -> None:
    import torch.distributed as dist

    assert len(set(V.COLLECTIVES)) == len(V.COLLECTIVES) == 9
    assert all(hasattr(dist, c) for c in V.COLLECTIVES)


@pytest.mark.parametrize(("spelled", "canonical"), [
    ("all_reduce", "all_reduce"), ("allreduce", "all_reduce"), ("AllReduce", "all_reduce"),
    ("all-reduce", "all_reduce"), ("ALL_REDUCE", "all_reduce"), ("allgather", "all_gather"),
    ("_allgather_base", "all_gather"), ("reducescatter", "reduce_scatter"),
    ("_reduce_scatter_base", "reduce_scatter"), ("alltoall", "all_to_all"),
    ("all_to_allv", "all_to_all"), ("bcast", "broadcast"), (" barrier ", "barrier")])
def test_collective_name_accepts_the_usual_spellings(spelled: str, canonical: str) -> None:
    assert V.collective_name(spelled) == canonical


def test_collective_name_refuses_others_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown collective 'sendrecv'.*all_reduce.*barrier"):
        V.collective_name("sendrecv")
    with pytest.raises(TypeError, match="collective must be a string"):
        V.collective_name(3)  # type: ignore[arg-type]


def test_busbw_factors_are_nccl_tests() -> None:
    assert V.busbw_factor("all_reduce", 4) == V.busbw_factor("allreduce", 4) == 1.5
    for op in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        assert V.busbw_factor(op, 4) == 0.75
    assert V.busbw_factor("broadcast", 8) == V.busbw_factor("reduce", 8) == 1.0
    assert V.busbw_factor("barrier", 8) is None
    assert V.busbw_factor("all_reduce", 1) == 0.0
    with pytest.raises(ValueError, match="world_size"):
        V.busbw_factor("all_reduce", 0)


@given(st.sampled_from(V.COLLECTIVES), st.integers(1, 4096))
def test_busbw_factor_is_at_most_two_and_grows_with_the_ranks(collective: str, n: int) -> None:
    f = V.busbw_factor(collective, n)
    if collective == "barrier":
        assert f is None
        return
    g = V.busbw_factor(collective, n + 1)
    assert f is not None and g is not None
    assert 0.0 <= f <= g <= 2.0
    assert math.isclose(f, 2 * (n - 1) / n) if collective == "all_reduce" else True


# --- the error sign ---------------------------------------------------------------------------

def test_error_pct_is_measured_against_the_model() -> None:
    assert V.error_pct(120.0, 100.0) == pytest.approx(20.0)     # slower than the model: +
    assert V.error_pct(80.0, 100.0) == pytest.approx(-20.0)     # faster: -
    assert V.error_pct(5, 5) == 0.0
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="model must be > 0"):
            V.error_pct(1.0, bad)
    with pytest.raises(ValueError, match="measured must be finite"):
        V.error_pct(math.nan, 1.0)
    with pytest.raises(TypeError, match="model must be a number"):
        V.error_pct(1.0, None)  # type: ignore[arg-type]


@given(st.floats(1e-6, 1e6), st.floats(1e-6, 1e6), st.floats(1, 1e12))
def test_bandwidth_error_is_the_error_of_the_times(measured_gbps: float, model_gbps: float,
                                                   nbytes: float) -> None:
    by_time = V.error_pct(nbytes / measured_gbps, nbytes / model_gbps)
    assert V.bandwidth_error_pct(measured_gbps, model_gbps) == pytest.approx(by_time, rel=1e-9,
                                                                             abs=1e-9)
    assert (by_time > 0) == (measured_gbps < model_gbps) or math.isclose(measured_gbps,
                                                                          model_gbps)


@given(st.floats(0, 1e9), st.floats(1e-9, 1e9))
def test_error_pct_sign_says_slower_or_faster(measured: float, model: float) -> None:
    e = V.error_pct(measured, model)
    assert e >= -100.0 - 1e-9
    assert (e > 0) == (measured > model) or abs(e) < 1e-9
    assert measured == pytest.approx(model * (1 + e / 100), rel=1e-9, abs=1e-9 * model)


# --- the error summary ------------------------------------------------------------------------

def test_error_summary_of_signed_errors() -> None:
    s = V.ErrorSummary.of([10.0, -20.0, 30.0, None, -40.0, math.nan], label="t")
    assert (s.n, s.median, s.max, s.label) == (4, 25.0, 40.0, "t")
    assert s.p90 == pytest.approx(37.0)
    assert s.errors == (10.0, 20.0, 30.0, 40.0)
    assert s.within(20) == 2 and s.within(100) == 4
    assert s.meets(25.0, 40.0) and not s.meets(20.0, 40.0)
    empty = V.ErrorSummary.of([])
    assert empty.n == 0 and math.isnan(empty.median) and not empty.meets(100.0, 100.0)
    assert empty.within(20) == 0


@given(st.lists(st.one_of(st.none(), st.floats(-1e6, 1e6)), max_size=60))
def test_error_summary_matches_numpy(errors: list[float | None]) -> None:
    s = V.ErrorSummary.of(errors)
    kept = np.abs([e for e in errors if e is not None])
    assert s.n == kept.size
    if kept.size:
        assert s.median == pytest.approx(float(np.median(kept)))
        assert s.p90 == pytest.approx(float(np.percentile(kept, 90)))
        assert s.max == float(kept.max())
        assert 0 <= s.median <= s.p90 <= s.max
        assert s.within(s.max) == s.n


# --- sizes ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("nbytes", "binary", "compact"), [
    (0, "0 B", "0B"), (1, "1 B", "1B"), (1023, "1023 B", "1023B"), (1024, "1 KiB", "1K"),
    (1536, "1536 B", "1536B"), (3 << 20, "3 MiB", "3M"), (1 << 30, "1 GiB", "1G"),
    (3 << 29, "1536 MiB", "1536M"), (16 << 30, "16 GiB", "16G")])
def test_size_label_in_both_styles(nbytes: int, binary: str, compact: str) -> None:
    assert V.size_label(nbytes) == V.size_label(nbytes, "binary") == binary
    assert V.size_label(nbytes, "compact") == compact


def test_size_label_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="style must be one of binary, compact"):
        V.size_label(1, "short")
    with pytest.raises(ValueError, match="nbytes"):
        V.size_label(-1)


@given(st.integers(0, 1 << 50), st.sampled_from(V.SIZE_STYLES))
def test_size_label_reads_back_exactly(nbytes: int, style: str) -> None:
    label = V.size_label(nbytes, style)
    number = int("".join(ch for ch in label if ch.isdigit()))
    unit = label.rstrip("B").strip().lstrip("0123456789").strip()[:1]
    assert number * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[unit] == nbytes


# --- NCCL releases ----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "release"), [
    ("2.29.7", (2, 29, 7)), ("v2.21.5-1", (2, 21, 5)), ("NCCL 2.18", (2, 18, None)),
    ("nccl 2.18.5", (2, 18, 5)), ("2.26.2+cuda12.8", (2, 26, 2)), (" 2.30 ", (2, 30, None)),
    ("3.0.1", (3, 0, 1))])
def test_nccl_release_reads_the_usual_forms(text: str, release: tuple) -> None:
    r = V.nccl_release(text)
    assert tuple(r) == release and r.key == release[:2]
    assert str(r) == ".".join(str(x) for x in release if x is not None)


@pytest.mark.parametrize("text", ["", "2", "two.26", "2.26.x", "v2.26.2-", "NCCL", "2.26 beta"])
def test_nccl_release_refuses_others(text: str) -> None:
    with pytest.raises(ValueError, match="not an NCCL release"):
        V.nccl_release(text)


@given(st.integers(0, 99), st.integers(0, 99), st.one_of(st.none(), st.integers(0, 99)),
       st.sampled_from(["", "v", "NCCL ", "nccl-"]), st.sampled_from(["", "-1", "+cuda12.8"]))
def test_nccl_release_round_trips(major: int, minor: int, patch: int | None, prefix: str,
                                  suffix: str) -> None:
    text = f"{major}.{minor}" + ("" if patch is None else f".{patch}")
    r = V.nccl_release(prefix + text + suffix)
    assert r == (major, minor, patch) and str(r) == text


def test_versions_builds_on_the_one_parser() -> None:
    from distlab.nccl.versions import release_key

    assert release_key("NCCL 2.26.2") == V.nccl_release("2.26.2").key == (2, 26)
    with pytest.raises(ValueError, match=r"nccl_version must be a release like .*2\.30"):
        release_key("latest")


@pytest.mark.parametrize(("spelled", "nbytes"), [
    ("Float", 4), ("float32", 4), ("torch.bfloat16", 2), ("BFloat16", 2), ("c10::Half", 2),
    ("Long", 8), ("float8_e4m3fn", 1), ("complex64", None), (None, None)])
def test_dtype_bytes_reads_torch_and_kineto_spellings(spelled, nbytes) -> None:
    assert V.dtype_bytes(spelled) == nbytes
    if spelled is not None and nbytes is not None:
        import torch
        torch_name = spelled.lower().removeprefix("torch.").removeprefix("c10::")
        dtype = getattr(torch, {"half": "float16", "long": "int64", "float": "float32"}.get(
            torch_name, torch_name))
        assert torch.empty(0, dtype=dtype).element_size() == nbytes   # torch agrees


@pytest.mark.parametrize(("spelled", "name"), [
    ("bf16", "bfloat16"), ("torch.bfloat16", "bfloat16"), ("BFloat16", "bfloat16"),
    ("bfloat16", "bfloat16"), (" FP16 ", "float16"), ("c10::Half", "float16"),
    ("float", "float32"), ("Long", "int64"), ("int8", "int8")])
def test_dtype_name_resolves_torch_names_and_aliases(spelled, name) -> None:
    import torch

    assert V.dtype_name(spelled) == name
    assert V.dtype_name(getattr(torch, name)) == name          # the torch.dtype itself
    assert str(getattr(torch, name)) == f"torch.{name}"         # torch spells it so
    assert V.dtype_bytes(spelled) == torch.empty(0, dtype=getattr(torch, name)).element_size()


def test_dtype_name_takes_torch_aliases_and_numpy_dtypes() -> None:
    import torch

    assert V.dtype_name(torch.half) == "float16" and V.dtype_name(torch.long) == "int64"
    assert V.dtype_name(np.dtype("float32")) == "float32"


@pytest.mark.parametrize("bad", ["bfloat", "fp8", "complex64", ""])
def test_dtype_name_refuses_what_it_does_not_know(bad) -> None:
    with pytest.raises(ValueError, match=r"dtype must be one of float32, float64, .* got"):
        V.dtype_name(bad)


def test_dtype_name_refuses_other_types() -> None:
    with pytest.raises(TypeError, match="my_dtype must be a dtype name"):
        V.dtype_name(2, "my_dtype")
