"""distlab.scratch: the notebooks' scratch folders are gone when their process ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from distlab.scratch import scratch_dir


def test_folder_is_removed_with_its_files_when_the_process_exits() -> None:
    code = ("from distlab.scratch import scratch_dir\n"
            "d = scratch_dir('distlab_test_')\n"
            "(d / 'sub').mkdir(); (d / 'sub' / 'f.bin').write_bytes(b'x' * 10)\n"
            "print(d)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    path = Path(out.stdout.strip())
    assert path.name.startswith("distlab_test_")
    assert not path.exists()


def test_folder_exists_and_is_empty_while_the_process_runs() -> None:
    d = scratch_dir("distlab_test_")
    assert d.is_dir() and not any(d.iterdir())


@pytest.mark.parametrize("prefix", ["a/b", 3, "..\\x"])
def test_prefix_with_a_path_or_not_a_string_is_refused(prefix: object) -> None:
    with pytest.raises(ValueError, match="prefix"):
        scratch_dir(prefix)  # type: ignore[arg-type]
