"""The NCCL model's one per-size pipeline (``per_size.run_size``), its typed pieces, the box
resolved once at the public boundary, and the published tables read from the package that owns
them."""

from __future__ import annotations

import ast
import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from distlab.evidence.nccl import fit_execution
from distlab.evidence.nccl.published import published_tables
from distlab.nccl import (
    boxes,
    execution,
    family,
    multinode,
    per_size,
    tuning,
    versions,
)
from distlab.nccl.boxes import GPU_BOXES, GpuBox, gpu_box
from distlab.nccl.per_size import (
    HARNESSES,
    NCCL_STEPS,
    Channels,
    ExecutionConstants,
    HostTerm,
    Pick,
    RunTerms,
    execution_of,
    pick_of,
    run_size,
)
from distlab.profile.load import published
from helpers.paths import ROOT

NCCL_DIR = Path(per_size.__file__).parent
C = ExecutionConstants(2.0, 3.0, 0.5, 7.0)


@dataclass(frozen=True)
class _Fixed:
    """A layout with set answers, to see what run_size does with them."""

    launched: int = 4
    total: int = 8
    chunk: int = 1024
    nsteps: int = 20
    ring_us: float = 99.0

    def channels(self, pick: Pick) -> Channels:
        return Channels(self.launched, self.total, 256)

    def chunk_bytes(self, pick: Pick, launched: int) -> int:
        assert launched == self.launched
        return self.chunk

    def steps(self, pick: Pick, launched: int, chunk: int) -> int:
        assert (launched, chunk) == (self.launched, self.chunk)
        return self.nsteps

    def ring_latency_us(self, pick: Pick, steps: int, transfer_us: float) -> float:
        assert steps == self.nsteps and transfer_us == pytest.approx(2e3)
        return self.ring_us


@pytest.mark.parametrize("algorithm", ["ring", "tree", "nvls"])
def test_run_size_composes_the_terms(algorithm: str) -> None:
    pick = Pick(1_000_000, algorithm, "Simple", latency_us=11.0, algbw_gbps=1.0, estimate_us=5.0)
    e = run_size(pick, _Fixed(), 8, HostTerm(3.5, serial=False), C)
    # transfer: nbytes at the pick's bandwidth, over the channels launched of the total
    assert e.transfer_us == 1_000_000 / 1e3 * 8 / 4
    assert e.latency_us == (99.0 if algorithm == "ring" else 11.0)   # the layout's, for a ring
    assert e.sync_us == NCCL_STEPS * C.step_us(algorithm, "Simple")    # the first 8 steps
    assert (e.channels, e.channels_total, e.threads, e.chunk_bytes, e.steps) == (4, 8, 256, 1024,
                                                                                20)
    assert (e.host_us, e.serial, e.estimate_us, e.world_size) == (3.5, False, 5.0, 8)
    assert e.seconds == max(3.5, e.gpu_us) * 1e-6


def test_execution_of_takes_one_terms_object() -> None:
    pick = Pick(64, "ring", "LL", 1.0, 2.0, 3.0)
    terms = RunTerms(pick, 2, Channels(1, 2, 64), 32, 3, 4.0, 5.0)
    e = execution_of(terms, HostTerm(25.0, serial=True), C)
    assert (e.algorithm, e.protocol, e.nbytes, e.sync_us) == ("ring", "LL", 64, 3 * C.ll_step_us)
    assert e.seconds == (25.0 + 4.0 + 5.0 + 1.5) * 1e-6     # a harness that waits: they add
    with pytest.raises(AttributeError):
        terms.steps = 4  # type: ignore[misc]   # frozen


def test_pick_of_is_the_chosen_candidate() -> None:
    ch = tuning.nccl_allreduce("h100_sxm8", 8, [1 << 30])[0]
    p = pick_of(ch)
    cand = next(c for c in ch.candidates if (c.algorithm, c.protocol) == (p.algorithm,
                                                                            p.protocol))
    assert (p.latency_us, p.algbw_gbps, p.estimate_us) == (cand.latency_us, cand.algbw_gbps,
                                                           ch.seconds * 1e6)
    assert pick_of(ch, 123.0).algbw_gbps == 123.0


@pytest.mark.parametrize("harness", sorted(HARNESSES))
def test_the_host_term_is_the_harness_host_time(harness: str) -> None:
    how = HARNESSES[harness]
    for key in ("h100_sxm8", "gb200_nvl72"):
        box = GPU_BOXES[key]
        t = how.term(C, box.gpus, box)
        assert t == HostTerm(how.host_us(C, box.gpus, box), how.waits_each_call)
        assert how.host_us(C, box.gpus, key) == t.host_us     # the public method takes a name


def test_public_functions_take_a_name_or_a_gpu_box() -> None:
    box = GPU_BOXES["b200_sxm8"]
    sizes = [1 << 12, 1 << 26]
    assert execution.nccl_execution(box, 8, sizes) == execution.nccl_execution("b200_sxm8", 8,
                                                                               sizes)
    assert family.nccl_collective(box, 8, sizes, "broadcast") == family.nccl_collective(
        "b200_sxm8", 8, sizes, "broadcast")
    assert tuning.tuning_table(box, 4) == tuning.tuning_table("b200_sxm8", 4)
    assert multinode.multinode_choices(box, 16, sizes, 2, "ib_ndr400x8") == \
        multinode.multinode_choices("b200_sxm8", 16, sizes, 2, "ib_ndr400x8")
    with pytest.raises(TypeError, match="GpuBox"):
        gpu_box(8)  # type: ignore[arg-type]


