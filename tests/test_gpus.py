"""The one GPU registry (:mod:`distlab.gpus`): names and aliases, each entry held by its
collective library's model, and no second definition of a GPU anywhere in the package."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import distlab
from distlab.gpus import (
    GPUS,
    LIBRARIES,
    STAND_IN_BOX,
    Gpu,
    gpu,
    gpu_aliases,
    gpus_of_library,
    user_gpu,
)
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
    ("rtx3090", "RTX-3090"), ("RTX-3090", "RTX-3090"), ("rtx4090", "RTX-4090"),
    ("rtx5090", "RTX-5090"), ("v100", "V100-32GB-SXM2"), ("V100-32GB", "V100-32GB-SXM2"),
    ("a800", "A800-80GB-SXM"), ("h800", "H800-80GB-SXM"), ("h20", "H20-96GB"),
    ("l40s", "L40S"), ("L4", "L4"), ("gh200", "GH200-96GB"), ("b300", "B300"),
])
def test_names_and_aliases_resolve_in_any_case(name: str, expected: str) -> None:
    assert gpu(name).name == expected
    assert gpu(gpu(name)) is gpu(name)


@pytest.mark.parametrize("bad", ["p100", "", "mi300", "h2", 7])
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
    peak is the one ``peak()`` gives, and every peak is a positive rate; every GPU says where
    its figures come from (an address), one no published run calibrates that its rate is
    assumed, one priced in another GPU's box that the box is a stand-in."""
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
    assert g.memory_bytes > 2**30 and "https://" in g.source
    if not g.calibrated:
        assert "https://" in g.source and "assumed" in g.source
    if g.box_stand_in:
        assert g.box and "stand-in" in g.source
    with pytest.raises(ValueError, match="dtype must be one of"):
        g.peak("int4")


NEW_NVIDIA = ("RTX-3090", "RTX-4090", "RTX-5090", "V100-32GB-SXM2", "A800-80GB-SXM",
              "H800-80GB-SXM", "H20-96GB", "L40S", "L4", "GH200-96GB", "B300")
"""The GPUs users train on beyond the calibrated ones: each names the address of its figures."""


@pytest.mark.parametrize("name", NEW_NVIDIA)
def test_each_gpu_users_train_on_names_its_source(name: str) -> None:
    g = GPUS[name]
    assert "https://" in g.source and g.memory_bytes_per_s > 0 and g.architecture
    assert g.library == "nccl" and g.name in GPU_KINDS


