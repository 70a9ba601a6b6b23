"""What notebook 07's cells say about a profile that lacks parts (written after Ctrl-C)."""

from __future__ import annotations

from pathlib import Path

import pytest

from distlab.profile.load import load_profile
from distlab.viz import profile as vp
from helpers.incomplete_profile import STOPPED, incomplete_profile
from helpers.paths import PROFILES


@pytest.fixture
def cut(tmp_path: Path):
    return load_profile(incomplete_profile(tmp_path / "cut"))


def test_lacks_names_the_part_its_status_and_why(cut) -> None:
    assert vp.lacks(cut, "env") is None and vp.lacks(cut, "transfers") is None
    assert vp.lacks(cut, "collectives") == f"cut has no collectives part (interrupted: {STOPPED})"
    assert vp.lacks(cut, "ddp") == f"cut has no ddp part (not run: {STOPPED})"
    assert vp.lacks(cut, vp.TRACE) == "cut has no trace.json"
    assert vp.lacks(cut, "gpus") == "cut has no gpus part (not requested)"


def test_has_prints_one_line_and_goes_on(cut, capsys) -> None:
    assert vp.has(cut, "transfers") and capsys.readouterr().out == ""
    assert not vp.has(cut, "collectives")
    assert capsys.readouterr().out == (f"cut has no collectives part (interrupted: {STOPPED}): "
                                       "nothing to show here\n")


def test_missing_lines_list_every_gap_of_an_incomplete_profile(cut) -> None:
    lines = vp.missing_lines(cut)
    assert lines[0].startswith(f"cut is INCOMPLETE ({STOPPED})")
    assert [line.split(" has no ")[1].split(" (")[0] for line in lines[1:]] == [
        "collectives part", "ddp part", "trace.json"]
    assert vp.missing_lines(load_profile(PROFILES / "vm-2026-11-23")) == []


def test_a_file_the_index_names_and_the_folder_lacks(tmp_path: Path) -> None:
    folder = incomplete_profile(tmp_path / "cut")
    (folder / "transfers.json").unlink()
    assert vp.lacks(load_profile(folder), "transfers") == (
        f"cut has no transfers part (transfers.json missing from the folder: {STOPPED})")


def test_figures_and_tables_of_an_incomplete_profile_say_what_is_missing(cut) -> None:
    assert vp.error_table(cut) == ["collectives: not in this profile"]
    assert vp.error_summary(cut) is None
    assert vp.ddp_lines(cut) == ["ddp: not in this profile"]
    assert vp.ddp_figure(cut).axes[0].texts[0].get_text().startswith("ddp: not in this profile")
    assert vp.transfers_figure(cut).axes[0].get_lines()
    assert vp.compare_figure(cut, load_profile(PROFILES / "vm-2026-11-23")).axes[0].get_lines()


def test_the_picker_lists_what_a_picked_profile_lacks(cut) -> None:
    choice = vp.ProfileChoice(PROFILES, load_profile(PROFILES / "vm-2026-11-23"), "test")
    choice.pick(cut.path)
    said = "".join(o["text"] for o in choice.out.outputs)
    assert "cut is INCOMPLETE" in said and "no collectives part (interrupted" in said


def test_lacks_checks_its_arguments(cut) -> None:
    with pytest.raises(TypeError, match="what"):
        vp.lacks(cut, 3)