@pytest.mark.parametrize("where", [{}, {"nodes": 2, "network": "ib_ndr400x8"}])
def test_the_box_is_resolved_once_per_call(monkeypatch, where) -> None:
    calls: list[object] = []
    real = boxes.gpu_box

    def counting(box: object) -> GpuBox:
        calls.append(box)
        return real(box)  # type: ignore[arg-type]

    for module in (boxes, tuning, execution, family, multinode, per_size):
        if hasattr(module, "gpu_box"):
            monkeypatch.setattr(module, "gpu_box", counting)
    n = 8 * where.get("nodes", 1)
    execution.nccl_execution("h100_sxm8", n, [1 << k for k in range(10, 34)], **where)
    assert calls == ["h100_sxm8"]
    calls.clear()
    family.nccl_collective("h100_sxm8", 8, [1 << 20, 1 << 30], "all_gather")
    assert calls == ["h100_sxm8"]


def test_internals_take_a_gpu_box() -> None:
    box = GPU_BOXES["h100_sxm8"]
    version = versions.nccl_constants(None)
    inside = execution.one_node_execution(box, 8, [1 << 20], HARNESSES["torch"],
                                          per_size.shipped_constants(), tuning.ALGORITHMS,
                                          tuning.PROTOCOLS, version)
    assert inside == execution.nccl_execution("h100_sxm8", 8, [1 << 20])
    assert per_size.nvls_channels(box) == 16


def _assigned(module: Path) -> set[str]:
    tree = ast.parse(module.read_text())
    return {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(t, ast.Name)}


def test_nccl_constants_are_defined_once() -> None:
    for name in ("MAX_CHANNELS", "NVLS_CHUNK_BYTES", "NCCL_STEPS", "BUFFER_BYTES", "HARNESSES"):
        where = [p.name for p in sorted(NCCL_DIR.glob("*.py")) if name in _assigned(p)]
        assert where == ["per_size.py"], (name, where)
    assert multinode.MAX_CHANNELS is per_size.MAX_CHANNELS


def test_no_private_name_is_imported_from_another_nccl_module() -> None:
    users = [*NCCL_DIR.glob("*.py"), *(ROOT / "lib" / "distlab").glob("*/nccl*.py"),
             *(ROOT / "lib" / "distlab" / "evidence" / "nccl").glob("*.py")]
    for path in users:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("distlab"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"


def test_published_tables_are_the_models_and_the_profile_reads_them_there() -> None:
    tables = published_tables()
    assert {"allreduce_8gpu", "allreduce_multinode", "collectives_8gpu",
            "nccl_choice_8gpu"} <= set(tables)
    assert fit_execution.calibration_points() == tables["allreduce_8gpu"]
    merged = published()
    assert {k: merged[k] for k in tables} == tables
    assert merged["allreduce"] and merged["transfers"]     # the profile's own
    profile_file = json.loads((ROOT / "lib/distlab/profile/published.json").read_text())
    assert not set(profile_file) & set(tables), "one owner per table"
    assert "parents[" not in Path(fit_execution.__file__).read_text()


def test_package_data_ships_the_models_files() -> None:
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["distlab"]
    lib = ROOT / "lib" / "distlab"
    for path in [*NCCL_DIR.rglob("*.json"), *(lib / "evidence").rglob("*.json"),
                 lib / "profile" / "published.json"]:
        rel = path.relative_to(lib).as_posix()
        assert any(fnmatch.fnmatch(rel, g) and rel.count("/") == g.count("/") for g in globs), rel


def test_write_shipped_writes_where_it_is_told_and_never_into_the_package(tmp_path) -> None:
    shipped = NCCL_DIR / "execution_calibration.json"
    before = shipped.read_bytes()
    with pytest.raises(TypeError):
        fit_execution.write_shipped()  # type: ignore[call-arg]   # a path is required
    target = tmp_path / "refit.json"
    c = fit_execution.write_shipped(target)
    assert shipped.read_bytes() == before
    body = json.loads(target.read_text())
    assert body["constants"] == {k: getattr(c, k) for k in per_size.CONSTANT_NAMES}
    assert json.loads(before)["about"] == body["about"]   # the same layout as the shipped file


def test_the_command_writes_the_refit_where_asked(tmp_path, monkeypatch, capsys) -> None:
    from distlab.judge.__main__ import main as judge_main

    # leave-one-source-out refits each source: not what this test is about
    monkeypatch.setattr(fit_execution, "leave_one_source_out",
                        lambda pts: fit_execution.judge(pts, per_size.shipped_constants()))
    target = tmp_path / "c.json"
    assert judge_main(["nccl", "--published", "--write", str(target)]) == 0
    assert f"(refitted, written to {target})" in capsys.readouterr().out.splitlines()[0]
    assert set(json.loads(target.read_text())["constants"]) == set(per_size.CONSTANT_NAMES)
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    assert judge_main(["nccl", "--published", "--write"]) == 0
    assert "written to execution_calibration.json" in capsys.readouterr().out
    assert (tmp_path / "here" / "execution_calibration.json").is_file()
