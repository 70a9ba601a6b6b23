"""The ``distlab`` package's import graph: floors, no circles, counting every import.

Edges are *all* the imports a module makes of distlab modules: at module level and inside
functions and classes alike (a lazy import that closes a circle is still a circle, just one that
bites later), but not under ``if TYPE_CHECKING:``. ``from a.b import c`` is an edge to ``a.b.c``
when that is a module, else to ``a.b``. A module that imports its own package's ``__init__``
(``from distlab.collectives import X`` inside ``distlab.collectives``) gets that edge too: the
rule is to import the module that defines a name, never a package hub from inside the package.

Rules (docs/DESIGN.md):
- every top-level package or module of distlab sits on one floor of :data:`FLOORS`; no import
  goes to a higher floor, and the packages form no circle (labs may import each other, one way);
- inside :mod:`distlab.collectives`, the sub-packages have their own floors
  (:data:`COLLECTIVES_FLOORS`: plan -> algorithms -> check, model -> runtime);
- pure modules of :mod:`distlab.collectives` (everything but ``runtime/`` and the package hub)
  never import ``torch.distributed`` or the runtime;
- the timeline never imports its readers and writers (``distlab.trace``) or its figures
  (``distlab.viz``);
- the smallest core modules (``_checks``, ``fit``, ``links``, ``timeline``) import no other
  distlab package.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import distlab

ROOT = Path(distlab.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _all_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement anywhere in the module, except under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                walk(child)
            return
        for child in ast.iter_child_nodes(node):
            walk(child)

    walk(tree)
    return found


def _targets(node: ast.Import | ast.ImportFrom, package: str, mods: dict[str, Path]) -> list[str]:
    """Import targets as dotted names (distlab or not; ``torch.distributed`` stays as written)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        anchor = package.split(".")
        anchor = anchor[:len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]


def raw_imports() -> dict[str, set[str]]:
    """``module -> every dotted name it imports`` (distlab modules resolved, others as written)."""
    return {mod: set(names) for mod, names in _parsed_imports().items()}


@functools.cache
def _parsed_imports() -> dict[str, frozenset[str]]:
    """:func:`raw_imports`, parsed once per test process (the source does not change under a test
    run; every test parsing all of distlab again cost ~2.5 CPU-s each)."""
    mods = _modules()
    out: dict[str, frozenset[str]] = {}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        names: set[str] = set()
        for node in _all_imports(ast.parse(path.read_text(), str(path))):
            names.update(_targets(node, package, mods))
        out[mod] = frozenset(names)
    return out