@pytest.mark.parametrize(("device", "name"), [
    ("NVIDIA GeForce RTX 3090", "RTX-3090"), ("NVIDIA GeForce RTX 3090 Ti", None),
    ("NVIDIA GeForce RTX 4090", "RTX-4090"), ("NVIDIA GeForce RTX 4090 D", None),
    ("NVIDIA GeForce RTX 5090", "RTX-5090"), ("Tesla V100-SXM2-32GB", "V100-32GB-SXM2"),
    ("Tesla V100-PCIE-32GB", None), ("NVIDIA A800-SXM4-80GB", "A800-80GB-SXM"),
    ("NVIDIA H800", "H800-80GB-SXM"), ("NVIDIA H20", "H20-96GB"), ("NVIDIA H200", "H200-141GB-SXM"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA L4", "L4"), ("NVIDIA GH200 480GB", "GH200-96GB"),
    ("NVIDIA B300 SXM6 AC", "B300"), ("NVIDIA B200", "B200"),
])
def test_device_names_match_one_entry(device: str, name: str | None) -> None:
    from distlab.plan.kernels import gpu_kind_for_device

    kind = gpu_kind_for_device(device)
    assert (kind.name if kind else None) == name


def test_a_reduced_nvlink_gpu_has_its_own_box() -> None:
    """A800 and H800 have 8 NVLinks (400 GB/s both ways), not A100's 12 or H100's 18."""
    from distlab.nccl.boxes import GPU_BOXES

    assert GPU_BOXES[GPUS["A800-80GB-SXM"].box].nvlinks == 8
    assert GPU_BOXES[GPUS["H800-80GB-SXM"].box].nvlinks == 8
    assert GPU_BOXES["a100_sxm8"].nvlinks == 12 and GPU_BOXES["h100_sxm8"].nvlinks == 18


def test_the_rtx3090_peak_is_the_fp32_accumulate_one() -> None:
    """Training accumulates in FP32: GeForce's rate for it is half the FP16-accumulate one."""
    assert gpu("rtx3090").peak() == 71e12 and "142 with FP16 accumulate" in gpu("rtx3090").source
    # both figures are the whitepaper's, rounded to 0.1 TFLOPS: twice one is off by <= 0.1,
    # the other by <= 0.05
    assert gpu("rtx4090").peak("fp8") == pytest.approx(2 * gpu("rtx4090").peak(), abs=0.15e12)
    with pytest.raises(ValueError, match="dtype must be one of bf16 for RTX-3090"):
        gpu("rtx3090").peak("fp8")


@pytest.mark.parametrize("spec", [
    "name=my3090,memory_gib=24,bf16_tflops=71,bandwidth_gbs=936",
    "name=my3090 memory_gib=24 bf16_tflops=71 bandwidth_gbs=936",
    {"name": "my3090", "memory_gib": 24, "bf16_tflops": 71, "bandwidth_gbs": 936},
])
def test_a_users_own_gpu_from_its_figures(spec: object) -> None:
    g = user_gpu(spec)  # type: ignore[arg-type]
    assert (g.name, g.memory_bytes, g.peak(), g.memory_bytes_per_s) == \
        ("my3090", 24 * 2**30, 71e12, 936e9)
    assert not g.calibrated and g.box == STAND_IN_BOX and g.box_stand_in
    assert g.architecture == "unknown" and "not checked against a data sheet" in g.source


def test_a_users_own_gpu_from_a_json_file(tmp_path: Path) -> None:
    path = tmp_path / "gpu.json"
    path.write_text('{"name": "mine", "memory_gib": 23.5, "bf16_tflops": 71, '
                    '"bandwidth_gbs": 936, "fp8_tflops": 142, "architecture": "ampere", '
                    '"box": "a100_pcie8"}')
    g = user_gpu(str(path))
    assert g.memory_bytes == int(23.5 * 2**30) and g.peak("fp8") == 142e12
    assert (g.architecture, g.box, g.box_stand_in) == ("ampere", "a100_pcie8", False)


@pytest.mark.parametrize(("spec", "message"), [
    ("memory_gib=24,bf16_tflops=71", "gpu-spec: bandwidth_gbs missing"),
    ("memory_gib=24,bf16_tflops=71,bandwidth_gbs=936,memory=3",
     "gpu-spec: unknown key 'memory'; the keys are name, memory_gib"),
    ("memory_gib=0,bf16_tflops=71,bandwidth_gbs=936", "gpu-spec: memory_gib='0' must be a number"),
    ("memory_gib=24,bf16_tflops=fast,bandwidth_gbs=936", "bf16_tflops='fast' must be a number"),
    ("memory_gib=24,bf16_tflops=inf,bandwidth_gbs=936", "bf16_tflops='inf' must be a number"),
    ({"memory_gib": True, "bf16_tflops": 71, "bandwidth_gbs": 936}, "memory_gib=True must be"),
    ("memory_gib=24,bf16_tflops=71,bandwidth_gbs=936,architecture=turing",
     "architecture='turing' must be one of ada, ampere, blackwell, hopper, volta"),
    ("memory_gib=24,memory_gib=20", "memory_gib given twice"),
    ("memory_gib=24,bf16_tflops", "'bf16_tflops' is not KEY=VALUE"),
    ("", "gpu-spec must be KEY=VALUE"),
    ("/no/such/gpu.json", "not a readable JSON file"),
])
def test_a_bad_gpu_spec_names_the_bad_key(spec: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        user_gpu(spec)  # type: ignore[arg-type]


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
