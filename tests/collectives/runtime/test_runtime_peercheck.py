"""Ranks that call one allreduce with different arguments get a clear error, not a hang."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import distlab.collectives
from distlab import launch
from distlab.collectives.runtime.peercheck import (
    FIELDS,
    MESSAGE_BYTES,
    check_mode,
    decode,
    describe,
    encode,
    fingerprint,
    mismatch_message,
)
from helpers.collectives_targets import mismatch_worker

CASES = {
    "algorithm": "algorithm: ranks 0 use ring; ranks 1 use tree",
    "op": "op: ranks 0 use sum; ranks 1 use max",
    "count": "count: ranks 0 use 4096; ranks 1 use 4097",
    "dtype": "dtype: ranks 0 use float32; ranks 1 use float64",
    "options": "options: ranks 0 use {pieces=1, segment_size=128}; ranks 1 use {pieces=1, "
               "segment_size=64}",
    "pieces": "options: ranks 0 use {pieces=1}; ranks 1 use {pieces=2}",
    "all_gather": "algorithm: ranks 0 use ring; ranks 1 use bruck",
    "root": "options: ranks 0 use {root=0}; ranks 1 use {root=1}",
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("check", ["inline", "gather"])
def test_mismatch_raises_on_every_rank_naming_ranks_and_field(check: str) -> None:
    """Every case in one group, one after another: each mismatch raises on both ranks before
    the 20 s wait timeout could have, and the matching call after it gets the right answer
    (nothing of the failed call leaked into it)."""
    cases = [*CASES, "none"]
    out = launch.run(mismatch_worker, 2, args=(cases, check), timeout=200)
    for i, case in enumerate(cases):
        for rank in (0, 1):
            got = out[rank][i]
            assert got["after"] == 3.0, (case, rank, got)
            if case == "none":
                assert got["error"] == "" and got["value"] == 2.0, got
                continue
            assert got["error"].startswith("CollectiveMismatchError"), (case, got)
            assert CASES[case] in got["error"], got["error"]
            called = {"all_gather": "all_gather", "root": "broadcast"}.get(case, "all_reduce")
            assert f"called {called} with different arguments" in got["error"]
            # before the 20 s wait timeout could have fired (a timeout never fires early): the
            # peer check raised it; a correct run misses this bound only if starved for 20 s
            assert got["seconds"] < 20.0


def test_fingerprint_separates_every_field() -> None:
    base = describe("ring", {}, 2, 10, "torch.float32", "sum", collective="broadcast")
    changed = [{**base, name: base[name] + "x"} for name in FIELDS]
    fps = [fingerprint(d) for d in changed]
    for i, fp in enumerate(fps):
        diff = [k for k, (a, b) in enumerate(zip(fp, fingerprint(base), strict=True)) if a != b]
        assert diff == [i]
    msg = mismatch_message([base, changed[1], base], 2)
    assert "ranks 0,2 use ring; ranks 1 use ringx" in msg and "rank 2" in msg
    assert "called broadcast with different arguments" in msg
    for d in [base, *changed]:  # the inline check's message decodes to what was encoded
        assert decode(encode(d)) == d and len(encode(d)) == MESSAGE_BYTES
    long = {**base, "options": "{" + "x" * 2000 + "}"}
    assert len(encode(long)) == MESSAGE_BYTES and decode(encode(long))["options"].startswith("#")
    assert encode(long) != encode({**long, "options": long["options"] + "y"})
    assert check_mode(True) == "inline" and check_mode(False) == "off"
    with pytest.raises(ValueError, match=r"check must be True, False or one of \['inline'"):
        check_mode("sometimes")


def _imports(path: Path, package: str) -> set[str]:
    """Modules of ``package`` that ``path`` imports anywhere (top level or inside functions)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                base = node.module or ""
                names = [base] if base else [a.name for a in node.names]
                out.update(f"{package}.{n}" for n in names)
            elif node.module and node.module.startswith(package + "."):
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith(package + "."))
    return out


def find_cycles(folder: Path, package: str) -> list[list[str]]:
    mods = {f"{package}.{p.stem}": p for p in folder.glob("*.py") if p.stem != "__init__"}
    graph = {m: {d for d in _imports(p, package) if d in mods and d != m}
             for m, p in mods.items()}
    cycles, state = [], {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return cycles


def test_no_import_cycle_in_collectives(tmp_path: Path) -> None:
    folder = Path(distlab.collectives.__file__).parent
    assert find_cycles(folder, "distlab.collectives") == []
    # the detector itself finds a cycle when there is one
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import y\n")
    assert find_cycles(tmp_path, "pkg") == [["pkg.a", "pkg.b", "pkg.a"]]
