"""Loader, summary and notebook-07 figures on a small hand-made profile folder (no ranks)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from matplotlib.lines import Line2D

from distlab.profile.load import Profile, list_profiles, load_profile, published
from distlab.profile.parts import PartResult
from distlab.profile.writer import write_profile
from distlab.timeline import Timeline
from distlab.viz import profile as vp
from helpers.paths import ROOT


def _facts() -> dict:
    return {"cpu_model": "Test CPU", "cpu_cores": 2, "memory_bytes": 2**30, "python": "3.11",
            "torch": "2.x", "cuda_runtime": None, "nccl": None, "driver": None, "gpus": [],
            "gpu_topology": None, "pcie_links": [{"gpu": 0, "gen": 4, "width": 16,
                                                  "source": "nvidia-smi"}],
            "backends": {}, "notes": ["no GPU: test"]}


def _rows() -> list[dict]:
    out = []
    for algo, pred in (("builtin", None), ("ring", 90.0)):
        for n in (65536, 1048576):
            out.append({"nbytes": n, "count": n // 4, "dtype": "float32", "op": "sum",
                        "algorithm": algo, "time_us": 100.0, "algbw_gbps": n / 1e-4 / 1e9,
                        "busbw_gbps": n / 1e-4 / 1e9, "wrong": 0, "predicted_us": pred,
                        "error_pct": None if pred is None else 100 * (100 - pred) / pred})
    return out


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    tl = Timeline()
    tl.record("env", "profile", "profile/parts", 0.0, 5.0)
    results = [PartResult("env", payload={"facts": _facts()},
                          skipped=[{"what": "env/gpu", "why": "no GPU: test"}]),
               PartResult("collectives", payload={"runs": [{"backend": "gloo", "world_size": 2,
                                                            "rows": _rows()}]})]
    out = tmp_path / "profiles" / "box-2026-01-01-quick"
    write_profile(out, results, ["env", "collectives", "ddp"], tl, quick=True, world_size=1,
                  stopped="interrupted by Ctrl-C")
    return out


def test_write_then_load_round_trip_marks_incomplete(folder: Path) -> None:
    assert list_profiles(folder.parent) == [folder]
    p = load_profile(folder)
    assert not p.complete and p.index["parts"]["ddp"]["status"] == "not run"
    assert p.part("collectives")["runs"][0]["rows"][0]["algorithm"] == "builtin"
    assert p.part("ddp") is None
    text = (folder / "summary.md").read_text()
    assert "INCOMPLETE (interrupted by Ctrl-C)" in text and "- env/gpu: no GPU: test" in text
    assert "gloo ws2 busbw (GB/s) at 1048576 B: builtin" in text


def test_load_rejects_a_folder_without_index(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a profile folder"):
        load_profile(tmp_path)
    assert list_profiles(tmp_path / "missing") == []


def test_tables(folder: Path) -> None:
    p = load_profile(folder)
    env = vp.env_lines(p)
    assert env[0].startswith("profile       box-2026-01-01-quick (INCOMPLETE)")
    assert any("Gen4 x16" in line for line in env)
    table = vp.error_table(p)
    assert len(table) == 4 and "+11.1" in table[1] and "median |error| 11.1%" in table[-1]
    assert vp.ddp_lines(p) == ["ddp: not in this profile"]
    assert vp.link_peak_gbps(p)[0] == "PCIe Gen4 x16"


def test_figures_keep_published_points_apart(folder: Path) -> None:
    p = load_profile(folder)
    fig = vp.collectives_figure(p)
    labels = [ln.get_label() for ln in fig.axes[0].lines]
    assert "ours: ring" in labels and "ours: builtin" in labels
    pub = [lab for lab in labels if lab.startswith("published:")]
    assert len(pub) == len({(q["system"], q["world_size"]) for q in published()["allreduce"]})
    assert len(fig.axes[1].lines) == 2          # zero line + ring's error
    tfig = vp.transfers_figure(p)
    assert any(ln.get_label().startswith("link peak PCIe Gen4") for ln in tfig.axes[0].lines)
    ours = {ln.get_label(): ln for ln in fig.axes[0].lines}
    for algo in ("builtin", "ring"):            # x: sizes, y: the profile's busbw
        assert _xy(ours[f"ours: {algo}"]) == _curve(p, algo)


def _xy(line: Line2D) -> list[tuple[float, float]]:
    """The (x, y) points a matplotlib line draws."""
    return [(float(x), float(y)) for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)]


def _curve(p: Profile, algo: str) -> list[tuple[float, float]]:
    """(size, busbw) of one algorithm in the profile's first collectives run, by size."""
    rows = p.part("collectives")["runs"][0]["rows"]
    return sorted((float(r["nbytes"]), float(r["busbw_gbps"])) for r in rows
                  if r["algorithm"] == algo)


