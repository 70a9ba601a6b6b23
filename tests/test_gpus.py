"""The one GPU registry (:mod:`distlab.gpus`): names and aliases, each entry held by its
collective library's model, and no second definition of a GPU anywhere in the package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import distlab
from distlab.gpus import GPUS, LIBRARIES, Gpu, gpu, gpu_aliases, gpus_of_library
from distlab.plan.layout import GPU_KINDS, gpu_kind
from distlab.plan.libraries import COLLECTIVE_LIBRARIES, library_of

PACKAGE = Path(distlab.__file__).parent

CONSTRUCTS_A_GPU = {"judge/trace_model.py"}
"""Modules allowed to build a :class:`~distlab.gpus.Gpu`: the trace judge makes one for a GPU a
trace names and the registry does not (only its box is read, for a transfer's link)."""


@pytest.mark.parametrize(("name", "expected"), [
    ("h100", "H100-80GB-SXM"), ("H100", "H100-80GB-SXM"), ("a100", "A100-80GB-SXM"),
    ("a100-40gb", "A100-40GB-SXM"), ("mi300x", "MI300X"), ("MI355x", "MI355X"),
    ("B200", "B200"), ("H100-96GB-HBM2e", "H100-96GB-HBM2e"),
])
def test_names_and_aliases_resolve_in_any_case(name: str, expected: str) -> None:
    assert gpu(name).name == expected
    assert gpu(gpu(name)) is gpu(name)


@pytest.mark.parametrize("bad", ["v100", "", "mi300", 7])
def test_an_unknown_gpu_names_every_gpu_held(bad: object) -> None:
    with pytest.raises(ValueError, match="gpu must be one of A100-40GB-SXM.*MI355X.*got"):
        gpu(bad)  # type: ignore[arg-type]


def test_every_library_the_registry_names_has_a_model() -> None:
    assert set(COLLECTIVE_LIBRARIES) == set(LIBRARIES)
    assert {lib.name for lib in COLLECTIVE_LIBRARIES.values()} == set(LIBRARIES)


def test_aliases_name_one_gpu_each() -> None:
    every = [a for g in GPUS.values() for a in g.aliases]
    assert len(every) == len(set(every)) == len(gpu_aliases())
    assert all(a == a.lower() for a in every)


@pytest.mark.parametrize("g", list(GPUS.values()), ids=list(GPUS))
def test_each_gpu_is_held_by_its_library(g: Gpu) -> None:
    """The box and default network of a GPU are ones its library's model holds; its 16-bit
    peak is the one ``peak()`` gives, and every peak is a positive rate; a GPU no published
    run calibrates says where its figures come from (a vendor address)."""
    assert g.library in LIBRARIES and g in gpus_of_library(g.library)
    lib = COLLECTIVE_LIBRARIES[g.library]
    if g.box:
        assert lib.gpus_per_node(g.box) == 8
        assert g.name in GPU_KINDS and gpu_kind(g.name) is g and library_of(g) is lib
    else:
        assert g.name not in GPU_KINDS
    if g.default_network is not None:
        assert g.default_network in lib.networks()
    assert g.peak("bf16") == g.peak_flops > 0
    assert all(v > 0 for v in g.peak_flops_by_dtype.values())
    assert g.memory_bytes > 2**30 and g.source
    if not g.calibrated:
        assert "https://www.amd.com/" in g.source and "assumed" in g.source
    with pytest.raises(ValueError, match="dtype must be one of"):
        g.peak("int4")


def test_rccl_reads_its_gpus_from_the_registry() -> None:
    from distlab.rccl.boxes import AMD_BOXES
    from distlab.rccl.tables import GPU_ARCHS

    assert GPU_ARCHS == {g.product: g.architecture for g in gpus_of_library("rccl")}
    assert {(b.key, b.gpu, b.arch) for b in AMD_BOXES} == {
        (g.box, g.product, g.architecture) for g in gpus_of_library("rccl") if g.box}


def _gpu_definitions(source: str, names: set[str]) -> list[str]:
    """Where ``source`` names a GPU of ``names`` in code (a string that is not a docstring)
    or builds a ``Gpu`` / ``GpuKind`` itself: each as ``"line: what"``."""
    tree = ast.parse(source)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs \
                and n.value in names:
            found.append(f"{n.lineno}: {n.value!r}")
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) \
                and n.func.id in ("Gpu", "GpuKind"):
            found.append(f"{n.lineno}: {n.func.id}(...)")
    return found


PLANTED = '''
"""A module that names MI300X in its docstring only may."""
PEAKS = {"MI300X": 1.3e15}
KIND = GpuKind("mine", 1, 1.0, "h100_sxm8", "made up")
'''


def test_the_check_catches_a_planted_second_definition() -> None:
    names = set(GPUS) | {g.product for g in GPUS.values() if g.product}
    assert sorted(_gpu_definitions(PLANTED, names)) == ["3: 'MI300X'", "4: GpuKind(...)"]


def test_the_registry_is_the_only_place_a_gpu_is_defined() -> None:
    names = set(GPUS) | {g.product for g in GPUS.values() if g.product}
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "gpus.py":
            continue
        hits = _gpu_definitions(path.read_text(), names)
        if rel in CONSTRUCTS_A_GPU:
            hits = [h for h in hits if not h.endswith("(...)")]
        if hits:
            found[rel] = hits
    assert found == {}