def import_graph() -> dict[str, set[str]]:
    """``module -> distlab modules it imports`` (anywhere in the module)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, names in raw_imports().items():
        for t in names:
            while t and t not in mods:  # "import distlab.x.y" when y is an attribute
                t = t.rpartition(".")[0]
            if t and t != mod:
                graph[mod].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[tuple[str, ...]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(tuple(sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_graph_sees_module_level_and_function_level_imports(tmp_path) -> None:
    g = import_graph()
    assert "distlab._checks" in g["distlab.timeline"]
    assert "distlab.timeline" in g["distlab.trace.chrome"]
    assert len(g) > 40
    tree = ast.parse("import a\nif TYPE_CHECKING:\n    import b\n"
                     "def f():\n    import c\n    class K:\n        from d import e\n")
    names = sorted(n.names[0].name if isinstance(n, ast.Import) else n.module
                   for n in _all_imports(tree))
    assert names == ["a", "c", "d"]


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [("a", "b", "c")]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_in_distlab_counting_lazy_imports() -> None:
    found = cycles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def _plan_modules() -> list[str]:
    return [m for m in _modules() if m.startswith("distlab.collectives.")
            and not m.startswith("distlab.collectives.runtime")]


def test_collective_plans_never_import_the_runtime_or_torch_distributed() -> None:
    raw = raw_imports()
    plans = _plan_modules()
    assert "distlab.collectives.plan.schedule" in plans
    assert "distlab.collectives.algorithms.allreduce.ring" in plans
    bad = {m: sorted(n for n in raw[m] if n.startswith(("torch.distributed",
                                                        "distlab.collectives.runtime")))
           for m in plans}
    assert not {m: v for m, v in bad.items() if v}


def test_timeline_never_imports_its_readers_writers_or_figures() -> None:
    g = import_graph()
    assert not {t for t in g["distlab.timeline"] if t.startswith(("distlab.trace",
                                                                  "distlab.viz"))}


def test_core_modules_import_no_subpackage() -> None:
    g = import_graph()
    core = ("distlab._checks", "distlab.fit", "distlab.links", "distlab.timeline")
    allowed = set(core) | {"distlab"}
    assert {m: sorted(g[m] - allowed) for m in core} == {m: [] for m in core}


FLOORS: dict[str, int] = {
    **dict.fromkeys(("distlab", "_checks", "_lifetime",
                     "_forkserver_guard", "timeline", "fit", "links", "devices", "envinfo",
                     "launch", "launch_demos", "trace", "report", "cli", "clock", "nets", "uneven",
                     "scratch", "vocabulary", "transformer", "hf_config",
                     "recompute", "gpus", "collective_library", "logs"), 0),
    **dict.fromkeys(("samplers", "collectives", "loading", "transfers", "ddp", "zero",
                     "hogwild", "pipeline_parallel", "tensor_parallel", "moe", "nccl", "rccl"), 1),
    "bench": 2, "plan": 2, "profile": 3, "evidence": 3, "judge": 4, "health": 4, "viz": 5,
}
"""core -> labs -> bench -> profile, evidence -> judge -> viz: a unit imports only its floor or
lower."""

EVIDENCE_IMPORTERS = {"evidence", "profile", "judge", "health", "viz"}
"""The units that may import :mod:`distlab.evidence` (each model's published data, fits and
judgement): the models (core, labs, plan, bench) never do, whatever their floor."""

COLLECTIVES_FLOORS = {"plan": 0, "algorithms": 1, "check": 2, "model": 2, "runtime": 3}


def _unit(module: str, depth: int = 1) -> str:
    """``distlab.collectives.plan.schedule`` -> ``collectives`` (depth 1), ``plan`` (depth 2);
    the package root is ``distlab``."""
    parts = module.split(".")
    return parts[depth] if len(parts) > depth else parts[depth - 1]


def unit_edges(graph: dict[str, set[str]], depth: int = 1,
               inside: str = "distlab") -> dict[tuple[str, str], list[tuple[str, str]]]:
    """``(from unit, to unit) -> [(module, imported module), ...]`` for the modules under
    ``inside``, units being the package names at ``depth`` (1: distlab's top level)."""
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for mod, targets in graph.items():
        if not mod.startswith(inside + ".") or mod.count(".") < depth:
            continue
        for t in targets:
            if not t.startswith(inside + ".") or t.count(".") < depth:
                continue
            a, b = _unit(mod, depth), _unit(t, depth)
            if a != b:
                out.setdefault((a, b), []).append((mod, t))
    return out


def upward(edges: dict[tuple[str, str], list[tuple[str, str]]],
           floors: dict[str, int]) -> list[str]:
    """The edges that go to a higher floor, as readable lines."""
    return [f"{a} (floor {floors[a]}) -> {b} (floor {floors[b]}): {ms[0][0]} imports {ms[0][1]}"
            for (a, b), ms in sorted(edges.items()) if floors[a] < floors[b]]


def test_every_top_level_unit_has_a_floor() -> None:
    units = {_unit(m) for m in _modules()}
    assert units - set(FLOORS) == set(), "place new packages on a floor in FLOORS"
    assert set(FLOORS) - units == set(), "FLOORS names a unit that does not exist"


def _without_commands_evidence(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph less the edges from a command (a ``__main__``, which no module imports) to
    :mod:`distlab.evidence`: ``python -m distlab.nccl --judge`` prints the model's evidence
    (:func:`test_models_never_import_evidence` checks that only commands do)."""
    return {m: {t for t in ts if not (m.endswith(".__main__")
                                      and t.startswith("distlab.evidence"))}
            for m, ts in graph.items()}


def test_no_import_goes_up_a_floor_and_packages_form_no_circle() -> None:
    edges = unit_edges(_without_commands_evidence(import_graph()))
    assert upward(edges, FLOORS) == []
    units = {a for a, _ in edges} | {b for _, b in edges}
    packages = {u: {b for (a, b) in edges if a == u} for u in units}
    assert cycles(packages) == []


def test_collectives_sub_packages_keep_their_floors() -> None:
    edges = unit_edges(import_graph(), depth=2, inside="distlab.collectives")
    units = {_unit(m, 2) for m in _modules() if m.startswith("distlab.collectives.")}
    assert units == set(COLLECTIVES_FLOORS)
    assert upward(edges, COLLECTIVES_FLOORS) == []
    assert cycles({u: {b for (a, b) in edges if a == u} for u in units}) == []


def test_the_floor_checks_catch_an_upward_arrow_and_a_circle() -> None:
    graph = {"distlab.collectives.refit": {"distlab.bench.options"},
             "distlab.bench.options": {"distlab.collectives.plan"},
             "distlab.collectives.plan": set()}
    edges = unit_edges(graph)
    assert upward(edges, FLOORS) == [
        "collectives (floor 1) -> bench (floor 2): distlab.collectives.refit imports "
        "distlab.bench.options"]
    packages = {"collectives": {"bench"}, "bench": {"collectives"}}
    assert cycles(packages) == [("bench", "collectives")]


def test_the_package_docstring_names_every_public_unit() -> None:
    public = [u for u in FLOORS if u != "distlab" and not u.startswith("_")]
    missing = [u for u in public if f":mod:`distlab.{u}`" not in (distlab.__doc__ or "")]
    assert missing == []


def _is_command(module: str) -> bool:
    return module.endswith(".__main__")


def test_models_never_import_evidence() -> None:
    """Only :data:`EVIDENCE_IMPORTERS` import :mod:`distlab.evidence`; a model's command line
    (its ``__main__``, which no module imports) may, to print the model's judgement."""
    graph = import_graph()
    assert "distlab.evidence.plan.judged" in graph
    bad = sorted(f"{m} imports {t}" for m, ts in graph.items() for t in ts
                 if t.startswith("distlab.evidence") and _unit(m) not in EVIDENCE_IMPORTERS
                 and not _is_command(m))
    assert bad == []
    assert sorted(f"{m} imports {t}" for m, ts in graph.items() for t in ts
                  if _is_command(t)) == []