def test_compare_figure_draws_both_profiles_curves(folder: Path) -> None:
    """Each profile's builtin and ring busbw, labelled with its name, solid for the first and
    dashed for the second; no transfers part: nothing on the right."""
    a = load_profile(folder)
    b = copy.deepcopy(a)
    b.path = folder.parent / "other-box"
    for r in b.parts["collectives"]["runs"][0]["rows"]:
        r["busbw_gbps"] *= 3 if r["algorithm"] == "ring" else 2
    left, right = vp.compare_figure(a, b).axes
    got = [(ln.get_label(), ln.get_linestyle(), _xy(ln)) for ln in left.lines]
    assert got == [(f"{prof.name}: gloo ws2 {algo}", ls, _curve(prof, algo))
                   for prof, ls in ((a, "-"), (b, "--")) for algo in ("builtin", "ring")]
    assert _curve(a, "ring") != _curve(b, "ring")
    assert list(right.lines) == []


def _ddp_rows() -> list[dict]:
    return [{"variant": "torch", "bucket_cap_mb": 25.0, "step_s": 0.040, "exposed_s": 0.010,
             "overlap_fraction": 0.5},
            {"variant": "local", "bucket_cap_mb": None, "step_s": 0.030, "exposed_s": None,
             "overlap_fraction": None}]


def test_ddp_figure_shows_the_profiles_ddp_rows(folder: Path) -> None:
    """Per row a step bar and an exposed-communication bar (ms), grouped by cap (a row without
    a cap: its own group, named by its variant), the overlap above the rows that have one; the
    definition of the overlap is in the title; without a ddp part the axes say so."""
    p = load_profile(folder)
    empty = vp.ddp_figure(p).axes[0]
    assert list(empty.patches) == [] and [t.get_text() for t in empty.texts] == [
        "ddp: not in this profile (not run)"]
    p.parts["ddp"] = {"status": "ok", "rows": _ddp_rows()}
    ax = vp.ddp_figure(p).axes[0]
    heights = [round(bar.get_height(), 9) for bar in ax.patches]
    assert heights == [40.0, 10.0, 30.0, 0.0, 0.0]   # step, exposed per row; the legend's key
    assert [t.get_text() for t in ax.get_xticklabels()] == ["cap 25 MB", "local"]
    assert [(t.get_text(), t.get_position()[0]) for t in ax.texts] == [("0.50", 0.0)]
    assert "overlap = 1 - exposed / exposed(no-overlap, same cap)" in ax.get_title()


def test_published_points_carry_source_and_quote() -> None:
    ref = published()
    assert ref["allreduce"] and ref["transfers"]
    for p in ref["allreduce"] + ref["transfers"]:
        assert p["source"].startswith("https://github.com/NVIDIA/") and p["quote"]
    for p in ref["allreduce"]:   # the quoted line holds the numbers stored
        assert str(p["nbytes"]) in p["quote"] and f"{p['busbw_gbps']:.2f}" in p["quote"]
    assert json.dumps(ref)


def _output_text(choice: vp.ProfileChoice) -> str:
    return "".join(o.get("text", "") for o in choice.out.outputs)


def test_choice_starts_at_the_given_profile_and_every_reader_follows_it(
        folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The dropdown starts at the profile it is given (not the first folder), says why; a pick
    changes ``profile`` and what ``use()`` prints and returns, and says the cells below must run
    again; a folder that is not a profile changes nothing."""
    import shutil

    root = tmp_path / "root"
    shutil.copytree(folder, root / "a-first")
    shutil.copytree(folder, root / "b-chosen")
    chosen = load_profile(root / "b-chosen")
    choice = vp.ProfileChoice(root, chosen, "b-chosen: the reason")
    assert choice.dropdown.value == str(root / "b-chosen")
    assert [o for o, _ in choice.dropdown.options] == ["a-first", "b-chosen"]
    assert _output_text(choice).startswith("reading b-chosen: the reason\n")
    assert choice.use() is chosen and capsys.readouterr().out == "profile: b-chosen\n"
    choice.dropdown.value = str(root / "a-first")
    assert choice.profile.name == "a-first"
    assert choice.use().name == "a-first" and capsys.readouterr().out == "profile: a-first\n"
    assert _output_text(choice).startswith("reading a-first (CPU): picked here\n")
    assert vp.RERUN_HINT in _output_text(choice)
    choice.text.value = str(tmp_path / "nowhere")                  # typed, then Enter
    assert "is not a profile folder" in _output_text(choice)
    assert "still reading a-first" in _output_text(choice) and choice.profile.name == "a-first"


def test_choice_of_a_folder_outside_root_is_listed(folder: Path, tmp_path: Path) -> None:
    choice = vp.ProfileChoice(tmp_path / "empty", load_profile(folder), "given")
    assert choice.dropdown.options == ((folder.name, str(folder)),)
    assert choice.profile.path == folder


def test_gpus_figure_draws_the_committed_rehearsal_and_refuses_a_profile_without_gpus() -> None:
    from distlab.viz.gpus import gpus_figure

    root = ROOT / "results" / "profiles"
    rehearsal = load_profile(root / "rehearsal-dgx_h100_like-2026-11-25")
    fig = gpus_figure(rehearsal)
    cells = [t.get_text() for t in fig.axes[0].texts]
    assert len(cells) == 8 * 7 and all(c.endswith("NV18") for c in cells)   # every ordered pair
    assert "REHEARSAL" in fig._suptitle.get_text()
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert any(lab.startswith("local h2d") for lab in labels)
    assert any(lab.startswith("remote d2h") for lab in labels)
    with pytest.raises(ValueError, match="no measured gpus part"):
        gpus_figure(load_profile(root / "vm-2026-11-23"))
